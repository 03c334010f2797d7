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
//! Atomics operate on the responder's memory as big-endian words and return the original
//! bytes unchanged, which the requester writes to its buffer: 8-byte replies are big-endian as
//! with `atomic_req_8B_endianness_mode` 0, and so are the masked (extended) ones
//! (`docs/sources.md` §3, UNCONFIRMED on hardware).

use std::collections::VecDeque;

use mlx5_cq::{
    CQE_RESP_SEND, CQE_RESP_SEND_IMM, CQE_RESP_WR_IMM, SYNDROME_LOCAL_LENGTH_ERR,
    SYNDROME_LOCAL_PROT_ERR,
};
use mlx5_hw::{AccessFlags, AsyncEvent, QpId, QpType};

use crate::counters::CounterId;
use crate::cq::CqeSpec;
use crate::engine::{fail_qp, recv_err_cqe, Ctx};
use crate::qp::{Qp, RecvWqe};
use crate::transport::requester::scatter;
use crate::transport::Frame;
use crate::wire::{
    Aeth, AtomicAckEth, Bth, NakCode, Opcode, Operation, Packet, Psn, PsnWindow, RnrTimer,
    Syndrome, Transport,
};
use crate::wqe::AtomicOp;

/// A message being received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InMsg {
    /// A SEND filling a receive WQE.
    Send {
        /// The WQE.
        wqe: RecvWqe,
        /// Bytes received so far.
        offset: u64,
    },
    /// A WRITE into remote memory.
    Write {
        /// Next address.
        va: u64,
        /// Key.
        rkey: u32,
        /// Total length from the RETH.
        len: u64,
        /// Bytes received so far.
        offset: u64,
    },
    /// UC: the rest of a message being dropped.
    Drop,
}

/// A READ or atomic the responder executed, kept to answer its duplicates (IBTA Vol 1
/// §9.7.5.1.2: a duplicate READ is executed again, a duplicate atomic returns the saved result
/// and is never applied twice). The table holds `max_dest_rd_atomic` entries (the responder
/// resources the QP was given, `ibv_modify_qp(3)`), oldest replaced first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdAtomic {
    /// A READ of `npsn` response packets starting at `psn`.
    Read {
        /// PSN of the request.
        psn: Psn,
        /// Response packets.
        npsn: u32,
    },
    /// An atomic at `psn` that read `orig`.
    Atomic {
        /// PSN of the request.
        psn: Psn,
        /// The original value returned.
        orig: u64,
    },
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number (24 bits): requests completed.
    pub msn: u32,
    /// Message in progress.
    pub cur: Option<InMsg>,
    /// A PSN sequence error NAK was sent and no expected packet arrived since.
    pub nak_sent: bool,
    /// Responder resources: recent READs and atomics, for duplicate replay.
    pub resources: VecDeque<RdAtomic>,
    /// An ACK not sent yet: ACKs of packets delivered in one step are coalesced into one
    /// acknowledging the last of them (IBTA Vol 1 §9.7.5.1.1 allows one ACK for several
    /// requests); it goes out at the next step, or before any other response.
    pub ack_due: Option<Packet>,
    /// UC: the receive WQE of a message that was dropped, reused by the next message that
    /// consumes one (a UC message with a missing packet completes nothing, IBTA Vol 1 §9.8.3).
    pub held: Option<RecvWqe>,
    /// Responses waiting behind a READ response still being streamed, in order.
    pub tx: VecDeque<Tx>,
    /// READ response packets sent in this step, by every READ of the QP together (reset by
    /// [`pump`], bounded by [`READ_BURST`]).
    pub burst_used: u32,
}

/// A response waiting to go out behind a READ response still being streamed.
#[derive(Clone, Debug)]
pub enum Tx {
    /// An ACK, NAK or atomic ACK.
    Frame(Frame),
    /// A READ response not completely sent.
    Read(ReadOut),
}

