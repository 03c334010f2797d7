//! How long a wait of a run may last before it is declared stuck: what the work asked for
//! takes at the slowest pace the device may legitimately have, plus what the transport itself
//! may spend retrying a lost packet. No fixed timeout: a 1 GiB message, a 64-QP run or a
//! `-D 600` run each get the time they need, and the message of a wait that ran out says what
//! was waited for, how long, and what that time was made of.

use crate::devices::Devices;
use mlx5_hw::QpType;
use std::time::Duration;

/// The slowest a device may move data and complete operations and still be working.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Bytes per second.
    pub floor_bps: u64,
    /// Time per operation (a round trip of a tiny message).
    pub per_op: Duration,
    /// What the device is, for messages.
    pub what: &'static str,
}

impl Pace {
    /// The software ConnectX: a debug build moves a few MiB/s with messages of megabytes
    /// (measured here: 4 MiB/s for 8 MiB SENDs, 20–40 MiB/s for smaller ones), a release build
    /// 50–400 MiB/s; 1 MiB/s leaves room for both ends and a loaded machine's other work.
    pub const SOFTWARE_CONNECTX: Pace = Pace {
        floor_bps: 1 << 20,
        per_op: Duration::from_millis(20),
        what: "the software ConnectX",
    };
    /// A software RDMA device on a verbs stack (Soft-RoCE, siw): under emulation (the rxe VM
    /// on TCG) it moves under 1 MiB/s and takes about 3 ms per round trip.
    pub const SOFTWARE_VERBS: Pace = Pace {
        floor_bps: 128 << 10,
        per_op: Duration::from_millis(50),
        what: "a software RDMA device (Soft-RoCE, siw), possibly emulated",
    };
    /// A NIC: a link of 1 Gb/s or more, far faster than this.
    pub const NIC: Pace = Pace {
        floor_bps: 16 << 20,
        per_op: Duration::from_millis(5),
        what: "an RDMA NIC",
    };

    /// The pace of the device of `devs`, its floor overridden by [`MIN_BPS_ENV`] when set.
    pub fn of(devs: &Devices) -> Pace {
        let pace = if devs.is_sim() {
            Pace::SOFTWARE_CONNECTX
        } else if devs.software {
            Pace::SOFTWARE_VERBS
        } else {
            Pace::NIC
        };
        pace.overridden(std::env::var(MIN_BPS_ENV).ok().as_deref())
    }

    /// This pace with the floor `value` names (bytes per second, a positive number), when
    /// it names one.
    pub fn overridden(self, value: Option<&str>) -> Pace {
        match value.and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(bps) if bps > 0 => Pace {
                floor_bps: bps,
                what: "the device (at the pace MLX5_TOOLS_MIN_BPS sets)",
                ..self
            },
            _ => self,
        }
    }
}

/// The environment variable that sets the slowest pace, in bytes per second, the tools
/// assume a device keeps: a machine slower than the defaults gives it less, a test of the
/// timeout path more (then a wait gives up sooner).
pub const MIN_BPS_ENV: &str = "MLX5_TOOLS_MIN_BPS";

/// What the transport spends retrying before it reports an error: an RC requester waits the
/// local ACK timeout (4.096 µs × 2^`timeout`, IBTA Vol. 1 §9.7.6.1.3) for each of its
/// `retry_cnt` + 1 tries (§9.7.6.1.6); UC and UD never retry (a lost message is gone).
/// `timeout` 0 waits forever: `None`.
pub fn retry_budget(conn: QpType, timeout: u8, retry_cnt: u8) -> Option<Duration> {
    match conn {
        QpType::Uc | QpType::Ud => Some(Duration::ZERO),
        // RC, XRC and DC (a DCI's connection to each target is RC's), and any reliable type
        // to come.
        _ if timeout == 0 => None,
        _ => {
            let each = Duration::from_nanos(4096u64.saturating_mul(1u64 << timeout.min(31)));
            Some(each.saturating_mul(u32::from(retry_cnt) + 1))
        }
    }
}

/// How a user names the retry budget: `-u 14: 8 tries of 67 ms`.
pub fn describe_budget(conn: QpType, timeout: u8, retry_cnt: u8) -> String {
    match (conn, retry_budget(conn, timeout, retry_cnt)) {
        (QpType::Uc | QpType::Ud, _) => format!("{} does not retry", conn.name()),
        (_, None) => "-u 0: the RC transport waits for ACKs forever".into(),
        (_, Some(_)) => {
            let each = Duration::from_nanos(4096u64.saturating_mul(1u64 << timeout.min(31)));
            format!(
                "-u {timeout}: the RC transport's {} tries of {}",
                u32::from(retry_cnt) + 1,
                human(each)
            )
        }
    }
}

