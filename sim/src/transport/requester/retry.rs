//! Retransmission (IBTA Vol 1 §9.7.6): resending from a PSN after a NAK, an implied NAK or a
//! READ response gap, the local ACK timeout and the RNR wait, and failing the oldest request
//! when the retries are used up.

use mlx5_cq::SYNDROME_TRANSPORT_RETRY_EXC_ERR;
use mlx5_hw::{AsyncEvent, QpId, QpState};

use super::segment::pump;
use super::{restart_timer, retire};
use crate::counters::CounterId;
use crate::ctx::{fail_qp, send_cqe, Ctx};
use crate::qp::Qp;
use crate::wire::Psn;

/// Resend from `from` after a NAK, an implied NAK or a READ response gap; each such retry
/// without progress in between uses one of `retry_cnt` (as rxe's completer does for sequence
/// errors, `rxe_comp.c`), so a path that keeps losing the same packet ends in RETRY_EXC_ERR
/// instead of looping.
pub(super) fn retry(qp: &mut Qp, ctx: &mut Ctx, from: Psn) {
    if qp.req.retrying_from == Some(from) {
        return;
    }
    qp.req.retrying_from = Some(from);
    if qp.req.retries_left == 0 {
        fail_pending(qp, ctx, from, SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        return;
    }
    qp.req.retries_left -= 1;
    resend_from(qp, ctx, from);
}

pub(super) fn resend_from(qp: &mut Qp, ctx: &mut Ctx, from: Psn) {
    for p in qp.req.outstanding.iter_mut() {
        if p.done {
            continue;
        }
        if p.is_rd_atomic() {
            if p.contains(from) || p.first_psn.is_after(from) {
                // The whole READ is requested again: its responses restart at its first PSN.
                p.next_resp = p.first_psn;
                p.sent = 0;
            }
        } else if p.contains(from) {
            p.sent = p.sent.min(p.first_psn.distance_to(from) as u32);
            p.acked = p.acked.min(p.sent);
        } else if p.first_psn.is_after(from) {
            p.sent = 0;
            p.acked = 0;
        }
    }
    restart_timer(qp, ctx.now);
    pump(qp, ctx);
}

/// Fail the oldest request that is not complete with `syndrome` and move the QP to Error
/// (which flushes the rest). Requests before it that are complete get their CQEs first; a
/// READ or atomic is never completed without its response.
pub(super) fn fail_pending(qp: &mut Qp, ctx: &mut Ctx, at: Psn, syndrome: u8) {
    retire(qp, ctx);
    if let Some(p) = qp.req.outstanding.pop_front() {
        if !p.contains(at) {
            tracing::debug!(
                device = ctx.dev,
                qpn = qp.qpn,
                at = at.get(),
                first = p.first_psn.get(),
                "the oldest incomplete request takes the error"
            );
        }
        send_cqe(qp, ctx, p.index, p.opcode, 0, Some(syndrome));
    }
    fail_qp(qp, ctx, Some(AsyncEvent::QpFatal(QpId(qp.qpn))));
}

/// Fire expired timers (ACK timeout, RNR wait); returns whether anything happened.
pub fn timers(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    if !matches!(qp.state(), QpState::Rts | QpState::Sqd) {
        return false;
    }
    if let Some((until, psn)) = qp.req.rnr_until {
        if ctx.now >= until {
            qp.req.rnr_until = None;
            resend_from(qp, ctx, psn);
            return true;
        }
        return false;
    }
    let Some(deadline) = qp.req.timer else {
        return false;
    };
    if ctx.now < deadline || qp.req.outstanding.is_empty() {
        return false;
    }
    ctx.counters.inc(CounterId::LocalAckTimeoutErr);
    qp.req.retrying_from = None;
    if qp.req.retries_left == 0 {
        let at = qp
            .req
            .outstanding
            .iter()
            .find(|p| !p.done)
            .map(|p| p.first_psn)
            .unwrap_or(qp.req.psn);
        fail_pending(qp, ctx, at, SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        return true;
    }
    qp.req.retries_left -= 1;
    let from = qp
        .req
        .outstanding
        .iter()
        .find(|p| !p.done)
        .map(|p| p.first_psn)
        .unwrap_or(qp.req.psn);
    resend_from(qp, ctx, from);
    true
}
