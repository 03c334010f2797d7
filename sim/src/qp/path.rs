//! Where a connected QP's packets go (its path, resolved at RTR) and the frames the transport
//! puts on the fabric.

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
