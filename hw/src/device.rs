//! The device contract: the control path every backend implements (the software ConnectX in
//! `mlx5-sim`, libibverbs + mlx5dv in `verbs`).
//!
//! Objects are named by small copyable handles. Creating a CQ, QP or SRQ returns its
//! [`crate::layout`] record, from which the `qp` crate builds the data path with no trait
//! object on the hot path.
//!
//! ## Waiting for completions without spinning
//!
//! A completion channel ([`ChannelId`], `struct ibv_comp_channel`) is one file descriptor that
//! any number of CQs report their completion events to. The data path arms a CQ itself (the
//! mlx5 arm doorbell, `mlx5_qp::Cq::arm`); the device then queues one event on the CQ's
//! channel for the next completion (or the next solicited or error one) and disarms the CQ.
//! The protocol that never loses a wake-up:
//!
//! 1. poll the CQ until it is empty;
//! 2. arm it;
//! 3. poll it again: a completion that arrived between 1 and 2 is found here (and an arm
//!    whose consumer index is behind the device's producer index fires at once, so it is not
//!    lost either way);
//! 4. only if 3 found nothing, wait for [`Device::comp_channel_fd`] to become readable (epoll,
//!    `poll(2)`, a tokio `AsyncFd`), then take the events with [`Device::get_cq_event`] until it
//!    returns `None`. For every event taken, advance the CQ's arm sequence number
//!    (`mlx5_qp::Cq::ack_event`, what rdma-core's `mlx5_cq_event` does inside
//!    `ibv_get_cq_event`) and acknowledge it, in batches if wanted, with
//!    [`Device::ack_cq_events`]; a CQ with unacknowledged events cannot be destroyed (verbs
//!    `ibv_destroy_cq` would wait for them forever).
//!
//! The fd is non-blocking and readable exactly while an event is queued, so it works
//! level-triggered (`poll(2)`) and edge-triggered (epoll `EPOLLET`, tokio): on readiness, call
//! `get_cq_event` until `None`. Asynchronous events ([`AsyncEvent`]) have their own fd,
//! [`Device::async_event_fd`], drained with [`Device::poll_async_event`].

use crate::attr::{AccessFlags, AhAttr, AttrMask, Gid, Mtu, QpAttr, QpCap, QpType};
use crate::error::Result;
use crate::layout::{CqLayout, QpLayout, SrqLayout};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

macro_rules! handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
    };
}
handle!(
    /// A protection domain.
    PdId
);
handle!(
    /// A registered memory region.
    MrId
);
handle!(
    /// A completion queue.
    CqId
);
handle!(
    /// A queue pair (not its QPN).
    QpId
);
handle!(
    /// A shared receive queue.
    SrqId
);
handle!(
    /// An address handle.
    AhId
);
handle!(
    /// An XRC domain (`struct ibv_xrcd`, [`Device::open_xrcd`]).
    XrcdId
);
handle!(
    /// A completion channel (`struct ibv_comp_channel`): one file descriptor that many CQs
    /// report their completion events to.
    ChannelId
);

/// Device capabilities (`struct ibv_device_attr`, the fields used here).
#[derive(Clone, Debug, Default)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Vendor id (0x02c9 for Mellanox).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Node GUID.
    pub node_guid: u64,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum WRs per queue.
    pub max_qp_wr: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum CQEs per CQ.
    pub max_cqe: u32,
    /// Maximum MRs.
    pub max_mr: u32,
    /// Maximum outstanding READ/atomic requests per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding READ/atomic requests per QP as initiator.
    pub max_qp_init_rd_atom: u32,
    /// Maximum SRQs.
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Whether the mlx5 direct data path (mlx5dv rings) is available.
    pub direct_path: bool,
    /// Whether BlueFlame registers are available (`bf_reg_size > 0`).
    pub blueflame: bool,
}

/// Port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PortState {
    /// `IBV_PORT_DOWN`
    Down,
    /// `IBV_PORT_INIT`
    Init,
    /// `IBV_PORT_ARMED`
    Armed,
    /// `IBV_PORT_ACTIVE`
    Active,
}

/// Link layer of a port.
///
/// Not `#[non_exhaustive]`, on purpose: an mlx5 port is InfiniBand or Ethernet
/// (`IBV_LINK_LAYER_INFINIBAND` / `_ETHERNET`, verbs.h; `IBV_LINK_LAYER_UNSPECIFIED` is what
/// a provider without the field reports, and mlx5 always fills it), and the code that builds an
/// address (LID or GID) must handle both, exhaustively.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// Native InfiniBand (LID routed).
    InfiniBand,
    /// RoCE (GID routed, GRH required).
    Ethernet,
}

/// Port attributes (`struct ibv_port_attr`, the fields used here).
#[derive(Clone, Debug)]
pub struct PortAttr {
    /// Port state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU currently active on the link.
    pub active_mtu: Mtu,
    /// Local LID (0 on RoCE).
    pub lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Number of GID table entries.
    pub gid_tbl_len: u32,
}

