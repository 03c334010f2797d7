//! The device's processing context ([`Ctx`]: everything of a device a QP's processing may touch
//! besides the QP) and what the transport, the engine and `modify_qp` share: writing CQEs,
//! moving a QP to Error and flushing it.
//!
//! Flush semantics (IBTA Vol 1 §10.3.1 "Error state", §11.6.2; rdma-core `mlx5_handle_error_cqe`
//! for the syndrome): when a QP enters Error, every WQE outstanding on its SQ and RQ completes
//! with WR_FLUSH_ERR (syndrome 0x05), signaled or not, in order, after the error CQE of the WQE
//! that failed; WQEs posted while the QP is in Error are flushed too. That unsignaled WQEs
//! produce flush CQEs is IB verbs semantics; `docs/sources.md` §9 marks it unconfirmed on mlx5.
//! SRQ WQEs belong to the SRQ and are not flushed; the QP raises
//! `IBV_EVENT_QP_LAST_WQE_REACHED` instead.

use std::collections::BTreeMap;

use mlx5_cq::{
    CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_PROT_ERR,
    SYNDROME_LOCAL_QP_OP_ERR, SYNDROME_REMOTE_ACCESS_ERR, SYNDROME_REMOTE_INVAL_REQ_ERR,
    SYNDROME_REMOTE_OP_ERR, SYNDROME_RNR_RETRY_EXC_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR,
    SYNDROME_WR_FLUSH_ERR,
};
use mlx5_hw::{AsyncEvent, CqId, Gid, Mtu, PortState, QpId, QpState};

use crate::bugs::BugLog;
use crate::counters::{CounterId, Counters};
use crate::cq::{Cq, CqeOutcome, CqeSpec};
use crate::mr::MrTable;
use crate::notify::AsyncEvents;
use crate::qp::path::Frame;
use crate::qp::responder::InMsg;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::wire::MacAddr;
use crate::wqe::{ring_bytes, AtomicEndianness, Ctrl};

/// A device port.
#[derive(Clone, Copy, Debug)]
pub struct Port {
    /// LID (used for routing when an address has no GRH).
    pub lid: u16,
    /// GID 0 (IPv4-mapped).
    pub gid: Gid,
    /// IPv4 address.
    pub ip: std::net::Ipv4Addr,
    /// MAC address.
    pub mac: MacAddr,
    /// Active MTU.
    pub mtu: Mtu,
    /// Port state.
    pub state: PortState,
    /// The device's atomic byte order (an HCA capability, [`AtomicEndianness`]; kept with the
    /// port, which every processing context carries).
    pub atomic_endianness: AtomicEndianness,
}

/// The vendor syndrome the device puts next to a syndrome. The values for retry exhaustion
/// (0x81), RNR exhaustion (0x82) and flush (0xf9) are the ones seen in field reports of mlx5
/// error CQEs; the others are the software ConnectX's own and **UNCONFIRMED**.
pub fn vendor_syndrome(syndrome: u8) -> u8 {
    match syndrome {
        SYNDROME_TRANSPORT_RETRY_EXC_ERR => 0x81,
        SYNDROME_RNR_RETRY_EXC_ERR => 0x82,
        SYNDROME_WR_FLUSH_ERR => 0xf9,
        SYNDROME_LOCAL_LENGTH_ERR => 0x68,
        SYNDROME_LOCAL_QP_OP_ERR => 0x69,
        SYNDROME_LOCAL_PROT_ERR => 0x56,
        SYNDROME_REMOTE_ACCESS_ERR => 0x88,
        SYNDROME_REMOTE_INVAL_REQ_ERR => 0x8a,
        SYNDROME_REMOTE_OP_ERR => 0x89,
        _ => 0,
    }
}

/// Everything of a device a QP's processing may touch besides the QP itself.
pub struct Ctx<'a> {
    /// Virtual time, nanoseconds.
    pub now: u64,
    /// Device name.
    pub dev: &'a str,
    /// The port.
    pub port: &'a Port,
    /// Memory regions.
    pub mrs: &'a MrTable,
    /// CQs.
    pub cqs: &'a mut BTreeMap<u32, Cq>,
    /// SRQs.
    pub srqs: &'a mut BTreeMap<u32, Srq>,
    /// Async event queue.
    pub events: &'a mut AsyncEvents,
    /// Driver bugs.
    pub bugs: &'a mut BugLog,
    /// Packets to put on the wire.
    pub out: &'a mut Vec<Frame>,
    /// Counters.
    pub counters: &'a mut Counters,
    /// The fabric runs on its own thread while drivers write (threaded doorbell scanning,
    /// [`crate::doorbell::threaded`]).
    pub threaded: bool,
    /// The least local ACK timeout (ns) of a QP whose peer is in another process, 0 for none
    /// (`crate::transport::requester`, `docs/software-connectx.md` "Timers between
    /// processes").
    pub remote_ack_floor: u64,
    /// The RNR fault rules' say on the request being delivered, when there are such rules
    /// ([`crate::faults::FaultTarget::rnr_next`]): the responder asks it before it takes a
    /// receive WQE.
    pub(crate) recv_gate: Option<crate::fault_rules::RecvGate<'a>>,
}

