//! Ethernet II header (IEEE 802.3 §3.2.6; 14 bytes, no VLAN tag).

use super::error::{Layer, ParseError};
use super::packet::MacAddr;
use super::transport::take;

/// The IPv4 ethertype.
pub const ETHERTYPE_IPV4: u16 = 0x0800;

/// An Ethernet II header: destination MAC (bytes 0-5), source MAC (6-11), ethertype (12-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthernetHeader {
    /// Destination MAC address.
    pub dst: MacAddr,
    /// Source MAC address.
    pub src: MacAddr,
    /// Ethertype of the payload.
    pub ethertype: u16,
}

impl EthernetHeader {
    /// Encoded length.
    pub const LEN: usize = 14;

    /// Appends the 14 header bytes to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dst.0);
        out.extend_from_slice(&self.src.0);
        out.extend_from_slice(&self.ethertype.to_be_bytes());
    }

    /// Reads the header from the front of `frame`; returns it and the bytes after it.
    pub fn parse(frame: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (dst, rest) = take::<6>(frame, Layer::Ethernet)?;
        let (src, rest) = take::<6>(rest, Layer::Ethernet)?;
        let (ethertype, rest) = take::<2>(rest, Layer::Ethernet)?;
        let header = Self {
            dst: MacAddr(*dst),
            src: MacAddr(*src),
            ethertype: u16::from_be_bytes(*ethertype),
        };
        Ok((header, rest))
    }
}