/// A registered memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Handle for deregistration.
    pub id: MrId,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Local key (used in data segments).
    pub lkey: u32,
    /// Remote key (given to peers).
    pub rkey: u32,
    /// Access rights.
    pub access: AccessFlags,
}

/// CQ creation attributes (`ibv_cq_init_attr_ex` + `mlx5dv_cq_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct CqInitAttr {
    /// Minimum number of CQEs (rounded up to a power of two minus one, as rdma-core does).
    pub cqe: u32,
    /// CQE size, 64 or 128 (`MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`).
    pub cqe_size: u32,
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: no set_ci needed, no overrun error.
    pub ignore_overrun: bool,
    /// The completion channel the CQ reports its completion events to (the `channel` of
    /// `ibv_create_cq`), created with [`Device::create_comp_channel`]. Many CQs may share one.
    /// `None`: the CQ can be polled, but an event of an armed CQ reaches nobody (the kernel
    /// drops it, `ib_uverbs_comp_handler`).
    pub channel: Option<ChannelId>,
}

impl Default for CqInitAttr {
    fn default() -> Self {
        CqInitAttr {
            cqe: 256,
            cqe_size: 64,
            ignore_overrun: false,
            channel: None,
        }
    }
}

/// A created CQ.
#[derive(Clone, Copy, Debug)]
pub struct CqInfo {
    /// Handle.
    pub id: CqId,
    /// Rings and registers for the data path.
    pub layout: CqLayout,
}

/// SRQ creation attributes (`struct ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct SrqInitAttr {
    /// Receive WRs the SRQ must hold.
    pub max_wr: u32,
    /// Scatter entries per WR.
    pub max_sge: u32,
    /// Limit for the SRQ_LIMIT_REACHED event (0 = disarmed).
    pub srq_limit: u32,
}

/// A created SRQ.
#[derive(Clone, Copy, Debug)]
pub struct SrqInfo {
    /// Handle.
    pub id: SrqId,
    /// Rings and registers for the data path.
    pub layout: SrqLayout,
}

/// QP creation attributes (`ibv_qp_init_attr_ex` + `mlx5dv_qp_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr {
    /// Transport type.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue, if any.
    pub srq: Option<SrqId>,
    /// Requested capabilities (the device may round them up).
    pub cap: QpCap,
    /// Every send WQE generates a completion.
    pub sq_sig_all: bool,
}

bitflags::bitflags! {
    /// QP creation flags (`enum ibv_qp_create_flags`, verbs.h values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct QpCreateFlags: u32 {
        /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: a multicast datagram this QP sends is not
        /// delivered back to this QP, even when it is attached to the group.
        const BLOCK_SELF_MCAST_LB = 1 << 1;
    }
}

/// The `ibv_qp_init_attr_ex` additions to [`QpInitAttr`] ([`Device::create_qp_ex`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpInitEx {
    /// `create_flags` (`IBV_QP_INIT_ATTR_CREATE_FLAGS`).
    pub create_flags: QpCreateFlags,
    /// The XRC domain of an [`crate::QpType::XrcRecv`] QP (`IBV_QP_INIT_ATTR_XRCD`); required
    /// for that type, refused for the others. Such a QP has no send or receive queue and uses
    /// neither the PD nor the CQs of [`QpInitAttr`] (uverbs `create_qp` ignores them for
    /// `IB_QPT_XRC_TGT`).
    pub xrcd: Option<XrcdId>,
    /// The DC attributes of a [`crate::QpType::Dci`] or [`crate::QpType::Dct`] QP
    /// (`mlx5dv_qp_init_attr.dc_init_attr` with `MLX5DV_QP_INIT_ATTR_MASK_DC`, rdma-core
    /// `mlx5dv_create_qp`): required for those two types, refused for the others (rdma-core
    /// `mlx5_create_qp` answers EINVAL for `IBV_QPT_DRIVER` without them).
    pub dc: Option<DcInit>,
}

/// What makes a QP a DC initiator or target (`struct mlx5dv_dc_init_attr`, rdma-core
/// `providers/mlx5/mlx5dv.h`).
///
/// `#[non_exhaustive]`: mlx5dv's union may grow.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DcInit {
    /// `MLX5DV_DCTYPE_DCI`, with `dci_streams` when `MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS` is
    /// given.
    Initiator {
        /// Concurrent streams (`struct mlx5dv_dci_streams`); `None` for one stream.
        streams: Option<DciStreams>,
    },
    /// `MLX5DV_DCTYPE_DCT` with its `dct_access_key`: every initiator must name this key in
    /// its WQEs to reach the target.
    Target {
        /// The DC access key.
        access_key: u64,
    },
}

