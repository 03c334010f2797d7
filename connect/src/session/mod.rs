//! Connecting a QP to its peer and rebuilding it after an error (`docs/sources.md` §18 and §20).
//!
//! Every way in shares two phases:
//! - **prepare**: Reset→Init, post the receives, query the port, pick a fresh PSN, build the
//!   endpoint to announce;
//! - **finish**: [`plan`] the RTR and RTS steps from the peer's endpoint, apply them, create
//!   the peer's address handle for UD.
//!
//! Over TCP ([`Connection::accept`], [`Connection::connect`]) the endpoints cross as HELLO
//! messages between the phases, and a READY message each way after `finish` makes sure
//! neither side sends before both are in RTS with receives posted. In one process
//! ([`connect_pair`]) the endpoints are simply handed across.
//!
//! [`Connection::rebuild`] is the seed's `rebuild_qp`: Error, drain the CQ, tell the peer
//! (REBUILD with a fresh PSN), Reset, prepare, finish, READY — every step logged.
//!
//! A QP that was destroyed cannot be brought back: [`Connection::replace_qp`] retires it
//! (every WR its data path still holds is flushed) and swaps in a new QP; the next rebuild
//! announces the new QPN in the REBUILD message, and the peer, which met RETRY_EXC_ERR
//! sending to the vanished QPN, reconnects to it.

//!
//! The code: this module holds the types and the TCP handshake; `steps` the two phases and
//! the logging they share; `rebuild` recovery; `pair` the in-process twins.

mod oob;
mod pair;
mod rebuild;
mod steps;
#[cfg(test)]
mod tests;

pub use pair::{connect_pair, rebuild_pair, PairSide};
use steps::{abort, finish, log_connected, prepare, ready_exchange, unexpected};

use crate::control::Control;
use crate::error::{ConnectError, Result};
use crate::link::Link;
use crate::params::ConnectParams;
use crate::plan::Plan;
use crate::wire::{AbortCode, Endpoint, Message, RemoteBuffer};
use mlx5_cq::WcStatus;
use mlx5_hw::{AhInfo, Device, Mtu, PdId, QpId, QpInfo, QpState, QpType};
use mlx5_qp::Wc;
use std::net::{TcpListener, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};

/// The control path's name for a QP: its device handle, number and type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpRef {
    /// Device handle.
    pub id: QpId,
    /// QP number.
    pub qpn: u32,
    /// Transport type.
    pub qp_type: QpType,
    /// Protection domain (UD: the peer's address handle is created in it).
    pub pd: PdId,
}

impl QpRef {
    /// The reference to a QP created in `pd`.
    pub fn new(info: &QpInfo, pd: PdId) -> QpRef {
        QpRef {
            id: info.id,
            qpn: info.qpn,
            qp_type: info.qp_type,
            pd,
        }
    }
}

/// How to reach the peer of a UD QP: its address handle, QPN and Q_Key (build a
/// [`mlx5_qp::UdDest`] from them).
#[derive(Clone, Copy, Debug)]
pub struct UdPeer {
    /// The address handle created for the peer.
    pub ah: AhInfo,
    /// The peer's QPN.
    pub qpn: u32,
    /// The Q_Key the peer accepts.
    pub qkey: u32,
}

impl UdPeer {
    /// The destination for UD sends to the peer.
    pub fn dest(&self) -> mlx5_qp::UdDest {
        mlx5_qp::UdDest::new(&self.ah.av, self.qpn, self.qkey)
    }
}

/// Something the peer asked for over the control connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlEvent {
    /// The peer is rebuilding its QP; call [`Connection::rebuild`] to rebuild this side.
    RebuildRequested {
        /// The completion status that made the peer rebuild.
        reason: WcStatus,
        /// The generation being built.
        generation: u32,
    },
    /// The peer gave up or shut down.
    PeerAborted(AbortCode),
}

/// What a rebuild did.
#[derive(Clone, Debug)]
pub struct RebuildReport {
    /// The new generation.
    pub generation: u32,
    /// Why the rebuild happened (this side's reason, or the peer's if it asked).
    pub reason: WcStatus,
    /// The state the QP was in when the rebuild started (Reset for a QP swapped in by
    /// [`Connection::replace_qp`]).
    pub from_state: QpState,
    /// Every completion drained from the CQ and flushed from the data path, in order.
    pub drained: Vec<Wc>,
    /// The send PSN before and after.
    pub sq_psn: (u32, u32),
    /// The peer's new send PSN (this side's new `rq_psn`).
    pub peer_psn: u32,
    /// This side's QPN before and after: they differ when [`Connection::replace_qp`] swapped
    /// in a new QP since the last generation.
    pub qpn: (u32, u32),
    /// The peer's QPN before and after: they differ when the peer replaced its QP.
    pub peer_qpn: (u32, u32),
}

