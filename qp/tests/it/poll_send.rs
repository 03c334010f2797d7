//! The lean send poll `Cq::poll_send`: pinned results (WR ids, consumer index, doorbell
//! record, what reaches the callback), every way a run ends (lap end, ring end, an uncommon
//! WQE, a CQE of another shape, a bad CQE), and the promise that it delivers exactly what
//! `Cq::poll` delivers — checked on random post / complete / fail sequences against a twin
//! QP polled with `poll`.

use crate::common;
use mlx5_wqe::opcode as op;

use common::{req, req_err, FakeCq, FakeQp, QpCfg};
use mlx5_hw::{QpState, QpType};
use mlx5_qp::{Cq, Error, Qp, RemoteAddr, SendFlags, SendWr, Wc, WcOpcode, WcStatus};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::collections::VecDeque;

const QPN: u32 = 0x1234;
const REMOTE: RemoteAddr = RemoteAddr::new(0x1000, 7);
/// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR` and `MLX5_CQE_SYNDROME_WR_FLUSH_ERR` (mlx5dv.h).
const LOCAL_PROT: u8 = 0x04;
const FLUSH: u8 = 0x05;

fn qp_on(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    // These tests are about the ring's mechanics: one WR per block, as the literal layouts
    // were written for (the computed WR limit is tested in wr_limit.rs and the lean tests).
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn cq_on(fcq: &FakeCq) -> Cq {
    // SAFETY: `fcq` owns the memory and outlives the CQ in every test.
    unsafe { Cq::from_layout(&fcq.layout) }.unwrap()
}

fn write8(qp: &mut Qp, id: u64) {
    qp.post_write_inline(id, b"8 bytes!", REMOTE, SendFlags::SIGNALED)
        .unwrap();
}

/// Poll with `poll_send`, collecting what reaches the callback.
fn poll_send(cq: &mut Cq, qp: &mut Qp, room: usize) -> (Result<Vec<u64>, Error>, Vec<Wc>) {
    let mut ids = vec![0u64; room];
    let mut other = Vec::new();
    let r = cq
        .poll_send(qp, &mut ids, |wc| other.push(wc))
        .map(|n| ids[..n].to_vec());
    (r, other)
}

#[test]
fn a_batch_returns_wr_ids_and_sets_ci_once() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut fcq = FakeCq::new(16, 64, false);
    let (mut qp, mut cq) = (qp_on(&fake), cq_on(&fcq));
    for id in 10..13 {
        write8(&mut qp, id);
    }
    for pi in 0..3 {
        fcq.push(req(QPN, pi, 0x08));
    }
    let (r, other) = poll_send(&mut cq, &mut qp, 8);
    assert_eq!(r.unwrap(), vec![10, 11, 12]);
    assert!(other.is_empty());
    assert_eq!(fcq.set_ci(), 3, "the doorbell record after the batch");
    assert_eq!(cq.ci(), 3);
    assert_eq!(qp.sq_outstanding_bbs(), 0, "every block back");
    // Empty CQ: nothing, no doorbell-record write (it still says 3).
    let (r, other) = poll_send(&mut cq, &mut qp, 8);
    assert_eq!((r.unwrap(), other.len()), (vec![], 0));
    // The room bounds the run; the rest waits for the next call.
    for id in 20..24 {
        write8(&mut qp, id);
    }
    for pi in 3..7 {
        fcq.push(req(QPN, pi, 0x08));
    }
    assert_eq!(poll_send(&mut cq, &mut qp, 3).0.unwrap(), vec![20, 21, 22]);
    assert_eq!(fcq.set_ci(), 6);
    assert_eq!(poll_send(&mut cq, &mut qp, 3).0.unwrap(), vec![23]);
    assert_eq!(fcq.set_ci(), 7);
    // An empty `wr_ids` polls nothing.
    write8(&mut qp, 30);
    fcq.push(req(QPN, 7, 0x08));
    assert_eq!(poll_send(&mut cq, &mut qp, 0).0.unwrap(), vec![]);
    assert_eq!(cq.ci(), 7);
}

