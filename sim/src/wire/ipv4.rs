//! IPv4 header without options (RFC 791 §3.1; 20 bytes) and its checksum (RFC 1071).

use std::net::Ipv4Addr;

use super::error::{Layer, ParseError};
use super::packet::Ecn;
use super::transport::take;

/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// The Don't Fragment flag in the flags/fragment-offset word (RFC 791 §3.1).
const FLAG_DF: u16 = 0x4000;
/// More Fragments flag and fragment offset: any of these set means a fragment.
const FRAGMENT_MASK: u16 = 0x3fff;

/// An IPv4 header without options.
///
/// Layout: version/IHL (0), TOS = DSCP(7:2) ECN(1:0) (1), total length (2-3), identification
/// (4-5), flags/fragment offset (6-7), TTL (8), protocol (9), header checksum (10-11), source
/// (12-15), destination (16-19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// Differentiated services code point (6 bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Total length of the datagram, header included.
    pub total_len: u16,
    /// Identification.
    pub id: u16,
    /// Don't Fragment flag (RoCEv2 senders set it).
    pub dont_fragment: bool,
    /// Time to live.
    pub ttl: u8,
    /// Payload protocol.
    pub protocol: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

/// The RFC 1071 Internet checksum of `bytes` (the one's complement of the one's-complement sum
/// of its 16-bit big-endian words; an odd trailing byte is padded with zero).
pub fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Ipv4Header {
    /// Encoded length (IHL = 5).
    pub const LEN: usize = 20;

    /// Appends the 20 header bytes, with a correct header checksum, to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.push(0x45);
        out.push(((self.dscp & 0x3f) << 2) | self.ecn as u8);
        out.extend_from_slice(&self.total_len.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        let flags = if self.dont_fragment { FLAG_DF } else { 0 };
        out.extend_from_slice(&flags.to_be_bytes());
        out.push(self.ttl);
        out.push(self.protocol);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.src.octets());
        out.extend_from_slice(&self.dst.octets());
        let checksum = internet_checksum(&out[start..]);
        out[start + 10..start + 12].copy_from_slice(&checksum.to_be_bytes());
    }

    /// Reads and checks the header from the front of `buf` (version 4, no options, no fragment,
    /// a total length that fits, a verifying checksum); returns it and the datagram's payload
    /// (trailing bytes beyond the total length, such as Ethernet padding, are dropped).
    pub fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (h, rest) = take::<20>(buf, Layer::Ipv4)?;
        if h[0] >> 4 != 4 {
            return Err(ParseError::Ipv4("version is not 4"));
        }
        if h[0] & 0x0f != 5 {
            return Err(ParseError::Ipv4("header has options (IHL is not 5)"));
        }
        let found = u16::from_be_bytes([h[10], h[11]]);
        let mut zeroed = *h;
        zeroed[10] = 0;
        zeroed[11] = 0;
        let expected = internet_checksum(&zeroed);
        if found != expected {
            return Err(ParseError::Ipv4Checksum { found, expected });
        }
        let flags = u16::from_be_bytes([h[6], h[7]]);
        if flags & FRAGMENT_MASK != 0 {
            return Err(ParseError::Ipv4("datagram is a fragment"));
        }
        let total_len = u16::from_be_bytes([h[2], h[3]]);
        let payload_len = usize::from(total_len)
            .checked_sub(Self::LEN)
            .ok_or(ParseError::Ipv4("total length is shorter than the header"))?;
        let payload = rest.get(..payload_len).ok_or(ParseError::Truncated {
            layer: Layer::Ipv4,
            needed: usize::from(total_len),
            available: buf.len(),
        })?;
        let header = Self {
            dscp: h[1] >> 2,
            ecn: Ecn::from_bits(h[1]),
            total_len,
            id: u16::from_be_bytes([h[4], h[5]]),
            dont_fragment: flags & FLAG_DF != 0,
            ttl: h[8],
            protocol: h[9],
            src: Ipv4Addr::new(h[12], h[13], h[14], h[15]),
            dst: Ipv4Addr::new(h[16], h[17], h[18], h[19]),
        };
        Ok((header, payload))
    }
}
