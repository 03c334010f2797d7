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

use std::collections::VecDeque;

use mlx5_cq::{
    SYNDROME_LOCAL_PROT_ERR, SYNDROME_LOCAL_QP_OP_ERR, SYNDROME_REMOTE_ACCESS_ERR,
    SYNDROME_REMOTE_INVAL_REQ_ERR, SYNDROME_REMOTE_OP_ERR, SYNDROME_RNR_RETRY_EXC_ERR,
    SYNDROME_TRANSPORT_RETRY_EXC_ERR,
};
use mlx5_hw::{AsyncEvent, QpId, QpState, QpType};

use crate::bugs::DriverBugKind;
use crate::counters::CounterId;
use crate::engine::{enter_sqe, fail_qp, send_cqe, Ctx};
use crate::qp::Qp;
use crate::srq::Sge;
use crate::transport::Frame;
use crate::wire::{
    gid_to_ipv4, local_ack_timeout, Addressing, AtomicEth, Bth, Deth, ImmDt, MacAddr, NakCode,
    Opcode, Operation, Packet, Psn, Reth, Syndrome, Transport,
};
use crate::wqe::{
    parse, ring_bytes, AtomicOp, Ctrl, Gather, ParseLimits, SendWqe, WqeFault, WqeKind,
};

/// What completes an outstanding request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// An ACK covering its last PSN.
    Ack,
    /// READ response data for the local scatter list.
    Read {
        /// Local buffers.
        local: Vec<Sge>,
        /// Bytes expected.
        len: u64,
    },
    /// An atomic ACK carrying the original value.
    Atomic {
        /// Local buffer.
        local: Sge,
        /// Operand size.
        size: u8,
    },
}

/// An outstanding send WQE.
#[derive(Clone, Debug)]
pub struct Pending {
    /// WQE index (first basic block).
    pub index: u16,
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
    /// CQE requested.
    pub signaled: bool,
    /// First PSN.
    pub first_psn: Psn,
    /// PSNs consumed (0 for a NOP).
    pub npsn: u32,
    /// READ / atomic: the request packet, for retransmission. SEND and WRITE keep no packets:
    /// they are gathered from the registered memory each time one is sent ([`Msg`]).
    pub frames: Vec<Frame>,
    /// SEND / WRITE (RC, UC): what to gather and how to build its packets.
    pub msg: Option<Msg>,
    /// Request packets sent so far (rewound by a retransmission).
    pub sent: u32,
    /// RC SEND / WRITE: packets acknowledged so far (an ACK of a PSN inside the message).
    pub acked: u32,
    /// Bytes of the message (CQE byte count).
    pub byte_len: u32,
    /// What completes it.
    pub expect: Expect,
    /// Completed (waiting for earlier ones to retire).
    pub done: bool,
    /// READ: the PSN of the next response packet expected (responses arrive in order; a gap
    /// means one was lost).
    pub next_resp: Psn,
    /// READ: a gap was seen and the request resent; further out-of-order responses are ignored
    /// until the resent responses start arriving.
    pub gap_resent: bool,
}

/// A SEND or WRITE message whose packets are gathered one by one as they are sent, as a NIC
/// DMAs each packet's payload from the registered memory at send time (so memory is bounded
/// by the path MTU times the send window, whatever the message size, and an MR deregistered
/// in the middle of a message fails it).
#[derive(Clone, Debug)]
pub struct Msg {
    /// Local data.
    pub data: Gather,
    /// Message length.
    pub len: u32,
    /// RDMA WRITE (else SEND).
    pub write: bool,
    /// RETH of the first packet (WRITE).
    pub reth: Option<Reth>,
    /// Immediate data of the last packet.
    pub imm: Option<[u8; 4]>,
    /// Solicited event requested.
    pub solicited: bool,
    /// XRC: the remote XRC SRQ every packet's XRCETH names (IBTA Annex A14).
    pub xrc_srqn: Option<u32>,
}

/// Request packets an RC requester keeps sent and unacknowledged (READ and atomic requests
/// count one each): the send window that bounds the device's memory. A multiple of
/// [`ACK_EVERY`], so the last packet of a full window requests an ACK.
pub const WINDOW: u32 = 128;

