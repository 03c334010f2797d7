//! Every error syndrome the software ConnectX produces, and the QP moving to Error with
//! everything flushed.

use crate::common;

use std::time::Duration;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{AccessFlags, AsyncEvent, Device, QpId, QpState, QpType};
use mlx5_wqe::*;

fn err(c: &Cqe64) -> (u8, u8, u16) {
    let e = c.as_err();
    (c.opcode(), e.syndrome, e.wqe_counter())
}

fn state(s: &Side) -> QpState {
    s.dev.query_qp(s.qp.info.id).unwrap().qp_state
}

#[test]
fn malformed_wqes_are_local_qp_op_errors() {
    // Opcode not allowed on UC, wrong QPN, DS 0.
    type Post<'a> = &'a dyn Fn(&mut Qp) -> u16;
    let cases: [(QpType, Post); 3] = [
        (QpType::Uc, &|q: &mut Qp| {
            q.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
                w.push(&RaddrSeg::new(0, 0)).unwrap();
                w.push(&DataSeg::new(8, 0, 0)).unwrap();
            })
        }),
        (QpType::Rc, &|q: &mut Qp| {
            let (pi, ds) = q.prepare(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
                w.push_inline(&[b"x"]).map(|_| ()).unwrap()
            });
            // SAFETY: the ctrl segment; QPN bytes 4..6.
            unsafe { *q.bb_ptr(pi).add(6) ^= 0x5a };
            q.doorbell(pi, ds);
            pi
        }),
        (QpType::Rc, &|q: &mut Qp| {
            let (pi, _) = q.prepare(OPCODE_NOP, 0, CTRL_CQ_UPDATE, 0, |_| {});
            // SAFETY: the DS byte of the ctrl segment.
            unsafe { *q.bb_ptr(pi).add(7) = 0 };
            q.sq_pi = pi.wrapping_add(1);
            q.doorbell(pi, 1);
            pi
        }),
    ];
    for (t, post) in cases {
        let mut p = Pair::new(Opts::new(t));
        let idx = post(&mut p.a.qp);
        p.run();
        let c = p.a.scq.poll().expect("error CQE");
        assert_eq!(err(&c), (CQE_REQ_ERR, SYNDROME_LOCAL_QP_OP_ERR, idx));
        assert_eq!(c.as_err().qpn(), p.a.qp.qpn());
        assert_ne!(c.as_err().vendor_err_synd, 0);
        if t == QpType::Rc {
            assert_eq!(state(&p.a), QpState::Error);
            assert_eq!(
                p.a.dev.poll_async_event(),
                Some(AsyncEvent::QpFatal(QpId(p.a.qp.qpn())))
            );
        } else {
            // UC/UD: send queue error, the receive side keeps working (IBTA §10.3.1).
            assert_eq!(state(&p.a), QpState::Sqe);
        }
    }
}

#[test]
fn bad_lkey_is_local_prot_and_ud_over_mtu_is_local_length() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let m = p.mem(false, 64);
    let rkey_as_lkey = m.rkey();
    let idx = p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(8, rkey_as_lkey, m.addr())).unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_LOCAL_PROT_ERR, idx)
    );
    // Out of bounds and a READ into a buffer without LOCAL_WRITE.
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let ro = Mem::new(&p.a.dev, p.a.pd, 64, AccessFlags::REMOTE_READ);
    let remote = p.mem(true, 64);
    let idx = p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
            .unwrap();
        w.push(&DataSeg::new(8, ro.lkey(), ro.addr())).unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_LOCAL_PROT_ERR, idx)
    );
    // UD message above the path MTU.
    let mut o = Opts::new(QpType::Ud);
    o.cap.max_send_sge = 1;
    let mut p = Pair::new(o);
    let big = p.mem(false, 8192);
    let av = ud_av(&p.a, &p.b, 0x1111_2222);
    let idx = p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&av).unwrap();
        w.push(&DataSeg::new(4097, big.lkey(), big.addr())).unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_LOCAL_LENGTH_ERR, idx)
    );
}

#[test]
fn receive_too_small_is_local_length_at_responder_and_remote_inval_req_at_requester() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 256);
    let dst = p.mem(true, 256);
    p.b.qp.post_recv(&[dst.sge(0, 16)]);
    p.b.qp.post_recv(&[dst.sge(64, 16)]);
    let idx = p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(100, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_REMOTE_INVAL_REQ_ERR, idx)
    );
    let r = p.b.rcq.drain();
    assert_eq!(err(&r[0]), (CQE_RESP_ERR, SYNDROME_LOCAL_LENGTH_ERR, 0));
    assert_eq!(
        err(&r[1]),
        (CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR, 1),
        "the responder QP is in Error and flushed"
    );
    assert_eq!(
        dst.read(16, 16),
        vec![0; 16],
        "nothing written past the receive buffer"
    );
    assert_eq!(state(&p.b), QpState::Error);
    assert_eq!(
        p.b.dev.poll_async_event(),
        Some(AsyncEvent::QpRequestError(QpId(p.b.qp.qpn())))
    );
}

