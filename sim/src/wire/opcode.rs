//! The 8-bit BTH opcode: a 3-bit transport service and a 5-bit operation.
//!
//! Source: IBTA Vol 1 §9.2 and Table 38 "OpCode field"; the same values are in the Linux kernel's
//! `include/rdma/ib_pack.h` (`IB_OPCODE_*`) and Wireshark's `packet-infiniband.c`.

use core::fmt;

/// The transport service: the top 3 bits of the BTH opcode (IBTA Vol 1 Table 38).
///
/// Reliable Datagram (0x40) is not modelled (ConnectX does not implement RD), so its opcodes are
/// rejected by [`Opcode::from_u8`]. XRC (0xA0) has every operation of RC (IBTA Vol 1 Annex A14
/// "Extended Reliable Connected Transport Service", its opcode table; Wireshark
/// `packet-infiniband.c` `XRC_*`). DC (0xC0) is the software ConnectX's own encoding of the
/// Dynamically Connected transport in the manufacturer-specific range ([`crate::wire::dc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Transport {
    /// Reliable Connection, opcode bits `000` (0x00).
    Rc = 0x00,
    /// Unreliable Connection, opcode bits `001` (0x20).
    Uc = 0x20,
    /// Unreliable Datagram, opcode bits `011` (0x60).
    Ud = 0x60,
    /// Extended Reliable Connection, opcode bits `101` (0xA0; IBTA Annex A14).
    Xrc = 0xa0,
    /// Dynamically Connected, opcode bits `110` (0xC0): IBTA Vol 1 Table 38 leaves `110xxxxx`
    /// to manufacturers; this encoding is the software ConnectX's own ([`crate::wire::dc`]).
    Dc = 0xc0,
}

/// The operation: the low 5 bits of the BTH opcode (IBTA Vol 1 Table 38).
///
/// `0x15` (RESYNC) exists only for RD and is not modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Operation {
    /// SEND First (0x00).
    SendFirst = 0x00,
    /// SEND Middle (0x01).
    SendMiddle = 0x01,
    /// SEND Last (0x02).
    SendLast = 0x02,
    /// SEND Last with Immediate (0x03).
    SendLastWithImmediate = 0x03,
    /// SEND Only (0x04).
    SendOnly = 0x04,
    /// SEND Only with Immediate (0x05).
    SendOnlyWithImmediate = 0x05,
    /// RDMA WRITE First (0x06).
    RdmaWriteFirst = 0x06,
    /// RDMA WRITE Middle (0x07).
    RdmaWriteMiddle = 0x07,
    /// RDMA WRITE Last (0x08).
    RdmaWriteLast = 0x08,
    /// RDMA WRITE Last with Immediate (0x09).
    RdmaWriteLastWithImmediate = 0x09,
    /// RDMA WRITE Only (0x0a).
    RdmaWriteOnly = 0x0a,
    /// RDMA WRITE Only with Immediate (0x0b).
    RdmaWriteOnlyWithImmediate = 0x0b,
    /// RDMA READ Request (0x0c).
    RdmaReadRequest = 0x0c,
    /// RDMA READ Response First (0x0d).
    RdmaReadResponseFirst = 0x0d,
    /// RDMA READ Response Middle (0x0e).
    RdmaReadResponseMiddle = 0x0e,
    /// RDMA READ Response Last (0x0f).
    RdmaReadResponseLast = 0x0f,
    /// RDMA READ Response Only (0x10).
    RdmaReadResponseOnly = 0x10,
    /// Acknowledge (0x11).
    Acknowledge = 0x11,
    /// ATOMIC Acknowledge (0x12).
    AtomicAcknowledge = 0x12,
    /// CmpSwap (0x13).
    CompareSwap = 0x13,
    /// FetchAdd (0x14).
    FetchAdd = 0x14,
    /// SEND Last with Invalidate (0x16).
    SendLastWithInvalidate = 0x16,
    /// SEND Only with Invalidate (0x17).
    SendOnlyWithInvalidate = 0x17,
    /// DC disconnect request (0x1F, with [`Transport::Dc`] only): no IBTA operation; the
    /// software ConnectX's own ([`crate::wire::dc`]).
    DcDisconnect = 0x1f,
}

