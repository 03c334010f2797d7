//! XRC on owning objects: the XRC domain ([`Xrcd`], `ibv_open_xrcd`), the XRC SRQ
//! ([`XrcSrq`], `ibv_create_srq_ex` with `IBV_SRQT_XRC`; its number from
//! [`XrcSrq::srq_num`], `ibv_get_srq_num`), the target QP ([`XrcTarget`], `IBV_QPT_XRC_RECV`,
//! shareable through the domain with [`Xrcd::open_target`], `ibv_open_qp`), and the initiator,
//! an ordinary [`Qp`] of type [`QpType::XrcSend`] ([`QpInit::xrc_send`]) whose WRs name the
//! remote XRC SRQ (`SendWr::xrc`).
//!
//! On a verbs context the calls go to `ibv_open_xrcd`, `ibv_create_srq_ex`, `ibv_create_qp_ex`
//! and `ibv_open_qp` (`mlx5_hw::verbs`); a device without XRC (Soft-RoCE has none) refuses
//! each with [`mlx5_hw::Error::Unsupported`] naming the refused verb, which
//! [`Context::open_xrcd`] returns as it is, before any other object is made.
//!
//! [`connect_xrc`] takes an initiator and a target through Reset → Init → RTR → RTS with the
//! masks of the kernel table's XRC_INI and XRC_TGT columns (`mlx5_hw::qp_state`), which differ
//! from RC: the initiator takes no responder attributes at RTR, the target no retry counts at
//! RTS.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use mlx5_hw::{
    AhAttr, AttrMask, GlobalRoute, QpAttr, QpCap, QpId, QpInitAttr, QpInitEx, QpState, QpType,
    SrqId, SrqInitAttr, XrcSrqInitAttr, XrcdId,
};

use crate::context::Context;
use crate::cq::{Cq, CqObj};
use crate::datapath;
use crate::error::Result;
use crate::pd::Pd;
use crate::qp::{Qp, QpInit};

struct XrcdObj {
    ctx: Context,
    id: XrcdId,
}

impl Drop for XrcdObj {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.device().close_xrcd(self.id) {
            tracing::warn!(target: "mlx5_ctx", xrcd = self.id.0, error = %e, "close_xrcd failed");
        }
    }
}

/// An XRC domain: closed when this, every XRC SRQ and every target QP in it are gone.
#[derive(Clone)]
pub struct Xrcd {
    obj: Arc<XrcdObj>,
}

impl fmt::Debug for Xrcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Xrcd").field("id", &self.obj.id.0).finish()
    }
}

impl Context {
    /// Open a new XRC domain (`ibv_open_xrcd`).
    pub fn open_xrcd(&self) -> Result<Xrcd> {
        let id = self.device().open_xrcd()?;
        Ok(Xrcd {
            obj: Arc::new(XrcdObj {
                ctx: self.clone(),
                id,
            }),
        })
    }
}

impl Xrcd {
    /// The device handle.
    pub fn id(&self) -> XrcdId {
        self.obj.id
    }

    /// The context the domain belongs to.
    pub fn context(&self) -> &Context {
        &self.obj.ctx
    }

    /// Create a target QP in this domain (`IBV_QPT_XRC_RECV`): no send or receive queue; it
    /// delivers into the XRC SRQ each request names.
    pub fn create_target(&self) -> Result<XrcTarget> {
        let dev = self.obj.ctx.device();
        // The PD and CQs of the basic attributes are not used for a target (uverbs).
        let info = dev.create_qp_ex(
            mlx5_hw::PdId(0),
            &QpInitAttr {
                qp_type: QpType::XrcRecv,
                send_cq: mlx5_hw::CqId(0),
                recv_cq: mlx5_hw::CqId(0),
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: false,
            },
            &QpInitEx {
                xrcd: Some(self.obj.id),
                ..QpInitEx::default()
            },
        )?;
        Ok(self.target(info.id, info.qpn))
    }

    /// Another handle on the target QP `qpn` of this domain (`ibv_open_qp`); the QP lives
    /// until its last handle is dropped.
    pub fn open_target(&self, qpn: u32) -> Result<XrcTarget> {
        let id = self.obj.ctx.device().open_qp(self.obj.id, qpn)?;
        Ok(self.target(id, qpn))
    }

