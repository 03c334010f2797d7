//! RC reliability on a lossy fabric, fault by fault, with the mlx5 counters each fault moves:
//! a lost data packet (NAK sequence error), a lost last packet (ACK timeout), a lost ACK
//! (duplicate executed once), a lost READ response (replay), a lost atomic ACK (saved result,
//! applied once), an implied NAK, corruption caught by the ICRC, a link down and up, a
//! destroyed peer QP, RNR recovered by a late receive and RNR retries exhausted, PSN wrap,
//! READ/atomic depth and fences, delay.

use crate::common;

use std::time::Duration;

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::{Device, QpState, QpType};
use mlx5_sim::faults::{Class, Rate};

/// `timeout` 4: 4.096 µs × 2^4.
const TIMEOUT: Duration = Duration::from_nanos(4096 << 4);

fn rc() -> Pair {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 4;
    Pair::new(o)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn ok(c: Option<mlx5_cq::Cqe64>, idx: u16) {
    let c = c.expect("a completion");
    assert_eq!(outcome(&c), (CQE_REQ, 0, idx));
}

#[test]
fn lost_middle_packet_is_naked_and_resent_from_its_psn() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 8192), p.mem(true, 8192));
    let data = pattern(5000, 1);
    src.write(0, &data);
    // A sends PSNs 200..=204; the third is lost once.
    p.fabric
        .faults()
        .path(&p.a.dev, &p.b.dev)
        .drop_psns(p.b.qp.qpn(), [202]);
    let idx = write(&mut p.a.qp, &src, 0, &dst, 0, 5000);
    p.run();
    ok(p.a.scq.poll(), idx);
    assert_eq!(dst.read(0, 5000), data);
    let (a, b) = (&p.a.dev, &p.b.dev);
    assert_eq!(b.counter("out_of_sequence"), 2, "203 and 204 arrive early");
    assert_eq!(a.counter("packet_seq_err"), 1, "one NAK for the gap");
    assert_eq!(a.counter("port_xmit_packets"), 5 + 3, "resent from 202");
    assert_eq!(b.counter("port_xmit_packets"), 2, "the NAK and one ACK");
    assert_eq!(b.counter("duplicate_request"), 0);
    assert_eq!(a.counter("local_ack_timeout_err"), 0, "no timer needed");
    assert_eq!(p.fabric.faults().stats().dropped, 1);
    p.assert_no_bugs();
}

#[test]
fn lost_last_packet_is_resent_after_the_ack_timeout_from_the_oldest_psn() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 8192), p.mem(true, 8192));
    let data = pattern(5000, 2);
    src.write(0, &data);
    p.fabric
        .faults()
        .path(&p.a.dev, &p.b.dev)
        .drop_psns(p.b.qp.qpn(), [204]);
    let idx = write(&mut p.a.qp, &src, 0, &dst, 0, 5000);
    p.run();
    assert!(
        p.a.scq.poll().is_none(),
        "nothing tells A the last packet was lost"
    );
    p.fabric.advance(TIMEOUT - Duration::from_nanos(1));
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    p.fabric.advance(Duration::from_nanos(1));
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 1);
    ok(p.a.scq.poll(), idx);
    assert_eq!(dst.read(0, 5000), data);
    assert_eq!(
        p.b.dev.counter("duplicate_request"),
        4,
        "200..=203 again, acknowledged, not executed"
    );
    assert_eq!(p.a.dev.counter("port_xmit_packets"), 10);
    p.assert_no_bugs();
}

