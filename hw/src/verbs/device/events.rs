//! Asynchronous events and completion channels.

use std::ffi::c_void;
use std::os::fd::RawFd;

use super::*;

/// What the `element` union of an `ibv_async_event` holds for an event type, and how the
/// event is reported: libibverbs `ibv_get_async_event` (`libibverbs/device.c`) stores the CQ
/// for `IBV_EVENT_CQ_ERR`, the QP for the eight QP events, the SRQ for the two SRQ events,
/// the WQ for `IBV_EVENT_WQ_FATAL` and a port number for every other type.
enum Element {
    Cq(fn(CqId) -> AsyncEvent),
    Qp(fn(QpId) -> AsyncEvent),
    Srq(fn(SrqId) -> AsyncEvent),
    Port(fn(u8) -> AsyncEvent),
    /// The whole device, or a WQ (the contract creates none): nothing to look up.
    None(AsyncEvent),
}

/// [`Element`] of every `enum ibv_event_type` value of rdma-core 44 (`libibverbs/verbs.h`), by
/// its named constant; a value the header does not define is [`AsyncEvent::Unknown`].
fn element_of(event_type: ibv::ibv_event_type::Type) -> Element {
    use ibv::ibv_event_type::*;
    match event_type {
        IBV_EVENT_CQ_ERR => Element::Cq(AsyncEvent::CqError),
        IBV_EVENT_QP_FATAL => Element::Qp(AsyncEvent::QpFatal),
        IBV_EVENT_QP_REQ_ERR => Element::Qp(AsyncEvent::QpRequestError),
        IBV_EVENT_QP_ACCESS_ERR => Element::Qp(AsyncEvent::QpAccessError),
        IBV_EVENT_COMM_EST => Element::Qp(AsyncEvent::CommEstablished),
        IBV_EVENT_SQ_DRAINED => Element::Qp(AsyncEvent::SqDrained),
        IBV_EVENT_PATH_MIG => Element::Qp(AsyncEvent::PathMigrated),
        IBV_EVENT_PATH_MIG_ERR => Element::Qp(AsyncEvent::PathMigrationError),
        IBV_EVENT_DEVICE_FATAL => Element::None(AsyncEvent::DeviceFatal),
        IBV_EVENT_PORT_ACTIVE => Element::Port(AsyncEvent::PortActive),
        IBV_EVENT_PORT_ERR => Element::Port(AsyncEvent::PortError),
        IBV_EVENT_LID_CHANGE => Element::Port(AsyncEvent::LidChange),
        IBV_EVENT_PKEY_CHANGE => Element::Port(AsyncEvent::PkeyChange),
        IBV_EVENT_SM_CHANGE => Element::Port(AsyncEvent::SmChange),
        IBV_EVENT_SRQ_ERR => Element::Srq(AsyncEvent::SrqError),
        IBV_EVENT_SRQ_LIMIT_REACHED => Element::Srq(AsyncEvent::SrqLimitReached),
        IBV_EVENT_QP_LAST_WQE_REACHED => Element::Qp(AsyncEvent::QpLastWqeReached),
        IBV_EVENT_CLIENT_REREGISTER => Element::Port(AsyncEvent::ClientReregister),
        IBV_EVENT_GID_CHANGE => Element::Port(AsyncEvent::GidChange),
        IBV_EVENT_WQ_FATAL => Element::None(AsyncEvent::WqFatal),
        other => Element::None(AsyncEvent::Unknown { event_type: other }),
    }
}

