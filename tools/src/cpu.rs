//! `--cpu_util`: the CPU utilisation over a duration run's measured window, as perftest
//! reports it, and what the banner says about the device's NUMA node.
//!
//! perftest (`src/perftest_resources.c`, `get_cpu_stats`, called from `catch_alarm` when the
//! margin has passed and when the measured window ends; `src/perftest_parameters.c`,
//! `calc_cpu_util`) reads the first line of `/proc/stat` (the `cpu` line, every CPU of the
//! host) twice, takes its first number (user time) and its fourth (idle time), and prints
//! Δuser / (Δuser + Δidle) × 100 in a `CPU_Util[%]` column (`RESULT_EXT_CPU_UTIL`,
//! `REPORT_EXT_CPU_UTIL`). System, nice, iowait and interrupt time are in neither term; the
//! figure is the host's, not this process's. These tools compute the same figure from the same
//! two readings, so that it compares with perftest's.

use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

/// The file perftest reads (`CPU_UTILITY`).
pub const PROC_STAT: &str = "/proc/stat";

/// The column header perftest appends (`RESULT_EXT_CPU_UTIL`, without its newline).
pub const HEADER_EXT: &str = "    CPU_Util[%]";

/// The two numbers of `/proc/stat`'s `cpu` line perftest keeps (clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    /// User time (the line's first number).
    pub user: u64,
    /// Idle time (its fourth number).
    pub idle: u64,
}

impl CpuTimes {
    /// Parse the `cpu` line, the first of `/proc/stat` (`proc(5)`: `cpu user nice system idle
    /// iowait irq softirq steal guest guest_nice`); `None` when the text does not start so.
    pub fn parse(stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().next()?;
        let mut words = line.split_whitespace();
        if words.next()? != "cpu" {
            return None;
        }
        let n: Vec<u64> = words
            .take(4)
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        (n.len() == 4).then(|| CpuTimes {
            user: n[0],
            idle: n[3],
        })
    }

    /// Read `/proc/stat` now (`None` when it cannot be read or parsed, as on a system without
    /// procfs: perftest then prints 0.00).
    pub fn now() -> Option<CpuTimes> {
        CpuTimes::parse(&std::fs::read_to_string(PROC_STAT).ok()?)
    }

    /// perftest's `calc_cpu_util` between `self` (the window's start) and `end`: percent, 0
    /// when neither counter moved.
    pub fn util_until(&self, end: &CpuTimes) -> f64 {
        let user = end.user.saturating_sub(self.user);
        let idle = end.idle.saturating_sub(self.idle);
        if user + idle == 0 {
            0.0
        } else {
            user as f64 / (user + idle) as f64 * 100.0
        }
    }
}

/// The column value perftest appends to a row (`REPORT_EXT_CPU_UTIL`: a tab, four spaces,
/// `%-3.2f`).
pub fn row_ext(util: f64) -> String {
    format!("\t    {util:<3.2}")
}

/// A reading of `/proc/stat` at each end of a measured window, taken by a thread that sleeps
/// until each instant (perftest: the `SIGALRM` of the margin and of the window's end), so that
/// the measuring loop reads nothing.
#[derive(Debug, Default)]
pub struct CpuUtil {
    /// Whether `--cpu_util` asked for the figure.
    pub enabled: bool,
    watch: Mutex<Option<JoinHandle<Option<f64>>>>,
}

impl CpuUtil {
    /// The column when `enabled` (`--cpu_util`), else nothing.
    pub fn new(enabled: bool) -> CpuUtil {
        CpuUtil {
            enabled,
            watch: Mutex::new(None),
        }
    }

    /// Take the figure over the window (`from`, `to`) when enabled (a window replaces the one
    /// before it: one per size, and a `-D` run has one size).
    pub fn watch(&self, from: Instant, to: Instant) {
        if !self.enabled {
            return;
        }
        let t = std::thread::Builder::new()
            .name("cpu_util".into())
            .spawn(move || {
                std::thread::sleep(from.saturating_duration_since(Instant::now()));
                let a = CpuTimes::now();
                std::thread::sleep(to.saturating_duration_since(Instant::now()));
                let b = CpuTimes::now();
                Some(a?.util_until(&b?))
            });
        match t {
            Ok(h) => *self.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(e) => tracing::warn!(error = %e, "no thread for --cpu_util: it will print 0.00"),
        }
    }

    /// The header's extension: [`HEADER_EXT`] when enabled, else nothing.
    pub fn header_ext(&self) -> &'static str {
        if self.enabled {
            HEADER_EXT
        } else {
            ""
        }
    }

    /// The row's extension when enabled ([`row_ext`] of the last window's figure, waiting for
    /// its end; 0.00 when none was taken or `/proc/stat` could not be read, as perftest), else
    /// nothing.
    pub fn row_ext(&self) -> String {
        if !self.enabled {
            return String::new();
        }
        let h = self.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
        let util = h.and_then(|h| h.join().ok().flatten()).unwrap_or(0.0);
        row_ext(util)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_gives_user_and_idle() {
        let a = CpuTimes::parse(
            "cpu  100 5 50 1000 7 0 3 0 0 0\ncpu0 50 2 25 500 3 0 1 0 0 0\nintr 1 2\n",
        )
        .unwrap();
        assert_eq!(
            a,
            CpuTimes {
                user: 100,
                idle: 1000
            }
        );
        let b = CpuTimes {
            user: 175,
            idle: 1025,
        };
        // 75 ticks of user time and 25 idle: 75 %; system time (third number) is in neither.
        assert_eq!(a.util_until(&b), 75.0);
        assert_eq!(a.util_until(&a), 0.0);
        assert_eq!(CpuTimes::parse("intr 1 2\n"), None);
        assert_eq!(CpuTimes::parse("cpu 1 2 x 4\n"), None);
        assert_eq!(CpuTimes::parse("cpu 1 2 3\n"), None);
        assert_eq!(CpuTimes::parse(""), None);
    }

    #[test]
    fn columns_follow_perftest() {
        assert_eq!(row_ext(7.5), "\t    7.50");
        assert_eq!(row_ext(100.0), "\t    100.00");
        let off = CpuUtil::default();
        assert_eq!((off.header_ext(), off.row_ext()), ("", String::new()));
        let on = CpuUtil::new(true);
        // No window watched: perftest's 0.00.
        assert_eq!(on.row_ext(), "\t    0.00");
        let now = Instant::now();
        on.watch(now, now);
        let ext = on.row_ext();
        let v: f64 = ext.trim().parse().unwrap();
        assert!((0.0..=100.0).contains(&v), "{ext}");
    }
}
