//! Errors of the device contract.

use crate::attr::{AttrMask, QpState, QpType};

/// The class of a refused `ibv_modify_qp`: the errno the call returns (man `ibv_modify_qp`
/// lists EINVAL and ENOMEM; uverbs and the drivers answer EOPNOTSUPP for what they do not
/// implement). Values are Linux's (include/uapi/asm-generic/errno-base.h, errno.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `EINVAL` (22): the request is wrong — a transition the table does not have, a missing
    /// or unaccepted attribute, a value out of range, an address the port cannot use.
    Inval,
    /// `EOPNOTSUPP` (95): the request is well formed but not implemented — attribute-mask bits
    /// no `ib_qp_attr_mask` defines (uverbs `ib_uverbs_modify_qp`), a rate limit the device
    /// cannot apply (mlx5 `__mlx5_ib_modify_qp`).
    OpNotSupp,
    /// `ENOMEM` (12): out of memory or device resources.
    NoMem,
    /// `EPERM` (1): the caller lacks a privilege the value needs (a controlled Q_Key).
    Perm,
}

impl Errno {
    /// The errno number (`EINVAL` = 22, `EOPNOTSUPP` = 95, `ENOMEM` = 12 on Linux).
    pub const fn raw(self) -> i32 {
        match self {
            Errno::Inval => libc::EINVAL,
            Errno::OpNotSupp => libc::EOPNOTSUPP,
            Errno::NoMem => libc::ENOMEM,
            Errno::Perm => libc::EPERM,
        }
    }

    /// The class of an errno number, if it is one of these.
    pub const fn from_raw(v: i32) -> Option<Errno> {
        match v {
            libc::EINVAL => Some(Errno::Inval),
            libc::EOPNOTSUPP => Some(Errno::OpNotSupp),
            libc::ENOMEM => Some(Errno::NoMem),
            libc::EPERM => Some(Errno::Perm),
            _ => None,
        }
    }

