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
//!   [`mlx5dv_init_obj`] to learn their rings, doorbell records and UAR registers; querying the
//!   device ([`mlx5dv_query_device`], [`mlx5dv_get_clock_info`]); creating QPs and CQs with
//!   mlx5-specific attributes ([`mlx5dv_create_qp`], [`mlx5dv_create_cq`]).
//!
//! No bindgen, no libclang: every struct is written out by hand with the field order, types
//! and sizes of the rdma-core 44 headers (Debian `libibverbs-dev 44.0-2`), for LP64 Linux. The
//! sizes, offsets and constants are asserted in this crate's unit tests and checked against the
//! installed headers by the `mlx5-conformance` crate.
//!
//! ## Linking
//!
//! The default build links nothing, so crates that only need the types (and docs.rs, which
//! has no rdma-core) build on machines without libibverbs. The `link` feature adds
//! `-lmlx5 -libverbs` (the `verbs` feature of `mlx5-hw` turns it on); under `cfg(docsrs)`
//! nothing is linked even with it.
#![no_std]
#![deny(missing_docs)]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod create;
pub mod ffi;
pub mod ibv;
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
