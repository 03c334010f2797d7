//! tokio (feature `tokio`): completions and asynchronous events awaited on tokio's `AsyncFd`
//! over the completion channel's and the device's file descriptors.
//!
//! - [`AsyncChannel`]: the one consumer of a [`CompChannel`] — every CQ added to it is served
//!   by the one task that owns it; [`AsyncChannel::next`] yields the next completion of any of
//!   them, with the index the CQ was added under.
//! - [`AsyncCq`]: the same for a CQ alone on its channel.
//! - [`AsyncEventStream`]: the device's asynchronous events ([`AsyncEvents::into_async`]).
//! - [`AsyncReadable`]: any other descriptor the task waits on too (a connection's control
//!   socket), so one task sleeps on completions, events and its peers' messages at once.
//!
//! ## The wait
//!
//! [`AsyncChannel::next`] hands out completions it has already taken, else polls every CQ;
//! finding none, it polls again up to [`AsyncChannel::set_busy_polls`] times (a completion
//! that comes within those polls costs no arm, no event and no system call: the latency
//! setting), then runs the race-free protocol of [`crate::channel`]: arm every CQ not armed
//! yet, poll again, and only if that found nothing await the channel's fd; on readiness take
//! every event queued (each counted for its CQ's next arm and acknowledged in batches), note
//! those CQs disarmed, clear the readiness, and poll again. A CQ stays armed until its event is
//! taken, so no CQ is armed twice for one event and none is left unarmed while the task sleeps.
//!
//! The sleep also watches the context's wake-up descriptors: a device that reports
//! `IBV_EVENT_DEVICE_FATAL` ends every sleep at once: the flushes of what the device left
//! (`Cq::flush_dead`) are handed out, then every wait ends with [`Error::DeviceFatal`]
//! ([`crate::events`]).
//!
//! ## Cancellation
//!
//! Dropping a `next` future loses nothing. Completions are taken from a CQ only in a
//! synchronous stretch of code that moves them into the `AsyncChannel`'s own queue before the
//! next `.await`, events only in one that records them in it; the one `.await` — readiness of
//! the fd — takes nothing. So a future dropped at any point leaves every completion either
//! in its CQ or in the queue, where the next call finds it (`ctx/tests/it/async_cq.rs` drops
//! futures at random points and counts every completion exactly once).
//!
//! ## Runtime
//!
//! Create these inside a tokio runtime with I/O enabled (`enable_io`); a current-thread
//! runtime is enough. The device must move by itself: a software ConnectX on a threaded
//! fabric ([`Context::sim_pair`](crate::Context::sim_pair)) or a ConnectX; a deterministic one
//! is refused, since nothing would step it while the task sleeps.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::task::Poll;

use mlx5_hw::{AsyncEvent, CqId};
use mlx5_qp::{Resolve, Wc};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::channel::CompChannel;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::events::AsyncEvents;

/// The completions polled from one CQ in one go.
const POLL_BATCH: usize = 16;

/// The channel as the reactor sees it: its fd. Holds the channel (so the fd stays open while
/// registered) and gives it back to other consumers when the registration ends.
struct ChannelFd(CompChannel);

impl AsRawFd for ChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Drop for ChannelFd {
    fn drop(&mut self) {
        // `AsyncFd` drops its inner value after deregistering the fd.
        self.0.inner.served.store(false, Ordering::Release);
    }
}

/// A CQ served by an [`AsyncChannel`].
struct Slot {
    cq: Cq,
    /// Armed, and its event not taken yet.
    armed: bool,
    /// Arm for the next solicited or error completion only.
    solicited_only: bool,
}

