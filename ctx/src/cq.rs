//! Completion queues, and waiting for completions with a deadline: by polling, or asleep on
//! a completion channel ([`crate::channel`]).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5_hw::{CqId, CqInitAttr};
use mlx5_qp::{DcTargets, DestroyedQps, Resolve, Wc};

use std::os::fd::AsRawFd;

use mlx5_hw::device::wait_any_readable;

use crate::channel::CompChannel;
use crate::context::Context;
use crate::datapath;
use crate::dead::Unretired;
use crate::error::{Error, Result};
use crate::wait::{stall_detail, Idle};

/// How to create a CQ: the device attributes ([`CqInitAttr`]: size, CQE size, overrun).
#[derive(Clone, Copy, Debug, Default)]
#[must_use = "a builder does nothing until it is passed on"]
pub struct CqInit {
    /// The creation attributes.
    pub attr: CqInitAttr,
}

/// The device object, shared by the [`Cq`] and every QP that reports to it.
pub(crate) struct CqObj {
    pub(crate) ctx: Context,
    pub(crate) id: CqId,
    /// The channel the CQ reports to and its count of events taken from it. Released after
    /// the device CQ is destroyed (fields drop after `Drop::drop`), so the channel outlives it.
    chan: Option<(CompChannel, Arc<AtomicU32>)>,
    /// The QPs destroyed while they completed here, whose CQEs still queued the data path
    /// settles when its poll meets them (what rdma-core's `mlx5_destroy_qp` cleans from the CQ,
    /// `mlx5_qp::DestroyedQps`): each QP records itself on its CQs when it is destroyed
    /// ([`CqObj::qp_destroyed`]) and is forgotten when a new QP takes its number.
    pub(crate) destroyed: Arc<DestroyedQps>,
    /// The DC targets whose receives complete here: their CQEs name no QP a table holds
    /// (`mlx5_qp::DcTargets`); each adds itself when created and leaves when destroyed.
    pub(crate) dc_targets: Arc<DcTargets>,
}

impl CqObj {
    /// QP `qpn` (receiving through SRQ `srqn`) reported here and was destroyed.
    pub(crate) fn qp_destroyed(&self, qpn: u32, srqn: Option<u32>) {
        self.destroyed.record(qpn, srqn);
    }

    /// QP `qpn` reports here from now on: its number is a live QP's.
    pub(crate) fn qp_created(&self, qpn: u32) {
        self.destroyed.forget(qpn);
    }

    /// DC target `dctn`, receiving through SRQ `srqn`, completes here from now on.
    pub(crate) fn dct_created(&self, dctn: u32, srqn: u32) {
        self.destroyed.forget(dctn);
        self.dc_targets.add(dctn, srqn);
    }

    /// DC target `dctn` (receiving through SRQ `srqn`) completed here and was destroyed: its
    /// receives still queued complete on the SRQ all the same.
    pub(crate) fn dct_destroyed(&self, dctn: u32, srqn: u32) {
        self.dc_targets.remove(dctn);
        self.destroyed.record(dctn, Some(srqn));
    }
}

impl Drop for CqObj {
    fn drop(&mut self) {
        let dev = self.ctx.device();
        // On a channel: the events taken are acknowledged first (verbs refuses to destroy a CQ
        // with unacknowledged events), under the lock that taking an event holds.
        let r = match &self.chan {
            Some((ch, _)) => ch.detach_and_destroy(self.id, || dev.destroy_cq(self.id)),
            None => dev.destroy_cq(self.id).map_err(Into::into),
        };
        if let Err(e) = r {
            tracing::warn!(target: "mlx5_ctx", cq = self.id.0, error = %e, "destroy_cq failed");
        }
        self.ctx.forget_cq(self.id);
    }
}

/// How often a wait that finds no completion asks whether the device reported the CQ in
/// error, and the longest it sleeps on a completion channel between two such looks (a CQ
/// error fires no completion event).
const ERROR_CHECK: Duration = Duration::from_millis(10);

/// A completion queue: the data-path consumer ([`mlx5_qp::Cq`], reached through `Deref`) and
/// the device CQ, destroyed when this and every QP reporting to it are gone.
pub struct Cq {
    // Declared first: the consumer is dropped before the device object (see `datapath`).
    dp: mlx5_qp::Cq,
    obj: Arc<CqObj>,
    /// Events taken from the channel that the data path's arm sequence number accounts for.
    sn_applied: u32,
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
    pub(crate) fn new(ctx: &Context, init: &CqInit, channel: Option<&CompChannel>) -> Result<Cq> {
        if init.attr.channel.is_some() {
            return Err(Error::Events(
                "CqInit::attr.channel names a device channel directly: create the CQ on a \
                 CompChannel with Context::create_cq_on, which keeps the channel alive and \
                 accounts for its events"
                    .into(),
            ));
        }
        if let Some(ch) = channel {
            ctx.check_same(ch.context(), "the completion channel")?;
        }
        let attr = CqInitAttr {
            channel: channel.map(CompChannel::id),
            ..init.attr
        };
        let info = ctx.device().create_cq(&attr)?;
        Self::adopt(ctx, info, channel)
    }

