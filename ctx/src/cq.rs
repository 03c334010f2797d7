//! Completion queues, and waiting for completions with a deadline.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5_hw::{CqId, CqInitAttr};
use mlx5_qp::{Resolve, Wc};

use crate::context::Context;
use crate::datapath;
use crate::error::{Error, Result};

/// How to create a CQ: the device attributes ([`CqInitAttr`]: size, CQE size, overrun).
#[derive(Clone, Copy, Debug, Default)]
pub struct CqInit {
    /// The creation attributes.
    pub attr: CqInitAttr,
}

/// The device object, shared by the [`Cq`] and every QP that reports to it.
pub(crate) struct CqObj {
    pub(crate) ctx: Context,
    pub(crate) id: CqId,
}

impl Drop for CqObj {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.device().destroy_cq(self.id) {
            tracing::warn!(target: "mlx5_ctx", cq = self.id.0, error = %e, "destroy_cq failed");
        }
    }
}

/// A completion queue: the data-path consumer ([`mlx5_qp::Cq`], reached through `Deref`) and
/// the device CQ, destroyed when this and every QP reporting to it are gone.
pub struct Cq {
    // Declared first: the consumer is dropped before the device object (see `datapath`).
    dp: mlx5_qp::Cq,
    obj: Arc<CqObj>,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq")
            .field("device", &self.obj.ctx.name())
            .field("cqn", &self.dp.cqn())
            .finish()
    }
}

impl Deref for Cq {
    type Target = mlx5_qp::Cq;
    fn deref(&self) -> &mlx5_qp::Cq {
        &self.dp
    }
}

impl DerefMut for Cq {
    fn deref_mut(&mut self) -> &mut mlx5_qp::Cq {
        &mut self.dp
    }
}

impl Cq {
    pub(crate) fn new(ctx: &Context, init: &CqInit) -> Result<Cq> {
        Self::adopt(ctx, ctx.device().create_cq(&init.attr)?)
    }

    /// Own a CQ the device just created (also `Context::create_cq_with_timestamps`).
    pub(crate) fn adopt(ctx: &Context, info: mlx5_hw::CqInfo) -> Result<Cq> {
        let obj = Arc::new(CqObj {
            ctx: ctx.clone(),
            id: info.id,
        });
        // On failure `obj` is dropped here and destroys the CQ.
        let dp = datapath::cq(&info.layout)?;
        Ok(Cq { dp, obj })
    }

    pub(crate) fn obj(&self) -> &Arc<CqObj> {
        &self.obj
    }

    /// The device handle.
    pub fn id(&self) -> CqId {
        self.obj.id
    }

    /// The context this CQ belongs to.
    pub fn context(&self) -> &Context {
        &self.obj.ctx
    }

    /// Poll completions of the QPs (and SRQs) in `table` until `done` accepts one, or until
    /// `timeout`; returns every completion polled, in order (the accepted one last), so nothing
    /// is lost. Steps a deterministic software ConnectX ([`Context::progress`]) while waiting.
    pub fn poll_until<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        timeout: Duration,
        done: impl FnMut(&Wc) -> bool,
    ) -> Result<Vec<Wc>> {
        self.poll_loop(table, timeout, 16, done)
    }

    fn poll_loop<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        timeout: Duration,
        batch: usize,
        mut done: impl FnMut(&Wc) -> bool,
    ) -> Result<Vec<Wc>> {
        let start = Instant::now();
        let mut got = Vec::new();
        let mut wcs = [Wc::default(); 16];
        let batch = batch.clamp(1, wcs.len());
        loop {
            self.obj.ctx.progress();
            let n = self.dp.poll(table, &mut wcs[..batch])?;
            for (i, wc) in wcs[..n].iter().enumerate() {
                got.push(*wc);
                if done(wc) {
                    // Completions after the accepted one were polled too: keep them.
                    got.extend_from_slice(&wcs[i + 1..n]);
                    return Ok(got);
                }
            }
            if n == 0 {
                if start.elapsed() >= timeout {
                    return Err(Error::Timeout {
                        what: format!("a completion on CQ {:#x}", self.dp.cqn()),
                        waited: start.elapsed(),
                        detail: format!(
                            "{} completion(s) polled meanwhile; {}",
                            got.len(),
                            self.obj.ctx.stall_hint()
                        ),
                    });
                }
                std::thread::yield_now();
            }
        }
    }

    /// Wait up to `timeout` for the completion of WR `wr_id` of a QP in `table`, and return it
    /// if it succeeded. A failed completion is [`Error::Failed`]; a completion of another WR
    /// arriving first is [`Error::Unexpected`] (carrying every completion polled, so none is
    /// lost): for several outstanding WRs use [`Cq::poll_until`].
    pub fn wait_for<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wr_id: u64,
        timeout: Duration,
    ) -> Result<Wc> {
        // One completion per poll: nothing beyond the first is taken from the CQ.
        let got = self.poll_loop(table, timeout, 1, |_| true)?;
        match got.as_slice() {
            [wc] if wc.wr_id == wr_id && wc.is_ok() => Ok(*wc),
            [wc] if wc.wr_id == wr_id => Err(Error::Failed { wc: *wc }),
            _ => Err(Error::Unexpected {
                wr_id,
                completions: got,
            }),
        }
    }
}