/// A READ response being sent: each packet's payload is read from the registered memory when
/// it is sent (a NIC DMAs READ response data packet by packet), so memory is bounded by the
/// MTU, not by the READ's length.
#[derive(Clone, Debug)]
pub struct ReadOut {
    /// The request (addressing; no payload).
    pub req: Packet,
    /// Remote key.
    pub rkey: u32,
    /// Start address.
    pub va: u64,
    /// Length.
    pub len: u64,
    /// Packets in all.
    pub n: u32,
    /// Next packet to send.
    pub next: u32,
    /// MSN carried by the AETH of the first and last packet.
    pub msn: u32,
}

/// READ response packets a QP sends per step at most, all its READs together (the rest
/// follows at later steps): a response's first packets leave while later ones are still to be
/// read, as a NIC streams them, and a step stays short (under emulation a step building a
/// few hundred packets outlasted Soft-RoCE's ACK timeout, whose retries then queued faster
/// than they were answered).
const READ_BURST: u32 = 16;

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

/// Send packets of a READ response while this step's [`READ_BURST`] lasts (shared by every
/// READ of the QP); true when it is complete.
fn stream_read(qp: &mut Qp, ctx: &mut Ctx, r: &mut ReadOut) -> bool {
    let mtu = qp.path.map(|p| p.mtu).unwrap_or(1024) as u64;
    while r.next < r.n {
        if qp.resp.burst_used >= READ_BURST {
            return false;
        }
        qp.resp.burst_used += 1;
        let i = r.next;
        let op = match (r.n, i) {
            (1, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (_, 0) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (_, k) if k + 1 == r.n => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let off = i as u64 * mtu;
        let size = r.len.saturating_sub(off).min(mtu);
        let mut data = vec![0u8; size as usize];
        if size > 0 {
            match ctx
                .mrs
                .remote(r.rkey, qp.pd, r.va + off, size, AccessFlags::REMOTE_READ)
            {
                Ok(mr) => {
                    mr.region.read(r.va + off, &mut data);
                }
                Err(e) => {
                    // The MR went away while the response was being sent.
                    qp.resp.tx.clear();
                    let why = format!(
                        "READ rkey {:#x} va {:#x} at offset {off}: {e:?}",
                        r.rkey, r.va
                    );
                    let req = r.req.clone();
                    class_c(qp, ctx, &req, NakCode::RemoteAccessError, &why);
                    return true;
                }
            }
        }
        let mut p = send_back(qp, ctx, &r.req, op, r.req.bth.psn.add(i));
        if op.has_aeth() {
            p.aeth = Some(Aeth {
                syndrome: Syndrome::Ack {
                    credits: Syndrome::CREDITS_INVALID,
                },
                msn: r.msn,
            });
        }
        p.payload = data;
        ctx.out.push(Frame { pkt: p, ext: None });
        r.next += 1;
    }
    true
}

/// Send what waits behind a streamed READ response; returns whether anything was sent.
pub fn pump(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    // Called once per step: a new step, a new burst.
    qp.resp.burst_used = 0;
    let mut work = false;
    while let Some(t) = qp.resp.tx.pop_front() {
        work = true;
        match t {
            Tx::Frame(f) => ctx.out.push(f),
            Tx::Read(mut r) => {
                if !stream_read(qp, ctx, &mut r) {
                    qp.resp.tx.push_front(Tx::Read(r));
                    break;
                }
            }
        }
    }
    work
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
    if qp.qp_type.is_reliable() {
        fail_qp(qp, ctx, Some(ev));
    }
}

fn recv_ready(qp: &Qp, ctx: &mut Ctx) -> bool {
    match qp.srq {
        Some(s) => ctx.srqs.get(&s).is_some_and(|srq| {
            let posted = srq.dbrec.read_be32(0) as u16;
            posted != srq.consumed
        }),
        None => qp.geom.rq_wqe_cnt > 0 && qp.rq_dbr() != qp.rq_ci,
    }
}

fn take_recv(qp: &mut Qp, ctx: &mut Ctx) -> Option<RecvWqe> {
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
    qp: &Qp,
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
    ctx.cqe(qp.recv_cq, &spec);
}

/// Handle a request packet addressed to this QP.
pub fn on_request(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let t = frame.pkt.bth.opcode.transport();
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
        QpType::Ud => ud(qp, ctx, frame),
        QpType::Uc => uc(qp, ctx, frame),
        QpType::Rc => rc(qp, ctx, frame),
        QpType::XrcRecv => match crate::transport::xrc::bind_target(qp, ctx, &frame.pkt) {
            Ok(()) => rc(qp, ctx, frame),
            Err(why) => class_c(qp, ctx, &frame.pkt, NakCode::InvalidRequest, why),
        },
        QpType::XrcSend => ctx.counters.inc(CounterId::RxDropped),
    }
}

fn ud(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let Some(deth) = pkt.deth else {
        ctx.counters.inc(CounterId::RxDropped);
        return;
    };
    if deth.qkey != qp.attr.qkey {
        ctx.counters.inc(CounterId::RxQkeyViolation);
        return;
    }
    let Some(w) = take_recv(qp, ctx) else { return };
    let grh = grh_bytes(pkt);
    let total = grh.len() as u64 + pkt.payload.len() as u64;
    if total > capacity(&w) {
        recv_err_cqe(qp, ctx, w.counter, w.srqn, SYNDROME_LOCAL_LENGTH_ERR);
        return;
    }
    let mut data = grh;
    data.extend_from_slice(&pkt.payload);
    if !scatter(qp, ctx, &w.sges, 0, &data) {
        recv_err_cqe(qp, ctx, w.counter, w.srqn, SYNDROME_LOCAL_PROT_ERR);
        return;
    }
    let op = if pkt.imm.is_some() {
        CQE_RESP_SEND_IMM
    } else {
        CQE_RESP_SEND
    };
    // flags_rqpn: bit 28 = GRH in the receive buffer, bit 25 = IPv4 packet (`docs/sources.md` §8).
    recv_cqe(qp, ctx, &w, op, total as u32, pkt, (1 << 28) | (1 << 25));
}

/// The 40-byte GRH area of a UD receive: 20 zero bytes, then the IPv4 header.
fn grh_bytes(pkt: &Packet) -> Vec<u8> {
    let mut g = vec![0u8; 40];
    let a = &pkt.addr;
    let udp_len = 8
        + pkt.transport_header_len()
        + pkt.payload.len()
        + Packet::pad_for(pkt.payload.len()) as usize
        + 4;
    let total = (20 + udp_len) as u16;
    let h = &mut g[20..40];
    h[0] = 0x45;
    h[1] = (a.dscp << 2) | a.ecn as u8;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&a.ip_id.to_be_bytes());
    h[6] = 0x40;
    h[8] = a.ttl;
    h[9] = 17;
    h[12..16].copy_from_slice(&a.src_ip.octets());
    h[16..20].copy_from_slice(&a.dst_ip.octets());
    let mut sum: u32 = 0;
    for c in h.chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    g
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
            read(qp, ctx, frame, true)
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            ctx.counters.inc(CounterId::RxAtomicRequests);
            atomic(qp, ctx, frame)
        }
        _ => data_packet(qp, ctx, frame),
    }
}