impl DcInit {
    /// What `mlx5dv_create_qp` refuses of DC attributes before anything is made, as rdma-core
    /// `providers/mlx5/verbs.c` `mlx5_create_qp` / `create_dct` and the kernel
    /// (`drivers/infiniband/hw/mlx5/qp.c` `create_dci` / `create_dct`) refuse it: DC
    /// attributes on another QP type, a DC type without them, the wrong kind for the type, a
    /// DCI with a receive side, a DCT without an SRQ or with a send or receive queue, and
    /// (when the device's `dci_streams_caps` are given, `streams_caps`) streams above them.
    pub fn check_create(
        attr: &QpInitAttr,
        dc: Option<DcInit>,
        streams_caps: Option<DciStreams>,
    ) -> crate::Result<()> {
        let bad = |why: String| Err(crate::Error::InvalidArgument(why));
        match (attr.qp_type, dc) {
            (crate::QpType::Dci, Some(DcInit::Initiator { streams })) => {
                if attr.srq.is_some() || attr.cap.max_recv_wr > 0 {
                    return bad(
                        "a DCI has no receive side (nothing can deliver to a DC initiator): no \
                         SRQ, max_recv_wr 0"
                            .into(),
                    );
                }
                if let (Some(s), Some(cap)) = (streams, streams_caps) {
                    if s.log_num_concurent > cap.log_num_concurent
                        || s.log_num_errored > cap.log_num_errored
                    {
                        // rdma-core `mlx5_create_qp`: EINVAL above `dci_streams_caps`.
                        return bad(format!(
                            "DCI streams log_num_concurent {} / log_num_errored {} exceed the \
                             device's caps {} / {} (mlx5dv_query_device dci_streams_caps)",
                            s.log_num_concurent,
                            s.log_num_errored,
                            cap.log_num_concurent,
                            cap.log_num_errored
                        ));
                    }
                }
                Ok(())
            }
            (crate::QpType::Dct, Some(DcInit::Target { .. })) => {
                if attr.srq.is_none() {
                    return bad(
                        "a DCT receives through an SRQ (kernel create_dct takes its srqn): give \
                         one"
                        .into(),
                    );
                }
                if attr.cap.max_send_wr > 0 || attr.cap.max_recv_wr > 0 {
                    return bad(
                        "a DCT has no send queue and no receive queue: caps must be 0".into(),
                    );
                }
                Ok(())
            }
            (crate::QpType::Dci | crate::QpType::Dct, None) => bad(format!(
                "a {} QP is created with create_qp_ex and its DC attributes (QpInitEx::dc; \
                 rdma-core answers EINVAL for IBV_QPT_DRIVER without \
                 MLX5DV_QP_INIT_ATTR_MASK_DC)",
                attr.qp_type
            )),
            (t, Some(d)) => bad(format!(
                "DC attributes {d:?} do not fit a {t} QP (a DCI takes Initiator, a DCT Target)"
            )),
            (_, None) => Ok(()),
        }
    }
}

/// The concurrent streams of a DC initiator (`struct mlx5dv_dci_streams`; `man
/// mlx5dv_create_qp`): the DCI handles up to `2^log_num_concurent` streams at once, the WRs of
/// one stream in order (a WQE names its stream in the ctrl segment's `dci_stream_channel_id`,
/// `mlx5dv_wr_set_dc_addr_stream`), and moves to Error once `2^log_num_errored` streams are in
/// error. The device caps both (`mlx5dv_query_device`, `dci_streams_caps`; rdma-core
/// `mlx5_create_qp` refuses more with EINVAL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DciStreams {
    /// log2 of the streams handled concurrently (the field keeps rdma-core's spelling).
    pub log_num_concurent: u8,
    /// log2 of the streams that may fail before the DCI moves to Error.
    pub log_num_errored: u8,
}

/// Creation attributes of an XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`).
#[derive(Clone, Copy, Debug)]
pub struct XrcSrqInitAttr {
    /// The XRC domain whose target QPs may deliver into it.
    pub xrcd: XrcdId,
    /// The CQ its receive completions go to (an XRC SRQ has its own CQ: the target QP has
    /// none).
    pub cq: CqId,
    /// Size, scatter entries, limit.
    pub attr: SrqInitAttr,
}

/// A created QP.
#[derive(Clone, Copy, Debug)]
pub struct QpInfo {
    /// Handle.
    pub id: QpId,
    /// QP number.
    pub qpn: u32,
    /// Transport type.
    pub qp_type: QpType,
    /// Capabilities actually granted.
    pub cap: QpCap,
    /// Rings and registers for the data path.
    pub layout: QpLayout,
}

/// A created address handle.
#[derive(Clone, Copy, Debug)]
pub struct AhInfo {
    /// Handle.
    pub id: AhId,
    /// The 48-byte mlx5 address vector (`struct mlx5_wqe_av`) for UD datagram segments, as
    /// `mlx5dv_init_obj(MLX5DV_OBJ_AH)` exposes it.
    pub av: [u8; 48],
}

