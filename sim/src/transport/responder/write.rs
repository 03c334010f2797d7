//! RDMA WRITE packets (RC and UC): the first packet's RETH names the target, checked whole
//! against the MR when it arrives (IBTA Vol 1 §9.7.4.1.1), each packet is written where the
//! previous one ended, and a WRITE with immediate consumes a receive WQE at its last packet.

use mlx5_cq::CQE_RESP_WR_IMM;
use mlx5_hw::AccessFlags;

use super::{class_c, nak, recv_cqe, recv_ready, take_recv, InMsg};
use crate::counters::CounterId;
use crate::ctx::Ctx;
use crate::qp::Qp;
use crate::wire::{NakCode, Packet, Position, RnrTimer, Syndrome};

/// A WRITE packet; returns whether it was delivered (and is to be acknowledged).
pub(super) fn write_packet(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet) -> bool {
    let pos = pkt.bth.opcode.position();
    if !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE) {
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "QP access flags lack REMOTE_WRITE",
        );
        return false;
    }
    if pos.starts_message() && !start_write(qp, ctx, pkt) {
        return false;
    }
    let Some(InMsg::Write {
        va,
        rkey,
        len,
        offset,
    }) = qp.resp.cur.clone()
    else {
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "WRITE middle/last without a first",
        );
        return false;
    };
    let end = offset + pkt.payload.len() as u64;
    if end > len {
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "WRITE longer than its RETH length",
        );
        return false;
    }
    if pos.ends_message() && pkt.imm.is_some() && no_receive_for_imm(qp, ctx, pkt) {
        return false;
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
                class_c(qp, ctx, pkt, NakCode::RemoteAccessError, &why);
                return false;
            }
        }
    }
    finish_write(qp, ctx, pkt, end);
    true
}

/// The last packet of a WRITE with immediate and no receive WQE to take (none held from a
/// broken UC SEND, none posted): RNR NAK on RC, the message dropped on UC; returns true then.
fn no_receive_for_imm(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet) -> bool {
    if qp.resp.held.is_some() || recv_ready(qp, ctx) {
        return false;
    }
    // No receive WQE for the immediate: mlx5 `out_of_buffer` counts it as for a SEND.
    ctx.counters.inc(CounterId::OutOfBuffer);
    if qp.qp_type.is_reliable() {
        let t = RnrTimer::from_low_bits(qp.attr.min_rnr_timer);
        nak(qp, ctx, pkt, pkt.bth.psn, Syndrome::RnrNak(t));
    } else {
        qp.resp.cur = None;
    }
    if pkt.bth.opcode.position() == Position::Only {
        qp.resp.cur = None;
    }
    true
}

/// After a WRITE packet was written: at the last packet complete a WRITE with immediate on a
/// receive WQE and count the message, otherwise remember how far the message got.
fn finish_write(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet, end: u64) {
    let Some(InMsg::Write { va, rkey, len, .. }) = qp.resp.cur.clone() else {
        return;
    };
    if pkt.bth.opcode.position().ends_message() {
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
}

/// The first packet of a WRITE: its RETH, the whole target range checked against the MR;
/// returns false when the packet goes no further.
fn start_write(qp: &mut Qp, ctx: &mut Ctx, pkt: &Packet) -> bool {
    ctx.counters.inc(CounterId::RxWriteRequests);
    let Some(reth) = pkt.reth else {
        class_c(
            qp,
            ctx,
            pkt,
            NakCode::InvalidRequest,
            "WRITE first without RETH",
        );
        return false;
    };
    let len = reth.dma_len as u64;
    if len > 0 {
        if let Err(e) = ctx
            .mrs
            .remote(reth.rkey, qp.pd, reth.va, len, AccessFlags::REMOTE_WRITE)
        {
            let why = format!(
                "WRITE rkey {:#x} va {:#x} len {len}: {e:?}",
                reth.rkey, reth.va
            );
            if !qp.qp_type.is_reliable() {
                qp.resp.cur = if pkt.bth.opcode.position().ends_message() {
                    None
                } else {
                    Some(InMsg::Drop)
                };
            }
            class_c(qp, ctx, pkt, NakCode::RemoteAccessError, &why);
            return false;
        }
    }
    qp.resp.cur = Some(InMsg::Write {
        va: reth.va,
        rkey: reth.rkey,
        len,
        offset: 0,
    });
    true
}
