//! The QP state machine through modify_qp: the shared table refuses what the kernel refuses,
//! query returns what was set, and the state gates the data path.

use crate::common;

use std::time::Duration;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{AsyncEvent, AttrMask, Device, Error, ModifyError, QpAttr, QpId, QpState, QpType};
use mlx5_wqe::*;

#[test]
fn representative_transitions() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let o = Opts::new(t);
        let fabric = mlx5_sim::Fabric::new();
        let d = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
        let s = side(&d, &o, None);
        let id = s.qp.info.id;
        let go = |st: QpState| {
            d.modify_qp(
                id,
                &QpAttr {
                    qp_state: st,
                    ..Default::default()
                },
                AttrMask::STATE,
            )
        };
        // Init -> RTS directly is illegal; Reset -> Init needs its attributes.
        assert!(
            matches!(
                go(QpState::Init),
                Err(Error::Modify(ModifyError::MissingAttributes { .. }))
            ),
            "{t}"
        );
        modify(&s, init_attr(&o));
        assert!(
            matches!(
                go(QpState::Rts),
                Err(Error::Modify(ModifyError::IllegalTransition { .. }))
            ),
            "{t}"
        );
        modify(&s, rtr_attr(&o, s.qp.qpn(), d.gid(), 0x123456));
        modify(&s, rts_attr(&o, 0xabcdef));
        let q = d.query_qp(id).unwrap();
        assert_eq!(q.qp_state, QpState::Rts);
        assert_eq!(q.sq_psn, 0xabcdef);
        if t != QpType::Ud {
            assert_eq!(q.rq_psn, 0x123456);
            assert_eq!(q.dest_qp_num, s.qp.qpn());
            assert_eq!(q.path_mtu, o.mtu);
        } else {
            assert_eq!(q.qkey, 0x1111_2222);
        }
        if t == QpType::Rc {
            assert_eq!(
                (
                    q.timeout,
                    q.retry_cnt,
                    q.rnr_retry,
                    q.max_rd_atomic,
                    q.max_dest_rd_atomic
                ),
                (14, 7, 7, 4, 4)
            );
        }
        assert_eq!(q.cap.max_send_wr, s.qp.info.cap.max_send_wr);
        // RTS -> SQD -> RTS, -> Error, Error -> RTS illegal, Error -> Reset.
        go(QpState::Sqd).unwrap();
        go(QpState::Rts).unwrap();
        go(QpState::Error).unwrap();
        assert!(go(QpState::Rts).is_err());
        go(QpState::Reset).unwrap();
        assert_eq!(d.query_qp(id).unwrap().qp_state, QpState::Reset);
        // A PSN wider than 24 bits is refused with the attribute named.
        modify(&s, init_attr(&o));
        let (mut a, m) = rtr_attr(&o, 1, d.gid(), 0);
        a.rq_psn = 1 << 24;
        if t != QpType::Ud {
            let e = d.modify_qp(id, &a, m).unwrap_err();
            assert!(e.to_string().contains("RQ_PSN"), "{e}");
        }
    }
}

#[test]
fn unknown_gid_at_rtr_is_refused() {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let d = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let s = side(&d, &o, None);
    modify(&s, init_attr(&o));
    let (a, m) = rtr_attr(&o, 5, mlx5_hw::Gid::from_ipv4([10, 9, 9, 9]), 0);
    let e = d.modify_qp(s.qp.info.id, &a, m).unwrap_err();
    assert!(e.to_string().contains("GID"), "{e}");
}