    /// The symbolic name (`EINVAL`, `EOPNOTSUPP`, `ENOMEM`, `EPERM`).
    pub const fn name(self) -> &'static str {
        match self {
            Errno::Inval => "EINVAL",
            Errno::OpNotSupp => "EOPNOTSUPP",
            Errno::NoMem => "ENOMEM",
            Errno::Perm => "EPERM",
        }
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a QP modify was refused. [`ModifyError::errno`] is what `ibv_modify_qp` returns for
/// the same request on Linux with an mlx5 device: EINVAL for a refusal of the state table
/// (`ib_modify_qp_is_ok`, drivers/infiniband/core/verbs.c; the driver returns -EINVAL when it
/// says no), of uverbs' checks or of a value; EOPNOTSUPP for an attribute that is not
/// implemented.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// Attribute-mask bits that no `ibv_qp_attr_mask` value defines (21..=24, 26..=31):
    /// uverbs refuses them before anything else (`ib_uverbs_modify_qp` /
    /// `ib_uverbs_ex_modify_qp`: EOPNOTSUPP).
    #[error(
        "attr_mask bits {bits:#x} are not ibv_qp_attr_mask attributes (verbs.h defines bits \
         0..=20 and 25)"
    )]
    UnknownAttributes {
        /// The undefined bits.
        bits: u32,
    },
    /// `IBV_QP_PORT` is not accepted by the transition, and the caller did not set it: uverbs
    /// `modify_qp` adds it to every modify that carries `IBV_QP_AV` outside Init→RTR (the
    /// primary port follows the primary path), so the table sees `IB_QP_PORT`.
    #[error(
        "{from} -> {to} on a {qp_type} QP does not accept IBV_QP_PORT, which the kernel adds \
         (uverbs modify_qp) to a modify carrying IBV_QP_AV outside INIT -> RTR: from user space \
         a {qp_type} QP's primary path cannot be changed in this transition"
    )]
    PortAddedWithAv {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
    },
    /// An address without a GRH on a RoCE (Ethernet) port: the kernel refuses it before the
    /// table (drivers/infiniband/core/verbs.c `rdma_check_ah_attr`: a RoCE address must carry
    /// a GRH; EINVAL).
    #[error(
        "{attr}: the address has no GRH (is_global = 0) but the port is RoCE (Ethernet link \
         layer), and RoCE needs a GRH: set is_global = 1 with grh.dgid = the peer's GID and \
         grh.sgid_index = a local GID index (a LID names nothing on Ethernet)"
    )]
    MissingGrh {
        /// `IBV_QP_AV` or `IBV_QP_ALT_PATH`.
        attr: &'static str,
    },
    /// `IBV_QP_ALT_PATH` on a RoCE port: alternate paths and automatic path migration are
    /// InfiniBand only (drivers/infiniband/core/verbs.c `_ib_modify_qp` refuses the bit, before
    /// the table, unless both the QP's port and the alternate port are InfiniBand; EINVAL).
    #[error(
        "IBV_QP_ALT_PATH on a RoCE port: alternate paths and automatic path migration are \
         InfiniBand only (the kernel refuses IB_QP_ALT_PATH unless the QP's port and the \
         alternate port are both InfiniBand)"
    )]
    AltPathOnRoce,
    /// A controlled Q_Key (bit 31 set) from an unprivileged process: uverbs `modify_qp` answers
    /// EPERM unless the process has CAP_NET_RAW or the `privileged_qkey` rdma netlink setting
    /// is on ("RDMA/uverbs: Restrict usage of privileged QKEYs", Linux 6.4).
    #[error(
        "invalid attribute IBV_QP_QKEY: qkey = {qkey:#010x} has bit 31 set (a controlled Q_Key): \
         only a privileged process (CAP_NET_RAW) may set it; use a Q_Key below 0x80000000"
    )]
    PrivilegedQkey {
        /// The Q_Key asked for.
        qkey: u32,
    },
    /// The device does not implement the attribute for this QP (EOPNOTSUPP), e.g.
    /// `IBV_QP_RATE_LIMIT` on an RC QP of an mlx5 device (`__mlx5_ib_modify_qp`).
    #[error("{attr} is not supported here: {why}")]
    Unsupported {
        /// Verbs name of the attribute.
        attr: &'static str,
        /// Why, and what the device does support.
        why: String,
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

impl ModifyError {
    /// The errno `ibv_modify_qp` returns for this refusal ([`Errno`]): EOPNOTSUPP for
    /// [`ModifyError::UnknownAttributes`] and [`ModifyError::Unsupported`], EPERM for
    /// [`ModifyError::PrivilegedQkey`], EINVAL for every other refusal. ([`ModifyError::StateNotReached`] is no refusal — the modify succeeded —
    /// and [`ModifyError::WrongQpType`] never reaches the kernel; both are classed EINVAL, the
    /// class of a request that cannot do what was asked.)
    pub fn errno(&self) -> Errno {
        match self {
            ModifyError::UnknownAttributes { .. } | ModifyError::Unsupported { .. } => {
                Errno::OpNotSupp
            }
            ModifyError::PrivilegedQkey { .. } => Errno::Perm,
            _ => Errno::Inval,
        }
    }
}

fn names(m: AttrMask) -> String {
    let v: Vec<String> = m.names().map(|n| format!("IBV_QP_{n}")).collect();
    v.join(", ")
}

/// An error of a device operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// rdma-core's libraries could not be loaded (not installed, or older than this crate
    /// needs), so no hardware device can be listed or opened; the error says what to install.
    #[error("{}{source}", .device.as_ref().map(|d| format!("device {d}: ")).unwrap_or_default())]
    RdmaCore {
        /// The device being opened, if any (`None` when listing devices).
        device: Option<String>,
        /// What the loader found ([`mlx5dv_sys::LoadError`]).
        source: mlx5dv_sys::LoadError,
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
    /// The device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`) and refuses the call: after
    /// an internal error mlx5 answers every firmware command that creates, modifies or queries
    /// an object with an error (EIO) and every destroy with success
    /// (`mlx5_internal_err_ret_value`, drivers/net/ethernet/mellanox/mlx5/core/cmd.c).
    #[error(
        "{device}: {call} refused: the device reported a fatal error (IBV_EVENT_DEVICE_FATAL) \
         and creates or changes nothing any more; destroy its objects and open it again"
    )]
    DeviceFatal {
        /// The device's name.
        device: String,
        /// The call refused.
        call: &'static str,
    },
}

impl Error {
    /// The errno a verbs call answering this error returns (Linux values): the class of a
    /// refused modify ([`ModifyError::errno`]), the errno of a failed verbs call, and for the
    /// other kinds EINVAL (invalid argument, unknown handle), EOPNOTSUPP (unsupported), ENOMEM
    /// (out of resources), EBUSY (in use), ENODEV (no device), EIO (a device in a fatal
    /// state) and, when rdma-core cannot be loaded, ELIBACC (no library) or ENOSYS (a function
    /// missing).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Modify(e) => e.errno().raw(),
            Error::Verbs { source, .. } => source.raw_os_error().unwrap_or(Errno::Inval.raw()),
            Error::InvalidArgument(_) | Error::UnknownHandle { .. } => Errno::Inval.raw(),
            Error::Unsupported(_) => Errno::OpNotSupp.raw(),
            Error::Resources(_) => Errno::NoMem.raw(),
            Error::Busy(_) => libc::EBUSY,
            Error::NoDevice { .. } => libc::ENODEV,
            Error::DeviceFatal { .. } => libc::EIO,
            Error::RdmaCore { source, .. } => source.errno(),
        }
    }
}

/// Result of a device operation.
pub type Result<T> = std::result::Result<T, Error>;
