//! Errors of connection setup and recovery.
//!
//! Kept apart from the data path's [`mlx5_qp::Error`] on purpose: that one is `Copy` and sits on
//! the hot path; these carry I/O errors and peer descriptions, and happen a few times per
//! connection.

use super::wire::{AbortCode, WireError};
use mlx5_hw::QpState;
use std::time::Duration;

/// Result of a connect, rebuild or control-channel call.
pub type Result<T> = std::result::Result<T, ConnectError>;

/// Why connecting or rebuilding a QP failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// A device call failed, or the state table refused a modify (the message names the
    /// transition and the attribute).
    #[error(transparent)]
    Device(#[from] mlx5_hw::Error),
    /// The data path refused something (posting the receives, polling the CQ).
    #[error("data path: {0}")]
    DataPath(#[from] mlx5_qp::Error),
    /// The control connection failed.
    #[error("control connection: {during}: {source}")]
    Io {
        /// What was being done (`accept`, `connect to 10.0.0.2:18515`, `send HELLO`, ...).
        during: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// Nothing arrived in time.
    #[error(
        "control connection: timed out after {after:?} waiting for {waiting_for}; is the peer \
         running, reachable, and using the same port? (raise ConnectParams::io_timeout if it is \
         just slow)"
    )]
    Timeout {
        /// What was awaited.
        waiting_for: &'static str,
        /// How long.
        after: Duration,
    },
    /// The peer closed the control connection.
    #[error("control connection: the peer closed it while this side waited for {waiting_for}")]
    PeerClosed {
        /// What was awaited.
        waiting_for: &'static str,
    },
    /// The peer sent bytes that are not a valid message.
    #[error("control connection: invalid message from the peer: {0}")]
    Wire(#[from] WireError),
    /// A valid message that does not fit the protocol's state.
    #[error("control protocol: expected {expected} (generation {generation}) but received {got}")]
    Unexpected {
        /// What was expected.
        expected: &'static str,
        /// The connection generation expected.
        generation: u32,
        /// What arrived (kind and generation).
        got: String,
    },
    /// The peer gave up.
    #[error("the peer aborted (generation {generation}): {}", code.describe())]
    PeerAborted {
        /// Its generation.
        generation: u32,
        /// Its reason.
        code: AbortCode,
    },
    /// The two endpoints cannot be connected.
    #[error("incompatible endpoints: {0}")]
    Incompatible(String),
    /// An operation that needs a control connection on an in-process connection.
    #[error(
        "this connection has no control channel (in-process pair): use recover_pair (owning \
         QPs) or rebuild_pair"
    )]
    NoControlChannel,
    /// [`super::Connection::replace_qp`] was given a QP that cannot replace the current one.
    #[error("cannot replace QP {old_qpn:#x} with QP {new_qpn:#x}: {why}")]
    InvalidReplacement {
        /// The connection's current QP.
        old_qpn: u32,
        /// The QP offered as the replacement.
        new_qpn: u32,
        /// Why it does not fit.
        why: String,
    },
    /// A rebuild's drain met a completion of the QP that the link cannot place (a receive
    /// through an SRQ the link was not given): it stays in the CQ, nothing was consumed, and
    /// the QP stays in Error — a Reset would leave the CQE behind to complete a WQE posted
    /// later. Give the link what it lacks (`QpLink::srq`) and rebuild again.
    #[error(
        "rebuild of QP {qpn:#x}: the CQ holds a completion of this QP that the link cannot \
         place ({source}); nothing was consumed and the QP stays in Error: give the link its \
         SRQ (QpLink::srq) and rebuild again"
    )]
    Undrained {
        /// The QP being rebuilt.
        qpn: u32,
        /// The poll's error.
        source: mlx5_qp::Error,
    },
    /// [`crate::Recover`] was given objects that are not the QP's: another connection's QP,
    /// a CQ or SRQ the QP does not report to, or none where it has one.
    #[error("cannot recover QP {qpn:#x} with these objects: {why}")]
    WrongObjects {
        /// The QP given.
        qpn: u32,
        /// What does not fit.
        why: String,
    },
    /// The QP is not in a state the operation can start from.
    #[error("cannot {op}: the QP is in {state} ({hint})")]
    WrongState {
        /// The operation.
        op: &'static str,
        /// The state the device reports.
        state: QpState,
        /// What to do.
        hint: &'static str,
    },
}

impl ConnectError {
    pub(crate) fn io(during: impl Into<String>, source: std::io::Error) -> ConnectError {
        ConnectError::Io {
            during: during.into(),
            source,
        }
    }
}

impl From<mlx5_hw::ModifyError> for ConnectError {
    fn from(e: mlx5_hw::ModifyError) -> Self {
        ConnectError::Device(e.into())
    }
}
