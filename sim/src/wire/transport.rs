//! Byte layouts of the IB transport headers: BTH and the extension headers, all big-endian.
//!
//! Offsets: IBTA Vol 1 §9.2 (BTH, Figure 91), §9.3 (extension headers); the same layouts are
//! the Linux kernel's `drivers/infiniband/sw/rxe/rxe_hdr.h` structs and Wireshark's
//! `packet-infiniband.c` dissectors.
//!
//! Each header has `emit(&self, out: &mut Vec<u8>)`, which appends exactly `LEN` bytes, and
//! `parse(buf) -> Result<(Self, rest)>`, which reads the header from the front of `buf` and
//! returns the bytes after it.

use super::error::{Layer, ParseError};
use super::opcode::Opcode;
use super::packet::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Ieth, ImmDt, Reth, Syndrome, Xrceth,
};
use super::psn::Psn;

/// Splits the first `N` bytes off `buf` as an array, or reports the truncation.
pub(crate) fn take<const N: usize>(
    buf: &[u8],
    layer: Layer,
) -> Result<(&[u8; N], &[u8]), ParseError> {
    buf.split_first_chunk::<N>().ok_or(ParseError::Truncated {
        layer,
        needed: N,
        available: buf.len(),
    })
}

fn be32(b: [u8; 4]) -> u32 {
    u32::from_be_bytes(b)
}

fn be64(b: [u8; 8]) -> u64 {
    u64::from_be_bytes(b)
}

/// Reads the big-endian 24-bit value of `b[1..4]` (the low 3 bytes of a 32-bit word).
fn be24(b: [u8; 4]) -> u32 {
    u32::from_be_bytes([0, b[1], b[2], b[3]])
}

/// A header with a fixed wire length.
pub trait WireHeader: Sized {
    /// Encoded length in bytes.
    const WIRE_LEN: usize;
    /// Appends the header's `WIRE_LEN` bytes to `out`.
    fn emit(&self, out: &mut Vec<u8>);
    /// Reads the header from the front of `buf`; returns it and the bytes after it.
    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError>;
}

// BTH (IBTA Vol 1 §9.2):
//   byte 0      OpCode
//   byte 1      SE(7) M(6) PadCnt(5:4) TVer(3:0)
//   bytes 2-3   P_Key
//   byte 4      RoCEv2: FECN(7) BECN(6), resv6 (IB: resv8a)
//   bytes 5-7   DestQP
//   byte 8      AckReq(7) resv7
//   bytes 9-11  PSN
impl WireHeader for Bth {
    const WIRE_LEN: usize = Bth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.opcode.as_u8());
        out.push(
            (u8::from(self.solicited) << 7)
                | (u8::from(self.migreq) << 6)
                | ((self.pad_count & 3) << 4)
                | (self.tver & 0x0f),
        );
        out.extend_from_slice(&self.pkey.to_be_bytes());
        let qp =
            (u32::from(self.fecn) << 31) | (u32::from(self.becn) << 30) | self.dest_qp & 0xff_ffff;
        out.extend_from_slice(&qp.to_be_bytes());
        let psn = (u32::from(self.ack_req) << 31) | self.psn.get();
        out.extend_from_slice(&psn.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<12>(buf, Layer::Transport)?;
        let opcode = Opcode::from_u8(b[0]).ok_or(ParseError::Opcode(b[0]))?;
        let tver = b[1] & 0x0f;
        if tver != 0 {
            return Err(ParseError::TransportVersion(tver));
        }
        let bth = Bth {
            opcode,
            solicited: b[1] & 0x80 != 0,
            migreq: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 3,
            tver,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: be24([b[4], b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(be24([b[8], b[9], b[10], b[11]])),
        };
        Ok((bth, rest))
    }
}

// RETH (§9.3.3): VA(0-7) R_Key(8-11) DMA Length(12-15).
impl WireHeader for Reth {
    const WIRE_LEN: usize = Reth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.va.to_be_bytes());
        out.extend_from_slice(&self.rkey.to_be_bytes());
        out.extend_from_slice(&self.dma_len.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (va, rest) = take::<8>(buf, Layer::Transport)?;
        let (rkey, rest) = take::<4>(rest, Layer::Transport)?;
        let (dma_len, rest) = take::<4>(rest, Layer::Transport)?;
        let reth = Reth {
            va: be64(*va),
            rkey: be32(*rkey),
            dma_len: be32(*dma_len),
        };
        Ok((reth, rest))
    }
}

