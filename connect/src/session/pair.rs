//! Connecting and rebuilding two QPs of one process, without a control connection.

use crate::error::Result;
use crate::link::Link;
use crate::params::ConnectParams;
use mlx5_cq::WcStatus;
use mlx5_hw::{Device, QpState};

use super::rebuild::reset;
use super::steps::{finish, log_connected, prepare};
use super::{Connection, QpRef, RebuildReport};

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
        ah_owner: None,
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
