//! The responder: what a QP does with request packets addressed to it.
//!
//! RC (IBTA Vol 1 §9.7): the expected PSN decides between executing (expected), answering a
//! duplicate (ACK again, replay a READ, return the saved result of an atomic, both from the
//! responder resources of `max_dest_rd_atomic` entries; §9.7.5.1.2) and NAKing a PSN sequence
//! error once per gap (§9.7.5.2.1). ACKs are coalesced: the packets delivered in one step are
//! acknowledged by one ACK carrying the PSN of the last (§9.7.5.1.1), sent at the next step or
//! before any other response. A SEND's first packet consumes a receive WQE
//! (none: RNR NAK with `min_rnr_timer`, §9.7.5.2.8); a WRITE with immediate consumes one at its
//! last packet. Class C errors (IBTA §9.9.3 responder error behaviour; the kernel's rxe
//! `do_class_ac_error` for the same cases) NAK and move the responder QP to Error:
//! - NAK Invalid Request → the requester gets REMOTE_INVAL_REQ (0x12): an operation the QP's
//!   access flags do not allow (READ/atomic also need `max_dest_rd_atomic` > 0, as mlx5 clears
//!   remote read/atomic access when it is 0), a misaligned atomic, a message longer than the
//!   receive WQE (the responder's receive completes with LOCAL_LENGTH 0x01), a WRITE longer than
//!   its RETH length, a missing first packet;
//! - NAK Remote Access Error → REMOTE_ACCESS (0x13): bad rkey, other PD, out of bounds, the MR
//!   lacks REMOTE_WRITE/READ/ATOMIC;
//! - NAK Remote Operational Error → REMOTE_OP (0x14): the receive WQE's own lkey check failed
//!   (its completion is LOCAL_PROT 0x04).
//!
//! UC (§9.8): no ACKs; a PSN gap drops the message in progress and waits for a first/only
//! packet, and the receive WQE the dropped SEND had taken serves the next message that
//! consumes one (SEND or WRITE with immediate), so nothing completes for the lost message and
//! receives complete in order; a PSN behind the expected one is a duplicate, dropped; errors
//! drop the message. Every packet dropped without a response is counted: `duplicate_request`,
//! `out_of_sequence`, `out_of_buffer`, or `uc_dropped_packets` for the rest of a message given
//! up. UD (§9.8.5): the DETH Q_Key must equal the QP's Q_Key, or the packet is dropped; the
//! receive buffer gets the 40-byte GRH first (IBTA §11.4.1.2; on RoCEv2 with IPv4 the IPv4
//! header sits in its last 20 bytes, `ibv_poll_cq(3)` "IBV_WC_GRH").
//!
//! Atomics operate on the responder's memory in the device's atomic byte order, host order
//! unless the device is configured big-endian (`atomic_req_8B_endianness_mode`,
//! [`crate::wqe::AtomicEndianness`], `docs/sources.md` §3), and carry the original value as a
//! number in the AtomicAckETH (big-endian on the wire, IBTA Vol 1 §9.3.6), which the
//! requester writes to its buffer in its own device's reply order.
//!
//! Here: PSN checking (RC, UC), duplicates, the responses (ACK coalescing, NAKs, class C
//! errors) and the receive WQEs; by packet kind in `send.rs`, `write.rs`, `read.rs`, `atomic.rs`
//! and `ud.rs`.

mod atomic;
mod read;
mod send;
mod ud;
mod write;

pub use crate::qp::responder::{InMsg, RdAtomic, ReadOut, Responder, Tx};
pub use read::pump;

use mlx5_hw::{AccessFlags, AsyncEvent, QpId, QpState, QpType};

use crate::counters::CounterId;
use crate::cq::CqeSpec;
use crate::ctx::{fail_qp, qp_cqe, Ctx};
use crate::qp::{Qp, RecvWqe};
use crate::transport::Frame;
use crate::wire::{
    Aeth, Bth, NakCode, Opcode, Operation, Packet, Psn, PsnWindow, Syndrome, Transport,
};

/// Most responses that may wait behind a streamed READ (a broken requester repeating READs
/// cannot grow it without bound; beyond it responses are dropped and counted).
const TX_CAP: usize = 1024;

/// Put a response on the wire, or behind a READ response still being streamed.
fn emit(qp: &mut Qp, ctx: &mut Ctx, f: Frame) {
    if qp.resp.tx.is_empty() {
        ctx.out.push(f);
    } else if qp.resp.tx.len() < TX_CAP {
        qp.resp.tx.push_back(Tx::Frame(f));
    } else {
        ctx.counters.inc(CounterId::RxDropped);
    }
}

