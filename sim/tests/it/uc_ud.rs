//! UC and UD: the opcodes they allow, Q_Key checks, the GRH of UD receives, SQE.

use crate::common;

use common::*;
use mlx5_cq::*;
use mlx5_hw::{AttrMask, Device, QpAttr, QpState, QpType};
use mlx5_wqe::*;

#[test]
fn uc_send_write_and_write_imm() {
    let mut p = Pair::new(Opts::new(QpType::Uc));
    let src = p.mem(false, 8192);
    let dst = p.mem(true, 8192);
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    src.write(0, &data);
    p.b.qp.post_recv(&[dst.sge(0, 8192)]);
    p.b.qp.post_recv(&[dst.sge(0, 16)]);
    p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(6000, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    assert_eq!(p.a.scq.poll().unwrap().opcode(), CQE_REQ);
    let r = p.b.rcq.poll().unwrap();
    assert_eq!((r.opcode(), r.byte_cnt()), (CQE_RESP_SEND, 6000));
    assert_eq!(dst.read(0, 6000), data);
    let remote = p.mem(true, 64);
    p.a.qp.post(
        OPCODE_RDMA_WRITE_IMM,
        0,
        CTRL_CQ_UPDATE,
        7u32.to_be(),
        |w| {
            w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
                .unwrap();
            w.push_inline(&[b"uc write"]).unwrap();
        },
    );
    p.run();
    assert_eq!(remote.read(0, 8), b"uc write");
    let r = p.b.rcq.poll().unwrap();
    assert_eq!((r.opcode(), r.imm_bytes()), (CQE_RESP_WR_IMM, [0, 0, 0, 7]));
    p.assert_no_bugs();
}

#[test]
fn ud_send_carries_grh_source_qp_and_checks_qkey() {
    let mut o = Opts::new(QpType::Ud);
    o.cap.max_send_sge = 2;
    let mut p = Pair::new(o);
    let src = p.mem(false, 256);
    let dst = p.mem(true, 256);
    src.write(0, b"datagram");
    p.b.qp.post_recv(&[dst.sge(0, 128)]);
    let av = ud_av(&p.a, &p.b, 0x1111_2222);
    let idx = p.a.qp.post(
        OPCODE_SEND_IMM,
        0,
        CTRL_CQ_UPDATE,
        0x0a0b_0c0du32.to_be(),
        |w| {
            w.push(&av).unwrap();
            w.push(&DataSeg::new(4, src.lkey(), src.addr())).unwrap();
            w.push(&DataSeg::new(4, src.lkey(), src.addr() + 4))
                .unwrap();
        },
    );
    p.run();
    let c = p.a.scq.poll().unwrap();
    assert_eq!((c.opcode(), c.wqe_counter()), (CQE_REQ, idx));
    let r = p.b.rcq.poll().unwrap();
    assert_eq!(r.opcode(), CQE_RESP_SEND_IMM);
    assert_eq!(r.byte_cnt(), 40 + 8);
    assert_eq!(r.src_qpn(), p.a.qp.qpn());
    assert_ne!(r.flags_rqpn.get() >> 28 & 3, 0, "GRH flag");
    assert_eq!(r.imm_bytes(), [0x0a, 0x0b, 0x0c, 0x0d]);
    let grh = dst.read(0, 40);
    assert_eq!(grh[20], 0x45, "IPv4 header in the last 20 bytes of the GRH");
    assert_eq!(&grh[32..36], &[10, 0, 0, 1]);
    assert_eq!(&grh[36..40], &[10, 0, 0, 2]);
    assert_eq!(dst.read(40, 8), b"datagram");
    // A wrong Q_Key is dropped silently; the receive stays posted.
    let bad = ud_av(&p.a, &p.b, 0x5555);
    p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&bad).unwrap();
        w.push(&DataSeg::new(4, src.lkey(), src.addr())).unwrap();
    });
    p.b.qp.post_recv(&[dst.sge(128, 128)]);
    p.run();
    assert_eq!(
        p.a.scq.poll().unwrap().opcode(),
        CQE_REQ,
        "UD completes on send"
    );
    assert!(p.b.rcq.poll().is_none());
    assert_eq!(p.b.dev.counter("rx_qkey_violation"), 1);
    // WRITE is not a UD operation.
    let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&av).unwrap();
        w.push(&RaddrSeg::new(0, 0)).unwrap();
    });
    p.run();
    let c = p.a.scq.poll().unwrap();
    assert_eq!(
        (c.opcode(), c.as_err().syndrome, c.wqe_counter()),
        (CQE_REQ_ERR, SYNDROME_LOCAL_QP_OP_ERR, idx)
    );
    p.assert_no_bugs();
}

#[test]
fn ud_qp_in_sqe_keeps_receiving_and_recovers() {
    let mut p = Pair::new(Opts::new(QpType::Ud));
    let src = p.mem(false, 64);
    let dst = p.mem(true, 256);
    // A WRITE on UD fails: B's QP enters SQE, flushing what follows on its SQ.
    let av_ba = ud_av(&p.b, &p.a, 0x1111_2222);
    let bad = p.b.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&av_ba).unwrap();
        w.push(&RaddrSeg::new(0, 0)).unwrap();
    });
    let next = p.b.qp.post(OPCODE_NOP, 0, 0, 0, |_| {});
    p.run();
    let c = p.b.scq.drain();
    assert_eq!(
        c.iter()
            .map(|c| (c.as_err().syndrome, c.wqe_counter()))
            .collect::<Vec<_>>(),
        vec![
            (SYNDROME_LOCAL_QP_OP_ERR, bad),
            (SYNDROME_WR_FLUSH_ERR, next)
        ]
    );
    assert_eq!(
        p.b.dev.query_qp(p.b.qp.info.id).unwrap().qp_state,
        QpState::Sqe
    );
    // Still receives.
    p.b.qp.post_recv(&[dst.sge(0, 128)]);
    let av = ud_av(&p.a, &p.b, 0x1111_2222);
    p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&av).unwrap();
        w.push(&DataSeg::new(4, src.lkey(), src.addr())).unwrap();
    });
    p.run();
    assert_eq!(p.b.rcq.poll().map(|c| c.opcode()), Some(CQE_RESP_SEND));
    // SQE -> RTS recovers the send queue.
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..Default::default()
    };
    p.b.dev
        .modify_qp(p.b.qp.info.id, &rts, AttrMask::STATE)
        .unwrap();
    let bsrc = p.mem(true, 64);
    p.a.qp.post_recv(&[src.sge(0, 64)]);
    p.b.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&av_ba).unwrap();
        w.push(&DataSeg::new(4, bsrc.lkey(), bsrc.addr())).unwrap();
    });
    p.run();
    assert_eq!(p.b.scq.poll().map(|c| c.opcode()), Some(CQE_REQ));
    assert_eq!(p.a.rcq.poll().map(|c| c.opcode()), Some(CQE_RESP_SEND));
    p.assert_no_bugs();
}
