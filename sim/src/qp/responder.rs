//! A QP's responder state (the data; what the responder does with it is
//! [`crate::transport::responder`]): the expected PSN and MSN, the message in progress, the
//! responder resources for READ/atomic replay and the responses waiting to go out.

use std::collections::VecDeque;

use super::path::Frame;
use super::RecvWqe;
use crate::wire::{Packet, Psn};

/// A message being received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InMsg {
    /// A SEND filling a receive WQE.
    Send {
        /// The WQE.
        wqe: RecvWqe,
        /// Bytes received so far.
        offset: u64,
    },
    /// A WRITE into remote memory.
    Write {
        /// Next address.
        va: u64,
        /// Key.
        rkey: u32,
        /// Total length from the RETH.
        len: u64,
        /// Bytes received so far.
        offset: u64,
    },
    /// UC: the rest of a message being dropped.
    Drop,
}

/// A READ or atomic the responder executed, kept to answer its duplicates (IBTA Vol 1
/// §9.7.5.1.2: a duplicate READ is executed again, a duplicate atomic returns the saved result
/// and is never applied twice). The table holds `max_dest_rd_atomic` entries (the responder
/// resources the QP was given, `ibv_modify_qp(3)`), oldest replaced first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdAtomic {
    /// A READ of `npsn` response packets starting at `psn`.
    Read {
        /// PSN of the request.
        psn: Psn,
        /// Response packets.
        npsn: u32,
    },
    /// An atomic at `psn` that read `orig`.
    Atomic {
        /// PSN of the request.
        psn: Psn,
        /// The original value returned.
        orig: u64,
    },
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number (24 bits): requests completed.
    pub msn: u32,
    /// Message in progress.
    pub cur: Option<InMsg>,
    /// A PSN sequence error NAK was sent and no expected packet arrived since.
    pub nak_sent: bool,
    /// Responder resources: recent READs and atomics, for duplicate replay.
    pub resources: VecDeque<RdAtomic>,
    /// An ACK not sent yet: ACKs of packets delivered in one step are coalesced into one
    /// acknowledging the last of them (IBTA Vol 1 §9.7.5.1.1 allows one ACK for several
    /// requests); it goes out at the next step, or before any other response.
    pub ack_due: Option<Packet>,
    /// UC: the receive WQE of a message that was dropped, reused by the next message that
    /// consumes one (a UC message with a missing packet completes nothing, IBTA Vol 1 §9.8.3).
    pub held: Option<RecvWqe>,
    /// Responses waiting behind a READ response still being streamed, in order.
    pub tx: VecDeque<Tx>,
    /// READ response packets sent in this step, by every READ of the QP together (reset by
    /// the responder's `pump`, bounded by its `READ_BURST`).
    pub burst_used: u32,
    /// A class C error NAKed the requester: an RC QP moves to Error; a DC target, which has no
    /// Error state, drops the connection this state belongs to ([`crate::transport::dc`]).
    pub broken: bool,
}

/// A response waiting to go out behind a READ response still being streamed.
#[derive(Clone, Debug)]
pub enum Tx {
    /// An ACK, NAK or atomic ACK.
    Frame(Frame),
    /// A READ response not completely sent.
    Read(ReadOut),
}

/// A READ response being sent: each packet's payload is read from the registered memory when
/// it is sent (a NIC DMAs READ response data packet by packet), so memory is bounded by the
/// MTU, not by the READ's length.
#[derive(Clone, Debug)]
pub struct ReadOut {
    /// The request (addressing; no payload).
    pub req: Packet,
    /// Remote key.
    pub rkey: u32,
    /// Start address.
    pub va: u64,
    /// Length.
    pub len: u64,
    /// Packets in all.
    pub n: u32,
    /// Next packet to send.
    pub next: u32,
    /// MSN carried by the AETH of the first and last packet.
    pub msn: u32,
}