#[test]
fn runs_end_at_the_lap_and_the_ring_end_and_go_on() {
    // 4 CQEs, 4 blocks: every run crosses a lap or the ring end within a few CQEs.
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 4,
        ..QpCfg::default()
    });
    let mut fcq = FakeCq::new(4, 64, false);
    let (mut qp, mut cq) = (qp_on(&fake), cq_on(&fcq));
    let mut next = 0u64;
    let mut got = Vec::new();
    for round in 0..9u64 {
        let k = 1 + round % 3;
        for _ in 0..k {
            write8(&mut qp, next);
            fcq.push(req(QPN, qp.sq_pi().wrapping_sub(1), 0x08));
            next += 1;
        }
        while got.len() < next as usize {
            let (r, other) = poll_send(&mut cq, &mut qp, 8);
            let ids = r.unwrap();
            assert!(other.is_empty());
            assert!(!ids.is_empty(), "a ready CQE is always consumed");
            got.extend(ids);
        }
        assert_eq!(fcq.set_ci(), cq.ci() & 0x00ff_ffff);
    }
    assert_eq!(got, (0..next).collect::<Vec<_>>());
    assert_eq!(qp.sq_outstanding_bbs(), 0);
}

#[test]
fn uncommon_wqes_and_cqes_take_the_full_path_with_the_same_result() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut fcq = FakeCq::new(16, 64, false);
    let (mut qp, mut cq) = (qp_on(&fake), cq_on(&fcq));
    // A two-block WQE (60 bytes inline) then a one-block one: the first CQE names a WQE
    // whose meta byte is set, so the call hands both to `poll`.
    qp.post_write_inline(1, &[7; 60], REMOTE, SendFlags::SIGNALED)
        .unwrap();
    write8(&mut qp, 2);
    fcq.push(req(QPN, 0, 0x08));
    fcq.push(req(QPN, 2, 0x08));
    assert_eq!(poll_send(&mut cq, &mut qp, 8).0.unwrap(), vec![1, 2]);
    // A one-block WQE while a two-block one is outstanding: the run reads the meta bytes.
    write8(&mut qp, 3);
    qp.post_write_inline(4, &[7; 60], REMOTE, SendFlags::SIGNALED)
        .unwrap();
    fcq.push(req(QPN, 3, 0x08));
    assert_eq!(poll_send(&mut cq, &mut qp, 8).0.unwrap(), vec![3]);
    fcq.push(req(QPN, 4, 0x08));
    assert_eq!(poll_send(&mut cq, &mut qp, 8).0.unwrap(), vec![4]);
    // Unsignaled WQEs retired by a later CQE.
    qp.post_write_inline(5, b"x", REMOTE, SendFlags::empty())
        .unwrap();
    write8(&mut qp, 6);
    fcq.push(req(QPN, 7, 0x08));
    assert_eq!(poll_send(&mut cq, &mut qp, 8).0.unwrap(), vec![6]);
    assert_eq!(qp.sq_outstanding_bbs(), 0);
    // A CQE with SE set is not the common shape; the full path still completes it.
    write8(&mut qp, 8);
    let mut c = req(QPN, 8, 0x08);
    c.op_own |= 0x02;
    fcq.push(c);
    assert_eq!(poll_send(&mut cq, &mut qp, 8).0.unwrap(), vec![8]);
    assert_eq!(fcq.set_ci(), 6);
}

#[test]
fn errors_and_flushes_reach_the_callback_in_order() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut fcq = FakeCq::new(16, 64, false);
    let (mut qp, mut cq) = (qp_on(&fake), cq_on(&fcq));
    for id in 1..=4 {
        write8(&mut qp, id);
    }
    fcq.push(req(QPN, 0, 0x08));
    fcq.push(req_err(QPN, 1, op::OPCODE_RDMA_WRITE, LOCAL_PROT, 0x33));
    fcq.push(req_err(QPN, 3, op::OPCODE_RDMA_WRITE, FLUSH, 0));
    // The good one first, alone: the run stops at the error CQE.
    let (r, other) = poll_send(&mut cq, &mut qp, 8);
    assert_eq!((r.unwrap(), other.len()), (vec![1], 0));
    let (r, other) = poll_send(&mut cq, &mut qp, 8);
    assert_eq!(r.unwrap(), vec![]);
    let got: Vec<_> = other
        .iter()
        .map(|w| {
            (
                w.wr_id(),
                w.status(),
                w.syndrome(),
                w.vendor_err(),
                w.opcode(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                2,
                WcStatus::LocProtErr,
                LOCAL_PROT,
                0x33,
                WcOpcode::RdmaWrite
            ),
            (3, WcStatus::WrFlushErr, FLUSH, 0, WcOpcode::RdmaWrite),
            (4, WcStatus::WrFlushErr, FLUSH, 0, WcOpcode::RdmaWrite),
        ]
    );
    assert_eq!(qp.sq_outstanding_bbs(), 0);
    assert_eq!(fcq.set_ci(), 3);
}

