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

use super::control::Control;
use super::error::{ConnectError, Result};
use super::link::Link;
use super::params::ConnectParams;
use super::plan::{init_step, local_endpoint, plan, random_psn, LocalPort, Plan};
use super::wire::{AbortCode, Endpoint, Message, RemoteBuffer};
use mlx5_cq::WcStatus;
use mlx5_hw::qp_state;
use mlx5_hw::transition::{self, Step};
use mlx5_hw::{AhInfo, Device, Mtu, PdId, QpAttr, QpId, QpInfo, QpState, QpType};
use mlx5_qp::Wc;
use std::net::{TcpListener, ToSocketAddrs};
use std::time::Instant;

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
            .find(|w| !w.is_ok() && w.status != WcStatus::WrFlushErr)
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
    pub fn ud_peer(&self) -> Option<&UdPeer> {
        self.ud_peer.as_ref()
    }
    /// The parameters the connection was made with.
    pub fn params(&self) -> &ConnectParams {
        &self.params
    }

    /// Checks, without waiting, whether the peer sent something: a rebuild request (then
    /// call [`Connection::rebuild`]) or an abort.
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
                tracing::warn!(target: "mlx5_connect", qpn = self.qp.qpn, reason = code.describe(), "the peer aborted");
                Ok(Some(ControlEvent::PeerAborted(code)))
            }
            Some(other) => Err(unexpected("REBUILD or ABORT", self.generation, &other)),
        }
    }

    /// Rebuilds the connection after an error (or because the peer asked, see
    /// [`Connection::poll_control`]): moves the QP to Error if it is not there, drains its
    /// completions, sends the peer a REBUILD with a fresh PSN, takes the QP
    /// Error→Reset→Init (reposting receives) →RTR→RTS with the peer's fresh PSN, and
    /// exchanges READY. The peer does the same on its side in response. `reason` is what
    /// triggered it (the status of the error completion; `IBV_WC_SUCCESS` if none); when the
    /// peer asked first, the report carries the peer's reason instead.
    pub fn rebuild(
        &mut self,
        dev: &dyn Device,
        link: &mut dyn Link,
        reason: WcStatus,
    ) -> Result<RebuildReport> {
        if self.control.is_none() {
            return Err(ConnectError::NoControlChannel);
        }
        let next = self.generation.wrapping_add(1);
        let pending = self.pending_rebuild.take();
        let reason = pending.map_or(reason, |(_, r, _)| r);
        let r = (|| {
            let (from_state, drained) = reset(dev, &self.qp, link, &self.params, next, reason)?;
            let cur = QpState::Reset;
            let local = prepare(dev, &self.qp, link, &self.params, cur)?;
            log_step(
                &self.qp,
                next,
                "announce the fresh PSN to the peer (REBUILD)",
            );
            let control = self
                .control
                .as_mut()
                .ok_or(ConnectError::NoControlChannel)?;
            control.send(&Message::Rebuild {
                generation: next,
                endpoint: local,
                reason,
            })?;
            let peer = match pending {
                Some((endpoint, _, _)) => endpoint,
                None => match control.recv("the peer's REBUILD")? {
                    Message::Rebuild {
                        generation,
                        endpoint,
                        ..
                    } if generation == next => endpoint,
                    other => return Err(unexpected("REBUILD", next, &other)),
                },
            };
            let (plan, ud_peer) = finish(dev, &self.qp, link, &self.params, &local, &peer)?;
            ready_exchange(control, &self.qp, &peer, next)?;
            Ok((from_state, drained, local, peer, plan, ud_peer))
        })();
        match r {
            Ok((from_state, drained, local, peer, plan, ud_peer)) => {
                Ok(self.rebuilt(dev, from_state, drained, local, peer, plan, ud_peer, reason))
            }
            Err(e) => {
                self.state = dev
                    .query_qp(self.qp.id)
                    .map_or(QpState::Error, |a| a.qp_state);
                if let Some(c) = self.control.as_mut() {
                    abort(c, next, &e);
                }
                Err(e)
            }
        }
    }

    /// Swaps in `new_qp` for this side's QP, which was destroyed or is beyond use (a fatal
    /// async event, a QP destroyed by mistake, a restarted component that owned it). The next
    /// [`Connection::rebuild`] (or [`rebuild_pair`]) brings `new_qp` up and announces its QPN
    /// in the REBUILD message; the peer connects its QP to the new QPN.
    ///
    /// `new_qp` must have been created by the caller with the same type, and still be in
    /// Reset. `old_link` is the data path of the old QP: if the device still knows the old QP
    /// it is moved to Error and its completions are drained through `old_link`; either way
    /// every WR the data path still holds is reported as flushed (pass
    /// [`super::ControlOnly`] when that data path is gone too). These completions head the
    /// next [`RebuildReport::drained`], so every WR of the old QP is retired exactly once.
    ///
    /// Returns the old QP's reference; destroy it once its data path is dropped (a `Qp` must
    /// not outlive the device QP it posts to). On an error nothing was swapped.
    pub fn replace_qp(
        &mut self,
        dev: &dyn Device,
        new_qp: QpRef,
        old_link: &mut dyn Link,
    ) -> Result<QpRef> {
        let old = self.qp;
        let next = self.generation.wrapping_add(1);
        if new_qp.id == old.id || new_qp.qpn == old.qpn {
            return Err(ConnectError::InvalidReplacement {
                old_qpn: old.qpn,
                new_qpn: new_qp.qpn,
                why: "it is the connection's current QP; create a new one".into(),
            });
        }
        if new_qp.qp_type != old.qp_type {
            return Err(ConnectError::InvalidReplacement {
                old_qpn: old.qpn,
                new_qpn: new_qp.qpn,
                why: format!(
                    "it is a {} QP and the connection is {}: the peer's QP only talks to the \
                     same transport",
                    new_qp.qp_type, old.qp_type
                ),
            });
        }
        let state = dev.query_qp(new_qp.id)?.qp_state;
        if state != QpState::Reset {
            return Err(ConnectError::InvalidReplacement {
                old_qpn: old.qpn,
                new_qpn: new_qp.qpn,
                why: format!(
                    "it is in {state}; the replacement must be a freshly created QP (Reset)"
                ),
            });
        }
        tracing::warn!(
            target: "mlx5_connect",
            qpn = old.qpn,
            new_qpn = new_qp.qpn,
            generation = next,
            "replace QP: retire the old QP before swapping in the new one"
        );
        let retired = retire(dev, &old, old_link, &self.params, next)?;
        let replaced = self.replaced.get_or_insert(Replaced {
            qpn: old.qpn,
            retired: Vec::new(),
        });
        replaced.retired.extend_from_slice(&retired);
        self.qp = new_qp;
        self.state = QpState::Reset;
        tracing::info!(
            target: "mlx5_connect",
            old_qpn = old.qpn,
            qpn = new_qp.qpn,
            generation = next,
            retired = retired.len(),
            "replace QP: new QP in place; rebuild to announce it to the peer"
        );
        Ok(old)
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

    #[allow(clippy::too_many_arguments)]
    fn rebuilt(
        &mut self,
        dev: &dyn Device,
        from_state: QpState,
        drained: Vec<Wc>,
        local: Endpoint,
        peer: Endpoint,
        plan: Plan,
        ud_peer: Option<UdPeer>,
        reason: WcStatus,
    ) -> RebuildReport {
        if let Some(old) = self.ud_peer.take() {
            if let Err(e) = dev.destroy_ah(old.ah.id) {
                tracing::warn!(target: "mlx5_connect", error = %e, "destroying the old address handle failed");
            }
        }
        let replaced = self.replaced.take();
        let qpn_before = replaced.as_ref().map_or(self.qp.qpn, |r| r.qpn);
        let drained = match replaced {
            Some(r) if !r.retired.is_empty() => {
                let mut all = r.retired;
                all.extend(drained);
                all
            }
            _ => drained,
        };
        if peer.qpn != self.peer.qpn {
            tracing::info!(
                target: "mlx5_connect",
                qpn = self.qp.qpn,
                old_peer_qpn = self.peer.qpn,
                peer_qpn = peer.qpn,
                "the peer replaced its QP: connected to its new QPN"
            );
        }
        let report = RebuildReport {
            generation: self.generation.wrapping_add(1),
            reason,
            from_state,
            drained,
            sq_psn: (self.local.psn, local.psn),
            peer_psn: peer.psn,
            qpn: (qpn_before, self.qp.qpn),
            peer_qpn: (self.peer.qpn, peer.qpn),
        };
        self.generation = report.generation;
        self.local = local;
        self.peer = peer;
        self.plan = plan;
        self.ud_peer = ud_peer;
        self.state = QpState::Rts;
        tracing::info!(
            target: "mlx5_connect",
            qpn = self.qp.qpn,
            dest_qpn = self.peer.qpn,
            generation = report.generation,
            reason = reason.name(),
            from = from_state.name(),
            drained = report.drained.len(),
            sq_psn = local.psn,
            rq_psn = peer.psn,
            "rebuild done: QP back in RTS"
        );
        report
    }
}

