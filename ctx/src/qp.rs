//! Queue pairs: the data path ([`mlx5_qp::Qp`], reached through `Deref`) with the device QP
//! and everything it reports to.

use std::borrow::{Borrow, BorrowMut};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use mlx5_hw::transition::{self, Step};
use mlx5_hw::{QpAttr, QpCap, QpId, QpInitAttr, QpState, QpType};
use mlx5_qp::Resolve;

use crate::context::Context;
use crate::cq::{Cq, CqObj};
use crate::datapath;
use crate::error::Result;
use crate::pd::Pd;
use crate::srq::{Srq, SrqObj};

/// What a QP is created with: its type, CQs, SRQ and capabilities. Built from [`QpInit::rc`],
/// [`QpInit::uc`] or [`QpInit::ud`] and refined with the setters.
#[derive(Clone, Copy, Debug)]
#[must_use = "a builder does nothing until it is passed on"]
pub struct QpInit<'a> {
    /// Transport type.
    pub qp_type: QpType,
    /// CQ of the send completions.
    pub send_cq: &'a Cq,
    /// CQ of the receive completions.
    pub recv_cq: &'a Cq,
    /// Receive through this SRQ instead of an RQ of its own.
    pub srq: Option<&'a Srq>,
    /// Requested capabilities (the device may round them up; [`Qp::cap`] says what it granted).
    pub cap: QpCap,
    /// Every send WR generates a completion.
    pub sq_sig_all: bool,
}

impl<'a> QpInit<'a> {
    /// A QP of `qp_type` whose sends and receives complete on `cq`, with room for 128 send and
    /// 128 receive WRs of one SGE each and 64 bytes of inline data.
    pub fn new(qp_type: QpType, cq: &'a Cq) -> QpInit<'a> {
        QpInit {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        }
    }

    /// A reliable connected QP on `cq` ([`QpInit::new`]).
    pub fn rc(cq: &'a Cq) -> QpInit<'a> {
        Self::new(QpType::Rc, cq)
    }

    /// An unreliable connected QP on `cq`.
    pub fn uc(cq: &'a Cq) -> QpInit<'a> {
        Self::new(QpType::Uc, cq)
    }

    /// An unreliable datagram QP on `cq`.
    pub fn ud(cq: &'a Cq) -> QpInit<'a> {
        Self::new(QpType::Ud, cq)
    }

    /// Receive completions go to `cq`.
    pub fn recv_cq(mut self, cq: &'a Cq) -> Self {
        self.recv_cq = cq;
        self
    }

    /// Receive through `srq` (the QP has no receive queue of its own).
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self.cap.max_recv_wr = 0;
        self
    }

    /// Send WRs the send queue must hold.
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.cap.max_send_wr = n;
        self
    }

    /// Receive WRs the receive queue must hold.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.cap.max_recv_wr = n;
        self
    }

    /// Gather entries per send WR.
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.cap.max_send_sge = n;
        self
    }

    /// Scatter entries per receive WR.
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.cap.max_recv_sge = n;
        self
    }

    /// Inline bytes per send WR.
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.cap.max_inline_data = n;
        self
    }

    /// Every send WR generates a completion (`sq_sig_all`).
    pub fn sig_all(mut self) -> Self {
        self.sq_sig_all = true;
        self
    }
}

/// The device QP and what it holds alive.
pub(crate) struct QpObj {
    id: QpId,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    // The device QP is destroyed (Drop) before these are released: a QP never outlives its
    // CQs, SRQ or PD on the device.
    pd: Pd,
    send_cq: Arc<CqObj>,
    recv_cq: Arc<CqObj>,
    srq: Option<Arc<SrqObj>>,
    /// The SRQ's number, which the QP's receive CQEs still queued at its destroy give back.
    srqn: Option<u32>,
}

impl Drop for QpObj {
    fn drop(&mut self) {
        let ctx = self.pd.context();
        ctx.inner.dead.forget_qp(self.qpn);
        if let Err(e) = ctx.device().destroy_qp(self.id) {
            tracing::warn!(target: "mlx5_ctx", qp = self.id.0, error = %e, "destroy_qp failed");
            return;
        }
        // What rdma-core's `mlx5_destroy_qp` cleans from the CQs under their lock
        // (`__mlx5_cq_clean`), their polls settle (`CqObj::qp_destroyed`).
        self.send_cq.qp_destroyed(self.qpn, self.srqn);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.qp_destroyed(self.qpn, self.srqn);
        }
    }
}