#[test]
fn remote_access_errors() {
    // Bad rkey, out of bounds, and an MR without the right.
    for case in 0..3 {
        let mut p = Pair::new(Opts::new(QpType::Rc));
        let src = p.mem(false, 64);
        let remote = if case == 2 {
            Mem::new(
                &p.b.dev,
                p.b.pd,
                64,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
        } else {
            p.mem(true, 64)
        };
        let (ra, rk) = match case {
            0 => (remote.addr(), remote.lkey()),
            1 => (remote.addr() + 60, remote.rkey()),
            _ => (remote.addr(), remote.rkey()),
        };
        let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(ra, rk)).unwrap();
            w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
        });
        p.run();
        assert_eq!(
            err(&p.a.scq.poll().unwrap()),
            (CQE_REQ_ERR, SYNDROME_REMOTE_ACCESS_ERR, idx),
            "case {case}"
        );
        assert_eq!(remote.read(0, 64), vec![0; 64]);
        assert_eq!(state(&p.b), QpState::Error);
        assert_eq!(
            p.b.dev.poll_async_event(),
            Some(AsyncEvent::QpAccessError(QpId(p.b.qp.qpn())))
        );
    }
}

#[test]
fn misaligned_atomic_and_disallowed_read_are_remote_inval_req() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    let res = p.mem(false, 64);
    let idx = p.a.qp.post(OPCODE_ATOMIC_FA, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr() + 4, remote.rkey()))
            .unwrap();
        w.push(&AtomicSeg::faa(1)).unwrap();
        w.push(&DataSeg::new(8, res.lkey(), res.addr())).unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_REMOTE_INVAL_REQ_ERR, idx)
    );
    assert_eq!(remote.read(0, 16), vec![0; 16]);
    // The responder QP's access flags lack REMOTE_READ.
    let mut o = Opts::new(QpType::Rc);
    o.access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut p = Pair::new(o);
    let remote = Mem::new(
        &p.b.dev,
        p.b.pd,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    let local = p.mem(false, 64);
    let idx = p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
            .unwrap();
        w.push(&DataSeg::new(8, local.lkey(), local.addr()))
            .unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_REMOTE_INVAL_REQ_ERR, idx)
    );
}

#[test]
fn receive_with_bad_lkey_is_remote_op_error() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 64);
    p.b.qp.post_recv(&[mlx5_wqe::recv::Sge {
        addr: dst.addr(),
        length: 64,
        lkey: dst.rkey(),
    }]);
    let idx = p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_REMOTE_OP_ERR, idx)
    );
    assert_eq!(
        err(&p.b.rcq.poll().unwrap()),
        (CQE_RESP_ERR, SYNDROME_LOCAL_PROT_ERR, 0)
    );
}

#[test]
fn rnr_retries_then_exhausts() {
    let mut o = Opts::new(QpType::Rc);
    // rnr_retry 2: an RNR NAK, two retries after min_rnr_timer, then RNR_RETRY_EXC.
    o.rnr_retry = 2;
    let mut p = Pair::new(o);
    let src = p.mem(false, 64);
    let idx = p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    assert!(p.a.scq.poll().is_none(), "waiting out the RNR timer");
    p.fabric.advance(Duration::from_millis(1));
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_RNR_RETRY_EXC_ERR, idx)
    );
    assert!(p.a.dev.counter("out_of_buffer") == 0);
    assert_eq!(p.b.dev.counter("out_of_buffer"), 3);
    // With a receive posted during the wait, the retry succeeds.
    o.rnr_retry = 7;
    let mut p = Pair::new(o);
    let dst = p.mem(true, 64);
    let src = p.mem(false, 64);
    src.write(0, b"late");
    p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(4, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.fabric.advance(Duration::from_micros(20));
    assert_eq!(p.a.scq.poll().unwrap().opcode(), CQE_REQ);
    assert_eq!(dst.read(0, 4), b"late");
    p.assert_no_bugs();
}

