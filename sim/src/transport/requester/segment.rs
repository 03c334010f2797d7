//! Send WQEs into requests: each kind's packets (IBTA Vol 1 §9.4), a SEND or WRITE segmented
//! by the path MTU and gathered packet by packet as it is sent, within the RC send window.

use mlx5_cq::SYNDROME_LOCAL_QP_OP_ERR;
use mlx5_hw::{AsyncEvent, QpId, QpType};

use super::memory::{check_gather, check_scatter, gather, gather_range};
use super::{restart_timer, retire, Expect, Msg, Pending, ACK_EVERY, WINDOW};
use crate::ctx::{enter_sqe, fail_qp, send_cqe, Ctx};
use crate::qp::Qp;
use crate::srq::Sge;
use crate::transport::{Frame, Path};
use crate::wire::{
    gid_to_ipv4, Addressing, AtomicEth, Bth, Deth, ImmDt, MacAddr, Opcode, Operation, Packet, Reth,
    Transport,
};
use crate::wqe::{AtomicOp, Gather, Raddr, SendWqe, UdDest, WqeFault, WqeKind};

/// Packets one pump sends at most (UC has no ACKs: this bounds what one step puts on the wire).
pub(super) const BURST: u32 = 64;

pub(super) fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
        QpType::XrcSend | QpType::XrcRecv => Transport::Xrc,
        QpType::Dci | QpType::Dct => Transport::Dc,
        _ => Transport::Rc,
    }
}

pub(super) fn opcode(t: Transport, op: Operation) -> Opcode {
    // Every (transport, operation) pair used here is defined by IBTA Table 38.
    Opcode::new(t, op).unwrap_or(Opcode::RC_SEND_ONLY)
}

/// Execute one WQE: build and send its packets, and track or complete it.
pub(super) fn execute(
    qp: &mut Qp,
    ctx: &mut Ctx,
    wqe: &SendWqe,
    index: u16,
) -> Result<(), WqeFault> {
    let signaled = wqe.signaled() || qp.sq_sig_all;
    let op = wqe.ctrl.opcode;
    let mut pending = Pending {
        index,
        opcode: op,
        signaled,
        first_psn: qp.req.psn,
        npsn: 0,
        frames: Vec::new(),
        msg: None,
        sent: 0,
        acked: 0,
        byte_len: 0,
        expect: Expect::Ack,
        done: false,
        next_resp: qp.req.psn,
        gap_resent: false,
    };
    match &wqe.kind {
        WqeKind::Nop => {
            pending.done = true;
        }
        WqeKind::Send {
            data,
            imm,
            ud: Some(ud),
        } => {
            ud_send(qp, ctx, wqe, data, *imm, ud, &mut pending)?;
        }
        WqeKind::Send {
            data,
            imm,
            ud: None,
        } => {
            check_gather(qp, ctx, data)?;
            message(qp, &mut pending, data, false, None, *imm, wqe.solicited())?;
        }
        WqeKind::Write { remote, data, imm } => {
            check_gather(qp, ctx, data)?;
            let reth = Reth {
                va: remote.va,
                rkey: remote.rkey,
                dma_len: data.len() as u32,
            };
            message(
                qp,
                &mut pending,
                data,
                true,
                Some(reth),
                *imm,
                wqe.solicited(),
            )?;
        }
        WqeKind::Read { remote, local } => read_request(qp, ctx, remote, local, &mut pending)?,
        WqeKind::Atomic {
            remote,
            op: aop,
            local,
        } => atomic_request(qp, ctx, remote, aop, local, &mut pending)?,
    }
    crate::transport::xrc::stamp_requests(wqe, &mut pending.frames);
    if let Some(m) = pending.msg.as_mut() {
        m.xrc_srqn = wqe.xrc_srqn;
    }
    qp.req.psn = qp.req.psn.add(pending.npsn);
    post(qp, ctx, pending);
    Ok(())
}

/// A request built: RC and UC keep it outstanding and send its packets in the send queue's
/// order; UD sends at once and completes.
fn post(qp: &mut Qp, ctx: &mut Ctx, mut pending: Pending) {
    if qp.qp_type != QpType::Ud {
        // RC and UC: the packets go out from the send queue's order by [`pump`].
        let idle = qp.req.outstanding.is_empty();
        qp.req.outstanding.push_back(pending);
        if idle {
            restart_timer(qp, ctx);
        }
        pump(qp, ctx);
        retire(qp, ctx);
    } else {
        for f in pending.frames.drain(..) {
            ctx.out.push(f);
        }
        if pending.signaled {
            send_cqe(
                qp,
                ctx,
                pending.index,
                pending.opcode,
                pending.byte_len,
                None,
            );
        }
    }
}