impl Ctx<'_> {
    /// Write a CQE to CQ `cqn`; returns whether the CQ took it. A CQ that overruns now enters
    /// its error state and raises `IBV_EVENT_CQ_ERR` (once); a CQ in error takes nothing more
    /// ([`crate::cq`] has the rules and their sources). The QP whose CQE it was cannot report
    /// its completions: the QP-level writers ([`send_cqe`], [`recv_err_cqe`],
    /// [`qp_cqe`]) move it to Error.
    pub fn cqe(&mut self, cqn: u32, spec: &CqeSpec) -> bool {
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return true;
        };
        match cq.push_at(spec, self.now) {
            // A dead device writes nothing, and fails no QP for it (`CqeOutcome::DeviceDead`).
            CqeOutcome::Written | CqeOutcome::DeviceDead => true,
            CqeOutcome::Overrun => {
                tracing::warn!(
                    device = self.dev,
                    cqn,
                    entries = cq.cqe_cnt,
                    producer = cq.pi,
                    consumer = cq.consumer_index(),
                    "CQ overrun: the CQ enters its error state (IBV_EVENT_CQ_ERR)"
                );
                self.counters.inc(CounterId::CqOverrun);
                self.events.push_back(AsyncEvent::CqError(CqId(cqn)));
                false
            }
            CqeOutcome::Dropped => false,
        }
    }
}

/// Write a CQE of `qp` to CQ `cqn`. When the CQ cannot take it (it overran now, or is in error
/// since an earlier overrun), the QP's work queue cannot report completions: a Local Work
/// Queue Catastrophic Error (IBTA Vol 1 §11.6.3, the affiliated asynchronous errors): the QP
/// moves to Error with `IBV_EVENT_QP_FATAL` (mlx5 `MLX5_EVENT_TYPE_WQ_CATAS_ERROR`, kernel
/// `drivers/infiniband/hw/mlx5/qp.c` `mlx5_ib_qp_event`) and is flushed: the flush CQEs reach
/// its other CQ if that one is healthy, and are lost with this one.
pub fn qp_cqe(qp: &mut Qp, ctx: &mut Ctx, cqn: u32, spec: &CqeSpec) {
    if !ctx.cqe(cqn, spec) {
        lost_completion(qp, ctx, cqn);
    }
}

fn lost_completion(qp: &mut Qp, ctx: &mut Ctx, cqn: u32) {
    if qp.state() == QpState::Error {
        return;
    }
    tracing::warn!(
        device = ctx.dev,
        qpn = qp.qpn,
        cqn,
        "a completion could not be written: the CQ is in error; the QP moves to ERR (IBV_EVENT_QP_FATAL)"
    );
    fail_qp(qp, ctx, Some(AsyncEvent::QpFatal(QpId(qp.qpn))));
}

/// A send completion: success (`syndrome` None) or error.
pub fn send_cqe(
    qp: &mut Qp,
    ctx: &mut Ctx,
    index: u16,
    opcode: u8,
    byte_cnt: u32,
    syndrome: Option<u8>,
) {
    let spec = match syndrome {
        None => CqeSpec {
            opcode: CQE_REQ,
            byte_cnt,
            qpn: qp.qpn,
            send_opcode: opcode,
            wqe_counter: index,
            ..Default::default()
        },
        Some(s) => {
            ctx.counters.inc(match s {
                SYNDROME_WR_FLUSH_ERR => CounterId::ReqCqeFlushError,
                _ => CounterId::ReqCqeError,
            });
            match s {
                SYNDROME_REMOTE_ACCESS_ERR => ctx.counters.inc(CounterId::ReqRemoteAccessErrors),
                SYNDROME_REMOTE_INVAL_REQ_ERR => {
                    ctx.counters.inc(CounterId::ReqRemoteInvalidRequest)
                }
                _ => {}
            }
            CqeSpec {
                opcode: CQE_REQ_ERR,
                qpn: qp.qpn,
                send_opcode: opcode,
                wqe_counter: index,
                syndrome: s,
                vendor_syndrome: vendor_syndrome(s),
                ..Default::default()
            }
        }
    };
    let cq = qp.send_cq;
    qp_cqe(qp, ctx, cq, &spec);
}

