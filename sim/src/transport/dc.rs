//! DC, the Dynamically Connected transport, on the software ConnectX: RC's reliability
//! machinery ([`super::requester`], [`super::responder`]: PSNs, coalesced ACKs, NAKs,
//! retransmission, RNR, READ and atomic replay) between a DC initiator (DCI) and any number of
//! DC targets (DCT), over connections opened and closed in band.
//!
//! What public sources say, and this model does (the wire encoding is the model's own:
//! [`crate::wire::dc`]):
//!
//! - A DCI serves requests to many targets with one initiator context, but is connected to
//!   **one target at a time** (US patent 8,213,315: "closing the first dynamic connection …
//!   and transmitting a second connect packet"; UCX `dc_mlx5.c`'s DCI pool exists because an
//!   endpoint holds a DCI until "it has no outstanding operations"). A WQE for another target
//!   than the one connected waits until every request to that one is acknowledged
//!   ([`before_wqe`]); a WQE for the same target goes out at once.
//! - The **connect is half a handshake**: the first request packet opens the connection and
//!   the data follows without waiting for an answer (the patent's "without waiting for any
//!   acknowledgment"; the 2014 linux-rdma DC proposal: "created in-band and pipelined with the
//!   subsequent data communication"; UCX's `DC_DCI_FULL_HANDSHAKE` defaults to no). The full
//!   handshake (connect, wait for its ACK) is not modelled.
//! - The **disconnect**: "when all WRs posted to that remote network address are
//!   acknowledged, the initiator sends a disconnect request to the responder, thereby
//!   releasing the responder resources" (linux-rdma DC proposal). Here: when a DCI has nothing
//!   outstanding and nothing posted ([`idle`]), or moves on to another target. A lost
//!   disconnect costs nothing: the target replaces a connection when the same initiator
//!   connects again (a newer start PSN).
//! - The **access key**: the target checks every request's key against its own and drops
//!   a request whose key differs, counting it (`dc_access_key_violation_count`, the DCT
//!   context's counter in the PRM as UCX's `ib_mlx5_ifc.h` carries it; mlx5 raises
//!   `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION`, 0x1d in the kernel's `include/linux/mlx5/device.h`,
//!   which reaches only DEVX subscribers: no `ibv_event_type` carries it). The initiator hears
//!   nothing and retries until `retry_cnt` runs out: `IBV_WC_RETRY_EXC_ERR` (syndrome 0x15,
//!   vendor 0x81), as UCX's logs show for a DCI whose target is gone ("DCI QP … Transport
//!   retry count exceeded … synd 0x15 vend 0x81", openucx/ucx#3679). That a wrong key looks
//!   the same to the initiator is the model's reading: no public source says a DCT NAKs it.
//! - **Responder errors** (a bad rkey, an operation the DCT's access flags forbid) NAK the
//!   initiator as on RC, which fails the WQE and moves the DCI to Error; the target drops
//!   that connection and stays in RTR (a DCT has no transition out of RTR,
//!   `mlx5_ib_modify_dct`; the legacy MLNX_OFED verbs reported such errors as DCT events,
//!   upstream verbs reports none).
//! - A target's receives come from its SRQ and complete on its CQ with the DCT number as the
//!   QPN and the initiator's QPN as the source (`flags_rqpn`).
//!
//! The model's own, beyond the encoding: a request of a connection the target does not know
//! (its connect was lost) is dropped and counted (`dct_no_connection`); the initiator's
//! retransmission from the connection's first PSN carries the connect flag again.

use std::net::Ipv4Addr;

use mlx5_cq::SYNDROME_LOCAL_QP_OP_ERR;
use mlx5_hw::QpType;

use crate::counters::CounterId;
use crate::ctx::Ctx;
use crate::qp::dc::{DcState, DcTarget, DciConn, DctConn};
use crate::qp::responder::Responder;
use crate::qp::Qp;
use crate::transport::{Frame, Path};
use crate::wire::{
    gid_to_ipv4, Addressing, Bth, Dceth, MacAddr, Opcode, Operation, Packet, Transport,
};
use crate::wqe::{SendWqe, WqeFault};

/// What a DCI does with its next WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Execute it: the DCI is connected to its target (now, or already).
    Go,
    /// Wait: requests to another target are not all acknowledged yet.
    Wait,
}

/// The response opcode a DC target sends: the DC twin of the RC opcode.
pub fn response_opcode(op: Opcode) -> Opcode {
    Opcode::new(Transport::Dc, op.operation()).unwrap_or(op)
}