/// Asynchronous events: one variant for every value of rdma-core 44's `enum ibv_event_type`
/// (`libibverbs/verbs.h`; the meaning of each from `man ibv_get_async_event`), and
/// [`AsyncEvent::Unknown`] for a value a newer kernel may add. Affiliated events name the
/// object they concern by its device handle; port events the port (1-based); the device event
/// nothing.
///
/// `#[non_exhaustive]`: verbs.h grows, and a new event becomes a new variant.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: CQ overrun or access error; the CQ is unusable.
    CqError(CqId),
    /// `IBV_EVENT_QP_FATAL`: an error occurred on the QP and it moved to Error on its own.
    QpFatal(QpId),
    /// `IBV_EVENT_QP_REQ_ERR`: an invalid request arrived at the QP (invalid request local
    /// work queue error); the QP moved to Error.
    QpRequestError(QpId),
    /// `IBV_EVENT_QP_ACCESS_ERR`: a remote access violation at the QP (local access violation
    /// work queue error); the QP moved to Error.
    QpAccessError(QpId),
    /// `IBV_EVENT_COMM_EST`: communication established — the first packet arrived at a
    /// connected QP still in RTR (IBA Vol 1 §11.6.3, affiliated asynchronous events; a
    /// connection manager moves the QP to RTS on it when the peer's ready-to-use message was
    /// lost).
    CommEstablished(QpId),
    /// `IBV_EVENT_SQ_DRAINED`: the SQ of a QP in SQD has no message in progress any more.
    SqDrained(QpId),
    /// `IBV_EVENT_PATH_MIG`: the connection migrated to its alternate path.
    PathMigrated(QpId),
    /// `IBV_EVENT_PATH_MIG_ERR`: the connection failed to migrate to its alternate path.
    PathMigrationError(QpId),
    /// `IBV_EVENT_DEVICE_FATAL`: the adapter is in a fatal state ("CA is in FATAL state"): it
    /// moves no data any more, and new objects are refused until the device is reopened.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`: the link of the port became active.
    PortActive(u8),
    /// `IBV_EVENT_PORT_ERR`: the link of the port became unavailable.
    PortError(u8),
    /// `IBV_EVENT_LID_CHANGE`: the port's LID changed.
    LidChange(u8),
    /// `IBV_EVENT_PKEY_CHANGE`: the port's P_Key table changed.
    PkeyChange(u8),
    /// `IBV_EVENT_SM_CHANGE`: the subnet manager of the port changed.
    SmChange(u8),
    /// `IBV_EVENT_SRQ_ERR`: an error occurred on the SRQ (a catastrophic error: it hands out
    /// no more receive WQEs).
    SrqError(SrqId),
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: an armed SRQ dropped below its limit.
    SrqLimitReached(SrqId),
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ, in Error, will consume no more WQEs
    /// from the SRQ.
    QpLastWqeReached(QpId),
    /// `IBV_EVENT_CLIENT_REREGISTER`: the subnet manager asked the port to re-register its
    /// subscriptions (multicast joins, event subscriptions).
    ClientReregister(u8),
    /// `IBV_EVENT_GID_CHANGE`: the port's GID table changed.
    GidChange(u8),
    /// `IBV_EVENT_WQ_FATAL`: an error occurred on a work queue (`ibv_create_wq`) and it moved
    /// to Error. The device contract creates no WQs, so no object is named.
    WqFatal,
    /// An event type rdma-core 44 does not define (a newer kernel's), as its number.
    Unknown {
        /// The `ibv_event_type` value.
        event_type: u32,
    },
}

