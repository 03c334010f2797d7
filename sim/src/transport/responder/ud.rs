//! UD receives (IBTA Vol 1 §9.8.5): the Q_Key check and the 40-byte GRH area before the
//! payload.

use mlx5_cq::{
    CQE_RESP_SEND, CQE_RESP_SEND_IMM, SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_PROT_ERR,
};

use super::{capacity, recv_cqe, take_recv};
use crate::counters::CounterId;
use crate::ctx::{recv_err_cqe, Ctx};
use crate::qp::Qp;
use crate::transport::requester::scatter;
use crate::transport::Frame;
use crate::wire::Packet;

pub(super) fn ud(qp: &mut Qp, ctx: &mut Ctx, frame: &Frame) {
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