/// A queue pair. Dereferences to the data path ([`mlx5_qp::Qp`]: post, batch, receives), which
/// costs exactly what a post on a bare data-path QP costs; the device QP is destroyed when
/// this is dropped, after the data path and before the CQs, SRQ and PD it holds. CQEs of it
/// still queued on a CQ then are settled by that CQ's next poll that meets them, as rdma-core's
/// destroy cleans them from the CQ: its receives through an SRQ complete as the SRQ's WRs, the
/// rest go with it (`mlx5_qp::DestroyedQps`).
pub struct Qp {
    // Declared first: the data path is dropped before the device object (see `datapath`).
    dp: mlx5_qp::Qp,
    obj: Arc<QpObj>,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("device", &self.obj.pd.context().name())
            .field("qpn", &format_args!("{:#x}", self.dp.qpn()))
            .field("type", &self.obj.qp_type)
            .field("state", &self.dp.state())
            .finish()
    }
}

impl Deref for Qp {
    type Target = mlx5_qp::Qp;
    #[inline(always)]
    fn deref(&self) -> &mlx5_qp::Qp {
        &self.dp
    }
}

impl DerefMut for Qp {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut mlx5_qp::Qp {
        &mut self.dp
    }
}

impl Borrow<mlx5_qp::Qp> for Qp {
    fn borrow(&self) -> &mlx5_qp::Qp {
        &self.dp
    }
}

impl BorrowMut<mlx5_qp::Qp> for Qp {
    #[inline(always)]
    fn borrow_mut(&mut self) -> &mut mlx5_qp::Qp {
        &mut self.dp
    }
}

/// Poll a CQ with one owning QP as the table (`cq.poll(&mut qp, ..)`).
impl Resolve for Qp {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut mlx5_qp::Qp> {
        self.dp.qp(qpn)
    }
    fn for_each_qp(&self, f: &mut dyn FnMut(&mlx5_qp::Qp)) {
        f(&self.dp)
    }
}

impl Qp {
    pub(crate) fn new(pd: &Pd, init: &QpInit<'_>) -> Result<Qp> {
        Self::new_ex(pd, init, &mlx5_hw::QpInitEx::default())
    }

    /// [`Qp::new`] with the `ibv_create_qp_ex` extensions (`Pd::create_qp_ex`).
    pub(crate) fn new_ex(pd: &Pd, init: &QpInit<'_>, ex: &mlx5_hw::QpInitEx) -> Result<Qp> {
        let ctx = pd.context();
        ctx.check_same(init.send_cq.context(), "the send CQ")?;
        ctx.check_same(init.recv_cq.context(), "the receive CQ")?;
        if let Some(s) = init.srq {
            ctx.check_same(s.pd().context(), "the SRQ")?;
        }
        let attr = QpInitAttr {
            qp_type: init.qp_type,
            send_cq: init.send_cq.id(),
            recv_cq: init.recv_cq.id(),
            srq: init.srq.map(Srq::id),
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
        };
        let info = ctx.device().create_qp_ex(pd.id(), &attr, ex)?;
        let obj = Arc::new(QpObj {
            id: info.id,
            qpn: info.layout.qpn,
            qp_type: init.qp_type,
            cap: info.cap,
            pd: pd.clone(),
            send_cq: init.send_cq.obj().clone(),
            recv_cq: init.recv_cq.obj().clone(),
            srq: init.srq.map(|s| s.obj().clone()),
            srqn: init.srq.map(|s| s.srqn()),
        });
        // The number may be a destroyed QP's that these CQs remember: it is this QP's now.
        obj.send_cq.qp_created(obj.qpn);
        obj.recv_cq.qp_created(obj.qpn);
        // On failure `obj` is dropped here and destroys the QP.
        let dp = datapath::qp(&info.layout, init.srq.map(|s| s.srqn()))?;
        // Where its WRs are retired if the device dies (`crate::dead`).
        ctx.inner
            .dead
            .add_qp(dp.qpn(), init.send_cq.id(), init.recv_cq.id());
        Ok(Qp { dp, obj })
    }

