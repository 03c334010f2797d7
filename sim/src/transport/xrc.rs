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
//! device in [`XrcState`].

use std::collections::BTreeMap;

use mlx5_hw::{
    BfLayout, Error, QpCap, QpId, QpInfo, QpInitAttr, QpLayout, QpType, WqLayout, XrcSrqInitAttr,
};

use crate::engine::Ctx;
use crate::qp::Qp;
use crate::sizing::qp_geometry;
use crate::srq::Srq;
use crate::transport::Frame;
use crate::wire::{Opcode, Packet, Transport, Xrceth};
use crate::world::Dev;
use crate::wqe::SendWqe;

/// The response opcode a QP of `qp_type` sends: the XRC twin of the RC opcode on a target.
pub fn response_opcode(qp_type: QpType, op: Opcode) -> Opcode {
    match qp_type {
        QpType::XrcRecv => Opcode::new(Transport::Xrc, op.operation()).unwrap_or(op),
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

fn xrcd_mut(d: &mut Dev, xrcd: u32) -> mlx5_hw::Result<&mut Xrcd> {
    d.xrc.xrcds.get_mut(&xrcd).ok_or(Error::UnknownHandle {
        kind: "XRC domain",
        id: xrcd,
    })
}

/// Create an XRC target QP in `xrcd`: no send queue, no receive queue, no PD, no CQ of its
/// own (uverbs `create_qp` for `IB_QPT_XRC_TGT`); one handle open on it.
pub fn create_target(d: &mut Dev, xrcd: u32) -> mlx5_hw::Result<QpInfo> {
    xrcd_mut(d, xrcd)?;
    let g = qp_geometry(QpType::XrcRecv, &QpCap::default(), true)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let qpn = d.alloc_id();
    let mut qp = Qp::new(qpn, QpType::XrcRecv, 0, 0, 0, None, false, g)
        .ok_or_else(|| Error::Resources("out of memory for the XRC target QP".into()))?;
    qp.xrcd = Some(xrcd);
    let layout = QpLayout {
        qpn,
        qp_type: QpType::XrcRecv,
        dbrec: qp.dbrec.as_ptr().cast(),
        sq: WqLayout {
            buf: std::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 64,
        },
        rq: WqLayout {
            buf: std::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        },
        bf: BfLayout {
            reg: std::ptr::null_mut(),
            size: 0,
            shared: false,
        },
        max_inline_data: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        sq_sig_all: false,
        uses_srq: true,
    };
    d.qps.insert(qpn, qp);
    d.xrc.handles.insert(qpn, 1);
    if let Ok(x) = xrcd_mut(d, xrcd) {
        x.users += 1;
    }
    Ok(QpInfo {
        id: QpId(qpn),
        qpn,
        qp_type: QpType::XrcRecv,
        cap: g.cap,
        layout,
    })
}

/// Another handle on target QP `qpn` of `xrcd` (`ibv_open_qp`).
pub fn open_qp(d: &mut Dev, xrcd: u32, qpn: u32) -> mlx5_hw::Result<QpId> {
    xrcd_mut(d, xrcd)?;
    let ok = d
        .qps
        .get(&qpn)
        .is_some_and(|q| q.qp_type == QpType::XrcRecv && q.xrcd == Some(xrcd));
    if !ok {
        return Err(Error::InvalidArgument(format!(
            "open_qp: QPN {qpn:#x} is no XRC target QP of XRC domain {xrcd:#x}"
        )));
    }
    *d.xrc.handles.entry(qpn).or_insert(0) += 1;
    Ok(QpId(qpn))
}

/// `destroy_qp` on a target QP with other handles open: close this handle only (`true`). On
/// the last handle the QP goes (`false`: the caller destroys it) and its domain loses a user.
pub fn drop_handle(d: &mut Dev, qpn: u32) -> bool {
    let Some(n) = d.xrc.handles.get_mut(&qpn) else {
        return false;
    };
    if *n > 1 {
        *n -= 1;
        return true;
    }
    d.xrc.handles.remove(&qpn);
    if let Some(x) = d.qps.get(&qpn).and_then(|q| q.xrcd) {
        if let Ok(x) = xrcd_mut(d, x) {
            x.users = x.users.saturating_sub(1);
        }
    }
    false
}

/// `close_xrcd`: refused while an XRC SRQ or target QP uses the domain.
pub fn close_xrcd(d: &mut Dev, xrcd: u32) -> mlx5_hw::Result<()> {
    let x = xrcd_mut(d, xrcd)?;
    if x.users > 0 {
        return Err(Error::Busy(format!(
            "XRC domain {xrcd:#x} is used by {} XRC SRQ(s) and target QP(s)",
            x.users
        )));
    }
    d.xrc.xrcds.remove(&xrcd);
    Ok(())
}

/// The checks of `create_srq_xrc` before the SRQ is made: its domain and CQ exist.
pub fn check_srq(d: &mut Dev, attr: &XrcSrqInitAttr) -> mlx5_hw::Result<()> {
    xrcd_mut(d, attr.xrcd.0)?;
    if !d.cqs.contains_key(&attr.cq.0) {
        return Err(Error::UnknownHandle {
            kind: "CQ",
            id: attr.cq.0,
        });
    }
    Ok(())
}

/// Make SRQ `srqn` an XRC SRQ of `attr.xrcd` completing on `attr.cq`.
pub fn adopt_srq(d: &mut Dev, srqn: u32, attr: &XrcSrqInitAttr) {
    if let Some(s) = d.srqs.get_mut(&srqn) {
        s.xrc = Some((attr.xrcd.0, attr.cq.0));
    }
    if let Some(c) = d.cqs.get_mut(&attr.cq.0) {
        c.users += 1;
    }
    if let Ok(x) = xrcd_mut(d, attr.xrcd.0) {
        x.users += 1;
    }
}

/// A destroyed SRQ gives back its XRC domain and CQ.
pub fn release_srq(d: &mut Dev, srq: &Srq) {
    let Some((xrcd, cqn)) = srq.xrc else { return };
    if let Some(c) = d.cqs.get_mut(&cqn) {
        c.users = c.users.saturating_sub(1);
    }
    if let Ok(x) = xrcd_mut(d, xrcd) {
        x.users = x.users.saturating_sub(1);
    }
}
