//! The RNR fault rule: a responder that finds no receive WQE for the requests a rule selects,
//! as if its receive queue were empty, with receives posted. RC answers RNR NAK and the
//! requester waits its RNR timer and retries; UC and UD drop the message; requests that need
//! no receive WQE are untouched; the posted receives stay for the requests that follow.

use crate::common;

use std::time::Duration;

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::QpType;
use mlx5_sim::faults::FaultKind;
use mlx5_wqe::*;

/// `min_rnr_timer` 1 of the common options: 10 µs.
const RNR: Duration = Duration::from_micros(10);

/// The kinds of the fault record.
fn kinds(p: &Pair) -> Vec<FaultKind> {
    p.fabric.faults().record().iter().map(|r| r.kind).collect()
}

#[test]
fn rc_sends_refused_twice_complete_in_order_after_two_rnr_waits() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    for i in 0..3 {
        p.b.qp.post_recv(&[dst.sge(i * 16, 16)]);
    }
    p.fabric.faults().to_device(&p.b.dev).rnr_next(2);
    let idx: Vec<u16> = (0..3)
        .map(|i| {
            src.write(i * 8, &[i as u8 + 1; 8]);
            send(&mut p.a.qp, &src, i * 8, 8)
        })
        .collect();
    p.run();
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 1, "the first round");
    assert!(p.a.scq.poll().is_none() && p.b.rcq.poll().is_none());
    p.fabric.advance(RNR);
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 2, "the resent round");
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    let want: Vec<_> = idx.iter().map(|&i| (CQE_REQ, 0, i)).collect();
    assert_eq!(c, want);
    for i in 0..3u16 {
        let r = p.b.rcq.poll().expect("delivered once");
        assert_eq!(
            (r.opcode(), r.byte_cnt(), r.wqe_counter()),
            (CQE_RESP_SEND, 8, i),
            "the receives are taken in order, none lost to the refusals"
        );
        assert_eq!(dst.read(i as usize * 16, 8), [i as u8 + 1; 8]);
    }
    assert!(p.b.rcq.poll().is_none());
    assert_eq!(p.b.dev.counter("out_of_buffer"), 2);
    assert_eq!(p.fabric.faults().stats().rnr, 2);
    assert_eq!(kinds(&p), [FaultKind::Rnr, FaultKind::Rnr]);
    let rec = p.fabric.faults().record();
    assert!(rec.iter().all(|r| r.qpn == p.b.qp.qpn() && r.psn == 200));
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    p.assert_no_bugs();
}

#[test]
fn requests_that_need_no_receive_pass_and_a_write_with_immediate_is_refused() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    p.fabric.faults().to_device(&p.b.dev).rnr_next(1);
    src.write(0, b"written!");
    let w = write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    let r = read(&mut p.a.qp, &src, 16, &dst, 0, 8, false);
    let f = fetch_add(&mut p.a.qp, &src, 32, &dst, 40, 5);
    p.run();
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(c, [(CQE_REQ, 0, w), (CQE_REQ, 0, r), (CQE_REQ, 0, f)]);
    assert_eq!(src.read(16, 8), b"written!");
    assert_eq!(p.fabric.faults().stats().rnr, 0, "nothing needed a receive");
    // The WRITE with immediate needs one at its last packet: refused once, then delivered.
    p.b.qp.post_recv(&[dst.sge(48, 16)]);
    let wi = write_imm(&mut p.a.qp, &src, 0, &dst, 8, 8, 0x0102_0304u32.to_be());
    p.run();
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 1);
    assert!(p.b.rcq.poll().is_none());
    p.fabric.advance(RNR);
    assert_eq!(outcome(&p.a.scq.poll().unwrap()), (CQE_REQ, 0, wi));
    let rc = p.b.rcq.poll().unwrap();
    assert_eq!(
        (rc.opcode(), rc.imm_bytes()),
        (CQE_RESP_WR_IMM, [1, 2, 3, 4])
    );
    assert_eq!(dst.read(8, 8), b"written!");
    assert_eq!(p.fabric.faults().stats().rnr, 1);
    p.assert_no_bugs();
}

#[test]
fn a_refusal_for_a_time_lasts_that_long_and_another_qp_is_spared() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    p.b.qp.post_recv(&[dst.sge(0, 16)]);
    // Another QPN of B: the rule below does not select B's QP.
    p.fabric
        .faults()
        .qp(&p.b.dev, p.b.qp.qpn() + 1)
        .rnr_next(100);
    // The time starts at the first request the rule selects, not when it is added: refused
    // at 0, 10 and 20 µs after the SEND arrives (before 25 µs); taken at 30 µs.
    p.fabric
        .faults()
        .to_device(&p.b.dev)
        .rnr_for(Duration::from_micros(25));
    p.fabric.advance(Duration::from_micros(100));
    let i = send(&mut p.a.qp, &src, 0, 8);
    p.run();
    p.fabric.advance(RNR * 2);
    assert!(p.a.scq.poll().is_none());
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 3);
    p.fabric.advance(RNR);
    assert_eq!(outcome(&p.a.scq.poll().unwrap()), (CQE_REQ, 0, i));
    assert_eq!(p.b.rcq.drain().len(), 1);
    assert_eq!(p.fabric.faults().stats().rnr, 3);
    p.assert_no_bugs();
}

#[test]
fn a_ud_datagram_refused_is_dropped_and_the_receive_serves_the_next() {
    let mut p = Pair::new(Opts::new(QpType::Ud));
    let (src, dst) = (p.mem(false, 64), p.mem(true, 256));
    p.b.qp.post_recv(&[dst.sge(0, 128)]);
    p.fabric.faults().to_device(&p.b.dev).times(1).rnr(1.0);
    let av = ud_av(&p.a, &p.b, 0x1111_2222);
    for (k, text) in [b"first!!!", b"second!!"].iter().enumerate() {
        src.write(k * 8, *text);
        p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&av).unwrap();
            w.push(&DataSeg::new(8, src.lkey(), src.addr() + k as u64 * 8))
                .unwrap();
        });
    }
    p.run();
    assert_eq!(p.a.scq.drain().len(), 2, "UD completes on send");
    let r = p.b.rcq.poll().expect("the second datagram");
    assert_eq!((r.opcode(), r.byte_cnt()), (CQE_RESP_SEND, 40 + 8));
    assert_eq!(dst.read(40, 8), b"second!!");
    assert!(p.b.rcq.poll().is_none());
    assert_eq!(p.b.dev.counter("out_of_buffer"), 1);
    assert_eq!(kinds(&p), [FaultKind::Rnr]);
    p.assert_no_bugs();
}
