//! A device's asynchronous events (`ibv_get_async_event`): every `enum ibv_event_type` of
//! verbs ([`AsyncEvent`]): a QP gone fatal, an access error, communication established, the
//! last WQE of a QP on an SRQ, an SRQ in error or below its limit, a port going down or up, a
//! CQ overrun, the device itself dead (`IBV_EVENT_DEVICE_FATAL`), behind their own file
//! descriptor (the context's `async_fd` on verbs, an eventfd on the software ConnectX).
//!
//! The fd is non-blocking and readable exactly while an event is pending, so it works with
//! `poll(2)`, epoll (level- or edge-triggered) and a tokio `AsyncFd` alike: on readiness, take
//! events with [`AsyncEvents::next_event`] until it returns `None`. The events name objects by
//! their device handles: compare with [`Qp::id`](crate::Qp::id), [`Cq::id`](crate::Cq::id),
//! [`Srq::id`](crate::Srq::id).
//!
//! The device has one queue of them, and an event taken is taken for everyone: so one
//! [`AsyncEvents`] at a time per context ([`Context::async_events`] refuses a second).
//!
//! ## A dead device
//!
//! A device that reports `IBV_EVENT_DEVICE_FATAL` completes nothing more, and on a ConnectX
//! its CQs do not even receive flush completions (libmlx5 makes none). So the context watches
//! for that event whoever takes it: [`AsyncEvents`] records it as it hands it out, and while no
//! `AsyncEvents` exists the waiting helpers ([`Cq::poll_until`](crate::Cq::poll_until),
//! [`Cq::wait_for`](crate::Cq::wait_for), [`Cq::poll_blocking`](crate::Cq::poll_blocking),
//! the `tokio` feature's `AsyncChannel`) take the device's events themselves, keep them for
//! the next `AsyncEvents` (which hands them out first, before what the fd signals) and sleep
//! on the event fd too. Either way every helper waiting on the context wakes at once, hands
//! out what the device wrote before it died and one `WR_FLUSH_ERR` completion for each WR it
//! left ([`Cq::flush_dead`](crate::Cq::flush_dead), `crate::dead`), and then fails with
//! [`Error::DeviceFatal`] instead of waiting for its deadline; [`Context::is_fatal`] asks.

use std::collections::VecDeque;
use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlx5_hw::device::wait_readable;
use mlx5_hw::{AsyncEvent, CqId};

use crate::context::Context;
use crate::error::{Error, Result};

/// The asynchronous events of one device, taken one by one ([`AsyncEvents::next_event`]) or
/// waited for ([`AsyncEvents::wait_event`]); with the `tokio` feature, awaited
/// (`AsyncEvents::into_async`).
pub struct AsyncEvents {
    ctx: Context,
    fd: RawFd,
}

impl fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("device", &self.ctx.name())
            .field("fd", &self.fd)
            .finish()
    }
}

impl Drop for AsyncEvents {
    fn drop(&mut self) {
        self.ctx
            .inner
            .async_events_taken
            .store(false, Ordering::Release);
    }
}

impl AsRawFd for AsyncEvents {
    /// The fd: non-blocking, readable exactly while an event is pending.
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the device's async event fd stays open as long as the device
        // (`Device::async_event_fd`), which `self.ctx` keeps open; the borrow cannot outlive
        // `self`.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl AsyncEvents {
    pub(crate) fn new(ctx: &Context) -> Result<AsyncEvents> {
        if ctx.inner.async_events_taken.swap(true, Ordering::AcqRel) {
            return Err(Error::Events(format!(
                "the asynchronous events of {} are already taken by another AsyncEvents: \
                 the device has one queue, and two consumers would each miss what the other \
                 took; share that one",
                ctx.name()
            )));
        }
        match ctx.device().async_event_fd() {
            Ok(fd) => Ok(AsyncEvents {
                ctx: ctx.clone(),
                fd,
            }),
            Err(e) => {
                ctx.inner.async_events_taken.store(false, Ordering::Release);
                Err(e.into())
            }
        }
    }

    /// The context whose events these are.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The next pending event, without blocking (and without stepping a deterministic
    /// software ConnectX: [`AsyncEvents::wait_event`] does): first those the waiting helpers
    /// took while no `AsyncEvents` existed (module docs), then the device's.
    pub fn next_event(&self) -> Option<AsyncEvent> {
        let watch = &self.ctx.inner.watch;
        if let Some(e) = watch.pop() {
            return Some(e);
        }
        let e = self.ctx.device().poll_async_event()?;
        watch.saw(&e, self.ctx.name());
        Some(e)
    }