/// A receive error completion.
pub fn recv_err_cqe(qp: &mut Qp, ctx: &mut Ctx, counter: u16, srqn: Option<u32>, syndrome: u8) {
    ctx.counters.inc(match syndrome {
        SYNDROME_WR_FLUSH_ERR => CounterId::RespCqeFlushError,
        _ => CounterId::RespCqeError,
    });
    if syndrome == SYNDROME_LOCAL_LENGTH_ERR {
        ctx.counters.inc(CounterId::RespLocalLengthError);
    }
    let spec = CqeSpec {
        opcode: CQE_RESP_ERR,
        qpn: qp.qpn,
        wqe_counter: counter,
        srqn: srqn.unwrap_or(0),
        syndrome,
        vendor_syndrome: vendor_syndrome(syndrome),
        ..Default::default()
    };
    let cq = qp.recv_cq;
    qp_cqe(qp, ctx, cq, &spec);
}

/// Move a QP to Error on its own (a failed WQE or a responder error) and flush it. `event` is
/// the async event to raise (`IBV_EVENT_QP_FATAL`, `QP_REQ_ERR`, `QP_ACCESS_ERR`).
pub fn fail_qp(qp: &mut Qp, ctx: &mut Ctx, event: Option<AsyncEvent>) {
    if qp.state() == QpState::Error {
        return;
    }
    tracing::warn!(device = ctx.dev, qpn = qp.qpn, from = %qp.state(), "QP moves to ERR");
    qp.attr.qp_state = QpState::Error;
    if let Some(e) = event {
        ctx.events.push_back(e);
    }
    flush(qp, ctx);
}

/// Flush everything outstanding on a QP in Error; returns whether anything was flushed.
pub fn flush(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    let mut any = flush_sq(qp, ctx);
    // A receive WQE a message in progress took (or a broken UC SEND left for the next message)
    // is the oldest one the QP holds: it is flushed first, from the RQ or its SRQ.
    let taken = match qp.resp.cur.take() {
        Some(InMsg::Send { wqe, .. }) => Some(wqe),
        _ => None,
    };
    if let Some(w) = taken.or_else(|| qp.resp.held.take()) {
        recv_err_cqe(qp, ctx, w.counter, w.srqn, SYNDROME_WR_FLUSH_ERR);
        any = true;
    }
    // Receive queue.
    if qp.srq.is_none() && qp.geom.rq_wqe_cnt > 0 {
        let n = qp.rq_available(ctx.dev, ctx.bugs);
        for _ in 0..n {
            recv_err_cqe(qp, ctx, qp.rq_ci, None, SYNDROME_WR_FLUSH_ERR);
            qp.rq_ci = qp.rq_ci.wrapping_add(1);
            any = true;
        }
    }
    qp.resp.cur = None;
    if qp.srq.is_some() && !qp.last_wqe_sent {
        qp.last_wqe_sent = true;
        ctx.events
            .push_back(AsyncEvent::QpLastWqeReached(QpId(qp.qpn)));
    }
    any
}

/// Flush the send queue only (Error, and SQE for UC/UD where the receive side keeps working).
pub fn flush_sq(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    let mut any = false;
    // Sent but not completed.
    while let Some(p) = qp.req.outstanding.pop_front() {
        send_cqe(qp, ctx, p.index, p.opcode, 0, Some(SYNDROME_WR_FLUSH_ERR));
        any = true;
    }
    qp.req.timer = None;
    qp.req.rnr_until = None;
    // Posted (doorbell seen) but not started.
    let mut guard = 0;
    while qp.sq_ci != qp.db.sq_known && guard <= qp.geom.sq_wqe_cnt {
        let c = Ctrl::parse(&ring_bytes(
            &qp.buf,
            qp.sq_off(),
            qp.geom.sq_wqe_cnt,
            qp.sq_ci,
            16,
        ));
        let bbs = c.bbs().min(qp.db.sq_known.wrapping_sub(qp.sq_ci));
        send_cqe(qp, ctx, qp.sq_ci, c.opcode, 0, Some(SYNDROME_WR_FLUSH_ERR));
        qp.sq_ci = qp.sq_ci.wrapping_add(bbs.max(1));
        guard += 1;
        any = true;
    }
    qp.db.bf = None;
    any
}

/// A send WQE failed on a UC or UD QP: the QP enters SQE (IBTA Vol 1 §10.3.1 "Send Queue
/// Error": the send queue stops and is flushed, the receive queue keeps working; `SQE → RTS`
/// recovers it).
pub fn enter_sqe(qp: &mut Qp, ctx: &mut Ctx) {
    if qp.state() == QpState::Error {
        // Its error CQE could not be written (the CQ is in error): it is in Error already.
        return;
    }
    tracing::warn!(device = ctx.dev, qpn = qp.qpn, "QP moves to SQE");
    qp.attr.qp_state = QpState::Sqe;
    flush_sq(qp, ctx);
}
