//! Atomic requests (IBTA Vol 1 §9.4.5): CmpSwap and FetchAdd, plain or masked, executed once
//! and answered with an atomic ACK carrying the original value.

use mlx5_hw::AccessFlags;

use super::{class_c, emit, flush_ack, rd_atomic_allowed, remember, send_back, RdAtomic};
use crate::ctx::Ctx;
use crate::qp::Qp;
use crate::transport::Frame;
use crate::wire::{Aeth, AtomicAckEth, NakCode, Opcode, Operation, Packet, Syndrome};
use crate::wqe::AtomicOp;

/// Atomic request (IBTA §9.4.5).
pub(super) fn atomic(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
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
    // The target in the device's atomic byte order (host order unless configured
    // big-endian, [`crate::wqe::AtomicEndianness`]); the AtomicETH operands are numbers.
    let order = ctx.port.atomic_endianness;
    let mut b = vec![0u8; size as usize];
    mr.region.read(a.va, &mut b);
    let old = order.load(&b);
    let new = op.apply(old);
    mr.region.write(a.va, &order.store(new, op.size()));
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

pub(super) fn atomic_ack(qp: &mut Qp, ctx: &mut Ctx, req: &Packet, orig: u64) {
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
