//! XRC, the Extended Reliable Connected transport (IBTA Vol 1 Annex A14), on the software
//! ConnectX: RC's reliability machinery (PSNs, ACK coalescing, NAKs, retry, RNR, READ and
//! atomic replay: [`super::requester`], [`super::responder`]) with two differences on the wire
//! and one in delivery.
//!
//! - **Opcodes**: transport bits `101` (0xA0 + the RC operation code; Annex A14 opcode table,
//!   Wireshark `packet-infiniband.c` `XRC_*`), requests and responses alike
//!   ([`response_opcode`]).
//! - **XRCETH**: every request packet carries, right after the BTH, the 24-bit number of the
//!   XRC SRQ it is for (Annex A14 "XRC Extended Transport Header"); responses carry none. The
//!   initiator takes it from the XRC segment of each WQE (`struct mlx5_wqe_xrc_seg`, after
//!   ctrl; rdma-core `_mlx5_post_send`) — [`stamp_requests`].
//! - **Delivery**: an initiator (`XRC_SEND`) has only a send queue; a target (`XRC_RECV`)
//!   has neither queue and belongs to an XRC domain. The target delivers each request into
//!   the XRC SRQ its XRCETH names, which must be of the target's XRC domain (else the request
//!   is a NAK Invalid Request, a class C error, Annex A14); the SRQ's PD is the one memory
//!   keys of WRITE, READ and atomics are checked against (the target QP has no PD of its own:
//!   uverbs creates `IB_QPT_XRC_TGT` QPs without one), and its receive completions go to the
//!   SRQ's CQ, with the target's QPN and the SRQ's number in the CQE (rdma-core cq.c
//!   `get_resp_ctx_v1` finds the SRQ by it) — [`bind_target`].
//!
//! Objects: XRC domains, XRC SRQs and the sharing of target QPs (`ibv_open_qp`) are kept per
//! device in [`XrcState`]; the control-path calls on them are [`crate::xrc`].

use std::collections::BTreeMap;

use mlx5_hw::{Error, QpInitAttr, QpType};

use crate::ctx::Ctx;
use crate::qp::Qp;
use crate::transport::Frame;
use crate::wire::{Opcode, Packet, Transport, Xrceth};
use crate::wqe::SendWqe;

/// The response opcode a QP of `qp_type` sends: the XRC twin of the RC opcode on an XRC
/// target, the DC twin on a DC target.
pub fn response_opcode(qp_type: QpType, op: Opcode) -> Opcode {
    match qp_type {
        QpType::XrcRecv => Opcode::new(Transport::Xrc, op.operation()).unwrap_or(op),
        QpType::Dct => crate::transport::dc::response_opcode(op),
        _ => op,
    }
}

/// Put the XRCETH of the WQE's XRC segment on every request packet built for it (an
/// initiator's WQE always has one; other QPs' WQEs none, and their packets stay as they are).
pub fn stamp_requests(wqe: &SendWqe, frames: &mut [Frame]) {
    let Some(srqn) = wqe.xrc_srqn else { return };
    for f in frames {
        if f.pkt.bth.opcode.has_xrceth() {
            f.pkt.xrceth = Some(Xrceth { srqn });
        }
    }
}

/// Point an XRC target at the XRC SRQ the request names: its receive WQEs, its PD and its CQ
/// serve this packet. `Err` (a NAK Invalid Request) for an unknown SRQ or one of another
/// XRC domain.
pub fn bind_target(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet) -> Result<(), &'static str> {
    let Some(x) = pkt.xrceth else {
        return Err("XRC request without an XRCETH");
    };
    let Some(srq) = ctx.srqs.get(&x.srqn) else {
        return Err("the XRCETH names no SRQ of this device");
    };
    match (srq.xrc, qp.xrcd) {
        (Some((xrcd, cqn)), Some(mine)) if xrcd == mine => {
            qp.srq = Some(srq.srqn);
            qp.pd = srq.pd;
            qp.recv_cq = cqn;
            Ok(())
        }
        (None, _) => Err("the XRCETH names an SRQ that is not an XRC SRQ"),
        _ => Err("the XRCETH names an XRC SRQ of another XRC domain"),
    }
}

/// One XRC domain.
#[derive(Debug, Default)]
pub struct Xrcd {
    /// XRC SRQs and target QPs in it (close is refused while any).
    pub users: u32,
}

/// A device's XRC objects.
#[derive(Debug, Default)]
pub struct XrcState {
    /// XRC domains by number.
    pub xrcds: BTreeMap<u32, Xrcd>,
    /// Target QPs: the handles open on each (its creator's and every `open_qp`'s), by QPN.
    pub handles: BTreeMap<u32, u32>,
}

/// `create_qp` (without an XRC domain) refuses what needs one, and an initiator with a
/// receive side.
pub fn check_plain_create(attr: &QpInitAttr) -> mlx5_hw::Result<()> {
    match attr.qp_type {
        QpType::XrcRecv => Err(Error::InvalidArgument(
            "an XRC_RECV QP is created with create_qp_ex and an XRC domain (QpInitEx::xrcd)".into(),
        )),
        QpType::XrcSend if attr.srq.is_some() || attr.cap.max_recv_wr > 0 => {
            Err(Error::InvalidArgument(
                "an XRC_SEND QP has no receive side: no SRQ, max_recv_wr 0".into(),
            ))
        }
        _ => Ok(()),
    }
}