/// A UD SEND: one packet to the WQE's address vector, gathered and sent at once.
pub(super) fn ud_send(
    qp: &mut Qp,
    ctx: &mut Ctx,
    wqe: &SendWqe,
    data: &Gather,
    imm: Option<[u8; 4]>,
    ud: &UdDest,
    pending: &mut Pending,
) -> Result<(), WqeFault> {
    let t = transport_of(qp.qp_type);
    let payload = gather(qp, ctx, data)?;
    pending.byte_len = payload.len() as u32;
    // The WR's Q_Key is replaced by the QP's when its high bit is set (IBTA §10.2.5).
    let qkey = if ud.qkey & 0x8000_0000 != 0 {
        qp.attr.qkey
    } else {
        ud.qkey
    };
    let dst_ip = gid_to_ipv4(&ud.rgid);
    let addr = Addressing {
        ttl: if ud.hop_limit == 0 {
            Addressing::DEFAULT_TTL
        } else {
            ud.hop_limit
        },
        dscp: ud.tclass >> 2,
        ..Addressing::new(
            ctx.port.mac,
            MacAddr(ud.rmac),
            ctx.port.ip,
            dst_ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            if ud.extended { ud.rlid } else { 0xc000 },
        )
    };
    let operation = if imm.is_some() {
        Operation::SendOnlyWithImmediate
    } else {
        Operation::SendOnly
    };
    let mut bth = Bth::new(opcode(t, operation), ud.dqpn, qp.req.psn);
    bth.solicited = wqe.solicited();
    let mut pkt = Packet::new(addr, bth);
    pkt.deth = Some(Deth {
        qkey,
        src_qp: qp.qpn,
    });
    pkt.imm = imm.map(|b| ImmDt(u32::from_be_bytes(b)));
    pkt.payload = payload;
    qp.req.psn = qp.req.psn.next();
    ctx.out.push(Frame { pkt, ext: None });
    pending.done = true;
    Ok(())
}

/// The connected QP's path, or LOCAL_QP_OP.
pub(super) fn path_of(qp: &Qp) -> Result<Path, WqeFault> {
    qp.path.ok_or_else(|| WqeFault {
        syndrome: SYNDROME_LOCAL_QP_OP_ERR,
        why: "no path".into(),
    })
}

/// An RDMA READ request: one packet, kept for retransmission, expecting as many response
/// packets as the length takes at the path MTU (IBTA Vol 1 §9.7.3.1.3).
pub(super) fn read_request(
    qp: &Qp,
    ctx: &Ctx,
    remote: &Raddr,
    local: &[Sge],
    pending: &mut Pending,
) -> Result<(), WqeFault> {
    check_scatter(qp, ctx, local)?;
    let len: u64 = local.iter().map(|s| s.len as u64).sum();
    let path = path_of(qp)?;
    let t = transport_of(qp.qp_type);
    let mut bth = Bth::new(
        opcode(t, Operation::RdmaReadRequest),
        path.dest_qpn,
        qp.req.psn,
    );
    bth.ack_req = true;
    let mut pkt = Packet::new(path.addr, bth);
    pkt.reth = Some(Reth {
        va: remote.va,
        rkey: remote.rkey,
        dma_len: len as u32,
    });
    pending.byte_len = len as u32;
    pending.npsn = (len.div_ceil(path.mtu as u64)).max(1) as u32;
    pending.expect = Expect::Read {
        local: local.to_vec(),
        len,
    };
    pending.frames.push(Frame { pkt, ext: None });
    Ok(())
}

