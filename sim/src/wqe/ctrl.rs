//! The control segment, the first 16 bytes of every WQE (rdma-core `mlx5dv.h`
//! `struct mlx5_wqe_ctrl_seg`): opmod, WQE index, opcode, QPN, DS, DCI stream, fm_ce_se,
//! immediate.

/// The decoded control segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctrl {
    /// opmod.
    pub opmod: u8,
    /// WQE index.
    pub index: u16,
    /// Opcode.
    pub opcode: u8,
    /// QPN.
    pub qpn: u32,
    /// DS count byte (bits 7:0 of `qpn_ds`).
    pub ds: u8,
    /// DCI stream id (bytes 9–10, `dci_stream_channel_id`).
    pub stream: u16,
    /// fm_ce_se.
    pub fm_ce_se: u8,
    /// Immediate bytes as in memory (network order).
    pub imm: [u8; 4],
}

impl Ctrl {
    /// Decode the first 16 bytes.
    pub fn parse(b: &[u8]) -> Ctrl {
        let mut c = [0u8; 16];
        let n = b.len().min(16);
        c[..n].copy_from_slice(&b[..n]);
        let w0 = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        let w1 = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
        Ctrl {
            opmod: (w0 >> 24) as u8,
            index: (w0 >> 8) as u16,
            opcode: w0 as u8,
            qpn: w1 >> 8,
            ds: w1 as u8,
            stream: u16::from_be_bytes([c[9], c[10]]),
            fm_ce_se: c[11],
            imm: [c[12], c[13], c[14], c[15]],
        }
    }

    /// Basic blocks the WQE occupies (at least one, so a garbage DS still advances).
    pub fn bbs(&self) -> u16 {
        (self.ds as u16).div_ceil(4).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_decode() {
        let b = [
            0x09, 0x12, 0x34, 0x14, 0xab, 0xcd, 0xef, 0x05, 0, 0, 0, 0x08, 1, 2, 3, 4,
        ];
        let c = Ctrl::parse(&b);
        assert_eq!(
            (c.opmod, c.index, c.opcode, c.qpn, c.ds),
            (9, 0x1234, 0x14, 0xabcdef, 5)
        );
        assert_eq!(c.bbs(), 2);
        assert_eq!(c.imm, [1, 2, 3, 4]);
    }
}