/// AckReq is set on every `ACK_EVERY`-th packet of a long RC message besides its last (as
/// rxe's requester does every `RXE_MAX_PKT_PER_ACK` packets, `rxe_req.c`; IBTA Vol 1 §9.7.2
/// leaves when to request an ACK to the requester), so the window moves before the message
/// ends.
pub const ACK_EVERY: u32 = 64;

/// Packets one pump sends at most (UC has no ACKs: this bounds what one step puts on the wire).
const BURST: u32 = 64;

impl Pending {
    /// Request packets this request sends.
    fn packets(&self) -> u32 {
        if self.msg.is_some() {
            self.npsn
        } else {
            self.frames.len() as u32
        }
    }
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }
    fn contains(&self, p: Psn) -> bool {
        self.npsn > 0 && p.in_range(self.first_psn, self.first_psn.add(self.npsn))
    }
    fn is_rd_atomic(&self) -> bool {
        !matches!(self.expect, Expect::Ack)
    }
}

/// Requester state of a QP.
#[derive(Debug, Default)]
pub struct Requester {
    /// Next PSN to send.
    pub psn: Psn,
    /// Outstanding requests, oldest first.
    pub outstanding: VecDeque<Pending>,
    /// Local ACK timer deadline (virtual ns).
    pub timer: Option<u64>,
    /// Transport retries left.
    pub retries_left: u8,
    /// RNR retries left (ignored when `rnr_retry` is 7).
    pub rnr_left: u8,
    /// Waiting out an RNR NAK: (until, PSN to resend from).
    pub rnr_until: Option<(u64, Psn)>,
    /// The PSN the last NAK-triggered retry resent from, until progress or a timeout: a
    /// second NAK for the same PSN (a duplicated NAK, or one for packets already in flight)
    /// does not start another retry (as rxe's completer ignores NAKs while a retry is under
    /// way, `rxe_comp.c` `started_retry`).
    pub retrying_from: Option<Psn>,
}

impl Requester {
    /// Arm the retry counters from the QP attributes (RTS).
    pub fn reset_retries(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retries_left = retry_cnt;
        self.rnr_left = rnr_retry;
    }
}

fn ack_timeout(qp: &Qp) -> Option<u64> {
    local_ack_timeout(qp.attr.timeout).map(|d| d.as_nanos() as u64)
}

