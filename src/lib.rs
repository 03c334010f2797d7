//! # mlx5-direct
//!
//! A kernel-bypass data path for NVIDIA/Mellanox ConnectX (mlx5) NICs, written in Rust.
//!
//! This facade crate re-exports the workspace's library crates:
//!
//! - [`wqe`]: send / receive / SRQ WQE segment layouts, opcodes, and the WQE writer over a
//!   circular ring of 64-byte basic blocks;
//! - [`cq`]: CQE layouts, the ownership rule, syndromes and CQ doorbell encodings;
//! - [`hw`]: MMIO primitives (doorbell record, 8-byte doorbell, BlueFlame copy, barriers), the
//!   device contract (the control path) and its libibverbs + mlx5dv backend (feature `verbs`);
//! - [`qp`]: the data path (post, ring, poll) that runs unchanged on every device;
//! - [`ctx`]: owning objects (context, PD, memory region, CQ, QP, SRQ, AH) that destroy their
//!   device objects in the right order, re-exported at the top of this crate;
//! - [`connect`]: connection setup over TCP or in one process, rebuild after errors,
//!   diagnosis;
//! - [`decode`]: a field-by-field decoder of raw WQEs and CQEs (the library behind
//!   `wqe-dump`);
//! - [`sim`] (feature `sim`, default): the software ConnectX that every test and the default
//!   demo run on.
//!
//! See `docs/architecture.md` for how they fit together.
#![forbid(unsafe_code)]

pub use mlx5_connect as connect;
pub use mlx5_cq as cq;
pub use mlx5_ctx as ctx;
#[cfg(feature = "sim")]
pub use mlx5_ctx::SimFabric;
pub use mlx5_ctx::{Ah, Context, Cq, CqInit, Error, Mr, Pd, Qp, QpInit, Result, Srq};
pub use mlx5_decode as decode;
pub use mlx5_hw as hw;
pub use mlx5_qp as qp;
#[cfg(feature = "sim")]
pub use mlx5_sim as sim;
pub use mlx5_wqe as wqe;
