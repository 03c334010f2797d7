//! The requester: turns send WQEs into packets and completes them.
//!
//! RC (IBTA Vol 1 §9.7 "Reliable service"): each request consumes PSNs (one per packet; a READ
//! as many as its response has packets, §9.7.3.1.3); the requester keeps every unacknowledged
//! request with its packets, completes requests in order when ACKs (coalesced, §9.7.5.1.1),
//! READ responses or atomic ACKs cover them, retransmits from a NAK'd PSN (PSN sequence error,
//! §9.7.5.2.1), from an unanswered READ/atomic that a later ACK covers (implied NAK,
//! §9.7.5.1.5) and from a READ whose responses show a gap, waits the RNR timer after an RNR NAK and retries up to `rnr_retry` times (7 =
//! forever, §9.7.5.2.8), retransmits after the local ACK timeout 4.096 µs × 2^timeout up to
//! `retry_cnt` times (§9.7.6.1.3), and completes a request with an error NAK with the matching
//! syndrome (REMOTE_INVAL_REQ 0x12, REMOTE_ACCESS 0x13, REMOTE_OP 0x14). At most
//! `max_rd_atomic` READ/atomic requests are outstanding (§9.7.8, `ibv_modify_qp(3)`; 0 acts as
//! 1 as on mlx5, whose QP context holds log2 of the depth), and a fenced WQE waits for them.
//! UC and UD (§9.8, §9.8.5): packets go out and the WQE completes when the last one is sent.
//!
//! Here: fetching and checking WQEs from the ring and flow control; building requests in
//! `segment.rs`, gather/scatter in `memory.rs`, responses in `ack.rs`, retransmission in
//! `retry.rs`.

mod ack;
mod memory;
mod retry;
mod segment;

pub use crate::qp::requester::{Expect, Msg, Pending, Requester};
pub use ack::on_response;
pub use memory::scatter;
pub use retry::timers;
pub use segment::pump;

use mlx5_cq::SYNDROME_LOCAL_QP_OP_ERR;
use mlx5_hw::{AsyncEvent, QpId, QpState};

use crate::bugs::DriverBugKind;
use crate::ctx::{enter_sqe, fail_qp, send_cqe, Ctx};
use crate::qp::Qp;
use crate::wire::local_ack_timeout;
use crate::wqe::{parse, ring_bytes, Ctrl, ParseLimits, SendWqe, WqeFault, WqeKind};

/// Request packets an RC requester keeps sent and unacknowledged (READ and atomic requests
/// count one each): the send window that bounds the device's memory. A multiple of
/// [`ACK_EVERY`], so the last packet of a full window requests an ACK.
pub const WINDOW: u32 = 128;

/// AckReq is set on every `ACK_EVERY`-th packet of a long RC message besides its last (as
/// rxe's requester does every `RXE_MAX_PKT_PER_ACK` packets, `rxe_req.c`; IBTA Vol 1 §9.7.2
/// leaves when to request an ACK to the requester), so the window moves before the message
/// ends.
pub const ACK_EVERY: u32 = 64;

/// The local ACK timeout of the QP (IBTA Vol 1 §9.7.6.1.3: 4.096 µs × 2^`timeout`, none for
/// 0), at least the device's floor for a peer in another process (`ctx.remote_ack_floor`, set
/// only while a fabric thread runs and the device reaches other processes; a QP whose
/// destination is its own port is not one).
fn ack_timeout(qp: &Qp, ctx: &Ctx) -> Option<u64> {
    let t = local_ack_timeout(qp.attr.timeout).map(|d| d.as_nanos() as u64)?;
    let remote = qp.path.is_some_and(|p| p.addr.dst_ip != ctx.port.ip);
    Some(if remote {
        t.max(ctx.remote_ack_floor)
    } else {
        t
    })
}

/// Start the local ACK timer from now, or stop it when nothing is outstanding.
fn restart_timer(qp: &mut Qp, ctx: &Ctx) {
    qp.req.timer = if qp.req.outstanding.is_empty() || !qp.qp_type.is_reliable() {
        None
    } else {
        ack_timeout(qp, ctx).map(|t| ctx.now + t)
    };
}

/// Execute posted WQEs while the QP is in RTS; returns whether anything was done.
pub fn progress(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    let mut work = false;
    for _ in 0..256 {
        if qp.state() != QpState::Rts || qp.sq_ci == qp.db.sq_known || qp.req.rnr_until.is_some() {
            break;
        }
        let index = qp.sq_ci;
        let (ctrl, bbs, parsed) = fetch(qp, ctx, index);
        let wqe = match parsed {
            Ok(w) => w,
            Err(f) => {
                local_failure(qp, ctx, index, ctrl.opcode, bbs, &f);
                return true;
            }
        };
        if must_wait(qp, &wqe) {
            break;
        }
        if qp.qp_type == mlx5_hw::QpType::Dci {
            // One target at a time: connect to this WQE's, or wait for the current one's
            // requests to be acknowledged.
            match crate::transport::dc::before_wqe(qp, ctx, &wqe) {
                Ok(crate::transport::dc::Gate::Go) => {}
                Ok(crate::transport::dc::Gate::Wait) => break,
                Err(f) => {
                    local_failure(qp, ctx, index, ctrl.opcode, bbs, &f);
                    return true;
                }
            }
        }
        if qp.sq_sig_all && !wqe.signaled() {
            ctx.bugs.report(ctx.dev, qp.qpn, DriverBugKind::SqSigAllNotApplied, format!(
                "WQE {index} lacks CQ_UPDATE in fm_ce_se although the QP was created with sq_sig_all (rdma-core ORs it into every WQE); completing it signaled"));
        }
        if matches!(qp.db.bf, Some((i, _)) if i == index) {
            qp.db.bf = None;
        }
        qp.sq_ci = qp.sq_ci.wrapping_add(bbs);
        work = true;
        if let Err(f) = segment::execute(qp, ctx, &wqe, index) {
            // sq_ci already moved past the WQE; report it and fail the QP.
            report_local(qp, ctx, index, wqe.ctrl.opcode, &f);
            return true;
        }
    }
    work
}

