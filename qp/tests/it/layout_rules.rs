//! `Qp::from_layout` checks each rule on its own: every field broken alone is refused with
//! `BadLayout` (found by mutation testing, `docs/testing.md`: a check turned always-true, or
//! two checks joined with the wrong operator, went unseen while every test layout broke one
//! rule at most and only some rules were tried), and the limits themselves are accepted.

use crate::common;

use common::{FakeQp, Mem, QpCfg};
use mlx5_hw::{QpLayout, QpState, QpType};
use mlx5_qp::{Error, Qp, SendFlags};

fn refused(layout: &QpLayout, srqn: Option<u32>, what: &str) {
    // SAFETY: a refused layout is not touched; where the rule under test is broken the rest
    // names live memory of the fake QP.
    let r = unsafe { Qp::from_layout(layout, srqn) };
    assert!(
        matches!(r, Err(Error::BadLayout(_))),
        "{what}: {:?}",
        r.map(|q| q.qpn())
    );
}

fn accepted(layout: &QpLayout, srqn: Option<u32>, what: &str) -> Qp {
    // SAFETY: the layout names the fake QP's live memory.
    match unsafe { Qp::from_layout(layout, srqn) } {
        Ok(q) => q,
        Err(e) => panic!("{what}: {e}"),
    }
}

#[test]
fn each_pointer_rule_refuses_alone() {
    let fake = FakeQp::new(&QpCfg::default());
    let good = fake.layout;
    accepted(&good, None, "the fake QP's own layout");
    let mut l = good;
    l.sq.buf = core::ptr::null_mut();
    refused(&l, None, "null SQ buffer");
    let mut l = good;
    l.dbrec = core::ptr::null_mut();
    refused(&l, None, "null doorbell record");
    let mut l = good;
    l.bf.reg = core::ptr::null_mut();
    refused(&l, None, "null BlueFlame register");
    // Misaligned, each alone (64 for the SQ buffer, 8 for the record and the register).
    for off in [8usize, 16, 32] {
        let mut l = good;
        l.sq.buf = good.sq.buf.wrapping_add(off);
        refused(&l, None, "SQ buffer off its 64-byte alignment");
    }
    let mut l = good;
    l.dbrec = (good.dbrec as *mut u8).wrapping_add(4) as *mut u32;
    refused(&l, None, "doorbell record on 4 bytes");
    let mut l = good;
    l.bf.reg = good.bf.reg.wrapping_add(4);
    refused(&l, None, "BlueFlame register on 4 bytes");
    // 8 is enough for the record and the register (the 8-byte doorbell store).
    let mut l = good;
    l.bf.reg = good.bf.reg.wrapping_add(8);
    accepted(&l, None, "BlueFlame register on 8 bytes");
}

#[test]
fn each_size_rule_refuses_alone() {
    let fake = FakeQp::new(&QpCfg::default());
    let good = fake.layout;
    for stride in [0u32, 32, 128] {
        let mut l = good;
        l.sq.stride = stride;
        refused(&l, None, "SQ stride other than 64");
    }
    for cnt in [0u32, 12, 1 << 16] {
        let mut l = good;
        l.sq.wqe_cnt = cnt;
        refused(&l, None, "SQ wqe_cnt not a power of two ≤ 32768");
    }
    for size in [32u32, 100, 4096] {
        let mut l = good;
        l.bf.size = size;
        refused(&l, None, "bf.size not 0 or a multiple of 64 up to 2048");
    }
    for size in [0u32, 64, 2048] {
        let mut l = good;
        l.bf.size = size;
        accepted(&l, None, "bf.size 0, 64, 2048");
    }
}

#[test]
fn the_largest_send_ring_is_accepted() {
    let sq = Mem::new(32768 * 64, 4096);
    let fake = FakeQp::new(&QpCfg::default());
    let mut l = fake.layout;
    l.sq.buf = sq.ptr();
    l.sq.wqe_cnt = 32768;
    let mut qp = accepted(&l, None, "32768 blocks");
    qp.set_state(QpState::Rts);
    assert_eq!(qp.sq_free_bbs(), 32768);
    qp.post_send_inline(1, b"x", SendFlags::SIGNALED).unwrap();
    assert_eq!(fake.sq_dbrec(), 1);
}

