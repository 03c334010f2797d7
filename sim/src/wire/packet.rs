//! The parsed representation of a RoCEv2 packet: the Base Transport Header, the extension
//! headers, the payload and the Ethernet/IPv4/UDP addressing it travels with.
//!
//! These are plain values; their byte layouts are in [`super::transport`] (transport headers)
//! and [`super::frame`] (the whole frame). Field meanings: IBTA Vol 1 §9.2 (BTH), §9.3 (extension
//! headers), Annex A17 (RoCEv2).

use core::fmt;
use std::net::Ipv4Addr;

use super::error::EmitError;
use super::opcode::Opcode;
use super::psn::Psn;
use super::timer::RnrTimer;

/// The default partition key, full membership (IBTA Vol 1 §10.9; the kernel's
/// `IB_DEFAULT_PKEY_FULL` in `include/rdma/ib_mad.h`).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// Base Transport Header (12 bytes, IBTA Vol 1 §9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bth {
    /// Opcode (byte 0).
    pub opcode: Opcode,
    /// Solicited Event (SE): the responder raises a solicited completion event.
    pub solicited: bool,
    /// Migration request (M): the APM state (IBTA §17.2.8); 1 when migrated.
    pub migreq: bool,
    /// Pad count (0..=3): bytes appended to the payload to make it a multiple of 4.
    /// [`Packet::emit`](super::Packet) derives it from the payload length; parse reports the
    /// received value.
    pub pad_count: u8,
    /// Transport header version (4 bits); 0 for this version of the spec.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN notification (RoCEv2 congestion management, IBTA Annex A17: the top bit of
    /// BTH byte 4; `BTH_FECN_MASK` in the kernel's `rxe_hdr.h`).
    pub fecn: bool,
    /// Backward ECN notification (the second bit of that byte, `BTH_BECN_MASK`).
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request (A): the requester asks for an ACK of this packet.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: Psn,
}

impl Bth {
    /// Encoded length.
    pub const LEN: usize = 12;

    /// A BTH with the default partition key and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Self {
        Self {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }
}

/// RDMA Extended Transport Header (16 bytes, IBTA Vol 1 §9.3.3): the remote buffer of a WRITE
/// (first or only packet) or a READ request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole message in bytes (not of this packet).
    pub dma_len: u32,
}

impl Reth {
    /// Encoded length.
    pub const LEN: usize = 16;
}

/// The NAK codes of an AETH syndrome `011xxxxx` (IBTA Vol 1 §9.3.5 and §9.7.5.2; the kernel's
/// `AETH_NAK_*` in `drivers/infiniband/sw/rxe/rxe_hdr.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    /// PSN sequence error: the responder expected an earlier PSN; the requester retransmits
    /// from the PSN in the NAK.
    PsnSequenceError = 0,
    /// Invalid request (unsupported opcode, length error, ...).
    InvalidRequest = 1,
    /// Remote access error (R_Key, bounds or access rights violation).
    RemoteAccessError = 2,
    /// Remote operational error (the responder could not complete the request).
    RemoteOperationalError = 3,
    /// Invalid RD request (Reliable Datagram only).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code for the low 5 bits of a NAK syndrome; `None` for reserved codes (5..=31).
    pub const fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits & 0x1f {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// End-to-end flow-control credits for each 5-bit credit code of an ACK syndrome; code 31 is
/// "invalid credit count", which responders without end-to-end flow control (an SRQ) send
/// (IBTA Vol 1 §9.3.5; the kernel's `credit_table` and `rvt_compute_aeth` in
/// `drivers/infiniband/sw/rdmavt/rc.c`).
pub const ACK_CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1_024, 1_536,
    2_048, 3_072, 4_096, 6_144, 8_192, 12_288, 16_384, 24_576, 32_768,
];

/// The decoded 8-bit AETH syndrome (IBTA Vol 1 §9.3.5): bit 7 reserved (0), bits 6..5
/// the kind (00 ACK, 01 RNR NAK, 10 reserved, 11 NAK), bits 4..0 the kind's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK carrying a 5-bit end-to-end credit code ([`Syndrome::CREDITS_INVALID`] when the
    /// responder does not do end-to-end flow control, e.g. with an SRQ).
    Ack {
        /// Credit code (0..=31), see [`ACK_CREDITS`].
        credits: u8,
    },
    /// Receiver Not Ready NAK carrying the minimum time to wait before retrying.
    RnrNak(RnrTimer),
    /// NAK with an error code.
    Nak(NakCode),
}