#[test]
fn lost_ack_makes_a_duplicate_send_that_executes_once() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    src.write(0, b"first!");
    src.write(8, b"second");
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.b.qp.post_recv(&[dst.sge(64, 64)]);
    p.fabric
        .faults()
        .path(&p.b.dev, &p.a.dev)
        .only(Class::Acks)
        .drop_next(1);
    let i1 = send(&mut p.a.qp, &src, 0, 6);
    p.run();
    assert!(p.a.scq.poll().is_none());
    let r = p.b.rcq.poll().expect("delivered");
    assert_eq!((r.byte_cnt(), r.wqe_counter()), (6, 0));
    p.fabric.advance(TIMEOUT);
    ok(p.a.scq.poll(), i1);
    assert!(
        p.b.rcq.poll().is_none(),
        "the retransmission is not a second message"
    );
    assert_eq!(p.b.dev.counter("duplicate_request"), 1);
    // The second receive is still there for the next SEND.
    let i2 = send(&mut p.a.qp, &src, 8, 6);
    p.run();
    ok(p.a.scq.poll(), i2);
    let r = p.b.rcq.poll().expect("second");
    assert_eq!((r.byte_cnt(), r.wqe_counter()), (6, 1));
    assert_eq!(dst.read(0, 6), b"first!");
    assert_eq!(dst.read(64, 6), b"second");
    p.assert_no_bugs();
}

#[test]
fn lost_read_response_is_noticed_by_the_gap_and_replayed() {
    let mut p = rc();
    let (local, remote) = (p.mem(false, 8192), p.mem(true, 8192));
    let data = pattern(3000, 3);
    remote.write(0, &data);
    // READ at PSN 200 has responses 200, 201, 202 (MTU 1024); the middle one is lost.
    p.fabric
        .faults()
        .path(&p.b.dev, &p.a.dev)
        .drop_psns(p.a.qp.qpn(), [201]);
    let idx = read(&mut p.a.qp, &local, 0, &remote, 0, 3000, false);
    p.run();
    ok(p.a.scq.poll(), idx);
    assert_eq!(local.read(0, 3000), data);
    assert_eq!(p.a.dev.counter("out_of_sequence"), 1, "the gap at 202");
    assert_eq!(p.b.dev.counter("rx_read_requests"), 1, "one READ executed");
    assert_eq!(
        p.b.dev.counter("duplicate_request"),
        1,
        "the resent READ replayed from the responder resources"
    );
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    p.assert_no_bugs();
}

#[test]
fn lost_atomic_ack_returns_the_saved_result_and_applies_once() {
    let mut p = rc();
    let (result, remote) = (p.mem(false, 64), p.mem(true, 64));
    remote.write(0, &100u64.to_ne_bytes());
    p.fabric
        .faults()
        .path(&p.b.dev, &p.a.dev)
        .only(Class::AtomicAcks)
        .drop_next(1);
    let idx = fetch_add(&mut p.a.qp, &result, 0, &remote, 0, 5);
    p.run();
    assert!(p.a.scq.poll().is_none());
    p.fabric.advance(TIMEOUT);
    ok(p.a.scq.poll(), idx);
    assert_eq!(remote.read(0, 8), 105u64.to_ne_bytes(), "added once");
    assert_eq!(
        result.read(0, 8),
        100u64.to_ne_bytes(),
        "the original value"
    );
    assert_eq!(p.b.dev.counter("rx_atomic_requests"), 1);
    assert_eq!(p.b.dev.counter("duplicate_request"), 1);
    p.assert_no_bugs();
}

#[test]
fn ack_beyond_an_unanswered_read_is_an_implied_nak() {
    let mut p = rc();
    let (local, remote) = (p.mem(false, 4096), p.mem(true, 4096));
    remote.write(0, b"readme!!");
    local.write(1024, b"writeme!");
    // The READ's only response (PSN 200) is lost; the WRITE's ACK (PSN 201) arrives.
    p.fabric
        .faults()
        .path(&p.b.dev, &p.a.dev)
        .drop_psns(p.a.qp.qpn(), [200]);
    let r = read(&mut p.a.qp, &local, 0, &remote, 0, 8, false);
    let w = write(&mut p.a.qp, &local, 1024, &remote, 1024, 8);
    p.run();
    assert_eq!(p.a.dev.counter("implied_nak_seq_err"), 1);
    ok(p.a.scq.poll(), r);
    ok(p.a.scq.poll(), w);
    assert_eq!(local.read(0, 8), b"readme!!");
    assert_eq!(remote.read(1024, 8), b"writeme!");
    assert_eq!(
        p.a.dev.counter("local_ack_timeout_err"),
        0,
        "no timer needed"
    );
    p.assert_no_bugs();
}