/// Where a packet sits in its message (IBTA Vol 1 §9.4: first, middle, last or only packet).
///
/// Single-packet operations (READ request, atomics, ACKs) are [`Position::Only`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last packet of a multi-packet message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The only packet of its message.
    Only,
}

impl Position {
    /// True for the packet that starts a message ([`First`](Self::First) or
    /// [`Only`](Self::Only)).
    pub const fn starts_message(self) -> bool {
        matches!(self, Self::First | Self::Only)
    }

    /// True for the packet that ends a message ([`Last`](Self::Last) or [`Only`](Self::Only)).
    pub const fn ends_message(self) -> bool {
        matches!(self, Self::Last | Self::Only)
    }
}

impl Operation {
    /// The operation encoded by the low 5 bits of `bits`, if it is one IBTA defines for RC/UC/UD.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        use Operation::*;
        Some(match bits & 0x1f {
            0x00 => SendFirst,
            0x01 => SendMiddle,
            0x02 => SendLast,
            0x03 => SendLastWithImmediate,
            0x04 => SendOnly,
            0x05 => SendOnlyWithImmediate,
            0x06 => RdmaWriteFirst,
            0x07 => RdmaWriteMiddle,
            0x08 => RdmaWriteLast,
            0x09 => RdmaWriteLastWithImmediate,
            0x0a => RdmaWriteOnly,
            0x0b => RdmaWriteOnlyWithImmediate,
            0x0c => RdmaReadRequest,
            0x0d => RdmaReadResponseFirst,
            0x0e => RdmaReadResponseMiddle,
            0x0f => RdmaReadResponseLast,
            0x10 => RdmaReadResponseOnly,
            0x11 => Acknowledge,
            0x12 => AtomicAcknowledge,
            0x13 => CompareSwap,
            0x14 => FetchAdd,
            0x16 => SendLastWithInvalidate,
            0x17 => SendOnlyWithInvalidate,
            0x1f => DcDisconnect,
            _ => return None,
        })
    }

    /// The position of a packet carrying this operation within its message.
    pub const fn position(self) -> Position {
        use Operation::*;
        match self {
            SendFirst | RdmaWriteFirst | RdmaReadResponseFirst => Position::First,
            SendMiddle | RdmaWriteMiddle | RdmaReadResponseMiddle => Position::Middle,
            SendLast
            | SendLastWithImmediate
            | SendLastWithInvalidate
            | RdmaWriteLast
            | RdmaWriteLastWithImmediate
            | RdmaReadResponseLast => Position::Last,
            SendOnly
            | SendOnlyWithImmediate
            | SendOnlyWithInvalidate
            | RdmaWriteOnly
            | RdmaWriteOnlyWithImmediate
            | RdmaReadRequest
            | RdmaReadResponseOnly
            | Acknowledge
            | AtomicAcknowledge
            | CompareSwap
            | FetchAdd
            | DcDisconnect => Position::Only,
        }
    }

    /// A SEND packet (any position, with or without immediate or invalidate).
    pub const fn is_send(self) -> bool {
        (self as u8) <= 0x05
            || matches!(
                self,
                Self::SendLastWithInvalidate | Self::SendOnlyWithInvalidate
            )
    }

    /// An RDMA WRITE packet (any position, with or without immediate).
    pub const fn is_rdma_write(self) -> bool {
        matches!(self as u8, 0x06..=0x0b)
    }

    /// An RDMA READ response packet (any position).
    pub const fn is_read_response(self) -> bool {
        matches!(self as u8, 0x0d..=0x10)
    }

    /// An atomic request (CmpSwap or FetchAdd).
    pub const fn is_atomic(self) -> bool {
        matches!(self, Self::CompareSwap | Self::FetchAdd)
    }

    /// Sent by the responder: READ responses, Acknowledge and ATOMIC Acknowledge.
    pub const fn is_response(self) -> bool {
        self.is_read_response() || matches!(self, Self::Acknowledge | Self::AtomicAcknowledge)
    }

    /// Sent by the requester: everything that is not a response.
    pub const fn is_request(self) -> bool {
        !self.is_response()
    }

    /// Carries an RDMA Extended Transport Header: the first (or only) packet of a WRITE, and the
    /// READ request (IBTA Vol 1 §9.3.3, Table 38).
    pub const fn has_reth(self) -> bool {
        matches!(
            self,
            Self::RdmaWriteFirst
                | Self::RdmaWriteOnly
                | Self::RdmaWriteOnlyWithImmediate
                | Self::RdmaReadRequest
        )
    }

    /// Carries an ACK Extended Transport Header: ACK, ATOMIC ACK and the READ response packets
    /// other than Middle (IBTA Vol 1 §9.3.5, Table 38).
    pub const fn has_aeth(self) -> bool {
        matches!(
            self,
            Self::RdmaReadResponseFirst
                | Self::RdmaReadResponseLast
                | Self::RdmaReadResponseOnly
                | Self::Acknowledge
                | Self::AtomicAcknowledge
        )
    }

    /// Carries an Atomic Extended Transport Header (CmpSwap, FetchAdd; IBTA Vol 1 §9.3.4).
    pub const fn has_atomic_eth(self) -> bool {
        self.is_atomic()
    }

    /// Carries an Atomic ACK Extended Transport Header (ATOMIC Acknowledge; IBTA §9.3.6).
    pub const fn has_atomic_ack_eth(self) -> bool {
        matches!(self, Self::AtomicAcknowledge)
    }

    /// Carries Immediate Data: the last (or only) packet of SEND/WRITE with immediate
    /// (IBTA Vol 1 §9.3.7).
    pub const fn has_immediate(self) -> bool {
        matches!(
            self,
            Self::SendLastWithImmediate
                | Self::SendOnlyWithImmediate
                | Self::RdmaWriteLastWithImmediate
                | Self::RdmaWriteOnlyWithImmediate
        )
    }

    /// Carries an Invalidate Extended Transport Header: the last (or only) packet of SEND with
    /// invalidate (IBTA Vol 1 §9.3.8).
    pub const fn has_ieth(self) -> bool {
        matches!(
            self,
            Self::SendLastWithInvalidate | Self::SendOnlyWithInvalidate
        )
    }

    /// Carries a payload (possibly empty): SEND, WRITE and READ response packets. READ
    /// requests, atomics and acknowledgements carry none (IBTA Vol 1 Table 38).
    pub const fn has_payload(self) -> bool {
        self.is_send() || self.is_rdma_write() || self.is_read_response()
    }
}

