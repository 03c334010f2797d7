//! # mlx5-cq
//!
//! Completion-queue formats of mlx5, byte-identical to rdma-core's `mlx5dv.h`:
//!
//! - [`cqe`]: the 64-byte CQE (`struct mlx5_cqe64`) and error CQE (`struct mlx5_err_cqe`),
//!   `op_own` decoding, CQE opcodes, where the 64-byte part sits in a 128-byte CQE, inline
//!   scatter formats 1 and 2;
//! - [`owner`]: the ownership rule (owner bit against the lap parity, plus the INVALID-opcode
//!   check rdma-core needs because it fills new CQs with `op_own = 0xF0`);
//! - [`status`]: every error syndrome mapped to its `ibv_wc_status`, with names and causes;
//! - [`doorbell`]: the CQ doorbell-record encodings (set_ci, arm) and the UAR arm value.
//!
//! `no_std`, no allocation.
#![no_std]
#![deny(missing_docs)]

pub mod cqe;
pub mod doorbell;
pub mod owner;
pub mod status;

pub use cqe::*;
pub use doorbell::*;
pub use owner::*;
pub use status::*;