#[test]
fn corrupted_frames_fail_the_icrc_are_counted_and_retransmitted() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    src.write(0, b"intact");
    let f = p.fabric.faults();
    f.path(&p.a.dev, &p.b.dev).corrupt_every(1);
    let idx = write(&mut p.a.qp, &src, 0, &dst, 0, 6);
    p.run();
    assert_eq!(p.b.dev.counter("rx_icrc_encapsulated"), 1);
    assert_eq!(p.b.dev.counter("port_rcv_errors"), 1);
    assert_eq!(p.b.dev.counter("rx_write_requests"), 0, "nothing executed");
    assert_eq!(dst.read(0, 6), [0; 6]);
    f.clear();
    p.fabric.advance(TIMEOUT);
    ok(p.a.scq.poll(), idx);
    assert_eq!(dst.read(0, 6), b"intact");
    assert_eq!(p.b.dev.counter("rx_icrc_encapsulated"), 1);
    assert_eq!(f.stats().corrupted, 1);
    // Corruption is the network's doing, not a malformed frame of the software ConnectX.
    p.assert_no_bugs();
}

#[test]
fn retry_exhaustion_fails_the_oldest_and_flushes_the_rest() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    let f = p.fabric.faults();
    f.link(&p.a.dev, &p.b.dev).down();
    let w1 = write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    let w2 = write(&mut p.a.qp, &src, 8, &dst, 8, 8);
    let r3 = read(&mut p.a.qp, &src, 16, &dst, 16, 8, false);
    p.run();
    // retry_cnt 7: the first try and 7 retries, each ending in a timeout.
    p.fabric.advance(TIMEOUT * 8);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(
        c,
        [
            (CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, w1),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, w2),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, r3),
        ]
    );
    assert_eq!(state(&p.a), QpState::Error);
    let a = &p.a.dev;
    assert_eq!(a.counter("local_ack_timeout_err"), 8);
    assert_eq!(a.counter("req_transport_retries_exceeded"), 1, "the 8th");
    assert_eq!(a.counter("req_cqe_error"), 1);
    assert_eq!(a.counter("req_cqe_flush_error"), 2);
    assert_eq!(f.stats().link_down_dropped, 8 * 3, "3 requests, 8 times");
    // Posted after the error: flushed too.
    let w4 = write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    p.run();
    assert_eq!(
        p.a.scq.poll().map(|c| outcome(&c)),
        Some((CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, w4))
    );
    p.assert_no_bugs();
}

#[test]
fn link_down_then_up_recovers_by_retransmission() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    src.write(0, b"patience");
    let f = p.fabric.faults();
    let link = f.link(&p.a.dev, &p.b.dev);
    link.down();
    let idx = write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    p.fabric.advance(TIMEOUT * 3);
    assert!(p.a.scq.poll().is_none());
    link.up();
    p.fabric.advance(TIMEOUT);
    ok(p.a.scq.poll(), idx);
    assert_eq!(dst.read(0, 8), b"patience");
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 4);
    assert_eq!(state(&p.a), QpState::Rts);
    p.assert_no_bugs();
}

#[test]
fn destroyed_peer_qp_ends_in_retry_exceeded() {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 4;
    o.retry_cnt = 2;
    let mut p = Pair::new(o);
    let src = p.mem(false, 64);
    p.b.dev.destroy_qp(p.b.qp.info.id).unwrap();
    let idx = send(&mut p.a.qp, &src, 0, 8);
    p.fabric.advance(TIMEOUT * 3);
    assert_eq!(
        p.a.scq.poll().map(|c| outcome(&c)),
        Some((CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx))
    );
    assert_eq!(p.b.dev.counter("rx_dropped"), 3, "no QP to take them");
}