/// One side of an in-process pair: its device, QP, data path and parameters (each side
/// announces its own buffer).
pub struct PairSide<'a> {
    /// The device the QP lives on.
    pub dev: &'a dyn Device,
    /// The QP, in Reset (or Init).
    pub qp: QpRef,
    /// Its data path.
    pub link: &'a mut dyn Link,
    /// Its parameters.
    pub params: &'a ConnectParams,
}

impl core::fmt::Debug for PairSide<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PairSide")
            .field("dev", &self.dev.name())
            .field("qp", &self.qp)
            .finish_non_exhaustive()
    }
}

/// Connects two QPs of this process to each other without a control connection (tests, the
/// quickstart demo), through the same prepare/plan/finish code as the TCP handshake. The QPs
/// may live on the same device or on two.
pub fn connect_pair(a: PairSide<'_>, b: PairSide<'_>) -> Result<(Connection, Connection)> {
    let ea = prepare(
        a.dev,
        &a.qp,
        a.link,
        a.params,
        a.dev.query_qp(a.qp.id)?.qp_state,
    )?;
    let eb = prepare(
        b.dev,
        &b.qp,
        b.link,
        b.params,
        b.dev.query_qp(b.qp.id)?.qp_state,
    )?;
    let (pa, ua) = finish(a.dev, &a.qp, a.link, a.params, &ea, &eb)?;
    let (pb, ub) = finish(b.dev, &b.qp, b.link, b.params, &eb, &ea)?;
    log_connected(&a.qp, &ea, &eb, &pa, 0, "in-process");
    log_connected(&b.qp, &eb, &ea, &pb, 0, "in-process");
    let mk = |qp, params: &ConnectParams, local, peer, plan, ud_peer| Connection {
        qp,
        params: params.clone(),
        local,
        peer,
        plan,
        generation: 0,
        state: QpState::Rts,
        ud_peer,
        control: None,
        pending_rebuild: None,
        replaced: None,
    };
    Ok((
        mk(a.qp, a.params, ea, eb, pa, ua),
        mk(b.qp, b.params, eb, ea, pb, ub),
    ))
}

