//! A progress line for long runs, shown only when standard output is a terminal (so that
//! piped or captured output, and every test, stays exactly perftest's).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws `label: done/total` on standard error at most four times a second, after the run
/// has lasted one second; clears the line when dropped.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    label: String,
    total: u64,
    start: Instant,
    next: Instant,
    shown: bool,
}

impl Progress {
    /// A progress line for `total` steps, enabled only when stdout is a terminal.
    pub fn new(label: impl Into<String>, total: u64) -> Progress {
        let now = Instant::now();
        Progress {
            enabled: std::io::stdout().is_terminal(),
            label: label.into(),
            total,
            start: now,
            next: now + Duration::from_secs(1),
            shown: false,
        }
    }

    /// Report `done` steps; cheap when nothing is drawn (one clock read every 1024 steps).
    #[inline]
    pub fn update(&mut self, done: u64) {
        if !self.enabled || done & 1023 != 0 {
            return;
        }
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + Duration::from_millis(250);
        let pct = if self.total == 0 {
            100.0
        } else {
            done as f64 * 100.0 / self.total as f64
        };
        let secs = now.duration_since(self.start).as_secs_f64();
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r {}: {done}/{} ({pct:.0}%), {secs:.1} s ",
            self.label, self.total
        );
        let _ = e.flush();
        self.shown = true;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.shown {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        }
    }
}