/// SEND and WRITE packets (RC and UC).
fn data_packet(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let op = pkt.bth.opcode;
    let pos = op.position();
    let rc = qp.qp_type.is_reliable();
    if op.is_send() {
        if pos.starts_message() {
            if qp.resp.cur.is_some() {
                return class_c(
                    qp,
                    ctx,
                    pkt,
                    NakCode::InvalidRequest,
                    "SEND first while a message is in progress",
                );
            }
            let held = qp.resp.held.take();
            let Some(w) = held.or_else(|| take_recv(qp, ctx)) else {
                if rc {
                    let t = RnrTimer::from_low_bits(qp.attr.min_rnr_timer);
                    nak(qp, ctx, pkt, pkt.bth.psn, Syndrome::RnrNak(t));
                } else {
                    qp.resp.cur = if pos.ends_message() {
                        None
                    } else {
                        Some(InMsg::Drop)
                    };
                }
                return;
            };
            qp.resp.cur = Some(InMsg::Send { wqe: w, offset: 0 });
        }
        let Some(InMsg::Send { wqe, offset }) = qp.resp.cur.clone() else {
            return class_c(
                qp,
                ctx,
                pkt,
                NakCode::InvalidRequest,
                "SEND middle/last without a first",
            );
        };
        let end = offset + pkt.payload.len() as u64;
        if end > capacity(&wqe) {
            recv_err_cqe(qp, ctx, wqe.counter, wqe.srqn, SYNDROME_LOCAL_LENGTH_ERR);
            qp.resp.cur = if rc || pos.ends_message() {
                None
            } else {
                Some(InMsg::Drop)
            };
            return class_c(
                qp,
                ctx,
                pkt,
                NakCode::InvalidRequest,
                "message longer than the receive WQE",
            );
        }
        if !scatter(qp, ctx, &wqe.sges, offset, &pkt.payload) {
            recv_err_cqe(qp, ctx, wqe.counter, wqe.srqn, SYNDROME_LOCAL_PROT_ERR);
            qp.resp.cur = if rc || pos.ends_message() {
                None
            } else {
                Some(InMsg::Drop)
            };
            return class_c(
                qp,
                ctx,
                pkt,
                NakCode::RemoteOperationalError,
                "receive WQE failed its lkey check",
            );
        }
        if pos.ends_message() {
            let opc = if pkt.imm.is_some() {
                CQE_RESP_SEND_IMM
            } else {
                CQE_RESP_SEND
            };
            recv_cqe(qp, ctx, &wqe, opc, end as u32, pkt, 0);
            qp.resp.cur = None;
            qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
        } else {
            qp.resp.cur = Some(InMsg::Send { wqe, offset: end });
        }
    } else if op.is_rdma_write() {
        if !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE) {
            return class_c(
                qp,
                ctx,
                pkt,
                NakCode::InvalidRequest,
                "QP access flags lack REMOTE_WRITE",
            );
        }
        if pos.starts_message() {
            ctx.counters.inc(CounterId::RxWriteRequests);
            let Some(reth) = pkt.reth else {
                return class_c(
                    qp,
                    ctx,
                    pkt,
                    NakCode::InvalidRequest,
                    "WRITE first without RETH",
                );
            };
            let len = reth.dma_len as u64;
            if len > 0 {
                if let Err(e) =
                    ctx.mrs
                        .remote(reth.rkey, qp.pd, reth.va, len, AccessFlags::REMOTE_WRITE)
                {
                    let why = format!(
                        "WRITE rkey {:#x} va {:#x} len {len}: {e:?}",
                        reth.rkey, reth.va
                    );
                    if !rc {
                        qp.resp.cur = if pos.ends_message() {
                            None
                        } else {
                            Some(InMsg::Drop)
                        };
                    }
                    return class_c(qp, ctx, pkt, NakCode::RemoteAccessError, &why);
                }
            }
            qp.resp.cur = Some(InMsg::Write {
                va: reth.va,
                rkey: reth.rkey,
                len,
                offset: 0,
            });
        }
        let Some(InMsg::Write {
            va,
            rkey,
            len,
            offset,
        }) = qp.resp.cur.clone()
        else {
            return class_c(
                qp,
                ctx,
                pkt,
                NakCode::InvalidRequest,
                "WRITE middle/last without a first",
            );
        };
        let end = offset + pkt.payload.len() as u64;
        if end > len {
            return class_c(
                qp,
                ctx,
                pkt,
                NakCode::InvalidRequest,
                "WRITE longer than its RETH length",
            );
        }
        if pos.ends_message() && pkt.imm.is_some() && qp.resp.held.is_none() && !recv_ready(qp, ctx)
        {
            // No receive WQE for the immediate: mlx5 `out_of_buffer` counts it as for a SEND.
            ctx.counters.inc(CounterId::OutOfBuffer);
            if rc {
                let t = RnrTimer::from_low_bits(qp.attr.min_rnr_timer);
                nak(qp, ctx, pkt, pkt.bth.psn, Syndrome::RnrNak(t));
            } else {
                qp.resp.cur = None;
            }
            if pos == crate::wire::Position::Only {
                qp.resp.cur = None;
            }
            return;
        }
        if !pkt.payload.is_empty() {
            match ctx.mrs.remote(
                rkey,
                qp.pd,
                va + offset,
                pkt.payload.len() as u64,
                AccessFlags::REMOTE_WRITE,
            ) {
                Ok(mr) => {
                    mr.region.write(va + offset, &pkt.payload);
                }
                Err(e) => {
                    let why = format!("WRITE rkey {rkey:#x}: {e:?}");
                    return class_c(qp, ctx, pkt, NakCode::RemoteAccessError, &why);
                }
            }
        }
        if pos.ends_message() {
            if pkt.imm.is_some() {
                // The receive a broken UC SEND left is the next one in order (`uc_abandon`).
                let held = qp.resp.held.take();
                if let Some(w) = held.or_else(|| take_recv(qp, ctx)) {
                    recv_cqe(qp, ctx, &w, CQE_RESP_WR_IMM, len as u32, pkt, 0);
                }
            }
            qp.resp.cur = None;
            qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
        } else {
            qp.resp.cur = Some(InMsg::Write {
                va,
                rkey,
                len,
                offset: end,
            });
        }
    } else {
        return class_c(qp, ctx, pkt, NakCode::InvalidRequest, "unexpected opcode");
    }
    if rc {
        qp.resp.epsn = pkt.bth.psn.next();
        if pkt.bth.ack_req || pos.ends_message() {
            ack(qp, ctx, pkt, pkt.bth.psn);
        }
    }
}

