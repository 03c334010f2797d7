//! The library's log: `tracing` events on standard error, filtered by `MLX5SIM_LOG` (`RUST_LOG`
//! syntax, default `warn`), written with the C library's `write` so that logging never
//! re-enters the emulation.

use std::io;

/// Standard error through [`crate::sys::write_all`].
struct Stderr;

impl io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        crate::sys::write_all(2, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Install the log (once; later calls do nothing).
pub fn init(filter: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let f = EnvFilter::try_new(filter.unwrap_or("warn")).unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(f)
        .with_writer(|| Stderr)
        .with_target(false)
        .try_init();
}