fn send_back(qp: &Qp, ctx: &mut Ctx, req: &Packet, op: Opcode, psn: Psn) -> Packet {
    let _ = ctx;
    let op = crate::transport::xrc::response_opcode(qp.qp_type, op);
    Packet::new(req.addr.reversed(), Bth::new(op, qp.attr.dest_qp_num, psn))
}

/// Send the coalesced ACK, if one is due.
pub fn flush_ack(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    match qp.resp.ack_due.take() {
        Some(p) => {
            emit(qp, ctx, Frame { pkt: p, ext: None });
            true
        }
        None => false,
    }
}

fn ack(qp: &mut Qp, ctx: &mut Ctx, req: &Packet, psn: Psn) {
    let mut p = send_back(qp, ctx, req, Opcode::RC_ACKNOWLEDGE, psn);
    p.aeth = Some(Aeth {
        syndrome: Syndrome::Ack {
            credits: Syndrome::CREDITS_INVALID,
        },
        msn: qp.resp.msn,
    });
    qp.resp.ack_due = Some(p);
}

fn nak(qp: &mut Qp, ctx: &mut Ctx, req: &Packet, psn: Psn, syndrome: Syndrome) {
    flush_ack(qp, ctx);
    let mut p = send_back(qp, ctx, req, Opcode::RC_ACKNOWLEDGE, psn);
    p.aeth = Some(Aeth {
        syndrome,
        msn: qp.resp.msn,
    });
    emit(qp, ctx, Frame { pkt: p, ext: None });
}

fn remember(qp: &mut Qp, r: RdAtomic) {
    qp.resp.resources.push_back(r);
    let cap = qp.attr.max_dest_rd_atomic.max(1) as usize;
    while qp.resp.resources.len() > cap {
        qp.resp.resources.pop_front();
    }
}

/// Class C error: NAK and move the QP to Error.
fn class_c(qp: &mut Qp, ctx: &mut Ctx, req: &Packet, code: NakCode, why: &str) {
    tracing::warn!(
        device = ctx.dev,
        qpn = qp.qpn,
        ?code,
        why,
        "responder error"
    );
    if qp.qp_type.is_reliable() {
        nak(qp, ctx, req, req.bth.psn, Syndrome::Nak(code));
    }
    if code == NakCode::RemoteAccessError {
        ctx.counters.inc(CounterId::RespRemoteAccessErrors);
    }
    let ev = match code {
        NakCode::RemoteAccessError => AsyncEvent::QpAccessError(QpId(qp.qpn)),
        _ => AsyncEvent::QpRequestError(QpId(qp.qpn)),
    };
    qp.resp.cur = None;
    if qp.qp_type == QpType::Dct {
        // No Error state: the connection is dropped (`crate::transport::dc`).
        qp.resp.broken = true;
    } else if qp.qp_type.is_reliable() {
        fail_qp(qp, ctx, Some(ev));
    }
}

/// Whether an RNR fault rule refuses the request being delivered its receive WQE (decided
/// once per request: `crate::fault_rules::RecvGate`), as if the receive queue were empty.
fn refused_by_fault(ctx: &mut Ctx) -> bool {
    ctx.recv_gate.as_mut().is_some_and(|g| g.refuses())
}

fn recv_ready(qp: &Qp, ctx: &mut Ctx) -> bool {
    if refused_by_fault(ctx) {
        return false;
    }
    match qp.srq {
        Some(s) => ctx.srqs.get(&s).is_some_and(|srq| {
            let posted = srq.dbrec.read_be32(0) as u16;
            posted != srq.consumed && !srq.error
        }),
        None => qp.geom.rq_wqe_cnt > 0 && qp.rq_dbr() != qp.rq_ci,
    }
}

