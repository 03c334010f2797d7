//! The event descriptors: completion channels and each context's asynchronous event queue, with
//! the kernel's `read` semantics (`drivers/infiniband/core/uverbs_main.c`
//! `ib_uverbs_event_read`: one event per `read`, EINVAL for a buffer smaller than one event,
//! EAGAIN when empty and non-blocking, otherwise wait; the descriptor is readable while an event
//! is queued).
//!
//! **Completion channels.** The program's descriptor is the device's own channel eventfd
//! (`mlx5_sim::notify::CompChannel`): readable exactly while an event is queued, so `poll`,
//! `epoll` and `select` work on it unchanged. A `read` takes the oldest event from the device
//! (`Device::get_cq_event`) and hands out its CQ's `user_handle` (`struct
//! ib_uverbs_comp_event_desc`); the device sees the event taken when the program takes it, which
//! is what its check of the arm sequence number needs (rdma-core advances the number in
//! `ibv_get_cq_event`). The kernel knows nothing of acknowledgements
//! (`ibv_ack_cq_events` is rdma-core's alone), so the event is acknowledged to the device at
//! once and counted in the CQ's `comp_events_reported`.
//!
//! **Asynchronous events.** The device has one queue; a thread ([`start_pump`]) waits on it and
//! moves each event to the queue of the context that owns its object (a port event to every
//! context), as `struct ib_uverbs_async_event_desc` with the object's `user_handle` or the port
//! number. The program's descriptor is an eventfd of this library's, readable while the
//! context's queue is not empty. Destroying an object drops its queued events, as the kernel
//! does (`ib_uverbs_release_uevent`).
//!
//! The underlying descriptors stay non-blocking; `O_NONBLOCK` as the program sets it with
//! `fcntl` or `FIONBIO` is kept here and decides whether a `read` waits.

use std::sync::Arc;

use mlx5_hw::{AsyncEvent, ChannelId, CqId, Device};
use zerocopy::IntoBytes;

use crate::abi::{AsyncEventDesc, CompEventDesc};
use crate::context::{AsyncQueue, PendingAsync};
use crate::emu::{self, Emu};
use crate::node::Node;
use crate::sys;

/// A completion channel's descriptor.
#[derive(Debug)]
pub struct ChannelFile {
    /// The device's channel.
    pub id: ChannelId,
    /// The program's `O_NONBLOCK`.
    pub nonblock: bool,
    /// The program closed it while CQs still used it: destroyed with its last CQ.
    pub closed: bool,
}

/// A context's asynchronous event descriptor.
#[derive(Debug)]
pub struct AsyncFile {
    /// The command descriptor of its context.
    pub ctx_fd: i32,
    /// Events not yet read.
    pub queue: AsyncQueue,
    /// The program's `O_NONBLOCK`.
    pub nonblock: bool,
}

/// An event descriptor.
#[derive(Debug)]
pub enum EventFile {
    /// A completion channel.
    Channel(ChannelFile),
    /// An asynchronous event queue.
    Async(AsyncFile),
}

/// `enum ib_event_type` values (`<rdma/ib_user_verbs.h>` carries them as `event_type`; the
/// kernel's `include/rdma/ib_verbs.h` numbers them, rdma-core `verbs.h` `enum ibv_event_type`
/// has the same).
pub fn event_type(e: &AsyncEvent) -> u32 {
    match e {
        AsyncEvent::CqError(_) => 0,
        AsyncEvent::QpFatal(_) => 1,
        AsyncEvent::QpRequestError(_) => 2,
        AsyncEvent::QpAccessError(_) => 3,
        AsyncEvent::SqDrained(_) => 5,
        AsyncEvent::PortActive(_) => 9,
        AsyncEvent::PortError(_) => 10,
        AsyncEvent::DeviceFatal => 8,
        AsyncEvent::SrqLimitReached(_) => 15,
        AsyncEvent::QpLastWqeReached(_) => 16,
        #[allow(unreachable_patterns)]
        _ => 8,
    }
}