/// The one consumer of a completion channel: the CQs on it, served by the task that owns this
/// (module docs). Completions come out of [`AsyncChannel::next`] with the index
/// [`AsyncChannel::add`] gave their CQ.
pub struct AsyncChannel {
    // Declared first: deregistered from the reactor before the CQs and the channel go.
    fd: AsyncFd<ChannelFd>,
    /// Copies of the context's wake-up descriptors ([`crate::events`]): readable when the
    /// device may have died, so a sleeping task wakes and fails rather than sleep for good.
    wake: Vec<AsyncFd<OwnedFd>>,
    cqs: Vec<Option<Slot>>,
    /// Completions taken from the CQs and not yet handed out, oldest first.
    ready: VecDeque<(usize, Wc)>,
    busy_polls: u32,
    /// The CQ polled first in the next round (round robin).
    first: usize,
}

impl fmt::Debug for AsyncChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncChannel")
            .field("channel", &self.fd.get_ref().0)
            .field("cqs", &self.cqs.iter().flatten().count())
            .field("ready", &self.ready.len())
            .field("busy_polls", &self.busy_polls)
            .finish()
    }
}

/// Register `inner`'s fd with the current runtime's reactor, refusing with a clear error where
/// tokio would panic (no runtime on this thread, or one without I/O).
fn register<T: AsRawFd>(inner: T, what: &'static str) -> Result<AsyncFd<T>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::Events(format!(
            "{what} must be created inside a tokio runtime (with I/O enabled): none is \
             running on this thread"
        )));
    }
    // tokio panics instead of failing when the runtime has no I/O driver; the panic is caught
    // here (the value registered is dropped with it) and becomes an error.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `inner` is a `ChannelFd`, an `AsyncEvents` or an `OwnedFd`: its fd is the
        // device's channel fd or async event fd, open for as long as `inner` lives (the
        // channel is destroyed, and the device closed, only when the handle `inner` holds is
        // dropped, which `AsyncFd` does after deregistering), or a descriptor `inner` owns
        // and closes when dropped; `as_raw_fd` returns that same fd every time.
        unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }
    }));
    match r {
        Ok(Ok(fd)) => Ok(fd),
        Ok(Err(e)) => Err(Error::Io {
            what: "register the event fd with the tokio reactor",
            source: e.into(),
        }),
        Err(_) => Err(Error::Events(format!(
            "{what} needs a tokio runtime with I/O enabled (Builder::enable_io or enable_all)"
        ))),
    }
}

impl AsyncChannel {
    /// Serve `channel` from the current task's runtime. Refused when another `AsyncChannel`
    /// serves it already (one consumer per channel), outside a runtime, or on a device that
    /// moves only when stepped.
    pub fn new(channel: &CompChannel) -> Result<AsyncChannel> {
        let ctx = channel.context();
        if ctx.is_stepped() {
            return Err(Error::Events(format!(
                "{} is a software ConnectX on a deterministic fabric: it moves only when \
                 stepped, and nothing steps it while a task sleeps; use a threaded one \
                 (Context::sim, Context::sim_pair, SimFabric::threaded)",
                ctx.name()
            )));
        }
        if channel.inner.served.swap(true, Ordering::AcqRel) {
            return Err(Error::Events(format!(
                "completion channel {:#x} is already served by an AsyncChannel: one consumer \
                 per channel (two would take each other's events)",
                channel.id().0
            )));
        }
        // On failure the `ChannelFd` is dropped, which gives the channel back.
        let fd = register(ChannelFd(channel.clone()), "an AsyncChannel")?;
        let wake = ctx
            .wake_fds_owned()
            .into_iter()
            .map(|w| register(w, "an AsyncChannel"))
            .collect::<Result<Vec<_>>>()?;
        Ok(AsyncChannel {
            fd,
            wake,
            cqs: Vec::new(),
            ready: VecDeque::new(),
            busy_polls: 0,
            first: 0,
        })
    }

    /// The channel served.
    pub fn channel(&self) -> &CompChannel {
        &self.fd.get_ref().0
    }

    /// Poll this many more times after an empty poll before arming and sleeping (0, the
    /// default: arm at once). Each extra poll reads one CQE slot per CQ; a completion arriving
    /// within them is returned without an event or a system call.
    pub fn set_busy_polls(&mut self, n: u32) {
        self.busy_polls = n;
    }

