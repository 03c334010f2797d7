//! Asynchronous events and completion channels.

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;

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
                self.rdma
                    .ibv_get_async_event(self.ctx, (&mut ev as *mut RawAsyncEvent).cast())
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
            unsafe {
                self.rdma
                    .ibv_ack_async_event((&mut ev as *mut RawAsyncEvent).cast())
            };
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

    /// [`Device::create_comp_channel`]: `ibv_create_comp_channel`, its fd made non-blocking
    /// so that [`Device::get_cq_event`] never blocks.
    pub(super) fn create_channel(&self) -> Result<ChannelId> {
        let mut objs = self.lock();
        // SAFETY: `ctx` is open.
        let ch = unsafe { self.rdma.ibv_create_comp_channel(self.ctx) };
        if ch.is_null() {
            return Err(null_error("ibv_create_comp_channel"));
        }
        // SAFETY: `ch` is a live channel.
        let fd = unsafe { (*ch).fd };
        let id = set_nonblocking(fd).and_then(|()| objs.channels.insert(ChannelEntry { ch }));
        match id {
            Ok(id) => Ok(ChannelId(id)),
            Err(e) => {
                // SAFETY: no CQ uses the channel yet.
                unsafe { self.rdma.ibv_destroy_comp_channel(ch) };
                Err(e)
            }
        }
    }

    /// [`Device::destroy_comp_channel`]: refused while a CQ reports to it (libibverbs would
    /// answer EBUSY, `ibv_destroy_comp_channel`).
    pub(super) fn destroy_channel(&self, channel: ChannelId) -> Result<()> {
        let mut objs = self.lock();
        let ch = objs.channels.get(channel.0)?.ch;
        let users: Vec<String> = objs
            .cqs
            .iter()
            .filter(|(_, e)| e.channel == Some(channel))
            .map(|(id, _)| id.to_string())
            .collect();
        if !users.is_empty() {
            return Err(Error::Busy(format!(
                "completion channel {} still has CQ(s) {} attached; destroy them first",
                channel.0,
                users.join(", ")
            )));
        }
        // SAFETY: `ch` is live and no CQ uses it.
        check("ibv_destroy_comp_channel", unsafe {
            self.rdma.ibv_destroy_comp_channel(ch)
        })?;
        objs.channels.remove(channel.0)?;
        Ok(())
    }

    /// [`Device::comp_channel_fd`].
    pub(super) fn channel_fd(&self, channel: ChannelId) -> Result<RawFd> {
        let objs = self.lock();
        let ch = objs.channels.get(channel.0)?.ch;
        // SAFETY: `ch` is live while it is in the table.
        Ok(unsafe { (*ch).fd })
    }

    /// [`Device::get_cq_event`]: `ibv_get_cq_event` on the non-blocking channel fd. The lock
    /// is held across the call, so the CQ the event names cannot be destroyed meanwhile (and
    /// destroying a CQ makes the kernel discard its queued events, `ib_uverbs_release_ucq`).
    pub(super) fn take_cq_event(&self, channel: ChannelId) -> Result<Option<CqId>> {
        let mut objs = self.lock();
        let ch = objs.channels.get(channel.0)?.ch;
        loop {
            let mut got: *mut ibv::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: `ch` is live; its fd is non-blocking, so this returns at once.
            let ret = unsafe { self.rdma.ibv_get_cq_event(ch, &mut got, &mut ctx) };
            if ret != 0 {
                let e = errno();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(None),
                    _ => Err(Error::Verbs {
                        call: "ibv_get_cq_event",
                        source: e,
                    }),
                };
            }
            let found = objs.cqs.iter().find(|(_, e)| e.cq == got).map(|(id, _)| id);
            match found.and_then(|id| Some((id, objs.cqs.get_mut(id).ok()?))) {
                Some((id, e)) => {
                    e.unacked += 1;
                    return Ok(Some(CqId(id)));
                }
                None => {
                    // Not a CQ of this device's table (cannot happen: the table holds every
                    // CQ created here); it cannot be acknowledged, so it is only reported.
                    tracing::warn!(device = %self.name, "completion event for an unknown CQ");
                }
            }
        }
    }

    /// [`Device::ack_cq_events`]: `ibv_ack_cq_events`, refusing to acknowledge more events
    /// than were taken (libibverbs would then wait forever in `ibv_destroy_cq`).
    pub(super) fn ack_events(&self, cq: CqId, n: u32) -> Result<()> {
        let mut objs = self.lock();
        let e = objs.cqs.get_mut(cq.0)?;
        if n > e.unacked {
            return Err(Error::InvalidArgument(format!(
                "ack_cq_events(CQ {}, {n}): only {} event(s) were taken from it and not yet \
                 acknowledged",
                cq.0, e.unacked
            )));
        }
        if n > 0 {
            // SAFETY: `e.cq` is live; `n` events were taken from it and not acknowledged.
            unsafe { self.rdma.ibv_ack_cq_events(e.cq, n) };
            e.unacked -= n;
        }
        Ok(())
    }

    /// [`Device::async_event_fd`]: the context's `async_fd`, made non-blocking at open.
    pub(super) fn async_fd(&self) -> RawFd {
        // SAFETY: `ctx` is open for the device's lifetime.
        unsafe { (*self.ctx).async_fd }
    }
}