#[test]
fn rnr_waits_min_rnr_timer_and_a_late_receive_recovers() {
    let mut p = rc(); // rnr_retry 7 (forever), min_rnr_timer 1 = 10 µs
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    src.write(0, b"late");
    let idx = send(&mut p.a.qp, &src, 0, 4);
    p.run();
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 1);
    assert_eq!(p.b.dev.counter("out_of_buffer"), 1);
    // The requester waits the full RNR timer before trying again.
    p.fabric.advance(Duration::from_micros(9));
    assert_eq!(p.b.dev.counter("out_of_buffer"), 1);
    p.fabric.advance(Duration::from_micros(1));
    assert_eq!(p.b.dev.counter("out_of_buffer"), 2);
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 2);
    // Many more RNR rounds do not exhaust an infinite rnr_retry.
    p.fabric.advance(Duration::from_micros(200));
    let rounds = p.a.dev.counter("rnr_nak_retry_err");
    assert!(rounds >= 20, "{rounds}");
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.fabric.advance(Duration::from_micros(10));
    ok(p.a.scq.poll(), idx);
    let r = p.b.rcq.poll().expect("received");
    assert_eq!(r.byte_cnt(), 4);
    assert_eq!(dst.read(0, 4), b"late");
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    p.assert_no_bugs();
}

#[test]
fn rnr_on_a_write_with_immediate_counts_out_of_buffer_like_a_send() {
    let mut p = rc(); // min_rnr_timer 1 = 10 µs
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    src.write(0, b"with imm");
    let idx = write_imm(&mut p.a.qp, &src, 0, &dst, 8, 8, 7u32.to_be());
    p.run();
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 1);
    assert_eq!(p.b.dev.counter("out_of_buffer"), 1, "issue 18: was 0");
    p.fabric.advance(Duration::from_micros(10));
    assert_eq!(p.b.dev.counter("out_of_buffer"), 2, "each RNR round");
    p.b.qp.post_recv(&[dst.sge(32, 32)]);
    p.fabric.advance(Duration::from_micros(10));
    ok(p.a.scq.poll(), idx);
    let r = p.b.rcq.poll().expect("received");
    assert_eq!((r.opcode(), r.byte_cnt()), (CQE_RESP_WR_IMM, 8));
    assert_eq!(dst.read(8, 8), b"with imm");
    p.assert_no_bugs();
}

#[test]
fn rnr_retries_run_out_and_everything_after_is_flushed() {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 4;
    o.rnr_retry = 2;
    let mut p = Pair::new(o);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    let s1 = send(&mut p.a.qp, &src, 0, 4);
    let w2 = write(&mut p.a.qp, &src, 0, &dst, 0, 4);
    p.fabric.advance(Duration::from_micros(100));
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(
        c,
        [
            (CQE_REQ_ERR, SYNDROME_RNR_RETRY_EXC_ERR, s1),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, w2),
        ]
    );
    assert_eq!(
        p.a.dev.counter("rnr_nak_retry_err"),
        3,
        "the try and 2 retries"
    );
    assert_eq!(p.a.dev.counter("req_rnr_retries_exceeded"), 1, "the third");
    assert_eq!(p.a.dev.counter("req_transport_retries_exceeded"), 0);
    assert_eq!(state(&p.a), QpState::Error);
    p.assert_no_bugs();
}

#[test]
fn psns_wrap_at_24_bits_under_loss() {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 4;
    let mut p = Pair::unconnected(o);
    p.connect_psns(0xff_fffd, 0xff_fffe);
    let (src, dst) = (p.mem(false, 16384), p.mem(true, 16384));
    let data = pattern(6000, 9);
    src.write(0, &data);
    // The 6-packet WRITE takes 0xfffffd..=0x000002; PSN 0 and 0xfffffe are lost once.
    p.fabric
        .faults()
        .path(&p.a.dev, &p.b.dev)
        .drop_psns(p.b.qp.qpn(), [0, 0xff_fffe]);
    let w = write(&mut p.a.qp, &src, 0, &dst, 0, 6000);
    let r = read(&mut p.a.qp, &src, 8192, &dst, 0, 3000, false);
    p.run();
    p.fabric.advance(TIMEOUT);
    ok(p.a.scq.poll(), w);
    ok(p.a.scq.poll(), r);
    assert_eq!(dst.read(0, 6000), data);
    assert_eq!(src.read(8192, 3000), data[..3000]);
    assert!(p.a.dev.counter("packet_seq_err") >= 1);
    // B sends from 0xfffffe: its two SENDs straddle the wrap too.
    p.a.qp.post_recv(&[src.sge(12000, 64)]);
    p.a.qp.post_recv(&[src.sge(13000, 64)]);
    dst.write(8000, b"wrapped");
    let s1 = send(&mut p.b.qp, &dst, 8000, 7);
    let s2 = send(&mut p.b.qp, &dst, 8000, 7);
    p.run();
    ok(p.b.scq.poll(), s1);
    ok(p.b.scq.poll(), s2);
    assert_eq!(src.read(12000, 7), b"wrapped");
    assert_eq!(src.read(13000, 7), b"wrapped");
    p.assert_no_bugs();
}