fn restart_timer(qp: &mut Qp, now: u64) {
    qp.req.timer = if qp.req.outstanding.is_empty() || !qp.qp_type.is_reliable() {
        None
    } else {
        ack_timeout(qp).map(|t| now + t)
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
        let wqe = match parsed {
            Ok(w) => w,
            Err(f) => {
                local_failure(qp, ctx, index, ctrl.opcode, bbs, &f);
                return true;
            }
        };
        // Flow control: READ/atomic depth and fences.
        let rd = qp
            .req
            .outstanding
            .iter()
            .filter(|p| p.is_rd_atomic() && !p.done)
            .count();
        let is_rd = matches!(wqe.kind, WqeKind::Read { .. } | WqeKind::Atomic { .. });
        if qp.qp_type.is_reliable()
            && ((is_rd && rd >= (qp.attr.max_rd_atomic.max(1)) as usize)
                || (wqe.fenced() && rd > 0))
        {
            break;
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
        if let Err(f) = execute(qp, ctx, &wqe, index) {
            // sq_ci already moved past the WQE; report it and fail the QP.
            report_local(qp, ctx, index, wqe.ctrl.opcode, &f);
            return true;
        }
    }
    work
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

fn prot(why: String) -> WqeFault {
    WqeFault {
        syndrome: SYNDROME_LOCAL_PROT_ERR,
        why,
    }
}

/// Read the gather list (LOCAL_PROT on any key, PD or bounds violation).
fn gather(qp: &Qp, ctx: &Ctx, data: &Gather) -> Result<Vec<u8>, WqeFault> {
    match data {
        Gather::Inline(v) => Ok(v.clone()),
        Gather::Sges(sges) => {
            let mut out = Vec::with_capacity(data.len() as usize);
            for (i, s) in sges.iter().enumerate() {
                if s.len == 0 {
                    continue;
                }
                let mr = ctx
                    .mrs
                    .local(s.lkey, qp.pd, s.addr, s.len as u64, false)
                    .map_err(|e| {
                        prot(format!(
                            "gather entry {i}: lkey {:#x} addr {:#x} len {}: {e:?}",
                            s.lkey, s.addr, s.len
                        ))
                    })?;
                let start = out.len();
                out.resize(start + s.len as usize, 0);
                mr.region.read(s.addr, &mut out[start..]);
            }
            Ok(out)
        }
    }
}

/// Check a gather list's keys, PD and bounds (LOCAL_PROT) without reading it.
fn check_gather(qp: &Qp, ctx: &Ctx, data: &Gather) -> Result<(), WqeFault> {
    let Gather::Sges(sges) = data else {
        return Ok(());
    };
    for (i, s) in sges.iter().enumerate() {
        if s.len == 0 {
            continue;
        }
        ctx.mrs
            .local(s.lkey, qp.pd, s.addr, s.len as u64, false)
            .map_err(|e| {
                prot(format!(
                    "gather entry {i}: lkey {:#x} addr {:#x} len {}: {e:?}",
                    s.lkey, s.addr, s.len
                ))
            })?;
    }
    Ok(())
}

/// Read `n` bytes at byte `offset` of a gather list (one packet's payload), checking each
/// piece against its MR at this moment (LOCAL_PROT if it is gone).
fn gather_range(
    qp: &Qp,
    ctx: &Ctx,
    data: &Gather,
    mut offset: u64,
    n: usize,
) -> Result<Vec<u8>, WqeFault> {
    let sges = match data {
        Gather::Inline(v) => {
            let start = (offset as usize).min(v.len());
            let end = start.saturating_add(n).min(v.len());
            return Ok(v[start..end].to_vec());
        }
        Gather::Sges(s) => s,
    };
    let mut out = Vec::with_capacity(n);
    for (i, s) in sges.iter().enumerate() {
        if out.len() == n {
            break;
        }
        let len = s.len as u64;
        if offset >= len {
            offset -= len;
            continue;
        }
        let take = ((len - offset) as usize).min(n - out.len());
        let addr = s.addr + offset;
        let mr = ctx
            .mrs
            .local(s.lkey, qp.pd, addr, take as u64, false)
            .map_err(|e| {
                prot(format!(
                    "gather entry {i}: lkey {:#x} addr {addr:#x} len {take} at send time: {e:?}",
                    s.lkey
                ))
            })?;
        let start = out.len();
        out.resize(start + take, 0);
        mr.region.read(addr, &mut out[start..]);
        offset = 0;
    }
    Ok(out)
}

/// Check a local scatter list for LOCAL_WRITE.
fn check_scatter(qp: &Qp, ctx: &Ctx, sges: &[Sge]) -> Result<(), WqeFault> {
    for (i, s) in sges.iter().enumerate() {
        if s.len == 0 {
            continue;
        }
        ctx.mrs
            .local(s.lkey, qp.pd, s.addr, s.len as u64, true)
            .map_err(|e| {
                prot(format!(
                    "scatter entry {i}: lkey {:#x} addr {:#x} len {} (needs LOCAL_WRITE): {e:?}",
                    s.lkey, s.addr, s.len
                ))
            })?;
    }
    Ok(())
}

/// Write `data` at byte `offset` of a scatter list; false if a key check fails.
pub fn scatter(qp: &Qp, ctx: &Ctx, sges: &[Sge], mut offset: u64, data: &[u8]) -> bool {
    let mut rest = data;
    for s in sges {
        if rest.is_empty() {
            break;
        }
        let len = s.len as u64;
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = ((len - offset) as usize).min(rest.len());
        let Ok(mr) = ctx
            .mrs
            .local(s.lkey, qp.pd, s.addr + offset, n as u64, true)
        else {
            return false;
        };
        if !mr.region.write(s.addr + offset, &rest[..n]) {
            return false;
        }
        rest = &rest[n..];
        offset = 0;
    }
    rest.is_empty()
}

fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
        QpType::XrcSend | QpType::XrcRecv => Transport::Xrc,
    }
}

fn opcode(t: Transport, op: Operation) -> Opcode {
    // Every (transport, operation) pair used here is defined by IBTA Table 38.
    Opcode::new(t, op).unwrap_or(Opcode::RC_SEND_ONLY)
}