impl RebuildReport {
    /// The first completion that is neither a success nor a flush: what went wrong.
    pub fn first_error(&self) -> Option<&Wc> {
        self.drained
            .iter()
            .find(|w| !w.is_ok() && w.status() != WcStatus::WrFlushErr)
    }
}

/// A connected QP: its endpoints, generation and control connection (none for an in-process
/// pair). The data path stays with the caller; connect and rebuild borrow it through a
/// [`Link`].
#[derive(Debug)]
pub struct Connection {
    qp: QpRef,
    params: ConnectParams,
    local: Endpoint,
    peer: Endpoint,
    plan: Plan,
    generation: u32,
    state: QpState,
    ud_peer: Option<UdPeer>,
    control: Option<Control>,
    pending_rebuild: Option<(Endpoint, WcStatus, u32)>,
    /// Set by [`Connection::replace_qp`] until the next rebuild succeeds: the QPN the last
    /// generation ran on and the completions retired from the replaced QPs' data paths.
    replaced: Option<Replaced>,
    /// The context whose device made the UD peer's address handle, when this connection
    /// owns it (the owning-QP functions of [`crate::owned`]): destroyed on drop.
    ah_owner: Option<mlx5_ctx::Context>,
}

impl Connection {
    /// Make the UD peer's address handle (this one and those later rebuilds make) the
    /// connection's, destroyed through `ctx` when it drops.
    pub(crate) fn own_ah(&mut self, ctx: mlx5_ctx::Context) {
        self.ah_owner = Some(ctx);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let (Some(ctx), Some(peer)) = (self.ah_owner.take(), self.ud_peer.take()) {
            if let Err(e) = ctx.device().destroy_ah(peer.ah.id) {
                tracing::warn!(target: "mlx5_connect", qpn = self.qp.qpn, error = %e,
                    "destroying the UD peer's address handle failed");
            }
        }
    }
}

/// What [`Connection::replace_qp`] leaves for the next rebuild's report.
#[derive(Debug)]
struct Replaced {
    /// The QPN of the last connected generation.
    qpn: u32,
    /// Completions of the replaced QPs' WRs, in the order they were retired.
    retired: Vec<Wc>,
}

impl Connection {
    /// Accepts the peer's control connection on `listener` and connects `qp` to the peer's
    /// QP (the server side; the client calls [`Connection::connect`]).
    pub fn accept(
        listener: &TcpListener,
        dev: &dyn Device,
        qp: QpRef,
        link: &mut dyn Link,
        params: &ConnectParams,
    ) -> Result<Connection> {
        let control = Control::accept(listener, params.io_timeout)?;
        Connection::over(control, dev, qp, link, params)
    }

    /// Connects to the peer's control address and connects `qp` to the peer's QP.
    pub fn connect<A: ToSocketAddrs>(
        addr: A,
        dev: &dyn Device,
        qp: QpRef,
        link: &mut dyn Link,
        params: &ConnectParams,
    ) -> Result<Connection> {
        let control = Control::connect(addr, params.io_timeout)?;
        Connection::over(control, dev, qp, link, params)
    }

    /// Runs the handshake on an established control connection: prepare, HELLO each way,
    /// finish, READY each way. On a failure after the control connection is up the peer is
    /// sent an ABORT so it fails at once instead of timing out.
    pub fn over(
        mut control: Control,
        dev: &dyn Device,
        qp: QpRef,
        link: &mut dyn Link,
        params: &ConnectParams,
    ) -> Result<Connection> {
        let generation = 0;
        let r = (|| {
            let cur = dev.query_qp(qp.id)?.qp_state;
            let local = prepare(dev, &qp, link, params, cur)?;
            control.send(&Message::Hello {
                generation,
                endpoint: local,
            })?;
            let peer = match control.recv("the peer's HELLO")? {
                Message::Hello {
                    generation: 0,
                    endpoint,
                } => endpoint,
                other => return Err(unexpected("HELLO", generation, &other)),
            };
            let (plan, ud_peer) = finish(dev, &qp, link, params, &local, &peer)?;
            ready_exchange(&mut control, &qp, &peer, generation)?;
            Ok((local, peer, plan, ud_peer))
        })();
        match r {
            Ok((local, peer, plan, ud_peer)) => {
                log_connected(&qp, &local, &peer, &plan, generation, "tcp");
                Ok(Connection {
                    qp,
                    params: params.clone(),
                    local,
                    peer,
                    plan,
                    generation,
                    state: QpState::Rts,
                    ud_peer,
                    control: Some(control),
                    pending_rebuild: None,
                    replaced: None,
                    ah_owner: None,
                })
            }
            Err(e) => {
                abort(&mut control, generation, &e);
                Err(e)
            }
        }
    }

