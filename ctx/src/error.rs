//! The error type of the owning layer.

use std::time::Duration;

/// What went wrong in the owning layer: a device refusal, a data-path error, or a request
/// this layer refuses before it reaches either.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device (control path) refused or failed.
    #[error(transparent)]
    Device(#[from] mlx5_hw::Error),
    /// The data path refused a post or reported a bad completion.
    #[error(transparent)]
    DataPath(#[from] mlx5_qp::Error),
    /// An access outside a memory region.
    #[error(
        "{what}: {len} bytes at offset {offset} reach past the end of the {size}-byte memory \
         region"
    )]
    OutOfBounds {
        /// What was asked.
        what: &'static str,
        /// Offset into the region.
        offset: usize,
        /// Bytes asked for.
        len: usize,
        /// Size of the region.
        size: usize,
    },
    /// The memory for a region could not be allocated.
    #[error("could not allocate {len} bytes{} for a memory region{}", if *.huge { " of huge pages" } else { "" }, if *.huge { " (are huge pages reserved? see /proc/sys/vm/nr_hugepages)" } else { "" })]
    Alloc {
        /// Bytes asked for.
        len: usize,
        /// Whether huge pages were asked for.
        huge: bool,
    },
    /// Objects of two different contexts (devices) were combined.
    #[error("{what} belongs to device {theirs}, not to {ours}: objects of one QP must come from one device")]
    WrongContext {
        /// What was passed.
        what: &'static str,
        /// The device it belongs to.
        theirs: String,
        /// The device it was used with.
        ours: String,
    },
    /// A device name that cannot be opened in this build.
    #[error("{0}")]
    NoDevice(String),
    /// A completion waited for failed.
    #[error("WR {} failed: {} ({}){}", .wc.wr_id(), .wc.status().name(), .wc.status(), .wc.syndrome_name().map(|s| format!(", syndrome {s}")).unwrap_or_default())]
    Failed {
        /// The completion.
        wc: mlx5_qp::Wc,
    },
    /// A completion of another WR arrived while waiting for one.
    #[error("waiting for WR {wr_id}, the CQ gave {} other completion(s) first (WR ids {:?}); poll every outstanding WR with Cq::poll_until", .completions.len(), .completions.iter().map(|w| w.wr_id()).collect::<Vec<_>>())]
    Unexpected {
        /// The WR waited for.
        wr_id: u64,
        /// Every completion polled, in order.
        completions: Vec<mlx5_qp::Wc>,
    },
    /// A completion channel or an event queue asked to do something that would lose events
    /// or cannot work here (a second consumer of one channel, a CQ of another channel, no
    /// async runtime, a device that moves only when stepped).
    #[error("{0}")]
    Events(String),
    /// A system call on an event file descriptor failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error the system returned.
        source: std::io::Error,
    },
    /// The device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`) while a helper waited on
    /// it, and the wait's CQ holds nothing more: what the device wrote before it died was
    /// polled, then every WR still outstanding on the QPs of the wait's table was retired
    /// with `WR_FLUSH_ERR` ([`Cq::flush_dead`](crate::Cq::flush_dead)), and none of that
    /// completed the wait ([`Context::is_fatal`](crate::Context::is_fatal)).
    #[error("device {device} reported a fatal error (IBV_EVENT_DEVICE_FATAL): nothing more completes on it ({} completion(s) polled before, the flushed WRs among them{}{}); destroy its objects and open the device again", .completions.len(), if .unretired.is_complete() { "" } else { "; " }, .unretired.describe())]
    DeviceFatal {
        /// The device's name.
        device: String,
        /// The completions polled before the wait ended, in order (none is lost): those the
        /// device wrote, then the software flushes.
        completions: Vec<mlx5_qp::Wc>,
        /// What the flush could not retire (yet).
        unretired: crate::Unretired,
    },
    /// [`Cq::flush_dead`](crate::Cq::flush_dead) on a device that has not reported a fatal
    /// error: its WRs still complete on their own.
    #[error("Cq::flush_dead on device {device}, which has not reported a fatal error (IBV_EVENT_DEVICE_FATAL): its WRs still complete on their own; poll the CQ")]
    Alive {
        /// The device's name.
        device: String,
    },
    /// The device put the CQ in its error state (`IBV_EVENT_CQ_ERR`; on a ConnectX the cause
    /// is an overrun: more completions came than the CQ has entries before they were polled).
    /// It takes no completion any more: each QP completing into it goes to Error
    /// (`IBV_EVENT_QP_FATAL`) and the completions of its WRs are lost. Reported by the waits of
    /// [`crate::Cq`] once the CQ holds nothing more; recover by moving those QPs to Error (or
    /// reading their state), retiring their WRs with [`mlx5_qp::Qp::flush_outstanding`] and
    /// rebuilding the CQ larger (`docs/troubleshooting.md`).
    #[error(
        "CQ {cqn:#x} is in error (IBV_EVENT_CQ_ERR): it overran, more completions came than \
         it has entries before they were polled, and it takes none any more; its QPs go to \
         Error as they complete (IBV_EVENT_QP_FATAL): retire their WRs with \
         Qp::flush_outstanding and recreate the CQ larger ({} completion(s) polled before)",
        .completions.len()
    )]
    CqError {
        /// The CQ number.
        cqn: u32,
        /// The completions polled by this call before the error was seen, in order.
        completions: Vec<mlx5_qp::Wc>,
    },
    /// A wait reached its deadline.
    #[error("gave up after {waited:?} waiting for {what}: {detail}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it waited.
        waited: Duration,
        /// What is still outstanding, and what may be wrong.
        detail: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