    fn target(&self, id: QpId, qpn: u32) -> XrcTarget {
        XrcTarget {
            obj: Arc::new(TargetObj {
                id,
                qpn,
                xrcd: self.clone(),
            }),
        }
    }
}

struct TargetObj {
    id: QpId,
    qpn: u32,
    xrcd: Xrcd,
}

impl Drop for TargetObj {
    fn drop(&mut self) {
        if let Err(e) = self.xrcd.obj.ctx.device().destroy_qp(self.id) {
            tracing::warn!(target: "mlx5_ctx", qp = self.id.0, error = %e, "destroy_qp (XRC target) failed");
        }
    }
}

/// A handle on an XRC target QP.
#[derive(Clone)]
pub struct XrcTarget {
    obj: Arc<TargetObj>,
}

impl fmt::Debug for XrcTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrcTarget")
            .field("qpn", &format_args!("{:#x}", self.obj.qpn))
            .finish()
    }
}

impl XrcTarget {
    /// The device handle.
    pub fn id(&self) -> QpId {
        self.obj.id
    }
    /// The QP number initiators connect to.
    pub fn qpn(&self) -> u32 {
        self.obj.qpn
    }
    /// The domain.
    pub fn xrcd(&self) -> &Xrcd {
        &self.obj.xrcd
    }
    /// The state the device reports.
    pub fn state(&self) -> Result<QpState> {
        Ok(self
            .obj
            .xrcd
            .context()
            .device()
            .query_qp(self.obj.id)?
            .qp_state)
    }
}

struct XrcSrqObj {
    id: SrqId,
    pd: Pd,
    _cq: Arc<CqObj>,
    _xrcd: Xrcd,
}

impl Drop for XrcSrqObj {
    fn drop(&mut self) {
        if let Err(e) = self.pd.context().device().destroy_srq(self.id) {
            tracing::warn!(target: "mlx5_ctx", srq = self.id.0, error = %e, "destroy_srq (XRC) failed");
        }
    }
}

/// An XRC SRQ. Dereferences to the data path ([`mlx5_qp::Srq`]: post receives; poll its CQ
/// with the SRQ in the table, `(&mut qps, &mut [srq])`).
pub struct XrcSrq {
    // Declared first: the data path is dropped before the device object.
    dp: mlx5_qp::Srq,
    obj: Arc<XrcSrqObj>,
}

impl fmt::Debug for XrcSrq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrcSrq")
            .field("srqn", &format_args!("{:#x}", self.dp.srqn()))
            .finish()
    }
}

impl Deref for XrcSrq {
    type Target = mlx5_qp::Srq;
    fn deref(&self) -> &mlx5_qp::Srq {
        &self.dp
    }
}

impl DerefMut for XrcSrq {
    fn deref_mut(&mut self) -> &mut mlx5_qp::Srq {
        &mut self.dp
    }
}

impl std::borrow::Borrow<mlx5_qp::Srq> for XrcSrq {
    fn borrow(&self) -> &mlx5_qp::Srq {
        &self.dp
    }
}

impl std::borrow::BorrowMut<mlx5_qp::Srq> for XrcSrq {
    fn borrow_mut(&mut self) -> &mut mlx5_qp::Srq {
        &mut self.dp
    }
}

impl XrcSrq {
    /// The SRQ number initiators name (`ibv_get_srq_num`).
    pub fn srq_num(&self) -> u32 {
        self.dp.srqn()
    }
    /// The device handle.
    pub fn id(&self) -> SrqId {
        self.obj.id
    }
}