impl AsyncEvent {
    /// The name of the event's `ibv_event_type` (`IBV_EVENT_QP_FATAL`), or `IBV_EVENT_UNKNOWN`.
    pub const fn name(&self) -> &'static str {
        match self {
            AsyncEvent::CqError(_) => "IBV_EVENT_CQ_ERR",
            AsyncEvent::QpFatal(_) => "IBV_EVENT_QP_FATAL",
            AsyncEvent::QpRequestError(_) => "IBV_EVENT_QP_REQ_ERR",
            AsyncEvent::QpAccessError(_) => "IBV_EVENT_QP_ACCESS_ERR",
            AsyncEvent::CommEstablished(_) => "IBV_EVENT_COMM_EST",
            AsyncEvent::SqDrained(_) => "IBV_EVENT_SQ_DRAINED",
            AsyncEvent::PathMigrated(_) => "IBV_EVENT_PATH_MIG",
            AsyncEvent::PathMigrationError(_) => "IBV_EVENT_PATH_MIG_ERR",
            AsyncEvent::DeviceFatal => "IBV_EVENT_DEVICE_FATAL",
            AsyncEvent::PortActive(_) => "IBV_EVENT_PORT_ACTIVE",
            AsyncEvent::PortError(_) => "IBV_EVENT_PORT_ERR",
            AsyncEvent::LidChange(_) => "IBV_EVENT_LID_CHANGE",
            AsyncEvent::PkeyChange(_) => "IBV_EVENT_PKEY_CHANGE",
            AsyncEvent::SmChange(_) => "IBV_EVENT_SM_CHANGE",
            AsyncEvent::SrqError(_) => "IBV_EVENT_SRQ_ERR",
            AsyncEvent::SrqLimitReached(_) => "IBV_EVENT_SRQ_LIMIT_REACHED",
            AsyncEvent::QpLastWqeReached(_) => "IBV_EVENT_QP_LAST_WQE_REACHED",
            AsyncEvent::ClientReregister(_) => "IBV_EVENT_CLIENT_REREGISTER",
            AsyncEvent::GidChange(_) => "IBV_EVENT_GID_CHANGE",
            AsyncEvent::WqFatal => "IBV_EVENT_WQ_FATAL",
            AsyncEvent::Unknown { .. } => "IBV_EVENT_UNKNOWN",
        }
    }

    /// The QP the event concerns, for the QP events.
    pub const fn qp(&self) -> Option<QpId> {
        match *self {
            AsyncEvent::QpFatal(q)
            | AsyncEvent::QpRequestError(q)
            | AsyncEvent::QpAccessError(q)
            | AsyncEvent::CommEstablished(q)
            | AsyncEvent::SqDrained(q)
            | AsyncEvent::PathMigrated(q)
            | AsyncEvent::PathMigrationError(q)
            | AsyncEvent::QpLastWqeReached(q) => Some(q),
            _ => None,
        }
    }

    /// The port the event concerns, for the port events.
    pub const fn port(&self) -> Option<u8> {
        match *self {
            AsyncEvent::PortActive(p)
            | AsyncEvent::PortError(p)
            | AsyncEvent::LidChange(p)
            | AsyncEvent::PkeyChange(p)
            | AsyncEvent::SmChange(p)
            | AsyncEvent::ClientReregister(p)
            | AsyncEvent::GidChange(p) => Some(p),
            _ => None,
        }
    }

    /// Whether the event reports an error (the object it names, or the whole device, no longer
    /// works as before) rather than a change of state a program may act on or ignore
    /// (communication established, SQ drained, a path migrated, a port up, a table changed,
    /// the SRQ limit or the last WQE reached).
    pub const fn is_error(&self) -> bool {
        matches!(
            self,
            AsyncEvent::CqError(_)
                | AsyncEvent::QpFatal(_)
                | AsyncEvent::QpRequestError(_)
                | AsyncEvent::QpAccessError(_)
                | AsyncEvent::PathMigrationError(_)
                | AsyncEvent::DeviceFatal
                | AsyncEvent::PortError(_)
                | AsyncEvent::SrqError(_)
                | AsyncEvent::WqFatal
        )
    }
}

impl std::fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())?;
        match *self {
            AsyncEvent::CqError(c) => write!(f, " on CQ {:#x}", c.0),
            AsyncEvent::SrqError(s) | AsyncEvent::SrqLimitReached(s) => {
                write!(f, " on SRQ {:#x}", s.0)
            }
            AsyncEvent::Unknown { event_type } => write!(f, " (type {event_type})"),
            e => match (e.qp(), e.port()) {
                (Some(q), _) => write!(f, " on QP {:#x}", q.0),
                (_, Some(p)) => write!(f, " on port {p}"),
                _ => Ok(()),
            },
        }
    }
}

/// One named hardware counter (`/sys/class/infiniband/<dev>/ports/<p>/hw_counters/<name>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// Counter name as mlx5 spells it (`out_of_sequence`, `port_xmit_packets`, ...).
    pub name: String,
    /// Value.
    pub value: u64,
}

