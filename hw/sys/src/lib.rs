//! # mlx5dv-sys
//!
//! Curated, hand-written FFI bindings for the part of rdma-core's mlx5 direct-verbs surface
//! (`<infiniband/mlx5dv.h>`) that the mlx5-direct hardware path needs: handing verbs objects to
//! [`mlx5dv_init_obj`] to learn their rings, doorbell records and UAR registers; querying the
//! device ([`mlx5dv_query_device`]); creating QPs and CQs with mlx5-specific attributes
//! ([`mlx5dv_create_qp`], [`mlx5dv_create_cq`]).
//!
//! No bindgen, no libclang: every struct is written out by hand with the field order, types
//! and sizes of the rdma-core 44 header (Debian `libibverbs-dev 44.0-2`), for LP64 Linux. The
//! sizes and offsets are asserted in this crate's unit tests and checked against the installed
//! header by the `mlx5-conformance` crate.
//!
//! Verbs types (`ibv_context`, `ibv_qp`, ...) are opaque here; the verbs side comes from the
//! `rdma-sys` crate and pointers are cast at the call site.
//!
//! ## Linking
//!
//! The default build links nothing, so crates that only need the types build on machines
//! without libmlx5. The `link` feature adds `-lmlx5 -libverbs` (the `verbs` feature of
//! `mlx5-hw` turns it on).
#![no_std]
#![deny(missing_docs)]
#![allow(non_camel_case_types)]

pub mod create;
pub mod ffi;
pub mod obj;
pub mod query;
pub mod verbs;

pub use create::*;
pub use ffi::*;
pub use obj::*;
pub use query::*;
pub use verbs::*;

/// Doorbell-record index of the RQ counter in a QP's `dbrec` (`MLX5_RCV_DBR`, mlx5dv.h).
pub const MLX5_RCV_DBR: usize = 0;
/// Doorbell-record index of the SQ counter in a QP's `dbrec` (`MLX5_SND_DBR`, mlx5dv.h).
pub const MLX5_SND_DBR: usize = 1;

#[cfg(test)]
mod layout_tests;
