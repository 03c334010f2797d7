//! # mlx5-direct
//!
//! A kernel-bypass data path for NVIDIA/Mellanox ConnectX (mlx5) NICs, written in Rust.
//!
//! This facade crate re-exports the workspace's crates:
//!
//! - [`wqe`]: send / receive / SRQ WQE segment layouts, opcodes, and the WQE writer over a
//!   circular ring of 64-byte basic blocks;
//! - [`cq`]: CQE layouts, the ownership rule, syndromes and CQ doorbell encodings;
//! - [`hw`]: MMIO primitives (doorbell record, 8-byte doorbell, BlueFlame copy, barriers), the
//!   device contract (the control path) and its libibverbs + mlx5dv backend (feature `verbs`);
//! - [`qp`]: the data path (post, ring, poll) that runs unchanged on every device;
//! - [`sim`]: the software ConnectX that every test and the default demo run on;
//! - [`perf`]: statistics, report lines and arguments of the perftest-compatible `lat` and
//!   `bw` tools.
//!
//! See `docs/architecture.md` for how they fit together.
#![forbid(unsafe_code)]

pub mod dump;
pub mod perf;

pub use mlx5_cq as cq;
pub use mlx5_hw as hw;
pub use mlx5_qp as qp;
pub use mlx5_sim as sim;
pub use mlx5_wqe as wqe;