/// The addressing of a DCI WQE's target, from its address vector (the extended AV: on RoCE
/// the GID, MAC, hop limit and traffic class travel in it; its `rlid` is the UDP source
/// port, as for UD).
fn target_of(ctx: &Ctx, wqe: &SendWqe) -> Result<Option<DcTarget>, WqeFault> {
    let Some(dc) = wqe.dc else {
        return Ok(None);
    };
    let ip = gid_to_ipv4(&dc.av.rgid).filter(|_| dc.av.extended);
    let Some(ip) = ip else {
        return Err(WqeFault {
            syndrome: SYNDROME_LOCAL_QP_OP_ERR,
            why: "a DCI WQE on RoCE needs the extended address vector with an IPv4-mapped GID \
                  (MLX5_EXTENDED_UD_AV; rdma-core always sets it for DC)"
                .into(),
        });
    };
    let mut addr = Addressing::new(
        ctx.port.mac,
        MacAddr(dc.av.rmac),
        ctx.port.ip,
        ip,
        dc.av.rlid,
    );
    addr.ttl = if dc.av.hop_limit == 0 {
        Addressing::DEFAULT_TTL
    } else {
        dc.av.hop_limit
    };
    addr.dscp = dc.av.tclass >> 2;
    Ok(Some(DcTarget {
        addr,
        dctn: dc.dctn,
        key: dc.key,
    }))
}

fn same_target(a: &DcTarget, b: &DcTarget) -> bool {
    a.addr.dst_ip == b.addr.dst_ip && a.dctn == b.dctn && a.key == b.key
}

/// A DCI is about to execute `wqe`: go on the open connection if it is to the WQE's target;
/// otherwise, once nothing is outstanding, close it and open one to the WQE's target (its first
/// packet carries the connect flag); while requests to the old target are outstanding, wait.
/// A NOP names no target and always goes.
pub fn before_wqe(qp: &mut Qp, ctx: &mut Ctx, wqe: &SendWqe) -> Result<Gate, WqeFault> {
    let Some(target) = target_of(ctx, wqe)? else {
        return Ok(Gate::Go);
    };
    let idle = qp.req.outstanding.is_empty();
    let mtu = qp.attr.path_mtu.bytes();
    let start = qp.req.psn;
    let Some(dci) = qp.dc.as_mut().and_then(|s| s.dci()) else {
        return Ok(Gate::Go);
    };
    if dci.conn.is_some_and(|c| same_target(&c.target, &target)) {
        return Ok(Gate::Go);
    }
    if !idle {
        dci.waits += 1;
        return Ok(Gate::Wait);
    }
    let old = dci.conn.take();
    dci.conn = Some(DciConn {
        target,
        start_psn: start,
    });
    dci.connects += 1;
    if let Some(old) = old {
        dci.disconnects += 1;
        disconnect(qp, ctx, &old);
    }
    ctx.counters.inc(CounterId::DciConnects);
    tracing::debug!(device = ctx.dev, dci = qp.qpn, dctn = target.dctn, to = %target.addr.dst_ip, psn = start.get(), "DCI connects");
    qp.path = Some(Path {
        addr: target.addr,
        dest_qpn: target.dctn,
        mtu,
        foreign: false,
    });
    Ok(Gate::Go)
}

/// Put the disconnect request of connection `c` on the wire.
fn disconnect(qp: &Qp, ctx: &mut Ctx, c: &DciConn) {
    ctx.counters.inc(CounterId::DciDisconnects);
    let op = Opcode::new(Transport::Dc, Operation::DcDisconnect).unwrap_or(Opcode::RC_SEND_ONLY);
    let mut pkt = Packet::new(c.target.addr, Bth::new(op, c.target.dctn, qp.req.psn));
    pkt.dceth = Some(Dceth {
        key: c.target.key,
        connect: false,
        dci: qp.qpn,
    });
    tracing::debug!(
        device = ctx.dev,
        dci = qp.qpn,
        dctn = c.target.dctn,
        "DCI disconnects"
    );
    ctx.out.push(Frame { pkt, ext: None });
}

/// A DCI in RTS with nothing outstanding and nothing posted closes its connection (the
/// disconnect request goes out); returns whether it did.
pub fn idle(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    if !qp.req.outstanding.is_empty() || qp.sq_ci != qp.db.sq_known {
        return false;
    }
    let Some(dci) = qp.dc.as_mut().and_then(|s| s.dci()) else {
        return false;
    };
    let Some(c) = dci.conn.take() else {
        return false;
    };
    dci.disconnects += 1;
    qp.path = None;
    disconnect(qp, ctx, &c);
    true
}

