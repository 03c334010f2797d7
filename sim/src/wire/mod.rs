//! RoCEv2 wire formats (Ethernet, IPv4, UDP 4791, BTH and extension headers, ICRC).
//!
//! - [`packet`]: the parsed representation ([`Packet`], [`Bth`], the extension headers,
//!   [`Addressing`]);
//! - [`opcode`]: BTH opcodes and what each carries;
//! - [`psn`]: 24-bit PSN arithmetic and the responder's PSN windows;
//! - [`timer`]: the RNR NAK timer and local ACK timeout encodings;
//! - [`transport`]: byte layouts of the BTH and the extension headers;
//! - [`ethernet`], [`ipv4`], [`udp`]: the outer headers;
//! - [`icrc`](mod@icrc): the RoCEv2 invariant CRC;
//! - [`frame`]: whole frames ([`Packet::emit`], [`Packet::parse`]);
//! - [`segment`](mod@segment): splitting a message into packets at the path MTU;
//! - [`dc`](mod@dc): the DC Extended Transport Header (the software ConnectX's own);
//! - [`error`]: parse and emit errors.
//!
//! The layering follows smoltcp's `wire` module: plain representations, and `emit`/`parse`
//! functions with the exact byte offsets, each offset cited to the spec.

pub mod dc;
pub mod error;
pub mod ethernet;
pub mod frame;
pub mod icrc;
pub mod ipv4;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod segment;
pub mod timer;
pub mod transport;
pub mod udp;

pub use dc::Dceth;
pub use error::{EmitError, Layer, ParseError};
pub use frame::{BTH_OFFSET, FRAME_OVERHEAD, IPV4_OFFSET, UDP_OFFSET};
pub use icrc::{icrc, ICRC_LEN};
pub use opcode::{Opcode, Operation, Position, Transport};
pub use packet::{
    gid_to_ipv4, ipv4_to_gid, Addressing, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Ecn, Ieth,
    ImmDt, MacAddr, NakCode, Packet, Reth, Syndrome, Xrceth, ACK_CREDITS, DEFAULT_PKEY,
};
pub use psn::{Psn, PsnWindow};
pub use segment::{packet_count, segment, MessageKind, Segment, SegmentError, Segments};
pub use timer::{local_ack_timeout, RnrTimer, RNR_TIMER_MICROS};
pub use transport::WireHeader;
pub use udp::ROCEV2_PORT;
