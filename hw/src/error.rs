//! Errors of the device contract.

use crate::attr::{AttrMask, QpState, QpType};

/// Why a QP modify was refused before it reached the device (the kernel's
/// `ib_modify_qp_is_ok`, drivers/infiniband/core/verbs.c, answers EINVAL for each of these).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// The transition itself is not in the table.
    #[error("illegal QP transition {from} -> {to} for a {qp_type} QP")]
    IllegalTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
    },
    /// Attributes the transition requires are missing from the mask.
    #[error("{from} -> {to} on a {qp_type} QP requires {}", names(*.missing))]
    MissingAttributes {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
        /// The missing bits.
        missing: AttrMask,
    },
    /// Attributes the transition does not allow are in the mask.
    #[error("{from} -> {to} on a {qp_type} QP does not accept {}", names(*.forbidden))]
    ForbiddenAttributes {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
        /// The forbidden bits.
        forbidden: AttrMask,
    },
    /// An attribute value is out of range (PSN wider than 24 bits, MTU above the port's, ...).
    #[error("invalid attribute {attr}: {why}")]
    InvalidValue {
        /// Verbs name of the attribute (`IBV_QP_SQ_PSN`, ...).
        attr: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A typed transition step was built for another QP type (an RC `Init→RTR` step applied to
    /// a UD QP, ...).
    #[error("the {step} step is for {expected} QPs and cannot be applied to a {qp_type} QP")]
    WrongQpType {
        /// The step (`Init->RTR (RC)`, ...).
        step: &'static str,
        /// The QP types the step is for.
        expected: &'static str,
        /// The QP's type.
        qp_type: QpType,
    },
    /// The device accepted the modify but `query_qp` reports another state.
    #[error("modify to {wanted} succeeded but query_qp reports the QP in {reached}")]
    StateNotReached {
        /// The state asked for.
        wanted: QpState,
        /// The state the QP is in.
        reached: QpState,
    },
    /// `IBV_QP_CUR_STATE` named a state the QP is not in.
    #[error("IBV_QP_CUR_STATE says {claimed} but the QP is in {actual}")]
    CurrentStateMismatch {
        /// The state the caller assumed.
        claimed: QpState,
        /// The state the QP is in.
        actual: QpState,
    },
}

fn names(m: AttrMask) -> String {
    let v: Vec<String> = m.names().map(|n| format!("IBV_QP_{n}")).collect();
    v.join(", ")
}

/// An error of a device operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The QP modify was refused by the state table.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// A verbs call failed.
    #[error("{call} failed: {source}")]
    Verbs {
        /// The libibverbs / mlx5dv function.
        call: &'static str,
        /// The errno it returned.
        source: std::io::Error,
    },
    /// No such device, or it could not be opened.
    #[error("device {name}: {why}")]
    NoDevice {
        /// Requested device name.
        name: String,
        /// What went wrong, with a hint.
        why: String,
    },
    /// The operation is not available on this device or build.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A handle does not name a live object of this device.
    #[error("unknown {kind} handle {id}")]
    UnknownHandle {
        /// Object kind (`QP`, `CQ`, ...).
        kind: &'static str,
        /// The handle value.
        id: u32,
    },
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The device ran out of a resource (QPs, CQ entries, keys, memory).
    #[error("out of resources: {0}")]
    Resources(String),
    /// The object is still in use (a CQ with QPs attached, a PD with MRs, ...).
    #[error("busy: {0}")]
    Busy(String),
}

/// Result of a device operation.
pub type Result<T> = std::result::Result<T, Error>;
