//! # mlx5-wqe
//!
//! Work-queue-entry formats of mlx5 (ConnectX-4 and later) and a writer that builds them in a
//! circular send ring, byte-identical to what rdma-core's `mlx5dv.h` helpers and
//! `providers/mlx5/qp.c` produce.
//!
//! - [`opcode`]: send opcodes, `fm_ce_se` flags and the other constants.
//! - [`seg`]: every segment as a `#[repr(C)]` struct with big-endian fields, laid out like
//!   rdma-core's `struct mlx5_wqe_*_seg` (checked against the header by the conformance tests).
//! - [`ring`]: DS / basic-block arithmetic and [`ring::WqeWriter`], which writes a WQE into a
//!   ring of 64-byte basic blocks, wrapping at 16-byte granularity without NOP padding.
//! - [`recv`]: receive and SRQ WQEs (data segments with the `MLX5_INVALID_LKEY` terminator).
//!
//! The crate is `no_std` and allocation-free.
#![no_std]
#![deny(missing_docs)]

pub mod opcode;
pub mod recv;
pub mod ring;
pub mod seg;

pub use opcode::*;
pub use ring::{bbs_for_ds, ds_for_bytes, SqRing, WqeError, WqeWriter};
pub use seg::*;