    /// The busy-poll budget ([`AsyncChannel::set_busy_polls`]).
    pub fn busy_polls(&self) -> u32 {
        self.busy_polls
    }

    /// Serve `cq` (created on this channel, [`Context::create_cq_on`](crate::Context::create_cq_on)),
    /// armed for every completion; returns the index its completions come with. A CQ of
    /// another channel, or of none, is refused (and dropped).
    pub fn add(&mut self, cq: Cq) -> Result<usize> {
        self.add_with(cq, false)
    }

    /// [`AsyncChannel::add`], arming `cq` for solicited and error completions only: the task
    /// sleeps through unsolicited ones, which are returned with the next solicited one (or
    /// when another CQ wakes the task).
    pub fn add_solicited(&mut self, cq: Cq) -> Result<usize> {
        self.add_with(cq, true)
    }

    fn add_with(&mut self, cq: Cq, solicited_only: bool) -> Result<usize> {
        if !cq.channel().is_some_and(|c| c.same_channel(self.channel())) {
            return Err(Error::Events(format!(
                "CQ {:#x} does not report to completion channel {:#x}: create it with \
                 Context::create_cq_on(cqe, &channel)",
                cq.cqn(),
                self.channel().id().0
            )));
        }
        let slot = Slot {
            cq,
            // Its arm state is not known: arming again is harmless (repeated arms merge).
            armed: false,
            solicited_only,
        };
        match self.cqs.iter().position(Option::is_none) {
            Some(i) => {
                self.cqs[i] = Some(slot);
                Ok(i)
            }
            None => {
                self.cqs.push(Some(slot));
                Ok(self.cqs.len() - 1)
            }
        }
    }

    /// The CQ added under `index`.
    pub fn cq(&mut self, index: usize) -> Option<&mut Cq> {
        self.cqs.get_mut(index)?.as_mut().map(|s| &mut s.cq)
    }

    /// Stop serving the CQ under `index`: it comes back with the completions already taken
    /// from it and not yet handed out (in order). Its index may be reused by the next `add`.
    pub fn remove(&mut self, index: usize) -> Option<(Cq, Vec<Wc>)> {
        let slot = self.cqs.get_mut(index)?.take()?;
        let mut taken = Vec::new();
        self.ready.retain(|&(i, wc)| {
            if i == index {
                taken.push(wc);
            }
            i != index
        });
        Some((slot.cq, taken))
    }

    /// Completions taken from the CQs and not yet handed out.
    pub fn pending(&self) -> usize {
        self.ready.len()
    }

    /// Arm every CQ again before the next sleep, even those armed and not fired yet (normally
    /// each CQ is armed once per event: repeated arms merge on the device, so this only costs
    /// a doorbell per CQ). For a program that bounds its waits and suspects a wake-up the
    /// device never sent.
    pub fn rearm(&mut self) {
        for slot in self.cqs.iter_mut().flatten() {
            slot.armed = false;
        }
    }

    /// Poll every CQ once (round robin) into the queue; how many completions were added. Of
    /// completions and errors, nothing is lost: what earlier CQs gave stays queued when a
    /// later one fails.
    fn poll_all<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<usize> {
        self.channel().context().progress();
        let n_slots = self.cqs.len();
        if n_slots == 0 {
            return Ok(0);
        }
        let first = self.first % n_slots;
        self.first = first + 1;
        let mut wcs = [Wc::default(); POLL_BATCH];
        let mut total = 0;
        for k in 0..n_slots {
            let i = (first + k) % n_slots;
            let Some(slot) = &mut self.cqs[i] else {
                continue;
            };
            let n = slot.cq.poll(table, &mut wcs)?;
            self.ready.extend(wcs[..n].iter().map(|wc| (i, *wc)));
            total += n;
        }
        Ok(total)
    }

    /// Hand out the oldest completion taken, else poll once; never waits.
    pub fn try_next<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<Option<(usize, Wc)>> {
        if self.ready.is_empty() {
            self.poll_all(table)?;
        }
        Ok(self.ready.pop_front())
    }