#[test]
fn each_receive_queue_rule_refuses_alone() {
    let fake = FakeQp::new(&QpCfg::default());
    let good = fake.layout;
    let mut l = good;
    l.rq.buf = core::ptr::null_mut();
    refused(&l, None, "null RQ buffer");
    for off in [4usize, 8] {
        let mut l = good;
        l.rq.buf = good.rq.buf.wrapping_add(off);
        refused(&l, None, "RQ buffer off its 16-byte alignment");
    }
    let mut l = good;
    l.rq.buf = good.rq.buf.wrapping_add(16);
    l.rq.wqe_cnt = 4;
    accepted(&l, None, "RQ buffer on 16 bytes");
    for cnt in [3u32, 12, 1 << 16] {
        let mut l = good;
        l.rq.wqe_cnt = cnt;
        refused(&l, None, "RQ wqe_cnt not a power of two ≤ 32768");
    }
    for stride in [0u32, 8, 48] {
        let mut l = good;
        l.rq.stride = stride;
        refused(&l, None, "RQ stride not a power of two ≥ 16");
    }
    // The limits: 16-byte WQEs (one SGE, `mlx5_calc_rcv_wqe`'s smallest), 32768 of them.
    let rq = Mem::new(32768 * 16, 4096);
    let mut l = good;
    l.rq.buf = rq.ptr();
    l.rq.wqe_cnt = 32768;
    l.rq.stride = 16;
    l.max_recv_sge = 1;
    let mut qp = accepted(&l, None, "32768 receive WQEs of 16 bytes");
    qp.set_state(QpState::Init);
    qp.post_recv(1, &[]).unwrap();
    assert_eq!(qp.rq_outstanding(), 1);
    // A null RQ buffer is no error when there is no RQ.
    let mut l = good;
    l.rq.buf = core::ptr::null_mut();
    l.rq.wqe_cnt = 0;
    accepted(&l, None, "no RQ");
}

#[test]
fn the_srq_number_goes_with_uses_srq_both_ways() {
    let fake = FakeQp::new(&QpCfg::default());
    refused(
        &fake.layout,
        Some(3),
        "an SRQ number for a QP with its own RQ",
    );
    let srq = FakeQp::new(&QpCfg {
        uses_srq: true,
        ..QpCfg::default()
    });
    refused(&srq.layout, None, "no SRQ number for a QP that uses one");
    let qp = accepted(&srq.layout, Some(3), "a QP on SRQ 3");
    assert_eq!(qp.srqn(), Some(3));
    // Its RQ fields are ignored (`uses_srq`), even when they would be refused.
    let mut l = srq.layout;
    l.rq.buf = core::ptr::null_mut();
    l.rq.wqe_cnt = 3;
    accepted(&l, Some(3), "an SRQ QP with nonsense RQ fields");
}

#[test]
fn the_qpn_is_24_bits() {
    let mut fake = FakeQp::new(&QpCfg::default());
    fake.layout.qpn = 0xab00_1234;
    let mut qp = accepted(&fake.layout, None, "QPN with high bits");
    assert_eq!(qp.qpn(), 0x1234);
    // What the accessors say is the layout's.
    assert_eq!(qp.qp_type(), QpType::Rc);
    assert_eq!(qp.state(), QpState::Reset, "a new QP starts in Reset");
    assert_eq!(qp.max_inline_data(), 220);
    let uc = FakeQp::new(&QpCfg {
        qp_type: QpType::Uc,
        max_inline: 60,
        ..QpCfg::default()
    });
    let u = accepted(&uc.layout, None, "a UC QP");
    assert_eq!((u.qp_type(), u.max_inline_data()), (QpType::Uc, 60));
    qp.set_state(QpState::Rts);
    qp.post_send_inline(1, b"x", SendFlags::SIGNALED).unwrap();
    // ctrl bytes 4..=6: the QPN, byte 7 the DS count (`mlx5_wqe_ctrl_seg.qpn_ds`).
    assert_eq!(&fake.bb(0)[4..8], &[0x00, 0x12, 0x34, 2]);
}
