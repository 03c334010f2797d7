//! A device's asynchronous events (`ibv_get_async_event`): a QP gone fatal, an access error, the
//! last WQE of a QP on an SRQ, an SRQ below its limit, a port going down or up, a CQ overrun
//! ([`AsyncEvent`]), behind their own file descriptor (the context's `async_fd` on verbs, an
//! eventfd on the software ConnectX).
//!
//! The fd is non-blocking and readable exactly while an event is pending, so it works with
//! `poll(2)`, epoll (level- or edge-triggered) and a tokio `AsyncFd` alike: on readiness, take
//! events with [`AsyncEvents::next_event`] until it returns `None`. The events name objects by
//! their device handles: compare with [`Qp::id`](crate::Qp::id), [`Cq::id`](crate::Cq::id),
//! [`Srq::id`](crate::Srq::id).
//!
//! The device has one queue of them, and an event taken is taken for everyone: so one
//! [`AsyncEvents`] at a time per context ([`Context::async_events`] refuses a second).

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mlx5_hw::device::wait_readable;
use mlx5_hw::AsyncEvent;

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
    /// software ConnectX: [`AsyncEvents::wait_event`] does). Events a CQ wait took from the
    /// device before this [`AsyncEvents`] existed come first ([`crate::Cq::poll_until`]).
    pub fn next_event(&self) -> Option<AsyncEvent> {
        self.ctx.take_async_event()
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
