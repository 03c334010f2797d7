//! What a run may ask for, and the checks that say so before anything is created: message
//! sizes, iteration counts and buffers capped by what the tools support and what memory this
//! machine has, and output files opened before the run starts (a bad path is reported at once,
//! not after a long run).

use crate::{Error, Result};
use std::fs::File;
use std::path::Path;

/// The largest message size, 1 GiB: below the 2 GiB an InfiniBand message may carry (IBTA
/// Vol. 1 §9.4.1: a message is at most 2^31 bytes), and what one registered buffer of these
/// tools holds.
pub const MAX_SIZE: u64 = 1 << 30;

/// The largest iteration count, perftest's (`perftest_parameters.h` `MAX_ITER`, 2^32).
pub const MAX_ITERS: u64 = 1 << 32;

/// Bytes a latency run keeps per iteration with `-n` (one `u64` sample, nanoseconds).
pub const SAMPLE_BYTES: u64 = 8;

/// The memory this machine has for a run: `MemAvailable` of `/proc/meminfo` (Linux
/// `Documentation/filesystems/proc.rst`), or 1 GiB when it cannot be read.
pub fn available_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(1 << 30, |kib| kib.saturating_mul(1024))
}

/// How a byte count reads in a message: `1.5 GiB`, `300.0 MiB`, `12 KiB`.
pub fn human(bytes: u64) -> String {
    const K: u64 = 1 << 10;
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= K => format!("{} KiB", b / K),
        b => format!("{b} bytes"),
    }
}

/// Refuse a size outside 1..=[`MAX_SIZE`] (`flag` names it: `-s`).
pub fn check_size(flag: &str, size: u64) -> Result<()> {
    if size == 0 || size > MAX_SIZE {
        return Err(Error::Usage(format!(
            "{flag} {size}: the message size must be between 1 and {MAX_SIZE} bytes (1 GiB)"
        )));
    }
    Ok(())
}

/// Refuse an iteration count outside 1..=`max`; `why` says where the cap comes from.
pub fn check_iters(flag: &str, iters: u64, max: u64, why: &str) -> Result<()> {
    if iters == 0 {
        return Err(Error::Usage(format!("{flag} 0: at least 1 iteration")));
    }
    if iters > max {
        return Err(Error::Usage(format!(
            "{flag} {iters}: at most {max} iterations ({why})"
        )));
    }
    Ok(())
}

/// The most iterations a latency run of `-n` keeps samples for: [`MAX_ITERS`], or what half of
/// the available memory holds at [`SAMPLE_BYTES`] each, whichever is smaller; and why.
pub fn max_lat_iters() -> (u64, String) {
    let avail = available_memory();
    let by_memory = avail / 2 / SAMPLE_BYTES;
    if by_memory < MAX_ITERS {
        (
            by_memory.max(1),
            format!(
                "lat keeps one {SAMPLE_BYTES}-byte sample per iteration, as perftest does, and \
                 this machine has {} available; -D runs for a time with bounded memory instead",
                human(avail)
            ),
        )
    } else {
        (MAX_ITERS, "perftest's limit, MAX_ITER".into())
    }
}

/// Refuse buffers of `bytes` in all (`what` says what they are) when they would take more than
/// the memory available.
pub fn check_memory(what: &str, bytes: u64) -> Result<()> {
    let avail = available_memory();
    if bytes > avail {
        return Err(Error::Usage(format!(
            "{what} need {}, and this machine has {} available: use a smaller -s",
            human(bytes),
            human(avail)
        )));
    }
    Ok(())
}

/// Create (truncate) the output file `path` now, so that an unwritable path stops the run
/// before it starts; `flag` names the option in the error.
pub fn create_output(flag: &str, path: &Path) -> Result<File> {
    File::create(path).map_err(|e| {
        Error::Usage(format!(
            "{flag} {}: cannot write this file: {e}",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_messages() {
        assert!(check_size("-s", 1).is_ok() && check_size("-s", MAX_SIZE).is_ok());
        let e = check_size("-s", MAX_SIZE + 1).unwrap_err();
        assert!(e.to_string().contains("between 1 and 1073741824") && e.exit_code() == 2);
        assert!(check_size("-s", 0).is_err());
        let e = check_iters("-n", u64::MAX, MAX_ITERS, "why").unwrap_err();
        assert!(
            e.to_string()
                .contains("at most 4294967296 iterations (why)"),
            "{e}"
        );
        assert!(check_iters("-n", 0, 10, "").is_err());
        let (max, why) = max_lat_iters();
        assert!((1..=MAX_ITERS).contains(&max) && !why.is_empty());
        assert!(available_memory() > 0);
        assert!(check_memory("buffers", u64::MAX)
            .unwrap_err()
            .to_string()
            .contains("available"));
        assert_eq!(human(1536 << 20), "1.5 GiB");
        assert_eq!(human(2048), "2 KiB");
        let e = create_output("--hlog", Path::new("/nonexistent-dir/x.hlog")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--hlog /nonexistent-dir/x.hlog: cannot write"),
            "{e}"
        );
    }
}