    /// The next completion of any CQ served, with its CQ's index, waiting for one (module
    /// docs: busy polls, then arm, poll, sleep). Cancellation-safe: a dropped future loses no
    /// completion.
    pub async fn next<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<(usize, Wc)> {
        self.wait(table).await?;
        // `wait` returns only with something queued.
        self.ready
            .pop_front()
            .ok_or_else(|| Error::Events("AsyncChannel: woke with nothing queued".into()))
    }

    /// Wait like [`AsyncChannel::next`], then move every completion taken (at least one, at
    /// most `max`) to the end of `out`; returns how many. Cancellation-safe.
    pub async fn next_batch<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        out: &mut Vec<(usize, Wc)>,
        max: usize,
    ) -> Result<usize> {
        self.wait(table).await?;
        let n = self.ready.len().min(max.max(1));
        out.extend(self.ready.drain(..n));
        Ok(n)
    }

    /// The device is dead: queue the flushes of every CQ served (`Cq::flush_dead`); `Ok` if
    /// any, else [`Error::DeviceFatal`].
    fn flush_dead<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<()> {
        let mut wcs = [Wc::default(); POLL_BATCH];
        let mut left = crate::Unretired::default();
        // Twice: a QP whose two CQs are both served is retired by the second one's flush,
        // which queues the first one's share for it.
        for _ in 0..2 {
            left = crate::Unretired::default();
            for (i, slot) in self.cqs.iter_mut().enumerate() {
                let Some(slot) = slot else { continue };
                loop {
                    let (n, l) = slot.cq.dead_poll(table, &mut wcs)?;
                    self.ready.extend(wcs[..n].iter().map(|wc| (i, *wc)));
                    if n < wcs.len() {
                        left.waiting_for_cq.extend(l.waiting_for_cq);
                        left.srq_outstanding.extend(l.srq_outstanding);
                        break;
                    }
                }
            }
        }
        if self.ready.is_empty() {
            left.srq_outstanding.sort_unstable();
            left.srq_outstanding.dedup();
            return Err(self.channel().context().fatal_error(Vec::new(), left));
        }
        Ok(())
    }

    /// Return once a completion is queued.
    async fn wait<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<()> {
        if self.cqs.iter().all(Option::is_none) {
            return Err(Error::Events(
                "AsyncChannel::next with no CQ added: nothing could ever complete".into(),
            ));
        }
        let mut idle = 0u32;
        loop {
            if !self.ready.is_empty() || self.poll_all(table)? > 0 {
                return Ok(());
            }
            // A dead device completes nothing more (`crate::events`): its flushes
            // (`Cq::flush_dead`), then the error.
            if self.channel().context().is_fatal() {
                return self.flush_dead(table);
            }
            if idle < self.busy_polls {
                idle += 1;
                std::hint::spin_loop();
                continue;
            }
            // Arm, then poll again: a completion that landed after the empty poll is found
            // here (and the arm fires at once for it anyway, ConnectX PRM "CQ arming").
            for slot in self.cqs.iter_mut().flatten() {
                if !slot.armed {
                    slot.cq.arm(slot.solicited_only);
                    slot.armed = true;
                }
            }
            if self.poll_all(table)? > 0 {
                return Ok(());
            }
            self.sleep().await?;
        }
    }

    /// Await the fd, then take every queued event. The `.await` takes nothing, so dropping the
    /// future there loses nothing; what follows it is synchronous.
    async fn sleep(&mut self) -> Result<()> {
        let AsyncChannel { fd, cqs, wake, .. } = self;
        let (fd, wake) = (&*fd, &*wake);
        // The channel's fd, or a wake-up fd (the device may have died: the caller looks).
        let woke = std::future::poll_fn(move |cx| {
            if let Poll::Ready(r) = fd.poll_read_ready(cx) {
                return Poll::Ready(r.map(Some));
            }
            for w in wake {
                if let Poll::Ready(r) = w.poll_read_ready(cx) {
                    return Poll::Ready(r.map(|mut g| {
                        g.clear_ready();
                        None
                    }));
                }
            }
            Poll::Pending
        })
        .await
        .map_err(|source| Error::Io {
            what: "await the completion channel's fd",
            source,
        })?;
        let Some(mut guard) = woke else {
            // Events the context takes itself while nobody else does (`crate::events`).
            self.channel().context().take_events();
            return Ok(());
        };
        let ch = &guard.get_inner().0;
        while let Some(id) = ch.take_event()? {
            // An event of a CQ not served here (created on the channel, never added) only
            // counts for that CQ's next arm.
            if let Some(slot) = cqs.iter_mut().flatten().find(|s| s.cq.id() == id) {
                slot.armed = false;
            }
        }
        // Drained: the fd is not readable now. An event queued since then makes it readable
        // again, which tokio records as new readiness that this does not clear.
        guard.clear_ready();
        Ok(())
    }
}