/// Fetch and parse the WQE at `index`, from the BlueFlame copy the doorbell left for it or
/// from the ring: its ctrl segment, the basic blocks it occupies (at least 1, at most what is
/// posted) and the WQE or why it cannot run.
fn fetch(qp: &Qp, ctx: &Ctx, index: u16) -> (Ctrl, u16, Result<SendWqe, WqeFault>) {
    let avail = qp.db.sq_known.wrapping_sub(index);
    let bf = match &qp.db.bf {
        Some((i, b)) if *i == index => Some(b.clone()),
        _ => None,
    };
    let head = match &bf {
        Some(b) => b[..16].to_vec(),
        None => ring_bytes(&qp.buf, qp.sq_off(), qp.geom.sq_wqe_cnt, index, 16),
    };
    let ctrl = Ctrl::parse(&head);
    let ring_bytes_total = qp.geom.sq_wqe_cnt as usize * 64;
    let nbytes = ctrl.ds as usize * 16;
    let bbs = ctrl.bbs().min(avail).max(1);
    let fault = if ctrl.ds == 0 || ctrl.ds > 0x3f {
        Some(format!("DS {} is not a WQE size (1..=63)", ctrl.ds))
    } else if nbytes > ring_bytes_total {
        Some(format!(
            "DS {} ({nbytes} bytes) is larger than the {ring_bytes_total}-byte SQ",
            ctrl.ds
        ))
    } else if ctrl.bbs() > avail {
        Some(format!(
            "the WQE's {} basic blocks run past the doorbell record ({avail} posted)",
            ctrl.bbs()
        ))
    } else {
        None
    };
    let parsed = match fault {
        Some(why) => Err(WqeFault {
            syndrome: SYNDROME_LOCAL_QP_OP_ERR,
            why,
        }),
        None => {
            let bytes = match &bf {
                Some(b) if b.len() >= nbytes => b[..nbytes].to_vec(),
                _ => ring_bytes(&qp.buf, qp.sq_off(), qp.geom.sq_wqe_cnt, index, nbytes),
            };
            let lim = ParseLimits {
                qp_type: qp.qp_type,
                qpn: qp.qpn,
                max_send_sge: qp.geom.cap.max_send_sge,
                ud_mtu: ctx.port.mtu.bytes(),
            };
            parse(&bytes, &lim)
        }
    };
    (ctrl, bbs, parsed)
}

/// RC flow control: a READ/atomic waits while `max_rd_atomic` of them are unanswered (0 acts
/// as 1), a fenced WQE while any is.
fn must_wait(qp: &Qp, wqe: &SendWqe) -> bool {
    let rd = qp
        .req
        .outstanding
        .iter()
        .filter(|p| p.is_rd_atomic() && !p.done)
        .count();
    let is_rd = matches!(wqe.kind, WqeKind::Read { .. } | WqeKind::Atomic { .. });
    qp.qp_type.is_reliable()
        && ((is_rd && rd >= (qp.attr.max_rd_atomic.max(1)) as usize) || (wqe.fenced() && rd > 0))
}

fn report_local(qp: &mut Qp, ctx: &mut Ctx, index: u16, opcode: u8, f: &WqeFault) {
    tracing::warn!(device = ctx.dev, qpn = qp.qpn, index, syndrome = f.syndrome, why = %f.why, "send WQE failed");
    // Earlier outstanding requests stay outstanding; the error CQE must follow their
    // completions, so completed-but-unretired ones go first.
    retire(qp, ctx);
    let earlier: Vec<Pending> = qp.req.outstanding.drain(..).collect();
    for p in &earlier {
        send_cqe(
            qp,
            ctx,
            p.index,
            p.opcode,
            0,
            Some(mlx5_cq::SYNDROME_WR_FLUSH_ERR),
        );
    }
    send_cqe(qp, ctx, index, opcode, 0, Some(f.syndrome));
    if qp.qp_type.is_reliable() {
        fail_qp(qp, ctx, Some(AsyncEvent::QpFatal(QpId(qp.qpn))));
    } else {
        enter_sqe(qp, ctx);
    }
}

fn local_failure(qp: &mut Qp, ctx: &mut Ctx, index: u16, opcode: u8, bbs: u16, f: &WqeFault) {
    qp.sq_ci = qp.sq_ci.wrapping_add(bbs);
    if matches!(qp.db.bf, Some((i, _)) if i == index) {
        qp.db.bf = None;
    }
    report_local(qp, ctx, index, opcode, f);
}

/// Retire completed requests from the front, writing CQEs for the signaled ones.
pub fn retire(qp: &mut Qp, ctx: &mut Ctx) {
    while qp.req.outstanding.front().is_some_and(|p| p.done) {
        let Some(p) = qp.req.outstanding.pop_front() else {
            break;
        };
        if p.signaled {
            send_cqe(qp, ctx, p.index, p.opcode, p.byte_len, None);
        }
    }
}