fn take_recv(qp: &mut Qp, ctx: &mut Ctx) -> Option<RecvWqe> {
    if refused_by_fault(ctx) {
        ctx.counters.inc(CounterId::OutOfBuffer);
        return None;
    }
    let srq = match qp.srq {
        Some(s) => Some(ctx.srqs.get_mut(&s)?),
        None => None,
    };
    let w = match srq {
        Some(srq) => {
            let w = qp.take_recv(Some(srq), ctx.dev, ctx.bugs);
            // SRQ limit event (IBTA §10.2.9.3): fires once when the count drops below it.
            if srq.limit > 0 && srq.available(ctx.dev, ctx.bugs) < srq.limit {
                srq.limit = 0;
                ctx.events
                    .push_back(AsyncEvent::SrqLimitReached(mlx5_hw::SrqId(srq.srqn)));
            }
            w
        }
        None => qp.take_recv(None, ctx.dev, ctx.bugs),
    };
    if w.is_none() {
        ctx.counters.inc(CounterId::OutOfBuffer);
    }
    w
}

fn capacity(w: &RecvWqe) -> u64 {
    w.sges.iter().map(|s| s.len as u64).sum()
}

fn recv_cqe(
    qp: &mut Qp,
    ctx: &mut Ctx,
    w: &RecvWqe,
    opcode: u8,
    byte_cnt: u32,
    pkt: &Packet,
    flags: u32,
) {
    let src = pkt.deth.map(|d| d.src_qp).unwrap_or(qp.attr.dest_qp_num);
    let spec = CqeSpec {
        opcode,
        byte_cnt,
        imm: pkt.imm.map(|i| i.0.to_be_bytes()).unwrap_or_default(),
        qpn: qp.qpn,
        wqe_counter: w.counter,
        flags_rqpn: (src & 0x00ff_ffff) | flags,
        srqn: w.srqn.unwrap_or(0),
        se: pkt.bth.solicited,
        ..Default::default()
    };
    let cq = qp.recv_cq;
    qp_cqe(qp, ctx, cq, &spec);
}

/// Handle a request packet addressed to this QP.
pub fn on_request(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let t = frame.pkt.bth.opcode.transport();
    if (qp.qp_type, t) == (QpType::Dct, Transport::Dc) {
        return crate::transport::dc::on_request(qp, ctx, frame);
    }
    let ok = matches!(
        (qp.qp_type, t),
        (QpType::Rc, Transport::Rc)
            | (QpType::Uc, Transport::Uc)
            | (QpType::Ud, Transport::Ud)
            | (QpType::XrcRecv, Transport::Xrc)
    );
    if !ok {
        ctx.counters.inc(CounterId::RxDropped);
        return;
    }
    match qp.qp_type {
        QpType::Ud => ud::ud(qp, ctx, frame),
        QpType::Uc => uc(qp, ctx, frame),
        QpType::Rc => rc(qp, ctx, frame),
        QpType::XrcRecv => match crate::transport::xrc::bind_target(qp, ctx, &frame.pkt) {
            Ok(()) => rc(qp, ctx, frame),
            Err(why) => class_c(qp, ctx, &frame.pkt, NakCode::InvalidRequest, why),
        },
        _ => ctx.counters.inc(CounterId::RxDropped),
    }
}

/// An RC request on this QP's current responder state (a DC target's connection,
/// [`crate::transport::dc`]).
pub(crate) fn on_rc_request(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    rc(qp, ctx, frame)
}

/// UC PSN checking (IBTA Vol 1 §9.8.3, the UC responder): the expected PSN continues the
/// message in progress or starts the next one. A PSN ahead of it means packets were lost: the
/// message in progress is given up, and the packet starts a new message if it is a first or
/// only packet, or is dropped with the rest of its message otherwise. A PSN behind it (in the
/// half of the PSN space before the expected PSN, as for RC, §9.7.1) is a copy the network
/// made or a late packet of a message already given up: UC never retransmits, so it is dropped
/// silently and counted as `duplicate_request`, and a duplicated message is not delivered
/// twice.
fn uc(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    let pos = pkt.bth.opcode.position();
    match psn.window(qp.resp.epsn) {
        PsnWindow::Expected => {}
        PsnWindow::Duplicate => {
            ctx.counters.inc(CounterId::DuplicateRequest);
            return;
        }
        PsnWindow::OutOfSequence => {
            ctx.counters.inc(CounterId::OutOfSequence);
            uc_abandon(qp);
            if !pos.starts_message() {
                // Drop the rest of this message: the next first/only packet starts afresh.
                ctx.counters.inc(CounterId::UcDroppedPackets);
                qp.resp.epsn = psn.next();
                qp.resp.cur = (!pos.ends_message()).then_some(InMsg::Drop);
                return;
            }
        }
    }
    qp.resp.epsn = psn.next();
    if pos.starts_message() && qp.resp.cur.is_some() {
        // The previous message never got its last packet: it is lost.
        uc_abandon(qp);
    }
    if matches!(qp.resp.cur, Some(InMsg::Drop)) {
        ctx.counters.inc(CounterId::UcDroppedPackets);
        if pos.ends_message() {
            qp.resp.cur = None;
        }
        return;
    }
    data_packet(qp, ctx, frame);
}