impl VerbsDevice {
    /// The next async event, acknowledging every event read (`ibv_get_async_event` on the
    /// non-blocking async fd, then `ibv_ack_async_event`). Every event type is reported; an
    /// affiliated event whose object is not in this device's tables (which cannot happen:
    /// every object is created through them, and destroying one waits for its events to be
    /// acknowledged) is logged at WARN and skipped, since it names nothing the caller knows.
    pub(super) fn next_async_event(&self) -> Option<AsyncEvent> {
        loop {
            let mut ev = ibv::ibv_async_event {
                element: ibv::ibv_async_event_element_t {
                    cq: std::ptr::null_mut(),
                },
                event_type: 0,
            };
            // SAFETY: the async fd is non-blocking (set at open), so this returns at once;
            // `ev` is a live `struct ibv_async_event`.
            let ret = unsafe { self.rdma.ibv_get_async_event(self.ctx, &mut ev) };
            if ret != 0 {
                return None; // EAGAIN: nothing pending
            }
            let mapped = {
                let objs = self.lock();
                // SAFETY: every member of the union is a pointer but `port_num`; reading it as
                // one pointer is valid for every event type (a port event leaves the upper
                // bytes as written: zero, from the initialisation above), and the pointer is
                // only compared, never dereferenced.
                let p = unsafe { ev.element.cq }.cast::<c_void>();
                // SAFETY: any bit pattern is a valid `c_int`; it is used for port events only,
                // for which libibverbs stored `port_num`.
                let port = unsafe { ev.element.port_num };
                match element_of(ev.event_type) {
                    Element::Cq(f) => objs
                        .cqs
                        .iter()
                        .find(|(_, e)| e.cq.cast::<c_void>() == p)
                        .map(|(id, _)| f(CqId(id))),
                    Element::Qp(f) => objs
                        .qps
                        .iter()
                        .find(|(_, e)| e.qp.cast::<c_void>() == p)
                        .map(|(id, _)| f(QpId(id))),
                    Element::Srq(f) => objs
                        .srqs
                        .iter()
                        .find(|(_, e)| e.srq.cast::<c_void>() == p)
                        .map(|(id, _)| f(SrqId(id))),
                    // Ports are 1-based and at most 255 (`ibv_device_attr.phys_port_cnt`).
                    Element::Port(f) => Some(f(u8::try_from(port).unwrap_or(0))),
                    Element::None(e) => Some(e),
                }
            };
            // SAFETY: `ev` was filled by `ibv_get_async_event`; every event is acked once
            // (destroying its object waits for the ack).
            unsafe { self.rdma.ibv_ack_async_event(&mut ev) };
            match mapped {
                Some(e) => {
                    if e == AsyncEvent::DeviceFatal {
                        tracing::error!(device = %self.name, "the device reported a fatal error (IBV_EVENT_DEVICE_FATAL)");
                    } else {
                        tracing::debug!(device = %self.name, event = %e, "async event");
                    }
                    return Some(e);
                }
                None => {
                    tracing::warn!(device = %self.name, event_type = ev.event_type, "async event for an object this device does not hold; skipped");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `ibv_event_type` constant of verbs.h maps to the variant of its name, with the
    /// element libibverbs stores for it.
    #[test]
    fn every_event_type_is_mapped_by_its_name() {
        use ibv::ibv_event_type::*;
        let all = [
            (IBV_EVENT_CQ_ERR, "IBV_EVENT_CQ_ERR"),
            (IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_FATAL"),
            (IBV_EVENT_QP_REQ_ERR, "IBV_EVENT_QP_REQ_ERR"),
            (IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR"),
            (IBV_EVENT_COMM_EST, "IBV_EVENT_COMM_EST"),
            (IBV_EVENT_SQ_DRAINED, "IBV_EVENT_SQ_DRAINED"),
            (IBV_EVENT_PATH_MIG, "IBV_EVENT_PATH_MIG"),
            (IBV_EVENT_PATH_MIG_ERR, "IBV_EVENT_PATH_MIG_ERR"),
            (IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL"),
            (IBV_EVENT_PORT_ACTIVE, "IBV_EVENT_PORT_ACTIVE"),
            (IBV_EVENT_PORT_ERR, "IBV_EVENT_PORT_ERR"),
            (IBV_EVENT_LID_CHANGE, "IBV_EVENT_LID_CHANGE"),
            (IBV_EVENT_PKEY_CHANGE, "IBV_EVENT_PKEY_CHANGE"),
            (IBV_EVENT_SM_CHANGE, "IBV_EVENT_SM_CHANGE"),
            (IBV_EVENT_SRQ_ERR, "IBV_EVENT_SRQ_ERR"),
            (IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED"),
            (
                IBV_EVENT_QP_LAST_WQE_REACHED,
                "IBV_EVENT_QP_LAST_WQE_REACHED",
            ),
            (IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER"),
            (IBV_EVENT_GID_CHANGE, "IBV_EVENT_GID_CHANGE"),
            (IBV_EVENT_WQ_FATAL, "IBV_EVENT_WQ_FATAL"),
        ];
        // The header's 20 values, 0..=19, each once.
        let mut values: Vec<u32> = all.iter().map(|&(v, _)| v).collect();
        values.sort_unstable();
        assert_eq!(values, (0..20).collect::<Vec<u32>>());
        for (v, name) in all {
            let (e, element) = match element_of(v) {
                Element::Cq(f) => (f(CqId(7)), "cq"),
                Element::Qp(f) => (f(QpId(7)), "qp"),
                Element::Srq(f) => (f(SrqId(7)), "srq"),
                Element::Port(f) => (f(1), "port"),
                Element::None(e) => (e, "none"),
            };
            assert_eq!(e.name(), name, "{v}");
            // What ibv_get_async_event stores in the union for this type.
            let expected = match name {
                "IBV_EVENT_CQ_ERR" => "cq",
                "IBV_EVENT_SRQ_ERR" | "IBV_EVENT_SRQ_LIMIT_REACHED" => "srq",
                "IBV_EVENT_DEVICE_FATAL" | "IBV_EVENT_WQ_FATAL" => "none",
                "IBV_EVENT_PORT_ACTIVE"
                | "IBV_EVENT_PORT_ERR"
                | "IBV_EVENT_LID_CHANGE"
                | "IBV_EVENT_PKEY_CHANGE"
                | "IBV_EVENT_SM_CHANGE"
                | "IBV_EVENT_CLIENT_REREGISTER"
                | "IBV_EVENT_GID_CHANGE" => "port",
                _ => "qp",
            };
            assert_eq!(element, expected, "{name}");
        }
        assert_eq!(
            element_of(20).name_of_none(),
            Some(AsyncEvent::Unknown { event_type: 20 })
        );
    }

    impl Element {
        fn name_of_none(self) -> Option<AsyncEvent> {
            match self {
                Element::None(e) => Some(e),
                _ => None,
            }
        }
    }
}