#[test]
fn read_and_atomic_depth_is_bounded_by_max_rd_atomic_and_fences_wait() {
    let mut p = rc(); // max_rd_atomic 4
    let (local, remote) = (p.mem(false, 4096), p.mem(true, 4096));
    let f = p.fabric.faults();
    f.all().delay(Duration::from_micros(5));
    for k in 0..6 {
        read(&mut p.a.qp, &local, k * 8, &remote, k * 8, 8, false);
    }
    p.run();
    assert_eq!(p.fabric.in_flight(), 4, "4 READs out, 2 wait for a slot");
    p.fabric.advance(Duration::from_micros(30));
    assert_eq!(p.a.scq.drain().len(), 6);
    // A fenced WRITE waits for the READ before it.
    read(&mut p.a.qp, &local, 0, &remote, 0, 8, false);
    write(&mut p.a.qp, &local, 0, &remote, 64, 8);
    let fenced = read(&mut p.a.qp, &local, 0, &remote, 0, 8, true);
    p.run();
    assert_eq!(
        p.fabric.in_flight(),
        2,
        "READ and WRITE out, the fenced READ waits"
    );
    p.fabric.advance(Duration::from_micros(11));
    assert_eq!(
        p.fabric.in_flight(),
        1,
        "the fenced READ went after the first READ's response"
    );
    p.fabric.advance(Duration::from_micros(20));
    let c = p.a.scq.drain();
    assert_eq!(c.len(), 3);
    assert_eq!(c[2].wqe_counter(), fenced);
    p.assert_no_bugs();
}

#[test]
fn delayed_frames_arrive_when_the_clock_gets_there() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    src.write(0, b"later");
    p.fabric
        .faults()
        .link(&p.a.dev, &p.b.dev)
        .delay(Duration::from_micros(10));
    let idx = write(&mut p.a.qp, &src, 0, &dst, 0, 5);
    p.run();
    assert!(p.a.scq.poll().is_none());
    p.fabric.advance(Duration::from_micros(10));
    assert_eq!(dst.read(0, 5), b"later", "the request arrived");
    assert!(p.a.scq.poll().is_none(), "the ACK is on its way back");
    p.fabric.advance(Duration::from_micros(10));
    ok(p.a.scq.poll(), idx);
    assert_eq!(p.fabric.faults().stats().delayed, 2);
    p.assert_no_bugs();
}

#[test]
fn every_frame_duplicated_still_executes_each_message_once() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 8192), p.mem(true, 8192));
    let data = pattern(3000, 5);
    src.write(0, &data);
    p.fabric
        .faults()
        .link(&p.a.dev, &p.b.dev)
        .duplicate(Rate(1.0));
    for k in 0..4 {
        p.b.qp.post_recv(&[dst.sge(k * 1024, 1024)]);
    }
    let w = write(&mut p.a.qp, &src, 0, &dst, 4096, 3000);
    let s = send(&mut p.a.qp, &src, 0, 100);
    let s2 = send(&mut p.a.qp, &src, 100, 100);
    p.run();
    ok(p.a.scq.poll(), w);
    ok(p.a.scq.poll(), s);
    ok(p.a.scq.poll(), s2);
    assert!(p.a.scq.poll().is_none(), "each WQE completes once");
    let r = p.b.rcq.drain();
    assert_eq!(r.len(), 2, "two SENDs, two receives");
    assert_eq!(dst.read(4096, 3000), data);
    assert_eq!(dst.read(1024, 100), data[100..200]);
    assert_eq!(
        p.b.dev.counter("duplicate_request"),
        5,
        "3 + 1 + 1 request packets"
    );
    p.assert_no_bugs();
}