/// A new asynchronous event descriptor for context `ctx_fd`.
pub fn new_async_file(emu: &mut Emu, ctx_fd: i32) -> Result<i32, i32> {
    let fd = sys::eventfd();
    if fd < 0 {
        return Err(sys::errno());
    }
    if !crate::fds::set_event(fd, true) {
        sys::close(fd);
        return Err(libc::EMFILE);
    }
    emu.events.insert(
        fd,
        EventFile::Async(AsyncFile {
            ctx_fd,
            queue: AsyncQueue::new(),
            nonblock: false,
        }),
    );
    Ok(fd)
}

/// A new completion channel; its descriptor.
pub fn new_channel(emu: &mut Emu, node: &Node) -> Result<i32, i32> {
    let id = node
        .dev
        .create_comp_channel()
        .map_err(crate::objects::errno)?;
    let fd = node
        .dev
        .comp_channel_fd(id)
        .map_err(crate::objects::errno)?;
    if !crate::fds::set_event(fd, true) {
        let _ = node.dev.destroy_comp_channel(id);
        return Err(libc::EMFILE);
    }
    emu.events.insert(
        fd,
        EventFile::Channel(ChannelFile {
            id,
            nonblock: false,
            closed: false,
        }),
    );
    Ok(fd)
}

/// Queue an asynchronous event for context `ctx_fd`.
fn push(emu: &mut Emu, ctx_fd: i32, p: PendingAsync) {
    let Some(afd) = emu
        .contexts
        .get(&ctx_fd)
        .and_then(|c| c.u.as_ref())
        .and_then(|u| u.async_fd)
    else {
        return;
    };
    if let Some(EventFile::Async(a)) = emu.events.get_mut(&afd) {
        a.queue.push_back(p);
        sys::eventfd_signal(afd);
    }
}

/// Drop the queued asynchronous events of object `handle` of context `ctx_fd` (destroyed).
pub fn forget_async(emu: &mut Emu, ctx_fd: i32, handle: u32) {
    for f in emu.events.values_mut() {
        if let EventFile::Async(a) = f {
            if a.ctx_fd == ctx_fd {
                a.queue.retain(|p| p.handle != Some(handle));
            }
        }
    }
}

/// Move one device event to the queue of the context owning its object.
fn route(emu: &mut Emu, e: AsyncEvent) {
    let ty = event_type(&e);
    let owner = match e {
        AsyncEvent::QpFatal(q)
        | AsyncEvent::QpRequestError(q)
        | AsyncEvent::QpAccessError(q)
        | AsyncEvent::SqDrained(q)
        | AsyncEvent::QpLastWqeReached(q) => emu.qp_owner.get(&q.0).copied(),
        AsyncEvent::CqError(c) => emu.cq_owner.get(&c.0).copied(),
        AsyncEvent::SrqLimitReached(s) => emu.srq_owner.get(&s.0).copied(),
        // A port event, and the device's own (`IB_EVENT_DEVICE_FATAL`, which mlx5_ib raises
        // with port 1 as its element: kernel `drivers/infiniband/hw/mlx5/main.c`
        // `mlx5_ib_handle_event`), go to every context (`ib_uverbs_event_handler`).
        AsyncEvent::PortActive(_) | AsyncEvent::PortError(_) | AsyncEvent::DeviceFatal => {
            let p = match e {
                AsyncEvent::PortActive(p) | AsyncEvent::PortError(p) => p,
                _ => 1,
            };
            let ctxs: Vec<i32> = emu.contexts.keys().copied().collect();
            for c in ctxs {
                let desc = AsyncEventDesc {
                    element: p as u64,
                    event_type: ty,
                    reserved: 0,
                };
                push(emu, c, PendingAsync { desc, handle: None });
            }
            if e == AsyncEvent::DeviceFatal {
                crate::objects::disassociate(emu);
            }
            return;
        }
        #[allow(unreachable_patterns)]
        _ => None,
    };
    let Some((ctx_fd, handle)) = owner else {
        tracing::debug!(event = ?e, "asynchronous event for an object no context owns");
        return;
    };
    let element = emu
        .contexts
        .get(&ctx_fd)
        .and_then(|c| c.u.as_ref())
        .and_then(|u| u.objects.get(&handle))
        .map(|o| match o {
            crate::context::Object::Cq(c) => c.user_handle,
            crate::context::Object::Qp(q) => q.user_handle,
            crate::context::Object::Srq(s) => s.user_handle,
            _ => 0,
        })
        .unwrap_or(0);
    let desc = AsyncEventDesc {
        element,
        event_type: ty,
        reserved: 0,
    };
    push(
        emu,
        ctx_fd,
        PendingAsync {
            desc,
            handle: Some(handle),
        },
    );
}

