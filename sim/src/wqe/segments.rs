//! The segments after ctrl: XRC, datagram (UD), remote address and the data (inline or
//! data segments), layouts of rdma-core `mlx5dv.h`.

use mlx5_wqe::{EXTENDED_UD_AV, INLINE_SEG};

use super::{be32, be64, op_err, WqeFault};
use crate::srq::Sge;

/// Remote address and key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raddr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
}

/// UD destination (from the datagram segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Q_Key from the WQE.
    pub qkey: u32,
    /// Destination QPN.
    pub dqpn: u32,
    /// Extended (48-byte) AV.
    pub extended: bool,
    /// Destination LID / UDP source port.
    pub rlid: u16,
    /// Destination MAC.
    pub rmac: [u8; 6],
    /// Destination GID.
    pub rgid: [u8; 16],
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub tclass: u8,
}

/// A DCI WQE's target (its datagram segment as `mlx5_send_wr_set_dc_addr` fills it: the
/// address, the DCT number in `dqp_dct`, the 64-bit DC access key in the key field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcAddr {
    /// The DC access key.
    pub key: u64,
    /// The DC target's number.
    pub dctn: u32,
    /// The address part (its `qkey` and `dqpn` fields are the key's high half and the DCT
    /// number).
    pub av: UdDest,
}

/// Local data of a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gather {
    /// Inline payload.
    Inline(Vec<u8>),
    /// Gather list.
    Sges(Vec<Sge>),
}

impl Gather {
    /// Total bytes.
    pub fn len(&self) -> u64 {
        match self {
            Gather::Inline(v) => v.len() as u64,
            Gather::Sges(s) => s.iter().map(|s| s.len as u64).sum(),
        }
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads a WQE's segments in order after the ctrl segment, each checked to lie within DS.
pub(super) struct Reader<'a> {
    /// The WQE's `ds × 16` bytes.
    pub(super) b: &'a [u8],
    /// Offset of the next segment.
    pub(super) off: usize,
}

impl<'a> Reader<'a> {
    /// After the ctrl segment of `b`.
    pub(super) fn new(b: &'a [u8]) -> Self {
        Reader { b, off: 16 }
    }

    /// The next `n` bytes are within the WQE, or LOCAL_QP_OP naming the segment.
    pub(super) fn need(&self, n: usize, what: &str) -> Result<(), WqeFault> {
        if self.off + n > self.b.len() {
            let ds = self.b.len() / 16;
            Err(op_err(format!("DS {ds} ends before the {what} segment")))
        } else {
            Ok(())
        }
    }

    /// The XRC segment (rdma-core `_mlx5_post_send`, IBV_QPT_XRC_SEND: right after ctrl): the
    /// remote XRC SRQ number.
    pub(super) fn xrc(&mut self) -> Result<u32, WqeFault> {
        self.need(16, "XRC")?;
        let n = be32(self.b, self.off) & 0x00ff_ffff;
        self.off += 16;
        Ok(n)
    }

    /// The datagram segment (rdma-core `mlx5dv.h` `struct mlx5_wqe_datagram_seg`: the 16-byte
    /// address vector, 48 bytes when extended, with MAC, traffic class, hop limit and GID).
    pub(super) fn datagram(&mut self) -> Result<UdDest, WqeFault> {
        let (b, off) = (self.b, self.off);
        self.need(16, "datagram")?;
        let dqp_dct = be32(b, off + 8);
        let extended = dqp_dct & EXTENDED_UD_AV != 0;
        let mut d = UdDest {
            qkey: be32(b, off),
            dqpn: dqp_dct & 0x00ff_ffff,
            extended,
            rlid: u16::from_be_bytes([b[off + 14], b[off + 15]]),
            rmac: [0; 6],
            rgid: [0; 16],
            hop_limit: 0,
            tclass: 0,
        };
        if extended {
            self.need(48, "extended datagram")?;
            d.rmac.copy_from_slice(&b[off + 20..off + 26]);
            d.tclass = b[off + 26];
            d.hop_limit = b[off + 27];
            d.rgid.copy_from_slice(&b[off + 32..off + 48]);
            self.off += 48;
        } else {
            self.off += 16;
        }
        Ok(d)
    }

    /// A DCI's datagram segment ([`DcAddr`]).
    pub(super) fn dc(&mut self) -> Result<DcAddr, WqeFault> {
        let (b, off) = (self.b, self.off);
        let av = self.datagram()?;
        Ok(DcAddr {
            key: be64(b, off),
            dctn: av.dqpn,
            av,
        })
    }

    /// The remote-address segment (`struct mlx5_wqe_raddr_seg`).
    pub(super) fn raddr(&mut self) -> Result<Raddr, WqeFault> {
        self.need(16, "remote address")?;
        let r = Raddr {
            va: be64(self.b, self.off),
            rkey: be32(self.b, self.off + 8),
        };
        self.off += 16;
        Ok(r)
    }

    /// The data: one inline segment (`struct mlx5_wqe_inline_seg`, its length with
    /// `MLX5_INLINE_SEG` set, padded to 16 bytes) or data segments (`struct mlx5_wqe_data_seg`)
    /// filling the rest of the WQE; `no_inline` for READ and atomics.
    pub(super) fn data(&self, no_inline: bool, max_send_sge: u32) -> Result<Gather, WqeFault> {
        let rest = &self.b[self.off..];
        if !rest.is_empty() && be32(rest, 0) & INLINE_SEG != 0 {
            if no_inline {
                return Err(op_err("inline data on a READ or atomic WQE".into()));
            }
            let len = (be32(rest, 0) & !INLINE_SEG) as usize;
            let seg = (4 + len).div_ceil(16) * 16;
            if seg != rest.len() {
                return Err(op_err(format!(
                    "inline segment of {len} bytes needs {} DS but the WQE leaves {} DS for it",
                    seg / 16,
                    rest.len() / 16
                )));
            }
            return Ok(Gather::Inline(rest[4..4 + len].to_vec()));
        }
        let n = rest.len() / 16;
        if n as u32 > max_send_sge.max(1) {
            return Err(op_err(format!(
                "{n} data segments but the QP was created with max_send_sge = {max_send_sge}"
            )));
        }
        let mut sges = Vec::with_capacity(n);
        for i in 0..n {
            let d = &rest[i * 16..i * 16 + 16];
            let len = be32(d, 0);
            if len & INLINE_SEG != 0 {
                return Err(op_err(format!("data segment {i} has the inline bit set")));
            }
            sges.push(Sge {
                len,
                lkey: be32(d, 4),
                addr: be64(d, 8),
            });
        }
        Ok(Gather::Sges(sges))
    }
}
