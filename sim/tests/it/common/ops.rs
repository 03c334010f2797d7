//! Posting the RC operations the loss tests use, as raw WQEs.
#![allow(dead_code)]

use mlx5_cq::Cqe64;
use mlx5_hw::{Device, QpState};
use mlx5_wqe::*;

use super::{Mem, Qp, Side};

/// A signaled RDMA WRITE of `len` bytes from `local[loff..]` to `remote[roff..]`.
pub fn write(q: &mut Qp, local: &Mem, loff: usize, remote: &Mem, roff: usize, len: u32) -> u16 {
    let (ra, rk, ll, la) = (
        remote.addr() + roff as u64,
        remote.rkey(),
        local.lkey(),
        local.addr() + loff as u64,
    );
    q.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push(&DataSeg::new(len, ll, la)).unwrap();
    })
}

/// A signaled RDMA WRITE with immediate `imm` of `len` bytes from `local[loff..]` to
/// `remote[roff..]` (it consumes a receive WQE at the responder).
pub fn write_imm(
    q: &mut Qp,
    local: &Mem,
    loff: usize,
    remote: &Mem,
    roff: usize,
    len: u32,
    imm: u32,
) -> u16 {
    let (ra, rk, ll, la) = (
        remote.addr() + roff as u64,
        remote.rkey(),
        local.lkey(),
        local.addr() + loff as u64,
    );
    q.post(OPCODE_RDMA_WRITE_IMM, 0, CTRL_CQ_UPDATE, imm, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push(&DataSeg::new(len, ll, la)).unwrap();
    })
}

/// A signaled SEND of `len` bytes from `local[off..]`.
pub fn send(q: &mut Qp, local: &Mem, off: usize, len: u32) -> u16 {
    let (ll, la) = (local.lkey(), local.addr() + off as u64);
    q.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(len, ll, la)).unwrap();
    })
}

/// A signaled RDMA READ of `len` bytes from `remote[roff..]` into `local[loff..]`, fenced if
/// asked.
pub fn read(
    q: &mut Qp,
    local: &Mem,
    loff: usize,
    remote: &Mem,
    roff: usize,
    len: u32,
    fence: bool,
) -> u16 {
    let (ra, rk, ll, la) = (
        remote.addr() + roff as u64,
        remote.rkey(),
        local.lkey(),
        local.addr() + loff as u64,
    );
    let fm = if fence { CTRL_FENCE } else { 0 };
    q.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE | fm, 0, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push(&DataSeg::new(len, ll, la)).unwrap();
    })
}

/// A signaled 8-byte fetch-and-add of `add` on `remote[roff..]`, the original value landing in
/// `result[loff..]`.
pub fn fetch_add(
    q: &mut Qp,
    result: &Mem,
    loff: usize,
    remote: &Mem,
    roff: usize,
    add: u64,
) -> u16 {
    let (ra, rk, ll, la) = (
        remote.addr() + roff as u64,
        remote.rkey(),
        result.lkey(),
        result.addr() + loff as u64,
    );
    q.post(OPCODE_ATOMIC_FA, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push(&AtomicSeg::faa(add)).unwrap();
        w.push(&DataSeg::new(8, ll, la)).unwrap();
    })
}

/// The QP's state as `query_qp` reports it.
pub fn state(s: &Side) -> QpState {
    s.dev.query_qp(s.qp.info.id).unwrap().qp_state
}

/// (opcode, syndrome or 0, wqe_counter) of a CQE.
pub fn outcome(c: &Cqe64) -> (u8, u8, u16) {
    if c.opcode() == mlx5_cq::CQE_REQ_ERR || c.opcode() == mlx5_cq::CQE_RESP_ERR {
        let e = c.as_err();
        (c.opcode(), e.syndrome, e.wqe_counter())
    } else {
        (c.opcode(), 0, c.wqe_counter())
    }
}