#[test]
fn an_atomic_is_never_applied_twice_even_when_its_result_was_evicted() {
    // A requester allowed 2 atomics in flight against a responder with 1 resource (a
    // misconfiguration): the first atomic's result is evicted by the second, so its duplicate
    // is dropped, not executed again, and the requester ends in RETRY_EXC_ERR.
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 4;
    o.retry_cnt = 2;
    let mut p = Pair::unconnected(o);
    for s in [&p.a, &p.b] {
        modify(s, init_attr(&o));
    }
    let (mut a_rtr, m_rtr) = rtr_attr(&o, p.b.qp.qpn(), p.b.dev.gid(), 100);
    a_rtr.max_dest_rd_atomic = 1;
    p.a.dev.modify_qp(p.a.qp.info.id, &a_rtr, m_rtr).unwrap();
    let (mut b_rtr, m_rtr) = rtr_attr(&o, p.a.qp.qpn(), p.a.dev.gid(), 200);
    b_rtr.max_dest_rd_atomic = 1;
    p.b.dev.modify_qp(p.b.qp.info.id, &b_rtr, m_rtr).unwrap();
    let (mut a_rts, m_rts) = rts_attr(&o, 200);
    a_rts.max_rd_atomic = 2;
    p.a.dev.modify_qp(p.a.qp.info.id, &a_rts, m_rts).unwrap();
    modify(&p.b, rts_attr(&o, 100));
    let (result, remote) = (p.mem(false, 64), p.mem(true, 64));
    p.fabric
        .faults()
        .path(&p.b.dev, &p.a.dev)
        .drop_psns(p.a.qp.qpn(), [200]);
    let f1 = fetch_add(&mut p.a.qp, &result, 0, &remote, 0, 1);
    let f2 = fetch_add(&mut p.a.qp, &result, 8, &remote, 0, 10);
    p.fabric.advance(TIMEOUT * 4);
    assert_eq!(remote.read(0, 8), 11u64.to_ne_bytes(), "each applied once");
    assert_eq!(p.b.dev.counter("rx_atomic_requests"), 2);
    assert!(p.b.dev.counter("duplicate_request") >= 2);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(
        c,
        [
            (CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, f1),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, f2),
        ]
    );
    // f2's ACK (and each replay of it) past the unanswered f1 is an implied NAK; the resent f1
    // finds no replay entry and is dropped, counted.
    assert!(p.a.dev.counter("implied_nak_seq_err") >= 1);
    assert!(p.b.dev.counter("duplicate_request_no_replay") >= 1);
}

#[test]
fn a_fault_on_one_qp_leaves_the_other_connection_alone() {
    let mut p = rc();
    let o = p.opts;
    // A second connection between the same two devices.
    let mut a2 = side(&p.a.dev, &o, None);
    let b2 = side(&p.b.dev, &o, None);
    for s in [&a2, &b2] {
        modify(s, init_attr(&o));
    }
    modify(&a2, rtr_attr(&o, b2.qp.qpn(), p.b.dev.gid(), 7));
    modify(&b2, rtr_attr(&o, a2.qp.qpn(), p.a.dev.gid(), 9));
    modify(&a2, rts_attr(&o, 9));
    modify(&b2, rts_attr(&o, 7));
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    let src2 = Mem::new(&p.a.dev, a2.pd, 64, o.access);
    let dst2 = Mem::new(&p.b.dev, b2.pd, 64, o.access);
    src.write(0, b"one");
    src2.write(0, b"two");
    // Everything addressed to the second connection's responder is lost.
    let f = p.fabric.faults();
    let qp2 = f.qp(&p.b.dev, b2.qp.qpn());
    qp2.down();
    let w1 = write(&mut p.a.qp, &src, 0, &dst, 0, 3);
    let w2 = write(&mut a2.qp, &src2, 0, &dst2, 0, 3);
    p.fabric.advance(TIMEOUT * 2);
    ok(p.a.scq.poll(), w1);
    assert_eq!(dst.read(0, 3), b"one");
    assert!(a2.scq.poll().is_none());
    assert_eq!(dst2.read(0, 3), [0; 3]);
    qp2.up();
    p.fabric.advance(TIMEOUT);
    ok(a2.scq.poll(), w2);
    assert_eq!(dst2.read(0, 3), b"two");
    assert_eq!(
        p.a.dev.counter("local_ack_timeout_err"),
        3,
        "at T and 2T while down, at 3T the retry that got through"
    );
    p.assert_no_bugs();
}