/// UC: drop the message in progress; its receive WQE (if a SEND had taken one) is kept for
/// the next message that consumes one (a SEND at its first packet, a WRITE with immediate at
/// its last), so the lost message completes nothing and receives still complete in order.
fn uc_abandon(qp: &mut Qp) {
    if let Some(InMsg::Send { wqe, .. }) = qp.resp.cur.take() {
        qp.resp.held = Some(wqe);
    }
}

fn rc(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    match psn.window(qp.resp.epsn) {
        PsnWindow::Expected => qp.resp.nak_sent = false,
        PsnWindow::Duplicate => {
            ctx.counters.inc(CounterId::DuplicateRequest);
            duplicate(qp, ctx, frame);
            return;
        }
        PsnWindow::OutOfSequence => {
            ctx.counters.inc(CounterId::OutOfSequence);
            if !qp.resp.nak_sent {
                qp.resp.nak_sent = true;
                let e = qp.resp.epsn;
                nak(qp, ctx, pkt, e, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
    }
    match pkt.bth.opcode.operation() {
        Operation::RdmaReadRequest => {
            ctx.counters.inc(CounterId::RxReadRequests);
            read::read(qp, ctx, frame, true)
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            ctx.counters.inc(CounterId::RxAtomicRequests);
            atomic::atomic(qp, ctx, frame)
        }
        _ => data_packet(qp, ctx, frame),
    }
}

/// SEND and WRITE packets (RC and UC).
fn data_packet(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let op = pkt.bth.opcode;
    let delivered = if op.is_send() {
        send::send_packet(qp, ctx, pkt)
    } else if op.is_rdma_write() {
        write::write_packet(qp, ctx, pkt)
    } else {
        return class_c(qp, ctx, pkt, NakCode::InvalidRequest, "unexpected opcode");
    };
    // A QP that could not write the message's completion (its CQ is in error) went to Error
    // delivering it, and answers nothing more.
    if delivered && qp.qp_type.is_reliable() && qp.state() != QpState::Error {
        qp.resp.epsn = pkt.bth.psn.next();
        if pkt.bth.ack_req || op.position().ends_message() {
            ack(qp, ctx, pkt, pkt.bth.psn);
        }
    }
}

fn rd_atomic_allowed(qp: &Qp, need: AccessFlags) -> bool {
    qp.attr.max_dest_rd_atomic > 0 && qp.attr.qp_access_flags.contains(need)
}

/// A duplicate request (IBTA §9.7.5.1.2): never executed twice. A READ or atomic is answered
/// from the responder resources only while its entry is still there; an older one is dropped
/// silently and counted as `duplicate_request_no_replay` (the kernel's rxe drops it the same
/// way, "resource not found", `rxe_resp.c` `duplicate_request`). A correct requester never
/// asks for one: it has at most `max_rd_atomic` READs/atomics unanswered, which must not
/// exceed the responder's `max_dest_rd_atomic`, and takes no response past an unanswered one
/// (implied NAK, §9.7.5.1.5), so every one it may resend is still in the table.
fn duplicate(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    match pkt.bth.opcode.operation() {
        Operation::RdmaReadRequest => {
            let known = qp.resp.resources.iter().any(
                |r| matches!(*r, RdAtomic::Read { psn: p, npsn } if psn.in_range(p, p.add(npsn))),
            );
            if known {
                read::read(qp, ctx, frame, false);
            } else {
                ctx.counters.inc(CounterId::DuplicateRequestNoReplay);
            }
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let saved = qp.resp.resources.iter().find_map(|r| match *r {
                RdAtomic::Atomic { psn: p, orig } if p == psn => Some(orig),
                _ => None,
            });
            match saved {
                Some(orig) => atomic::atomic_ack(qp, ctx, pkt, orig),
                None => ctx.counters.inc(CounterId::DuplicateRequestNoReplay),
            }
        }
        _ => {
            if pkt.bth.ack_req || pkt.bth.opcode.position().ends_message() {
                let last = qp.resp.epsn.sub(1);
                ack(qp, ctx, pkt, last);
            }
        }
    }
}
