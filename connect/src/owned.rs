//! Connecting the owning QPs of `mlx5-ctx` in one call: two QPs of this process
//! ([`connect_qps`]), or one QP and a peer over TCP ([`accept_qp`], [`connect_qp`]); and
//! recovering one in one call ([`Connection::recover`], [`recover_pair`]).
//!
//! Each takes the QP in Reset (or Init) and returns it in RTS with the data path told, through
//! the same prepare/plan/finish code as [`Connection`]. The PSNs, path and retry parameters
//! come from [`ConnectParams`] (`psn`, `max_mtu`, `timeout`, `retry_cnt`, `rnr_retry`, ...). A
//! failed TCP connect leaves the QP in Reset, ready for the next attempt. For a UD QP the
//! returned [`Connection`] owns the peer's address handle and destroys it when it drops.

use std::net::{TcpListener, ToSocketAddrs};

use mlx5_cq::WcStatus;
use mlx5_ctx::{Cq, Qp, Srq};
use mlx5_hw::transition::Step;
use mlx5_hw::QpState;
use mlx5_qp::Wc;

use crate::control::Control;
use crate::error::{ConnectError, Result};
use crate::link::{Link, QpLink};
use crate::params::ConnectParams;
use crate::session::{connect_pair, rebuild_pair, Connection, PairSide, QpRef, RebuildReport};

/// A [`Link`] over an owning QP: state changes go to its data path, receives are posted by
/// `recv` (called once the QP is in Init, before the peer is told it is ready).
struct OwnedLink<'a, F> {
    qp: &'a mut mlx5_qp::Qp,
    recv: F,
}

impl<F: FnMut(&mut mlx5_qp::Qp) -> mlx5_qp::Result<()>> Link for OwnedLink<'_, F> {
    fn set_state(&mut self, state: QpState) {
        self.qp.set_state(state);
    }
    fn post_receives(&mut self) -> mlx5_qp::Result<()> {
        (self.recv)(self.qp)
    }
    fn poll(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        // Connecting polls nothing; rebuilds go through `Connection::rebuild` with a CQ.
        Ok(0)
    }
    fn flush_outstanding(&mut self, out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        self.qp.flush_outstanding(out)
    }
    fn data_path(&self) -> Option<&mlx5_qp::Qp> {
        Some(self.qp)
    }
}

/// The control path's name for an owning QP.
pub fn qp_ref(qp: &Qp) -> QpRef {
    QpRef {
        id: qp.id(),
        qpn: qp.qpn(),
        qp_type: qp.qp_type(),
        pd: qp.pd().id(),
    }
}

/// Connect two QPs of this process to each other (on one device or two) with `params` for
/// both; on return both are in RTS and their data paths know it. Post receives after this
/// returns: nothing is sent before then.
pub fn connect_qps(
    a: &mut Qp,
    b: &mut Qp,
    params: &ConnectParams,
) -> Result<(Connection, Connection)> {
    connect_qps_with((a, params), (b, params))
}

/// [`connect_qps`] with parameters per side (each side's PSN, access rights, announced
/// buffer, ...).
pub fn connect_qps_with(
    a: (&mut Qp, &ConnectParams),
    b: (&mut Qp, &ConnectParams),
) -> Result<(Connection, Connection)> {
    let (ra, rb) = (qp_ref(a.0), qp_ref(b.0));
    let (ca, cb) = (a.0.context().clone(), b.0.context().clone());
    let mut la = OwnedLink {
        qp: a.0.data_path(),
        recv: |_: &mut mlx5_qp::Qp| Ok(()),
    };
    let mut lb = OwnedLink {
        qp: b.0.data_path(),
        recv: |_: &mut mlx5_qp::Qp| Ok(()),
    };
    let (mut x, mut y) = connect_pair(
        PairSide {
            dev: ca.device(),
            qp: ra,
            link: &mut la,
            params: a.1,
        },
        PairSide {
            dev: cb.device(),
            qp: rb,
            link: &mut lb,
            params: b.1,
        },
    )?;
    x.own_ah(ca);
    y.own_ah(cb);
    Ok((x, y))
}

/// The server side over TCP: accept the peer's control connection on `listener` and connect
/// `qp` to the peer's QP. `recv` posts the receives the peer may consume (called with the QP in
/// Init, before the peer hears this side is ready). On failure the QP is back in Reset.
pub fn accept_qp(
    listener: &TcpListener,
    qp: &mut Qp,
    params: &ConnectParams,
    recv: impl FnMut(&mut mlx5_qp::Qp) -> mlx5_qp::Result<()>,
) -> Result<Connection> {
    let control = Control::accept(listener, params.io_timeout);
    over_control(control, qp, params, recv)
}

