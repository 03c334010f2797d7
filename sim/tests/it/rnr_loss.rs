//! Issue 28: RNR waits under loss. A burst of SENDs meets an empty receive queue; the
//! responder answers the first with an RNR NAK and the next with a NAK sequence error (it
//! waits for the RNR-NAK'd PSN again). When RNR NAKs are lost, the sequence-error NAK that
//! follows is all the requester hears: each one must resend at once (it is the responder's
//! answer to a new round), spend one transport retry, and the next RNR NAK that gets through
//! gives the retries back: it answers the request the retries were for (the rules and their
//! sources: `sim/src/transport/requester/retry.rs`).
//!
//! Every test names the frames it drops: the first SEND's PSN is 200 (A's `sq_psn`), so each
//! round's RNR NAK and sequence-error NAK both carry PSN 200, addressed to A's QPN, RNR NAK
//! first; `skip(n)` on a PSN rule lets the first `n` of those frames through and drops the next.

use crate::common;

use std::time::Duration;

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::{QpState, QpType};
use mlx5_sim::faults::{Class, FaultKind};
use mlx5_sim::wire::Opcode;

/// `min_rnr_timer` 1 of the common options: 10 µs.
const RNR: Duration = Duration::from_micros(10);

/// The PSN of the first SEND (A's `sq_psn` in [`Pair::connect`]).
const P0: u32 = 200;

/// A pair with `retry_cnt` transport retries, `rnr_retry` 7 (forever), `timeout` 14 (67 ms).
fn pair(retry_cnt: u8) -> Pair {
    let mut o = Opts::new(QpType::Rc);
    o.retry_cnt = retry_cnt;
    Pair::new(o)
}

/// Drop the RNR NAK of each of these retransmission rounds (round 0 is the first
/// transmission): each round puts two frames with PSN `P0` on the B → A path, the RNR NAK
/// first, so round `r`'s RNR NAK is the `2r + 1`-th.
fn drop_rnr_naks_of_rounds(p: &Pair, rounds: &[u64]) {
    for &r in rounds {
        p.fabric
            .faults()
            .path(&p.b.dev, &p.a.dev)
            .only(Class::Acks)
            .skip(2 * r)
            .drop_psns(p.a.qp.qpn(), [P0]);
    }
}

/// Post `n` 8-byte SENDs; their WQE indices.
fn sends(p: &mut Pair, src: &Mem, n: usize) -> Vec<u16> {
    (0..n)
        .map(|i| {
            src.write(i * 8, &[i as u8 + 1; 8]);
            send(&mut p.a.qp, src, i * 8, 8)
        })
        .collect()
}

/// The frames the fault rules dropped: (opcode, destination QPN, PSN) each.
fn dropped(p: &Pair) -> Vec<(Opcode, u32, u32)> {
    p.fabric
        .faults()
        .record()
        .iter()
        .filter(|r| r.kind == FaultKind::Dropped)
        .map(|r| (r.opcode, r.qpn, r.psn))
        .collect()
}

#[test]
#[ignore = "issue 28: fails on the requester before its fix (next commit)"]
fn lost_rnr_naks_of_two_rounds_are_recovered_by_the_sequence_naks_without_the_ack_timer() {
    let mut p = pair(7);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    drop_rnr_naks_of_rounds(&p, &[1, 2]);
    let idx = sends(&mut p, &src, 4);
    // Round 0 (t = 0): RNR NAK 200 arrives, A waits 10 µs; the NAK of 201 is ignored.
    p.run();
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 1);
    // Round 1 (t = 10 µs, the RNR timer): its RNR NAK is lost, its NAK resends (round 2),
    // whose RNR NAK is lost too; round 2's NAK resends again (round 3), whose RNR NAK arrives:
    // A waits for the RNR timer again. No ACK timeout (67 ms) is involved.
    p.fabric.advance(RNR);
    let a = &p.a.dev;
    let ack = Opcode::RC_ACKNOWLEDGE;
    let qa = p.a.qp.qpn();
    assert_eq!(dropped(&p), [(ack, qa, P0), (ack, qa, P0)]);
    assert_eq!(
        p.b.dev.counter("out_of_buffer") - a.counter("rnr_nak_retry_err"),
        2,
        "the two dropped frames are RNR NAKs: B sent 4, A received 2"
    );
    assert_eq!(a.counter("packet_seq_err"), 4, "one per round 0..=3");
    assert_eq!(a.counter("port_xmit_packets"), 4 * 4, "rounds 0..=3");
    assert_eq!(a.counter("local_ack_timeout_err"), 0);
    // The receives are posted: the next RNR round (10 µs later) delivers all four.
    for i in 0..4 {
        p.b.qp.post_recv(&[dst.sge(i * 16, 16)]);
    }
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    let want: Vec<_> = idx.iter().map(|&i| (CQE_REQ, 0, i)).collect();
    assert_eq!(c, want, "complete 10 µs after the receives, not 67 ms");
    for i in 0..4 {
        let r = p.b.rcq.poll().expect("delivered once");
        assert_eq!((r.opcode(), r.byte_cnt()), (CQE_RESP_SEND, 8));
        assert_eq!(dst.read(i * 16, 8), [i as u8 + 1; 8]);
    }
    assert!(p.b.rcq.poll().is_none());
    assert_eq!(a.counter("local_ack_timeout_err"), 0);
    assert_eq!(a.counter("rnr_nak_retry_err"), 2);
    assert_eq!(a.counter("port_xmit_packets"), 5 * 4, "rounds 0..=4");
    assert_eq!(state(&p.a), QpState::Rts);
    p.assert_no_bugs();
}