/// Execute one WQE: build and send its packets, and track or complete it.
fn execute(qp: &mut Qp, ctx: &mut Ctx, wqe: &SendWqe, index: u16) -> Result<(), WqeFault> {
    let t = transport_of(qp.qp_type);
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
        WqeKind::Read { remote, local } => {
            check_scatter(qp, ctx, local)?;
            let len: u64 = local.iter().map(|s| s.len as u64).sum();
            let Some(path) = qp.path else {
                return Err(WqeFault {
                    syndrome: SYNDROME_LOCAL_QP_OP_ERR,
                    why: "no path".into(),
                });
            };
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
                local: local.clone(),
                len,
            };
            pending.frames.push(Frame { pkt, ext: None });
        }
        WqeKind::Atomic {
            remote,
            op: aop,
            local,
        } => {
            check_scatter(qp, ctx, std::slice::from_ref(local))?;
            let Some(path) = qp.path else {
                return Err(WqeFault {
                    syndrome: SYNDROME_LOCAL_QP_OP_ERR,
                    why: "no path".into(),
                });
            };
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
        }
    }
    crate::transport::xrc::stamp_requests(wqe, &mut pending.frames);
    if let Some(m) = pending.msg.as_mut() {
        m.xrc_srqn = wqe.xrc_srqn;
    }
    qp.req.psn = qp.req.psn.add(pending.npsn);
    if qp.qp_type != QpType::Ud {
        // RC and UC: the packets go out from the send queue's order by [`pump`].
        let idle = qp.req.outstanding.is_empty();
        qp.req.outstanding.push_back(pending);
        if idle {
            restart_timer(qp, ctx.now);
        }
        pump(qp, ctx);
        retire(qp, ctx);
    } else {
        for f in pending.frames.drain(..) {
            ctx.out.push(f);
        }
        if pending.signaled {
            send_cqe(qp, ctx, index, op, pending.byte_len, None);
        }
    }
    Ok(())
}

