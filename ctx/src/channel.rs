//! Completion channels: one file descriptor that many CQs report their completion events to
//! (`struct ibv_comp_channel`), and the accounting verbs asks of every event taken from it.
//!
//! A [`CompChannel`] is made by [`Context::create_comp_channel`]; CQs are attached to it when
//! created ([`Context::create_cq_on`]). Each such [`Cq`](crate::Cq) holds the channel in an
//! `Arc`, so the device channel is destroyed only after every CQ on it is gone.
//!
//! ## The protocol, and who does which part
//!
//! The wait that never loses a wake-up ([`mlx5_hw::device`] module documentation): poll the
//! CQ until it is empty; arm it ([`Cq::arm`](crate::Cq::arm)); poll it again; only if that
//! found nothing, wait for the channel's fd ([`AsRawFd`] / [`AsFd`]) to be readable, take the
//! events ([`CompChannel::get_event`]) and poll again. A completion that lands between the
//! empty poll and the arm is found by the second poll, and the device fires at once for an arm
//! whose consumer index is behind its producer index (ConnectX PRM "CQ arming"), so it is never
//! lost either way.
//!
//! Verbs asks two things of every event taken, and this module does both, so a program cannot
//! get them wrong:
//!
//! - **The arm sequence number** advances once per event taken from the CQ (rdma-core's
//!   `mlx5_cq_event`, called by `ibv_get_cq_event`). [`CompChannel::get_event`] counts the
//!   events of each CQ; [`Cq::arm`](crate::Cq::arm) brings the data path's sequence number up
//!   to that count before it writes the arm doorbell. (Call `arm` on the owning
//!   [`Cq`](crate::Cq), not on the data path behind it: the data path's own `ack_event` is
//!   not needed and would count twice.)
//! - **Acknowledgements** (`ibv_ack_cq_events`): events are acknowledged to the device in
//!   batches of [`ACK_BATCH`] per CQ, whatever is left when the CQ is dropped (before its device
//!   CQ is destroyed: verbs refuses, or on a kernel waits forever in `ibv_destroy_cq`, for a CQ
//!   with events taken and not acknowledged), and on [`CompChannel::flush_acks`].
//!
//! Taking an event and counting it happen under one lock, and so do a CQ's last
//! acknowledgement and its destruction: an event taken on one thread while another drops the
//! CQ is either counted and acknowledged before the CQ goes, or discarded by the device with
//! it (`destroy_cq` discards a destroyed CQ's queued events), never left unacknowledged.
//!
//! ## One consumer per channel
//!
//! An event is taken once: whoever calls [`CompChannel::get_event`] learns which CQ fired, and
//! nobody else does (after it the fd is no longer readable). So a channel has one consumer —
//! one thread, or one task (`AsyncChannel` with the `tokio` feature) — that takes its events
//! and serves every CQ on it. Two consumers of one channel would steal each other's wake-ups
//! (the bug of libvalkey #301: draining from one path swallows the event another path waits
//! for). [`Cq::poll_blocking`](crate::Cq::poll_blocking), a blocking wait for a single CQ,
//! refuses a channel that other CQs share for that reason. Arm a CQ on the thread that takes
//! its channel's events (or after them): an arm races an event taken concurrently by another
//! thread over the sequence number, as in rdma-core.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlx5_hw::device::wait_readable;
use mlx5_hw::{ChannelId, CqId};

use crate::context::Context;
use crate::error::{Error, Result};

/// Events of one CQ acknowledged to the device in one call (`ibv_ack_cq_events(cq, n)`): one
/// system call (on verbs, a mutex and a condition variable) per this many events rather than
/// per event.
pub const ACK_BATCH: u32 = 16;

/// A completion channel. Cloning gives another handle; the device channel is destroyed when
/// the last handle and the last CQ attached to it are gone.
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    ctx: Context,
    id: ChannelId,
    fd: RawFd,
    attached: Mutex<HashMap<CqId, Attached>>,
    /// An async consumer (`AsyncChannel`) serves the channel: it alone takes the events.
    pub(crate) served: AtomicBool,
}

/// The event accounting of one CQ on the channel.
struct Attached {
    /// Events taken from the CQ so far (wrapping), shared with the owning CQ, which brings the
    /// data path's arm sequence number up to it before each arm.
    taken: Arc<AtomicU32>,
    /// Events taken and not yet acknowledged to the device.
    unacked: u32,
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // Every CQ holds the channel: none is attached any more.
        if let Err(e) = self.ctx.device().destroy_comp_channel(self.id) {
            tracing::warn!(target: "mlx5_ctx", channel = self.id.0, error = %e, "destroy_comp_channel failed");
        }
    }
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompChannel")
            .field("device", &self.inner.ctx.name())
            .field("id", &self.inner.id.0)
            .field("fd", &self.inner.fd)
            .field("cqs", &self.inner.lock().len())
            .finish()
    }
}

impl AsRawFd for CompChannel {
    /// The channel's fd: non-blocking, readable exactly while an event is queued.
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is the device channel's, open until `destroy_comp_channel`, which only
        // the `Drop` of `ChannelInner` calls; the borrow cannot outlive `self`, which holds it.
        unsafe { BorrowedFd::borrow_raw(self.inner.fd) }
    }
}

