//! # mlx5-hw
//!
//! The hardware boundary of mlx5-direct:
//!
//! - [`mmio`]: doorbell-record stores, the 8-byte doorbell, the BlueFlame copy and the
//!   barriers that order them, per architecture;
//! - [`layout`]: what a device hands the data path (rings, doorbell records, UAR registers),
//!   shaped like `mlx5dv_init_obj`'s output;
//! - [`device`]: the control-path contract (open, PD, MR, CQ, QP, SRQ, modify, query, events,
//!   counters) that the software ConnectX and the verbs backend both implement;
//! - [`attr`]: verbs attribute types with verbs.h values;
//! - [`qp_state`]: the QP state machine table (the Linux kernel's `qp_state_table`), used to
//!   validate every modify before it reaches a device, and by the software ConnectX.
//! - [`mcast`]: UD multicast group addresses;
//! - [`timestamp`]: CQE completion timestamps and the device clock;
//! - [`verbs`]: the libibverbs + mlx5dv backend, in every build: rdma-core's libraries are
//!   loaded at run time, when a hardware device is first listed or opened.
//!
//! Each item is documented once, in its module; the crate root re-exports the attribute,
//! device-contract and layout types by name.

pub mod attr;
pub mod device;
pub mod error;
pub mod layout;
pub mod mcast;
pub mod mmio;
pub mod qp_state;
pub mod timestamp;
pub mod transition;
pub mod verbs;

pub use attr::{
    AccessFlags, AhAttr, AttrMask, Gid, GlobalRoute, MigState, Mtu, QpAttr, QpCap, QpState, QpType,
};
pub use device::{
    AhId, AhInfo, AsyncEvent, ChannelId, Counter, CqId, CqInfo, CqInitAttr, DcInit, DciStreams,
    Device, DeviceAttr, LinkLayer, MrId, MrInfo, PdId, PortAttr, PortState, QpCreateFlags, QpId,
    QpInfo, QpInitAttr, QpInitEx, SrqId, SrqInfo, SrqInitAttr, XrcSrqInitAttr, XrcdId,
};
pub use error::{Errno, Error, ModifyError, Result};
pub use layout::{BfLayout, CqLayout, QpLayout, SrqLayout, WqLayout};
pub use mcast::MULTICAST_QPN;
pub use timestamp::{ClockInfo, TimestampFormat};