    /// The device handle (not the QPN).
    pub fn id(&self) -> QpId {
        self.obj.id
    }

    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.obj.qp_type
    }

    /// The capabilities the device granted.
    pub fn cap(&self) -> QpCap {
        self.obj.cap
    }

    /// The PD the QP belongs to.
    pub fn pd(&self) -> &Pd {
        &self.obj.pd
    }

    /// The CQ the QP's send completions go to ([`Cq::id`]).
    pub fn send_cq_id(&self) -> mlx5_hw::CqId {
        self.obj.send_cq.id
    }

    /// The CQ the QP's receive completions go to (the send CQ unless
    /// [`QpInit::recv_cq`] named another).
    pub fn recv_cq_id(&self) -> mlx5_hw::CqId {
        self.obj.recv_cq.id
    }

    /// The SRQ the QP receives through, if any ([`Srq::id`]).
    pub fn srq_id(&self) -> Option<mlx5_hw::SrqId> {
        self.obj.srq.as_ref().map(|s| s.id())
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        self.obj.pd.context()
    }

    /// The data path alone (also reachable through `Deref`).
    pub fn data_path(&mut self) -> &mut mlx5_qp::Qp {
        &mut self.dp
    }

    /// The QP's attributes as the device reports them.
    pub fn query(&self) -> Result<QpAttr> {
        Ok(self.context().device().query_qp(self.obj.id)?)
    }

    /// Apply one typed transition ([`mlx5_hw::transition`]: validated against the kernel's
    /// state table, one log event, confirmed by a query) from the state the device reports, and
    /// tell the data path the state reached — also when the step fails.
    pub fn modify(&mut self, step: &Step) -> Result<QpAttr> {
        let dev = self.obj.pd.context().device();
        let from = dev.query_qp(self.obj.id)?.qp_state;
        let r = transition::apply(
            dev,
            self.obj.id,
            self.obj.qp_type,
            self.dp.qpn(),
            from,
            step,
        );
        let now = match &r {
            Ok(a) => a.qp_state,
            Err(_) => dev
                .query_qp(self.obj.id)
                .map(|a| a.qp_state)
                .unwrap_or(from),
        };
        if from == QpState::Sqe {
            // The data path may not have polled the error that put the QP there: SQE first,
            // so that a recovery to RTS ends the send queue's error period where it is now.
            self.dp.set_state(from);
        }
        self.dp.set_state(now);
        Ok(r?)
    }

    /// Apply `steps` in order ([`Qp::modify`] each), stopping at the first failure.
    pub fn modify_all(&mut self, steps: &[Step]) -> Result<QpAttr> {
        let mut last = None;
        for s in steps {
            last = Some(self.modify(s)?);
        }
        match last {
            Some(a) => Ok(a),
            None => self.query(),
        }
    }

    /// The state the data path believes the QP is in (kept in step by [`Qp::modify`] and by
    /// polling: an error completion moves it to Error).
    pub fn state(&self) -> QpState {
        self.dp.state()
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use super::QpInit;
    use crate::Context;

    /// A QP (and a DC target) destroyed is written down on its CQs with its SRQ, whose polls
    /// then settle its queued CQEs (`mlx5_qp::DestroyedQps`); a live DC target is on its CQ's
    /// `mlx5_qp::DcTargets`; a new QP's number is a live
    /// QP's again on its CQs: had a CQ remembered it as a destroyed QP's (the device hands
    /// numbers out again), its polls would settle the new QP's CQEs as the destroyed one's.
    /// The software ConnectX counts numbers up, so the next QP's is among the 64 after the
    /// last one's.
    #[test]
    fn destroyed_qps_are_written_down_on_their_cqs_until_their_number_comes_back() {
        let ctx = Context::sim().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let (cq, rcq) = (ctx.create_cq(16).unwrap(), ctx.create_cq(16).unwrap());
        let first = pd.create_qp(&QpInit::rc(&cq)).unwrap();
        let last = first.qpn();
        let next = last + 1..last + 65;
        for c in [&cq, &rcq] {
            for qpn in next.clone() {
                c.obj().qp_destroyed(qpn, None);
            }
        }
        let qp = pd.create_qp(&QpInit::rc(&cq).recv_cq(&rcq)).unwrap();
        assert!(next.contains(&qp.qpn()), "{:#x} after {last:#x}", qp.qpn());
        for c in [&cq, &rcq] {
            let d = &c.obj().destroyed;
            assert_eq!(d.get(qp.qpn()), None);
            assert_eq!(d.len(), 63, "the other numbers stay");
        }
        // Destroyed, it is on both CQs' lists, with the SRQ its receives went through.
        let srq = pd.create_srq(4, 1).unwrap();
        let qp = pd
            .create_qp(&QpInit::rc(&cq).recv_cq(&rcq).srq(&srq))
            .unwrap();
        let (qpn, srqn) = (qp.qpn(), srq.srqn());
        drop(qp);
        for c in [&cq, &rcq] {
            let d = c.obj().destroyed.get(qpn);
            assert_eq!(d.and_then(|d| d.srqn), Some(srqn), "{qpn:#x}");
        }
        // A DC target's receives complete on its SRQ by its number while it lives, and after.
        let dct = pd.create_dct(&cq, &srq, 7).unwrap();
        let dctn = dct.number();
        assert_eq!(cq.obj().dc_targets.srq_of(dctn), Some(srqn));
        assert_eq!(cq.obj().destroyed.get(dctn), None);
        drop(dct);
        assert_eq!(cq.obj().dc_targets.srq_of(dctn), None);
        let d = cq.obj().destroyed.get(dctn);
        assert_eq!(d.and_then(|d| d.srqn), Some(srqn), "DCT {dctn:#x}");
    }
}
