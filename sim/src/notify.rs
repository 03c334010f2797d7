//! The software ConnectX's event file descriptors: completion channels and the asynchronous
//! event queue.
//!
//! Each is an eventfd (`eventfd(2)`, non-blocking) kept readable exactly while its queue holds
//! something: an event is queued and the eventfd written under the fabric's lock, and taking
//! the last one resets the eventfd. A program can therefore wait on it with `poll(2)`,
//! level- or edge-triggered epoll or a tokio `AsyncFd`, as on the fds of libibverbs (a
//! completion channel's fd is readable while the kernel's event queue of that channel is not
//! empty, `ib_uverbs_event_poll` in `drivers/infiniband/core/uverbs_main.c`).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};

use mlx5_hw::AsyncEvent;

/// A non-blocking eventfd.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with counter 0; `None` if the process is out of file descriptors.
    pub fn new() -> Option<EventFd> {
        // SAFETY: plain syscall; the returned descriptor is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Some(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Make it readable (add 1 to the counter; wakes every `poll`/epoll waiter).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to an eventfd we own. It cannot fail short
        // of a counter at 2^64 - 2, which 1 per event never reaches.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Make it unreadable (read and so reset the counter; nothing happens if it was 0).
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a live u64 from a non-blocking eventfd we own.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A completion channel (`struct ibv_comp_channel`): the CQs whose completion event fired, in
/// firing order, behind one eventfd. Shared (`Arc`) between the device's channel table and
/// every CQ attached to it.
#[derive(Debug)]
pub struct CompChannel {
    fd: EventFd,
    queue: Mutex<VecDeque<u32>>,
}

impl CompChannel {
    /// A channel with nothing queued; `None` if out of file descriptors.
    pub fn new() -> Option<Arc<CompChannel>> {
        Some(Arc::new(CompChannel {
            fd: EventFd::new()?,
            queue: Mutex::new(VecDeque::new()),
        }))
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<u32>> {
        // Every update is a single push or pop: a poisoned lock still holds a valid queue.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The eventfd: readable while an event is queued.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Queue a completion event of CQ `cqn` (the kernel queues one entry per event, so a CQ
    /// armed and fired twice before anyone reads has two, `ib_uverbs_comp_handler`).
    pub fn post(&self, cqn: u32) {
        self.queue().push_back(cqn);
        self.fd.signal();
    }

    /// Take the oldest event: the CQN it is for.
    pub fn take(&self) -> Option<u32> {
        let mut q = self.queue();
        let cqn = q.pop_front();
        if q.is_empty() {
            self.fd.clear();
        }
        cqn
    }

    /// Discard the events of a CQ being destroyed (the kernel frees a destroyed CQ's queued
    /// events, `ib_uverbs_release_ucq`).
    pub fn forget(&self, cqn: u32) {
        let mut q = self.queue();
        q.retain(|&c| c != cqn);
        if q.is_empty() {
            self.fd.clear();
        }
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.queue().len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A device's asynchronous events (`ibv_get_async_event`), with an eventfd readable while one
/// is pending (the context's `async_fd`).
#[derive(Debug)]
pub struct AsyncEvents {
    queue: VecDeque<AsyncEvent>,
    /// `None` when no eventfd could be created (out of file descriptors): the queue still
    /// works, only `async_event_fd` reports the error.
    fd: Option<EventFd>,
}

impl Default for AsyncEvents {
    fn default() -> Self {
        AsyncEvents {
            queue: VecDeque::new(),
            fd: EventFd::new(),
        }
    }
}

impl AsyncEvents {
    /// Raise an event.
    pub fn push_back(&mut self, e: AsyncEvent) {
        self.queue.push_back(e);
        if let Some(fd) = &self.fd {
            fd.signal();
        }
    }

    /// Take the oldest event.
    pub fn pop_front(&mut self) -> Option<AsyncEvent> {
        let e = self.queue.pop_front();
        if self.queue.is_empty() {
            if let Some(fd) = &self.fd {
                fd.clear();
            }
        }
        e
    }

    /// Events pending.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The eventfd, if one could be created.
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }
}
