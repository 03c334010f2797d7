//! Driver bugs: things a ConnectX would silently mis-execute (or execute differently from what
//! the driver meant) and the software ConnectX reports instead.
//!
//! Real hardware has no way to tell the driver that its doorbell named the wrong WQE or that
//! its BlueFlame copy differs from the ring; it just does something. The software ConnectX
//! does what the hardware would do *and* records the mistake here, so tests can assert that
//! the list is empty (`Fabric::driver_bugs`). Each report is also logged with
//! `tracing::error!`.

use std::fmt;

/// The kind of driver mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriverBugKind {
    /// The BlueFlame register copy differs from the WQE in the ring (the register copy is what
    /// executes, as on a ConnectX; rdma-core `mlx5_bf_copy` copies the ring verbatim).
    BlueFlameMismatch,
    /// A doorbell (8-byte or BlueFlame) names a WQE index that is not a WQE start among the
    /// newly posted WQEs (rdma-core rings with the ctrl of the last WQE posted).
    DoorbellIndexMismatch,
    /// A doorbell carries another QP's number.
    DoorbellQpnMismatch,
    /// A doorbell was rung but the SQ doorbell record (`dbrec[1]`) was not advanced past the
    /// WQE it names (rdma-core writes the record before the doorbell, `post_send_db`).
    DbrNotAdvanced,
    /// A doorbell was rung with nothing new in the ring.
    DoorbellNothingNew,
    /// Two BlueFlame copies in a row to the same half (rdma-core toggles `bf->offset` by
    /// `buf_size` after every post, `post_send_db`).
    BlueFlameHalfNotToggled,
    /// A BlueFlame copy longer than the half it was written to, or shorter than its DS count.
    BlueFlameSize,
    /// Two BlueFlame copies into one shared register at once: the half holds lines of two
    /// WQEs, or a store of one copy landed after the next write into the half had begun
    /// ([`crate::doorbell::shared`]). rdma-core copies into a shared register under its lock
    /// (`struct mlx5_bf` `need_lock`); without it the NIC executes a WQE made of both
    /// (Mellanox libxlio issue #123).
    BlueFlameInterleaved,
    /// A doorbell record claims more WQEs outstanding than the queue holds.
    DbrOverflow,
    /// A CQ arm doorbell that does not match the arm doorbell record, names another CQ, or
    /// sets bits outside sn, command and consumer index (rdma-core `mlx5_arm_cq` writes
    /// `dbrec[1]` and then the same value to UAR + 0x20).
    CqArmMismatch,
    /// A CQ arm doorbell whose sequence number is not the number of completion events taken
    /// from the CQ modulo 4 (rdma-core advances it once per event taken, `mlx5_cq_event`).
    CqArmSequence,
    /// A WQE without CQ_UPDATE on a QP created with `sq_sig_all` (rdma-core ORs CQ_UPDATE
    /// into every WQE of such a QP, `qp->sq_signal_bits`; hardware only reads the WQE).
    SqSigAllNotApplied,
}

/// One reported driver mistake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverBug {
    /// Device name.
    pub device: String,
    /// QP (or CQ / SRQ) number concerned.
    pub object: u32,
    /// What went wrong.
    pub kind: DriverBugKind,
    /// Details: indexes, values, what was executed.
    pub detail: String,
}

impl fmt::Display for DriverBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: object {:#x}: {:?}: {}",
            self.device, self.object, self.kind, self.detail
        )
    }
}

/// Collects driver bugs of one device.
#[derive(Debug, Default)]
pub struct BugLog {
    bugs: Vec<DriverBug>,
}

impl BugLog {
    /// Record (and log) a driver bug.
    pub fn report(&mut self, device: &str, object: u32, kind: DriverBugKind, detail: String) {
        tracing::error!(device, object, ?kind, %detail, "driver bug");
        self.bugs.push(DriverBug {
            device: device.to_string(),
            object,
            kind,
            detail,
        });
    }

    /// Every bug reported so far.
    pub fn all(&self) -> &[DriverBug] {
        &self.bugs
    }

    /// Remove and return every bug reported so far.
    pub fn take(&mut self) -> Vec<DriverBug> {
        std::mem::take(&mut self.bugs)
    }
}