/// Rebuilds both QPs of an in-process pair (the in-process twin of
/// [`Connection::rebuild`]): both to Error, both drained, Reset, prepare with fresh PSNs,
/// finish.
pub fn rebuild_pair(
    dev_a: &dyn Device,
    a: &mut Connection,
    link_a: &mut dyn Link,
    dev_b: &dyn Device,
    b: &mut Connection,
    link_b: &mut dyn Link,
    reason: WcStatus,
) -> Result<(RebuildReport, RebuildReport)> {
    let next = a.generation.wrapping_add(1);
    let (fa, da) = reset(dev_a, &a.qp, link_a, &a.params, next, reason)?;
    let (fb, db) = reset(dev_b, &b.qp, link_b, &b.params, next, reason)?;
    let ea = prepare(dev_a, &a.qp, link_a, &a.params, QpState::Reset)?;
    let eb = prepare(dev_b, &b.qp, link_b, &b.params, QpState::Reset)?;
    let (pa, ua) = finish(dev_a, &a.qp, link_a, &a.params, &ea, &eb)?;
    let (pb, ub) = finish(dev_b, &b.qp, link_b, &b.params, &eb, &ea)?;
    let ra = a.rebuilt(dev_a, fa, da, ea, eb, pa, ua, reason);
    let rb = b.rebuilt(dev_b, fb, db, eb, ea, pb, ub, reason);
    Ok((ra, rb))
}

/// Applies one step, checked against the device's limits first, and tells the data path the
/// state the device reports afterwards — also when the step fails.
pub(crate) fn drive(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    from: QpState,
    step: &Step,
    limits: Option<&qp_state::DeviceLimits>,
) -> Result<QpAttr> {
    if let Some(lim) = limits {
        let (attr, mask) = step.build(from, qp.qp_type)?;
        if let Err(e) = qp_state::check_limits(&attr, mask, lim) {
            tracing::warn!(target: "mlx5_connect", qpn = qp.qpn, step = step.name(), error = %e, "modify refused before the device");
            return Err(e.into());
        }
    }
    match transition::apply(dev, qp.id, qp.qp_type, qp.qpn, from, step) {
        Ok(attr) => {
            link.set_state(attr.qp_state);
            Ok(attr)
        }
        Err(e) => {
            if let Ok(a) = dev.query_qp(qp.id) {
                link.set_state(a.qp_state);
            }
            Err(e.into())
        }
    }
}

/// Phase 1: Reset→Init (if the QP is in Reset), post receives, query the port, fresh PSN.
fn prepare(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
    cur: QpState,
) -> Result<Endpoint> {
    let psn = match params.psn {
        None => random_psn(),
        Some(p) if p <= 0x00ff_ffff => p,
        Some(p) => {
            return Err(ConnectError::Incompatible(format!(
                "ConnectParams::psn {p:#x} is wider than the 24 bits of a PSN (IBTA Vol. 1 §9.2, the BTH PSN field)"
            )))
        }
    };
    let port = LocalPort::query(dev, params)?;
    match cur {
        QpState::Reset => {
            drive(
                dev,
                qp,
                link,
                cur,
                &init_step(qp.qp_type, params),
                Some(&port.limits),
            )?;
        }
        QpState::Init => link.set_state(QpState::Init),
        state => {
            return Err(ConnectError::WrongState {
                op: "connect",
                state,
                hint: "connect starts from a QP in Reset (or Init); use rebuild for one that was \
                       connected before",
            })
        }
    }
    link.post_receives()?;
    let ep = local_endpoint(&port, qp.qpn, qp.qp_type, params, psn);
    tracing::info!(
        target: "mlx5_connect",
        qpn = qp.qpn,
        qp_type = qp.qp_type.name(),
        psn,
        lid = ep.lid,
        gid = %ep.gid,
        mtu = ep.mtu.bytes(),
        "QP in Init with receives posted; local endpoint ready"
    );
    Ok(ep)
}

/// Phase 2: plan from the peer's endpoint, Init→RTR→RTS, and the UD address handle.
fn finish(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
    local: &Endpoint,
    peer: &Endpoint,
) -> Result<(Plan, Option<UdPeer>)> {
    let pl = plan(local, peer, params)?;
    let port = LocalPort::query(dev, params)?;
    drive(dev, qp, link, QpState::Init, &pl.rtr, Some(&port.limits))?;
    drive(dev, qp, link, QpState::Rtr, &pl.rts, Some(&port.limits))?;
    let ud_peer = if qp.qp_type == QpType::Ud {
        let ah = dev.create_ah(qp.pd, &pl.ah)?;
        Some(UdPeer {
            ah,
            qpn: peer.qpn,
            qkey: peer.qkey,
        })
    } else {
        None
    };
    Ok((pl, ud_peer))
}