/// Start the thread that moves the device's asynchronous events to the contexts' queues and
/// applies the control file whenever it changes.
pub fn start_pump(node: Arc<Node>, control: crate::control::Control) {
    let spawned = std::thread::Builder::new()
        .name("mlx5sim-events".into())
        .spawn(move || {
            let _b = emu::Busy::enter();
            pump(&node, control)
        });
    if let Err(e) = spawned {
        emu::say(&format!(
            "mlx5sim: no asynchronous events: cannot start their thread: {e}\n"
        ));
    }
}

fn pump(node: &Node, mut control: crate::control::Control) {
    let fd = match node.dev.async_event_fd() {
        Ok(fd) => fd,
        Err(e) => {
            emu::say(&format!("mlx5sim: no asynchronous events: {e}\n"));
            return;
        }
    };
    loop {
        sys::poll_in(fd, crate::node::CONTROL_POLL.as_millis() as i32);
        emu::with(|emu| {
            while let Some(e) = node.dev.poll_async_event() {
                route(emu, e);
            }
        });
        control.check(&node.fabric, &node.dev);
    }
}

/// One `read` of an event descriptor.
pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    loop {
        let step = emu::with(|emu| take_one(emu, fd, buf));
        match step {
            Step::Done(n) => return Ok(n),
            Step::Fail(e) => return Err(e),
            Step::Wait => {
                if sys::poll_in(fd, -1) < 0 && sys::errno() == libc::EINTR {
                    return Err(libc::EINTR);
                }
            }
        }
    }
}

enum Step {
    Done(usize),
    Fail(i32),
    Wait,
}

fn take_one(emu: &mut Emu, fd: i32, buf: &mut [u8]) -> Step {
    let Some(node) = emu.node.clone() else {
        return Step::Fail(libc::EBADF);
    };
    match emu.events.get_mut(&fd) {
        Some(EventFile::Channel(c)) => {
            if buf.len() < std::mem::size_of::<CompEventDesc>() {
                return Step::Fail(libc::EINVAL);
            }
            let (id, nonblock) = (c.id, c.nonblock);
            match node.dev.get_cq_event(id) {
                Ok(Some(CqId(cqn))) => {
                    let _ = node.dev.ack_cq_events(CqId(cqn), 1);
                    let mut handle = 0;
                    if let Some(&(ctx_fd, h)) = emu.cq_owner.get(&cqn) {
                        if let Some(Ok(cq)) = emu
                            .contexts
                            .get_mut(&ctx_fd)
                            .and_then(|c| c.u.as_mut())
                            .map(|u| u.get_mut(h, crate::context::cq_mut))
                        {
                            cq.comp_reported = cq.comp_reported.wrapping_add(1);
                            handle = cq.user_handle;
                        }
                    }
                    let d = CompEventDesc { cq_handle: handle };
                    buf[..8].copy_from_slice(d.as_bytes());
                    Step::Done(8)
                }
                Ok(None) if nonblock => Step::Fail(libc::EAGAIN),
                Ok(None) => Step::Wait,
                Err(e) => Step::Fail(e.errno()),
            }
        }
        Some(EventFile::Async(a)) => {
            if buf.len() < std::mem::size_of::<AsyncEventDesc>() {
                return Step::Fail(libc::EINVAL);
            }
            let Some(p) = a.queue.pop_front() else {
                return if a.nonblock {
                    Step::Fail(libc::EAGAIN)
                } else {
                    Step::Wait
                };
            };
            if a.queue.is_empty() {
                sys::eventfd_clear(fd);
            }
            let ctx_fd = a.ctx_fd;
            if let Some(h) = p.handle {
                count_async(emu, ctx_fd, h);
            }
            buf[..16].copy_from_slice(p.desc.as_bytes());
            Step::Done(16)
        }
        None => Step::Fail(libc::EBADF),
    }
}