/// A BTH opcode that the software ConnectX understands: a valid (transport, operation) pair.
///
/// The pair is checked on construction, so every `Opcode` value is one of the associated
/// constants (`Opcode::RC_SEND_ONLY`, ...) and can be matched on them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode {
    transport: Transport,
    operation: Operation,
}

macro_rules! opcodes {
    ($($name:ident = $t:ident, $op:ident;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (IBTA Vol 1 Table 38).")]
                pub const $name: Opcode = Opcode { transport: Transport::$t, operation: Operation::$op };
            )*
        }
    };
}

opcodes! {
    RC_SEND_FIRST = Rc, SendFirst;
    RC_SEND_MIDDLE = Rc, SendMiddle;
    RC_SEND_LAST = Rc, SendLast;
    RC_SEND_LAST_WITH_IMMEDIATE = Rc, SendLastWithImmediate;
    RC_SEND_ONLY = Rc, SendOnly;
    RC_SEND_ONLY_WITH_IMMEDIATE = Rc, SendOnlyWithImmediate;
    RC_RDMA_WRITE_FIRST = Rc, RdmaWriteFirst;
    RC_RDMA_WRITE_MIDDLE = Rc, RdmaWriteMiddle;
    RC_RDMA_WRITE_LAST = Rc, RdmaWriteLast;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = Rc, RdmaWriteLastWithImmediate;
    RC_RDMA_WRITE_ONLY = Rc, RdmaWriteOnly;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = Rc, RdmaWriteOnlyWithImmediate;
    RC_RDMA_READ_REQUEST = Rc, RdmaReadRequest;
    RC_RDMA_READ_RESPONSE_FIRST = Rc, RdmaReadResponseFirst;
    RC_RDMA_READ_RESPONSE_MIDDLE = Rc, RdmaReadResponseMiddle;
    RC_RDMA_READ_RESPONSE_LAST = Rc, RdmaReadResponseLast;
    RC_RDMA_READ_RESPONSE_ONLY = Rc, RdmaReadResponseOnly;
    RC_ACKNOWLEDGE = Rc, Acknowledge;
    RC_ATOMIC_ACKNOWLEDGE = Rc, AtomicAcknowledge;
    RC_COMPARE_SWAP = Rc, CompareSwap;
    RC_FETCH_ADD = Rc, FetchAdd;
    RC_SEND_LAST_WITH_INVALIDATE = Rc, SendLastWithInvalidate;
    RC_SEND_ONLY_WITH_INVALIDATE = Rc, SendOnlyWithInvalidate;
    UC_SEND_FIRST = Uc, SendFirst;
    UC_SEND_MIDDLE = Uc, SendMiddle;
    UC_SEND_LAST = Uc, SendLast;
    UC_SEND_LAST_WITH_IMMEDIATE = Uc, SendLastWithImmediate;
    UC_SEND_ONLY = Uc, SendOnly;
    UC_SEND_ONLY_WITH_IMMEDIATE = Uc, SendOnlyWithImmediate;
    UC_RDMA_WRITE_FIRST = Uc, RdmaWriteFirst;
    UC_RDMA_WRITE_MIDDLE = Uc, RdmaWriteMiddle;
    UC_RDMA_WRITE_LAST = Uc, RdmaWriteLast;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = Uc, RdmaWriteLastWithImmediate;
    UC_RDMA_WRITE_ONLY = Uc, RdmaWriteOnly;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = Uc, RdmaWriteOnlyWithImmediate;
    UD_SEND_ONLY = Ud, SendOnly;
    UD_SEND_ONLY_WITH_IMMEDIATE = Ud, SendOnlyWithImmediate;
}

