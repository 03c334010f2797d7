//! A whole RoCEv2 frame: Ethernet II, IPv4, UDP to port 4791, the IB transport headers, the
//! payload and its pad, and the ICRC (IBTA Vol 1 Annex A17.3).

use super::error::{EmitError, Layer, ParseError};
use super::ethernet::{EthernetHeader, ETHERTYPE_IPV4};
use super::icrc::{icrc, ICRC_LEN};
use super::ipv4::{Ipv4Header, PROTOCOL_UDP};
use super::packet::{Addressing, Bth, Packet};
use super::transport::WireHeader;
use super::udp::{UdpHeader, ROCEV2_PORT};

/// Offset of the IPv4 header in a frame.
pub const IPV4_OFFSET: usize = EthernetHeader::LEN;
/// Offset of the UDP header in a frame.
pub const UDP_OFFSET: usize = IPV4_OFFSET + Ipv4Header::LEN;
/// Offset of the BTH in a frame.
pub const BTH_OFFSET: usize = UDP_OFFSET + UdpHeader::LEN;
/// Bytes every frame carries besides its transport headers, payload and pad: Ethernet, IPv4 and
/// UDP headers and the ICRC.
pub const FRAME_OVERHEAD: usize = BTH_OFFSET + ICRC_LEN;

/// Appends `header` if the opcode carries it (`validate` has checked presence and absence).
fn emit_opt<H: WireHeader>(header: &Option<H>, out: &mut Vec<u8>) {
    if let Some(h) = header {
        h.emit(out);
    }
}

/// Parses `H` from the front of `buf` if `wanted`, else leaves `buf` alone.
fn parse_opt<H: WireHeader>(wanted: bool, buf: &mut &[u8]) -> Result<Option<H>, ParseError> {
    if !wanted {
        return Ok(None);
    }
    let (h, rest) = H::parse(buf)?;
    *buf = rest;
    Ok(Some(h))
}

impl Packet {
    /// Length of the UDP payload: transport headers, payload, pad and ICRC.
    pub fn udp_payload_len(&self) -> usize {
        let len = self.payload.len();
        self.transport_header_len() + len + usize::from(Self::pad_for(len)) + ICRC_LEN
    }

    /// Length of the whole Ethernet frame (without FCS or padding to the Ethernet minimum).
    pub fn frame_len(&self) -> usize {
        BTH_OFFSET + self.udp_payload_len()
    }

    /// Encodes the frame into a new buffer of exactly [`frame_len`](Self::frame_len) bytes.
    pub fn emit(&self) -> Result<Vec<u8>, EmitError> {
        let mut out = Vec::with_capacity(self.frame_len());
        self.emit_into(&mut out)?;
        Ok(out)
    }

