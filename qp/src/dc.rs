//! DC initiators on the data path: each WQE of a DCI names its target in the 48-byte address
//! vector right after the ctrl segment — the address handle's AV with the DCT number ORed into
//! `dqp_dct` (with `MLX5_EXTENDED_UD_AV`) and the 64-bit DC access key in the key field — and,
//! with DCI streams, its stream in the ctrl segment's `dci_stream_channel_id` (bytes 9–10).
//! The remote-address, atomic and data segments of every RC operation follow the AV (rdma-core
//! `providers/mlx5/qp.c`: `_mlx5_send_wr_rdma`, `_mlx5_send_wr_atomic` and `_mlx5_send_wr_send`
//! put them after `sizeof(struct mlx5_wqe_datagram_seg)` for `IBV_QPT_DRIVER`;
//! `mlx5_send_wr_set_dc_addr` and `mlx5_send_wr_set_dc_addr_stream` fill the AV and the
//! stream).
//!
//! A WR names its target with [`SendWr::dc`]; a [`DcDest`] is built once per target and
//! reused. DCIs never take the RC lean entry points (their gates stay closed): a DC WR posted
//! through [`crate::Qp::post`] goes to the generic path, but for an RDMA WRITE with inline
//! data, which takes the lean DC post ([`crate::Qp::post_dc_write_inline`]). Receive completions of a DC target
//! carry the DCT's number and the SRQ's: the CQ finds them by the SRQ, as for an XRC target
//! ([`crate::Cq::poll`]).

use mlx5_hw::QpType;
use mlx5_wqe::seg::AvSeg;

use crate::error::{Error, Result};

/// Where a DCI WQE goes: the AV of an address handle to the target's port, the DC target's
/// number and its access key (`mlx5dv_wr_set_dc_addr(qp, ah, remote_dctn, remote_dc_key)`),
/// and the DCI stream the WR belongs to ([`DcDest::stream`];
/// `mlx5dv_wr_set_dc_addr_stream`, 0 by default as `mlx5dv_wr_set_dc_addr` means).
///
/// ```
/// use mlx5_qp::{DcDest, RemoteAddr, SendWr};
/// let av = [0u8; 48]; // an address handle's AV (`mlx5_hw::AhInfo::av`)
/// let dest = DcDest::new(&av, 0x1234, 0x1ee7_a330).stream(3);
/// assert_eq!((dest.dctn(), dest.access_key(), dest.stream_id()), (0x1234, 0x1ee7_a330, 3));
/// let wr = SendWr::write(7, RemoteAddr::new(0x1000, 5)).inline(b"hi").dc(&dest);
/// assert_eq!(wr.dc_dest(), Some(&dest));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcDest {
    av: AvSeg,
    dctn: u32,
    /// The ctrl segment's bytes 8..16 as a native `u64` of their memory order, without the
    /// `fm_ce_se` flags: signature 0, the stream id BE16 (`dci_stream_channel_id`), immediate 0.
    ctrl_w1: u64,
}

/// The ctrl segment's bytes 8..16 of a WQE on DCI stream `stream`, flags and immediate 0.
#[inline(always)]
const fn stream_w1(stream: u16) -> u64 {
    let s = stream.to_be_bytes();
    u64::from_ne_bytes([0, s[0], s[1], 0, 0, 0, 0, 0])
}

impl DcDest {
    /// The address vector `av` (the AH's `struct mlx5_wqe_av`, `mlx5_hw::AhInfo::av`) made to
    /// name DCT `dctn` with access key `access_key`, as `mlx5_send_wr_set_dc_addr` writes it:
    /// the AV copied, `dqp_dct |= BE32(dctn | MLX5_EXTENDED_UD_AV)`, `key = BE64(access_key)`.
    /// A DCT number wider than 24 bits is refused when the WR is posted.
    pub fn new(av: &[u8; 48], dctn: u32, access_key: u64) -> DcDest {
        // 48 bytes, every byte pattern valid (checked by the macro).
        let mut seg: AvSeg = zerocopy::transmute!(*av);
        seg.set_dc_dest(dctn, access_key);
        DcDest {
            av: seg,
            dctn,
            ctrl_w1: stream_w1(0),
        }
    }

    /// The same target on DCI stream `stream_id` (a DCI created with streams handles the WRs of
    /// one stream in order and those of different streams concurrently; on a DCI without
    /// streams every WR is of stream 0).
    #[inline(always)]
    pub const fn stream(mut self, stream_id: u16) -> DcDest {
        self.ctrl_w1 = stream_w1(stream_id);
        self
    }

    /// The datagram segment as it goes into the WQE.
    #[inline(always)]
    pub fn av(&self) -> &AvSeg {
        &self.av
    }

    /// The DC target's number.
    #[inline(always)]
    pub fn dctn(&self) -> u32 {
        self.dctn
    }

    /// The DC access key.
    #[inline(always)]
    pub fn access_key(&self) -> u64 {
        self.av.dc_key()
    }

    /// The DCI stream (`dci_stream_channel_id`).
    #[inline(always)]
    pub fn stream_id(&self) -> u16 {
        let b = self.ctrl_w1.to_ne_bytes();
        u16::from_be_bytes([b[1], b[2]])
    }

    /// The ctrl segment's bytes 8..16 of a WQE to this target, without flags and immediate
    /// (the lean DC post ORs its `fm_ce_se` byte in).
    #[inline(always)]
    pub(crate) fn ctrl_w1(&self) -> u64 {
        self.ctrl_w1
    }
}

/// Bytes of the DC address vector a WR adds on a QP of `qp_type`: 48 on a DCI with a target
/// named, 0 on other QPs without one; anything else is refused.
#[inline]
pub(crate) fn seg_bytes(qp_type: QpType, dest: Option<&DcDest>) -> Result<usize> {
    match (qp_type, dest) {
        (QpType::Dci, Some(d)) if d.dctn <= 0x00ff_ffff => Ok(48),
        (QpType::Dci, Some(_)) => Err(Error::DcDest("a DCT number has 24 bits")),
        (QpType::Dci, None) => Err(Error::DcDest(
            "a DCI send needs its target: build the WR with `.dc(&DcDest)`",
        )),
        (_, Some(_)) => Err(Error::DcDest(
            "a DC target is only meaningful on a DC initiator (DCI) QP",
        )),
        (_, None) => Ok(0),
    }
}

/// A DC target has no send queue.
#[cold]
pub(crate) fn no_send_queue(op: &'static str) -> Error {
    Error::OpNotSupported {
        op,
        qp_type: QpType::Dct,
    }
}
