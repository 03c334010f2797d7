//! RDMA READ requests (IBTA Vol 1 §9.7.3.1.3, §9.4.4): the range is checked when the request
//! arrives, and the response is streamed, each packet read from the registered memory when it
//! is sent.

use mlx5_hw::AccessFlags;

use super::{
    class_c, flush_ack, rd_atomic_allowed, remember, send_back, RdAtomic, ReadOut, Tx, TX_CAP,
};
use crate::counters::CounterId;
use crate::ctx::Ctx;
use crate::qp::Qp;
use crate::transport::Frame;
use crate::wire::{Aeth, NakCode, Opcode, Psn, Syndrome};

/// READ response packets a QP sends per step at most, all its READs together (the rest
/// follows at later steps): a response's first packets leave while later ones are still to be
/// read, as a NIC streams them, and a step stays short (under emulation a step building a
/// few hundred packets outlasted Soft-RoCE's ACK timeout, whose retries then queued faster
/// than they were answered).
const READ_BURST: u32 = 16;

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

/// READ request: check and stream the response (IBTA §9.7.3.1.3, §9.4.4).
pub(super) fn read(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame, fresh: bool) {
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
        supersede(qp, pkt.bth.psn, n);
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

/// A repeated READ supersedes what is still queued of an earlier response to the same PSNs:
/// the requester lost it and asks again (IBTA Vol 1 §9.7.5.1.2 lets the responder stop a
/// response and start the new one), so a requester that repeats itself while responses are
/// queued cannot grow the queue with copies it will discard.
fn supersede(qp: &mut Qp, lo: Psn, n: u32) {
    let hi = lo.add(n);
    qp.resp.tx.retain(|t| match t {
        Tx::Read(o) => {
            let next = o.req.bth.psn.add(o.next);
            !(next.in_range(lo, hi) || lo.in_range(next, o.req.bth.psn.add(o.n)))
        }
        Tx::Frame(_) => true,
    });
}
