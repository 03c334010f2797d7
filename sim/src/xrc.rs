//! XRC objects on a device, the control path's side (IBTA Vol 1 Annex A14; uverbs
//! `ib_uverbs_open_xrcd`, `create_qp` for `IB_QPT_XRC_TGT`, `ibv_open_qp`): XRC domains, the
//! XRC SRQs in them and target QPs shared through a domain, the last handle destroying. The
//! per-device state is [`crate::transport::xrc::XrcState`], the packet side
//! [`crate::transport::xrc`].

use mlx5_hw::{BfLayout, Error, QpCap, QpId, QpInfo, QpLayout, QpType, WqLayout, XrcSrqInitAttr};

use crate::qp::Qp;
use crate::sizing::qp_geometry;
use crate::srq::Srq;
use crate::transport::xrc::Xrcd;
use crate::world::Dev;

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