#[test]
fn nothing_is_sent_before_rts_and_nothing_accepted_before_rtr() {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let mut a = side(&da, &o, None);
    let mut b = side(&db, &o, None);
    modify(&a, init_attr(&o));
    modify(&b, init_attr(&o));
    let src = mlx5_hw::AccessFlags::LOCAL_WRITE;
    let m = Mem::new(&da, a.pd, 64, src);
    let dst = Mem::new(&db, b.pd, 64, src);
    m.write(0, b"early");
    // Receives may be posted in Init.
    b.qp.post_recv(&[dst.sge(0, 64)]);
    modify(&a, rtr_attr(&o, b.qp.qpn(), db.gid(), 0));
    a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(5, m.lkey(), m.addr())).unwrap();
    });
    fabric.run_until_idle();
    assert!(a.scq.poll().is_none(), "RTR does not send");
    assert_eq!(db.counter("port_rcv_packets"), 0);
    // A in RTS, B still in Init: the packet is dropped and A retries.
    modify(&a, rts_attr(&o, 0));
    fabric.run_until_idle();
    assert_eq!(db.counter("rx_dropped"), 1);
    assert!(b.rcq.poll().is_none());
    modify(&b, rtr_attr(&o, a.qp.qpn(), da.gid(), 0));
    fabric.advance(Duration::from_millis(70)); // timeout 14 = 67 ms
    assert_eq!(b.rcq.poll().map(|c| c.byte_cnt()), Some(5));
    assert_eq!(dst.read(0, 5), b"early");
    assert_eq!(a.scq.poll().map(|c| c.opcode()), Some(CQE_REQ));
}

#[test]
fn sqd_stops_new_sends_and_reports_drained() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..Default::default()
    };
    p.a.dev
        .modify_qp(
            p.a.qp.info.id,
            &sqd,
            AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY,
        )
        .unwrap();
    p.run();
    assert_eq!(
        p.a.dev.poll_async_event(),
        Some(AsyncEvent::SqDrained(QpId(p.a.qp.qpn())))
    );
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
            .unwrap();
        w.push_inline(&[b"later"]).unwrap();
    });
    p.run();
    assert_eq!(remote.read(0, 5), [0; 5], "SQD starts nothing new");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..Default::default()
    };
    p.a.dev
        .modify_qp(p.a.qp.info.id, &rts, AttrMask::STATE)
        .unwrap();
    p.run();
    assert_eq!(remote.read(0, 5), b"later");
    assert_eq!(p.a.scq.poll().map(|c| c.opcode()), Some(CQE_REQ));
    p.assert_no_bugs();
}

#[test]
fn rebuild_after_error_works_again() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    for s in [&p.a, &p.b] {
        s.dev
            .modify_qp(
                s.qp.info.id,
                &QpAttr {
                    qp_state: QpState::Error,
                    ..Default::default()
                },
                AttrMask::STATE,
            )
            .unwrap();
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
    }
    // The driver restarts its indexes at 0, as rdma-core does after Reset.
    p.a.qp.sq_pi = 0;
    p.a.qp.bf_off = 0;
    p.connect();
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
            .unwrap();
        w.push_inline(&[b"again"]).unwrap();
    });
    p.run();
    assert_eq!(remote.read(0, 5), b"again");
    assert_eq!(
        p.a.scq.poll().map(|c| (c.opcode(), c.wqe_counter())),
        Some((CQE_REQ, 0))
    );
    p.assert_no_bugs();
}

#[test]
fn link_down_loses_packets_and_raises_port_events() {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 8;
    o.retry_cnt = 1;
    let mut p = Pair::new(o);
    let remote = p.mem(true, 64);
    p.b.dev.set_port_state(mlx5_hw::PortState::Down);
    assert_eq!(p.b.dev.poll_async_event(), Some(AsyncEvent::PortError(1)));
    let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
            .unwrap();
        w.push_inline(&[b"lost"]).unwrap();
    });
    p.fabric.advance(Duration::from_millis(5));
    let c = p.a.scq.poll().expect("retries exhausted");
    assert_eq!(
        (c.as_err().syndrome, c.wqe_counter()),
        (SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx)
    );
    assert_eq!(remote.read(0, 4), [0; 4]);
    p.b.dev.set_port_state(mlx5_hw::PortState::Active);
    assert_eq!(p.b.dev.poll_async_event(), Some(AsyncEvent::PortActive(1)));
}