    /// Own a CQ the device just created on `channel` (also
    /// `Context::create_cq_with_timestamps`).
    pub(crate) fn adopt(
        ctx: &Context,
        info: mlx5_hw::CqInfo,
        channel: Option<&CompChannel>,
    ) -> Result<Cq> {
        let obj = Arc::new(CqObj {
            ctx: ctx.clone(),
            id: info.id,
            chan: channel.map(|ch| (ch.clone(), ch.attach(info.id))),
            destroyed: Arc::new(DestroyedQps::new()),
            dc_targets: Arc::new(DcTargets::new()),
        });
        // On failure `obj` is dropped here and destroys the CQ.
        let mut dp = datapath::cq(&info.layout)?;
        dp.track_destroyed(obj.destroyed.clone());
        dp.track_dc_targets(obj.dc_targets.clone());
        Ok(Cq {
            dp,
            obj,
            sn_applied: 0,
        })
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

    /// Whether the device reported this CQ in error (`IBV_EVENT_CQ_ERR`: it overran, and
    /// takes no completion any more). A CQ error has no CQE and fires no completion event: a
    /// device reports it only among its asynchronous events, on a ConnectX as on the software
    /// ConnectX. This reads them while no [`crate::AsyncEvents`] does (keeping them for it)
    /// and otherwise relies on its reads, so it costs a system call on a ConnectX: the waits
    /// below ask at most every 10 ms, and the data path's own poll ([`mlx5_qp::Cq::poll`],
    /// through `Deref`) never does.
    pub fn in_error(&self) -> bool {
        self.obj.ctx.cq_in_error(self.obj.id)
    }

    fn error(&self, completions: Vec<Wc>) -> Error {
        Error::CqError {
            cqn: self.dp.cqn(),
            completions,
        }
    }

    /// The completion channel the CQ reports its events to, if any.
    pub fn channel(&self) -> Option<&CompChannel> {
        self.obj.chan.as_ref().map(|(c, _)| c)
    }

    /// The CQ's channel when the CQ may take its events itself: no other CQ on it and no
    /// `AsyncChannel` serving it ([`crate::channel`], one consumer per channel).
    pub(crate) fn own_channel(&self) -> Option<CompChannel> {
        self.channel()
            .filter(|ch| ch.cq_count() == 1 && !ch.inner.served.load(Ordering::Acquire))
            .cloned()
    }

    /// Request a completion event on the CQ's channel for the next completion
    /// (`solicited_only = false`) or the next solicited or error completion
    /// (`ibv_req_notify_cq`). First brings the data path's arm sequence number up to the
    /// events taken from the channel for this CQ ([`crate::channel`]: one advance per event,
    /// rdma-core `mlx5_cq_event`), then writes the arm doorbell
    /// ([`mlx5_qp::Cq::arm`]). An arm with completions already past the consumer index fires
    /// at once. Without a channel the event reaches nobody (as the kernel drops it).
    pub fn arm(&mut self, solicited_only: bool) {
        if let Some((_, taken)) = &self.obj.chan {
            let t = taken.load(Ordering::Acquire);
            // The sequence number is 2 bits: only the count modulo 4 matters.
            for _ in 0..(t.wrapping_sub(self.sn_applied) & 3) {
                self.dp.ack_event();
            }
            self.sn_applied = t;
        }
        self.dp.arm(solicited_only);
    }

    /// Once the device reported a fatal error ([`Context::is_fatal`]): up to `wcs.len()`
    /// completions of this CQ, first what the device wrote before it died, then, once the ring
    /// is dry, one `IBV_WC_WR_FLUSH_ERR` completion for each WR still outstanding on the QPs
    /// `table` lists ([`Resolve::for_each_qp`]: every table of `mlx5-qp` and of this crate
    /// lists its QPs) (the send WRs on their send CQ, the receives on their receive CQ), each WR
    /// exactly once; returns how many were written, and what could not be retired (yet).
    /// Call it again while it fills `wcs`; 0 means everything this CQ will ever report was
    /// handed out.
    ///
    /// A ConnectX in internal error writes no CQE, not even flush CQEs, and libmlx5 makes
    /// none for user QPs; the kernel makes them in software for its own QPs only (`mlx5_ib_poll_cq`
    /// -> `mlx5_ib_poll_sw_comp`): this is that, for the QPs of this crate (`ctx/src/dead.rs`
    /// has the rules and their sources). Every QP of `table` is moved to Error in the data
    /// path; a WR posted after this (accepted, as verbs accepts posts on a QP in Error) is
    /// retired by the next call. A QP that also reports to another CQ is retired once that CQ
    /// was flushed too ([`Unretired::waiting_for_cq`]); the receives still posted to an SRQ of
    /// `table` are flushed on this CQ once every QP of `table` is retired
    /// ([`Unretired::srq_outstanding`] until then). The waiting helpers ([`Cq::poll_until`],
    /// [`Cq::wait_for`], [`Cq::poll_blocking`], the `tokio` feature's `AsyncChannel`) call
    /// it themselves when they find the device dead. On a live device: [`Error::Alive`].
    pub fn flush_dead<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> Result<(usize, Unretired)> {
        if !self.obj.ctx.is_fatal() {
            return Err(Error::Alive {
                device: self.obj.ctx.name().to_string(),
            });
        }
        self.dead_poll(table, wcs)
    }

    /// [`Cq::flush_dead`] on a device known dead.
    pub(crate) fn dead_poll<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> Result<(usize, Unretired)> {
        let dead = &self.obj.ctx.inner.dead;
        // What retired before and waits for this CQ comes first: it was retired after the
        // ring was found dry, which it stays.
        let mut n = dead.take(self.obj.id, wcs);
        // The ring, dry: the device writes nothing more once it reported its death.
        while n < wcs.len() {
            let k = self.dp.poll(table, &mut wcs[n..])?;
            if k == 0 {
                break;
            }
            n += k;
        }
        if n == wcs.len() {
            return Ok((n, Unretired::default()));
        }
        let left = dead.retire(self.obj.id, table);
        n += dead.take(self.obj.id, &mut wcs[n..]);
        Ok((n, left))
    }

    /// Poll up to `wcs.len()` completions, sleeping on the CQ's completion channel while there
    /// are none, until `timeout`; returns how many were written (0 when `timeout` passed with
    /// none). First polls `busy_polls` more times before sleeping (latency: a completion
    /// that comes within those polls costs no arm, no event and no system call), then the
    /// race-free wait: arm, poll again, sleep on the fd, take the event, poll.
    ///
    /// The CQ must be alone on its channel: taking the channel's events here would swallow
    /// those another CQ's consumer waits for ([`crate::channel`], one consumer per channel);
    /// serve a shared channel from one place with [`CompChannel::get_event`] (or the
    /// `tokio` feature's `AsyncChannel`). Steps a deterministic software ConnectX while
    /// waiting. A device that reports a fatal error ends the sleep at once ([`crate::events`]):
    /// the wait returns what the device wrote before it died and the flushes of the WRs it
    /// left ([`Cq::flush_dead`]), and once there are none [`Error::DeviceFatal`]. A CQ in
    /// error fires no completion event:
    /// before each sleep (of at most 10 ms) it asks [`Cq::in_error`], and a CQ in error is
    /// [`Error::CqError`].
    pub fn poll_blocking<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        busy_polls: u32,
        timeout: Duration,
    ) -> Result<usize> {
        let ch = match &self.obj.chan {
            Some((ch, _)) => ch.clone(),
            None => {
                return Err(Error::Events(format!(
                    "CQ {:#x} has no completion channel to sleep on: create it with \
                     Context::create_cq_on, or poll it (Cq::poll_until)",
                    self.dp.cqn()
                )))
            }
        };
        if ch.cq_count() > 1 {
            return Err(Error::Events(format!(
                "CQ {:#x} shares its completion channel with {} other CQ(s): a blocking wait \
                 for one of them would take the events the others wait for; take the \
                 channel's events in one place (CompChannel::get_event, or AsyncChannel)",
                self.dp.cqn(),
                ch.cq_count() - 1
            )));
        }
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        loop {
            self.obj.ctx.progress();
            let n = self.dp.poll(table, wcs)?;
            if n > 0 || wcs.is_empty() {
                return Ok(n);
            }
            if spins < busy_polls {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            // Poll (above), arm, poll again: a CQE that landed in between is found here, and
            // the arm fires at once for it anyway (ConnectX PRM "CQ arming").
            self.arm(false);
            let n = self.dp.poll(table, wcs)?;
            if n > 0 {
                return Ok(n);
            }
            // A CQ in error fires no event: look before sleeping, and sleep in slices.
            if self.in_error() {
                return Err(self.error(Vec::new()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // Any event ends the sleep; a stale one (from an arm whose completion was polled
            // before its event was taken) only costs another round; the sleep is sliced, since
            // a CQ error wakes nothing here while an `AsyncEvents` takes the events. A dead
            // device ends it too
            // (`crate::events`), with an error rather than at the deadline, once what the
            // device left and the flushes of what it did not are handed out.
            if self.obj.ctx.is_fatal() {
                let (n, left) = self.dead_poll(table, wcs)?;
                if n > 0 || wcs.is_empty() {
                    return Ok(n);
                }
                return Err(self.obj.ctx.fatal_error(Vec::new(), left));
            }
            let mut fds = self.obj.ctx.wake_fds();
            fds.push(ch.as_raw_fd());
            let woke = wait_any_readable(&fds, left.min(ERROR_CHECK))?;
            if woke.contains(&(fds.len() - 1)) {
                while ch.get_event()?.is_some() {}
            } else if left.is_zero() {
                self.obj.ctx.progress();
                return self.dp.poll(table, wcs).map_err(Into::into);
            }
        }
    }

    /// Poll completions of the QPs (and SRQs) in `table` until `done` accepts one, or until
    /// `timeout`; returns every completion polled, in order, the accepted one last: nothing is
    /// lost, and nothing beyond the accepted completion is taken from the CQ — the completions
    /// after it stay there for the next poll (this polls one completion per call to
    /// [`mlx5_qp::Cq::poll`]). Steps a deterministic software ConnectX ([`Context::progress`])
    /// while waiting.
    ///
    /// Between polls that find nothing it sleeps rather than spins: on the CQ's completion
    /// channel when the CQ has one of its own, else with a bounded backoff ([`crate::wait`]).
    /// A device that reports a fatal error ends the sleep at once: the wait goes on with what
    /// the device wrote before it died and the flushes of every WR it left ([`Cq::flush_dead`]:
    /// `WR_FLUSH_ERR`, each WR once), which `done` sees like any completion, and ends with
    /// [`Error::DeviceFatal`] (carrying every completion polled) when none is left; a timeout
    /// says what each QP of `table` had
    /// outstanding. A CQ the device put in error ([`Cq::in_error`]: it overran) ends the wait
    /// with [`Error::CqError`] once its ring is empty, carrying the completions polled before.
    pub fn poll_until<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        timeout: Duration,
        done: impl FnMut(&Wc) -> bool,
    ) -> Result<Vec<Wc>> {
        // One completion per poll: the accepted one ends the wait, and what follows it stays
        // in the CQ (a batch would have taken it too).
        self.poll_loop(table, timeout, 1, done)
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
        let mut idle = Idle::new();
        let mut next_check = start;
        // Set once the device is found dead: from then on the flushes (`Cq::flush_dead`).
        let mut dead = false;
        loop {
            self.obj.ctx.progress();
            let n = if dead {
                let (n, left) = self.dead_poll(table, &mut wcs[..batch])?;
                if n == 0 {
                    return Err(self.obj.ctx.fatal_error(got, left));
                }
                n
            } else {
                self.dp.poll(table, &mut wcs[..batch])?
            };
            for (i, wc) in wcs[..n].iter().enumerate() {
                got.push(*wc);
                if done(wc) {
                    // Completions after the accepted one were polled too: keep them.
                    got.extend_from_slice(&wcs[i + 1..n]);
                    return Ok(got);
                }
            }
            if n == 0 {
                // Nothing left in the ring: a CQ in error will never have more.
                let now = Instant::now();
                if now >= next_check {
                    next_check = now + ERROR_CHECK;
                    if self.in_error() {
                        return Err(self.error(got));
                    }
                }
                if start.elapsed() >= timeout {
                    return Err(Error::Timeout {
                        what: format!("a completion on CQ {:#x}", self.dp.cqn()),
                        waited: start.elapsed(),
                        detail: format!(
                            "{} completion(s) polled meanwhile; {}",
                            got.len(),
                            stall_detail(table, &self.obj.ctx)
                        ),
                    });
                }
                match idle.pause(self, start + timeout, &got) {
                    // The device died: what it left, then the flushes.
                    Err(Error::DeviceFatal { .. }) => dead = true,
                    r => r?,
                }
            }
        }
    }

    /// Wait up to `timeout` for the completion of WR `wr_id` of a QP in `table`, and return it
    /// if it succeeded. A failed completion is [`Error::Failed`]; a completion of another WR
    /// arriving first is [`Error::Unexpected`] (carrying every completion polled, so none is
    /// lost): for several outstanding WRs use [`Cq::poll_until`]. A CQ in error is
    /// [`Error::CqError`].
    pub fn wait_for<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wr_id: u64,
        timeout: Duration,
    ) -> Result<Wc> {
        // One completion per poll: nothing beyond the first is taken from the CQ.
        let got = self.poll_loop(table, timeout, 1, |_| true)?;
        match got.as_slice() {
            [wc] if wc.wr_id() == wr_id && wc.is_ok() => Ok(*wc),
            [wc] if wc.wr_id() == wr_id => Err(Error::Failed { wc: *wc }),
            _ => Err(Error::Unexpected {
                wr_id,
                completions: got,
            }),
        }
    }
}