/// The control path of a device.
///
/// Object-safe so that a program can pick a device at run time (`Box<dyn Device>`); none of
/// these methods is on the hot path.
pub trait Device: Send + Sync {
    /// Device name (`mlx5_0`, `sim0`, `rxe0`).
    fn name(&self) -> &str;
    /// Device capabilities.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// Port attributes (ports are 1-based).
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// GID table entry.
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid>;
    /// Allocate a protection domain.
    fn alloc_pd(&self) -> Result<PdId>;
    /// Free a protection domain (fails while objects use it).
    fn dealloc_pd(&self, pd: PdId) -> Result<()>;
    /// Register `len` bytes at `addr`.
    ///
    /// # Safety
    /// The memory must stay valid (mapped, not freed) until [`Device::dereg_mr`] returns and
    /// every operation on it has completed: the device reads and writes it asynchronously.
    unsafe fn reg_mr(
        &self,
        pd: PdId,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrInfo>;
    /// Deregister a memory region.
    fn dereg_mr(&self, mr: MrId) -> Result<()>;
    /// Create a completion queue, attached to `attr.channel` if given.
    fn create_cq(&self, attr: &CqInitAttr) -> Result<CqInfo>;
    /// Destroy a completion queue. Refused with [`crate::Error::Busy`] while a QP uses it or
    /// while completion events taken from it are not acknowledged ([`Device::ack_cq_events`]);
    /// events still queued on its channel are discarded.
    fn destroy_cq(&self, cq: CqId) -> Result<()>;
    /// Create a shared receive queue.
    fn create_srq(&self, pd: PdId, attr: &SrqInitAttr) -> Result<SrqInfo>;
    /// Arm the SRQ limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()>;
    /// Destroy a shared receive queue.
    fn destroy_srq(&self, srq: SrqId) -> Result<()>;
    /// Create a queue pair in Reset.
    fn create_qp(&self, pd: PdId, attr: &QpInitAttr) -> Result<QpInfo>;
    /// Modify a QP; validated against [`crate::qp_state`] first.
    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: AttrMask) -> Result<()>;
    /// Query a QP's attributes (the state it is in now, and what was set).
    fn query_qp(&self, qp: QpId) -> Result<QpAttr>;
    /// Destroy a QP.
    fn destroy_qp(&self, qp: QpId) -> Result<()>;
    /// Create an address handle for UD sends.
    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhInfo>;
    /// Destroy an address handle.
    fn destroy_ah(&self, ah: AhId) -> Result<()>;
    /// The next asynchronous event, if one is pending (never blocks).
    fn poll_async_event(&self) -> Option<AsyncEvent>;
    /// A file descriptor that is readable while an asynchronous event is pending (the
    /// context's `async_fd` on verbs, an eventfd on the software ConnectX); non-blocking.
    /// Drain it with [`Device::poll_async_event`] until `None`. It stays open as long as the
    /// device.
    fn async_event_fd(&self) -> Result<RawFd> {
        Err(crate::Error::Unsupported(format!(
            "{} has no asynchronous event file descriptor",
            self.name()
        )))
    }
    /// Create a completion channel (`ibv_create_comp_channel`).
    fn create_comp_channel(&self) -> Result<ChannelId> {
        Err(no_channels(self.name()))
    }
    /// Destroy a completion channel (`ibv_destroy_comp_channel`); refused with
    /// [`crate::Error::Busy`] while a CQ is attached to it. Its fd is closed.
    fn destroy_comp_channel(&self, channel: ChannelId) -> Result<()> {
        let _ = channel;
        Err(no_channels(self.name()))
    }
    /// The channel's file descriptor: non-blocking, readable exactly while a completion event
    /// is queued on the channel (for epoll or a tokio `AsyncFd`). A raw fd rather than a
    /// `BorrowedFd`: it is valid until [`Device::destroy_comp_channel`], which takes `&self`.
    fn comp_channel_fd(&self, channel: ChannelId) -> Result<RawFd> {
        let _ = channel;
        Err(no_channels(self.name()))
    }
    /// Take the next completion event queued on the channel, without blocking
    /// (`ibv_get_cq_event` on the non-blocking fd): the CQ it is for, or `None`.
    ///
    /// Each event taken must be acknowledged with [`Device::ack_cq_events`] before the CQ is
    /// destroyed, and the data path must advance the CQ's arm sequence number once per event
    /// (`mlx5_qp::Cq::ack_event`).
    fn get_cq_event(&self, channel: ChannelId) -> Result<Option<CqId>> {
        let _ = channel;
        Err(no_channels(self.name()))
    }
    /// [`Device::get_cq_event`], waiting up to `timeout` for an event (`poll(2)` on the
    /// channel's fd). A software device first runs its pending work ([`Device::progress`]).
    fn wait_cq_event(&self, channel: ChannelId, timeout: Duration) -> Result<Option<CqId>> {
        self.progress();
        if let Some(cq) = self.get_cq_event(channel)? {
            return Ok(Some(cq));
        }
        let fd = self.comp_channel_fd(channel)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !wait_readable(fd, left)? {
                return Ok(None);
            }
            if let Some(cq) = self.get_cq_event(channel)? {
                return Ok(Some(cq));
            }
            // Readable but empty: another thread took the event.
            if left.is_zero() {
                return Ok(None);
            }
        }
    }
    /// Acknowledge `n` completion events taken from `cq` with [`Device::get_cq_event`]
    /// (`ibv_ack_cq_events`; batching is cheaper: one call for many events). Acknowledging
    /// more than were taken is refused.
    fn ack_cq_events(&self, cq: CqId, n: u32) -> Result<()> {
        let _ = (cq, n);
        Err(no_channels(self.name()))
    }
    /// Create a CQ whose CQEs carry the completion timestamp (`ibv_create_cq_ex` with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`: the raw device clock in CQE bytes 48–55,
    /// [`crate::timestamp`]). Poll it with `mlx5_qp::Cq::poll_timestamped`.
    fn create_cq_with_timestamps(&self, attr: &CqInitAttr) -> Result<CqInfo> {
        let _ = attr;
        Err(crate::Error::Unsupported(format!(
            "{} has no completion timestamps",
            self.name()
        )))
    }
    /// The device clock that CQE timestamps count ([`crate::timestamp::ClockInfo`]:
    /// `hca_core_clock` in kHz, the timestamp mask and format).
    fn query_clock(&self) -> Result<crate::timestamp::ClockInfo> {
        Err(crate::Error::Unsupported(format!(
            "{} reports no device clock",
            self.name()
        )))
    }
    /// Create a QP with the extended attributes of `ibv_create_qp_ex`. With every extension
    /// at its default this is [`Device::create_qp`]; a device that knows none of them refuses
    /// the others.
    fn create_qp_ex(&self, pd: PdId, attr: &QpInitAttr, ex: &QpInitEx) -> Result<QpInfo> {
        if *ex == QpInitEx::default() {
            return self.create_qp(pd, attr);
        }
        Err(crate::Error::Unsupported(format!(
            "{} does not support {:?}",
            self.name(),
            ex
        )))
    }
    /// Attach a UD QP to the multicast group `gid` (`ibv_attach_mcast`; `lid` is the
    /// group's multicast LID on InfiniBand, ignored on RoCE: Linux `is_valid_mcast_lid`).
    /// The GID must be a multicast address (ff00::/8, or IPv4-mapped 224.0.0.0/4 on RoCE;
    /// Linux `rdma_is_multicast_addr`) and the QP of type UD, or the call fails with
    /// `EINVAL` (`ib_attach_mcast`). Attaching a QP to a group it is in already succeeds and
    /// changes nothing (uverbs `ib_uverbs_attach_mcast`).
    fn attach_mcast(&self, qp: QpId, gid: &Gid, lid: u16) -> Result<()> {
        let _ = (qp, gid, lid);
        Err(no_mcast(self.name()))
    }
    /// Detach a UD QP from the multicast group `gid` (`ibv_detach_mcast`); a QP that is not
    /// attached to it is refused (`EINVAL`). Destroying a QP detaches it from every group
    /// (uverbs `ib_uverbs_detach_umcast`).
    fn detach_mcast(&self, qp: QpId, gid: &Gid, lid: u16) -> Result<()> {
        let _ = (qp, gid, lid);
        Err(no_mcast(self.name()))
    }
    /// Open a new XRC domain (`ibv_open_xrcd` with no file: a domain of this process).
    fn open_xrcd(&self) -> Result<XrcdId> {
        Err(no_xrc(self.name()))
    }
    /// Close an XRC domain (`ibv_close_xrcd`); refused with [`crate::Error::Busy`] while an
    /// XRC SRQ or target QP uses it.
    fn close_xrcd(&self, xrcd: XrcdId) -> Result<()> {
        let _ = xrcd;
        Err(no_xrc(self.name()))
    }
    /// Create an XRC SRQ (`ibv_create_srq_ex`, `IBV_SRQT_XRC`). Its number, the one
    /// initiators name in their XRC segments, is `layout.srqn` (`ibv_get_srq_num`).
    fn create_srq_xrc(&self, pd: PdId, attr: &XrcSrqInitAttr) -> Result<SrqInfo> {
        let _ = (pd, attr);
        Err(no_xrc(self.name()))
    }
    /// Open an XRC target QP of `xrcd` by its QPN (`ibv_open_qp`): another handle to the same
    /// QP, which stays until its creator and every opener destroyed their handles
    /// ([`Device::destroy_qp`]).
    fn open_qp(&self, xrcd: XrcdId, qpn: u32) -> Result<QpId> {
        let _ = (xrcd, qpn);
        Err(no_xrc(self.name()))
    }
    /// The number of a DC target ([`crate::QpType::Dct`]) initiators name in their WQEs. A
    /// DCT gets it when it moves to RTR (rdma-core `verbs.c` `modify_dct`: "dct is created in
    /// hardware and gets unique qp number when QP is modified to RTR"; `ibv_qp.qp_num` reads 0
    /// before), so this fails for a DCT not in RTR and for any other QP.
    fn dct_number(&self, qp: QpId) -> Result<u32> {
        let _ = qp;
        Err(crate::Error::Unsupported(format!(
            "{} has no DC (Dynamically Connected) transport",
            self.name()
        )))
    }
    /// Hardware counters of a port (mlx5 `hw_counters` names plus port counters).
    fn counters(&self, port: u8) -> Result<Vec<Counter>>;
    /// Give a software device the chance to process doorbells (the software ConnectX in
    /// deterministic mode runs until idle). Hardware: nothing to do.
    fn progress(&self) {}
}

