//! Errors of the data path. Every misuse the types cannot rule out is one of these, returned
//! before anything is written to a ring: nothing here is ever a panic.

use mlx5_hw::{QpState, QpType};

/// Result of a data-path call.
pub type Result<T> = core::result::Result<T, Error>;

/// Which send-queue limit a post hit ([`Error::SqFull`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqLimit {
    /// Every WR the QP allows (`Qp::max_send_wr`, rdma-core's `sq.max_post`) is outstanding.
    WorkRequests,
    /// The ring has fewer free 64-byte basic blocks than the WQE needs.
    Blocks,
}

fn sq_full_reason(limit: SqLimit, needed: u32, free: u32) -> String {
    match limit {
        SqLimit::WorkRequests => {
            "every send WR the QP allows (max_send_wr) is outstanding".to_string()
        }
        SqLimit::Blocks => {
            format!("the WQE needs {needed} basic blocks but {free} are free")
        }
    }
}

/// Why a post, a poll or a constructor failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The send queue has no room for this WR: all `max_send_wr` WRs are outstanding, or
    /// the ring lacks the blocks its WQE needs.
    #[error(
        "send queue full: {}; poll the send CQ to retire completed WRs (a signaled completion \
         also retires the unsignaled WRs before it, so signal at least every few posts)",
        sq_full_reason(*.limit, *.needed, *.free)
    )]
    SqFull {
        /// Which limit was hit.
        limit: SqLimit,
        /// What the WR needs, in the limit's unit: 1 WR, or the WQE's basic blocks.
        needed: u32,
        /// How many of that unit are free now.
        free: u32,
    },
    /// The receive queue has no free WQE.
    #[error("receive queue full: all {capacity} receive WQEs are posted; poll the receive CQ")]
    RqFull {
        /// Receive WQEs the queue holds.
        capacity: u32,
    },
    /// The shared receive queue's free list is empty.
    #[error("SRQ full: all {capacity} WQEs are posted (one is always held back); poll the CQs")]
    SrqFull {
        /// WQEs the SRQ can have posted at once.
        capacity: u32,
    },
    /// More scatter/gather entries than the queue was created for.
    #[error("{given} scatter/gather entries, but the queue allows at most {max}")]
    TooManySges {
        /// Entries passed.
        given: usize,
        /// The queue's limit.
        max: u32,
    },
    /// An SGE length with bit 31 set (the data segment's byte count is 31 bits).
    #[error("SGE length {len} does not fit the 31-bit byte count of a data segment")]
    SgeTooLong {
        /// The length passed.
        len: u32,
    },
    /// Inline data above the QP's `max_inline_data`.
    #[error("{len} bytes of inline data, but the QP was created for at most {max}")]
    InlineTooLarge {
        /// Inline bytes passed.
        len: usize,
        /// The QP's `max_inline_data`.
        max: u32,
    },
    /// The WQE would exceed the largest WQE the send queue can hold.
    #[error("the WQE needs {bytes} bytes but this send queue holds WQEs of at most {max} bytes")]
    WqeTooLarge {
        /// Bytes the WQE needs.
        bytes: usize,
        /// Largest WQE.
        max: usize,
    },
    /// An atomic's remote address is not aligned to its operand size.
    #[error("atomic remote address {addr:#x} is not {align}-byte aligned")]
    UnalignedAtomic {
        /// The remote address.
        addr: u64,
        /// Required alignment (operand size).
        align: u32,
    },
    /// An atomic's local buffer is shorter than its operand.
    #[error("atomic local buffer of {len} bytes is shorter than the {size}-byte operand")]
    AtomicBufferTooShort {
        /// Length of the local SGE.
        len: u32,
        /// Operand size.
        size: u32,
    },
    /// The operation needs another QP state.
    #[error("cannot {op} while the QP is in {state}: {hint}")]
    WrongState {
        /// What was attempted (`post a send`, `post a receive`).
        op: &'static str,
        /// The QP's state as the control path last reported it.
        state: QpState,
        /// What to do about it.
        hint: &'static str,
    },
    /// The operation is not defined for the QP type.
    #[error("{op} is not allowed on a {qp_type} QP (UC: SEND and WRITE; UD: SEND only)")]
    OpNotSupported {
        /// The operation.
        op: &'static str,
        /// The QP type.
        qp_type: QpType,
    },
    /// A UD send without an address handle.
    #[error("a UD send needs a destination: build the WR with `.ud(&UdDest)`")]
    MissingAddress,
    /// An XRC send without the remote XRC SRQ (`SendWr::xrc`), or an XRC SRQ on a QP that is
    /// not an XRC initiator.
    #[error("{0}")]
    XrcSrqn(&'static str),
    /// A DCI send without its target (`SendWr::dc`), a DCT number wider than 24 bits, or a DC
    /// target on a QP that is not a DC initiator.
    #[error("{0}")]
    DcDest(&'static str),
    /// An address handle on a connected (RC/UC) QP.
    #[error("an address handle is only meaningful on a UD QP, this one is {qp_type}")]
    UnexpectedAddress {
        /// The QP type.
        qp_type: QpType,
    },
    /// Data (SGEs or inline) on an operation that carries none of its own (atomics take their
    /// local buffer in the constructor).
    #[error("{op} takes no gather list or inline data")]
    UnexpectedData {
        /// The operation.
        op: &'static str,
    },
    /// Inline data on an RDMA READ (the local side is a scatter target).
    #[error("RDMA READ scatters into local memory; it cannot carry inline data")]
    InlineRead,
    /// The layout a device handed over is not one this data path can drive.
    #[error("unusable queue layout: {0}")]
    BadLayout(&'static str),
    /// A caller-built WQE that cannot be posted.
    #[error("raw WQE rejected: {0}")]
    BadRawWqe(&'static str),
    /// A CQE names a QP that is not in the table passed to the poll. The CQE stays in the CQ
    /// (nothing is lost): poll with a table that holds the QP (a CQ shared by several QPs is
    /// polled with all of them, or each owner takes its own with [`crate::Cq::poll_own`]), or,
    /// for a destroyed QP's stale CQE, take it out with [`crate::Cq::discard_next`] — a CQ
    /// that tracks destroyed QPs ([`crate::Cq::track_destroyed`], as `mlx5-ctx`'s do)
    /// settles those itself and does not report them.
    #[error(
        "CQ {cqn}: completion for QPN {qpn:#x}, which is not in the table passed to poll; the \
         CQE stays in the CQ: poll with a table that holds the QP (Cq::poll_own takes only the \
         table's own), or Cq::discard_next for a destroyed QP's stale CQE"
    )]
    UnknownQpn {
        /// The CQ number.
        cqn: u32,
        /// The QPN in the CQE.
        qpn: u32,
    },
    /// A receive completion on an SRQ that is not in the table passed to the poll. The CQE
    /// stays in the CQ, as for [`Error::UnknownQpn`]: the receive's WR id is the SRQ's to
    /// give back.
    #[error(
        "CQ {cqn}: receive completion on SRQ {srqn:#x}, which is not in the table passed to \
         poll; the CQE stays in the CQ: poll with a table that holds the SRQ"
    )]
    UnknownSrqn {
        /// The CQ number.
        cqn: u32,
        /// The SRQ number.
        srqn: u32,
    },
    /// A CQE that does not match any outstanding WQE.
    #[error(
        "CQ {cqn}: CQE for QPN {qpn:#x} with wqe_counter {wqe_counter:#x} names no outstanding \
         WQE ({why}); the CQE was consumed and ignored"
    )]
    BadCqe {
        /// The CQ number.
        cqn: u32,
        /// The QPN in the CQE.
        qpn: u32,
        /// The CQE's wqe_counter.
        wqe_counter: u16,
        /// What is inconsistent.
        why: &'static str,
    },
    /// A receive CQE names a later WQE than the oldest outstanding one: the device broke the
    /// contract that receive WQEs complete in order (rdma-core's `handle_responder` relies on
    /// it). The CQE was not consumed: the next poll delivers its completion; the skipped WQEs
    /// stay outstanding.
    #[error(
        "CQ {cqn}: receive CQE for QPN {qpn:#x} names WQE {wqe_counter:#x} but the oldest \
         outstanding receive WQE is {expected:#x}: the device completed receives out of order \
         (the completion is delivered by the next poll; nothing was flushed)"
    )]
    RecvOutOfOrder {
        /// The CQ number.
        cqn: u32,
        /// The QPN in the CQE.
        qpn: u32,
        /// The CQE's wqe_counter.
        wqe_counter: u16,
        /// The WQE the device should have completed next.
        expected: u16,
    },
    /// A CQE kind the data path does not handle (resize, signature error, compressed, ...).
    #[error(
        "CQ {cqn}: unsupported CQE (opcode {opcode} {name}, format {format}); create CQs \
         without compression and do not resize them while polling"
    )]
    UnsupportedCqe {
        /// The CQ number.
        cqn: u32,
        /// CQE opcode.
        opcode: u8,
        /// Its name.
        name: &'static str,
        /// CQE format (3 = compressed).
        format: u8,
    },
}

impl Error {
    /// Whether a poll that returned this error left the CQE it names in the CQ (the next poll
    /// meets it again): a CQE the table cannot place ([`Error::UnknownQpn`],
    /// [`Error::UnknownSrqn`]) and a receive out of order ([`Error::RecvOutOfOrder`]). Every
    /// other poll error consumed its CQE.
    pub fn leaves_cqe(&self) -> bool {
        matches!(
            self,
            Error::UnknownQpn { .. } | Error::UnknownSrqn { .. } | Error::RecvOutOfOrder { .. }
        )
    }
}
