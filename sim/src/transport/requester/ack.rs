//! Responses to the requester (IBTA Vol 1 §9.7.5): ACKs, NAKs and RNR NAKs, READ responses
//! and atomic ACKs, and the implied NAK of a response past an unanswered READ/atomic.

use mlx5_cq::{
    SYNDROME_LOCAL_PROT_ERR, SYNDROME_REMOTE_ACCESS_ERR, SYNDROME_REMOTE_INVAL_REQ_ERR,
    SYNDROME_REMOTE_OP_ERR, SYNDROME_RNR_RETRY_EXC_ERR,
};
use mlx5_hw::QpState;

use super::memory::scatter;
use super::retry::{fail_pending, retry, Cause};
use super::segment::pump;
use super::{restart_timer, retire, Expect};
use crate::counters::CounterId;
use crate::ctx::Ctx;
use crate::qp::Qp;
use crate::transport::Frame;
use crate::wire::{NakCode, Operation, Psn, RnrTimer, Syndrome};

/// Handle a response packet (ACK, NAK, READ response, atomic ACK) for this requester.
pub fn on_response(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    if !qp.qp_type.is_reliable()
        || !matches!(qp.state(), QpState::Rts | QpState::Sqd | QpState::Sqe)
    {
        ctx.counters.inc(CounterId::RxDropped);
        return;
    }
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    let op = pkt.bth.opcode.operation();
    // A response must name a PSN of an outstanding request (IBTA §9.7.5.1.1: responses
    // outside [oldest unacknowledged, next PSN) are ghosts or duplicates and are ignored).
    let lo = qp
        .req
        .outstanding
        .iter()
        .find(|p| !p.done && p.npsn > 0)
        .map(|p| p.first_psn);
    if !lo.is_some_and(|lo| psn.in_range(lo, qp.req.psn)) {
        ctx.counters.inc(CounterId::DuplicateResponse);
        return;
    }
    if let Some(aeth) = pkt.aeth {
        match aeth.syndrome {
            Syndrome::Ack { .. } => {}
            Syndrome::RnrNak(timer) => return rnr_nak(qp, ctx, psn, timer),
            Syndrome::Nak(code) => return nak(qp, ctx, psn, code),
        }
    }
    match op {
        Operation::Acknowledge => {
            ack_upto(qp, ctx, psn);
        }
        Operation::RdmaReadResponseFirst
        | Operation::RdmaReadResponseMiddle
        | Operation::RdmaReadResponseLast
        | Operation::RdmaReadResponseOnly => read_response(qp, ctx, frame),
        Operation::AtomicAcknowledge => atomic_ack(qp, ctx, frame),
        _ => ctx.counters.inc(CounterId::RxDropped),
    }
}

/// An RNR NAK (IBTA Vol 1 §9.7.5.2.8): what precedes its PSN is acknowledged; the requester
/// waits the timer it names and resends from it, up to `rnr_retry` times (7: forever). It
/// answers the request at its PSN, so the transport retries are whole again (`retry.rs`).
pub(super) fn rnr_nak(qp: &mut Qp, ctx: &mut Ctx, psn: Psn, timer: RnrTimer) {
    // mlx5 `rnr_nak_retry_err`: RNR NAKs received (the one that exceeds `rnr_retry` too).
    ctx.counters.inc(CounterId::RnrNakRetryErr);
    ack_upto(qp, ctx, psn.sub(1));
    if qp.state() == QpState::Error {
        return;
    }
    if qp.attr.rnr_retry != 7 {
        if qp.req.rnr_left == 0 {
            ctx.counters.inc(CounterId::ReqRnrRetriesExceeded);
            fail_pending(qp, ctx, psn, SYNDROME_RNR_RETRY_EXC_ERR);
            return;
        }
        qp.req.rnr_left -= 1;
    }
    qp.req.retries_left = qp.attr.retry_cnt;
    qp.req.retrying_from = None;
    qp.req.timer = None;
    qp.req.rnr_until = Some((ctx.now + timer.duration().as_nanos() as u64, psn));
}