fn no_xrc(device: &str) -> crate::Error {
    crate::Error::Unsupported(format!("{device} has no XRC"))
}

fn no_mcast(device: &str) -> crate::Error {
    crate::Error::Unsupported(format!("{device} has no multicast"))
}

fn no_channels(device: &str) -> crate::Error {
    crate::Error::Unsupported(format!("{device} has no completion channels"))
}

/// Wait until `fd` (a completion channel's or an async event queue's) is readable or `timeout`
/// passes (`ppoll(2)`, restarted after a signal, the time left recomputed): `true` when
/// readable, `false` when the time passed. A descriptor that is not open (`POLLNVAL`: its
/// channel destroyed while a thread waited) and one that reports an error or a hang-up without
/// data are errors: the kernel's event files report `EPOLLERR` once their device is
/// disassociated (unplugged, its driver unbound: `ib_uverbs_event_poll`,
/// `drivers/infiniband/core/uverbs_main.c`), and such a descriptor stays "ready" for good — taken
/// for readable, the caller would spin until its deadline.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> Result<bool> {
    Ok(!wait_any_readable(&[fd], timeout)?.is_empty())
}

/// [`wait_readable`] on several descriptors at once (one `ppoll(2)`): the positions in `fds`
/// of those that are readable, in order, as soon as one is; empty when `timeout` passed first.
/// A descriptor that is not open, or reports an error or a hang-up without data, is an error
/// as in [`wait_readable`]. This is the one sleep of an event-driven program that waits for
/// completions (a completion channel's fd), asynchronous events (the device's event fd) and
/// its peers' control messages (a connection's control socket) at once.
pub fn wait_any_readable(fds: &[RawFd], timeout: Duration) -> Result<Vec<usize>> {
    let deadline = Instant::now() + timeout;
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: left.subsec_nanos() as libc::c_long, // < 10^9
        };
        // SAFETY: `p` is a valid array of `p.len()` pollfds and `ts` a valid timespec for the
        // duration of the call; no signal mask is changed (NULL).
        let r = unsafe {
            libc::ppoll(
                p.as_mut_ptr(),
                p.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if r >= 0 {
            let mut ready = Vec::new();
            for (i, q) in p.iter().enumerate() {
                if readable(q.fd, if r > 0 { q.revents } else { 0 })? {
                    ready.push(i);
                }
            }
            return Ok(ready);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(crate::Error::Verbs {
                call: "ppoll(event fd)",
                source: e,
            });
        }
    }
}

