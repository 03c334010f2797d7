//! The libibverbs + mlx5dv backend of the device contract.
//!
//! Compiled into every build: nothing is linked. The first [`list_devices`] or
//! [`VerbsDevice::open`] of the process loads rdma-core's `libibverbs.so.1` and `libmlx5.so.1`
//! with `dlopen` (`mlx5dv_sys::RdmaCore`); a host without them gets
//! [`crate::Error::RdmaCore`] naming the packages to install, and the software ConnectX never
//! needs them.
//!
//! - [`list_devices`] and [`VerbsDevice::open`]: find and open a device; a missing device is
//!   [`crate::Error::NoDevice`] naming the devices that exist.
//! - [`VerbsDevice`] implements [`crate::Device`]. On mlx5 it creates CQs and QPs through
//!   mlx5dv (CQE size, ignore-overrun, scatter-to-CQE disabled, one thread domain per QP for a
//!   dedicated BlueFlame register) and reads their rings back with `mlx5dv_init_obj` into
//!   [`crate::layout`] records. On any other device (Soft-RoCE) the `*_verbs` methods still
//!   create, modify and destroy objects; the layout-returning trait methods answer
//!   [`crate::Error::Unsupported`] and [`crate::DeviceAttr::direct_path`] is `false`.
//! - XRC (`device/xrc.rs`): XRC domains, XRC SRQs (`ibv_create_srq_ex`, `ibv_get_srq_num`),
//!   initiator and target QPs (`ibv_create_qp_ex`, `ibv_open_qp`) behind the [`crate::Device`]
//!   XRC methods, on a device with `IBV_DEVICE_XRC`; elsewhere (Soft-RoCE) each refuses with
//!   [`crate::Error::Unsupported`] naming the verb.
//! - [`baseline`]: the plain `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq` data path that
//!   benchmarks compare against, and the data path used on Soft-RoCE.
//! - [`read_counters`]: `hw_counters` and port counters from sysfs.
//!
//! Every QP modify goes through [`crate::qp_state::validate_with_limits`] before
//! `ibv_modify_qp`; [`VerbsDevice::modify_qp_raw`] exists only to compare the kernel's own
//! verdict with the table in tests.

pub mod baseline;
mod convert;
mod counters;
mod device;
mod ffi;
mod list;
mod mlx5;
mod table;

pub use counters::{read_counters, SYSFS_INFINIBAND};
pub use device::{VerbsAh, VerbsCq, VerbsDevice, VerbsQp, VerbsSrq};
pub use list::{list_devices, DeviceInfo};
