//! A QP's requester state (the data; what the requester does with it is
//! [`crate::transport::requester`]): the next PSN, the outstanding requests with what completes
//! each, the retry counters and timers.

use std::collections::VecDeque;

use super::path::Frame;
use crate::srq::Sge;
use crate::wire::{Psn, Reth};
use crate::wqe::Gather;

/// What completes an outstanding request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// An ACK covering its last PSN.
    Ack,
    /// READ response data for the local scatter list.
    Read {
        /// Local buffers.
        local: Vec<Sge>,
        /// Bytes expected.
        len: u64,
    },
    /// An atomic ACK carrying the original value.
    Atomic {
        /// Local buffer.
        local: Sge,
        /// Operand size.
        size: u8,
    },
}

/// An outstanding send WQE.
#[derive(Clone, Debug)]
pub struct Pending {
    /// WQE index (first basic block).
    pub index: u16,
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
    /// CQE requested.
    pub signaled: bool,
    /// First PSN.
    pub first_psn: Psn,
    /// PSNs consumed (0 for a NOP).
    pub npsn: u32,
    /// READ / atomic: the request packet, for retransmission. SEND and WRITE keep no packets:
    /// they are gathered from the registered memory each time one is sent ([`Msg`]).
    pub frames: Vec<Frame>,
    /// SEND / WRITE (RC, UC): what to gather and how to build its packets.
    pub msg: Option<Msg>,
    /// Request packets sent so far (rewound by a retransmission).
    pub sent: u32,
    /// RC SEND / WRITE: packets acknowledged so far (an ACK of a PSN inside the message).
    pub acked: u32,
    /// Bytes of the message (CQE byte count).
    pub byte_len: u32,
    /// What completes it.
    pub expect: Expect,
    /// Completed (waiting for earlier ones to retire).
    pub done: bool,
    /// READ: the PSN of the next response packet expected (responses arrive in order; a gap
    /// means one was lost).
    pub next_resp: Psn,
    /// READ: a gap was seen and the request resent; further out-of-order responses are ignored
    /// until the resent responses start arriving.
    pub gap_resent: bool,
}

/// A SEND or WRITE message whose packets are gathered one by one as they are sent, as a NIC
/// DMAs each packet's payload from the registered memory at send time (so memory is bounded
/// by the path MTU times the send window, whatever the message size, and an MR deregistered
/// in the middle of a message fails it).
#[derive(Clone, Debug)]
pub struct Msg {
    /// Local data.
    pub data: Gather,
    /// Message length.
    pub len: u32,
    /// RDMA WRITE (else SEND).
    pub write: bool,
    /// RETH of the first packet (WRITE).
    pub reth: Option<Reth>,
    /// Immediate data of the last packet.
    pub imm: Option<[u8; 4]>,
    /// Solicited event requested.
    pub solicited: bool,
    /// XRC: the remote XRC SRQ every packet's XRCETH names (IBTA Annex A14).
    pub xrc_srqn: Option<u32>,
}

impl Pending {
    /// Request packets this request sends.
    pub(crate) fn packets(&self) -> u32 {
        if self.msg.is_some() {
            self.npsn
        } else {
            self.frames.len() as u32
        }
    }
    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }
    pub(crate) fn contains(&self, p: Psn) -> bool {
        self.npsn > 0 && p.in_range(self.first_psn, self.first_psn.add(self.npsn))
    }
    pub(crate) fn is_rd_atomic(&self) -> bool {
        !matches!(self.expect, Expect::Ack)
    }
}

/// Requester state of a QP.
#[derive(Debug, Default)]
pub struct Requester {
    /// Next PSN to send.
    pub psn: Psn,
    /// Outstanding requests, oldest first.
    pub outstanding: VecDeque<Pending>,
    /// Local ACK timer deadline (virtual ns).
    pub timer: Option<u64>,
    /// Transport retries left.
    pub retries_left: u8,
    /// RNR retries left (ignored when `rnr_retry` is 7).
    pub rnr_left: u8,
    /// Waiting out an RNR NAK: (until, PSN to resend from).
    pub rnr_until: Option<(u64, Psn)>,
    /// The PSN the last retry resent from, until progress, an RNR NAK or a timeout starts a
    /// new round: an implied NAK for the same PSN in the same round (every later ACK of the
    /// round implies it again) does not start another retry (as rxe's completer ignores them
    /// while a retry is under way, `rxe_comp.c` `started_retry`, and qib while it waits for the
    /// restarted READ, `qib_rc.c` `RVT_R_RDMAR_SEQ`). A NAK sequence error always retries
    /// (`transport/requester/retry.rs`).
    pub retrying_from: Option<Psn>,
}

impl Requester {
    /// Arm the retry counters from the QP attributes (RTS).
    pub fn reset_retries(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retries_left = retry_cnt;
        self.rnr_left = rnr_retry;
    }
}
