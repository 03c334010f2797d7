//! # mlx5-qp: the mlx5 data path
//!
//! Post WQEs, ring doorbells and BlueFlame, poll CQEs — on a real ConnectX and on the software
//! ConnectX alike. A device hands out rings, doorbell records and UAR pages
//! ([`mlx5_hw::QpLayout`], [`mlx5_hw::CqLayout`], [`mlx5_hw::SrqLayout`], shaped like
//! `mlx5dv_init_obj`'s output); the types here drive them directly, with no trait object or
//! device branch on the hot path.
//!
//! - [`Qp`]: validate a [`SendWr`] and write its WQE (segments wrap at 16 bytes at the ring
//!   end, inline data split across it), ring the doorbell ([`Qp::post`], or several posts and
//!   one doorbell with [`Qp::batch`]); post receives; post caller-built WQEs
//!   ([`Qp::post_raw`]).
//! - Lean entry points for the shapes a latency loop posts — [`Qp::post_write_inline`],
//!   [`Qp::post_write`], [`Qp::post_send_inline`], [`Qp::post_send`] — with the same checks,
//!   errors and bytes as [`Qp::post`] (which dispatches to them for those shapes) behind one
//!   branch; anything else falls back to the generic path.
//! - [`Srq`]: a shared receive queue on its linked free list.
//! - [`Cq`]: poll completions into a caller's `&mut [Wc]`, demultiplexed to QPs and SRQs
//!   through a [`Resolve`] table such as [`QpTable`]; arm for events. [`Cq::poll_send`] is
//!   the lean poll of one QP's send completions: the WR ids of its successes into a
//!   `&mut [u64]`, every other completion to a callback.
//!
//! ## Safety
//! Constructors from layouts are `unsafe`: the caller promises the memory the layout names is
//! live and owned by that one object (each constructor spells out its contract). After that,
//! every safe call either does what it says or returns an [`Error`] — bad input never writes
//! a malformed WQE, never panics. The one promise that stays with the caller: **memory named
//! by a WR's SGEs must stay valid and registered until that WR's completion is polled**.
//!
//! ## Completions: what is reported
//! Every posted WR is retired exactly once. A signaled send WR produces one [`Wc`]; an
//! unsignaled one that succeeds produces none and is retired by its QP's next completion
//! (rdma-core `wqe_head`, UCX `hw_ci`). A success CQE gives the WR it names a `Wc` (a device
//! writes one only for a signaled WR; rdma-core, too, reports every CQE it polls). From the first error completion of a QP on, every WR
//! it retires produces a `Wc` (the failing one with its status and syndrome, the rest
//! `IBV_WC_WR_FLUSH_ERR`), and [`Qp::flush_outstanding`] reports what a QP in Error still holds.
//! Every receive WR produces one `Wc`. Details: [`Cq::poll`].
//!
//! ## Cost
//! No allocation, lock or system call per post or poll: the per-slot bookkeeping arrays are
//! allocated at construction. Measured with callgrind on RAM rings (`benches/
//! count-instructions.sh`, x86_64, release), call and return included: an inline 8-byte RDMA
//! WRITE through BlueFlame costs 40 instructions per post (libmlx5: 371), a one-SGE WRITE
//! with the 8-byte doorbell 39, a WR in a [`Batch`] of 16 43; a polled requester CQE 20
//! through [`Cq::poll_send`] in a batch of 16 and 27 through [`Cq::poll`] (42 for a
//! one-entry call, 44 for a one-entry receive, 28 for a receive, 29 for a flush of a QP gone
//! to Error, 42 with 1000 QPs on the CQ, 44 for their receives). A lean post
//! checks everything — state, QP type, data limits, a pending doorbell, the [`DoorbellMode`], free WRs (rdma-core's `max_post`)
//! and blocks — with one comparison of its 64-bit producer index against a gate the send
//! queue keeps up to date (plus one on the data length when it is not a compile-time
//! constant); it stores the WR id
//! and nothing else for the common shape (one block, not an atomic). Errors and rare cases
//! (pending doorbells, UD, error CQEs, inline scatter) leave the hot path through one
//! branch to out-of-line code. `Qp`, `Srq` and `Cq` are `Send` but not `Sync`:
//!
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<mlx5_qp::Qp>();
//! ```
//!
//! ## Typical use
//! ```no_run
//! # use mlx5_qp::*;
//! # fn demo(layout: &mlx5_hw::QpLayout, cq_layout: &mlx5_hw::CqLayout, sge: Sge, remote: RemoteAddr)
//! #     -> Result<()> {
//! // SAFETY: the layouts come from live device objects that outlive `qp` and `cq`.
//! let mut qp = unsafe { Qp::from_layout(layout, None)? };
//! let mut cq = unsafe { Cq::from_layout(cq_layout)? };
//! qp.set_state(mlx5_hw::QpState::Rts); // after the control path's modify to RTS
//! qp.post(&SendWr::write(1, remote).inline(b"hello").signaled())?; // BlueFlame
//! {
//!     let mut batch = qp.batch(); // one doorbell for both
//!     batch.post(&SendWr::write(2, remote).sges(&[sge]))?;
//!     batch.post(&SendWr::send(3).sges(&[sge]).signaled())?;
//! }
//! let mut wcs = [Wc::default(); 16];
//! let n = cq.poll(&mut qp, &mut wcs)?;
//! for wc in &wcs[..n] {
//!     if !wc.is_ok() {
//!         eprintln!("WR {} failed: {} ({:?})", wc.wr_id(), wc.status(), wc.syndrome_name());
//!     }
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod cq;
mod cqe_key;
mod dc;
mod error;
mod lines;
mod qp;
mod queue;
mod rq;
mod scatter;
mod sq;
mod srq;
mod wc;
mod wr;
mod wr_limit;
mod xrc;

pub use cq::{Cq, DcTargets, DestroyedQp, DestroyedQps, QpTable, Resolve};
pub use dc::DcDest;
pub use error::{Error, Result, SqLimit};
pub use qp::{Batch, Qp, MAX_SQ_BBS};
pub use sq::DoorbellMode;
pub use srq::Srq;
pub use wc::{Wc, WcFields, WcFlags, WcOpcode, WcStatus};
pub use wr::{RecvWr, RemoteAddr, SendData, SendFlags, SendOp, SendWr, Sge, UdDest};