/// An atomic request: one CmpSwap or FetchAdd packet (the masked operands beside it, for a
/// software ConnectX peer only), kept for retransmission.
pub(super) fn atomic_request(
    qp: &Qp,
    ctx: &Ctx,
    remote: &Raddr,
    aop: &AtomicOp,
    local: &Sge,
    pending: &mut Pending,
) -> Result<(), WqeFault> {
    check_scatter(qp, ctx, std::slice::from_ref(local))?;
    let path = path_of(qp)?;
    if aop.is_masked() && path.foreign {
        // The masked operands travel in the software ConnectX's own trailer; another
        // RoCE implementation (rxe) would run a plain CmpSwap / FetchAdd and ignore the
        // masks: silently wrong, so refuse.
        return Err(WqeFault {
            syndrome: SYNDROME_LOCAL_QP_OP_ERR,
            why: "masked atomics need a software ConnectX peer; this QP's peer is reached through a TAP interface (another RoCE implementation would ignore the masks)".into(),
        });
    }
    let operation = match aop {
        AtomicOp::Cas { .. } | AtomicOp::MaskedCs { .. } => Operation::CompareSwap,
        _ => Operation::FetchAdd,
    };
    let (swap_add, compare) = match *aop {
        AtomicOp::Cas { compare, swap } => (swap, compare),
        AtomicOp::Faa { add } => (add, 0),
        AtomicOp::MaskedCs { compare, swap, .. } => (swap, compare),
        AtomicOp::MaskedFa { add, boundary, .. } => (add, boundary),
    };
    let t = transport_of(qp.qp_type);
    let mut bth = Bth::new(opcode(t, operation), path.dest_qpn, qp.req.psn);
    bth.ack_req = true;
    let mut pkt = Packet::new(path.addr, bth);
    pkt.atomic_eth = Some(AtomicEth {
        va: remote.va,
        rkey: remote.rkey,
        swap_add,
        compare,
    });
    pending.byte_len = aop.size() as u32;
    pending.npsn = 1;
    pending.expect = Expect::Atomic {
        local: *local,
        size: aop.size(),
    };
    pending.frames.push(Frame {
        pkt,
        ext: aop.is_masked().then_some(*aop),
    });
    Ok(())
}

/// Describe a SEND or WRITE message (IBTA §9.4: first/middle/last/only by path MTU); its
/// packets are built when sent ([`pump`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn message(
    qp: &Qp,
    p: &mut Pending,
    data: &Gather,
    write: bool,
    reth: Option<Reth>,
    imm: Option<[u8; 4]>,
    solicited: bool,
) -> Result<(), WqeFault> {
    let Some(path) = qp.path else {
        return Err(WqeFault {
            syndrome: SYNDROME_LOCAL_QP_OP_ERR,
            why: "connected QP in RTS without a path".into(),
        });
    };
    let len = data.len();
    p.byte_len = len as u32;
    p.npsn = len.div_ceil(path.mtu as u64).max(1) as u32;
    p.msg = Some(Msg {
        data: data.clone(),
        len: len as u32,
        write,
        reth,
        imm,
        solicited,
        xrc_srqn: None,
    });
    Ok(())
}

/// Build packet `k` of a SEND or WRITE message, gathering its payload now (RETH on the first
/// WRITE packet, ImmDt on the last, AckReq on the last RC packet and every [`ACK_EVERY`]-th).
pub(super) fn build_packet(
    qp: &Qp,
    ctx: &Ctx,
    p: &Pending,
    m: &Msg,
    k: u32,
) -> Result<Frame, WqeFault> {
    let Some(path) = qp.path else {
        return Err(WqeFault {
            syndrome: SYNDROME_LOCAL_QP_OP_ERR,
            why: "connected QP in RTS without a path".into(),
        });
    };
    let t = transport_of(qp.qp_type);
    let mtu = path.mtu as u64;
    let n = p.npsn;
    let offset = k as u64 * mtu;
    let size = (m.len as u64).saturating_sub(offset).min(mtu) as usize;
    let payload = gather_range(qp, ctx, &m.data, offset, size)?;
    let last = k + 1 == n;
    let operation = match (m.write, n == 1, k == 0, last, m.imm.is_some()) {
        (false, true, _, _, false) => Operation::SendOnly,
        (false, true, _, _, true) => Operation::SendOnlyWithImmediate,
        (false, false, true, _, _) => Operation::SendFirst,
        (false, false, _, false, _) => Operation::SendMiddle,
        (false, false, _, true, false) => Operation::SendLast,
        (false, false, _, true, true) => Operation::SendLastWithImmediate,
        (true, true, _, _, false) => Operation::RdmaWriteOnly,
        (true, true, _, _, true) => Operation::RdmaWriteOnlyWithImmediate,
        (true, false, true, _, _) => Operation::RdmaWriteFirst,
        (true, false, _, false, _) => Operation::RdmaWriteMiddle,
        (true, false, _, true, false) => Operation::RdmaWriteLast,
        (true, false, _, true, true) => Operation::RdmaWriteLastWithImmediate,
    };
    let mut bth = Bth::new(opcode(t, operation), path.dest_qpn, p.first_psn.add(k));
    bth.ack_req =
        matches!(t, Transport::Rc | Transport::Xrc) && (last || (k + 1).is_multiple_of(ACK_EVERY));
    bth.solicited = last && m.solicited && (!m.write || m.imm.is_some());
    let mut pkt = Packet::new(path.addr, bth);
    if k == 0 {
        pkt.reth = m.reth;
    }
    if last {
        pkt.imm = m.imm.map(|b| ImmDt(u32::from_be_bytes(b)));
    }
    pkt.payload = payload;
    if let Some(srqn) = m.xrc_srqn {
        pkt.xrceth = Some(crate::wire::packet::Xrceth { srqn });
    }
    Ok(Frame { pkt, ext: None })
}

