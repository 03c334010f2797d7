//! The asynchronous events the software ConnectX raises on its own or on a fault, one by one:
//! `IBV_EVENT_COMM_EST` (the first packet of a connected QP in RTR), `IBV_EVENT_DEVICE_FATAL`
//! (the device-fatal fault: every QP in Error, no CQE written, then nothing but destroys),
//! `IBV_EVENT_SRQ_ERR` (the SRQ catastrophic-error fault) and `IBV_EVENT_PORT_ERR` /
//! `IBV_EVENT_PORT_ACTIVE` (the port fault). The events raised by the transport (QP fatal,
//! request and access errors, CQ overrun, SRQ limit, last WQE reached, SQ drained) are tested
//! where their causes are (`errors`, `events`, `state`).

use crate::common::*;

use mlx5_cq::*;
use mlx5_hw::{
    AccessFlags, AsyncEvent, AttrMask, CqInitAttr, Device, Error, PortState, QpAttr, QpId, QpState,
    QpType, SrqId, SrqInitAttr,
};
use mlx5_wqe::*;

fn events(dev: &mlx5_sim::SimDevice) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| dev.poll_async_event()).collect()
}

/// A pair whose B side is left in RTR: A is in RTS and may send, B receives without being
/// able to answer with its own requests.
fn rtr_pair(t: QpType) -> Pair {
    let p = Pair::unconnected(Opts::new(t));
    let o = p.opts;
    for s in [&p.a, &p.b] {
        modify(s, init_attr(&o));
    }
    modify(&p.a, rtr_attr(&o, p.b.qp.qpn(), p.b.dev.gid(), 100));
    modify(&p.b, rtr_attr(&o, p.a.qp.qpn(), p.a.dev.gid(), 200));
    modify(&p.a, rts_attr(&o, 200));
    p
}

#[test]
fn comm_est_is_raised_once_for_the_first_packet_in_rtr() {
    for t in [QpType::Rc, QpType::Uc] {
        let mut p = rtr_pair(t);
        let src = p.mem(false, 64);
        let dst = p.mem(true, 64);
        assert_eq!(events(&p.b.dev), [], "{t}: nothing before a packet");
        for i in 0..3u8 {
            src.write(0, &[i; 8]);
            p.b.qp.post_recv(&[dst.sge(0, 64)]);
            ops::send(&mut p.a.qp, &src, 0, 8);
            p.run();
            // The message is received in RTR, as in RTS.
            let c = p.b.rcq.poll().expect("receive completion");
            assert_eq!(c.opcode(), CQE_RESP_SEND, "{t}");
            assert_eq!(dst.read(0, 8), [i; 8]);
        }
        assert_eq!(
            events(&p.b.dev),
            [AsyncEvent::CommEstablished(QpId(p.b.qp.info.id.0))],
            "{t}: one event for the first packet, none for the next"
        );
        assert_eq!(events(&p.a.dev), [], "{t}: the sender, in RTS, raises none");
        // In RTS nothing more.
        modify(&p.b, rts_attr(&p.opts, 100));
        p.b.qp.post_recv(&[dst.sge(0, 64)]);
        ops::send(&mut p.a.qp, &src, 0, 8);
        p.run();
        assert!(p.b.rcq.poll().is_some());
        assert_eq!(events(&p.b.dev), []);
        p.assert_no_bugs();
    }
}

#[test]
fn comm_est_is_not_raised_for_ud_or_a_qp_connected_before_traffic() {
    // UD: suppressed (o11-5.1.1).
    let mut p = Pair::new(Opts::new(QpType::Ud));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 128);
    let av = ud_av(&p.a, &p.b, 0x1111_2222);
    p.b.qp.post_recv(&[dst.sge(0, 128)]);
    p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&av).unwrap();
        w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    assert!(p.b.rcq.poll().is_some());
    assert_eq!(events(&p.b.dev), []);
    // RC brought to RTS on both sides before any packet: nothing arrives in RTR.
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 64);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    ops::send(&mut p.a.qp, &src, 0, 8);
    p.run();
    assert!(p.b.rcq.poll().is_some());
    assert_eq!(events(&p.b.dev), []);
}

