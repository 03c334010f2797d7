//! The DC Extended Transport Header: what the software ConnectX puts after the BTH of every
//! Dynamically Connected request. **This header is the model's own.** Mellanox's DC wire
//! protocol is not public (not in the IBTA specification, no public header layout, no
//! Wireshark dissector), so the software ConnectX carries on the wire exactly what the public
//! sources say the target must learn from an initiator and nothing more:
//!
//! - the **DC access key** the WQE names (rdma-core `qp.c` `mlx5_send_wr_set_dc_addr` puts it
//!   in the WQE's address vector, `av.key.dc_key`), which the target compares with its own
//!   (`dct_access_key`, `mlx5dv_create_qp`; a mismatch is a key violation the target counts,
//!   PRM `dctc.dc_access_key_violation_count` as UCX's `ib_mlx5_ifc.h` spells it);
//! - the **initiator's QP number**, to which the target sends its responses (a DC target serves
//!   many initiators at once; its BTH names only the target);
//! - whether the packet **opens a connection**: US patent 8,213,315 ("Dynamically-Connected
//!   Transport Service", Mellanox) describes a connect packet that references the initiator
//!   context and is followed by the data without waiting for an acknowledgment, and the 2014
//!   DC verbs proposal on linux-rdma ("IB/core: Add DC transport support") says the dynamic
//!   connection "is created in-band and pipelined with the subsequent data communication".
//!
//! Layout (16 bytes, big-endian): bytes 0–7 the DC access key; byte 8 flags (bit 7: connect,
//! the first packet of a connection and every retransmission of it); bytes 9–11 the
//! initiator's QPN; bytes 12–15 reserved (0).
//!
//! DC packets use the manufacturer-specific transport bits `110` of the BTH opcode (IBTA Vol 1
//! Table 38 reserves opcodes `110xxxxx` and `111xxxxx` for manufacturer-specific use): 0xC0
//! plus the RC operation code for requests and responses, and 0xDF for the disconnect request
//! ([`crate::wire::Operation::DcDisconnect`], also the model's own), which carries the DCETH of
//! the connection it closes and no payload. Responses carry no DCETH: they go to the
//! initiator's QPN. The transport that uses them is [`crate::transport::dc`].

use super::error::{Layer, ParseError};
use super::transport::{take, WireHeader};

/// The DC Extended Transport Header (16 bytes; the software ConnectX's own, see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Dceth {
    /// The DC access key the initiator's WQE named.
    pub key: u64,
    /// The packet opens the connection (its first packet, or a retransmission of it).
    pub connect: bool,
    /// The initiator's QPN (24 bits), where responses go.
    pub dci: u32,
}

impl Dceth {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// The connect bit of the flags byte.
    pub const CONNECT: u8 = 0x80;
}

impl WireHeader for Dceth {
    const WIRE_LEN: usize = Dceth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.key.to_be_bytes());
        let flags = if self.connect { Dceth::CONNECT } else { 0 };
        let w = (flags as u32) << 24 | (self.dci & 0xff_ffff);
        out.extend_from_slice(&w.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<16>(buf, Layer::Transport)?;
        let key = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let w = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        let d = Dceth {
            key,
            connect: b[8] & Dceth::CONNECT != 0,
            dci: w & 0xff_ffff,
        };
        Ok((d, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dceth_round_trips_byte_for_byte() {
        let d = Dceth {
            key: 0x1122_3344_5566_7788,
            connect: true,
            dci: 0xab_cdef,
        };
        let mut out = Vec::new();
        d.emit(&mut out);
        assert_eq!(
            out,
            [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x80, 0xab, 0xcd, 0xef, 0, 0, 0, 0]
        );
        let (back, rest) = Dceth::parse(&out).unwrap();
        assert_eq!(back, d);
        assert!(rest.is_empty());
        assert!(Dceth::parse(&out[..15]).is_err());
    }
}