/// A CQ alone on its completion channel, awaited: [`AsyncChannel`] with one CQ.
pub struct AsyncCq {
    ch: AsyncChannel,
    id: CqId,
}

impl fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCq")
            .field("channel", &self.ch)
            .finish()
    }
}

impl AsyncCq {
    /// Serve `cq`, which must be alone on its channel
    /// ([`Context::create_cq_on`](crate::Context::create_cq_on) with a channel of its own),
    /// armed for every completion.
    pub fn new(cq: Cq) -> Result<AsyncCq> {
        let Some(channel) = cq.channel().cloned() else {
            return Err(Error::Events(format!(
                "CQ {:#x} has no completion channel: create it with Context::create_cq_on",
                cq.cqn()
            )));
        };
        if channel.cq_count() > 1 {
            return Err(Error::Events(format!(
                "CQ {:#x} shares its completion channel with {} other CQ(s): serve them all \
                 with one AsyncChannel",
                cq.cqn(),
                channel.cq_count() - 1
            )));
        }
        let id = cq.id();
        let mut ch = AsyncChannel::new(&channel)?;
        ch.add(cq)?;
        Ok(AsyncCq { ch, id })
    }

    /// Busy polls before sleeping ([`AsyncChannel::set_busy_polls`]).
    pub fn set_busy_polls(&mut self, n: u32) {
        self.ch.set_busy_polls(n);
    }

    /// The CQ's device handle.
    pub fn id(&self) -> CqId {
        self.id
    }

    /// Completions taken from the CQ and not yet handed out.
    pub fn pending(&self) -> usize {
        self.ch.pending()
    }

    /// Arm the CQ again before the next sleep ([`AsyncChannel::rearm`]).
    pub fn rearm(&mut self) {
        self.ch.rearm();
    }

    /// The oldest completion taken, else one poll; never waits.
    pub fn try_next<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<Option<Wc>> {
        Ok(self.ch.try_next(table)?.map(|(_, wc)| wc))
    }

    /// The next completion, waiting for one. Cancellation-safe.
    pub async fn next<R: Resolve + ?Sized>(&mut self, table: &mut R) -> Result<Wc> {
        Ok(self.ch.next(table).await?.1)
    }

    /// Up to `max` completions (at least one) appended to `out`, waiting for the first.
    /// Cancellation-safe.
    pub async fn next_batch<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        out: &mut Vec<Wc>,
        max: usize,
    ) -> Result<usize> {
        self.ch.wait(table).await?;
        let n = self.ch.ready.len().min(max.max(1));
        out.extend(self.ch.ready.drain(..n).map(|(_, wc)| wc));
        Ok(n)
    }

    /// The CQ back, with the completions taken and not yet handed out.
    pub fn into_inner(mut self) -> Result<(Cq, Vec<Wc>)> {
        // `new` added the CQ at index 0 and only this removes it.
        self.ch
            .remove(0)
            .ok_or_else(|| Error::Events("AsyncCq lost its CQ".into()))
    }
}