/// The client side over TCP: connect to the peer's control address `addr` and connect `qp` to
/// the peer's QP; `recv` as in [`accept_qp`]. On failure the QP is back in Reset.
pub fn connect_qp<A: ToSocketAddrs>(
    addr: A,
    qp: &mut Qp,
    params: &ConnectParams,
    recv: impl FnMut(&mut mlx5_qp::Qp) -> mlx5_qp::Result<()>,
) -> Result<Connection> {
    let control = Control::connect(addr, params.io_timeout);
    over_control(control, qp, params, recv)
}

/// [`accept_qp`] and [`connect_qp`] once the control connection is up (or failed): the
/// handshake over it ([`Connection::over`]), the connection owning the UD peer's address
/// handle; on failure the QP back in Reset.
fn over_control(
    control: Result<Control>,
    qp: &mut Qp,
    params: &ConnectParams,
    recv: impl FnMut(&mut mlx5_qp::Qp) -> mlx5_qp::Result<()>,
) -> Result<Connection> {
    let r = control.and_then(|control| {
        let ctx = qp.context().clone();
        let qref = qp_ref(qp);
        let mut link = OwnedLink {
            qp: qp.data_path(),
            recv,
        };
        let mut c = Connection::over(control, ctx.device(), qref, &mut link, params)?;
        c.own_ah(ctx);
        Ok(c)
    });
    back_to_reset_on_error(qp, r)
}

/// A failed attempt may have left the QP in Init or RTR: take it back to Reset (forgetting the
/// receives the attempt posted) so the same QP can try again.
fn back_to_reset_on_error(qp: &mut Qp, r: Result<Connection>) -> Result<Connection> {
    let failed = r.is_err();
    if failed && qp.query().map_or(qp.state(), |a| a.qp_state) != QpState::Reset {
        if let Err(e) = qp.modify(&Step::Reset) {
            tracing::warn!(target: "mlx5_connect", qpn = qp.qpn(), error = %e,
                "could not take the QP back to Reset after a failed connect");
        }
    }
    r
}

/// Posts a QP's receives during a rebuild (called with the QP in Init).
type PostReceives<'a> = Box<dyn FnMut(&mut mlx5_qp::Qp) -> mlx5_qp::Result<()> + 'a>;

/// What recovering an owning QP needs: the QP, the CQs it completes on (shared with other QPs
/// or not), the SRQ it receives through and how to post its own receives again — the objects
/// [`Connection::recover`] and [`recover_pair`] drain, reset and reconnect.
///
/// Each must be the QP's own: the CQ its sends complete on, the receive CQ when it has
/// another, its SRQ when it has one; the recovery checks them against the QP (a CQ or SRQ the
/// QP does not report to could not give back its completions) before it touches anything.
pub struct Recover<'a> {
    qp: &'a mut Qp,
    cq: &'a mut Cq,
    recv_cq: Option<&'a mut Cq>,
    srq: Option<&'a mut Srq>,
    receives: PostReceives<'a>,
}

impl core::fmt::Debug for Recover<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Recover")
            .field("qp", &self.qp)
            .field("cq", &self.cq)
            .field("recv_cq", &self.recv_cq)
            .field("srq", &self.srq)
            .finish_non_exhaustive()
    }
}

