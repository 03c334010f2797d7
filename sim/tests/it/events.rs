//! Completion channels and CQ arming (one event per arm, solicited-only, arming with CQEs
//! waiting, many CQs on one channel, acknowledging and destroying), the arm sequence number
//! check, the async event fd, CQ overrun, SRQ limit, last WQE reached, and a property test
//! over random interleavings of completions, polls, arms, event takes and acks
//! ([`interleave`]).

use crate::common;
#[path = "events/interleave.rs"]
mod interleave;

use std::os::fd::RawFd;
use std::time::Duration;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{
    AsyncEvent, AttrMask, ChannelId, CqId, CqInitAttr, Device, Error, PortState, QpAttr, QpId,
    QpState, QpType, SrqId,
};
use mlx5_sim::DriverBugKind;
use mlx5_wqe::*;

fn send(p: &mut Pair, m: &Mem, se: bool) {
    let f = CTRL_CQ_UPDATE | if se { CTRL_SOLICITED } else { 0 };
    p.a.qp.post(OPCODE_SEND, 0, f, 0, |w| {
        w.push(&DataSeg::new(4, m.lkey(), m.addr())).unwrap();
    });
}

/// Whether `fd` is readable now (`poll(2)` with no timeout).
pub fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    assert!(r >= 0, "poll: {}", std::io::Error::last_os_error());
    r == 1 && p.revents & libc::POLLIN != 0
}

/// Take one event from `ch`, expecting it to be for `cq`, and account for it like a driver:
/// advance the CQ's arm sequence number and acknowledge it.
fn take(dev: &mlx5_sim::SimDevice, ch: ChannelId, cq: &mut Cq) {
    assert_eq!(dev.get_cq_event(ch).unwrap(), Some(cq.info.id));
    cq.sn += 1;
    dev.ack_cq_events(cq.info.id, 1).unwrap();
}

#[test]
fn arm_next_and_solicited() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let m = p.mem(false, 64);
    let dst = p.mem(true, 64);
    let ch = p.b.rcq.ch.unwrap();
    let dev = p.b.dev.clone();
    let fd = dev.comp_channel_fd(ch).unwrap();
    // Not armed: no event.
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert!(!readable(fd));
    assert_eq!(dev.get_cq_event(ch).unwrap(), None);
    p.b.rcq.drain();
    // Armed for the next completion: one event, then disarmed.
    p.b.rcq.arm(ArmCmd::Next);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert!(
        readable(fd),
        "the channel fd is readable while an event is queued"
    );
    take(&dev, ch, &mut p.b.rcq);
    assert!(!readable(fd), "and not once it is taken");
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert_eq!(dev.get_cq_event(ch).unwrap(), None, "one event per arm");
    p.b.rcq.drain();
    // Solicited only: an unsolicited receive does not fire, a solicited one does.
    p.b.rcq.arm(ArmCmd::Solicited);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert!(!readable(fd));
    send(&mut p, &m, true);
    p.run();
    take(&dev, ch, &mut p.b.rcq);
    p.b.rcq.drain();
    // Arming with a completion already waiting past the consumer index fires at once.
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    p.b.rcq.arm(ArmCmd::Next);
    p.run();
    take(&dev, ch, &mut p.b.rcq);
    // ... but not a solicited-only arm when what waits is unsolicited,
    p.b.rcq.arm(ArmCmd::Solicited);
    p.run();
    assert!(!readable(fd));
    // ... and a later request for the next completion takes precedence over it (IBTA Vol. 1
    // §11.4.2.2): the waiting CQE now fires at once.
    p.b.rcq.arm(ArmCmd::Next);
    p.run();
    take(&dev, ch, &mut p.b.rcq);
    p.b.rcq.drain();
    // A solicited-only arm with a solicited CQE waiting fires at once.
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, true);
    send(&mut p, &m, false);
    p.run();
    p.b.rcq.arm(ArmCmd::Solicited);
    p.run();
    take(&dev, ch, &mut p.b.rcq);
    assert_eq!(p.b.rcq.drain().len(), 2);
    // wait_cq_event runs the device first, then waits on the fd.
    p.b.rcq.arm(ArmCmd::Next);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    assert_eq!(
        dev.wait_cq_event(ch, Duration::from_millis(100)).unwrap(),
        Some(p.b.rcq.info.id)
    );
    p.b.rcq.sn += 1;
    dev.ack_cq_events(p.b.rcq.info.id, 1).unwrap();
    assert_eq!(dev.wait_cq_event(ch, Duration::ZERO).unwrap(), None);
    p.assert_no_bugs();
}

