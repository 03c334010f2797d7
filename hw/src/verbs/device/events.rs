//! Asynchronous events and completion-channel waits.

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;
use std::time::Duration;

use super::*;

/// The raw `ibv_async_event`: the element union read by hand, the type as a plain number (the
/// `rdma-sys` type is a Rust enum, and a value a newer kernel adds would be undefined
/// behaviour there).
#[repr(C)]
struct RawAsyncEvent {
    element: RawElement,
    event_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
union RawElement {
    ptr: *mut c_void,
    port_num: c_int,
}

impl VerbsDevice {
    /// The next async event this contract reports, acknowledging every event read
    /// (`ibv_get_async_event` on the non-blocking async fd, then `ibv_ack_async_event`).
    pub(super) fn next_async_event(&self) -> Option<AsyncEvent> {
        loop {
            let mut ev = RawAsyncEvent {
                element: RawElement {
                    ptr: std::ptr::null_mut(),
                },
                event_type: 0,
            };
            // SAFETY: the async fd is non-blocking (set at open); `RawAsyncEvent` has the
            // layout of `struct ibv_async_event` (a pointer-sized union, then an enum).
            let ret = unsafe {
                ibv::ibv_get_async_event(self.ctx, (&mut ev as *mut RawAsyncEvent).cast())
            };
            if ret != 0 {
                return None; // EAGAIN: nothing pending
            }
            let mapped = {
                let objs = self.lock();
                // SAFETY: reading the union as a pointer is valid for every event type (a
                // port event leaves the upper bytes as written, and the pointer is only
                // compared, never dereferenced).
                let p = unsafe { ev.element.ptr };
                // SAFETY: for port events the union holds `port_num`.
                let port = unsafe { ev.element.port_num };
                let qp = || {
                    objs.qps
                        .iter()
                        .find(|(_, e)| e.qp.cast::<c_void>() == p)
                        .map(|(id, _)| QpId(id))
                };
                let port_u8 = u8::try_from(port).unwrap_or(0);
                match ev.event_type {
                    0 => objs
                        .cqs
                        .iter()
                        .find(|(_, e)| e.cq.cast::<c_void>() == p)
                        .map(|(id, _)| AsyncEvent::CqError(CqId(id))),
                    1 => qp().map(AsyncEvent::QpFatal),
                    2 => qp().map(AsyncEvent::QpRequestError),
                    3 => qp().map(AsyncEvent::QpAccessError),
                    5 => qp().map(AsyncEvent::SqDrained),
                    9 => Some(AsyncEvent::PortActive(port_u8)),
                    10 => Some(AsyncEvent::PortError(port_u8)),
                    15 => objs
                        .srqs
                        .iter()
                        .find(|(_, e)| e.srq.cast::<c_void>() == p)
                        .map(|(id, _)| AsyncEvent::SrqLimitReached(SrqId(id))),
                    16 => qp().map(AsyncEvent::QpLastWqeReached),
                    _ => None,
                }
            };
            // SAFETY: `ev` was filled by `ibv_get_async_event`; every event is acked once
            // (destroying its object waits for the ack).
            unsafe { ibv::ibv_ack_async_event((&mut ev as *mut RawAsyncEvent).cast()) };
            match mapped {
                Some(e) => {
                    tracing::debug!(device = %self.name, event = ?e, "async event");
                    return Some(e);
                }
                None => {
                    tracing::debug!(device = %self.name, event_type = ev.event_type, "async event not reported (type not in the contract or object unknown)");
                }
            }
        }
    }

    /// [`Device::wait_cq_event`]: `poll(2)` on the CQ's completion channel, then
    /// `ibv_get_cq_event` and `ibv_ack_cq_events` for the one event taken.
    pub(super) fn wait_cq_event_on_channel(&self, cq: CqId, timeout: Duration) -> Result<bool> {
        let (cq_ptr, channel) = {
            let mut objs = self.lock();
            let e = objs.cqs.get_mut(cq.0)?;
            if e.channel.is_null() {
                return Err(Error::InvalidArgument(format!(
                    "CQ {} was created without a completion channel (CqInitAttr::with_channel)",
                    cq.0
                )));
            }
            e.waiters += 1;
            (e.cq, e.channel)
        };
        // SAFETY: the CQ (and so its channel) cannot be destroyed while `waiters > 0`.
        let fd = unsafe { (*channel).fd };
        let result = wait_readable(fd, timeout).map(|ready| {
            if !ready {
                return false;
            }
            let mut got: *mut ibv::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: `channel` is live; the fd is non-blocking, so this returns at once.
            let ret = unsafe { ibv::ibv_get_cq_event(channel, &mut got, &mut ctx) };
            if ret != 0 {
                return false; // another thread took the event
            }
            debug_assert_eq!(got, cq_ptr);
            // SAFETY: one event was taken from this CQ; acknowledging it lets
            // `ibv_destroy_cq` complete later.
            unsafe { ibv::ibv_ack_cq_events(got, 1) };
            true
        });
        if let Ok(e) = self.lock().cqs.get_mut(cq.0) {
            e.waiters -= 1;
        }
        result
    }
}

/// Waits until `fd` is readable or `timeout` passes (`poll(2)`).
fn wait_readable(fd: RawFd, timeout: Duration) -> Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = errno();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(Error::Verbs {
                call: "poll(completion channel)",
                source: e,
            });
        }
    }
}