impl Opcode {
    /// The opcode for `operation` on `transport`, if IBTA defines that pair: UC has only SEND
    /// and RDMA WRITE (without invalidate), UD only SEND Only (with or without immediate)
    /// (IBTA Vol 1 Table 38; `include/rdma/ib_pack.h`).
    pub const fn new(transport: Transport, operation: Operation) -> Option<Self> {
        let disconnect = matches!(operation, Operation::DcDisconnect);
        let valid = match transport {
            Transport::Dc => true,
            _ if disconnect => false,
            Transport::Rc | Transport::Xrc => true,
            Transport::Uc => (operation as u8) <= 0x0b,
            Transport::Ud => {
                matches!(
                    operation,
                    Operation::SendOnly | Operation::SendOnlyWithImmediate
                )
            }
        };
        if valid {
            Some(Self {
                transport,
                operation,
            })
        } else {
            None
        }
    }

    /// Decodes a BTH opcode byte; `None` for reserved, RD, XRC, CNP and vendor opcodes.
    pub const fn from_u8(byte: u8) -> Option<Self> {
        let transport = match byte & 0xe0 {
            0x00 => Transport::Rc,
            0x20 => Transport::Uc,
            0x60 => Transport::Ud,
            0xa0 => Transport::Xrc,
            0xc0 => Transport::Dc,
            _ => return None,
        };
        match Operation::from_bits(byte) {
            Some(operation) => Self::new(transport, operation),
            None => None,
        }
    }