#[test]
fn error_completions_fire_a_solicited_only_arm() {
    // A send to an rkey that does not exist completes with REMOTE_ACCESS_ERR on the
    // requester: an error CQE counts as solicited (man ibv_req_notify_cq).
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let m = p.mem(false, 64);
    let ch = p.a.scq.ch.unwrap();
    p.a.scq.arm(ArmCmd::Solicited);
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(0x1000, 0xdead_beef)).unwrap();
        w.push(&DataSeg::new(4, m.lkey(), m.addr())).unwrap();
    });
    p.run();
    let dev = p.a.dev.clone();
    take(&dev, ch, &mut p.a.scq);
    let c = p.a.scq.poll().expect("error CQE");
    assert_eq!(c.opcode(), CQE_REQ_ERR);
    p.assert_no_bugs();
}

/// B's side of a pair whose send and receive CQs share one completion channel.
fn shared_channel_pair() -> (Pair, ChannelId) {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let a = side(&da, &o, None);
    let mut b = side(&db, &o, None);
    let ch = db.create_comp_channel().unwrap();
    let scq = Cq::on(&db, o.cqe, o.cqe_size, Some(ch));
    let rcq = Cq::on(&db, o.cqe, o.cqe_size, Some(ch));
    let info = db
        .create_qp(
            b.pd,
            &mlx5_hw::QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: scq.info.id,
                recv_cq: rcq.info.id,
                srq: None,
                cap: o.cap,
                sq_sig_all: false,
            },
        )
        .unwrap();
    b.qp.info = info;
    (b.scq, b.rcq) = (scq, rcq);
    let p = Pair {
        fabric,
        a,
        b,
        opts: o,
    };
    p.connect();
    (p, ch)
}

#[test]
fn many_cqs_on_one_channel_and_acks_in_batches() {
    let (mut p, ch) = shared_channel_pair();
    let m = p.mem(false, 64);
    let mb = p.mem(true, 64);
    let dev = p.b.dev.clone();
    let fd = dev.comp_channel_fd(ch).unwrap();
    let (scq, rcq) = (p.b.scq.info.id, p.b.rcq.info.id);
    // Three rounds on the receive CQ, then one on the send CQ; the events of both CQs come
    // out of the one channel in the order they fired.
    for _ in 0..3 {
        p.b.rcq.arm(ArmCmd::Next);
        p.b.qp.post_recv(&[mb.sge(0, 64)]);
        send(&mut p, &m, false);
        p.run();
        assert_eq!(dev.get_cq_event(ch).unwrap(), Some(rcq));
        p.b.rcq.sn += 1;
        p.b.rcq.drain();
        p.a.scq.drain();
    }
    p.b.scq.arm(ArmCmd::Next);
    p.b.rcq.arm(ArmCmd::Next);
    p.a.qp.post_recv(&[m.sge(0, 64)]);
    p.b.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(4, mb.lkey(), mb.addr())).unwrap();
    });
    p.b.qp.post_recv(&[mb.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    let mut got = vec![];
    while let Some(c) = dev.get_cq_event(ch).unwrap() {
        got.push(c);
    }
    got.sort();
    assert_eq!(got, vec![scq.min(rcq), scq.max(rcq)]);
    assert!(!readable(fd));
    p.b.scq.sn += 1;
    p.b.rcq.sn += 1;
    // Four events taken from the receive CQ, one from the send CQ: acknowledged in one call
    // each; more than were taken is refused.
    let e = dev.ack_cq_events(rcq, 5).unwrap_err().to_string();
    assert!(e.contains("only 4"), "{e}");
    dev.ack_cq_events(rcq, 4).unwrap();
    dev.ack_cq_events(scq, 1).unwrap();
    assert_eq!(p.b.scq.drain().len(), 1);
    assert_eq!(p.b.rcq.drain().len(), 1);
    p.assert_no_bugs();
}

#[test]
fn destroy_is_refused_while_events_are_unacknowledged() {
    let (mut p, ch) = shared_channel_pair();
    let m = p.mem(false, 64);
    let mb = p.mem(true, 64);
    let dev = p.b.dev.clone();
    let (scq, rcq) = (p.b.scq.info.id, p.b.rcq.info.id);
    p.b.rcq.arm(ArmCmd::Next);
    p.b.qp.post_recv(&[mb.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert_eq!(dev.get_cq_event(ch).unwrap(), Some(rcq));
    p.b.rcq.sn += 1;
    // An event fired but not taken is discarded with its CQ; one taken must be acked first.
    p.b.scq.arm(ArmCmd::Next);
    p.a.qp.post_recv(&[m.sge(0, 64)]);
    p.b.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(4, mb.lkey(), mb.addr())).unwrap();
    });
    p.run();
    let fd = dev.comp_channel_fd(ch).unwrap();
    assert!(readable(fd));
    dev.destroy_qp(p.b.qp.info.id).unwrap();
    let e = dev.destroy_cq(rcq).unwrap_err();
    assert!(matches!(e, Error::Busy(_)), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("not acknowledged") && e.contains("ack_cq_events(cq, 1)"),
        "{e}"
    );
    let e = dev.destroy_comp_channel(ch).unwrap_err().to_string();
    assert!(e.contains("attached"), "{e}");
    dev.destroy_cq(scq).unwrap();
    assert!(
        !readable(fd),
        "the destroyed CQ's queued event went with it"
    );
    assert_eq!(dev.get_cq_event(ch).unwrap(), None);
    dev.ack_cq_events(rcq, 1).unwrap();
    dev.destroy_cq(rcq).unwrap();
    dev.destroy_comp_channel(ch).unwrap();
    assert!(matches!(
        dev.get_cq_event(ch),
        Err(Error::UnknownHandle { .. })
    ));
    assert!(matches!(
        dev.create_cq(&CqInitAttr {
            channel: Some(ch),
            ..Default::default()
        }),
        Err(Error::UnknownHandle { .. })
    ));
    p.assert_no_bugs();
}