impl Pd {
    /// An XRC SRQ of `xrcd` whose receive completions go to `cq` (`ibv_create_srq_ex`,
    /// `IBV_SRQT_XRC`); `max_wr` receives of `max_sge` entries.
    pub fn create_xrc_srq(
        &self,
        xrcd: &Xrcd,
        cq: &Cq,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<XrcSrq> {
        let ctx = self.context();
        ctx.check_same(xrcd.context(), "the XRC domain")?;
        ctx.check_same(cq.context(), "the CQ")?;
        let info = ctx.device().create_srq_xrc(
            self.id(),
            &XrcSrqInitAttr {
                xrcd: xrcd.id(),
                cq: cq.id(),
                attr: SrqInitAttr {
                    max_wr,
                    max_sge,
                    srq_limit: 0,
                },
            },
        )?;
        let obj = Arc::new(XrcSrqObj {
            id: info.id,
            pd: self.clone(),
            _cq: cq.obj().clone(),
            _xrcd: xrcd.clone(),
        });
        let dp = datapath::srq(&info.layout)?;
        Ok(XrcSrq { dp, obj })
    }
}

impl<'a> QpInit<'a> {
    /// An XRC initiator on `cq`: a send queue only (`IBV_QPT_XRC_SEND`).
    pub fn xrc_send(cq: &'a Cq) -> QpInit<'a> {
        Self::new(QpType::XrcSend, cq)
            .max_recv_wr(0)
            .max_recv_sge(0)
    }
}

/// The first PSN of both directions of an XRC connection made by [`connect_xrc`].
const XRC_PSN: u32 = 0x100;

fn port_of(ctx: &Context) -> Result<(mlx5_hw::Gid, mlx5_hw::Mtu)> {
    let dev = ctx.device();
    Ok((dev.query_gid(1, 0)?, dev.query_port(1)?.active_mtu))
}

fn route(to: mlx5_hw::Gid) -> AhAttr {
    AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: to,
            hop_limit: 64,
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    }
}

/// Connect initiator `ini` (an [`QpType::XrcSend`] QP in Reset) and target `tgt` (in Reset),
/// both in this process (RoCE, port 1, GID 0): Reset → Init → RTR → RTS on each with the
/// kernel table's XRC masks — initiator: Init `PKEY_INDEX | PORT | ACCESS_FLAGS`, RTR `AV |
/// PATH_MTU | DEST_QPN | RQ_PSN`, RTS `TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN |
/// MAX_QP_RD_ATOMIC`; target: the same Init, RTR with `MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER`
/// too, RTS `TIMEOUT | SQ_PSN`. The data path of `ini` is told it is in RTS.
pub fn connect_xrc(ini: &mut Qp, tgt: &XrcTarget) -> Result<()> {
    let (ictx, tctx) = (ini.context().clone(), tgt.xrcd().context().clone());
    let ((igid, imtu), (tgid, tmtu)) = (port_of(&ictx)?, port_of(&tctx)?);
    let rd = ictx
        .device()
        .query_device()?
        .max_qp_rd_atom
        .min(tctx.device().query_device()?.max_qp_rd_atom)
        .clamp(1, 16) as u8;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: crate::mr::all_access(),
        path_mtu: imtu.min(tmtu),
        rq_psn: XRC_PSN,
        sq_psn: XRC_PSN,
        max_dest_rd_atomic: rd,
        max_rd_atomic: rd,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    let path = AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
    let ini_steps = [
        (QpState::Init, init),
        (QpState::Rtr, AttrMask::STATE | path),
        (
            QpState::Rts,
            AttrMask::STATE
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::SQ_PSN
                | AttrMask::MAX_QP_RD_ATOMIC,
        ),
    ];
    let tgt_steps = [
        (QpState::Init, init),
        (
            QpState::Rtr,
            AttrMask::STATE | path | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER,
        ),
        (
            QpState::Rts,
            AttrMask::STATE | AttrMask::TIMEOUT | AttrMask::SQ_PSN,
        ),
    ];
    for ((si, mi), (st, mt)) in ini_steps.into_iter().zip(tgt_steps) {
        a.qp_state = si;
        a.dest_qp_num = tgt.qpn();
        a.ah_attr = route(tgid);
        ictx.device().modify_qp(ini.id(), &a, mi)?;
        a.qp_state = st;
        a.dest_qp_num = ini.qpn();
        a.ah_attr = route(igid);
        tctx.device().modify_qp(tgt.id(), &a, mt)?;
        ini.data_path().set_state(si);
        tracing::info!(target: "mlx5_ctx", ini = ini.qpn(), tgt = tgt.qpn(), state = %si, "XRC pair moved");
    }
    Ok(())
}
