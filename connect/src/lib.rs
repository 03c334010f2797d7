//! Connection setup, recovery and diagnosis: the control path around a QP (`docs/sources.md`
//! §16–§20).
//!
//! - [`wire`]: the endpoint exchange, a versioned fixed binary message format;
//! - [`Control`]: the TCP control connection (blocking, every step under a deadline);
//! - [`plan()`]: the attribute computation every way of connecting shares;
//! - the owning QPs of `mlx5-ctx`: connect in one call ([`connect_qps`], [`accept_qp`],
//!   [`connect_qp`]) and recover in one call after an error ([`Connection::recover`] over TCP,
//!   [`recover_pair`] in one process, on the QP, its CQs and SRQ: [`Recover`]);
//! - [`Connection`]: connect a QP named by its device handle over TCP ([`Connection::accept`] /
//!   [`Connection::connect`]) or in one process ([`connect_pair`]), then
//!   [`Connection::rebuild`] after an error through a [`Link`], and [`Connection::replace_qp`]
//!   first when the QP itself is gone (destroyed: a new QP takes over, and the rebuild
//!   announces its QPN to the peer);
//! - [`diag`]: readable dumps of a QP, the device counters and an error completion.
//!
//! The control socket is a descriptor ([`Connection::control_fd`], [`Control`] is `AsFd`), so
//! an event-driven server sleeps on its completions, the device's events and its peers'
//! rebuild requests at once; with the `tokio` feature, `Connection::into_async` gives an
//! `AsyncConnection` whose `next_control().await` wakes for the peer's next message.
//!
//! Only [`mlx5_hw::Device`] and [`mlx5_hw::transition`] are used to reach the device, so the
//! same code connects QPs of the software ConnectX and of a ConnectX. The data path is reached
//! through a [`Link`] ([`QpLink`] for this crate's [`mlx5_qp::Qp`] and [`mlx5_qp::Cq`];
//! [`ControlOnly`] for a QP whose data path lives elsewhere).
//!
//! **Recovery on shared CQs and SRQs.** A rebuild drains the QP's completions before its
//! Reset, and takes only that QP's: on a CQ shared with other QPs their CQEs stay in the CQ,
//! in their order, for their owner's next poll ([`mlx5_qp::Cq::poll_own`]), and the QP's SRQ
//! receives come back in [`RebuildReport::drained`] with their WR ids, to be posted to the SRQ
//! again. Every WR of every QP on the CQ completes exactly once. `examples/srq_server.rs`
//! recovers one client's pair this way while the other clients' requests wait in the CQ.
//!
//! A server accepting one client over TCP on an owning QP whose receives come from an SRQ
//! it shares with other QPs on one CQ, and its recovery after an error completion:
//!
//! ```no_run
//! # use mlx5_connect::*;
//! # fn demo(qp: &mut mlx5_ctx::Qp, cq: &mut mlx5_ctx::Cq, srq: &mut mlx5_ctx::Srq,
//! #         mr: &mlx5_ctx::Mr) -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let params = ConnectParams::default();
//! let listener = std::net::TcpListener::bind("0.0.0.0:18515")?;
//! let mut conn = accept_qp(&listener, qp, &params, |_| Ok(()))?;
//! // ... traffic; on an error completion `wc` of this QP (or a
//! // `ControlEvent::RebuildRequested` from `conn.poll_control()`):
//! # let wc = mlx5_qp::Wc::default();
//! let report = conn.recover(Recover::new(qp, cq).srq(srq), wc.status())?;
//! println!("rebuilt (generation {}), first error: {:?}", report.generation, report.first_error());
//! for w in report.drained.iter().filter(|w| w.opcode().is_recv()) {
//!     srq.post_recv(w.wr_id(), &[mr.sge(w.wr_id() as usize * 64, 64)?])?; // back to the pool
//! }
//! # Ok(()) }
//! ```
//!
//! The same on a QP named by its device handle, through a [`Link`]:
//!
//! ```no_run
//! # use mlx5_connect::*;
//! # fn demo(dev: &dyn mlx5_hw::Device, qp: QpRef, link: &mut dyn Link) -> Result<()> {
//! let params = ConnectParams::default();
//! let listener = std::net::TcpListener::bind("0.0.0.0:18515").map_err(|e| ConnectError::Io {
//!     during: "bind".into(),
//!     source: e,
//! })?;
//! let mut conn = Connection::accept(&listener, dev, qp, link, &params)?;
//! // ... traffic; on an error completion `wc`:
//! # let wc = mlx5_qp::Wc::default();
//! let report = conn.rebuild(dev, link, wc.status())?;
//! println!("rebuilt (generation {}), first error: {:?}", report.generation, report.first_error());
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "tokio")]
mod async_control;
mod control;
pub mod diag;
mod error;
#[cfg(test)]
mod fake;
mod link;
mod owned;
mod params;
mod plan;
mod session;
pub mod wire;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use async_control::AsyncConnection;
pub use control::Control;
pub use error::{ConnectError, Result};
pub use link::{ControlOnly, Link, QpLink};
pub use owned::{
    accept_qp, connect_qp, connect_qps, connect_qps_with, qp_ref, recover_pair, Recover,
};
pub use params::{
    ConnectParams, DEFAULT_HOP_LIMIT, DEFAULT_MIN_RNR_TIMER, DEFAULT_QKEY, DEFAULT_RD_ATOMIC,
    DEFAULT_RETRY_CNT, DEFAULT_RNR_RETRY, DEFAULT_TIMEOUT,
};
pub use plan::{
    init_step, local_endpoint, plan, random_psn, uses_grh, LocalPort, Plan, PORT_UP_WAIT,
};
pub use session::{
    connect_pair, rebuild_pair, Connection, ControlEvent, PairSide, QpRef, RebuildReport, UdPeer,
};
pub use wire::{AbortCode, Endpoint, Message, RemoteBuffer, WireError};
