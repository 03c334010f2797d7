//! Connecting over an exchange the caller runs itself: the endpoints cross by a protocol this
//! crate does not speak (perftest's TCP exchange, `perftest/src/perftest_communication.c`
//! `ctx_hand_shake`; RDMA CM private data), so the two phases every way of connecting shares are
//! offered separately: [`Connection::prepare_out_of_band`] takes the QP to Init with its receives
//! posted and returns what to announce, [`Connection::finish_out_of_band`] takes the peer's
//! announcement and brings the QP to RTS. Whatever synchronises the two sides (perftest's
//! handshake after the modify to RTR) is the caller's.

use super::steps::{finish, log_connected, prepare};
use super::{Connection, QpRef};
use crate::error::Result;
use crate::link::Link;
use crate::params::ConnectParams;
use crate::wire::Endpoint;
use mlx5_hw::{Device, QpState};

impl Connection {
    /// Phase one of a connect whose endpoints cross by the caller's own protocol: the QP (in
    /// Reset or Init) to Init, its receives posted through `link`, a fresh PSN (or
    /// `params.psn`), and the endpoint this side announces (`params.buffer` included).
    pub fn prepare_out_of_band(
        dev: &dyn Device,
        qp: QpRef,
        link: &mut dyn Link,
        params: &ConnectParams,
    ) -> Result<Endpoint> {
        let cur = dev.query_qp(qp.id)?.qp_state;
        prepare(dev, &qp, link, params, cur)
    }

    /// Phase two: plan the RTR and RTS steps from `local` (what phase one returned) and the
    /// peer's endpoint, apply them, make the UD peer's address handle; the connection has no
    /// control channel of this crate ([`Connection::poll_control`] says so), and its UD
    /// address handle is the caller's to destroy, as [`Connection::over`]'s.
    pub fn finish_out_of_band(
        dev: &dyn Device,
        qp: QpRef,
        link: &mut dyn Link,
        params: &ConnectParams,
        local: Endpoint,
        peer: Endpoint,
    ) -> Result<Connection> {
        let (plan, ud_peer) = finish(dev, &qp, link, params, &local, &peer)?;
        log_connected(&qp, &local, &peer, &plan, 0, "out-of-band");
        Ok(Connection {
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
            ah_owner: None,
        })
    }
}
