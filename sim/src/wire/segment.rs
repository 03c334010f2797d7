//! Splitting a message into packets: which opcode each packet carries and which bytes of the
//! message it holds.
//!
//! IBTA Vol 1 §9.4 (packet sequencing of SEND, RDMA WRITE and RDMA READ): every packet but the
//! last carries exactly one path MTU of payload, the last carries the rest (1..=MTU bytes); a
//! message that fits one packet, including a zero-length one, is a single "only" packet.
//! Immediate data and invalidate ride on the last (or only) packet, the RETH on the first (or
//! only) WRITE packet. A READ request consumes one PSN per response packet (§9.4.4), so
//! [`packet_count`] is also the PSN span of a READ. UD messages are one packet (§9.8.3).

use mlx5_hw::Mtu;

use super::opcode::{Opcode, Operation, Transport};

/// What a message is, for segmentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendWithImmediate,
    /// SEND with invalidate (RC only).
    SendWithInvalidate,
    /// RDMA WRITE (RC, UC).
    RdmaWrite,
    /// RDMA WRITE with immediate (RC, UC).
    RdmaWriteWithImmediate,
    /// The responses to an RDMA READ request (RC only).
    ReadResponse,
}

/// Why a message cannot be segmented.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// The transport does not carry this kind of message (UD has only SEND and SEND with
    /// immediate; UC has no READ and no SEND with invalidate; IBTA Vol 1 Table 38).
    #[error("{transport:?} does not carry {kind:?} messages")]
    Unsupported {
        /// The transport.
        transport: Transport,
        /// The message kind.
        kind: MessageKind,
    },
    /// A UD message longer than the path MTU (UD messages are one packet, IBTA §9.8.3).
    #[error("a {len}-byte UD message exceeds the {mtu}-byte MTU")]
    UdTooLong {
        /// Message length.
        len: u32,
        /// MTU in bytes.
        mtu: u32,
    },
}

/// One packet of a segmented message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The packet's opcode.
    pub opcode: Opcode,
    /// Index of the packet in the message (its PSN is the message's first PSN plus `index`).
    pub index: u32,
    /// Offset of the packet's payload within the message.
    pub offset: u32,
    /// Payload length.
    pub len: u32,
}

/// Number of packets of a `len`-byte message at this path MTU: `ceil(len / mtu)`, and 1 for an
/// empty message.
pub fn packet_count(len: u32, mtu: Mtu) -> u32 {
    len.div_ceil(mtu.bytes()).max(1)
}

/// The packets of a message, in order, as an iterator of [`Segment`]s (allocation-free).
#[derive(Clone, Debug)]
pub struct Segments {
    /// Opcodes for the first, middle, last and only packet.
    first: Opcode,
    middle: Opcode,
    last: Opcode,
    only: Opcode,
    len: u32,
    mtu: u32,
    count: u32,
    next: u32,
}

/// The (first, middle, last, only) operations of a message kind.
fn operations(kind: MessageKind) -> [Operation; 4] {
    use Operation::*;
    match kind {
        MessageKind::Send => [SendFirst, SendMiddle, SendLast, SendOnly],
        MessageKind::SendWithImmediate => [
            SendFirst,
            SendMiddle,
            SendLastWithImmediate,
            SendOnlyWithImmediate,
        ],
        MessageKind::SendWithInvalidate => [
            SendFirst,
            SendMiddle,
            SendLastWithInvalidate,
            SendOnlyWithInvalidate,
        ],
        MessageKind::RdmaWrite => [
            RdmaWriteFirst,
            RdmaWriteMiddle,
            RdmaWriteLast,
            RdmaWriteOnly,
        ],
        MessageKind::RdmaWriteWithImmediate => [
            RdmaWriteFirst,
            RdmaWriteMiddle,
            RdmaWriteLastWithImmediate,
            RdmaWriteOnlyWithImmediate,
        ],
        MessageKind::ReadResponse => [
            RdmaReadResponseFirst,
            RdmaReadResponseMiddle,
            RdmaReadResponseLast,
            RdmaReadResponseOnly,
        ],
    }
}

/// Segments a `len`-byte message of `kind` on `transport` at path MTU `mtu`.
pub fn segment(
    transport: Transport,
    kind: MessageKind,
    len: u32,
    mtu: Mtu,
) -> Result<Segments, SegmentError> {
    let unsupported = SegmentError::Unsupported { transport, kind };
    let [first, middle, last, only] = operations(kind);
    let only = Opcode::new(transport, only).ok_or(unsupported.clone())?;
    let mtu_bytes = mtu.bytes();
    let count = packet_count(len, mtu);
    let (first, middle, last) = if count == 1 {
        // UD has no first/middle/last opcodes; a one-packet message never uses them.
        (only, only, only)
    } else if transport == Transport::Ud {
        return Err(SegmentError::UdTooLong {
            len,
            mtu: mtu_bytes,
        });
    } else {
        (
            Opcode::new(transport, first).ok_or(unsupported.clone())?,
            Opcode::new(transport, middle).ok_or(unsupported.clone())?,
            Opcode::new(transport, last).ok_or(unsupported)?,
        )
    };
    Ok(Segments {
        first,
        middle,
        last,
        only,
        len,
        mtu: mtu_bytes,
        count,
        next: 0,
    })
}

impl Segments {
    /// Number of packets of the message.
    pub fn count_packets(&self) -> u32 {
        self.count
    }
}

impl Iterator for Segments {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if self.next >= self.count {
            return None;
        }
        let index = self.next;
        self.next += 1;
        let offset = index * self.mtu;
        let opcode = match (index == 0, index + 1 == self.count) {
            (true, true) => self.only,
            (true, false) => self.first,
            (false, false) => self.middle,
            (false, true) => self.last,
        };
        let len = (self.len - offset).min(self.mtu);
        Some(Segment {
            opcode,
            index,
            offset,
            len,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.count - self.next) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Segments {}