/// The start of a rebuild: Error (unless there already), drain the completions, Reset.
fn reset(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
    generation: u32,
    reason: WcStatus,
) -> Result<(QpState, Vec<Wc>)> {
    let from = dev.query_qp(qp.id)?.qp_state;
    tracing::warn!(
        target: "mlx5_connect",
        qpn = qp.qpn,
        generation,
        state = from.name(),
        reason = reason.name(),
        "rebuild: start"
    );
    let mut cur = from;
    if cur != QpState::Error && cur != QpState::Reset {
        log_step(qp, generation, "move to Error to flush outstanding work");
        cur = drive(dev, qp, link, cur, &Step::Error, None)?.qp_state;
    } else {
        link.set_state(cur);
    }
    let drained = if cur == QpState::Error {
        drain(dev, qp, link, params, generation)
    } else {
        Vec::new()
    };
    if cur == QpState::Reset {
        // A QP swapped in by `replace_qp` (or one reset by an earlier, failed rebuild).
        log_step(qp, generation, "already in Reset (nothing to flush)");
    } else {
        log_step(qp, generation, "Error -> Reset");
        drive(dev, qp, link, cur, &Step::Reset, None)?;
    }
    Ok((from, drained))
}

/// Takes a QP that is being replaced out of service: Error (if the device still knows it and
/// it is not there yet), then every completion polled and every WR the data path still holds
/// flushed. A QP the device no longer knows (destroyed) can only have its data path flushed.
fn retire(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
    generation: u32,
) -> Result<Vec<Wc>> {
    match dev.query_qp(qp.id) {
        Ok(a) => {
            let mut cur = a.qp_state;
            if cur == QpState::Reset {
                link.set_state(cur);
                log_step(qp, generation, "old QP in Reset: nothing outstanding");
                return Ok(Vec::new());
            }
            if cur != QpState::Error {
                log_step(qp, generation, "move the old QP to Error to flush its work");
                cur = drive(dev, qp, link, cur, &Step::Error, None)?.qp_state;
            }
            link.set_state(cur);
        }
        Err(e) => {
            tracing::warn!(
                target: "mlx5_connect",
                qpn = qp.qpn,
                generation,
                error = %e,
                "the old QP is gone from the device (destroyed): flushing what its data path holds"
            );
            link.set_state(QpState::Error);
        }
    }
    Ok(drain(dev, qp, link, params, generation))
}

/// Polls until the CQ has been empty for a few rounds (or the I/O timeout passes), then
/// flushes what the data path still holds. Errors from polling are logged, not fatal: the
/// goal is to account for every WR before the Reset forgets them.
fn drain(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
    generation: u32,
) -> Vec<Wc> {
    const EMPTY_ROUNDS: u32 = 3;
    let deadline = Instant::now() + params.io_timeout;
    let mut out = Vec::new();
    let mut buf = [Wc::default(); 32];
    let mut empty = 0;
    while empty < EMPTY_ROUNDS && Instant::now() < deadline {
        dev.progress();
        match link.poll(&mut buf) {
            Ok(0) => empty += 1,
            Ok(n) => {
                empty = 0;
                out.extend_from_slice(&buf[..n]);
            }
            Err(e) => {
                tracing::warn!(target: "mlx5_connect", qpn = qp.qpn, error = %e, "rebuild: poll error while draining");
                empty += 1;
            }
        }
    }
    let polled = out.len();
    loop {
        match link.flush_outstanding(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => {
                tracing::warn!(target: "mlx5_connect", qpn = qp.qpn, error = %e, "rebuild: flushing the data path failed");
                break;
            }
        }
    }
    let first_error = out
        .iter()
        .find(|w| !w.is_ok() && w.status != WcStatus::WrFlushErr);
    tracing::info!(
        target: "mlx5_connect",
        qpn = qp.qpn,
        generation,
        polled,
        flushed = out.len() - polled,
        first_error = first_error.map_or("none", |w| w.status.name()),
        first_error_wr_id = first_error.map_or(0, |w| w.wr_id),
        "rebuild: CQ drained"
    );
    out
}

fn ready_exchange(
    control: &mut Control,
    qp: &QpRef,
    peer: &Endpoint,
    generation: u32,
) -> Result<()> {
    control.send(&Message::Ready {
        generation,
        qpn: qp.qpn,
        state: QpState::Rts,
    })?;
    match control.recv("the peer's READY")? {
        Message::Ready {
            generation: g,
            qpn,
            state: QpState::Rts,
        } if g == generation && qpn == peer.qpn => Ok(()),
        Message::Abort { generation, code } => Err(ConnectError::PeerAborted { generation, code }),
        other => Err(unexpected(
            "READY from the peer's QP in RTS",
            generation,
            &other,
        )),
    }
}

fn unexpected(expected: &'static str, generation: u32, got: &Message) -> ConnectError {
    if let Message::Abort { generation, code } = *got {
        return ConnectError::PeerAborted { generation, code };
    }
    ConnectError::Unexpected {
        expected,
        generation,
        got: format!("{} (generation {})", got.kind_name(), got.generation()),
    }
}

