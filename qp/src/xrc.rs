//! XRC initiators on the data path: the XRC segment (`struct mlx5_wqe_xrc_seg`: the remote XRC
//! SRQ number, 16 bytes right after ctrl; rdma-core qp.c `_mlx5_post_send`, case
//! `IBV_QPT_XRC_SEND`, and `mlx5_send_wr_set_xrc_srqn`) in front of the remote-address, atomic
//! and data segments of every RC operation. A WR names its SRQ with [`SendWr::xrc`]; XRC QPs
//! never take the lean entry points (their gates stay closed), so the lean paths are
//! unchanged.
//!
//! Receive completions of a target QP carry the target's QPN and the XRC SRQ's number: the
//! CQ finds them by the SRQ ([`crate::Cq::poll`], rdma-core cq.c `get_resp_ctx_v1` resolving
//! an `MLX5_RSC_TYPE_XSRQ`).

use mlx5_cq::Cqe64;
use mlx5_hw::QpType;

use crate::cq::Resolve;
use crate::error::{Error, Result};
use crate::sq::Progress;
use crate::wc::Wc;
use crate::wr::SendWr;

/// A responder CQE whose QPN is no QP of the table: the receive of an XRC target QP, found
/// by what the CQE carries for its XRC SRQ in `srqn_uidx` (the SRQN, or with CQE version 1 the
/// SRQ's user index, [`crate::Srq::cqe_index`]; rdma-core `get_resp_ctx_v1` / `get_srq_ctx`).
/// Neither known: [`Error::UnknownQpn`].
#[cold]
#[inline(never)]
pub(crate) fn complete_on_srq<R: Resolve + ?Sized>(
    table: &mut R,
    cqe: &Cqe64,
    wc: Wc,
    inline: Option<&[u8]>,
    out: &mut [Wc],
    cqn: u32,
) -> Result<Progress> {
    // A user index may be 0 (libmlx5 hands out the lowest free one, `mlx5_store_uidx`); no
    // SRQ number is, so a CQE of version 0 carrying 0 matches no SRQ.
    let (qpn, index) = (cqe.qpn(), cqe.srqn());
    match table.xrc_srq(index) {
        Some(srq) => Ok(srq.complete(cqe.wqe_counter(), wc, inline, out)),
        None => Err(Error::UnknownQpn { cqn, qpn }),
    }
}

/// Bytes of the XRC segment a WR adds on a QP of `qp_type`: 16 on an XRC initiator with an SRQ
/// named, 0 on other QPs without one; anything else is refused.
#[inline]
pub(crate) fn seg_bytes(qp_type: QpType, srqn: Option<u32>) -> Result<usize> {
    match (qp_type, srqn) {
        (QpType::XrcSend, Some(n)) if n <= 0x00ff_ffff => Ok(16),
        (QpType::XrcSend, Some(_)) => Err(Error::XrcSrqn("an XRC SRQ number has 24 bits")),
        (QpType::XrcSend, None) => Err(Error::XrcSrqn(
            "an XRC send needs the remote XRC SRQ: build the WR with `.xrc(srqn)`",
        )),
        (_, Some(_)) => Err(Error::XrcSrqn(
            "a remote XRC SRQ is only meaningful on an XRC initiator (XRC_SEND) QP",
        )),
        (_, None) => Ok(0),
    }
}

/// An XRC target has no send queue.
#[cold]
pub(crate) fn no_send_queue(op: &'static str) -> Error {
    Error::OpNotSupported {
        op,
        qp_type: QpType::XrcRecv,
    }
}

impl<'a> SendWr<'a> {
    /// Send to the XRC SRQ `srqn` of the remote node (`wr.qp_type.xrc.remote_srqn`,
    /// `ibv_wr_set_xrc_srqn`): required on an XRC initiator, refused elsewhere.
    #[inline(always)]
    pub const fn xrc(mut self, srqn: u32) -> SendWr<'a> {
        self.xrc = Some(srqn);
        self
    }

    /// The remote XRC SRQ this WR names, if any.
    #[inline(always)]
    pub const fn xrc_srqn(&self) -> Option<u32> {
        self.xrc
    }
}
