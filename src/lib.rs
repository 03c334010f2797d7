//! # mlx5-direct
//!
//! A kernel-bypass data path for NVIDIA/Mellanox ConnectX (mlx5) NICs, written in Rust.
//!
//! Open the software ConnectX, connect two RC QPs, WRITE 5 bytes, poll the completion, check
//! the bytes (`examples/hello_write.rs`; `cargo run --example quickstart` does READ, SEND and
//! atomics too):
//!
//! ```
//! use mlx5_direct::connect::{connect_qps, ConnectParams};
//! use mlx5_direct::{Context, QpInit, SendWr};
//! use std::time::Duration;
//!
//! # fn main() -> mlx5_direct::Result<()> {
//! // Two software ConnectX devices on one fabric, run by its own thread.
//! let (a, b) = Context::sim_pair()?;
//! let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (mut cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
//! let mut qp_a = pd_a.create_qp(&QpInit::rc(&cq_a))?;
//! let mut qp_b = pd_b.create_qp(&QpInit::rc(&cq_b))?;
//! // Page-aligned registered buffers; dropping one deregisters it before freeing it.
//! let (src, dst) = (pd_a.alloc_mr(4096)?, pd_b.alloc_mr(4096)?);
//!
//! // Reset → Init → RTR → RTS on both sides, in one call.
//! let _conns = connect_qps(&mut qp_a, &mut qp_b, &ConnectParams::default())?;
//!
//! src.write(0, b"hello")?;
//! let sge = [src.sge(0, 5)?];
//! qp_a.post(&SendWr::write(1, dst.remote(0)?).sges(&sge).signaled())?;
//! let wc = cq_a.wait_for(&mut qp_a, 1, Duration::from_secs(5))?;
//! assert!(wc.is_ok());
//! assert_eq!(dst.read(0, 5)?, b"hello");
//! # Ok(()) }
//! ```
//!
//! Every object owns its device object and holds what it depends on (a QP its PD and CQs, an
//! MR its PD, everything its context), so they may be dropped in any order; no `unsafe` is
//! needed to use the library.
//!
//! A QP that failed is recovered in one call on the objects that own it, its CQs and SRQ
//! shared with other QPs or not: [`connect::Connection::recover`] over TCP,
//! [`connect::recover_pair`] in one process ([`connect::Recover`] names the objects). Only that
//! QP's completions are drained — the other QPs' stay in a shared CQ for their next poll, its
//! SRQ receives come back with their WR ids — so every WR of every QP completes exactly once
//! (`examples/srq_server.rs` recovers one client of a server whose QPs share one CQ and one
//! SRQ; `examples/error_recovery.rs` recovers a pair after RETRY_EXC_ERR).
//!
//! This facade crate re-exports the workspace's library crates:
//!
//! - [`wqe`]: send / receive / SRQ WQE segment layouts, opcodes, and the WQE writer over a
//!   circular ring of 64-byte basic blocks;
//! - [`cq`]: CQE layouts, the ownership rule, syndromes and CQ doorbell encodings;
//! - [`hw`]: MMIO primitives (doorbell record, 8-byte doorbell, BlueFlame copy, barriers), the
//!   device contract (the control path) and its libibverbs + mlx5dv backend (in every build:
//!   rdma-core is loaded at run time, when a hardware device is first opened);
//! - [`datapath`] (the crate `mlx5-qp`): the data path (post, ring, poll) that runs unchanged
//!   on every device; its `datapath::Qp` is the ring-level QP that the owning [`Qp`] drives
//!   (the name `mlx5_direct::qp` still resolves to it, hidden from these docs);
//! - [`ctx`]: owning objects (context, PD, memory region, CQ, QP, SRQ, AH) that destroy their
//!   device objects in the right order, re-exported at the top of this crate;
//! - [`connect`]: connection setup over TCP or in one process, rebuild after errors,
//!   diagnosis;
//! - [`decode`]: a field-by-field decoder of raw WQEs and CQEs (the library behind
//!   `wqe-dump`);
//! - [`sim`] (feature `sim`, default): the software ConnectX that every test and the default
//!   demo run on.
//!
//! The owning objects ([`Context`], [`Qp`], [`Cq`], ...) and the work requests and
//! completions of the data path ([`SendWr`], [`RecvWr`], [`Wc`], ...) are re-exported here, and
//! one [`Error`] takes every layer's error with `?` ([`Error::device`] and
//! [`Error::data_path`] find the device's or the data path's error inside).
//!
//! See `docs/architecture.md` for how they fit together.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;

pub use error::{Error, Result};

pub use mlx5_connect as connect;
pub use mlx5_cq as cq;
pub use mlx5_ctx as ctx;
#[cfg(feature = "sim")]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub use mlx5_ctx::SimFabric;
pub use mlx5_ctx::{Ah, Context, Cq, CqInit, Mr, Pd, Qp, QpInit, Srq};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use mlx5_ctx::{AsyncChannel, AsyncCq, AsyncEventStream};
pub use mlx5_ctx::{AsyncEvent, AsyncEvents, CompChannel, Dci, Dct, XrcSrq, Xrcd};
pub use mlx5_decode as decode;
pub use mlx5_hw as hw;
pub use mlx5_qp as datapath;
/// The data path's crate under its former name here ([`datapath`]); kept so that code written
/// against it still builds.
#[doc(hidden)]
pub use mlx5_qp as qp;
pub use mlx5_qp::{RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus};
#[cfg(feature = "sim")]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub use mlx5_sim as sim;
pub use mlx5_wqe as wqe;