#[test]
fn every_second_ack_lost_costs_one_timeout_and_one_duplicate_each() {
    let mut p = rc();
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    p.fabric
        .faults()
        .path(&p.b.dev, &p.a.dev)
        .only(Class::Acks)
        .drop_every(2);
    for k in 0..4usize {
        src.write(k * 8, &[k as u8 + 1; 8]);
        let idx = write(&mut p.a.qp, &src, k * 8, &dst, k * 8, 8);
        p.fabric.advance(TIMEOUT);
        ok(p.a.scq.poll(), idx);
    }
    // ACKs 1..=7 in order: 2, 4, 6 lost; WRITEs 2, 3, 4 each needed a retry.
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 3);
    assert_eq!(p.b.dev.counter("duplicate_request"), 3);
    assert_eq!(
        p.b.dev.counter("rx_write_requests"),
        4,
        "each executed once"
    );
    assert_eq!(p.fabric.faults().stats().dropped, 3);
    for k in 0..4usize {
        assert_eq!(dst.read(k * 8, 8), [k as u8 + 1; 8]);
    }
    p.assert_no_bugs();
}

/// Issue 18: a READ or atomic whose response was lost must still complete when later atomics
/// are answered first (IBTA Vol 1 §9.7.5.1.5, implied NAK: a response for a later PSN while
/// an earlier READ/atomic is unanswered means its response was lost; the requester resends
/// from it and accepts nothing past it, so no READ/atomic credit is freed early and the
/// responder's `max_dest_rd_atomic` table still holds everything it may be asked to replay).
mod rd_atomic_credits {
    use super::*;

    #[test]
    fn a_read_whose_responses_were_lost_completes_behind_eight_fetch_adds() {
        let mut p = rc(); // max_rd_atomic 4, max_dest_rd_atomic 4, MTU 1024
        let (local, remote) = (p.mem(false, 8192), p.mem(true, 8192));
        let data = pattern(3000, 9);
        remote.write(0, &data);
        remote.write(4096, &1000u64.to_ne_bytes());
        // The READ takes PSNs 200..=202: its three responses are lost once, and its next
        // three retransmissions too, so the responder hears of it again only after whatever
        // the requester sends once the atomics' ACKs are in.
        let f = p.fabric.faults();
        f.path(&p.b.dev, &p.a.dev)
            .only(Class::ReadResponses)
            .drop_psns(p.a.qp.qpn(), [200, 201, 202]);
        f.path(&p.a.dev, &p.b.dev)
            .only(Class::ReadRequests)
            .skip(1)
            .times(3)
            .drop_every(1);
        let r = read(&mut p.a.qp, &local, 0, &remote, 0, 3000, false);
        let faas: Vec<u16> = (0..8)
            .map(|k| fetch_add(&mut p.a.qp, &local, 4096 + k * 8, &remote, 4096, 1 << k))
            .collect();
        p.fabric.advance(TIMEOUT * 8);
        let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
        let want: Vec<_> = std::iter::once(r)
            .chain(faas.iter().copied())
            .map(|i| (CQE_REQ, 0, i))
            .collect();
        assert_eq!(c, want, "every WR completes, in order");
        assert_eq!(local.read(0, 3000), data, "the READ's data");
        let mut sum = 1000u64;
        for k in 0..8 {
            assert_eq!(
                local.read(4096 + k * 8, 8),
                sum.to_ne_bytes(),
                "FETCH_ADD {k} saw the sum of the earlier ones"
            );
            sum += 1 << k;
        }
        assert_eq!(remote.read(4096, 8), sum.to_ne_bytes(), "each applied once");
        assert_eq!(p.b.dev.counter("rx_atomic_requests"), 8);
        assert_eq!(p.b.dev.counter("rx_read_requests"), 1);
        assert!(p.a.dev.counter("implied_nak_seq_err") >= 1);
        assert_eq!(p.b.dev.counter("duplicate_request_no_replay"), 0);
        assert_eq!(state(&p.a), QpState::Rts);
        p.assert_no_bugs();
    }
}

