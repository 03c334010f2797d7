//! # mlx5dv-sys
//!
//! Curated, hand-written FFI bindings for the part of rdma-core that the mlx5-direct control
//! path needs:
//!
//! - [`ibv`]: the libibverbs surface (`<infiniband/verbs.h>`): devices, PDs, MRs, CQs, QPs,
//!   SRQs, AHs, XRC domains, events; the `static inline` verbs (`ibv_post_send`,
//!   `ibv_create_cq_ex`, `ibv_alloc_td`, ...) as Rust functions that dispatch through the
//!   provider's ops tables exactly as the header does.
//! - the mlx5 direct-verbs surface (`<infiniband/mlx5dv.h>`): handing verbs objects to
//!   [`RdmaCore::mlx5dv_init_obj`] to learn their rings, doorbell records and UAR registers;
//!   querying the device ([`RdmaCore::mlx5dv_query_device`],
//!   [`RdmaCore::mlx5dv_get_clock_info`]); creating QPs and CQs with mlx5-specific attributes
//!   ([`RdmaCore::mlx5dv_create_qp`], [`RdmaCore::mlx5dv_create_cq`]).
//! - [`load`]: rdma-core's `libibverbs.so.1` and `libmlx5.so.1`, opened with `dlopen` at run
//!   time ([`RdmaCore::get`]); every exported function is a method of [`RdmaCore`], looked up
//!   once by name and symbol version (the table, with the rdma-core release of each version
//!   tag, is [`RdmaCore::SYMBOLS`] and [`load::VERSION_TAGS`]).
//!
//! No bindgen, no libclang: every struct is written out by hand with the field order, types
//! and sizes of the rdma-core 44 headers (Debian `libibverbs-dev 44.0-2`), for LP64 Linux. The
//! sizes, offsets and constants are asserted in this crate's unit tests and checked against the
//! installed headers by the `mlx5-conformance` crate.
//!
//! ## Loading, not linking
//!
//! Nothing is linked at build time: building needs neither rdma-core nor its headers, and a
//! program that uses this crate starts on a host without rdma-core. The libraries are opened
//! when [`RdmaCore::get`] is first called (by `mlx5-hw` when a hardware device is first
//! listed or opened); a host without them gets a [`LoadError`] naming the packages to install,
//! and one whose rdma-core is older than [`load::min_rdma_core`] (22) one naming each missing
//! symbol and the release that has it.
#![deny(missing_docs)]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod create;
mod exported;
pub mod ibv;
pub mod load;
pub mod obj;
pub mod query;
pub mod verbs;

pub use create::*;
pub use load::{LoadError, RdmaCore};
pub use obj::*;
pub use query::*;
pub use verbs::*;

/// Doorbell-record index of the RQ counter in a QP's `dbrec` (`MLX5_RCV_DBR`, mlx5dv.h).
pub const MLX5_RCV_DBR: usize = 0;
/// Doorbell-record index of the SQ counter in a QP's `dbrec` (`MLX5_SND_DBR`, mlx5dv.h).
pub const MLX5_SND_DBR: usize = 1;

#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod load_tests;