#[test]
fn an_arm_sequence_number_not_advanced_is_a_driver_bug() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let m = p.mem(false, 64);
    let dst = p.mem(true, 64);
    let ch = p.b.rcq.ch.unwrap();
    let dev = p.b.dev.clone();
    p.b.rcq.arm(ArmCmd::Next);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    send(&mut p, &m, false);
    p.run();
    assert_eq!(dev.get_cq_event(ch).unwrap(), Some(p.b.rcq.info.id));
    dev.ack_cq_events(p.b.rcq.info.id, 1).unwrap();
    // The driver forgets `sn += 1` (mlx5_qp::Cq::ack_event): the next arm repeats sn 0.
    p.b.rcq.drain();
    p.b.rcq.arm(ArmCmd::Next);
    p.run();
    let bugs = p.fabric.take_driver_bugs();
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    assert_eq!(bugs[0].kind, DriverBugKind::CqArmSequence);
    assert!(bugs[0].detail.contains("expected 1"), "{}", bugs[0].detail);
}

#[test]
fn async_events_have_their_own_fd() {
    let p = Pair::new(Opts::new(QpType::Rc));
    let dev = p.b.dev.clone();
    let fd = dev.async_event_fd().unwrap();
    assert!(!readable(fd));
    dev.set_port_state(PortState::Down);
    dev.set_port_state(PortState::Active);
    assert!(readable(fd));
    assert_eq!(dev.poll_async_event(), Some(AsyncEvent::PortError(1)));
    assert!(readable(fd), "one more pending");
    assert_eq!(dev.poll_async_event(), Some(AsyncEvent::PortActive(1)));
    assert!(!readable(fd));
    assert_eq!(dev.poll_async_event(), None);
    // A remote access violation raises QP_ACCESS_ERR on the responder through the same fd.
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let m = p.mem(false, 64);
    let fd = p.b.dev.async_event_fd().unwrap();
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(0x1000, 0xdead_beef)).unwrap();
        w.push(&DataSeg::new(4, m.lkey(), m.addr())).unwrap();
    });
    p.run();
    assert!(readable(fd), "the responder raised an event");
    let ev: Vec<AsyncEvent> = std::iter::from_fn(|| p.b.dev.poll_async_event()).collect();
    assert!(!ev.is_empty());
    assert!(!readable(fd));
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
                        channel: None,
                    })
                    .unwrap();
            let mut s = side_in(&p.a.dev, p.a.pd, &o, None);
            s.scq = Cq {
                info: cq,
                ci: 0,
                sn: 0,
                ch: None,
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
            // The CQ error, then the QP whose completion it could not take goes fatal: a
            // device behaviour, not a driver bug (`cq_overrun.rs` has the whole story).
            assert_eq!(
                ev,
                vec![
                    AsyncEvent::CqError(CqId(cqn.0)),
                    AsyncEvent::QpFatal(QpId(p.a.qp.qpn())),
                ]
            );
            p.assert_no_bugs();
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
