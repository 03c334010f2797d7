//! The two phases every way of connecting shares (prepare, finish), the checked modify they
//! apply, and the control-channel and log helpers around them.

use crate::control::Control;
use crate::error::{ConnectError, Result};
use crate::link::Link;
use crate::params::ConnectParams;
use crate::plan::{init_step, local_endpoint, plan, random_psn, LocalPort, Plan};
use crate::wire::{AbortCode, Endpoint, Message};
use mlx5_hw::qp_state;
use mlx5_hw::transition::{self, Step};
use mlx5_hw::{Device, QpAttr, QpState, QpType};

use super::{QpRef, UdPeer};

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
pub(super) fn prepare(
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
pub(super) fn finish(
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

pub(super) fn ready_exchange(
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

pub(super) fn unexpected(expected: &'static str, generation: u32, got: &Message) -> ConnectError {
    if let Message::Abort { generation, code } = *got {
        return ConnectError::PeerAborted { generation, code };
    }
    ConnectError::Unexpected {
        expected,
        generation,
        got: format!("{} (generation {})", got.kind_name(), got.generation()),
    }
}

pub(super) fn abort(control: &mut Control, generation: u32, e: &ConnectError) {
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

pub(super) fn log_step(qp: &QpRef, generation: u32, what: &str) {
    tracing::info!(target: "mlx5_connect", qpn = qp.qpn, generation, step = what, "rebuild");
}

pub(super) fn log_connected(
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