/// A duration as a user reads it: `67 ms`, `12.5 s`, `3.2 h`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 600.0 {
        format!("{s:.1} s")
    } else if s < 36_000.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// The time a wait may take, and what it is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patience {
    /// The limit.
    pub limit: Duration,
    /// What the limit is made of, for the message of a wait that runs out.
    pub why: String,
}

/// The least a wait is given: a process that was descheduled, a page fault on a large
/// buffer, the other end printing its report between two sizes.
pub const MIN_PATIENCE: Duration = Duration::from_secs(10);

impl Patience {
    /// For work of `ops` operations moving `bytes` bytes in all (plus `extra`, such as a run's
    /// duration), at `pace`, with the transport's retry `budget` (`None`: it waits forever,
    /// and so does this).
    pub fn for_work(
        pace: Pace,
        bytes: u64,
        ops: u64,
        extra: Duration,
        budget: Option<Duration>,
        budget_words: &str,
    ) -> Patience {
        let moving = Duration::from_secs_f64(bytes as f64 / pace.floor_bps.max(1) as f64);
        let per_op = pace
            .per_op
            .saturating_mul(u32::try_from(ops).unwrap_or(u32::MAX));
        let retries = budget.unwrap_or(Duration::MAX);
        let limit = MIN_PATIENCE
            .saturating_add(extra)
            .saturating_add(moving)
            .saturating_add(per_op)
            .saturating_add(retries);
        let mut why = format!(
            "{ops} operation(s) moving {} at no less than {}/s and {} each on {}",
            crate::limits::human(bytes),
            crate::limits::human(pace.floor_bps),
            human(pace.per_op),
            pace.what
        );
        if extra >= Duration::from_millis(1) {
            why.push_str(&format!(", {} of run time", human(extra)));
        }
        why.push_str(&format!(
            ", {budget_words}, and {} of slack",
            human(MIN_PATIENCE)
        ));
        Patience { limit, why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_can_be_set() {
        let p = Pace::SOFTWARE_CONNECTX;
        assert_eq!(p.overridden(None), p);
        assert_eq!(p.overridden(Some("x")), p);
        assert_eq!(p.overridden(Some("0")), p);
        let fast = p.overridden(Some("1000000000"));
        assert_eq!((fast.floor_bps, fast.per_op), (1_000_000_000, p.per_op));
        assert!(fast.what.contains("MLX5_TOOLS_MIN_BPS"));
    }

    #[test]
    fn the_retry_budget_is_the_transports() {
        // -u 14: 4.096 µs × 2^14 = 67.1 ms, 8 tries.
        let b = retry_budget(QpType::Rc, 14, 7).unwrap();
        assert_eq!(b.as_micros(), 4096 * 16384 * 8 / 1000);
        assert_eq!(retry_budget(QpType::Rc, 0, 7), None);
        assert_eq!(retry_budget(QpType::Ud, 14, 7), Some(Duration::ZERO));
        assert_eq!(
            describe_budget(QpType::Rc, 14, 7),
            "-u 14: the RC transport's 8 tries of 67 ms"
        );
        // -u 31 is 2.4 hours a try.
        assert!(retry_budget(QpType::Rc, 31, 7).unwrap() > Duration::from_secs(8 * 8796));
    }

    #[test]
    fn patience_grows_with_the_work_asked_for() {
        let p = |bytes, ops| {
            Patience::for_work(
                Pace::SOFTWARE_CONNECTX,
                bytes,
                ops,
                Duration::ZERO,
                retry_budget(QpType::Rc, 14, 7),
                "retries",
            )
        };
        let small = p(64, 1);
        assert!(small.limit >= MIN_PATIENCE && small.limit < Duration::from_secs(12));
        // A gigabyte at 1 MiB/s: 1024 s more.
        let big = p(1 << 30, 1);
        assert!(big.limit > Duration::from_secs(1024), "{big:?}");
        assert!(
            big.why.contains("1.0 GiB") && big.why.contains("1.0 MiB/s"),
            "{}",
            big.why
        );
        // 64 QPs of 5 such messages: the time they all take, not 10 s.
        assert!(p(320 << 30, 320).limit > Duration::from_secs(320 * 1024));
        // A -D run's waits include its duration; -u 0 waits forever.
        let d = Patience::for_work(
            Pace::NIC,
            0,
            0,
            Duration::from_secs(600),
            Some(Duration::ZERO),
            "x",
        );
        assert!(d.limit >= Duration::from_secs(610) && d.why.contains("run time"));
        let forever = Patience::for_work(Pace::NIC, 0, 0, Duration::ZERO, None, "x");
        assert_eq!(forever.limit, Duration::MAX);
    }
}
