//! SEND packets (RC and UC): the first packet of a message consumes a receive WQE (RC without
//! one: RNR NAK with `min_rnr_timer`, IBTA Vol 1 §9.7.5.2.8; UC: the message is dropped), each
//! packet is scattered into it, the last completes it.

use mlx5_cq::{
    CQE_RESP_SEND, CQE_RESP_SEND_IMM, SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_PROT_ERR,
};

use super::{capacity, class_c, nak, recv_cqe, take_recv, InMsg};
use crate::ctx::{recv_err_cqe, Ctx};
use crate::qp::{Qp, RecvWqe};
use crate::transport::requester::scatter;
use crate::wire::{NakCode, Packet, RnrTimer, Syndrome};

/// A SEND packet; returns whether it was delivered (and is to be acknowledged).
pub(super) fn send_packet(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet) -> bool {
    let pos = pkt.bth.opcode.position();
    let rc = qp.qp_type.is_reliable();
    if pos.starts_message() && !start_send(qp, ctx, pkt) {
        return false;
    }
    let Some(InMsg::Send { wqe, offset }) = qp.resp.cur.clone() else {
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "SEND middle/last without a first",
        );
        return false;
    };
    let end = offset + pkt.payload.len() as u64;
    if end > capacity(&wqe) {
        recv_err_cqe(qp, ctx, wqe.counter, wqe.srqn, SYNDROME_LOCAL_LENGTH_ERR);
        qp.resp.cur = if rc || pos.ends_message() {
            None
        } else {
            Some(InMsg::Drop)
        };
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "message longer than the receive WQE",
        );
        return false;
    }
    if !scatter(qp, ctx, &wqe.sges, offset, &pkt.payload) {
        recv_err_cqe(qp, ctx, wqe.counter, wqe.srqn, SYNDROME_LOCAL_PROT_ERR);
        qp.resp.cur = if rc || pos.ends_message() {
            None
        } else {
            Some(InMsg::Drop)
        };
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::RemoteOperationalError,
            "receive WQE failed its lkey check",
        );
        return false;
    }
    finish_send(qp, ctx, pkt, wqe, end);
    true
}

/// The first packet of a SEND: take a receive WQE (or the one a broken UC SEND left); returns
/// false when the packet goes no further (a message already in progress, no receive WQE).
fn start_send(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet) -> bool {
    let pos = pkt.bth.opcode.position();
    if qp.resp.cur.is_some() {
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "SEND first while a message is in progress",
        );
        return false;
    }
    let held = qp.resp.held.take();
    let Some(w) = held.or_else(|| take_recv(qp, ctx)) else {
        if qp.qp_type.is_reliable() {
            let t = RnrTimer::from_low_bits(qp.attr.min_rnr_timer);
            nak(qp, ctx, pkt, pkt.bth.psn, Syndrome::RnrNak(t));
        } else {
            qp.resp.cur = if pos.ends_message() {
                None
            } else {
                Some(InMsg::Drop)
            };
        }
        return false;
    };
    qp.resp.cur = Some(InMsg::Send { wqe: w, offset: 0 });
    true
}

/// After a SEND packet was scattered: complete the receive at the last packet, or remember
/// how far the message got.
fn finish_send(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet, wqe: RecvWqe, end: u64) {
    if pkt.bth.opcode.position().ends_message() {
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
}