#[test]
fn peer_not_ready_drops_and_the_requester_retries_until_exhausted() {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let mut a = side(&da, &o, None);
    let b = side(&db, &o, None);
    modify(&a, init_attr(&o));
    modify(&b, init_attr(&o));
    modify(&a, rtr_attr(&o, b.qp.qpn(), db.gid(), 0));
    let (mut at, m) = rts_attr(&o, 0);
    at.timeout = 10; // 4.096 µs × 1024 ≈ 4.2 ms
    at.retry_cnt = 3;
    da.modify_qp(a.qp.info.id, &at, m).unwrap();
    let src = Mem::new(&da, a.pd, 64, AccessFlags::LOCAL_WRITE);
    let idx = a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
    });
    fabric.run_until_idle();
    assert!(a.scq.poll().is_none());
    fabric.advance(Duration::from_millis(12));
    assert!(a.scq.poll().is_none(), "3 retries take 4 timeouts");
    fabric.advance(Duration::from_millis(6));
    let c = a.scq.poll().expect("retry exhausted");
    assert_eq!(
        err(&c),
        (CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx)
    );
    assert_eq!(da.counter("local_ack_timeout_err"), 4);
    assert_eq!(
        db.counter("rx_dropped"),
        4,
        "the peer in INIT dropped the original and 3 retries"
    );
}

#[test]
fn error_flushes_everything_in_order_including_unsignaled() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 64);
    for _ in 0..3 {
        p.a.qp.post_recv(&[src.sge(0, 8)]);
    }
    // A bad WQE in the middle of unsignaled good ones.
    let mut idx = Vec::new();
    for k in 0..5 {
        let bad = k == 1;
        idx.push(p.a.qp.post(
            OPCODE_RDMA_WRITE,
            0,
            if k == 0 { 0 } else { CTRL_CQ_UPDATE },
            0,
            |w| {
                w.push(&RaddrSeg::new(
                    dst.addr(),
                    if bad { 0xdead } else { dst.rkey() },
                ))
                .unwrap();
                w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
            },
        ));
    }
    p.run();
    let c = p.a.scq.drain();
    let got: Vec<(u8, u8, u16)> = c
        .iter()
        .map(|c| {
            if c.is_error() {
                err(c)
            } else {
                (c.opcode(), 0, c.wqe_counter())
            }
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (CQE_REQ_ERR, SYNDROME_REMOTE_ACCESS_ERR, idx[1]),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, idx[2]),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, idx[3]),
            (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, idx[4]),
        ]
    );
    // The receive queue is flushed too, and WQEs posted in Error are flushed.
    let r = p.a.rcq.drain();
    assert_eq!(
        r.iter()
            .map(|c| (c.as_err().syndrome, c.wqe_counter()))
            .collect::<Vec<_>>(),
        vec![
            (SYNDROME_WR_FLUSH_ERR, 0),
            (SYNDROME_WR_FLUSH_ERR, 1),
            (SYNDROME_WR_FLUSH_ERR, 2)
        ]
    );
    let late = p.a.qp.post(OPCODE_NOP, 0, 0, 0, |_| {});
    p.a.qp.post_recv(&[src.sge(0, 8)]);
    p.run();
    assert_eq!(
        err(&p.a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_WR_FLUSH_ERR, late)
    );
    assert_eq!(
        err(&p.a.rcq.poll().unwrap()),
        (CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR, 3)
    );
    p.assert_no_bugs();
}

#[test]
fn mismatched_psns_fail_silently_until_retries_run_out() {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 8;
    o.retry_cnt = 2;
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let mut a = side(&da, &o, None);
    let b = side(&db, &o, None);
    modify(&a, init_attr(&o));
    modify(&b, init_attr(&o));
    modify(&a, rtr_attr(&o, b.qp.qpn(), db.gid(), 0));
    modify(&b, rtr_attr(&o, a.qp.qpn(), da.gid(), 5)); // B expects 5...
    modify(&a, rts_attr(&o, 7)); // ...A sends from 7.
    modify(&b, rts_attr(&o, 0));
    let src = Mem::new(&da, a.pd, 64, AccessFlags::LOCAL_WRITE);
    let idx = a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(8, src.lkey(), src.addr())).unwrap();
    });
    fabric.run_until_idle();
    assert!(
        a.scq.poll().is_none(),
        "modify succeeded; traffic fails silently"
    );
    fabric.advance(Duration::from_millis(10));
    assert_eq!(
        err(&a.scq.poll().unwrap()),
        (CQE_REQ_ERR, SYNDROME_TRANSPORT_RETRY_EXC_ERR, idx)
    );
    assert_eq!(
        db.counter("out_of_sequence"),
        3,
        "the original and 2 retries"
    );
    // B NAKed PSN 5 once; A has nothing outstanding at 5 and ignores it.
    assert_eq!(da.counter("duplicate_response"), 1);
}
