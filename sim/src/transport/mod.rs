//! The InfiniBand transport between QPs of the fabric: messages travel as RoCEv2 packets
//! ([`crate::wire::Packet`]: BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, DETH), segmented
//! by the path MTU, with RC PSNs, ACK/NAK and MSNs (IBTA Vol 1 chapter 9).
//!
//! - [`requester`]: executes send WQEs into packets, keeps the outstanding requests and
//!   completes them from ACKs, READ responses and atomic ACKs; ACK timeout and RNR retry.
//! - [`responder`]: checks PSNs, consumes receive WQEs, scatters, executes WRITE / READ /
//!   atomics with memory checks, and answers with ACK / NAK / responses.
//! - [`xrc`] and [`dc`]: XRC and the Dynamically Connected transport on RC's machinery.
//!
//! Masked (extended) atomics: the ConnectX wire encoding of extended atomics is not public, so
//! the software ConnectX sends them as CmpSwap / FetchAdd packets and carries the masked
//! operands in a trailer after the IPv4 datagram ([`ext_atomic`]); inside the device they ride
//! beside the packet ([`Frame::ext`], defined with the QP state in [`crate::qp::path`]).

pub mod dc;
pub mod ext_atomic;
pub mod requester;
pub mod responder;
pub mod xrc;

pub use crate::qp::path::{Frame, Path};

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