impl AsyncEvents {
    /// Await the events on the current tokio runtime (which must have I/O enabled).
    pub fn into_async(self) -> Result<AsyncEventStream> {
        if self.context().is_stepped() {
            return Err(Error::Events(format!(
                "{} is a software ConnectX on a deterministic fabric: nothing steps it while a \
                 task sleeps; use a threaded one",
                self.context().name()
            )));
        }
        Ok(AsyncEventStream {
            fd: register(self, "an AsyncEventStream")?,
        })
    }
}

/// A device's asynchronous events, awaited ([`AsyncEvents::into_async`]).
pub struct AsyncEventStream {
    fd: AsyncFd<AsyncEvents>,
}

impl fmt::Debug for AsyncEventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEventStream")
            .field("events", self.fd.get_ref())
            .finish()
    }
}

impl AsyncEventStream {
    /// The next event, waiting for one. Cancellation-safe: an event is taken only in the
    /// synchronous step that returns it.
    pub async fn next(&mut self) -> Result<AsyncEvent> {
        loop {
            if let Some(e) = self.fd.get_ref().next_event() {
                return Ok(e);
            }
            let mut guard = self.fd.readable().await.map_err(|source| Error::Io {
                what: "await the asynchronous event fd",
                source,
            })?;
            match guard.get_inner().next_event() {
                // Not drained: the readiness stays, and the next call looks again.
                Some(e) => return Ok(e),
                None => guard.clear_ready(),
            }
        }
    }

    /// The next pending event, without waiting.
    pub fn try_next(&self) -> Option<AsyncEvent> {
        self.fd.get_ref().next_event()
    }

    /// Back to the synchronous queue.
    pub fn into_inner(self) -> AsyncEvents {
        self.fd.into_inner()
    }
}

/// Any descriptor a task awaits next to its completions and events: a connection's control
/// socket (mlx5-connect's `AsyncConnection`), a pipe, a socket of the program's own. It owns
/// the descriptor (a `dup` of the caller's, so the caller's blocking or non-blocking mode is
/// untouched: nothing is read through this one) and registers it with the current runtime.
pub struct AsyncReadable {
    fd: AsyncFd<OwnedFd>,
}

impl fmt::Debug for AsyncReadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncReadable")
            .field("fd", &self.fd.get_ref().as_raw_fd())
            .finish()
    }
}

impl AsyncReadable {
    /// Await `fd` (readable) on the current tokio runtime, which must have I/O enabled.
    pub fn new(fd: OwnedFd) -> Result<AsyncReadable> {
        Ok(AsyncReadable {
            fd: register(fd, "an AsyncReadable")?,
        })
    }

    /// The next thing `try_take` takes from the descriptor: `try_take` is called first, and
    /// again each time the descriptor becomes readable, until it returns something.
    /// `try_take` must read without blocking and return `Ok(None)` only when the descriptor
    /// has nothing more for it now (it read until `EWOULDBLOCK`): the readiness is then
    /// cleared, and the task sleeps until new data arrives. An error of `try_take` is returned
    /// inside; the outer error is the reactor's. Cancellation-safe when `try_take` is (the
    /// `.await` takes nothing).
    pub async fn next<T, E>(
        &self,
        mut try_take: impl FnMut() -> std::result::Result<Option<T>, E>,
    ) -> Result<std::result::Result<T, E>> {
        loop {
            match try_take() {
                Ok(Some(v)) => return Ok(Ok(v)),
                Ok(None) => {}
                Err(e) => return Ok(Err(e)),
            }
            let mut guard = self.fd.readable().await.map_err(|source| Error::Io {
                what: "await a descriptor's readiness",
                source,
            })?;
            match try_take() {
                Ok(Some(v)) => return Ok(Ok(v)),
                // Drained to EWOULDBLOCK: data arriving from now on is new readiness.
                Ok(None) => guard.clear_ready(),
                Err(e) => return Ok(Err(e)),
            }
        }
    }
}