/// Describe a SEND or WRITE message (IBTA §9.4: first/middle/last/only by path MTU); its
/// packets are built when sent ([`pump`]).
#[allow(clippy::too_many_arguments)]
fn message(
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
fn build_packet(qp: &Qp, ctx: &Ctx, p: &Pending, m: &Msg, k: u32) -> Result<Frame, WqeFault> {
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
            let frame = match &p.msg {
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

fn finish_pump(qp: &mut Qp, ctx: &mut Ctx, work: bool, uc_done: bool) -> bool {
    if uc_done {
        retire(qp, ctx);
    }
    work
}

/// A packet of the outstanding request with WQE `index` could not be gathered: earlier
/// requests are flushed, it completes with the error, and the QP fails (RC) or enters SQE (UC).
fn fail_message(qp: &mut Qp, ctx: &mut Ctx, index: u16, f: &WqeFault) {
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

/// Mark requests acknowledged up to and including PSN `upto`.
///
/// An ACK that covers a READ or atomic whose response has not arrived means the response was
/// lost (the responder executes in order): an implied NAK (IBTA Vol 1 §9.7.5.1.5), counted as
/// mlx5's `implied_nak_seq_err`, and the requester resends from that request.
/// Returns whether an implied NAK resent requests.
fn ack_upto(qp: &mut Qp, ctx: &mut Ctx, upto: Psn) -> bool {
    let mut progressed = false;
    let mut partial = false;
    let mut implied = None;
    for p in qp.req.outstanding.iter_mut() {
        if p.done {
            continue;
        }
        if p.npsn > 0 && p.last_psn().is_after(upto) {
            // An ACK inside a SEND/WRITE message (AckReq every ACK_EVERY packets) moves the
            // window; the message completes with the ACK of its last packet.
            if p.msg.is_some() && p.contains(upto) {
                let a = p.first_psn.distance_to(upto) as u32 + 1;
                if a > p.acked {
                    p.acked = a;
                    partial = true;
                }
            }
            break;
        }
        if p.expect != Expect::Ack {
            implied = Some(p.first_psn);
            break;
        }
        p.done = true;
        progressed = true;
    }
    if progressed {
        qp.req.retrying_from = None;
        qp.req.retries_left = qp.attr.retry_cnt;
        qp.req.rnr_left = qp.attr.rnr_retry;
        retire(qp, ctx);
        restart_timer(qp, ctx.now);
    } else if partial {
        qp.req.retrying_from = None;
        qp.req.retries_left = qp.attr.retry_cnt;
        qp.req.rnr_left = qp.attr.rnr_retry;
        restart_timer(qp, ctx.now);
    }
    if (progressed || partial) && implied.is_none() {
        pump(qp, ctx);
    }
    if let Some(first) = implied {
        ctx.counters.inc(CounterId::ImpliedNakSeqErr);
        retry(qp, ctx, first);
    }
    implied.is_some()
}

/// Resend from `from` after a NAK, an implied NAK or a READ response gap; each such retry
/// without progress in between uses one of `retry_cnt` (as rxe's completer does for sequence
/// errors, `rxe_comp.c`), so a path that keeps losing the same packet ends in RETRY_EXC_ERR
/// instead of looping.
fn retry(qp: &mut Qp, ctx: &mut Ctx, from: Psn) {
    if qp.req.retrying_from == Some(from) {
        return;
    }
    qp.req.retrying_from = Some(from);
    if qp.req.retries_left == 0 {
        fail_pending(qp, ctx, from, SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        return;
    }
    qp.req.retries_left -= 1;
    resend_from(qp, ctx, from);
}

fn resend_from(qp: &mut Qp, ctx: &mut Ctx, from: Psn) {
    for p in qp.req.outstanding.iter_mut() {
        if p.done {
            continue;
        }
        if p.is_rd_atomic() {
            if p.contains(from) || p.first_psn.is_after(from) {
                // The whole READ is requested again: its responses restart at its first PSN.
                p.next_resp = p.first_psn;
                p.sent = 0;
            }
        } else if p.contains(from) {
            p.sent = p.sent.min(p.first_psn.distance_to(from) as u32);
            p.acked = p.acked.min(p.sent);
        } else if p.first_psn.is_after(from) {
            p.sent = 0;
            p.acked = 0;
        }
    }
    restart_timer(qp, ctx.now);
    pump(qp, ctx);
}

/// Fail the oldest request that is not complete with `syndrome` and move the QP to Error
/// (which flushes the rest). Requests before it that are complete get their CQEs first; a
/// READ or atomic is never completed without its response.
fn fail_pending(qp: &mut Qp, ctx: &mut Ctx, at: Psn, syndrome: u8) {
    retire(qp, ctx);
    if let Some(p) = qp.req.outstanding.pop_front() {
        if !p.contains(at) {
            tracing::debug!(
                device = ctx.dev,
                qpn = qp.qpn,
                at = at.get(),
                first = p.first_psn.get(),
                "the oldest incomplete request takes the error"
            );
        }
        send_cqe(qp, ctx, p.index, p.opcode, 0, Some(syndrome));
    }
    fail_qp(qp, ctx, Some(AsyncEvent::QpFatal(QpId(qp.qpn))));
}

/// Fire expired timers (ACK timeout, RNR wait); returns whether anything happened.
pub fn timers(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    if !matches!(qp.state(), QpState::Rts | QpState::Sqd) {
        return false;
    }
    if let Some((until, psn)) = qp.req.rnr_until {
        if ctx.now >= until {
            qp.req.rnr_until = None;
            resend_from(qp, ctx, psn);
            return true;
        }
        return false;
    }
    let Some(deadline) = qp.req.timer else {
        return false;
    };
    if ctx.now < deadline || qp.req.outstanding.is_empty() {
        return false;
    }
    ctx.counters.inc(CounterId::LocalAckTimeoutErr);
    qp.req.retrying_from = None;
    if qp.req.retries_left == 0 {
        let at = qp
            .req
            .outstanding
            .iter()
            .find(|p| !p.done)
            .map(|p| p.first_psn)
            .unwrap_or(qp.req.psn);
        fail_pending(qp, ctx, at, SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        return true;
    }
    qp.req.retries_left -= 1;
    let from = qp
        .req
        .outstanding
        .iter()
        .find(|p| !p.done)
        .map(|p| p.first_psn)
        .unwrap_or(qp.req.psn);
    resend_from(qp, ctx, from);
    true
}

/// Handle a response packet (ACK, NAK, READ response, atomic ACK) for this requester.
pub fn on_response(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    if !qp.qp_type.is_reliable()
        || !matches!(qp.state(), QpState::Rts | QpState::Sqd | QpState::Sqe)
    {
        ctx.counters.inc(CounterId::RxDropped);
        return;
    }
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    let op = pkt.bth.opcode.operation();
    // A response must name a PSN of an outstanding request (IBTA §9.7.5.1.1: responses
    // outside [oldest unacknowledged, next PSN) are ghosts or duplicates and are ignored).
    let lo = qp
        .req
        .outstanding
        .iter()
        .find(|p| !p.done && p.npsn > 0)
        .map(|p| p.first_psn);
    if !lo.is_some_and(|lo| psn.in_range(lo, qp.req.psn)) {
        ctx.counters.inc(CounterId::DuplicateResponse);
        return;
    }
    if let Some(aeth) = pkt.aeth {
        match aeth.syndrome {
            Syndrome::Ack { .. } => {}
            Syndrome::RnrNak(timer) => {
                // mlx5 `rnr_nak_retry_err`: RNR NAKs received.
                ctx.counters.inc(CounterId::RnrNakRetryErr);
                ack_upto(qp, ctx, psn.sub(1));
                if qp.state() == QpState::Error {
                    return;
                }
                if qp.attr.rnr_retry != 7 {
                    if qp.req.rnr_left == 0 {
                        fail_pending(qp, ctx, psn, SYNDROME_RNR_RETRY_EXC_ERR);
                        return;
                    }
                    qp.req.rnr_left -= 1;
                }
                qp.req.timer = None;
                qp.req.rnr_until = Some((ctx.now + timer.duration().as_nanos() as u64, psn));
                return;
            }
            Syndrome::Nak(code) => {
                let resent = ack_upto(qp, ctx, psn.sub(1));
                if qp.state() == QpState::Error {
                    return;
                }
                let syndrome = match code {
                    NakCode::PsnSequenceError => {
                        // mlx5 `packet_seq_err`: NAK sequence errors received.
                        ctx.counters.inc(CounterId::PacketSeqErr);
                        if qp.req.rnr_until.is_none() && !resent {
                            retry(qp, ctx, psn);
                        }
                        return;
                    }
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => {
                        SYNDROME_REMOTE_INVAL_REQ_ERR
                    }
                    NakCode::RemoteAccessError => SYNDROME_REMOTE_ACCESS_ERR,
                    NakCode::RemoteOperationalError => SYNDROME_REMOTE_OP_ERR,
                };
                fail_pending(qp, ctx, psn, syndrome);
                return;
            }
        }
    }
    match op {
        Operation::Acknowledge => {
            ack_upto(qp, ctx, psn);
        }
        Operation::RdmaReadResponseFirst
        | Operation::RdmaReadResponseMiddle
        | Operation::RdmaReadResponseLast
        | Operation::RdmaReadResponseOnly => read_response(qp, ctx, frame),
        Operation::AtomicAcknowledge => {
            let Some(pos) = pending_at(qp, psn) else {
                ctx.counters.inc(CounterId::DuplicateResponse);
                return;
            };
            let first = qp.req.outstanding[pos].first_psn;
            if ack_upto(qp, ctx, first.sub(1)) {
                // Implied NAK (IBTA Vol 1 §9.7.5.1.5): an earlier READ/atomic is unanswered,
                // so everything from it was requested again, this atomic included, whose
                // result the responder returns again from its replay table. Taking it now
                // would free a READ/atomic credit while the earlier one is outstanding, and
                // the requester could then have more in flight than the responder's
                // `max_dest_rd_atomic` resources remember (rxe's completer likewise retries
                // and discards a response past an unanswered READ, `rxe_comp.c` `check_psn`).
                return;
            }
            // Earlier requests may have retired (or the QP failed): look it up again.
            let Some(pos) = pending_at(qp, psn) else {
                return;
            };
            let (local, size) = match &qp.req.outstanding[pos].expect {
                Expect::Atomic { local, size } => (*local, *size),
                _ => {
                    ctx.counters.inc(CounterId::UnexpectedResponse);
                    return;
                }
            };
            let orig = pkt.atomic_ack_eth.map(|a| a.orig).unwrap_or(0);
            // Replies are written big-endian (atomic_req_8B_endianness_mode 0, `docs/sources.md` §3).
            let bytes = orig.to_be_bytes();
            let data = if size == 4 { &bytes[4..] } else { &bytes[..] };
            if !scatter(qp, ctx, &[local], 0, data) {
                let p = &qp.req.outstanding[pos];
                let at = p.first_psn;
                fail_pending(qp, ctx, at, SYNDROME_LOCAL_PROT_ERR);
                return;
            }
            qp.req.outstanding[pos].done = true;
            qp.req.retrying_from = None;
            qp.req.retries_left = qp.attr.retry_cnt;
            retire(qp, ctx);
            restart_timer(qp, ctx.now);
        }
        _ => ctx.counters.inc(CounterId::RxDropped),
    }
}

/// The first PSN of the oldest READ/atomic still unanswered that was sent before PSN `first`.
fn unanswered_before(qp: &Qp, first: Psn) -> Option<Psn> {
    qp.req
        .outstanding
        .iter()
        .take_while(|p| p.first_psn.is_before(first))
        .find(|p| !p.done && p.is_rd_atomic())
        .map(|p| p.first_psn)
}

/// The outstanding request, not yet answered, whose PSN range holds `psn`.
fn pending_at(qp: &Qp, psn: Psn) -> Option<usize> {
    qp.req
        .outstanding
        .iter()
        .position(|p| p.contains(psn) && !p.done)
}

fn read_response(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let psn = pkt.bth.psn;
    let Some(pos) = pending_at(qp, psn) else {
        ctx.counters.inc(CounterId::DuplicateResponse);
        return;
    };
    let first = qp.req.outstanding[pos].first_psn;
    if pkt.aeth.is_some() {
        if ack_upto(qp, ctx, first.sub(1)) {
            // An earlier READ/atomic lost its response and everything from it was resent,
            // this READ included: its responses will come again.
            return;
        }
    } else if let Some(from) = unanswered_before(qp, first) {
        // A middle response (no AETH, so it acknowledges nothing) past an unanswered
        // READ/atomic: the same implied NAK (IBTA Vol 1 §9.7.5.1.5).
        ctx.counters.inc(CounterId::ImpliedNakSeqErr);
        retry(qp, ctx, from);
        return;
    }
    let Some(pos) = pending_at(qp, psn) else {
        return;
    };
    let Some(path) = qp.path else { return };
    let (local, first) = match &qp.req.outstanding[pos].expect {
        Expect::Read { local, .. } => (local.clone(), qp.req.outstanding[pos].first_psn),
        _ => {
            ctx.counters.inc(CounterId::UnexpectedResponse);
            return;
        }
    };
    let expected = qp.req.outstanding[pos].next_resp;
    if psn != expected {
        if psn.is_before(expected) {
            // A response already received (a duplicate or the replay of a resent READ).
            ctx.counters.inc(CounterId::DuplicateResponse);
        } else {
            // A response is missing: responses of one READ come in order (IBTA Vol 1
            // §9.7.5.1.5), so request the READ again, once per gap.
            ctx.counters.inc(CounterId::OutOfSequence);
            if !qp.req.outstanding[pos].gap_resent {
                qp.req.outstanding[pos].gap_resent = true;
                retry(qp, ctx, first);
            }
        }
        return;
    }
    qp.req.outstanding[pos].next_resp = psn.next();
    qp.req.outstanding[pos].gap_resent = false;
    let offset = first.distance_to(psn) as u64 * path.mtu as u64;
    if !scatter(qp, ctx, &local, offset, &pkt.payload) {
        fail_pending(qp, ctx, first, SYNDROME_LOCAL_PROT_ERR);
        return;
    }
    if pkt.bth.opcode.position().ends_message() {
        qp.req.outstanding[pos].done = true;
        qp.req.retrying_from = None;
        qp.req.retries_left = qp.attr.retry_cnt;
        retire(qp, ctx);
        restart_timer(qp, ctx.now);
    }
}