    /// The QP.
    pub fn qp(&self) -> QpRef {
        self.qp
    }
    /// What this side announced (its current PSN, port, buffer).
    pub fn local(&self) -> &Endpoint {
        &self.local
    }
    /// What the peer announced.
    pub fn peer(&self) -> &Endpoint {
        &self.peer
    }
    /// The buffer the peer announced, if any.
    pub fn remote_buffer(&self) -> Option<RemoteBuffer> {
        self.peer.buffer
    }
    /// The path MTU in use.
    pub fn path_mtu(&self) -> Mtu {
        self.plan.path_mtu
    }
    /// The RTR/RTS steps of the current generation.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// 0 for the first connection, +1 per rebuild.
    pub fn generation(&self) -> u32 {
        self.generation
    }
    /// The state the control path last brought the QP to.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// UD: how to address the peer.
    ///
    /// The address handle belongs to the connection when it was made by the owning-QP
    /// functions ([`crate::connect_qps`], [`crate::accept_qp`], [`crate::connect_qp`]): it is
    /// destroyed when the connection drops. A connection made on a bare [`Device`]
    /// ([`Connection::accept`], [`Connection::connect`], [`Connection::over`],
    /// [`connect_pair`]) leaves it to the caller: `dev.destroy_ah(peer.ah.id)` once no send
    /// uses it. A rebuild replaces it either way (destroying the old one).
    pub fn ud_peer(&self) -> Option<&UdPeer> {
        self.ud_peer.as_ref()
    }
    /// The parameters the connection was made with.
    pub fn params(&self) -> &ConnectParams {
        &self.params
    }

    /// The control connection to the peer (none for an in-process pair).
    pub fn control(&self) -> Option<&Control> {
        self.control.as_ref()
    }

    /// The control socket's descriptor (none for an in-process pair): readable when the peer
    /// sent something or closed the connection. An event-driven program sleeps on it together
    /// with its completion channel's fd and the device's event fd (`mlx5_ctx::CompChannel`,
    /// `mlx5_ctx::AsyncEvents`, all `AsFd`; `mlx5_hw::device::wait_any_readable` waits on
    /// several), and on readiness calls [`Connection::poll_control`] until it returns `None`:
    /// a rebuild request wakes it at once, with no polling interval.
    pub fn control_fd(&self) -> Option<BorrowedFd<'_>> {
        self.control.as_ref().map(AsFd::as_fd)
    }

    /// Checks, without waiting, whether the peer sent something: a rebuild request (then
    /// call [`Connection::rebuild`]) or an abort. `None` means nothing more is there now (the
    /// socket was read until it would block, [`Control::try_recv`]), so the control
    /// descriptor ([`Connection::control_fd`]) is readable again only when the peer sends.
    /// A rebuild request is returned again by every call until [`Connection::rebuild`] runs.
    pub fn poll_control(&mut self) -> Result<Option<ControlEvent>> {
        if let Some((_, reason, generation)) = self.pending_rebuild {
            return Ok(Some(ControlEvent::RebuildRequested { reason, generation }));
        }
        let control = self
            .control
            .as_mut()
            .ok_or(ConnectError::NoControlChannel)?;
        match control.try_recv()? {
            None => Ok(None),
            Some(Message::Rebuild {
                generation,
                endpoint,
                reason,
            }) if generation == self.generation.wrapping_add(1) => {
                tracing::warn!(
                    target: "mlx5_connect",
                    qpn = self.qp.qpn,
                    peer_qpn = endpoint.qpn,
                    peer_qpn_before = self.peer.qpn,
                    reason = reason.name(),
                    generation,
                    "the peer requests a rebuild"
                );
                self.pending_rebuild = Some((endpoint, reason, generation));
                Ok(Some(ControlEvent::RebuildRequested { reason, generation }))
            }
            Some(Message::Abort { code, .. }) => {
                if code == AbortCode::Shutdown {
                    tracing::info!(target: "mlx5_connect", qpn = self.qp.qpn, "the peer shut down");
                } else {
                    tracing::warn!(target: "mlx5_connect", qpn = self.qp.qpn, reason = code.describe(), "the peer aborted");
                }
                Ok(Some(ControlEvent::PeerAborted(code)))
            }
            Some(other) => Err(unexpected("REBUILD or ABORT", self.generation, &other)),
        }
    }

    /// Tells the peer this side is done (an ABORT with `Shutdown`) and closes the control
    /// connection. The QP is left as it is; destroy it with the device.
    pub fn close(mut self) -> Result<()> {
        if let Some(mut c) = self.control.take() {
            c.send(&Message::Abort {
                generation: self.generation,
                code: AbortCode::Shutdown,
            })?;
        }
        Ok(())
    }
}
