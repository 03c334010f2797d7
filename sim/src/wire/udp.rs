//! UDP header (RFC 768; 8 bytes) and the RoCEv2 port.

use super::error::{Layer, ParseError};
use super::transport::take;

/// The RoCEv2 UDP destination port (IANA "roce" 4791; IBTA Annex A17; `ROCE_V2_UDP_DPORT` in
/// the kernel's `include/rdma/ib_verbs.h`).
pub const ROCEV2_PORT: u16 = 4791;

/// A UDP header: source port (0-1), destination port (2-3), length (4-5), checksum (6-7).
///
/// RoCEv2 senders may leave the checksum 0 ("not computed", RFC 768), the ICRC protecting the
/// packet instead (IBTA Annex A17; rxe and the frames in `tests/data` do); receivers here do not
/// check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Length of header and payload.
    pub len: u16,
    /// Checksum (0: not computed).
    pub checksum: u16,
}

impl UdpHeader {
    /// Encoded length.
    pub const LEN: usize = 8;

    /// Appends the 8 header bytes to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.src_port.to_be_bytes());
        out.extend_from_slice(&self.dst_port.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(&self.checksum.to_be_bytes());
    }

    /// Reads the header from the front of `buf`; returns it and the bytes after it.
    pub fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (h, rest) = take::<8>(buf, Layer::Udp)?;
        let header = Self {
            src_port: u16::from_be_bytes([h[0], h[1]]),
            dst_port: u16::from_be_bytes([h[2], h[3]]),
            len: u16::from_be_bytes([h[4], h[5]]),
            checksum: u16::from_be_bytes([h[6], h[7]]),
        };
        Ok((header, rest))
    }
}
