//! Issue 28: a CQ smaller than the completions its QPs produce. The CQ enters its error state
//! with `IBV_EVENT_CQ_ERR`; every QP that then has a completion for it goes to Error with
//! `IBV_EVENT_QP_FATAL` (IBTA's Local Work Queue Catastrophic Error), its flush CQEs reaching
//! a healthy CQ and lost with the dead one; nothing is a driver bug (`sim/src/cq.rs` has the
//! rules and their sources). What a program does about the WRs whose completions were lost
//! (`mlx5_qp::Qp::flush_outstanding`) is in `docs/troubleshooting.md`.

use crate::common;

use std::time::Duration;

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::{AsyncEvent, CqId, Device, QpId, QpState, QpType};

fn events(dev: &mlx5_sim::SimDevice) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| dev.poll_async_event()).collect()
}

/// An RC pair whose CQs have `cqe` entries (at least 4: `cqe` 3 rounds up to 4).
fn pair(cqe: u32) -> Pair {
    let mut o = Opts::new(QpType::Rc);
    o.cqe = cqe;
    o.timeout = 4;
    o.retry_cnt = 2;
    Pair::new(o)
}

#[test]
fn an_overrun_send_cq_errors_and_its_qp_goes_fatal_flushing_into_the_healthy_recv_cq() {
    let mut p = pair(3);
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    // A holds two receives (its receive CQ is healthy): they are flushed there.
    p.a.qp.post_recv(&[src.sge(128, 16)]);
    p.a.qp.post_recv(&[src.sge(144, 16)]);
    // Six signaled WRITEs into a send CQ of 4 entries, polled by nobody.
    let idx: Vec<u16> = (0..6)
        .map(|i| write(&mut p.a.qp, &src, i * 8, &dst, i * 8, 8))
        .collect();
    p.run();
    let a = &p.a.dev;
    assert_eq!(
        events(a),
        [
            AsyncEvent::CqError(CqId(p.a.scq.info.id.0)),
            AsyncEvent::QpFatal(QpId(p.a.qp.qpn())),
        ]
    );
    assert_eq!(state(&p.a), QpState::Error);
    assert_eq!(a.counter("cq_overrun"), 1);
    // The four that fit are there, in order; the fifth and sixth have no CQE (the CQ is dead).
    let c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    let want: Vec<_> = idx[..4].iter().map(|&i| (CQE_REQ, 0, i)).collect();
    assert_eq!(c, want);
    // The consumer index moved on, but the CQ stays in error: nothing more, ever.
    let w7 = write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    p.fabric.advance(Duration::from_millis(1));
    assert!(
        p.a.scq.poll().is_none(),
        "WR {w7} posted in Error: its flush is lost too"
    );
    // The receives were flushed into the healthy receive CQ.
    let r: Vec<_> = p.a.rcq.drain().iter().map(outcome).collect();
    assert_eq!(
        r,
        [
            (CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR, 0),
            (CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR, 1),
        ]
    );
    assert!(events(a).is_empty(), "one CQ error, one QP fatal");
    // The WRITEs themselves were executed at B: the data is there (the completions were lost,
    // not the operations).
    for i in 0..6 {
        assert_eq!(dst.read(i * 8, 8), src.read(i * 8, 8));
    }
    p.assert_no_bugs();
}

#[test]
fn a_shared_cq_fails_each_qp_when_it_next_completes_into_it() {
    let mut p = pair(3);
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    // A second QP of A on the same send CQ, connected to a second QP of B.
    let o = p.opts;
    let mut a2 = side_in(&p.a.dev, p.a.pd, &o, None);
    let b2 = side(&p.b.dev, &o, None);
    a2.qp.info =
        p.a.dev
            .create_qp(
                p.a.pd,
                &mlx5_hw::QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: p.a.scq.info.id,
                    recv_cq: a2.rcq.info.id,
                    srq: None,
                    cap: o.cap,
                    sq_sig_all: false,
                },
            )
            .unwrap();
    for s in [&a2, &b2] {
        modify(s, init_attr(&o));
    }
    modify(&a2, rtr_attr(&o, b2.qp.qpn(), p.b.dev.gid(), 300));
    modify(&b2, rtr_attr(&o, a2.qp.qpn(), p.a.dev.gid(), 400));
    modify(&a2, rts_attr(&o, 400));
    modify(&b2, rts_attr(&o, 300));
    let dst2 = Mem::new(&p.b.dev, b2.pd, 64, o.access);
    // QP 1 overruns the shared CQ; QP 2 is idle and stays in RTS.
    for i in 0..5 {
        write(&mut p.a.qp, &src, i * 8, &dst, i * 8, 8);
    }
    p.run();
    let cq = CqId(p.a.scq.info.id.0);
    assert_eq!(
        events(&p.a.dev),
        [
            AsyncEvent::CqError(cq),
            AsyncEvent::QpFatal(QpId(p.a.qp.qpn()))
        ]
    );
    assert_eq!(state(&a2), QpState::Rts, "nothing to complete yet");
    // Its next completion cannot be written: it goes fatal then.
    src.write(64, b"second");
    let w = write(&mut a2.qp, &src, 64, &dst2, 0, 6);
    p.run();
    assert_eq!(
        events(&p.a.dev),
        [AsyncEvent::QpFatal(QpId(a2.qp.qpn()))],
        "WR {w}: executed, its completion lost"
    );
    assert_eq!(state(&a2), QpState::Error);
    assert_eq!(dst2.read(0, 6), b"second");
    assert_eq!(
        p.a.dev.counter("cq_overrun"),
        1,
        "the CQ entered error once"
    );
    assert_eq!(
        p.a.scq.drain().len(),
        4,
        "the four CQEs that fit, nothing after"
    );
    p.assert_no_bugs();
}

#[test]
fn an_overrun_recv_cq_fails_the_responder_and_the_requester_runs_out_of_retries() {
    let mut p = pair(3);
    let (src, dst) = (p.mem(false, 256), p.mem(true, 256));
    for i in 0..6 {
        p.b.qp.post_recv(&[dst.sge(i * 16, 16)]);
    }
    let idx: Vec<u16> = (0..6).map(|i| send(&mut p.a.qp, &src, i * 8, 8)).collect();
    p.run();
    // B's receive CQ (4 entries) took four receives; the fifth overran it: B's QP is fatal
    // and answers nothing more, so A retransmits until retry_cnt (2) is spent.
    assert_eq!(
        events(&p.b.dev),
        [
            AsyncEvent::CqError(CqId(p.b.rcq.info.id.0)),
            AsyncEvent::QpFatal(QpId(p.b.qp.qpn())),
        ]
    );
    assert_eq!(state(&p.b), QpState::Error);
    assert_eq!(p.b.rcq.drain().len(), 4);
    // A's send CQ is as small: A polls it (and so releases its entries) as it goes.
    let mut c: Vec<_> = p.a.scq.drain().iter().map(outcome).collect();
    p.fabric.advance(Duration::from_nanos(4096 << 4) * 4);
    c.extend(p.a.scq.drain().iter().map(outcome));
    let mut want: Vec<_> = idx[..4].iter().map(|&i| (CQE_REQ, 0, i)).collect();
    want.push((CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx[4]));
    want.push((CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, idx[5]));
    assert_eq!(c, want, "every WR of A completes once");
    assert_eq!(p.a.dev.counter("req_transport_retries_exceeded"), 1);
    p.assert_no_bugs();
}