/// A NAK (IBTA Vol 1 §9.7.5.2): what precedes its PSN is acknowledged; a PSN sequence error
/// resends from it, the others fail the request with the matching syndrome.
pub(super) fn nak(qp: &mut Qp, ctx: &mut Ctx, psn: Psn, code: NakCode) {
    let resent = ack_upto(qp, ctx, psn.sub(1));
    if qp.state() == QpState::Error {
        return;
    }
    let syndrome = match code {
        NakCode::PsnSequenceError => {
            // mlx5 `packet_seq_err`: NAK sequence errors received (also those an RNR wait
            // makes the requester ignore).
            ctx.counters.inc(CounterId::PacketSeqErr);
            if qp.req.rnr_until.is_none() && !resent {
                retry(qp, ctx, psn, Cause::SeqNak);
            }
            return;
        }
        NakCode::InvalidRequest | NakCode::InvalidRdRequest => SYNDROME_REMOTE_INVAL_REQ_ERR,
        NakCode::RemoteAccessError => SYNDROME_REMOTE_ACCESS_ERR,
        NakCode::RemoteOperationalError => SYNDROME_REMOTE_OP_ERR,
    };
    fail_pending(qp, ctx, psn, syndrome);
}

/// An atomic ACK: the original value goes to the request's local buffer and the request
/// completes.
pub(super) fn atomic_ack(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    let Some(pos) = pending_at(qp, psn) else {
        ctx.counters.inc(CounterId::DuplicateResponse);
        return;
    };
    let first = qp.req.outstanding[pos].first_psn;
    if ack_upto(qp, ctx, first.sub(1)) {
        // Implied NAK (IBTA Vol 1 §9.7.5.1.5): an earlier READ/atomic is unanswered,
        // so everything from it was requested again, this atomic included, whose
        // result the responder returns again from its replay table. Taking it now
        // would free a READ/atomic credit while the earlier one is outstanding, and
        // the requester could then have more in flight than the responder's
        // `max_dest_rd_atomic` resources remember (rxe's completer likewise retries
        // and discards a response past an unanswered READ, `rxe_comp.c` `check_psn`).
        return;
    }
    // Earlier requests may have retired (or the QP failed): look it up again.
    let Some(pos) = pending_at(qp, psn) else {
        return;
    };
    let (local, size) = match &qp.req.outstanding[pos].expect {
        Expect::Atomic { local, size } => (*local, *size),
        _ => {
            ctx.counters.inc(CounterId::UnexpectedResponse);
            return;
        }
    };
    let orig = pkt.atomic_ack_eth.map(|a| a.orig).unwrap_or(0);
    // The reply in the device's atomic byte order: 8-byte per the mode, 4-byte (masked)
    // big-endian ([`crate::wqe::AtomicEndianness::reply`], `docs/sources.md` §3).
    let data = ctx.port.atomic_endianness.reply(orig, size);
    if !scatter(qp, ctx, &[local], 0, &data) {
        let p = &qp.req.outstanding[pos];
        let at = p.first_psn;
        fail_pending(qp, ctx, at, SYNDROME_LOCAL_PROT_ERR);
        return;
    }
    qp.req.outstanding[pos].done = true;
    qp.req.retrying_from = None;
    qp.req.retries_left = qp.attr.retry_cnt;
    retire(qp, ctx);
    restart_timer(qp, ctx);
}

/// Mark requests acknowledged up to and including PSN `upto`.
///
/// An ACK that covers a READ or atomic whose response has not arrived means the response was
/// lost (the responder executes in order): an implied NAK (IBTA Vol 1 §9.7.5.1.5), counted as
/// mlx5's `implied_nak_seq_err`, and the requester resends from that request.
/// Returns whether an implied NAK resent requests.
pub(super) fn ack_upto(qp: &mut Qp, ctx: &mut Ctx, upto: Psn) -> bool {
    let mut progressed = false;
    let mut partial = false;
    let mut implied = None;
    for p in qp.req.outstanding.iter_mut() {
        if p.done {
            continue;
        }
        if p.npsn > 0 && p.last_psn().is_after(upto) {
            // An ACK inside a SEND/WRITE message (AckReq every ACK_EVERY packets) moves the
            // window; the message completes with the ACK of its last packet.
            if p.msg.is_some() && p.contains(upto) {
                let a = p.first_psn.distance_to(upto) as u32 + 1;
                if a > p.acked {
                    p.acked = a;
                    partial = true;
                }
            }
            break;
        }
        if p.expect != Expect::Ack {
            implied = Some(p.first_psn);
            break;
        }
        p.done = true;
        progressed = true;
    }
    if progressed {
        qp.req.retrying_from = None;
        qp.req.retries_left = qp.attr.retry_cnt;
        qp.req.rnr_left = qp.attr.rnr_retry;
        retire(qp, ctx);
        restart_timer(qp, ctx);
    } else if partial {
        qp.req.retrying_from = None;
        qp.req.retries_left = qp.attr.retry_cnt;
        qp.req.rnr_left = qp.attr.rnr_retry;
        restart_timer(qp, ctx);
    }
    if (progressed || partial) && implied.is_none() {
        pump(qp, ctx);
    }
    if let Some(first) = implied {
        ctx.counters.inc(CounterId::ImpliedNakSeqErr);
        retry(qp, ctx, first, Cause::Implied);
    }
    implied.is_some()
}