#[test]
fn device_fatal_moves_every_qp_to_error_writes_no_cqe_and_refuses_all_but_destroys() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 64);
    // B holds two receives; A a WRITE that will never be answered (B is down first).
    p.b.qp.post_recv(&[dst.sge(0, 32)]);
    p.b.qp.post_recv(&[dst.sge(32, 32)]);
    p.fabric.faults().to_device(&p.b.dev).down();
    let w = ops::write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    p.run();
    p.fabric.faults().device_fatal(&p.a.dev);
    p.fabric.faults().device_fatal(&p.b.dev);
    assert!(p.b.dev.is_fatal() && p.a.dev.is_fatal());
    // One event per device, and nothing else (no QP event, no port event).
    assert_eq!(events(&p.a.dev), [AsyncEvent::DeviceFatal]);
    assert_eq!(events(&p.b.dev), [AsyncEvent::DeviceFatal]);
    // Every QP is in Error, and its work is not flushed: a ConnectX in internal error writes
    // no CQE (kernel mlx5_ib_poll_cq / mlx5_ib_poll_sw_comp; the owner retires A's WRITE and
    // B's two receives itself).
    assert!(p.a.scq.poll().is_none(), "no flush CQE for the WRITE {w}");
    assert!(p.b.rcq.drain().is_empty(), "no flush CQE for the receives");
    for s in [&p.a, &p.b] {
        assert!(s.dev.is_fatal());
    }
    // Moving a QP to Error on the dead device writes none either.
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
    assert!(p.b.rcq.drain().is_empty());
    // Work posted afterwards is never executed: the device reads no doorbell.
    let before = p.b.dev.counter("port_xmit_packets") + p.a.dev.counter("port_xmit_packets");
    ops::write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    p.fabric.advance(std::time::Duration::from_secs(1));
    assert!(p.a.scq.poll().is_none());
    assert_eq!(
        p.b.dev.counter("port_xmit_packets") + p.a.dev.counter("port_xmit_packets"),
        before
    );
    // Creating, modifying (but to Reset or Error) and querying are refused with EIO.
    let d = &p.a.dev;
    let fatal = |r: Result<(), Error>, call: &str| match r {
        Err(e @ Error::DeviceFatal { .. }) => {
            assert_eq!(e.errno(), libc::EIO);
            assert!(e.to_string().contains(call), "{e}");
            assert!(e.to_string().contains("IBV_EVENT_DEVICE_FATAL"), "{e}");
        }
        other => panic!("{call}: {other:?}"),
    };
    fatal(d.alloc_pd().map(drop), "alloc_pd");
    fatal(d.create_cq(&CqInitAttr::default()).map(drop), "create_cq");
    fatal(
        d.create_srq(
            p.a.pd,
            &SrqInitAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .map(drop),
        "create_srq",
    );
    let mut buf = vec![0u8; 64];
    // SAFETY: `buf` outlives the call, which fails before registering anything.
    let r = unsafe { d.reg_mr(p.a.pd, buf.as_mut_ptr(), 64, AccessFlags::LOCAL_WRITE) };
    fatal(r.map(drop), "reg_mr");
    fatal(d.query_qp(p.a.qp.info.id).map(drop), "query_qp");
    fatal(d.query_port(1).map(drop), "query_port");
    fatal(
        d.modify_qp(
            p.a.qp.info.id,
            &QpAttr {
                qp_state: QpState::Rts,
                ..Default::default()
            },
            AttrMask::STATE,
        ),
        "modify_qp",
    );
    // The port stays down whatever is asked of it.
    d.set_port_state(PortState::Active);
    assert_eq!(events(d), []);
    // To Reset and destroys complete: the program can free everything.
    for s in [&p.a, &p.b] {
        s.dev
            .modify_qp(
                s.qp.info.id,
                &QpAttr {
                    qp_state: QpState::Reset,
                    ..Default::default()
                },
                AttrMask::STATE,
            )
            .unwrap();
        s.dev.destroy_qp(s.qp.info.id).unwrap();
        s.dev.destroy_cq(s.scq.info.id).unwrap();
        s.dev.destroy_cq(s.rcq.info.id).unwrap();
    }
    drop((src, dst));
    p.fabric.faults().device_fatal(&p.a.dev);
    assert_eq!(events(&p.a.dev), [], "a second fault changes nothing");
}

