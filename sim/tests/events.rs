//! CQ arming and completion events (eventfd), CQ overrun, SRQ limit, last WQE reached.

mod common;

use std::time::Duration;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{
    AsyncEvent, AttrMask, CqId, CqInitAttr, Device, QpAttr, QpId, QpState, QpType, SrqId,
};
use mlx5_sim::DriverBugKind;
use mlx5_wqe::*;

fn send(p: &mut Pair, m: &Mem, se: bool) {
    let f = CTRL_CQ_UPDATE | if se { CTRL_SOLICITED } else { 0 };
    p.a.qp.post(OPCODE_SEND, 0, f, 0, |w| {
        w.push(&DataSeg::new(4, m.lkey(), m.addr())).unwrap();
    });
}

#[test]
fn arm_next_and_solicited() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let m = p.mem(false, 64);
    let dst = p.mem(true, 64);
    let rcq = p.b.rcq.info.id;
    let zero = Duration::ZERO;
    assert!(p.b.dev.cq_event_fd(rcq).is_some());
    // Not armed: no event.
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert!(!p.b.dev.wait_cq_event(rcq, zero).unwrap());
    p.b.rcq.drain();
    // Armed for the next completion.
    p.b.rcq.arm(ArmCmd::Next);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    assert!(p
        .b
        .dev
        .wait_cq_event(rcq, Duration::from_millis(100))
        .unwrap());
    assert!(
        !p.b.dev.wait_cq_event(rcq, zero).unwrap(),
        "one event per arm"
    );
    p.b.rcq.sn += 1;
    p.b.rcq.drain();
    // Solicited only: an unsolicited receive does not fire, a solicited one does.
    p.b.rcq.arm(ArmCmd::Solicited);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    assert!(!p.b.dev.wait_cq_event(rcq, zero).unwrap());
    send(&mut p, &m, true);
    assert!(p
        .b
        .dev
        .wait_cq_event(rcq, Duration::from_millis(100))
        .unwrap());
    p.b.rcq.sn += 1;
    // Arming with completions already waiting fires at once.
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    p.b.rcq.arm(ArmCmd::Next);
    assert!(p
        .b
        .dev
        .wait_cq_event(rcq, Duration::from_millis(100))
        .unwrap());
    p.assert_no_bugs();
}

#[test]
fn cq_overrun_raises_cq_error_and_stops_unless_ignored() {
    for ignore in [false, true] {
        let mut o = Opts::new(QpType::Rc);
        o.cqe = 3;
        let mut p = Pair::new(o);
        if ignore {
            // Replace the send CQ by an ignore-overrun one on a fresh QP.
            let cq =
                p.a.dev
                    .create_cq(&CqInitAttr {
                        cqe: 3,
                        cqe_size: 64,
                        ignore_overrun: true,
                        with_channel: false,
                    })
                    .unwrap();
            let mut s = side_in(&p.a.dev, p.a.pd, &o, None);
            s.scq = Cq {
                info: cq,
                ci: 0,
                sn: 0,
            };
            let info =
                p.a.dev
                    .create_qp(
                        p.a.pd,
                        &mlx5_hw::QpInitAttr {
                            qp_type: QpType::Rc,
                            send_cq: cq.id,
                            recv_cq: s.rcq.info.id,
                            srq: None,
                            cap: o.cap,
                            sq_sig_all: false,
                        },
                    )
                    .unwrap();
            s.qp.info = info;
            p.a = s;
            p.b.dev
                .modify_qp(
                    p.b.qp.info.id,
                    &QpAttr {
                        qp_state: QpState::Reset,
                        ..Default::default()
                    },
                    AttrMask::STATE,
                )
                .unwrap();
            p.connect();
        }
        let cqn = p.a.scq.info.id;
        for _ in 0..6 {
            p.a.qp.post(OPCODE_NOP, 0, CTRL_CQ_UPDATE, 0, |_| {});
        }
        p.run();
        let ev: Vec<AsyncEvent> = std::iter::from_fn(|| p.a.dev.poll_async_event()).collect();
        if ignore {
            assert!(ev.is_empty(), "{ev:?}");
            p.assert_no_bugs();
        } else {
            assert_eq!(ev, vec![AsyncEvent::CqError(CqId(cqn.0))]);
            let bugs = p.fabric.take_driver_bugs();
            assert_eq!(bugs.len(), 1);
            assert_eq!(bugs[0].kind, DriverBugKind::CqOverrun);
            // The CQ holds exactly its 4 entries and stopped.
            assert_eq!(p.a.scq.drain().len(), 4);
        }
    }
}

#[test]
fn srq_limit_and_last_wqe_reached() {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let pd = db.alloc_pd().unwrap();
    let mut srq = Srq::new(&db, pd, 7, 0);
    db.arm_srq_limit(srq.info.id, 2).unwrap();
    let a = side(&da, &o, None);
    let b = side_in(&db, pd, &o, Some(&srq));
    let mut p = Pair {
        fabric,
        a,
        b,
        opts: o,
    };
    p.connect();
    let m = p.mem(false, 64);
    let dst = p.mem(true, 64);
    for _ in 0..3 {
        srq.post(&[dst.sge(0, 64)]);
    }
    send(&mut p, &m, false);
    p.run();
    assert_eq!(
        p.b.dev.poll_async_event(),
        None,
        "2 left: not below the limit"
    );
    send(&mut p, &m, false);
    p.run();
    assert_eq!(
        p.b.dev.poll_async_event(),
        Some(AsyncEvent::SrqLimitReached(SrqId(srq.info.id.0)))
    );
    // The QP on the SRQ goes to Error: SRQ WQEs are not flushed, last WQE reached is raised.
    p.b.dev
        .modify_qp(
            p.b.qp.info.id,
            &QpAttr {
                qp_state: QpState::Error,
                ..Default::default()
            },
            AttrMask::STATE,
        )
        .unwrap();
    p.run();
    assert_eq!(
        p.b.dev.poll_async_event(),
        Some(AsyncEvent::QpLastWqeReached(QpId(p.b.qp.qpn())))
    );
    assert_eq!(
        p.b.rcq.drain().len(),
        2,
        "only the two real receives; the posted SRQ WQE stays"
    );
}