fn rd_atomic_allowed(qp: &Qp, need: AccessFlags) -> bool {
    qp.attr.max_dest_rd_atomic > 0 && qp.attr.qp_access_flags.contains(need)
}

/// READ request: check and stream the response (IBTA §9.7.3.1.3, §9.4.4).
fn read(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame, fresh: bool) {
    let pkt = &frame.pkt;
    if !rd_atomic_allowed(qp, AccessFlags::REMOTE_READ) {
        return class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "READ not allowed: QP lacks REMOTE_READ or max_dest_rd_atomic is 0",
        );
    }
    let Some(reth) = pkt.reth else {
        return class_c(qp, ctx, pkt, NakCode::InvalidRequest, "READ without RETH");
    };
    let len = reth.dma_len as u64;
    if len > crate::wqe::MAX_MSG {
        return class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "READ longer than 2^31 bytes",
        );
    }
    if len > 0 {
        // The whole range is checked when the request arrives; each packet is read when sent.
        if let Err(e) = ctx
            .mrs
            .remote(reth.rkey, qp.pd, reth.va, len, AccessFlags::REMOTE_READ)
        {
            let why = format!(
                "READ rkey {:#x} va {:#x} len {len}: {e:?}",
                reth.rkey, reth.va
            );
            return class_c(qp, ctx, pkt, NakCode::RemoteAccessError, &why);
        }
    }
    let mtu = qp.path.map(|p| p.mtu).unwrap_or(1024) as u64;
    let n = len.div_ceil(mtu).max(1) as u32;
    if fresh {
        qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
        qp.resp.epsn = pkt.bth.psn.add(n);
        remember(
            qp,
            RdAtomic::Read {
                psn: pkt.bth.psn,
                npsn: n,
            },
        );
    }
    flush_ack(qp, ctx);
    let mut req = pkt.clone();
    req.payload = Vec::new();
    let mut r = ReadOut {
        req,
        rkey: reth.rkey,
        va: reth.va,
        len,
        n,
        next: 0,
        msn: qp.resp.msn,
    };
    if !fresh {
        // A repeated READ supersedes what is still queued of an earlier response to the same
        // PSNs: the requester lost it and asks again (IBTA Vol 1 §9.7.5.1.2 lets the responder
        // stop a response and start the new one), so a requester that repeats itself while
        // responses are queued cannot grow the queue with copies it will discard.
        let (lo, hi) = (pkt.bth.psn, pkt.bth.psn.add(n));
        qp.resp.tx.retain(|t| match t {
            Tx::Read(o) => {
                let next = o.req.bth.psn.add(o.next);
                !(next.in_range(lo, hi) || lo.in_range(next, o.req.bth.psn.add(o.n)))
            }
            Tx::Frame(_) => true,
        });
    }
    if !qp.resp.tx.is_empty() {
        if qp.resp.tx.len() < TX_CAP {
            qp.resp.tx.push_back(Tx::Read(r));
        } else {
            ctx.counters.inc(CounterId::RxDropped);
        }
    } else if !stream_read(qp, ctx, &mut r) {
        qp.resp.tx.push_back(Tx::Read(r));
    }
}