#[test]
fn device_fatal_fires_no_completion_event() {
    // An armed CQ whose QP holds a receive: the death writes no CQE, so no completion event
    // either (mlx5_ib_handle_internal_error wakes only CQs of QPs whose kernel-tracked queues
    // hold work, never a user QP's); the program learns of it from DEVICE_FATAL.
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let dst = p.mem(true, 64);
    let ch = p.b.rcq.ch.unwrap();
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.b.rcq.arm(ArmCmd::Next);
    p.run();
    assert_eq!(p.b.dev.get_cq_event(ch).unwrap(), None);
    p.fabric.faults().device_fatal(&p.b.dev);
    p.run();
    p.fabric.advance(std::time::Duration::from_secs(1));
    assert_eq!(p.b.dev.get_cq_event(ch).unwrap(), None);
    assert!(p.b.rcq.poll().is_none());
    assert_eq!(events(&p.b.dev), [AsyncEvent::DeviceFatal]);
}

#[test]
fn srq_error_stops_the_srq_and_raises_the_event() {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let pd = db.alloc_pd().unwrap();
    let mut srq = Srq::new(&db, pd, 7, 0);
    let mut o_rnr = o;
    o_rnr.rnr_retry = 1;
    let a = side(&da, &o_rnr, None);
    let b = side_in(&db, pd, &o_rnr, Some(&srq));
    let mut p = Pair {
        fabric,
        a,
        b,
        opts: o_rnr,
    };
    p.connect();
    let src = p.mem(false, 64);
    let dst = p.mem(true, 64);
    srq.post(&[dst.sge(0, 64)]);
    srq.post(&[dst.sge(0, 64)]);
    ops::send(&mut p.a.qp, &src, 0, 8);
    p.run();
    assert!(p.b.rcq.poll().is_some(), "the SRQ works before the error");
    assert!(p.a.scq.poll().is_some_and(|c| c.opcode() == CQE_REQ));
    let unknown = p.fabric.faults().srq_error(&p.b.dev, SrqId(0xdead));
    assert!(matches!(unknown, Err(Error::UnknownHandle { .. })));
    p.fabric.faults().srq_error(&p.b.dev, srq.info.id).unwrap();
    assert_eq!(events(&p.b.dev), [AsyncEvent::SrqError(srq.info.id)]);
    p.fabric.faults().srq_error(&p.b.dev, srq.info.id).unwrap();
    assert_eq!(events(&p.b.dev), [], "raised once");
    // The WQE still posted is not handed out: the sender meets RNR until it gives up.
    let s = ops::send(&mut p.a.qp, &src, 0, 8);
    p.fabric.advance(std::time::Duration::from_secs(2));
    let c = p.a.scq.poll().expect("the SEND fails");
    assert_eq!(
        (c.as_err().syndrome, c.wqe_counter()),
        (SYNDROME_RNR_RETRY_EXC_ERR, s)
    );
    assert!(p.b.rcq.poll().is_none());
}

#[test]
fn the_port_fault_raises_port_err_and_port_active() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 64);
    p.fabric.faults().port_down(&p.b.dev);
    assert_eq!(events(&p.b.dev), [AsyncEvent::PortError(1)]);
    assert_eq!(p.b.dev.query_port(1).unwrap().state, PortState::Down);
    p.fabric.faults().port_down(&p.b.dev);
    assert_eq!(events(&p.b.dev), [], "no change, no event");
    // Nothing reaches a port that is down; back up, the retransmission gets through.
    src.write(0, b"through!");
    ops::write(&mut p.a.qp, &src, 0, &dst, 0, 8);
    p.run();
    assert_eq!(dst.read(0, 8), [0; 8]);
    p.fabric.faults().port_up(&p.b.dev);
    assert_eq!(events(&p.b.dev), [AsyncEvent::PortActive(1)]);
    p.fabric.advance(std::time::Duration::from_secs(1));
    assert!(p.a.scq.poll().is_some_and(|c| c.opcode() == CQE_REQ));
    assert_eq!(dst.read(0, 8), b"through!");
    // A link taken down between two devices is not a port: no event.
    p.fabric.faults().link(&p.a.dev, &p.b.dev).down();
    assert_eq!(events(&p.a.dev), []);
    assert_eq!(events(&p.b.dev), []);
}