#[test]
fn a_bad_cqe_is_reported_by_the_next_call() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut fcq = FakeCq::new(16, 64, false);
    let (mut qp, mut cq) = (qp_on(&fake), cq_on(&fcq));
    write8(&mut qp, 1);
    write8(&mut qp, 2);
    fcq.push(req(QPN, 0, 0x08));
    fcq.push(req(QPN, 1, 0x08));
    fcq.push(req(QPN, 1, 0x08)); // again: names no outstanding WQE
    fcq.push(req(QPN + 1, 0, 0x08)); // another QP
    assert_eq!(poll_send(&mut cq, &mut qp, 8).0.unwrap(), vec![1, 2]);
    assert!(matches!(
        poll_send(&mut cq, &mut qp, 8).0,
        Err(Error::BadCqe { wqe_counter: 1, .. })
    ));
    assert!(matches!(
        poll_send(&mut cq, &mut qp, 8).0,
        Err(Error::UnknownQpn { qpn, .. }) if qpn == QPN + 1
    ));
    assert_eq!(
        cq.ci(),
        3,
        "the bad CQE consumed once, another QP's left in the CQ"
    );
    assert_eq!(cq.discard_next().map(|c| c.qpn()), Some(QPN + 1));
    // A CQE naming the next block to be posted (nothing outstanding) is not taken.
    fcq.push(req(QPN, 2, 0x08));
    assert!(matches!(
        poll_send(&mut cq, &mut qp, 8).0,
        Err(Error::BadCqe { wqe_counter: 2, .. })
    ));
}

#[test]
fn cqe128_and_ignore_overrun() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut fcq = FakeCq::new(4, 128, true);
    let (mut qp, mut cq) = (qp_on(&fake), cq_on(&fcq));
    let mut got = Vec::new();
    for id in 0..10 {
        write8(&mut qp, id);
        fcq.push(req(QPN, id as u16, 0x08));
        got.extend(poll_send(&mut cq, &mut qp, 2).0.unwrap());
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    // Written as on any CQ (rdma-core `update_cons_index` does not test the flag either).
    assert_eq!(
        fcq.set_ci(),
        10,
        "an ignore-overrun CQ's record follows the index"
    );
    assert_eq!(cq.ci(), 10);
}

/// One step of the twin run.
#[derive(Clone, Debug)]
enum Step {
    /// Post through `post` (lean or generic, by shape).
    Post {
        send: bool,
        len: usize,
        signaled: bool,
    },
    /// The device completes the next `n` WQEs: a CQE for each signaled one.
    Complete(usize),
    /// The device fails the next WQE and flushes the next `n` after it (the rest stay
    /// outstanding: later success CQEs then meet a send queue that has seen an error).
    Fail(usize),
    /// The control path takes both QPs through Error and Reset back to RTS.
    Recover,
    /// A CQE naming block `k` past the oldest outstanding one (maybe not a WQE start, maybe
    /// not outstanding), or of another QP.
    Garbage(u16, bool),
    /// Poll everything, this many completions per call.
    Poll(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (any::<bool>(), prop_oneof![0usize..13, 13usize..120], prop::bool::weighted(0.8))
            .prop_map(|(send, len, signaled)| Step::Post { send, len, signaled }),
        3 => (1usize..6).prop_map(Step::Complete),
        1 => (0usize..4).prop_map(Step::Fail),
        1 => Just(Step::Recover),
        1 => (0u16..6, prop::bool::weighted(0.2)).prop_map(|(k, other)| Step::Garbage(k, other)),
        3 => (1usize..8).prop_map(Step::Poll),
    ]
}