    /// Appends the encoded frame to `out`. The BTH pad count is derived from the payload length
    /// (`self.bth.pad_count` is ignored); UDP checksum is 0, IPv4 has DF set and a correct
    /// header checksum, and the ICRC is computed. On error `out` is unchanged.
    pub fn emit_into(&self, out: &mut Vec<u8>) -> Result<(), EmitError> {
        self.validate()?;
        let udp_len = UdpHeader::LEN + self.udp_payload_len();
        let ip_len = Ipv4Header::LEN + udp_len;
        let total_len =
            u16::try_from(ip_len).map_err(|_| EmitError::TooLong(self.payload.len()))?;
        let a: &Addressing = &self.addr;
        let start = out.len();
        out.reserve(self.frame_len());

        EthernetHeader {
            dst: a.dst_mac,
            src: a.src_mac,
            ethertype: ETHERTYPE_IPV4,
        }
        .emit(out);
        Ipv4Header {
            dscp: a.dscp,
            ecn: a.ecn,
            total_len,
            id: a.ip_id,
            dont_fragment: true,
            ttl: a.ttl,
            protocol: PROTOCOL_UDP,
            src: a.src_ip,
            dst: a.dst_ip,
        }
        .emit(out);
        // `total_len` fits u16, so does the smaller `udp_len`.
        let udp_len = udp_len as u16;
        UdpHeader {
            src_port: a.udp_src_port,
            dst_port: ROCEV2_PORT,
            len: udp_len,
            checksum: 0,
        }
        .emit(out);

        let pad = Self::pad_for(self.payload.len());
        Bth {
            pad_count: pad,
            ..self.bth
        }
        .emit(out);
        emit_opt(&self.xrceth, out);
        emit_opt(&self.dceth, out);
        emit_opt(&self.deth, out);
        emit_opt(&self.reth, out);
        emit_opt(&self.atomic_eth, out);
        emit_opt(&self.aeth, out);
        emit_opt(&self.atomic_ack_eth, out);
        emit_opt(&self.imm, out);
        emit_opt(&self.ieth, out);
        out.extend_from_slice(&self.payload);
        out.resize(out.len() + usize::from(pad), 0);

        let crc = icrc(&out[start + IPV4_OFFSET..]);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Decodes and checks a frame: Ethernet II with IPv4, an IPv4 header without options whose
    /// checksum verifies, UDP to port 4791 whose length matches, the ICRC (a mismatch is
    /// [`ParseError::IcrcMismatch`]), a supported opcode with TVer 0, the extension headers the
    /// opcode carries, and a consistent pad. Bytes after the IPv4 total length (Ethernet padding)
    /// are ignored. Never panics.
    pub fn parse(frame: &[u8]) -> Result<Packet, ParseError> {
        let (eth, after_eth) = EthernetHeader::parse(frame)?;
        if eth.ethertype != ETHERTYPE_IPV4 {
            return Err(ParseError::EtherType(eth.ethertype));
        }
        let (ip, ip_payload) = Ipv4Header::parse(after_eth)?;
        if ip.protocol != PROTOCOL_UDP {
            return Err(ParseError::IpProtocol(ip.protocol));
        }
        let (udp, udp_payload) = UdpHeader::parse(ip_payload)?;
        if udp.dst_port != ROCEV2_PORT {
            return Err(ParseError::UdpPort(udp.dst_port));
        }
        if usize::from(udp.len) != ip_payload.len() {
            return Err(ParseError::UdpLength {
                udp: udp.len,
                ip: ip_payload.len(),
            });
        }

        // The ICRC first: a corrupted packet is reported as such, whatever field was hit.
        let truncated = ParseError::Truncated {
            layer: Layer::Transport,
            needed: Bth::LEN + ICRC_LEN,
            available: udp_payload.len(),
        };
        let (body, trailer) = udp_payload
            .split_last_chunk::<ICRC_LEN>()
            .ok_or(truncated.clone())?;
        if body.len() < Bth::LEN {
            return Err(truncated);
        }
        let found = u32::from_le_bytes(*trailer);
        // The datagram from the IPv4 header to the end of the pad: `after_eth` starts with it.
        let datagram = &after_eth[..Ipv4Header::LEN + UdpHeader::LEN + body.len()];
        let expected = icrc(datagram);
        if found != expected {
            return Err(ParseError::IcrcMismatch { found, expected });
        }

        let (bth, mut rest) = Bth::parse(body)?;
        let op = bth.opcode;
        let xrceth = parse_opt(op.has_xrceth(), &mut rest)?;
        let dceth = parse_opt(op.has_dceth(), &mut rest)?;
        let deth = parse_opt(op.has_deth(), &mut rest)?;
        let reth = parse_opt(op.has_reth(), &mut rest)?;
        let atomic_eth = parse_opt(op.has_atomic_eth(), &mut rest)?;
        let aeth = parse_opt(op.has_aeth(), &mut rest)?;
        let atomic_ack_eth = parse_opt(op.has_atomic_ack_eth(), &mut rest)?;
        let imm = parse_opt(op.has_immediate(), &mut rest)?;
        let ieth = parse_opt(op.has_ieth(), &mut rest)?;

        let pad = usize::from(bth.pad_count);
        if !op.has_payload() && !rest.is_empty() {
            return Err(ParseError::UnexpectedPayload(op.as_u8(), rest.len()));
        }
        if rest.len() % 4 != 0 || pad > rest.len() {
            return Err(ParseError::Pad {
                pad: bth.pad_count,
                len: rest.len(),
            });
        }
        let payload = rest[..rest.len() - pad].to_vec(); // pad <= rest.len(), checked above

        Ok(Packet {
            addr: Addressing {
                src_mac: eth.src,
                dst_mac: eth.dst,
                src_ip: ip.src,
                dst_ip: ip.dst,
                udp_src_port: udp.src_port,
                dscp: ip.dscp,
                ecn: ip.ecn,
                ttl: ip.ttl,
                ip_id: ip.id,
            },
            bth,
            xrceth,
            dceth,
            deth,
            reth,
            atomic_eth,
            aeth,
            atomic_ack_eth,
            imm,
            ieth,
            payload,
        })
    }
}