impl Syndrome {
    /// The credit code meaning "invalid credit count" (`IB_AETH_CREDIT_INVAL` in the kernel's
    /// `include/rdma/ib_hdrs.h`).
    pub const CREDITS_INVALID: u8 = 0x1f;

    /// Decodes a syndrome byte; `None` for reserved syndromes (bit 7 set, kind `10`, or a
    /// reserved NAK code).
    pub const fn from_u8(byte: u8) -> Option<Self> {
        match byte >> 5 {
            0b000 => Some(Self::Ack {
                credits: byte & 0x1f,
            }),
            0b001 => Some(Self::RnrNak(RnrTimer::from_low_bits(byte))),
            0b011 => match NakCode::from_bits(byte) {
                Some(code) => Some(Self::Nak(code)),
                None => None,
            },
            _ => None,
        }
    }

    /// Encodes the syndrome byte (an out-of-range credit code is truncated to 5 bits).
    pub const fn to_u8(self) -> u8 {
        match self {
            Self::Ack { credits } => credits & 0x1f,
            Self::RnrNak(timer) => 0x20 | timer.code(),
            Self::Nak(code) => 0x60 | code as u8,
        }
    }

    /// True for an ACK (not a NAK of either kind).
    pub const fn is_ack(self) -> bool {
        matches!(self, Self::Ack { .. })
    }

    /// The number of credits of an ACK; `None` for NAKs and for the invalid credit code.
    pub const fn credit_count(self) -> Option<u32> {
        match self {
            Self::Ack { credits } if (credits as usize) < ACK_CREDITS.len() => {
                Some(ACK_CREDITS[credits as usize])
            }
            _ => None,
        }
    }
}

/// ACK Extended Transport Header (4 bytes, IBTA Vol 1 §9.3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// The syndrome: ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits): the number of the last completed request message.
    pub msn: u32,
}

impl Aeth {
    /// Encoded length.
    pub const LEN: usize = 4;
}

/// Atomic Extended Transport Header (28 bytes, IBTA Vol 1 §9.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// The swap value (CmpSwap) or the addend (FetchAdd).
    pub swap_add: u64,
    /// The compare value (CmpSwap; ignored by FetchAdd).
    pub compare: u64,
}

impl AtomicEth {
    /// Encoded length.
    pub const LEN: usize = 28;
}

/// Atomic ACK Extended Transport Header (8 bytes, IBTA Vol 1 §9.3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEth {
    /// The original value at the remote address before the atomic executed.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Encoded length.
    pub const LEN: usize = 8;
}

/// Immediate Data (4 bytes, IBTA Vol 1 §9.3.7).
///
/// The value is the 4 wire bytes read big-endian. Verbs' `imm_data` is already in network order,
/// so `ImmDt(u32::from_be(wr.imm_data))` carries it, and `ImmDt(x).0.to_be_bytes()` are the
/// bytes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ImmDt(pub u32);

impl ImmDt {
    /// Encoded length.
    pub const LEN: usize = 4;
}

/// Invalidate Extended Transport Header (4 bytes, IBTA Vol 1 §9.3.8): the R_Key the responder
/// invalidates on SEND with invalidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ieth {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Encoded length.
    pub const LEN: usize = 4;
}

/// Datagram Extended Transport Header (8 bytes, IBTA Vol 1 §9.3.2), on every UD packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Deth {
    /// Queue key, checked against the destination QP's Q_Key.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Encoded length.
    pub const LEN: usize = 8;
}

/// XRC Extended Transport Header (4 bytes, IBTA Annex A14): 8 reserved bits and the 24-bit
/// number of the XRC SRQ the request is for; right after the BTH of every XRC request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Xrceth {
    /// XRC SRQ number (24 bits).
    pub srqn: u32,
}

impl Xrceth {
    /// Encoded length.
    pub const LEN: usize = 4;
}