#[test]
#[ignore = "issue 28: fails on the requester before its fix (next commit)"]
fn each_lost_rnr_nak_spends_one_retry_and_the_next_rnr_nak_gives_it_back() {
    // retry_cnt 1: one retry without an answer is allowed. The RNR NAKs of rounds 1, 3 and 5
    // are lost: each time the sequence NAK resends (the one retry), and the RNR NAK of the
    // resent round answers it, so the retry is there again for the next loss.
    let mut p = pair(1);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    drop_rnr_naks_of_rounds(&p, &[1, 3, 5]);
    let idx = sends(&mut p, &src, 2);
    p.run();
    // Rounds 1+2 at 10 µs, 3+4 at 20 µs, 5+6 at 30 µs; each second round's RNR NAK arrives.
    p.fabric.advance(RNR * 3);
    assert_eq!(dropped(&p).len(), 3);
    assert_eq!(p.a.dev.counter("rnr_nak_retry_err"), 4, "rounds 0, 2, 4, 6");
    assert_eq!(p.a.dev.counter("packet_seq_err"), 7, "rounds 0..=6");
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    assert_eq!(
        state(&p.a),
        QpState::Rts,
        "no retry was left unanswered twice"
    );
    for i in 0..2 {
        p.b.qp.post_recv(&[dst.sge(i * 16, 16)]);
    }
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(c, [(CQE_REQ, 0, idx[0]), (CQE_REQ, 0, idx[1])]);
    assert_eq!(p.b.rcq.drain().len(), 2);
    p.assert_no_bugs();
}

#[test]
#[ignore = "issue 28: fails on the requester before its fix (next commit)"]
fn two_unanswered_retries_exceed_a_retry_cnt_of_one_at_the_second_nak() {
    // The RNR NAKs of rounds 1 and 2 are lost: round 1's NAK resends (the one retry), round
    // 2's NAK would be the second retry without an answer: RETRY_EXC_ERR at once, at 10 µs,
    // not after an ACK timeout.
    let mut p = pair(1);
    let src = p.mem(false, 64);
    drop_rnr_naks_of_rounds(&p, &[1, 2]);
    let idx = sends(&mut p, &src, 2);
    p.run();
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(
        c,
        [
            (CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx[0]),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, idx[1]),
        ]
    );
    assert_eq!(p.a.dev.counter("packet_seq_err"), 3, "rounds 0, 1, 2");
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    assert_eq!(p.a.dev.counter("port_xmit_packets"), 3 * 2, "rounds 0..=2");
    assert_eq!(state(&p.a), QpState::Error);
    // With retry_cnt 2 the same losses are survived.
    let mut p = pair(2);
    let (src, dst) = (p.mem(false, 64), p.mem(true, 64));
    drop_rnr_naks_of_rounds(&p, &[1, 2]);
    let idx = sends(&mut p, &src, 2);
    p.run();
    p.fabric.advance(RNR);
    assert_eq!(state(&p.a), QpState::Rts);
    p.b.qp.post_recv(&[dst.sge(0, 16)]);
    p.b.qp.post_recv(&[dst.sge(16, 16)]);
    p.fabric.advance(RNR);
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    assert_eq!(c, [(CQE_REQ, 0, idx[0]), (CQE_REQ, 0, idx[1])]);
    assert_eq!(p.a.dev.counter("local_ack_timeout_err"), 0);
    p.assert_no_bugs();
}