/// Atomic request (IBTA §9.4.5).
fn atomic(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    if !rd_atomic_allowed(qp, AccessFlags::REMOTE_ATOMIC) {
        return class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "atomic not allowed: QP lacks REMOTE_ATOMIC or max_dest_rd_atomic is 0",
        );
    }
    let Some(a) = pkt.atomic_eth else {
        return class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "atomic without AtomicETH",
        );
    };
    let op = frame
        .ext
        .unwrap_or(if pkt.bth.opcode.operation() == Operation::CompareSwap {
            AtomicOp::Cas {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::Faa { add: a.swap_add }
        });
    let size = op.size() as u64;
    if a.va % size != 0 {
        return class_c(qp, ctx, pkt, NakCode::InvalidRequest, "misaligned atomic");
    }
    let mr = match ctx
        .mrs
        .remote(a.rkey, qp.pd, a.va, size, AccessFlags::REMOTE_ATOMIC)
    {
        Ok(mr) => mr,
        Err(e) => {
            let why = format!("atomic rkey {:#x} va {:#x}: {e:?}", a.rkey, a.va);
            return class_c(qp, ctx, pkt, NakCode::RemoteAccessError, &why);
        }
    };
    let mut b = vec![0u8; size as usize];
    mr.region.read(a.va, &mut b);
    let old = b.iter().fold(0u64, |acc, &x| acc << 8 | x as u64);
    let new = op.apply(old);
    let nb = new.to_be_bytes();
    mr.region.write(a.va, &nb[8 - size as usize..]);
    remember(
        qp,
        RdAtomic::Atomic {
            psn: pkt.bth.psn,
            orig: old,
        },
    );
    qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
    qp.resp.epsn = pkt.bth.psn.next();
    atomic_ack(qp, ctx, pkt, old);
}

fn atomic_ack(qp: &mut Qp, ctx: &mut Ctx, req: &Packet, orig: u64) {
    flush_ack(qp, ctx);
    let mut p = send_back(qp, ctx, req, Opcode::RC_ATOMIC_ACKNOWLEDGE, req.bth.psn);
    p.aeth = Some(Aeth {
        syndrome: Syndrome::Ack {
            credits: Syndrome::CREDITS_INVALID,
        },
        msn: qp.resp.msn,
    });
    p.atomic_ack_eth = Some(AtomicAckEth { orig });
    emit(qp, ctx, Frame { pkt: p, ext: None });
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
                read(qp, ctx, frame, false);
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
                Some(orig) => atomic_ack(qp, ctx, pkt, orig),
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