/// A 48-bit Ethernet MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// The 2-bit ECN field of the IPv4 TOS byte (RFC 3168 §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Ecn {
    /// Not ECN-capable transport (00).
    #[default]
    NotEct = 0b00,
    /// ECN-capable transport, ECT(1) (01).
    Ect1 = 0b01,
    /// ECN-capable transport, ECT(0) (10).
    Ect0 = 0b10,
    /// Congestion experienced (11).
    Ce = 0b11,
}

impl Ecn {
    /// The ECN codepoint of the low 2 bits of `bits`.
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 0b11 {
            0b00 => Self::NotEct,
            0b01 => Self::Ect1,
            0b10 => Self::Ect0,
            _ => Self::Ce,
        }
    }
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2: the RoCEv2 GID
/// of an IPv4 address, as the kernel's `rdma_gid2ip` reads it); `None` for any other GID.
pub fn gid_to_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    let mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    mapped.then(|| Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

/// The IPv4-mapped GID (`::ffff:a.b.c.d`) of an IPv4 address.
pub fn ipv4_to_gid(addr: Ipv4Addr) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&addr.octets());
    gid
}

/// The Ethernet, IPv4 and UDP fields a RoCEv2 packet travels with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addressing {
    /// Source MAC address.
    pub src_mac: MacAddr,
    /// Destination MAC address.
    pub dst_mac: MacAddr,
    /// Source IPv4 address (from the source GID, see [`gid_to_ipv4`]).
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address (from the destination GID).
    pub dst_ip: Ipv4Addr,
    /// UDP source port: a per-flow entropy value that switches hash for ECMP (IBTA Annex A17;
    /// the kernel's `rdma_get_udp_sport` derives it from the flow label).
    pub udp_src_port: u16,
    /// DSCP, the top 6 bits of the IPv4 TOS byte (the QP's traffic class >> 2).
    pub dscp: u8,
    /// ECN, the low 2 bits of the TOS byte.
    pub ecn: Ecn,
    /// Time to live (the GRH hop limit).
    pub ttl: u8,
    /// IPv4 identification.
    pub ip_id: u16,
}

impl Addressing {
    /// The default TTL, the Linux default `ip_default_ttl` that rxe uses.
    pub const DEFAULT_TTL: u8 = 64;

    /// Addressing between two endpoints with DSCP 0, Not-ECT, TTL 64 and IP id 0.
    pub const fn new(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        src_ip: Ipv4Addr,
        dst_ip: Ipv4Addr,
        udp_src_port: u16,
    ) -> Self {
        Self {
            src_mac,
            dst_mac,
            src_ip,
            dst_ip,
            udp_src_port,
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: Self::DEFAULT_TTL,
            ip_id: 0,
        }
    }

    /// The addressing of the reverse direction (sources and destinations swapped, the same UDP
    /// source port, TOS and TTL), as a responder builds for its ACKs and READ responses.
    pub const fn reversed(&self) -> Self {
        Self {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            ..*self
        }
    }
}

/// A RoCEv2 packet: addressing, BTH, the extension headers its opcode carries, and the payload
/// (without pad and ICRC).
///
/// The extension headers are `Option`s; [`Packet::validate`] (called by emit) checks that exactly
/// those the opcode carries are present (IBTA Vol 1 Table 38), in wire order
/// BTH, XRCETH, DCETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Packet {
    /// Ethernet/IPv4/UDP fields.
    pub addr: Addressing,
    /// Base Transport Header.
    pub bth: Bth,
    /// XRCETH (XRC requests).
    pub xrceth: Option<Xrceth>,
    /// DCETH (DC requests; the software ConnectX's own header, [`crate::wire::dc`]).
    pub dceth: Option<crate::wire::dc::Dceth>,
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// RETH (WRITE first/only, READ request).
    pub reth: Option<Reth>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (ACK, ATOMIC ACK, READ response first/last/only).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data (SEND/WRITE last/only with immediate).
    pub imm: Option<ImmDt>,
    /// IETH (SEND last/only with invalidate).
    pub ieth: Option<Ieth>,
    /// Payload bytes, without pad.
    pub payload: Vec<u8>,
}

