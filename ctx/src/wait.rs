//! How the waiting helpers ([`Cq::poll_until`], [`Cq::wait_for`], [`Cq::poll_blocking`]) wait
//! between polls that found nothing, and what they say when their deadline passes.
//!
//! ## Sleeping, not spinning
//!
//! After an empty poll a helper first polls again, yielding the core in between, for
//! [`SPIN`] (a completion that is microseconds away costs no system call); then it sleeps:
//!
//! - on the CQ's completion channel when the CQ has one of its own (no other CQ on it, no
//!   `AsyncChannel` serving it): arm, poll again, sleep on the channel's fd until an event or
//!   the deadline — the race-free wait of [`crate::channel`];
//! - else in `ppoll(2)` for a backoff that starts at [`MIN_SLEEP`] and doubles to
//!   [`MAX_SLEEP`] (a CQ without a channel signals nothing: the bound is how late a completion
//!   after a long wait is seen).
//!
//! Either sleep also watches the context's wake-up descriptors ([`crate::events`]), so a
//! device that reports `IBV_EVENT_DEVICE_FATAL` ends it at once with [`Error::DeviceFatal`](crate::Error::DeviceFatal)
//! rather than at the deadline. A 1-second wait so costs well under a tenth of the waiting
//! thread's CPU without a channel (one wake-up per millisecond) and next to nothing on a
//! channel (`ctx/tests/it/waiting.rs` measures it), where yielding in a loop cost a whole
//! core.
//!
//! ## Saying what happened
//!
//! A wait that times out lists the QPs it polled for and what each had outstanding, from the
//! data path's own counts: a QP with no receive posted and nothing sent is waiting for nothing
//! this side can complete; one with receives posted waits for the peer to send; one with sends
//! outstanding waits for the peer (or the link) to acknowledge; one that is not in RTR or RTS
//! moves nothing at all.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mlx5_hw::device::wait_any_readable;
use mlx5_hw::QpState;
use mlx5_qp::Resolve;

use crate::context::Context;
use crate::cq::Cq;
use crate::error::Result;

/// How long a helper polls, yielding between polls, before it sleeps.
pub const SPIN: Duration = Duration::from_micros(50);
/// The first backoff sleep of a helper on a CQ without a channel of its own.
pub const MIN_SLEEP: Duration = Duration::from_micros(10);
/// The longest backoff sleep: the bound on how late a completion on a CQ without a channel
/// of its own is seen.
pub const MAX_SLEEP: Duration = Duration::from_millis(1);

/// The state of one wait between its empty polls.
#[derive(Debug)]
pub(crate) struct Idle {
    since: Option<Instant>,
    backoff: Duration,
    /// The CQ was armed for this wait and no event has been taken since.
    armed: bool,
}

impl Idle {
    pub(crate) fn new() -> Idle {
        Idle {
            since: None,
            backoff: MIN_SLEEP,
            armed: false,
        }
    }

    /// One pause after a poll of `cq` that found nothing (module docs), ending by `deadline`.
    /// The caller polls again afterwards. [`crate::Error::DeviceFatal`] (with `got`, the
    /// completions the caller polled so far) once the device is dead.
    pub(crate) fn pause(
        &mut self,
        cq: &mut Cq,
        deadline: Instant,
        got: &[mlx5_qp::Wc],
    ) -> Result<()> {
        let ctx = cq.context().clone();
        ctx.check_alive(got)?;
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        // A deterministic fabric moves only when stepped: no use polling it again at once.
        if now.duration_since(since) < SPIN && !ctx.is_stepped() {
            std::thread::yield_now();
            return Ok(());
        }
        let left = deadline.saturating_duration_since(now);
        // Looked up each time: an AsyncEvents made or dropped meanwhile changes them.
        let mut fds = ctx.wake_fds();
        if let Some(ch) = cq.own_channel() {
            if !self.armed {
                // Arm, then the caller polls again before anything sleeps: a completion that
                // landed after the empty poll is found there (and fires the arm anyway).
                cq.arm(false);
                self.armed = true;
                return Ok(());
            }
            fds.push(ch.as_raw_fd());
            let ready = wait_any_readable(&fds, left)?;
            if ready.contains(&(fds.len() - 1)) {
                // The CQ is alone on the channel: every event is its own.
                while ch.take_event()?.is_some() {}
                self.armed = false;
            }
            return Ok(());
        }
        if wait_any_readable(&fds, self.backoff.min(left))?.is_empty() {
            self.backoff = (self.backoff * 2).min(MAX_SLEEP);
        }
        Ok(())
    }
}

/// What the QPs of `table` had outstanding when a wait timed out (module docs), then why the
/// device may not have moved.
pub(crate) fn stall_detail<R: Resolve + ?Sized>(table: &R, ctx: &Context) -> String {
    let mut srqs = HashMap::new();
    table.for_each_srq(&mut |s| {
        srqs.insert(s.srqn(), s.outstanding());
    });
    let mut parts = Vec::new();
    table.for_each_qp(&mut |qp| parts.push(describe(qp, &srqs)));
    if parts.is_empty() {
        parts.push("the table lists no QP to say what was outstanding".to_string());
    }
    if let Some(h) = ctx.stall_hint() {
        parts.push(h.to_string());
    }
    parts.join("; ")
}

/// One QP's part of [`stall_detail`].
fn describe(qp: &mlx5_qp::Qp, srqs: &HashMap<u32, u32>) -> String {
    let qpn = qp.qpn();
    let state = qp.state();
    match state {
        QpState::Rtr | QpState::Rts | QpState::Sqd => {}
        QpState::Error => {
            return format!(
                "QP {qpn:#x} is in Error: its work was flushed, and nothing more completes \
                 until it is recovered (Reset, then connected again)"
            )
        }
        QpState::Sqe => {
            return format!(
                "QP {qpn:#x} is in SQE: its sends were flushed and it sends nothing until \
                 moved back to RTS"
            )
        }
        s => {
            return format!(
                "QP {qpn:#x} is in {s}: it neither sends nor receives until it is connected \
                 (Init, RTR, RTS)"
            )
        }
    }
    let sends = qp.sq_outstanding_wrs();
    let (recvs, on) = match qp.srqn() {
        Some(n) => (srqs.get(&n).copied(), format!(" on SRQ {n:#x}")),
        None => (Some(qp.rq_outstanding()), String::new()),
    };
    if sends > 0 {
        return if qp.qp_type().is_reliable() {
            format!(
                "QP {qpn:#x} has {sends} send WR(s) outstanding that the peer has not \
                 acknowledged: is the peer's QP in RTR or RTS, its port up, the path between \
                 the two working?"
            )
        } else {
            format!(
                "QP {qpn:#x} has {sends} send WR(s) outstanding that the device has not sent \
                 (is the port up?)"
            )
        };
    }
    match recvs {
        Some(0) => format!(
            "QP {qpn:#x} has no send outstanding and no receive posted{on}: nothing on this \
             side can complete — post the receive (or the send) the wait is for"
        ),
        Some(n) => format!(
            "QP {qpn:#x} has {n} receive(s) posted{on} and nothing arrived for them: the peer \
             has not sent (or nothing it sent reached this side)"
        ),
        None => format!(
            "QP {qpn:#x} has no send outstanding and receives through SRQ {:#x}, which the \
             table does not hold (poll with the SRQ in the table to know what it holds)",
            qp.srqn().unwrap_or(0)
        ),
    }
}
