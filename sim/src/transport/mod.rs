//! The InfiniBand transport between QPs of the fabric: messages travel as RoCEv2 packets
//! ([`crate::wire::Packet`]: BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, DETH), segmented
//! by the path MTU, with RC PSNs, ACK/NAK and MSNs (IBTA Vol 1 chapter 9).
//!
//! - [`requester`]: executes send WQEs into packets, keeps the outstanding requests and
//!   completes them from ACKs, READ responses and atomic ACKs; ACK timeout and RNR retry.
//! - [`responder`]: checks PSNs, consumes receive WQEs, scatters, executes WRITE / READ /
//!   atomics with memory checks, and answers with ACK / NAK / responses.
//!
//! Masked (extended) atomics: the ConnectX wire encoding of extended atomics is not public, so
//! the software ConnectX sends them as CmpSwap / FetchAdd packets and carries the masked
//! operands in a trailer after the IPv4 datagram ([`ext_atomic`]); inside the device they ride
//! beside the packet ([`Frame::ext`]).

pub mod ext_atomic;
pub mod requester;
pub mod responder;
pub mod xrc;

use crate::wire::{Addressing, Packet};
use crate::wqe::AtomicOp;

/// A packet in flight on the fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The RoCEv2 packet.
    pub pkt: Packet,
    /// The masked-atomic operands, when the packet is an extended atomic request.
    pub ext: Option<AtomicOp>,
}

/// The resolved primary path of a connected QP (set at RTR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path {
    /// Ethernet / IPv4 / UDP addressing of the requests.
    pub addr: Addressing,
    /// Destination QPN.
    pub dest_qpn: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// The peer is reached through a TAP interface: it is not a software ConnectX and knows
    /// nothing of the masked-atomic trailer.
    pub foreign: bool,
}

/// The RoCEv2 UDP source port of a flow label (the kernel's `rdma_flow_label_to_udp_sport`:
/// fold the high 6 bits of the 20-bit label into the low 14 and set the top two bits, so the
/// port lies in 0xC000..=0xFFFF, IBTA Annex A17.3.2).
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = fl & 0x03fff;
    let high = fl & 0xfc000;
    ((low ^ (high >> 14)) | 0xc000) as u16
}

/// The flow label of a connection without one (the kernel's `rdma_calc_flow_label`: a hash of
/// the two QPNs, so each connection gets its own UDP source port).
pub fn flow_label_of_qpns(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}