/// An asynchronous event of object `h` was read: count it for the destroy response.
fn count_async(emu: &mut Emu, ctx_fd: i32, h: u32) {
    let Some(o) = emu
        .contexts
        .get_mut(&ctx_fd)
        .and_then(|c| c.u.as_mut())
        .and_then(|u| u.objects.get_mut(&h))
    else {
        return;
    };
    match o {
        crate::context::Object::Cq(c) => c.async_reported = c.async_reported.wrapping_add(1),
        crate::context::Object::Qp(q) => q.events_reported = q.events_reported.wrapping_add(1),
        crate::context::Object::Srq(s) => s.events_reported = s.events_reported.wrapping_add(1),
        _ => {}
    }
}

/// `FIONBIO` / `F_SETFL`'s `O_NONBLOCK` on an event descriptor.
pub fn set_nonblocking(emu: &mut Emu, fd: i32, on: bool) {
    match emu.events.get_mut(&fd) {
        Some(EventFile::Channel(c)) => c.nonblock = on,
        Some(EventFile::Async(a)) => a.nonblock = on,
        None => {}
    }
}

/// `fcntl` on an event descriptor: `F_GETFL` shows the program's `O_NONBLOCK`, `F_SETFL` keeps
/// it (the other flags go to the descriptor); other commands are the C library's (`None`).
pub fn fcntl(fd: i32, cmd: i32, arg: libc::c_ulong) -> Option<i32> {
    match cmd {
        libc::F_GETFL => {
            let real = sys::fcntl(fd, libc::F_GETFL, 0);
            if real < 0 {
                return Some(real);
            }
            let nb = emu::with(|emu| match emu.events.get(&fd) {
                Some(EventFile::Channel(c)) => c.nonblock,
                Some(EventFile::Async(a)) => a.nonblock,
                None => real & libc::O_NONBLOCK != 0,
            });
            Some(if nb {
                real | libc::O_NONBLOCK
            } else {
                real & !libc::O_NONBLOCK
            })
        }
        libc::F_SETFL => {
            let want = arg as i32;
            emu::with(|emu| set_nonblocking(emu, fd, want & libc::O_NONBLOCK != 0));
            Some(sys::fcntl(
                fd,
                libc::F_SETFL,
                (want | libc::O_NONBLOCK) as libc::c_ulong,
            ))
        }
        _ => None,
    }
}

/// `close` of an event descriptor.
pub fn close(emu: &mut Emu, fd: i32) -> Result<(), i32> {
    match emu.events.get_mut(&fd) {
        Some(EventFile::Async(_)) => {
            emu.events.remove(&fd);
            crate::fds::set_event(fd, false);
            for c in emu.contexts.values_mut() {
                if let Some(u) = c.u.as_mut() {
                    if u.async_fd == Some(fd) {
                        u.async_fd = None;
                    }
                }
            }
            if sys::close(fd) != 0 {
                return Err(sys::errno());
            }
            Ok(())
        }
        Some(EventFile::Channel(c)) => {
            // The device owns the eventfd: destroying the channel closes it. With CQs still
            // on it (the kernel keeps the channel alive for them), it goes with the last one.
            let id = c.id;
            c.closed = true;
            crate::fds::set_event(fd, false);
            if let Some(n) = emu.node.clone() {
                if n.dev.destroy_comp_channel(id).is_ok() {
                    emu.events.remove(&fd);
                }
            }
            Ok(())
        }
        None => Err(libc::EBADF),
    }
}

/// A CQ on channel `fd` was destroyed: a channel the program already closed goes too.
pub fn release_channel(emu: &mut Emu, node: &Node, fd: i32) {
    if let Some(EventFile::Channel(c)) = emu.events.get(&fd) {
        if c.closed && node.dev.destroy_comp_channel(c.id).is_ok() {
            emu.events.remove(&fd);
        }
    }
}