impl<'a> Recover<'a> {
    /// `qp`, whose completions go to `cq`; no receives are posted again (an SRQ's stay
    /// posted: the SRQ is not reset with the QP).
    pub fn new(qp: &'a mut Qp, cq: &'a mut Cq) -> Recover<'a> {
        Recover {
            qp,
            cq,
            recv_cq: None,
            srq: None,
            receives: Box::new(|_| Ok(())),
        }
    }

    /// The QP's receive completions go to `cq` ([`mlx5_ctx::QpInit::recv_cq`]).
    pub fn recv_cq(mut self, cq: &'a mut Cq) -> Recover<'a> {
        self.recv_cq = Some(cq);
        self
    }

    /// The QP receives through `srq`: its SRQ receives the drain meets come back with their WR
    /// ids ([`RebuildReport::drained`]), to be posted to the SRQ again.
    pub fn srq(mut self, srq: &'a mut Srq) -> Recover<'a> {
        self.srq = Some(srq);
        self
    }

    /// Post the QP's own receives with `post` once it is in Init again (the Reset forgot the
    /// ones posted before; the drain reported each of them flushed).
    pub fn receives(
        mut self,
        post: impl FnMut(&mut mlx5_qp::Qp) -> mlx5_qp::Result<()> + 'a,
    ) -> Recover<'a> {
        self.receives = Box::new(post);
        self
    }

    /// The checks of the objects against the QP and the connection.
    fn check(&self, conn: &Connection) -> Result<()> {
        let qpn = self.qp.qpn();
        let wrong = |why: String| ConnectError::WrongObjects { qpn, why };
        if self.qp.id() != conn.qp().id {
            return Err(wrong(format!(
                "the connection's QP is {:#x}: recover it with its own QP",
                conn.qp().qpn
            )));
        }
        if self.cq.id() != self.qp.send_cq_id() {
            return Err(wrong(format!(
                "its sends complete on CQ {:?}, not on the CQ {:?} given",
                self.qp.send_cq_id(),
                self.cq.id()
            )));
        }
        let recv = self.recv_cq.as_ref().map_or(self.cq.id(), |c| c.id());
        if recv != self.qp.recv_cq_id() {
            return Err(wrong(format!(
                "its receives complete on CQ {:?}: give it with Recover::recv_cq",
                self.qp.recv_cq_id()
            )));
        }
        match (self.qp.srq_id(), self.srq.as_ref().map(|s| s.id())) {
            (Some(want), Some(got)) if want != got => Err(wrong(format!(
                "it receives through SRQ {want:?}, not the SRQ {got:?} given"
            ))),
            (Some(want), None) => Err(wrong(format!(
                "it receives through SRQ {want:?}: give it with Recover::srq, so that its \
                 receives come back"
            ))),
            (None, Some(got)) => Err(wrong(format!(
                "it has a receive queue of its own, not the SRQ {got:?} given"
            ))),
            _ => Ok(()),
        }
    }

    /// The link the rebuild drives, and the QP's context (its device).
    fn link(self) -> (mlx5_ctx::Context, QpLink<'a, PostReceives<'a>>) {
        let ctx = self.qp.context().clone();
        let mut link = QpLink::new(self.qp.data_path(), self.cq, self.receives);
        if let Some(c) = self.recv_cq {
            link = link.recv_cq(c);
        }
        if let Some(s) = self.srq {
            link = link.srq(s);
        }
        (ctx, link)
    }
}

impl Connection {
    /// Rebuilds this connection's owning QP after an error (or because the peer asked,
    /// [`Connection::poll_control`]) in one call: [`Connection::rebuild`] on the objects that
    /// own the QP — its device, its data path, its CQs and SRQ — checked against the QP first
    /// ([`Recover`]).
    ///
    /// The drain takes only this QP's completions from the CQs, shared or not: the other QPs'
    /// stay in the CQ for their owner's next poll, and this QP's SRQ receives come back in
    /// [`RebuildReport::drained`] with their WR ids (post them to the SRQ again); its own
    /// receives are reported flushed there and posted again by [`Recover::receives`]. Every
    /// WR of every QP on the CQ completes exactly once.
    ///
    /// ```no_run
    /// # use mlx5_connect::{Connection, Recover};
    /// # fn f(conn: &mut Connection, qps: &mut [mlx5_ctx::Qp], cq: &mut mlx5_ctx::Cq,
    /// #      srq: &mut mlx5_ctx::Srq, mr: &mlx5_ctx::Mr, c: usize, wc: mlx5_qp::Wc)
    /// #      -> Result<(), Box<dyn std::error::Error>> {
    /// // QP `c` of a server whose QPs share `cq` and `srq` failed with `wc`:
    /// let report = conn.recover(Recover::new(&mut qps[c], cq).srq(srq), wc.status())?;
    /// for w in report.drained.iter().filter(|w| w.opcode().is_recv() && w.is_ok()) {
    ///     // A request that arrived before the error: serve it, then give the receive back.
    ///     srq.post_recv(w.wr_id(), &[mr.sge(w.wr_id() as usize * 64, 64)?])?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recover(&mut self, parts: Recover<'_>, reason: WcStatus) -> Result<RebuildReport> {
        parts.check(self)?;
        let (ctx, mut link) = parts.link();
        self.rebuild(ctx.device(), &mut link, reason)
    }
}

/// Rebuilds both owning QPs of an in-process pair ([`connect_qps`]) in one call:
/// [`rebuild_pair`] on the objects that own them, each checked against its QP first
/// ([`Recover`], [`Connection::recover`]).
pub fn recover_pair(
    a: (&mut Connection, Recover<'_>),
    b: (&mut Connection, Recover<'_>),
    reason: WcStatus,
) -> Result<(RebuildReport, RebuildReport)> {
    a.1.check(a.0)?;
    b.1.check(b.0)?;
    let (ctx_a, mut la) = a.1.link();
    let (ctx_b, mut lb) = b.1.link();
    rebuild_pair(
        ctx_a.device(),
        a.0,
        &mut la,
        ctx_b.device(),
        b.0,
        &mut lb,
        reason,
    )
}