/// What [`wait_readable`] makes of the `revents` `ppoll(2)` gave for `fd` (0: the time passed).
fn readable(fd: RawFd, revents: libc::c_short) -> Result<bool> {
    if revents & libc::POLLNVAL != 0 {
        return Err(crate::Error::InvalidArgument(format!(
            "file descriptor {fd} is not open (was its channel destroyed while waiting?)"
        )));
    }
    if revents & libc::POLLIN != 0 {
        return Ok(true);
    }
    if revents & (libc::POLLERR | libc::POLLHUP) != 0 {
        return Err(crate::Error::Verbs {
            call: "ppoll(event fd)",
            source: std::io::Error::other(format!(
                "file descriptor {fd} reports an error or a hang-up and no event (its device \
                 gone, or the channel closed)"
            )),
        });
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn each_poll_outcome_is_readable_timed_out_or_an_error() {
        assert!(!readable(3, 0).unwrap());
        assert!(readable(3, libc::POLLIN).unwrap());
        // Data and a hang-up: the data first.
        assert!(readable(3, libc::POLLIN | libc::POLLHUP).unwrap());
        for bad in [libc::POLLNVAL, libc::POLLNVAL | libc::POLLIN] {
            let e = readable(3, bad).unwrap_err();
            assert!(e.to_string().contains("not open"), "{e}");
        }
        for bad in [libc::POLLERR, libc::POLLHUP] {
            assert!(readable(3, bad).is_err());
        }
    }

    #[test]
    fn a_pipe_is_waited_for_until_written_and_a_broken_one_is_an_error() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let fd = reader.as_raw_fd();
        assert!(!wait_readable(fd, Duration::from_millis(5)).unwrap());
        writer.write_all(b"x").unwrap();
        assert!(wait_readable(fd, Duration::from_secs(5)).unwrap());
        // The write end, its reader gone: POLLERR and never data.
        drop(reader);
        assert!(wait_readable(writer.as_raw_fd(), Duration::from_secs(5)).is_err());
    }

    #[test]
    fn several_descriptors_are_waited_for_at_once() {
        let (r1, _w1) = std::io::pipe().unwrap();
        let (r2, mut w2) = std::io::pipe().unwrap();
        let fds = [r1.as_raw_fd(), r2.as_raw_fd()];
        assert!(wait_any_readable(&fds, Duration::from_millis(5))
            .unwrap()
            .is_empty());
        w2.write_all(b"x").unwrap();
        assert_eq!(
            wait_any_readable(&fds, Duration::from_secs(5)).unwrap(),
            [1]
        );
        // No descriptor at all: the time passes.
        assert!(wait_any_readable(&[], Duration::from_millis(1))
            .unwrap()
            .is_empty());
    }
}