fn check_bits(field: &'static str, value: u64, bits: u32) -> Result<(), EmitError> {
    if value >> bits == 0 {
        Ok(())
    } else {
        Err(EmitError::FieldRange { field, value, bits })
    }
}

fn check_header<T>(
    opcode: Opcode,
    header: &'static str,
    wanted: bool,
    present: &Option<T>,
) -> Result<(), EmitError> {
    match (wanted, present.is_some()) {
        (true, false) => Err(EmitError::MissingHeader { opcode, header }),
        (false, true) => Err(EmitError::UnexpectedHeader { opcode, header }),
        _ => Ok(()),
    }
}

impl Packet {
    /// A packet with no extension headers and no payload; set the fields the opcode needs.
    pub const fn new(addr: Addressing, bth: Bth) -> Self {
        Self {
            addr,
            bth,
            xrceth: None,
            dceth: None,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm: None,
            ieth: None,
            payload: Vec::new(),
        }
    }

    /// The pad count the payload needs: `(4 - len % 4) % 4` (IBTA Vol 1 §9.2: payload plus pad
    /// is a multiple of 4 bytes).
    pub const fn pad_for(payload_len: usize) -> u8 {
        (payload_len.wrapping_neg() & 3) as u8
    }

    /// Length of the BTH and the extension headers this packet's opcode carries.
    pub const fn transport_header_len(&self) -> usize {
        let op = self.bth.opcode;
        Bth::LEN
            + if op.has_xrceth() { Xrceth::LEN } else { 0 }
            + if op.has_dceth() {
                crate::wire::dc::Dceth::LEN
            } else {
                0
            }
            + if op.has_deth() { Deth::LEN } else { 0 }
            + if op.has_reth() { Reth::LEN } else { 0 }
            + if op.has_atomic_eth() {
                AtomicEth::LEN
            } else {
                0
            }
            + if op.has_aeth() { Aeth::LEN } else { 0 }
            + if op.has_atomic_ack_eth() {
                AtomicAckEth::LEN
            } else {
                0
            }
            + if op.has_immediate() { ImmDt::LEN } else { 0 }
            + if op.has_ieth() { Ieth::LEN } else { 0 }
    }

    /// Checks that the packet can be emitted: every field fits its wire width and the extension
    /// headers and payload match the opcode.
    pub fn validate(&self) -> Result<(), EmitError> {
        let op = self.bth.opcode;
        check_bits("BTH DestQP", self.bth.dest_qp.into(), 24)?;
        check_bits("BTH TVer", self.bth.tver.into(), 4)?;
        check_bits("IPv4 DSCP", self.addr.dscp.into(), 6)?;
        check_header(op, "XRCETH", op.has_xrceth(), &self.xrceth)?;
        check_header(op, "DCETH", op.has_dceth(), &self.dceth)?;
        check_header(op, "DETH", op.has_deth(), &self.deth)?;
        check_header(op, "RETH", op.has_reth(), &self.reth)?;
        check_header(op, "AtomicETH", op.has_atomic_eth(), &self.atomic_eth)?;
        check_header(op, "AETH", op.has_aeth(), &self.aeth)?;
        check_header(
            op,
            "AtomicAckETH",
            op.has_atomic_ack_eth(),
            &self.atomic_ack_eth,
        )?;
        check_header(op, "ImmDt", op.has_immediate(), &self.imm)?;
        check_header(op, "IETH", op.has_ieth(), &self.ieth)?;
        if let Some(deth) = &self.deth {
            check_bits("DETH SrcQP", deth.src_qp.into(), 24)?;
        }
        if let Some(x) = &self.xrceth {
            check_bits("XRCETH XRCSRQ", x.srqn.into(), 24)?;
        }
        if let Some(d) = &self.dceth {
            check_bits("DCETH DCI", d.dci.into(), 24)?;
        }
        if let Some(aeth) = &self.aeth {
            check_bits("AETH MSN", aeth.msn.into(), 24)?;
            if let Syndrome::Ack { credits } = aeth.syndrome {
                check_bits("AETH credit code", credits.into(), 5)?;
            }
        }
        if !op.has_payload() && !self.payload.is_empty() {
            return Err(EmitError::UnexpectedPayload(op));
        }
        Ok(())
    }
}
