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
    /// Inline segments and data segments in one WQE, in their order (UCX puts an active
    /// message's header inline before the data segments of its payload, `rc_mlx5.inl`
    /// `uct_rc_mlx5_txqp_dptr_post_iov`, `ud_mlx5.c` `uct_ud_mlx5_ep_am_bcopy`; a ConnectX
    /// takes the WQE's data segments of either kind in any order).
    Mixed(Vec<Piece>),
}

/// One data segment of a [`Gather::Mixed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Inline bytes.
    Inline(Vec<u8>),
    /// A gather entry.
    Sge(Sge),
}

impl Piece {
    /// Bytes it carries.
    pub fn len(&self) -> u64 {
        match self {
            Piece::Inline(v) => v.len() as u64,
            Piece::Sge(s) => s.len as u64,
        }
    }

    /// Whether it carries none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Gather {
    /// Total bytes.
    pub fn len(&self) -> u64 {
        match self {
            Gather::Inline(v) => v.len() as u64,
            Gather::Sges(s) => s.iter().map(|s| s.len as u64).sum(),
            Gather::Mixed(p) => p.iter().map(Piece::len).sum(),
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

    /// The data: inline segments (`struct mlx5_wqe_inline_seg`, each its length with
    /// `MLX5_INLINE_SEG` set, padded to 16 bytes) and data segments (`struct
    /// mlx5_wqe_data_seg`) filling the rest of the WQE; `no_inline` for READ and atomics.
    pub(super) fn data(&self, no_inline: bool, max_send_sge: u32) -> Result<Gather, WqeFault> {
        let rest = &self.b[self.off..];
        let has_inline = rest
            .chunks(16)
            .any(|c| c.len() >= 4 && be32(c, 0) & INLINE_SEG != 0);
        if has_inline {
            if no_inline {
                return Err(op_err("inline data on a READ or atomic WQE".into()));
            }
            return mixed(rest);
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

/// Segments of which at least one is inline: the pieces in order; one inline segment alone is
/// [`Gather::Inline`].
fn mixed(rest: &[u8]) -> Result<Gather, WqeFault> {
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < rest.len() {
        let w = be32(rest, at);
        if w & INLINE_SEG != 0 {
            let len = (w & !INLINE_SEG) as usize;
            let seg = (4 + len).div_ceil(16) * 16;
            if at + seg > rest.len() {
                return Err(op_err(format!(
                    "inline segment of {len} bytes needs {} DS but the WQE leaves {} DS for it",
                    seg / 16,
                    (rest.len() - at) / 16
                )));
            }
            pieces.push(Piece::Inline(rest[at + 4..at + 4 + len].to_vec()));
            at += seg;
        } else {
            let d = &rest[at..at + 16];
            pieces.push(Piece::Sge(Sge {
                len: w,
                lkey: be32(d, 4),
                addr: be64(d, 8),
            }));
            at += 16;
        }
    }
    if let [Piece::Inline(v)] = pieces.as_slice() {
        return Ok(Gather::Inline(v.clone()));
    }
    Ok(Gather::Mixed(pieces))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wqe(segs: &[[u8; 16]]) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        for s in segs {
            b.extend_from_slice(s);
        }
        b
    }

    fn inline(bytes: &[u8]) -> [u8; 16] {
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&(INLINE_SEG | bytes.len() as u32).to_be_bytes());
        s[4..4 + bytes.len()].copy_from_slice(bytes);
        s
    }

    fn dptr(len: u32, lkey: u32, addr: u64) -> [u8; 16] {
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&len.to_be_bytes());
        s[4..8].copy_from_slice(&lkey.to_be_bytes());
        s[8..].copy_from_slice(&addr.to_be_bytes());
        s
    }

    #[test]
    fn an_inline_header_before_data_segments_is_one_gather() {
        // UCX's active message: 8 header bytes inline, the payload by pointer.
        let b = wqe(&[inline(&[1, 2, 3, 4, 5, 6, 7, 8]), dptr(100, 7, 0x1000)]);
        let g = Reader::new(&b).data(false, 1).unwrap();
        assert_eq!(g.len(), 108);
        assert_eq!(
            g,
            Gather::Mixed(vec![
                Piece::Inline(vec![1, 2, 3, 4, 5, 6, 7, 8]),
                Piece::Sge(Sge {
                    len: 100,
                    lkey: 7,
                    addr: 0x1000
                })
            ])
        );
        // Inline alone stays Inline; an inline segment longer than the WQE is refused.
        let b = wqe(&[inline(&[9; 12])]);
        assert_eq!(
            Reader::new(&b).data(false, 1).unwrap(),
            Gather::Inline(vec![9; 12])
        );
        let mut long = inline(&[0; 4]);
        long[..4].copy_from_slice(&(INLINE_SEG | 40).to_be_bytes());
        let b = wqe(&[long]);
        assert!(Reader::new(&b).data(false, 1).is_err());
        assert!(
            Reader::new(&wqe(&[inline(&[1])])).data(true, 1).is_err(),
            "READ"
        );
    }
}