/// Issue 18: what the faults did is on record, and a second capture shows the frames as they
/// arrived.
mod fault_record {
    use super::*;
    use mlx5_sim::faults::FaultKind;
    use mlx5_sim::pcap::PcapReader;
    use mlx5_sim::wire::Packet;

    fn frames(path: &std::path::Path) -> Vec<Vec<u8>> {
        PcapReader::open(path)
            .unwrap()
            .map(|r| r.unwrap().data)
            .collect()
    }

    #[test]
    fn the_record_names_the_frames_of_the_tap_capture_and_the_second_capture_shows_the_wire() {
        let mut p = rc();
        let dir = std::env::temp_dir().join(format!("mlx5-sim-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tap, wire) = (dir.join("tap.pcap"), dir.join("wire.pcap"));
        p.fabric.capture_to(&tap).unwrap();
        let f = p.fabric.faults();
        f.capture_to(&wire).unwrap();
        let bq = p.b.qp.qpn();
        f.path(&p.a.dev, &p.b.dev)
            .drop_psns(bq, [201])
            .duplicate_psns(bq, [200]);
        f.path(&p.b.dev, &p.a.dev)
            .only(Class::Acks)
            .times(1)
            .corrupt_every(1);
        let (src, dst) = (p.mem(false, 4096), p.mem(true, 4096));
        let data = pattern(3000, 5);
        src.write(0, &data);
        let w = write(&mut p.a.qp, &src, 0, &dst, 0, 3000); // PSNs 200..=202
        p.fabric.advance(TIMEOUT * 4);
        ok(p.a.scq.poll(), w);
        assert_eq!(dst.read(0, 3000), data);
        let tapped = p.fabric.stop_capture().unwrap();
        let arrived = f.stop_capture().unwrap();
        let rec = f.record();
        let kinds: Vec<(FaultKind, u32)> = rec.iter().map(|r| (r.kind, r.psn)).collect();
        assert_eq!(kinds[0], (FaultKind::Duplicated { copies: 1 }, 200));
        assert_eq!(kinds[1], (FaultKind::Dropped, 201));
        assert_eq!(kinds[2].0, FaultKind::Corrupted, "the first ACK: {kinds:?}");
        assert_eq!(rec.len(), 3);
        let s = f.stats();
        assert_eq!((s.dropped, s.duplicated, s.corrupted), (1, 1, 1));
        let (t, a) = (frames(&tap), frames(&wire));
        assert_eq!((t.len() as u64, a.len() as u64), (tapped, arrived));
        assert_eq!(a.len(), t.len() - 1 + 1, "one dropped, one copy");
        for r in &rec {
            let pkt = Packet::parse(&t[r.frame as usize - 1]).unwrap();
            assert_eq!((pkt.bth.psn.get(), pkt.bth.dest_qp), (r.psn, r.qpn));
            assert_eq!(pkt.bth.opcode, r.opcode);
        }
        // The corrupted ACK arrived with one bit flipped; the dropped frame never arrived.
        let bad = &t[rec[2].frame as usize - 1];
        let flipped = a.iter().filter(|x| {
            x.len() == bad.len()
                && x.iter()
                    .zip(bad.iter())
                    .map(|(p, q)| (p ^ q).count_ones())
                    .sum::<u32>()
                    == 1
        });
        assert_eq!(flipped.count(), 1);
        let lost = &t[rec[1].frame as usize - 1];
        assert!(!a.contains(lost) || t.iter().filter(|x| *x == lost).count() > 1);
        assert_eq!(p.a.dev.counter("rx_icrc_encapsulated"), 1);
        std::fs::remove_dir_all(&dir).ok();
        p.assert_no_bugs();
    }
}
