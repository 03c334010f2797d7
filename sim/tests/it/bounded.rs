//! Memory bounded by the wire, not the message: SEND/WRITE packets are gathered and READ
//! responses read from the registered memory one packet at a time as they are sent, so what is
//! in flight is bounded by the send window (RC) or one burst, whatever the message length; an
//! MR deregistered while its message is being sent fails that message (LOCAL_PROT, as a NIC's
//! DMA of the next packet would).

use std::time::Duration;

use crate::common;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{Device, QpType};
use mlx5_wqe::*;

/// Packets of one request in flight at most (the requester's window, 128 packets, or one
/// READ response burst of 16), with some room for ACKs.
const BOUND: usize = 200;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i / 4093) as u8 ^ (i as u8)).collect()
}

/// Step the fabric with every frame delayed so that it stays on the wire for a while, and
/// return the most frames seen in flight.
fn run_delayed(p: &Pair) -> usize {
    let mut max = 0;
    for _ in 0..100_000 {
        p.fabric.step();
        max = max.max(p.fabric.in_flight());
        if p.fabric.in_flight() == 0 && !p.fabric.step() {
            break;
        }
        p.fabric.advance(Duration::from_micros(1));
    }
    max
}

#[test]
fn a_long_write_and_read_keep_a_window_in_flight_not_the_message() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    p.fabric.faults().all().delay(Duration::from_micros(20));
    let len = 8 << 20; // 2048 packets at MTU 4096.
    let local = p.mem(false, len);
    let remote = p.mem(true, len);
    let data = pattern(len);
    local.write(0, &data);
    let (ra, rkey, la, lkey) = (remote.addr(), remote.rkey(), local.addr(), local.lkey());
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push(&DataSeg::new(len as u32, lkey, la)).unwrap();
    });
    let max = run_delayed(&p);
    let c = p.a.scq.poll().expect("WRITE CQE");
    assert_eq!(c.opcode(), CQE_REQ, "syndrome {:#x}", c.as_err().syndrome);
    assert!(remote.read(0, len) == data, "WRITE data");
    assert!(max <= BOUND, "{max} frames in flight during an 8 MiB WRITE");

    // READ responses are not flow-controlled (IBTA §9.7.3.1.3): the responder sends at most a
    // burst per step, which the fabric delivers in that step (a NIC paces them at line rate).
    p.fabric.faults().clear();
    let back = p.mem(false, len);
    let (bl, ba) = (back.lkey(), back.addr());
    p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push(&DataSeg::new(len as u32, bl, ba)).unwrap();
    });
    let mut max = 0;
    let mut last = p.b.dev.counter("port_xmit_packets");
    for _ in 0..100_000 {
        let busy = p.fabric.step();
        let now = p.b.dev.counter("port_xmit_packets");
        max = max.max(now - last);
        last = now;
        if !busy {
            break;
        }
    }
    let c = p.a.scq.poll().expect("READ CQE");
    assert_eq!(c.opcode(), CQE_REQ, "syndrome {:#x}", c.as_err().syndrome);
    assert_eq!(c.byte_cnt(), len as u32);
    assert!(back.read(0, len) == data, "READ data");
    assert!(
        max <= BOUND as u64,
        "{max} READ response frames sent in one step"
    );
    p.assert_no_bugs();
}

#[test]
fn an_mr_deregistered_during_a_write_fails_it_with_local_prot() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    p.fabric.faults().all().delay(Duration::from_micros(20));
    let len = 4 << 20;
    let local = p.mem(false, len);
    let remote = p.mem(true, len);
    let (ra, rkey, la, lkey) = (remote.addr(), remote.rkey(), local.addr(), local.lkey());
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push(&DataSeg::new(len as u32, lkey, la)).unwrap();
    });
    for _ in 0..3 {
        p.fabric.step();
        p.fabric.advance(Duration::from_micros(1));
    }
    assert!(p.a.scq.poll().is_none(), "still sending");
    p.a.dev.dereg_mr(local.mr.id).unwrap();
    run_delayed(&p);
    let c = p.a.scq.poll().expect("error CQE");
    assert_eq!(c.opcode(), CQE_REQ_ERR);
    assert_eq!(c.as_err().syndrome, SYNDROME_LOCAL_PROT_ERR);
}

#[test]
fn a_repeated_read_supersedes_the_response_still_queued() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let len = 8 << 20; // 8192 response packets at MTU 1024.
    let remote = p.mem(true, len);
    let back = p.mem(false, len);
    let data = pattern(len);
    remote.write(0, &data);
    // The READ request (PSN 200, A's first) arrives twice.
    p.fabric.faults().all().duplicate_psns(p.b.qp.qpn(), [200]);
    let before = p.b.dev.counter("port_xmit_packets");
    let (ra, rkey, bl, ba) = (remote.addr(), remote.rkey(), back.lkey(), back.addr());
    p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push(&DataSeg::new(len as u32, bl, ba)).unwrap();
    });
    p.run();
    let c = p.a.scq.poll().expect("READ CQE");
    assert_eq!(c.opcode(), CQE_REQ, "syndrome {:#x}", c.as_err().syndrome);
    assert!(back.read(0, len) == data, "READ data");
    let sent = p.b.dev.counter("port_xmit_packets") - before;
    assert!(
        sent < 8192 + 1024,
        "{sent} response packets: the first response was not cut short by the repeat"
    );
}

/// READ requests that arrive together are answered at most one burst (16 packets) per step
/// in all, not a burst each: a requester with several READs outstanding gets the first
/// response's packets at once instead of after every response has been built (a peer behind
/// a TAP sees its ACK timeout expire otherwise: `bw read` with Soft-RoCE as the client).
#[test]
fn reads_arriving_together_share_one_burst_per_step() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let len = 64 << 10; // 16 response packets each at MTU 4096, 64 at 1024.
    let reads = 8;
    let remote = p.mem(true, len * reads);
    let back = p.mem(false, len * reads);
    let data = pattern(len * reads);
    remote.write(0, &data);
    let (ra, rkey, bl, ba) = (remote.addr(), remote.rkey(), back.lkey(), back.addr());
    for i in 0..reads as u64 {
        let off = i * len as u64;
        p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(ra + off, rkey)).unwrap();
            w.push(&DataSeg::new(len as u32, bl, ba + off)).unwrap();
        });
    }
    let mut max = 0;
    let mut last = p.b.dev.counter("port_xmit_packets");
    for _ in 0..100_000 {
        let busy = p.fabric.step();
        let now = p.b.dev.counter("port_xmit_packets");
        max = max.max(now - last);
        last = now;
        if !busy {
            break;
        }
    }
    for i in 0..reads {
        let c = p.a.scq.poll().unwrap_or_else(|| panic!("READ {i} CQE"));
        assert_eq!(c.opcode(), CQE_REQ, "syndrome {:#x}", c.as_err().syndrome);
    }
    assert!(back.read(0, len * reads) == data, "READ data");
    assert!(max <= 16, "{max} READ response packets sent in one step");
    p.assert_no_bugs();
}