// AETH (§9.3.5): Syndrome(0) MSN(1-3).
impl WireHeader for Aeth {
    const WIRE_LEN: usize = Aeth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        let word = (u32::from(self.syndrome.to_u8()) << 24) | (self.msn & 0xff_ffff);
        out.extend_from_slice(&word.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<4>(buf, Layer::Transport)?;
        let syndrome = Syndrome::from_u8(b[0]).ok_or(ParseError::Syndrome(b[0]))?;
        Ok((
            Aeth {
                syndrome,
                msn: be24(*b),
            },
            rest,
        ))
    }
}

// AtomicETH (§9.3.4): VA(0-7) R_Key(8-11) Swap/Add Data(12-19) Compare Data(20-27).
impl WireHeader for AtomicEth {
    const WIRE_LEN: usize = AtomicEth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.va.to_be_bytes());
        out.extend_from_slice(&self.rkey.to_be_bytes());
        out.extend_from_slice(&self.swap_add.to_be_bytes());
        out.extend_from_slice(&self.compare.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (va, rest) = take::<8>(buf, Layer::Transport)?;
        let (rkey, rest) = take::<4>(rest, Layer::Transport)?;
        let (swap_add, rest) = take::<8>(rest, Layer::Transport)?;
        let (compare, rest) = take::<8>(rest, Layer::Transport)?;
        let eth = AtomicEth {
            va: be64(*va),
            rkey: be32(*rkey),
            swap_add: be64(*swap_add),
            compare: be64(*compare),
        };
        Ok((eth, rest))
    }
}

// AtomicAckETH (§9.3.6): Original Remote Data(0-7).
impl WireHeader for AtomicAckEth {
    const WIRE_LEN: usize = AtomicAckEth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.orig.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<8>(buf, Layer::Transport)?;
        Ok((AtomicAckEth { orig: be64(*b) }, rest))
    }
}

// ImmDt (§9.3.7): Immediate Data(0-3).
impl WireHeader for ImmDt {
    const WIRE_LEN: usize = ImmDt::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<4>(buf, Layer::Transport)?;
        Ok((ImmDt(be32(*b)), rest))
    }
}

// IETH (§9.3.8): R_Key(0-3).
impl WireHeader for Ieth {
    const WIRE_LEN: usize = Ieth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.rkey.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<4>(buf, Layer::Transport)?;
        Ok((Ieth { rkey: be32(*b) }, rest))
    }
}

// XRCETH (Annex A14): reserved(0) XRCSRQ(1-3).
impl WireHeader for Xrceth {
    const WIRE_LEN: usize = Xrceth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.srqn & 0xff_ffff).to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (b, rest) = take::<4>(buf, Layer::Transport)?;
        Ok((Xrceth { srqn: be24(*b) }, rest))
    }
}

// DETH (§9.3.2): Q_Key(0-3) reserved(4) SrcQP(5-7).
impl WireHeader for Deth {
    const WIRE_LEN: usize = Deth::LEN;

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.qkey.to_be_bytes());
        out.extend_from_slice(&(self.src_qp & 0xff_ffff).to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Result<(Self, &[u8]), ParseError> {
        let (qkey, rest) = take::<4>(buf, Layer::Transport)?;
        let (src_qp, rest) = take::<4>(rest, Layer::Transport)?;
        let deth = Deth {
            qkey: be32(*qkey),
            src_qp: be24(*src_qp),
        };
        Ok((deth, rest))
    }
}