fn abort(control: &mut Control, generation: u32, e: &ConnectError) {
    let code = match e {
        // Nothing to tell a peer that is gone or already gave up.
        ConnectError::PeerAborted { .. } | ConnectError::PeerClosed { .. } => return,
        ConnectError::Incompatible(_) => AbortCode::Incompatible,
        _ => AbortCode::ConnectFailed,
    };
    if let Err(send) = control.send(&Message::Abort { generation, code }) {
        tracing::debug!(target: "mlx5_connect", error = %send, "could not send ABORT");
    }
}

fn log_step(qp: &QpRef, generation: u32, what: &str) {
    tracing::info!(target: "mlx5_connect", qpn = qp.qpn, generation, step = what, "rebuild");
}

fn log_connected(
    qp: &QpRef,
    local: &Endpoint,
    peer: &Endpoint,
    plan: &Plan,
    generation: u32,
    via: &str,
) {
    tracing::info!(
        target: "mlx5_connect",
        qpn = qp.qpn,
        qp_type = qp.qp_type.name(),
        dest_qpn = peer.qpn,
        sq_psn = local.psn,
        rq_psn = peer.psn,
        path_mtu = plan.path_mtu.bytes(),
        max_rd_atomic = plan.max_rd_atomic,
        generation,
        via,
        "connected: QP in RTS, both sides ready"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeDevice;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// A link that records what the control path told it.
    #[derive(Debug, Default)]
    struct Rec {
        states: Vec<QpState>,
        posted_in: Vec<QpState>,
        posted: Arc<AtomicUsize>,
    }

    impl Link for Rec {
        fn set_state(&mut self, s: QpState) {
            self.states.push(s);
        }
        fn post_receives(&mut self) -> mlx5_qp::Result<()> {
            self.posted_in
                .push(self.states.last().copied().unwrap_or(QpState::Reset));
            self.posted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn poll(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
            Ok(0)
        }
        fn flush_outstanding(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
            Ok(0)
        }
    }

    fn side<'a>(
        dev: &'a dyn Device,
        qp: QpRef,
        link: &'a mut dyn Link,
        params: &'a ConnectParams,
    ) -> PairSide<'a> {
        PairSide {
            dev,
            qp,
            link,
            params,
        }
    }

    fn params() -> ConnectParams {
        ConnectParams {
            io_timeout: Duration::from_secs(5),
            ..ConnectParams::default()
        }
    }

    /// Runs `server` on a thread and `client` here, connected over 127.0.0.1.
    fn over_tcp<S, C, RS, RC>(server: S, client: C) -> (RS, RC)
    where
        S: FnOnce(&TcpListener) -> RS + Send + 'static,
        RS: Send + 'static,
        C: FnOnce(std::net::SocketAddr) -> RC,
    {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || server(&l));
        let rc = client(addr);
        (t.join().unwrap(), rc)
    }

    #[test]
    fn tcp_handshake_brings_both_sides_to_rts_with_crossed_values() {
        let da = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let db = Arc::new(FakeDevice::new(Mtu::Mtu1024, 2));
        let qa = da.qp(QpType::Rc);
        let qb = db.qp(QpType::Rc);
        let posted_b = Arc::new(AtomicUsize::new(0));
        let pb = posted_b.clone();
        let da2 = da.clone();
        let (ra, (rb, posted_seen_by_b)) = over_tcp(
            move |l| {
                let mut link = Rec::default();
                let c = Connection::accept(l, &*da2, qa, &mut link, &params()).unwrap();
                (c, link)
            },
            |addr| {
                let mut link = Rec {
                    posted: pb,
                    ..Rec::default()
                };
                let c = Connection::connect(addr, &*db, qb, &mut link, &params()).unwrap();
                let n = link.posted.load(Ordering::SeqCst);
                ((c, link), n)
            },
        );
        let (ca, la) = ra;
        let (cb, lb) = rb;
        assert_eq!(posted_seen_by_b, 1);
        assert_eq!(posted_b.load(Ordering::SeqCst), 1);
        for (c, l) in [(&ca, &la), (&cb, &lb)] {
            assert_eq!(c.state(), QpState::Rts);
            assert_eq!(l.states, [QpState::Init, QpState::Rtr, QpState::Rts]);
            assert_eq!(l.posted_in, [QpState::Init], "receives are posted in Init");
            assert_eq!(c.path_mtu(), Mtu::Mtu1024, "min of both ports' MTUs");
        }
        let aa = da.query_qp(qa.id).unwrap();
        let ab = db.query_qp(qb.id).unwrap();
        assert_eq!(aa.qp_state, QpState::Rts);
        assert_eq!(aa.dest_qp_num, qb.qpn);
        assert_eq!(ab.dest_qp_num, qa.qpn);
        assert_eq!(aa.rq_psn, ab.sq_psn, "a expects what b sends");
        assert_eq!(ab.rq_psn, aa.sq_psn);
        assert_eq!(aa.path_mtu, Mtu::Mtu1024);
        assert_eq!(aa.ah_attr.grh.unwrap().dgid, db.gid);
        assert_eq!(
            (aa.timeout, aa.retry_cnt, aa.rnr_retry, aa.min_rnr_timer),
            (14, 7, 7, 12)
        );
        assert_eq!(ca.peer().psn, cb.local().psn);
    }

    #[test]
    fn the_client_does_not_return_before_the_server_posted_receives() {
        // The server's receive closure takes a while; the client's connect must wait for it
        // (the second handshake), or its first send would meet RNR.
        for _ in 0..3 {
            let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
            let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
            let flag = Arc::new(AtomicUsize::new(0));
            struct Slow(Arc<AtomicUsize>);
            impl Link for Slow {
                fn set_state(&mut self, _s: QpState) {}
                fn post_receives(&mut self) -> mlx5_qp::Result<()> {
                    std::thread::sleep(Duration::from_millis(30));
                    self.0.store(1, Ordering::SeqCst);
                    Ok(())
                }
                fn poll(&mut self, _o: &mut [Wc]) -> mlx5_qp::Result<usize> {
                    Ok(0)
                }
                fn flush_outstanding(&mut self, _o: &mut [Wc]) -> mlx5_qp::Result<usize> {
                    Ok(0)
                }
            }
            let (f2, d2) = (flag.clone(), d.clone());
            let (_, seen) = over_tcp(
                move |l| Connection::accept(l, &*d2, qa, &mut Slow(f2), &params()).unwrap(),
                |addr| {
                    Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).unwrap();
                    flag.load(Ordering::SeqCst)
                },
            );
            assert_eq!(seen, 1);
        }
    }

    #[test]
    fn ud_handshake_sets_qkey_and_creates_the_peer_address() {
        let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let (qa, qb) = (d.qp(QpType::Ud), d.qp(QpType::Ud));
        let pa = ConnectParams {
            qkey: 0x1234,
            ..params()
        };
        let d2 = d.clone();
        let (ca, cb) = over_tcp(
            move |l| Connection::accept(l, &*d2, qa, &mut Rec::default(), &pa).unwrap(),
            |addr| Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).unwrap(),
        );
        let ua = ca.ud_peer().unwrap();
        let ub = cb.ud_peer().unwrap();
        assert_eq!((ua.qpn, ua.qkey), (qb.qpn, crate::params::DEFAULT_QKEY));
        assert_eq!((ub.qpn, ub.qkey), (qa.qpn, 0x1234));
        assert_eq!(ca.state(), QpState::Rts);
        assert_eq!(cb.state(), QpState::Rts);
    }

    #[test]
    fn incompatible_peer_gets_an_abort_not_a_timeout() {
        let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Ud));
        let d2 = d.clone();
        let t0 = Instant::now();
        let (ra, rb) = over_tcp(
            move |l| Connection::accept(l, &*d2, qa, &mut Rec::default(), &params()).map(|_| ()),
            |addr| Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).map(|_| ()),
        );
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "no side waited for a timeout"
        );
        for r in [ra, rb] {
            match r {
                Err(ConnectError::Incompatible(m)) => assert!(m.contains("RC") && m.contains("UD")),
                Err(ConnectError::PeerAborted { code, .. }) => {
                    assert_eq!(code, AbortCode::Incompatible)
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_failed_modify_aborts_the_peer_and_names_the_step() {
        let da = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let db = Arc::new(FakeDevice::new(Mtu::Mtu4096, 2));
        *db.fail_to.lock().unwrap() = Some(QpState::Rts);
        let (qa, qb) = (da.qp(QpType::Rc), db.qp(QpType::Rc));
        let mut lb = Rec::default();
        let (ra, rb) = over_tcp(
            move |l| Connection::accept(l, &*da, qa, &mut Rec::default(), &params()).map(|_| ()),
            |addr| Connection::connect(addr, &*db, qb, &mut lb, &params()).map(|_| ()),
        );
        assert!(matches!(rb, Err(ConnectError::Device(_))), "{rb:?}");
        assert!(
            matches!(
                ra,
                Err(ConnectError::PeerAborted {
                    code: AbortCode::ConnectFailed,
                    ..
                })
            ),
            "{ra:?}"
        );
        assert_eq!(
            lb.states.last(),
            Some(&QpState::Rtr),
            "the data path knows where it stopped"
        );
    }

    #[test]
    fn a_used_qp_is_refused_by_connect() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        d.force_state(qa.id, QpState::Rts);
        let e = connect_pair(
            side(&d, qa, &mut Rec::default(), &params()),
            side(&d, qb, &mut Rec::default(), &params()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("use rebuild"), "{e}");
    }

    #[test]
    fn garbage_on_the_control_port_is_a_wire_error() {
        let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let qa = d.qp(QpType::Rc);
        let (ra, _) = over_tcp(
            move |l| Connection::accept(l, &*d, qa, &mut Rec::default(), &params()).map(|_| ()),
            |addr| {
                use std::io::Write;
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").unwrap();
                std::thread::sleep(Duration::from_millis(50));
            },
        );
        assert!(matches!(ra, Err(ConnectError::Wire(_))), "{ra:?}");
    }

    #[test]
    fn in_process_pair_uses_the_same_attributes() {
        let d = FakeDevice::new(Mtu::Mtu2048, 1);
        let (qa, qb) = (d.qp(QpType::Uc), d.qp(QpType::Uc));
        let (mut la, mut lb) = (Rec::default(), Rec::default());
        let (ca, cb) = connect_pair(
            side(&d, qa, &mut la, &params()),
            side(&d, qb, &mut lb, &params()),
        )
        .unwrap();
        let aa = d.query_qp(qa.id).unwrap();
        let ab = d.query_qp(qb.id).unwrap();
        assert_eq!((aa.qp_state, ab.qp_state), (QpState::Rts, QpState::Rts));
        assert_eq!(aa.rq_psn, ab.sq_psn);
        assert_eq!(aa.qp_access_flags, mlx5_hw::AccessFlags::REMOTE_WRITE);
        assert_eq!(
            ca.plan().rtr,
            plan(ca.local(), cb.local(), &params()).unwrap().rtr
        );
        assert_eq!(la.posted_in, [QpState::Init]);
        assert!(ca.ud_peer().is_none());
        assert!(d.ahs().is_empty());
    }

    #[test]
    fn in_process_rebuild_from_error_uses_fresh_psns() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        let (mut la, mut lb) = (Rec::default(), Rec::default());
        let (mut ca, mut cb) = connect_pair(
            side(&d, qa, &mut la, &params()),
            side(&d, qb, &mut lb, &params()),
        )
        .unwrap();
        d.force_state(qa.id, QpState::Error);
        let old = (ca.local().psn, cb.local().psn);
        let (ra, rb) = rebuild_pair(
            &d,
            &mut ca,
            &mut la,
            &d,
            &mut cb,
            &mut lb,
            WcStatus::RetryExcErr,
        )
        .unwrap();
        assert_eq!((ra.generation, rb.generation), (1, 1));
        assert_eq!(ra.from_state, QpState::Error);
        assert_eq!(rb.from_state, QpState::Rts);
        assert_eq!(ra.sq_psn.0, old.0);
        assert_eq!(ra.peer_psn, rb.sq_psn.1);
        assert_eq!(
            lb.states,
            [
                QpState::Init,
                QpState::Rtr,
                QpState::Rts,
                QpState::Error,
                QpState::Reset,
                QpState::Init,
                QpState::Rtr,
                QpState::Rts
            ]
        );
        assert_eq!(lb.posted_in, [QpState::Init, QpState::Init]);
        let aa = d.query_qp(qa.id).unwrap();
        let ab = d.query_qp(qb.id).unwrap();
        assert_eq!(aa.rq_psn, ab.sq_psn);
        assert_eq!(ab.rq_psn, aa.sq_psn);
        assert_eq!(aa.sq_psn, ca.local().psn);
        assert_eq!(ca.generation(), 1);
    }

    #[test]
    fn tcp_rebuild_is_answered_by_the_peer() {
        let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        let d2 = d.clone();
        let (server, (client, report)) = over_tcp(
            move |l| {
                let mut link = Rec::default();
                let mut c = Connection::accept(l, &*d2, qa, &mut link, &params()).unwrap();
                // The passive side: wait for the peer's request, then rebuild.
                let deadline = Instant::now() + Duration::from_secs(5);
                let ev = loop {
                    if let Some(ev) = c.poll_control().unwrap() {
                        break ev;
                    }
                    assert!(Instant::now() < deadline, "no rebuild request arrived");
                    std::thread::sleep(Duration::from_millis(1));
                };
                assert_eq!(
                    ev,
                    ControlEvent::RebuildRequested {
                        reason: WcStatus::RnrRetryExcErr,
                        generation: 1
                    }
                );
                let r = c.rebuild(&*d2, &mut link, WcStatus::Success).unwrap();
                (c, r)
            },
            |addr| {
                let mut link = Rec::default();
                let mut c = Connection::connect(addr, &*d, qb, &mut link, &params()).unwrap();
                d.force_state(qb.id, QpState::Error);
                let r = c.rebuild(&*d, &mut link, WcStatus::RnrRetryExcErr).unwrap();
                (c, r)
            },
        );
        let (cs, rs) = server;
        assert_eq!(
            rs.reason,
            WcStatus::RnrRetryExcErr,
            "the peer's reason is reported"
        );
        assert_eq!(rs.from_state, QpState::Rts);
        assert_eq!(report.from_state, QpState::Error);
        assert_eq!((cs.generation(), client.generation()), (1, 1));
        assert_eq!(cs.peer().psn, client.local().psn);
        assert_eq!(client.peer().psn, cs.local().psn);
        assert_eq!(report.peer_psn, rs.sq_psn.1);
    }

    #[test]
    fn replace_qp_refuses_a_qp_that_cannot_take_over() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        let (mut ca, _) = connect_pair(
            side(&d, qa, &mut Rec::default(), &params()),
            side(&d, qb, &mut Rec::default(), &params()),
        )
        .unwrap();
        let ud = d.qp(QpType::Ud);
        let used = d.qp(QpType::Rc);
        d.force_state(used.id, QpState::Init);
        for (new, want) in [(qa, "current QP"), (ud, "UD QP"), (used, "INIT")] {
            let mut link = Rec::default();
            let e = ca.replace_qp(&d, new, &mut link).unwrap_err();
            assert!(
                matches!(e, ConnectError::InvalidReplacement { .. })
                    && e.to_string().contains(want),
                "{e}"
            );
            assert!(link.states.is_empty(), "the old QP was left alone");
        }
        assert_eq!(ca.qp(), qa, "nothing swapped");
        assert_eq!(d.query_qp(qa.id).unwrap().qp_state, QpState::Rts);
    }

    #[test]
    fn replace_qp_retires_the_old_qp_and_the_rebuild_announces_the_new_one() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let (qa, qb) = (d.qp(QpType::Uc), d.qp(QpType::Uc));
        let (mut la, mut lb) = (Rec::default(), Rec::default());
        let (mut ca, mut cb) = connect_pair(
            side(&d, qa, &mut la, &params()),
            side(&d, qb, &mut lb, &params()),
        )
        .unwrap();
        // Still known to the device: moved to Error before it is given up.
        let qb2 = d.qp(QpType::Uc);
        let old = cb.replace_qp(&d, qb2, &mut lb).unwrap();
        assert_eq!(old, qb);
        assert_eq!(d.query_qp(qb.id).unwrap().qp_state, QpState::Error);
        assert_eq!(lb.states.last(), Some(&QpState::Error));
        assert_eq!((cb.qp(), cb.state()), (qb2, QpState::Reset));
        d.destroy_qp(qb.id).unwrap();
        // Already destroyed: only the data path can be flushed; not an error.
        let qb3 = d.qp(QpType::Uc);
        assert_eq!(cb.replace_qp(&d, qb3, &mut Rec::default()).unwrap(), qb2);
        d.destroy_qp(qb2.id).unwrap();

        let mut lb3 = Rec::default();
        let (ra, rb) = rebuild_pair(
            &d,
            &mut ca,
            &mut la,
            &d,
            &mut cb,
            &mut lb3,
            WcStatus::RetryExcErr,
        )
        .unwrap();
        assert_eq!(
            rb.qpn,
            (qb.qpn, qb3.qpn),
            "the last generation's QPN, then the new"
        );
        assert_eq!(ra.qpn, (qa.qpn, qa.qpn));
        assert_eq!(ra.peer_qpn, (qb.qpn, qb3.qpn));
        assert_eq!(rb.from_state, QpState::Reset);
        assert_eq!(
            lb3.states,
            [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts],
            "no Reset->Reset modify for the new QP"
        );
        assert_eq!(lb3.posted_in, [QpState::Init]);
        let (aa, ab) = (d.query_qp(qa.id).unwrap(), d.query_qp(qb3.id).unwrap());
        assert_eq!((aa.dest_qp_num, ab.dest_qp_num), (qb3.qpn, qa.qpn));
        assert_eq!((aa.rq_psn, ab.rq_psn), (ab.sq_psn, aa.sq_psn));
        assert_eq!(
            (cb.qp(), cb.local().qpn, ca.peer().qpn),
            (qb3, qb3.qpn, qb3.qpn)
        );
        // The next rebuild is an ordinary one again.
        let (_, rb) = rebuild_pair(
            &d,
            &mut ca,
            &mut la,
            &d,
            &mut cb,
            &mut lb3,
            WcStatus::Success,
        )
        .unwrap();
        assert_eq!(
            (rb.qpn, rb.peer_qpn),
            ((qb3.qpn, qb3.qpn), (qa.qpn, qa.qpn))
        );
    }

    #[test]
    fn tcp_rebuild_after_replace_reaches_the_new_qpn() {
        let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        let qb2 = d.qp(QpType::Rc);
        let d2 = d.clone();
        let (server, client) = over_tcp(
            move |l| {
                let mut link = Rec::default();
                let mut c = Connection::accept(l, &*d2, qa, &mut link, &params()).unwrap();
                let deadline = Instant::now() + Duration::from_secs(5);
                while c.poll_control().unwrap().is_none() {
                    assert!(Instant::now() < deadline, "no rebuild request arrived");
                    std::thread::sleep(Duration::from_millis(1));
                }
                let r = c.rebuild(&*d2, &mut link, WcStatus::Success).unwrap();
                (c, r)
            },
            |addr| {
                let mut c =
                    Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).unwrap();
                c.replace_qp(&*d, qb2, &mut Rec::default()).unwrap();
                d.destroy_qp(qb.id).unwrap();
                let r = c
                    .rebuild(&*d, &mut Rec::default(), WcStatus::LocQpOpErr)
                    .unwrap();
                (c, r)
            },
        );
        let ((cs, rs), (cc, rc)) = (server, client);
        assert_eq!(rs.peer_qpn, (qb.qpn, qb2.qpn));
        assert_eq!(rs.reason, WcStatus::LocQpOpErr);
        assert_eq!(rc.qpn, (qb.qpn, qb2.qpn));
        assert_eq!(cs.peer().qpn, qb2.qpn);
        assert_eq!(d.query_qp(qa.id).unwrap().dest_qp_num, qb2.qpn);
        assert_eq!(d.query_qp(qb2.id).unwrap().dest_qp_num, qa.qpn);
        assert_eq!(cc.state(), QpState::Rts);
    }

    #[test]
    fn rebuild_without_a_control_channel_is_refused() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        let (mut ca, _) = connect_pair(
            side(&d, qa, &mut Rec::default(), &params()),
            side(&d, qb, &mut Rec::default(), &params()),
        )
        .unwrap();
        assert!(matches!(
            ca.rebuild(&d, &mut Rec::default(), WcStatus::Success),
            Err(ConnectError::NoControlChannel)
        ));
    }
}