/// Stamp a DCI's request packet with the DCETH of its connection (the connect flag on the
/// connection's first PSN).
pub fn stamp(qp: &Qp, frame: &mut Frame) {
    let Some(DcState::Initiator(dci)) = qp.dc.as_ref() else {
        return;
    };
    let Some(c) = dci.conn else {
        return;
    };
    if frame.pkt.bth.opcode.has_dceth() {
        frame.pkt.dceth = Some(Dceth {
            key: c.target.key,
            connect: frame.pkt.bth.psn == c.start_psn,
            dci: qp.qpn,
        });
    }
}

/// A request packet (or a disconnect) at a DC target: the key checked, the connection opened,
/// found or closed, and the packet handed to RC's responder on that connection's state.
pub fn on_request(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
    let pkt = &frame.pkt;
    let Some(d) = pkt.dceth else {
        ctx.counters.inc(CounterId::RxDropped);
        return;
    };
    let Some(mut st) = qp.dc.take() else {
        ctx.counters.inc(CounterId::RxDropped);
        return;
    };
    if let Some(dct) = st.dct() {
        let key = (pkt.addr.src_ip, d.dci);
        if d.key != dct.key {
            dct.key_violations += 1;
            ctx.counters.inc(CounterId::DctKeyViolations);
            tracing::debug!(device = ctx.dev, dct = qp.qpn, dci = d.dci, from = %pkt.addr.src_ip, "DC access key violation: request dropped");
        } else if pkt.bth.opcode.operation() == Operation::DcDisconnect {
            if dct.conns.remove(&key).is_some() {
                dct.disconnects += 1;
                ctx.counters.inc(CounterId::DctDisconnects);
            }
        } else if let Some(conn) = open(dct, key, pkt, ctx) {
            serve(qp, ctx, conn, d.dci, frame);
            if conn.resp.broken {
                dct.conns.remove(&key);
                dct.disconnects += 1;
                ctx.counters.inc(CounterId::DctDisconnects);
            }
        }
    }
    qp.dc = Some(st);
}

/// The connection `key` a packet belongs to: a connect opens it (or replaces an older one of
/// the same initiator); a retransmitted connect finds it; a packet of no known connection is
/// dropped.
fn open<'a>(
    dct: &'a mut crate::qp::dc::Dct,
    key: (Ipv4Addr, u32),
    pkt: &Packet,
    ctx: &mut Ctx,
) -> Option<&'a mut DctConn> {
    let connect = pkt.dceth.is_some_and(|d| d.connect);
    let known = dct.conns.get(&key).map(|c| c.start_psn);
    if connect && known != Some(pkt.bth.psn) {
        if known.is_some() {
            dct.disconnects += 1;
            ctx.counters.inc(CounterId::DctDisconnects);
        }
        let resp = Responder {
            epsn: pkt.bth.psn,
            ..Responder::default()
        };
        dct.conns.insert(
            key,
            DctConn {
                resp,
                start_psn: pkt.bth.psn,
            },
        );
        dct.connects += 1;
        ctx.counters.inc(CounterId::DctConnects);
    } else if known.is_none() {
        ctx.counters.inc(CounterId::DctNoConnection);
        return None;
    }
    dct.conns.get_mut(&key)
}

/// Run `f` on the QP with connection `conn`'s responder state in place and its initiator as
/// the destination of the responses.
fn with_conn<R>(qp: &mut Qp, conn: &mut DctConn, dci: u32, f: impl FnOnce(&mut Qp) -> R) -> R {
    std::mem::swap(&mut qp.resp, &mut conn.resp);
    let dest = std::mem::replace(&mut qp.attr.dest_qp_num, dci);
    let r = f(qp);
    qp.attr.dest_qp_num = dest;
    std::mem::swap(&mut qp.resp, &mut conn.resp);
    r
}

fn serve(qp: &mut Qp, ctx: &mut Ctx, conn: &mut DctConn, dci: u32, frame: &Frame) {
    with_conn(qp, conn, dci, |qp| {
        crate::transport::responder::on_rc_request(qp, ctx, frame)
    });
}

/// A DC target's step: each connection's streamed READ responses and coalesced ACK go out
/// ([`super::responder::pump`], [`super::responder::flush_ack`] on its state); returns whether
/// anything did.
pub fn pump_target(qp: &mut Qp, ctx: &mut Ctx) -> bool {
    let Some(mut st) = qp.dc.take() else {
        return false;
    };
    let mut work = false;
    if let Some(dct) = st.dct() {
        for (&(_, dci), conn) in dct.conns.iter_mut() {
            work |= with_conn(qp, conn, dci, |qp| {
                let w = crate::transport::responder::pump(qp, ctx);
                w | crate::transport::responder::flush_ack(qp, ctx)
            });
        }
    }
    qp.dc = Some(st);
    work
}

/// Whether `qp_type` answers on the DC transport.
pub fn is_target(qp_type: QpType) -> bool {
    qp_type == QpType::Dct
}
