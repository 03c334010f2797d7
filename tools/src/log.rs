//! The log every tool and example shows: a `tracing` subscriber that prints events on standard
//! error (standard output stays the report), filtered by `RUST_LOG` when it is set
//! (`RUST_LOG=mlx5=info`, `RUST_LOG=mlx5_hw::transition=info,mlx5_connect=debug`: the
//! `tracing-subscriber` `EnvFilter` syntax), else by the verbosity a tool's `-v` counts.
//!
//! Among what it shows: one INFO event per QP state transition (target
//! `mlx5_hw::transition`, `mlx5_hw::transition::apply`), with the old and new state, the QPN,
//! the destination QPN, the send and receive PSNs and the path (MTU, DLID, DGID), and the
//! connection summaries of `mlx5_connect`.

use tracing_subscriber::{fmt, EnvFilter};

/// The filter for a verbosity without `RUST_LOG`: 0 warnings and errors (but `mlx5_connect`
/// only errors: it warns of every ordinary goodbye of a peer), 1 (`-v`) warnings and INFO
/// of this project's crates (every QP transition) but the software ConnectX's, 2 DEBUG, 3 or
/// more TRACE.
pub fn default_filter(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "warn,mlx5_connect=error",
        // The software ConnectX logs its own side of every modify at INFO too (`mlx5_sim`):
        // one line per transition is the library's (`mlx5_hw::transition`).
        1 => "warn,mlx5=info,mlx5_sim=warn",
        2 => "warn,mlx5=debug",
        _ => "warn,mlx5=trace",
    }
}

/// Install the subscriber for this process: `RUST_LOG` when set (and valid), else
/// [`default_filter`]`(verbosity)`. Events go to standard error, one line each. A second call
/// (or a subscriber installed before) leaves the first in place. A `RUST_LOG` the filter cannot
/// parse is reported on standard error and the default is used instead.
pub fn init(verbosity: u8) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => match EnvFilter::try_new(&v) {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "RUST_LOG={v:?} is not a valid filter ({e}); using {:?}",
                    default_filter(verbosity)
                );
                EnvFilter::new(default_filter(verbosity))
            }
        },
        _ => EnvFilter::new(default_filter(verbosity)),
    };
    let _ = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_filters_parse() {
        for v in 0..5 {
            assert!(EnvFilter::try_new(default_filter(v)).is_ok(), "{v}");
        }
        assert!(default_filter(1).contains("mlx5=info"));
    }
}