/// The first PSN of the oldest READ/atomic still unanswered that was sent before PSN `first`.
pub(super) fn unanswered_before(qp: &Qp, first: Psn) -> Option<Psn> {
    qp.req
        .outstanding
        .iter()
        .take_while(|p| p.first_psn.is_before(first))
        .find(|p| !p.done && p.is_rd_atomic())
        .map(|p| p.first_psn)
}

/// The outstanding request, not yet answered, whose PSN range holds `psn`.
pub(super) fn pending_at(qp: &Qp, psn: Psn) -> Option<usize> {
    qp.req
        .outstanding
        .iter()
        .position(|p| p.contains(psn) && !p.done)
}

pub(super) fn read_response(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    let Some(pos) = pending_at(qp, psn) else {
        ctx.counters.inc(CounterId::DuplicateResponse);
        return;
    };
    let first = qp.req.outstanding[pos].first_psn;
    if pkt.aeth.is_some() {
        if ack_upto(qp, ctx, first.sub(1)) {
            // An earlier READ/atomic lost its response and everything from it was resent,
            // this READ included: its responses will come again.
            return;
        }
    } else if let Some(from) = unanswered_before(qp, first) {
        // A middle response (no AETH, so it acknowledges nothing) past an unanswered
        // READ/atomic: the same implied NAK (IBTA Vol 1 §9.7.5.1.5).
        ctx.counters.inc(CounterId::ImpliedNakSeqErr);
        retry(qp, ctx, from, Cause::Implied);
        return;
    }
    let Some(pos) = pending_at(qp, psn) else {
        return;
    };
    let Some(path) = qp.path else { return };
    let (local, first) = match &qp.req.outstanding[pos].expect {
        Expect::Read { local, .. } => (local.clone(), qp.req.outstanding[pos].first_psn),
        _ => {
            ctx.counters.inc(CounterId::UnexpectedResponse);
            return;
        }
    };
    let expected = qp.req.outstanding[pos].next_resp;
    if psn != expected {
        if psn.is_before(expected) {
            // A response already received (a duplicate or the replay of a resent READ).
            ctx.counters.inc(CounterId::DuplicateResponse);
        } else {
            // A response is missing: responses of one READ come in order (IBTA Vol 1
            // §9.7.5.1.5), so request the READ again, once per gap.
            ctx.counters.inc(CounterId::OutOfSequence);
            if !qp.req.outstanding[pos].gap_resent {
                qp.req.outstanding[pos].gap_resent = true;
                retry(qp, ctx, first, Cause::Implied);
            }
        }
        return;
    }
    qp.req.outstanding[pos].next_resp = psn.next();
    qp.req.outstanding[pos].gap_resent = false;
    let offset = first.distance_to(psn) as u64 * path.mtu as u64;
    if !scatter(qp, ctx, &local, offset, &pkt.payload) {
        fail_pending(qp, ctx, first, SYNDROME_LOCAL_PROT_ERR);
        return;
    }
    if pkt.bth.opcode.position().ends_message() {
        qp.req.outstanding[pos].done = true;
        qp.req.retrying_from = None;
        qp.req.retries_left = qp.attr.retry_cnt;
        retire(qp, ctx);
        restart_timer(qp, ctx);
    } else {
        // A response in sequence restarts the timer (IBTA Vol 1 §9.7.6.1.3: it watches for a
        // response that does not come), so a long READ, whose responses take longer than the
        // ACK timeout to stream, does not time out while they arrive; the retry count comes
        // back only with the whole READ, so a READ resent again and again still ends.
        restart_timer(qp, ctx);
    }
}
