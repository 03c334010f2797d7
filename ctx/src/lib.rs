//! # mlx5-ctx: owning objects for the mlx5 data path
//!
//! A device context and the objects made from it — protection domain ([`Pd`]), memory region
//! ([`Mr`]), completion queue ([`Cq`]), queue pair ([`Qp`]), shared receive queue ([`Srq`]),
//! address handle ([`Ah`]) — each owning its device object and destroying it when dropped, in
//! an order that cannot go wrong:
//!
//! - **A child keeps its parent alive** through an [`Arc`](std::sync::Arc): a QP holds its PD,
//!   its CQs and its SRQ; an MR, an SRQ and an AH hold their PD; everything holds the context,
//!   and a software ConnectX context holds its fabric and the fabric's thread. So a CQ can
//!   never be destroyed under a QP that reports to it, nor a PD under its MRs, whatever order
//!   the program drops them in. `Arc` rather than lifetimes: objects can then move into
//!   threads and async tasks (`'static`), live in one struct together, and be dropped in any
//!   order; the cost is one reference count per object, paid at setup and teardown, never per
//!   post or poll.
//! - **Memory regions cannot dangle.** [`Mr`] owns a page-aligned buffer (optionally huge
//!   pages) and deregisters before it frees; [`Pd::with_registered`] lends the device caller
//!   memory for the length of a closure and deregisters before the borrow ends, so no
//!   `mem::forget` can leave the device writing into memory the program reuses. See
//!   [`mr`] for the soundness boundary (a peer with the rkey can write at any time:
//!   every access is a volatile copy).
//! - **The data path is the same code.** [`Qp`], [`Cq`] and [`Srq`] dereference to
//!   [`mlx5_qp::Qp`], [`mlx5_qp::Cq`] and [`mlx5_qp::Srq`]: a post through an owning `Qp` is
//!   the 40-instruction post (`benches/count-instructions.sh`). The one `unsafe` step from
//!   device layouts to the data path is in one audited module (`datapath.rs`), with its
//!   soundness argument.
//! - **Waiting without spinning.** A [`CompChannel`] is one fd that many CQs report their
//!   completion events to ([`Context::create_cq_on`]); the owning [`Cq::arm`] keeps the arm
//!   sequence number right and the channel acknowledges events in batches and before a CQ is
//!   destroyed, so the verbs bookkeeping cannot be got wrong ([`channel`]). With the `tokio`
//!   feature, `AsyncChannel` serves every CQ of a channel from one task with the race-free
//!   poll/arm/poll wait, a busy-poll budget and cancellation-safe `next().await`
//!   (`async_cq`). Asynchronous events (QP fatal, SRQ limit, port, ...) have their own fd
//!   ([`Context::async_events`], [`events`]).
//! - **No silent hangs.** [`Context::sim`] runs the software ConnectX on its own thread (the
//!   default for this API); a deterministic fabric ([`SimFabric::deterministic`]) is stepped by
//!   [`Context::progress`], which the waiting helpers ([`Cq::wait_for`], [`Cq::poll_until`])
//!   call, and every wait has a deadline whose error says what is still outstanding.
//!
//! ```
//! use mlx5_ctx::{Context, QpInit};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (a, b) = Context::sim_pair()?; // two software ConnectX devices, one fabric, threaded
//! let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (mut cq_a, cq_b) = (a.create_cq(64)?, b.create_cq(64)?);
//! let qp_a = pd_a.create_qp(&QpInit::rc(&cq_a))?;
//! let qp_b = pd_b.create_qp(&QpInit::rc(&cq_b))?;
//! let mr = pd_b.alloc_mr(4096)?;
//! # let _ = (&mut cq_a, qp_a, qp_b, mr);
//! // ... connect (mlx5-connect `connect_qps`), post, poll: see `examples/hello_write.rs`.
//! # Ok(()) }
//! ```
//!
//! ## What the type system enforces
//!
//! A region lent with [`Pd::with_registered`] cannot escape its closure, so it is always
//! deregistered before the caller's buffer is free again:
//!
//! ```compile_fail
//! # fn f(pd: &mlx5_ctx::Pd) -> mlx5_ctx::Result<()> {
//! let mut buf = vec![0u8; 4096];
//! let escaped = pd.with_registered(&mut buf, mlx5_ctx::mr::all_access(), |mr| mr)?;
//! # Ok(()) }
//! ```
//!
//! and the buffer cannot be touched directly while the device may write it:
//!
//! ```compile_fail
//! # fn f(pd: &mlx5_ctx::Pd) -> mlx5_ctx::Result<()> {
//! let mut buf = vec![0u8; 4096];
//! pd.with_registered(&mut buf, mlx5_ctx::mr::all_access(), |_mr| buf[0] = 1)?;
//! # Ok(()) }
//! ```
//!
//! The data-path objects belong to one thread at a time (`Send`, not `Sync`): the hot path
//! takes no lock.
//!
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<mlx5_ctx::Qp>();
//! ```
//!
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<mlx5_ctx::Cq>();
//! ```
//!
//! Parents outlive their children at run time instead (the `Arc`s above):
//! `ctx/tests/it/drop_order.rs` drops the handles of all six kinds in each of the 720 orders.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn)]

mod ah;
#[cfg(feature = "tokio")]
pub mod async_cq;
pub mod channel;
mod context;
mod cq;
mod datapath;
pub mod dc;
mod dead;
mod error;
pub mod events;
mod mcast;
mod mem;
pub mod mr;
mod pd;
mod qp;
mod srq;
mod timestamp;
pub mod wait;
pub mod xrc;

pub use ah::Ah;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use async_cq::{AsyncChannel, AsyncCq, AsyncEventStream, AsyncReadable};
pub use channel::CompChannel;
pub use context::Context;
#[cfg(feature = "sim")]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub use context::SimFabric;
pub use cq::{Cq, CqInit};
pub use dc::{DcAddr, DcTarget, Dci, DciInit, Dct};
pub use dead::Unretired;
pub use error::{Error, Result};
pub use events::AsyncEvents;
pub use mlx5_hw::AsyncEvent;
pub use mr::Mr;
pub use pd::Pd;
pub use qp::{Qp, QpInit};
pub use srq::Srq;
pub use xrc::{connect_xrc, XrcSrq, XrcTarget, Xrcd};