impl ChannelInner {
    fn lock(&self) -> MutexGuard<'_, HashMap<CqId, Attached>> {
        // Every update leaves the map consistent: a poisoned lock still holds a valid one.
        self.attached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Acknowledge what `a` has outstanding; on failure keep the count for the next try.
    fn ack(&self, cq: CqId, a: &mut Attached) -> Result<()> {
        if a.unacked > 0 {
            self.ctx.device().ack_cq_events(cq, a.unacked)?;
            a.unacked = 0;
        }
        Ok(())
    }
}

impl CompChannel {
    pub(crate) fn new(ctx: &Context) -> Result<CompChannel> {
        let dev = ctx.device();
        let id = dev.create_comp_channel()?;
        let fd = match dev.comp_channel_fd(id) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = dev.destroy_comp_channel(id);
                return Err(e.into());
            }
        };
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                ctx: ctx.clone(),
                id,
                fd,
                attached: Mutex::new(HashMap::new()),
                served: AtomicBool::new(false),
            }),
        })
    }

    /// The device handle.
    pub fn id(&self) -> ChannelId {
        self.inner.id
    }

    /// The context the channel belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// CQs attached to the channel now.
    pub fn cq_count(&self) -> usize {
        self.inner.lock().len()
    }

    /// Whether `other` is a handle to the same channel.
    pub fn same_channel(&self, other: &CompChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Record a CQ just created on this channel; returns its count of events taken.
    pub(crate) fn attach(&self, cq: CqId) -> Arc<AtomicU32> {
        let taken = Arc::new(AtomicU32::new(0));
        self.inner.lock().insert(
            cq,
            Attached {
                taken: taken.clone(),
                unacked: 0,
            },
        );
        taken
    }

    /// Acknowledge `cq`'s outstanding events, then destroy it with `destroy`, under the lock
    /// that taking an event holds (module docs).
    pub(crate) fn detach_and_destroy(
        &self,
        cq: CqId,
        destroy: impl FnOnce() -> mlx5_hw::Result<()>,
    ) -> Result<()> {
        let mut map = self.inner.lock();
        if let Some(mut a) = map.remove(&cq) {
            if let Err(e) = self.inner.ack(cq, &mut a) {
                map.insert(cq, a);
                return Err(e);
            }
        }
        Ok(destroy()?)
    }

    /// Take the next completion event queued on the channel, without blocking: the CQ that
    /// fired (compare with [`Cq::id`](crate::Cq::id)), or `None` when nothing is queued (the
    /// fd is then not readable). The event is counted for the CQ's next arm and acknowledged
    /// in a batch (module docs); the CQ is disarmed until armed again.
    ///
    /// Refused while an `AsyncChannel` (feature `tokio`) serves the channel: it is the
    /// channel's one consumer, and an event taken here would never wake it.
    pub fn get_event(&self) -> Result<Option<CqId>> {
        if self.inner.served.load(Ordering::Acquire) {
            return Err(Error::Events(format!(
                "completion channel {:#x} is served by an AsyncChannel, which must take its \
                 events itself (one consumer per channel): an event taken here would never \
                 wake it",
                self.inner.id.0
            )));
        }
        self.take_event()
    }

    /// [`CompChannel::get_event`] for the channel's consumer.
    pub(crate) fn take_event(&self) -> Result<Option<CqId>> {
        let inner = &*self.inner;
        let mut map = inner.lock();
        let Some(cq) = inner.ctx.device().get_cq_event(inner.id)? else {
            return Ok(None);
        };
        match map.get_mut(&cq) {
            Some(a) => {
                a.taken.fetch_add(1, Ordering::Release);
                a.unacked += 1;
                if a.unacked >= ACK_BATCH {
                    if let Err(e) = inner.ack(cq, a) {
                        // Kept for the next batch or the CQ's drop; the event is still the
                        // caller's.
                        tracing::warn!(target: "mlx5_ctx", cq = cq.0, error = %e, "ack_cq_events failed");
                    }
                }
            }
            None => {
                // A CQ attached through the device directly, not through this crate: nobody
                // here will drop it, so acknowledge at once rather than block its destroy.
                if let Err(e) = inner.ctx.device().ack_cq_events(cq, 1) {
                    tracing::warn!(target: "mlx5_ctx", cq = cq.0, error = %e, "ack_cq_events failed");
                }
            }
        }
        Ok(Some(cq))
    }

    /// [`CompChannel::get_event`], waiting up to `timeout` for the fd to become readable
    /// (`poll(2)`). Steps a deterministic software ConnectX first ([`Context::progress`]).
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<CqId>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.inner.ctx.progress();
            if let Some(cq) = self.get_event()? {
                return Ok(Some(cq));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !wait_readable(self.inner.fd, left)? {
                // One last look: a deterministic fabric moves only when stepped.
                self.inner.ctx.progress();
                return self.get_event();
            }
        }
    }

    /// Acknowledge every event taken and not yet acknowledged, on every CQ of the channel
    /// (they are otherwise acknowledged in batches of [`ACK_BATCH`], and when their CQ is
    /// dropped).
    pub fn flush_acks(&self) -> Result<()> {
        let mut map = self.inner.lock();
        for (cq, a) in map.iter_mut() {
            self.inner.ack(*cq, a)?;
        }
        Ok(())
    }

    /// Events taken from `cq` and not yet acknowledged to the device (0 for a CQ not on this
    /// channel).
    pub fn unacked(&self, cq: CqId) -> u32 {
        self.inner.lock().get(&cq).map_or(0, |a| a.unacked)
    }
}
