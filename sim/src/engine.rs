//! One step of one QP ([`process_qp`]): its doorbells, its responder's queued responses and
//! coalesced ACK, its requester's timers and send window, then new send work, flushing or the
//! SQ-drained event, by state. The context it runs in and the completion and error paths it
//! shares with the transport are in [`crate::ctx`] (re-exported here).

pub use crate::counters::Counters;
pub use crate::ctx::{
    enter_sqe, fail_qp, flush, flush_sq, recv_err_cqe, send_cqe, vendor_syndrome, Ctx, Port,
};

use mlx5_hw::{AsyncEvent, QpId, QpState, QpType};

use crate::qp::Qp;
use crate::transport::{requester, responder};

/// One step of a QP: doorbells, timers, then send work or flushing. Returns whether anything
/// happened.
pub fn process_qp(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    let mut work = if qp.bf_shared() {
        crate::doorbell::shared::follow(qp, ctx.threaded, ctx.dev, ctx.bugs)
    } else if ctx.threaded {
        crate::doorbell::threaded::scan(qp, ctx.dev, ctx.bugs)
    } else {
        crate::doorbell::scan(qp, ctx.dev, ctx.bugs)
    };
    if qp.qp_type == QpType::Dct {
        // A DC target answers on each connection's state (`crate::transport::dc`).
        work |= crate::transport::dc::pump_target(qp, ctx);
    } else if qp.can_receive() {
        work |= responder::pump(qp, ctx);
        work |= responder::flush_ack(qp, ctx);
    } else {
        qp.resp.ack_due = None;
        qp.resp.tx.clear();
    }
    work |= requester::timers(qp, ctx);
    if matches!(qp.state(), QpState::Rts | QpState::Sqd) {
        work |= requester::pump(qp, ctx);
    }
    match qp.state() {
        QpState::Error => work |= flush(qp, ctx),
        QpState::Sqe => work |= flush_sq(qp, ctx),
        QpState::Rts => {
            work |= requester::progress(qp, ctx);
            if qp.qp_type == QpType::Dci {
                work |= crate::transport::dc::idle(qp, ctx);
            }
        }
        QpState::Sqd if qp.sqd_notify && qp.req.outstanding.is_empty() => {
            qp.sqd_notify = false;
            ctx.events.push_back(AsyncEvent::SqDrained(QpId(qp.qpn)));
            work = true;
        }
        _ => {}
    }
    work
}
