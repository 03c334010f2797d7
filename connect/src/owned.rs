//! Connecting the owning QPs of `mlx5-ctx` in one call: two QPs of this process
//! ([`connect_qps`]), or one QP and a peer over TCP ([`accept_qp`], [`connect_qp`]).
//!
//! Each takes the QP in Reset (or Init) and returns it in RTS with the data path told, through
//! the same prepare/plan/finish code as [`Connection`]. The PSNs, path and retry parameters
//! come from [`ConnectParams`] (`psn`, `max_mtu`, `timeout`, `retry_cnt`, `rnr_retry`, ...). A
//! failed TCP connect leaves the QP in Reset, ready for the next attempt. For a UD QP the
//! returned [`Connection`] owns the peer's address handle and destroys it when it drops.

use std::net::{TcpListener, ToSocketAddrs};

use mlx5_ctx::Qp;
use mlx5_hw::transition::Step;
use mlx5_hw::QpState;
use mlx5_qp::Wc;

use crate::control::Control;
use crate::error::Result;
use crate::link::Link;
use crate::params::ConnectParams;
use crate::session::{connect_pair, Connection, PairSide, QpRef};

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