    /// The next event, waiting up to `timeout` for the fd to become readable (`poll(2)`);
    /// steps a deterministic software ConnectX first ([`Context::progress`]).
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.ctx.progress();
            if let Some(e) = self.next_event() {
                return Ok(Some(e));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !wait_readable(self.fd, left)? {
                self.ctx.progress();
                return Ok(self.next_event());
            }
        }
    }
}

/// At most this many events are kept for the next [`AsyncEvents`] while none exists (module
/// docs); beyond it the oldest are dropped with a WARN line (the device-fatal state is kept
/// apart and never lost).
pub const BACKLOG_CAP: usize = 4096;

/// What a context learnt of its device's events: whether it is dead, the events taken while no
/// [`AsyncEvents`] existed, and a socket made readable when the device is found dead, which
/// every sleeping helper watches.
pub(crate) struct Watch {
    fatal: AtomicBool,
    backlog: Mutex<VecDeque<AsyncEvent>>,
    /// CQs the device reported in error (`IBV_EVENT_CQ_ERR`), until they are destroyed.
    cq_errors: Mutex<Vec<CqId>>,
    /// (read end, write end); `None` if the process is out of descriptors (the helpers then
    /// sleep in bounded slices).
    wake: Option<(UnixStream, UnixStream)>,
}

impl Watch {
    pub(crate) fn new() -> Watch {
        let wake = UnixStream::pair()
            .ok()
            .filter(|(r, w)| r.set_nonblocking(true).is_ok() && w.set_nonblocking(true).is_ok());
        Watch {
            fatal: AtomicBool::new(false),
            backlog: Mutex::new(VecDeque::new()),
            cq_errors: Mutex::new(Vec::new()),
            wake,
        }
    }

    fn backlog(&self) -> MutexGuard<'_, VecDeque<AsyncEvent>> {
        // Every update is one push or pop: a poisoned lock still holds a valid queue.
        self.backlog.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record an event taken from the device (by [`AsyncEvents`] or a helper).
    pub(crate) fn saw(&self, e: &AsyncEvent, device: &str) {
        if let AsyncEvent::CqError(cq) = *e {
            let mut errs = self.cq_errors();
            if !errs.contains(&cq) {
                errs.push(cq);
            }
        }
        if *e == AsyncEvent::DeviceFatal && !self.fatal.swap(true, Ordering::AcqRel) {
            tracing::error!(target: "mlx5_ctx", device, "the device reported a fatal error (IBV_EVENT_DEVICE_FATAL): every wait on it ends");
            if let Some((_, w)) = &self.wake {
                // One byte, never read: the socket stays readable for good.
                let _ = (&*w).write(&[1]);
            }
        }
    }

    /// Keep an event a helper took for the next [`AsyncEvents`].
    pub(crate) fn keep(&self, e: AsyncEvent, device: &str) {
        let mut q = self.backlog();
        if q.len() >= BACKLOG_CAP {
            let lost = q.pop_front();
            tracing::warn!(target: "mlx5_ctx", device, ?lost, "{BACKLOG_CAP} asynchronous events kept and none taken (Context::async_events): the oldest is dropped");
        }
        q.push_back(e);
    }

    fn cq_errors(&self) -> MutexGuard<'_, Vec<CqId>> {
        // Every update is one push or retain: a poisoned lock still holds a valid list.
        self.cq_errors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an event reported CQ `cq` in error ([`Watch::saw`]).
    pub(crate) fn cq_in_error(&self, cq: CqId) -> bool {
        self.cq_errors().contains(&cq)
    }

    /// A destroyed CQ: its handle may name another CQ later.
    pub(crate) fn forget_cq(&self, cq: CqId) {
        self.cq_errors().retain(|c| *c != cq);
    }

    fn pop(&self) -> Option<AsyncEvent> {
        self.backlog().pop_front()
    }

    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    /// The socket that becomes readable when the device is found dead.
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        self.wake.as_ref().map(|(r, _)| r.as_raw_fd())
    }

    /// A descriptor of its own for the wake-up socket.
    #[cfg(feature = "tokio")]
    pub(crate) fn wake_clone(&self) -> Option<std::os::fd::OwnedFd> {
        let (r, _) = self.wake.as_ref()?;
        r.try_clone().ok().map(Into::into)
    }
}

/// A descriptor of its own (`dup`) for `fd`, the event fd of `ctx`'s device; `None` if the
/// process is out of descriptors.
#[cfg(feature = "tokio")]
pub(crate) fn dup_event_fd(ctx: &Context, fd: RawFd) -> Option<std::os::fd::OwnedFd> {
    let _ = ctx;
    // SAFETY: `fd` is the device's async event fd, which stays open as long as the device
    // (`Device::async_event_fd`), which `ctx` keeps open for the duration of the borrow.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    b.try_clone_to_owned().ok()
}
