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
//!
//! NUMA: perftest since 26.01 (`src/perftest_resources.c`, `set_process_affinity`, commit
//! cfd3696 "Add NUMA-aware CPU and memory binding") reads the device's
//! `/sys/class/infiniband/DEV/device/numa_node`, binds itself to that node with libnuma
//! (`numa_run_on_node`, `numa_set_membind`) unless the process already runs under a narrower
//! affinity (taskset, numactl) or `--disable_numa` is given, and prints ` NUMA node       : N`.
//! These tools forbid `unsafe` code, and binding needs `sched_setaffinity`, which the standard
//! library does not wrap: they do not bind themselves. They read the same sysfs files
//! ([`Placement`]) and the process's own affinity (`Cpus_allowed_list` of
//! `/proc/self/status`, `proc(5)`), print perftest's line when the process runs on the
//! device's node only, and otherwise say on standard error how to bind it (`numactl`). The
//! software ConnectX has no PCI function (no node): nothing is printed.

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

/// A CPU list as the kernel prints it (`0-3,8,10-11`: `local_cpulist`, `Cpus_allowed_list`);
/// `None` when the text is not one.
pub fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if b < a || b - a > 65_536 {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// Where a device sits and where this process may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The device's NUMA node (`device/numa_node`).
    pub node: u32,
    /// Its CPUs (`device/local_cpulist`), as the kernel printed them.
    pub local_text: String,
    /// Whether every CPU this process may run on is one of the device's.
    pub bound: bool,
    /// The CPUs this process may run on, as the kernel printed them.
    pub allowed_text: String,
}

impl Placement {
    /// Read the device at `dev_dir` (`/sys/class/infiniband/DEV`) and this process's affinity
    /// from `status` (the text of `/proc/self/status`); `None` when the device has no node
    /// (`-1`: no NUMA, or not a PCI device) or a file is missing or unreadable.
    pub fn read(dev_dir: &std::path::Path, status: &str) -> Option<Placement> {
        let pci = dev_dir.join("device");
        let node: i64 = std::fs::read_to_string(pci.join("numa_node"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let node = u32::try_from(node).ok()?;
        let local_text = std::fs::read_to_string(pci.join("local_cpulist"))
            .ok()?
            .trim()
            .to_string();
        let local = parse_cpulist(&local_text)?;
        let allowed_text = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
            .trim()
            .to_string();
        let allowed = parse_cpulist(&allowed_text)?;
        Some(Placement {
            node,
            bound: !allowed.is_empty() && allowed.iter().all(|c| local.contains(c)),
            local_text,
            allowed_text,
        })
    }

    /// The banner line: perftest's `NUMA node` when the process runs on the device's node only;
    /// else the device's node and that the process is not bound to it.
    pub fn banner_line(&self) -> (String, String) {
        let v = if self.bound {
            self.node.to_string()
        } else {
            format!(
                "{} (the device's; this process may run on CPUs {}, not bound to it)",
                self.node, self.allowed_text
            )
        };
        ("NUMA node".into(), v)
    }

    /// What to tell the user when the process is not bound to the device's node.
    pub fn note(&self, device: &str, tool: &str) -> Option<String> {
        (!self.bound).then(|| {
            format!(
                "note: {device} is on NUMA node {n} (CPUs {local}) and this process may run on \
                 CPUs {allowed}; perftest binds itself to the device's node, these tools do \
                 not: run `numactl --cpunodebind={n} --membind={n} {tool} ...` (or `taskset -c \
                 {local} {tool} ...`) for figures that compare",
                n = self.node,
                local = self.local_text,
                allowed = self.allowed_text,
            )
        })
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
    fn cpu_lists_and_placement() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a"), None);
        let dir = std::env::temp_dir().join(format!("mlx5-tools-numa-{}", std::process::id()));
        let pci = dir.join("device");
        std::fs::create_dir_all(&pci).unwrap();
        std::fs::write(pci.join("numa_node"), "1\n").unwrap();
        std::fs::write(pci.join("local_cpulist"), "8-15\n").unwrap();
        let status = |list: &str| format!("Name:\tlat\nCpus_allowed_list:\t{list}\n");
        let p = Placement::read(&dir, &status("0-15")).unwrap();
        assert!(!p.bound);
        assert_eq!(
            p.banner_line().1,
            "1 (the device's; this process may run on CPUs 0-15, not bound to it)"
        );
        let note = p.note("mlx5_1", "lat").unwrap();
        assert!(
            note.contains("numactl --cpunodebind=1 --membind=1 lat"),
            "{note}"
        );
        let p = Placement::read(&dir, &status("9-10")).unwrap();
        assert!(p.bound && p.note("mlx5_1", "lat").is_none());
        assert_eq!(p.banner_line(), ("NUMA node".to_string(), "1".to_string()));
        // No node (the kernel's -1) or no PCI function: nothing to say.
        std::fs::write(pci.join("numa_node"), "-1\n").unwrap();
        assert_eq!(Placement::read(&dir, &status("0-15")), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(Placement::read(&dir, &status("0-15")), None);
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
