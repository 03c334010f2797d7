//! Rebuilding a connection after an error, and replacing a QP that is gone.

use crate::error::{ConnectError, Result};
use crate::link::Link;
use crate::params::ConnectParams;
use crate::plan::Plan;
use crate::wire::{Endpoint, Message};
use mlx5_cq::WcStatus;
use mlx5_hw::transition::Step;
use mlx5_hw::{Device, QpState};
use mlx5_qp::Wc;
use std::time::Instant;

use super::steps::{abort, drive, finish, log_step, prepare, ready_exchange, unexpected};
use super::{Connection, QpRef, RebuildReport, Replaced, UdPeer};

impl Connection {
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
    /// [`Connection::rebuild`] (or [`rebuild_pair`](crate::rebuild_pair)) brings `new_qp` up and announces its QPN
    /// in the REBUILD message; the peer connects its QP to the new QPN.
    ///
    /// `new_qp` must have been created by the caller with the same type, and still be in
    /// Reset. `old_link` is the data path of the old QP: if the device still knows the old QP
    /// it is moved to Error and its completions are drained through `old_link`; either way
    /// every WR the data path still holds is reported as flushed (pass
    /// [`crate::ControlOnly`] when that data path is gone too). These completions head the
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rebuilt(
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

/// The start of a rebuild: Error (unless there already), drain the completions, Reset.
pub(super) fn reset(
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
        drain(dev, qp, link, params, generation)?
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
pub(super) fn retire(
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
    drain(dev, qp, link, params, generation)
}

/// Polls until the CQ has held nothing of this QP for a few rounds (or the I/O timeout
/// passes), then flushes what the data path still holds: every WR is accounted for before the
/// Reset forgets them. The link takes only this QP's CQEs ([`Link::poll`]); other QPs' stay
/// in a shared CQ for their owner. A CQE the poll consumed without a completion (one naming
/// no outstanding WQE) is logged and the drain goes on; one it left in the CQ because the
/// link cannot place it (a receive through an SRQ the link lacks) stops the rebuild with the
/// QP still in Error: a Reset would leave it behind, stale, to complete a WQE posted later.
pub(super) fn drain(
    dev: &dyn Device,
    qp: &QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
    generation: u32,
) -> Result<Vec<Wc>> {
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
            // Delivered by the next poll.
            Err(e @ mlx5_qp::Error::RecvOutOfOrder { .. }) => {
                tracing::warn!(target: "mlx5_connect", qpn = qp.qpn, error = %e, "rebuild: receive out of order while draining");
            }
            Err(e) if e.leaves_cqe() => {
                tracing::warn!(target: "mlx5_connect", qpn = qp.qpn, generation, error = %e,
                    "rebuild: a completion of this QP stays in the CQ; the QP stays in Error");
                return Err(ConnectError::Undrained {
                    qpn: qp.qpn,
                    source: e,
                });
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
        .find(|w| !w.is_ok() && w.status() != WcStatus::WrFlushErr);
    tracing::info!(
        target: "mlx5_connect",
        qpn = qp.qpn,
        generation,
        polled,
        flushed = out.len() - polled,
        first_error = first_error.map_or("none", |w| w.status().name()),
        first_error_wr_id = first_error.map_or(0, |w| w.wr_id()),
        "rebuild: CQ drained"
    );
    Ok(out)
}