/// Send the next packets of the outstanding requests, in order, while the RC window
/// ([`WINDOW`]) has room, at most 64 packets per call; a UC message completes when its last
/// packet is sent. A packet whose memory fails its check at send time fails its message with
/// LOCAL_PROT. Returns whether anything was sent.
pub fn pump(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    let rc = qp.qp_type.is_reliable();
    let mut in_flight: u32 = if rc {
        qp.req
            .outstanding
            .iter()
            .filter(|p| !p.done)
            .map(|p| p.sent.saturating_sub(p.acked))
            .sum()
    } else {
        0
    };
    let mut budget = BURST;
    let mut work = false;
    let mut uc_done = false;
    for i in 0..qp.req.outstanding.len() {
        let p = &qp.req.outstanding[i];
        if p.done || p.sent >= p.packets() {
            continue;
        }
        while qp.req.outstanding[i].sent < qp.req.outstanding[i].packets() {
            if budget == 0 || (rc && in_flight >= WINDOW) {
                return finish_pump(qp, ctx, work, uc_done);
            }
            let p = &qp.req.outstanding[i];
            let k = p.sent;
            let mut frame = match &p.msg {
                Some(m) => match build_packet(qp, ctx, p, m, k) {
                    Ok(f) => f,
                    Err(f) => {
                        let index = p.index;
                        fail_message(qp, ctx, index, &f);
                        return true;
                    }
                },
                None => match p.frames.get(k as usize) {
                    Some(f) => f.clone(),
                    None => break,
                },
            };
            if qp.qp_type == QpType::Dci {
                crate::transport::dc::stamp(qp, &mut frame);
            }
            ctx.out.push(frame);
            qp.req.outstanding[i].sent += 1;
            in_flight += 1;
            budget -= 1;
            work = true;
        }
        if !rc {
            // UC (IBTA §9.8): complete when the last packet is on the wire.
            qp.req.outstanding[i].done = true;
            uc_done = true;
        }
    }
    finish_pump(qp, ctx, work, uc_done)
}

pub(super) fn finish_pump(qp: &mut Qp, ctx: &mut Ctx, work: bool, uc_done: bool) -> bool {
    if uc_done {
        retire(qp, ctx);
    }
    work
}

/// A packet of the outstanding request with WQE `index` could not be gathered: earlier
/// requests are flushed, it completes with the error, and the QP fails (RC) or enters SQE (UC).
pub(super) fn fail_message(qp: &mut Qp, ctx: &mut Ctx, index: u16, f: &WqeFault) {
    tracing::warn!(device = ctx.dev, qpn = qp.qpn, index, syndrome = f.syndrome, why = %f.why, "send WQE failed while sending");
    retire(qp, ctx);
    let Some(pos) = qp.req.outstanding.iter().position(|p| p.index == index) else {
        return;
    };
    let earlier: Vec<Pending> = qp.req.outstanding.drain(..pos).collect();
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
    if let Some(p) = qp.req.outstanding.pop_front() {
        send_cqe(qp, ctx, p.index, p.opcode, 0, Some(f.syndrome));
    }
    if qp.qp_type.is_reliable() {
        fail_qp(qp, ctx, Some(AsyncEvent::QpFatal(QpId(qp.qpn))));
    } else {
        enter_sqe(qp, ctx);
    }
}
