//! Retransmission (IBTA Vol 1 §9.7.6): resending from a PSN after a NAK, an implied NAK or a
//! READ response gap, the local ACK timeout and the RNR wait, and failing the oldest request
//! when the retries are used up.
//!
//! Which events spend and which restore the two retry counters of the QP context
//! (`ibv_qp_attr.retry_cnt` and `rnr_retry`, 3 bits each):
//!
//! - **Spend one of `retry_cnt`**: every retransmission the requester starts on its own
//!   account: the local ACK timer expiring (IBTA Vol 1 §9.7.6.1.3, the transport timer), a NAK
//!   PSN sequence error (§9.7.5.2.1), an implied NAK (§9.7.5.1.5) and a gap in a READ's
//!   responses. With none left, the oldest request completes with RETRY_EXC_ERR (0x15) and
//!   the QP moves to Error. The same events retry in rxe (`rxe_comp.c` `rxe_completer`,
//!   `COMPST_ERROR_RETRY`) and qib (`qib_rc.c` `qib_restart_rc`).
//! - **Spend one of `rnr_retry`**: an RNR NAK (§9.7.5.2.8), except when `rnr_retry` is 7
//!   (forever); with none left, RNR_RETRY_EXC_ERR (0x16). An RNR NAK spends no transport retry
//!   (`rxe_comp.c` `COMPST_RNR_RETRY`, `qib_rc.c` `do_rc_ack`).
//! - **Restore both**: a response that makes progress, an ACK, READ response or atomic ACK
//!   that acknowledges or completes something new (rxe `reset_retry_counters`, qib
//!   `do_rc_ack` / `do_rc_completion`).
//! - **Restore `retry_cnt`**: an RNR NAK. It is the responder's answer to the request at its
//!   PSN (the request arrived and found no receive WQE), so the retransmissions made for that
//!   request were answered; `retry_cnt` bounds retransmissions nothing answers (a lost path or
//!   a dead peer, §9.7.6.1.3), and how long an RNR wait may last is `rnr_retry`'s alone
//!   (§9.7.5.2.8: 7 waits forever). Without this, scattered losses during a long RNR wait
//!   would add up to RETRY_EXC_ERR though every one of them was answered (issue 28: four XRC
//!   initiators on a small SRQ with 1 % loss, RETRY_EXC_ERR after 270 ms of RNR). rxe and qib
//!   do not give the retries back here; qib gives them back on every sequence NAK instead
//!   (`do_rc_ack`, after `qib_restart_rc`), which lets a path that always loses the same
//!   packet retry forever.
//!
//! A NAK sequence error always resends, once per NAK (unless the RNR timer runs: the RNR NAK
//! asked for the wait). The responder NAKs a gap once and then stays silent until the NAK'd
//! PSN arrives again (§9.7.5.2.1; `responder/mod.rs`), so a second NAK for the same PSN means
//! the responder saw that PSN again and could not take it: the RNR NAK it answered with was
//! lost, and only this NAK tells the requester to go on. Implied NAKs are different: every
//! later ACK of one round implies the same NAK, so one round retries once
//! ([`crate::qp::requester::Requester::retrying_from`], as qib's `RVT_R_RDMAR_SEQ` and rxe's
//! `started_retry`), until progress, an RNR NAK or a timeout starts a new round.

use mlx5_cq::SYNDROME_TRANSPORT_RETRY_EXC_ERR;
use mlx5_hw::{AsyncEvent, QpId, QpState};

use super::segment::pump;
use super::{restart_timer, retire};
use crate::counters::CounterId;
use crate::ctx::{fail_qp, send_cqe, Ctx};
use crate::qp::Qp;
use crate::wire::Psn;

/// What made the requester resend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cause {
    /// A NAK PSN sequence error: the responder's answer to one round, acted on every time.
    SeqNak,
    /// An implied NAK (a later response past an unanswered READ/atomic) or a gap in a READ's
    /// responses: every later response of the round implies it again, so a round retries
    /// once.
    Implied,
}

/// Resend from `from` (module docs: one of `retry_cnt` spent, RETRY_EXC_ERR when none is
/// left).
pub(super) fn retry(qp: &mut Qp, ctx: &mut Ctx, from: Psn, cause: Cause) {
    if cause == Cause::Implied && qp.req.retrying_from == Some(from) {
        return;
    }
    qp.req.retrying_from = Some(from);
    if qp.req.retries_left == 0 {
        ctx.counters.inc(CounterId::ReqTransportRetriesExceeded);
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
    restart_timer(qp, ctx);
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
            // A new round: the RNR NAK answered the last one.
            qp.req.retrying_from = None;
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
        ctx.counters.inc(CounterId::ReqTransportRetriesExceeded);
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