/// A requester CQE's completion takes its opcode from the CQE (its `s_wqe_opcode`, which
/// rdma-core's `handle_good_req` and UCX's error log read), whichever path serves it: the lean
/// flush run behind `Cq::poll` and the full path behind `Cq::poll_send` made different
/// completions of one flush CQE when the full path took the opcode from the ring instead (the
/// property test below found it under another seed). The CQEs here name another opcode than
/// the WQEs', so that where the opcode comes from shows.
#[test]
fn every_path_takes_a_completion_opcode_from_its_cqe() {
    let cfg = QpCfg {
        qp_type: QpType::Rc,
        sq_bbs: 8,
        sig_all: true,
        ..QpCfg::default()
    };
    let (mut a, mut b) = (Twin::new(&cfg, 16, 64), Twin::new(&cfg, 16, 64));
    let (mut ga, mut gb) = (Got::default(), Got::default());
    for t in [&mut a, &mut b] {
        for id in 0..5 {
            write8(&mut t.qp, id);
        }
        for pi in 0..3 {
            t.fcq.push(req(QPN, pi, op::OPCODE_SEND));
        }
        t.fcq.push(req_err(QPN, 3, op::OPCODE_SEND, LOCAL_PROT, 0));
        t.fcq.push(req_err(QPN, 4, op::OPCODE_SEND, FLUSH, 0));
    }
    drain_poll(&mut a, 4, &mut ga);
    drain_poll_send(&mut b, 4, &mut gb);
    assert_eq!(ga, gb);
    assert_eq!(ga.ok, [0, 1, 2]);
    let errors: Vec<_> = ga
        .other
        .iter()
        .map(|w| (w.wr_id(), w.status(), w.opcode()))
        .collect();
    assert_eq!(
        errors,
        [
            (3, WcStatus::LocProtErr, WcOpcode::Send),
            (4, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
}

struct Twin {
    fake: FakeQp,
    fcq: FakeCq,
    qp: Qp,
    cq: Cq,
}

impl Twin {
    fn new(cfg: &QpCfg, cqes: u32, size: u32) -> Twin {
        let fake = FakeQp::new(cfg);
        let fcq = FakeCq::new(cqes, size, false);
        let qp = qp_on(&fake);
        let cq = cq_on(&fcq);
        Twin { fake, fcq, qp, cq }
    }
}

/// What a twin delivered: successful WR ids, other completions, errors, in order.
#[derive(Debug, Default, PartialEq)]
struct Got {
    ok: Vec<u64>,
    other: Vec<Wc>,
    errors: Vec<Error>,
}

fn drain_poll(t: &mut Twin, room: usize, got: &mut Got) {
    for _ in 0..200 {
        let mut wcs = vec![Wc::default(); room];
        match t.cq.poll(&mut t.qp, &mut wcs) {
            Ok(n) => {
                for wc in &wcs[..n] {
                    if wc.is_ok() && !wc.opcode().is_recv() {
                        got.ok.push(wc.wr_id());
                    } else {
                        got.other.push(*wc);
                    }
                }
            }
            Err(e) => {
                // Another QP's CQE stays in the CQ: this test's garbage, taken out.
                if let Error::UnknownQpn { .. } = e {
                    assert!(t.cq.discard_next().is_some());
                }
                got.errors.push(e)
            }
        }
        if t.cq.ci() == t.fcq.hw_pi {
            return;
        }
    }
    panic!("poll made no progress");
}

fn drain_poll_send(t: &mut Twin, room: usize, got: &mut Got) {
    for _ in 0..200 {
        let mut ids = vec![0u64; room];
        let mut other = Vec::new();
        match t.cq.poll_send(&mut t.qp, &mut ids, |wc| other.push(wc)) {
            Ok(n) => got.ok.extend_from_slice(&ids[..n]),
            Err(e) => {
                if let Error::UnknownQpn { .. } = e {
                    assert!(t.cq.discard_next().is_some());
                }
                got.errors.push(e)
            }
        }
        got.other.extend(other);
        if t.cq.ci() == t.fcq.hw_pi {
            return;
        }
    }
    panic!("poll_send made no progress");
}

proptest! {
    #![proptest_config(Config {
        cases: 64,
        rng_seed: RngSeed::Fixed(0x706f_6c6c),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn poll_send_delivers_what_poll_delivers(
        sq_bbs in prop_oneof![Just(4u32), Just(8), Just(64)],
        cqes in prop_oneof![Just(4u32), Just(16)],
        size in prop_oneof![4 => Just(64u32), 1 => Just(128)],
        sig_all in prop::bool::weighted(0.2),
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let cfg = QpCfg { qp_type: QpType::Rc, sq_bbs, sig_all, ..QpCfg::default() };
        let (mut a, mut b) = (Twin::new(&cfg, cqes, size), Twin::new(&cfg, cqes, size));
        let (mut ga, mut gb) = (Got::default(), Got::default());
        // The device's view: outstanding WQEs (first block, blocks, signaled, opcode), in
        // order.
        let mut wqes: VecDeque<(u16, u16, bool, u8)> = VecDeque::new();
        let payload = [0x5au8; 120];
        for (id, s) in steps.into_iter().enumerate() {
            let id = id as u64;
            // Keep the CQ from overflowing: at most `cqes` CQEs not yet polled.
            let room = (a.fcq.hw_pi - a.cq.ci()) as usize;
            match s {
                Step::Post { send, len, signaled } => {
                    let data = &payload[..len];
                    let wr = if send { SendWr::send(id) } else { SendWr::write(id, REMOTE) };
                    let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
                    let wr = wr.inline(data).flags(flags);
                    let pi = a.qp.sq_pi();
                    let (ra, rb) = (a.qp.post(&wr), b.qp.post(&wr));
                    prop_assert_eq!(&ra, &rb);
                    if ra.is_ok() {
                        let bbs = a.qp.sq_pi().wrapping_sub(pi);
                        let op = if send { op::OPCODE_SEND } else { op::OPCODE_RDMA_WRITE };
                        wqes.push_back((pi, bbs, signaled || sig_all, op));
                    }
                }
                Step::Complete(n) => {
                    for _ in 0..n {
                        if (a.fcq.hw_pi - a.cq.ci()) as usize + 1 >= cqes as usize {
                            break;
                        }
                        let Some((pi, _, signaled, op)) = wqes.pop_front() else { break };
                        if signaled {
                            for t in [&mut a, &mut b] {
                                t.fcq.push(req(QPN, pi, op));
                            }
                        }
                    }
                }
                Step::Fail(flushed) => {
                    let n = wqes.len().min(flushed + 1);
                    if n != 0 && room + n < cqes as usize {
                        for (i, (pi, _, _, op)) in wqes.drain(..n).enumerate() {
                            let synd = if i == 0 { LOCAL_PROT } else { FLUSH };
                            for t in [&mut a, &mut b] {
                                t.fcq.push(req_err(QPN, pi, op, synd, 0));
                            }
                        }
                        drain_poll(&mut a, 4, &mut ga);
                        drain_poll_send(&mut b, 4, &mut gb);
                    }
                }
                Step::Recover => {
                    drain_poll(&mut a, 4, &mut ga);
                    drain_poll_send(&mut b, 4, &mut gb);
                    wqes.clear();
                    for t in [&mut a, &mut b] {
                        t.qp.set_state(QpState::Error);
                        t.qp.set_state(QpState::Reset);
                        t.qp.set_state(QpState::Init);
                        t.qp.set_state(QpState::Rtr);
                        t.qp.set_state(QpState::Rts);
                    }
                }
                Step::Garbage(k, other_qp) => {
                    if room + 1 < cqes as usize {
                        let base = wqes.front().map_or(a.qp.sq_pi(), |w| w.0);
                        let qpn = if other_qp { QPN + 1 } else { QPN };
                        for t in [&mut a, &mut b] {
                            t.fcq.push(req(qpn, base.wrapping_add(k), 0x08));
                        }
                        // The CQE may have retired WQEs: the device forgets those.
                        drain_poll(&mut a, 8, &mut ga);
                        drain_poll_send(&mut b, 8, &mut gb);
                        let ci_blocks = a.qp.sq_outstanding_bbs();
                        let mut left: u32 = wqes.iter().map(|w| w.1 as u32).sum();
                        while left > ci_blocks {
                            let Some(w) = wqes.pop_front() else { break };
                            left -= w.1 as u32;
                        }
                    }
                }
                Step::Poll(r) => {
                    // Both drain the CQ (in calls of `r` entries), so that the twins' send
                    // queues agree again before the next post.
                    drain_poll(&mut a, r, &mut ga);
                    drain_poll_send(&mut b, r, &mut gb);
                }
            }
            prop_assert_eq!(a.qp.sq_pi(), b.qp.sq_pi());
        }
        drain_poll(&mut a, 3, &mut ga);
        drain_poll_send(&mut b, 3, &mut gb);
        prop_assert_eq!(&ga, &gb);
        prop_assert_eq!(a.cq.ci(), b.cq.ci());
        prop_assert_eq!(a.fcq.set_ci(), b.fcq.set_ci());
        prop_assert_eq!(a.qp.sq_outstanding_bbs(), b.qp.sq_outstanding_bbs());
        prop_assert_eq!(a.fake.sq.bytes(), b.fake.sq.bytes());
        // Every WR that was posted and completed is accounted for once.
        let mut seen = ga.ok.clone();
        seen.extend(ga.other.iter().map(|w| w.wr_id()));
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        prop_assert_eq!(seen.len(), n, "a WR retired twice");
    }
}