    /// The opcode byte as carried in the BTH.
    pub const fn as_u8(self) -> u8 {
        self.transport as u8 | self.operation as u8
    }

    /// The transport service (top 3 bits).
    pub const fn transport(self) -> Transport {
        self.transport
    }

    /// The operation (low 5 bits).
    pub const fn operation(self) -> Operation {
        self.operation
    }

    /// See [`Operation::position`].
    pub const fn position(self) -> Position {
        self.operation.position()
    }

    /// See [`Operation::is_send`].
    pub const fn is_send(self) -> bool {
        self.operation.is_send()
    }

    /// See [`Operation::is_rdma_write`].
    pub const fn is_rdma_write(self) -> bool {
        self.operation.is_rdma_write()
    }

    /// See [`Operation::is_read_response`].
    pub const fn is_read_response(self) -> bool {
        self.operation.is_read_response()
    }

    /// See [`Operation::is_atomic`].
    pub const fn is_atomic(self) -> bool {
        self.operation.is_atomic()
    }

    /// See [`Operation::is_request`].
    pub const fn is_request(self) -> bool {
        self.operation.is_request()
    }

    /// See [`Operation::is_response`].
    pub const fn is_response(self) -> bool {
        self.operation.is_response()
    }

    /// See [`Operation::has_reth`].
    pub const fn has_reth(self) -> bool {
        self.operation.has_reth()
    }

    /// See [`Operation::has_aeth`].
    pub const fn has_aeth(self) -> bool {
        self.operation.has_aeth()
    }

    /// See [`Operation::has_atomic_eth`].
    pub const fn has_atomic_eth(self) -> bool {
        self.operation.has_atomic_eth()
    }

    /// See [`Operation::has_atomic_ack_eth`].
    pub const fn has_atomic_ack_eth(self) -> bool {
        self.operation.has_atomic_ack_eth()
    }

    /// See [`Operation::has_immediate`].
    pub const fn has_immediate(self) -> bool {
        self.operation.has_immediate()
    }

    /// See [`Operation::has_ieth`].
    pub const fn has_ieth(self) -> bool {
        self.operation.has_ieth()
    }

    /// Carries a Datagram Extended Transport Header: every UD packet (IBTA Vol 1 §9.3.2).
    pub const fn has_deth(self) -> bool {
        matches!(self.transport, Transport::Ud)
    }

    /// Carries an XRC Extended Transport Header (the target XRC SRQ): every XRC request
    /// packet, none of the responses (IBTA Annex A14, XRCETH).
    pub const fn has_xrceth(self) -> bool {
        matches!(self.transport, Transport::Xrc) && self.operation.is_request()
    }

    /// Whether the packet carries a DCETH ([`crate::wire::dc::Dceth`]): every DC request,
    /// the disconnect included.
    pub const fn has_dceth(self) -> bool {
        matches!(self.transport, Transport::Dc) && self.operation.is_request()
    }

    /// See [`Operation::has_payload`].
    pub const fn has_payload(self) -> bool {
        self.operation.has_payload()
    }

    /// True for the first or only packet of a message.
    pub const fn is_first(self) -> bool {
        self.position().starts_message()
    }

    /// True for a middle packet.
    pub const fn is_middle(self) -> bool {
        matches!(self.position(), Position::Middle)
    }

    /// True for the last or only packet of a message.
    pub const fn is_last(self) -> bool {
        self.position().ends_message()
    }

    /// True for the only packet of a message.
    pub const fn is_only(self) -> bool {
        matches!(self.position(), Position::Only)
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}_{:?}({:#04x})",
            self.transport,
            self.operation,
            self.as_u8()
        )
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl TryFrom<u8> for Opcode {
    type Error = u8;

    /// Decodes an opcode byte; the error is the byte that is not a supported opcode.
    fn try_from(byte: u8) -> Result<Self, u8> {
        Self::from_u8(byte).ok_or(byte)
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op.as_u8()
    }
}
