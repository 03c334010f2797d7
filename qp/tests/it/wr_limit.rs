//! The send queue's WR limit (rdma-core `sq.max_post`, `mlx5_wq_overflow`): one-block WRs
//! stop at `max_send_wr`, not at the ring's blocks, and every way a WR is retired gives its
//! WR back.

use crate::common;

use common::{req, req_err, FakeCq, FakeQp, QpCfg};
use mlx5_cq::SYNDROME_REMOTE_ACCESS_ERR;
use mlx5_hw::{QpState, QpType};
use mlx5_qp::{Cq, Error, Qp, RemoteAddr, SendFlags, SendWr, Sge, SqLimit, Wc, WcStatus};
use mlx5_wqe::opcode as op;

const QPN: u32 = 0x1234;
const REMOTE: RemoteAddr = RemoteAddr {
    addr: 0x10_0000,
    rkey: 7,
};
const WR_FULL: Result<(), Error> = Err(Error::SqFull {
    limit: SqLimit::WorkRequests,
    needed: 1,
    free: 0,
});

/// What `ibv_create_qp` gives for RC, `max_send_wr` 128, one SGE: 256-byte WQEs (192 bytes
/// of overhead + 16, rounded to a block), 512 blocks, `max_inline_data` 60.
fn rc_128() -> FakeQp {
    FakeQp::new(&QpCfg {
        sq_bbs: 512,
        max_inline: 60,
        max_send_sge: 1,
        ..QpCfg::default()
    })
}

fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn cq_on(fcq: &FakeCq) -> Cq {
    // SAFETY: `fcq` owns the memory and outlives the CQ in every test.
    unsafe { Cq::from_layout(&fcq.layout) }.unwrap()
}

fn write8(qp: &mut Qp, id: u64, flags: SendFlags) -> Result<(), Error> {
    qp.post_write_inline(id, b"8 bytes!", REMOTE, flags)
}

#[test]
fn max_send_wr_is_rdma_cores_max_post() {
    let fake = rc_128();
    let qp = rts(&fake);
    assert_eq!(qp.max_send_wr(), 128);
    assert_eq!(qp.sq_free_wrs(), 128);
    assert_eq!(qp.sq_outstanding_wrs(), 0);
    // Inline 220 and four SGEs need 448-byte WQEs: 1024 blocks hold 146 of them.
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 1024,
        ..QpCfg::default()
    });
    assert_eq!(rts(&fake).max_send_wr(), 146);
    // UD: ctrl + datagram segment + one SGE = 128 bytes.
    let fake = FakeQp::new(&QpCfg {
        qp_type: QpType::Ud,
        sq_bbs: 64,
        max_inline: 0,
        max_send_sge: 1,
        ..QpCfg::default()
    });
    assert_eq!(rts(&fake).max_send_wr(), 32);
}

#[test]
fn lean_one_block_posts_stop_at_max_send_wr_not_at_the_ring() {
    let fake = rc_128();
    let mut qp = rts(&fake);
    for id in 0..128 {
        write8(&mut qp, id, SendFlags::empty()).unwrap();
    }
    assert_eq!(qp.sq_outstanding_wrs(), 128);
    assert_eq!(qp.sq_outstanding_bbs(), 128, "one block each");
    assert_eq!(qp.sq_free_bbs(), 384, "the ring is far from full");
    let pi = qp.sq_pi();
    let dbrec = fake.sq_dbrec();
    assert_eq!(write8(&mut qp, 128, SendFlags::SIGNALED), WR_FULL);
    let sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    };
    assert_eq!(qp.post_write(128, sge, REMOTE, SendFlags::empty()), WR_FULL);
    assert_eq!(qp.post_send(128, sge, SendFlags::empty()), WR_FULL);
    assert_eq!(qp.post_send_inline(128, b"x", SendFlags::empty()), WR_FULL);
    assert_eq!(qp.sq_pi(), pi, "nothing written");
    assert_eq!(fake.sq_dbrec(), dbrec, "no doorbell");
}

#[test]
fn generic_posts_stop_at_max_send_wr_and_say_so() {
    let fake = rc_128();
    let mut qp = rts(&fake);
    let sges = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    for id in 0..128 {
        // post_deferred is the generic path (plan, write), whatever the shape.
        qp.post_deferred(&SendWr::send(id).sges(&sges)).unwrap();
        if id % 16 == 15 {
            qp.ring_doorbell();
        }
    }
    let e = qp.post_deferred(&SendWr::send(128).sges(&sges));
    assert_eq!(e, WR_FULL);
    let msg = e.unwrap_err().to_string();
    assert!(msg.contains("max_send_wr"), "{msg}");
    assert!(!msg.contains("basic blocks"), "{msg}");
    assert_eq!(
        qp.post_raw(128, &fake.wqe(0, 1)[..32]),
        WR_FULL,
        "a raw WQE counts as a WR too"
    );
}

#[test]
fn a_multi_block_wqe_is_one_wr() {
    let fake = rc_128();
    let mut qp = rts(&fake);
    // ctrl + raddr + align16(4 + 60) = 96 bytes: two blocks, one WR.
    qp.post_write_inline(1, &[0xa5; 60], REMOTE, SendFlags::empty())
        .unwrap();
    assert_eq!(qp.sq_outstanding_bbs(), 2);
    assert_eq!(qp.sq_outstanding_wrs(), 1);
    assert_eq!(qp.sq_free_wrs(), 127);
}

#[test]
fn a_signaled_completion_returns_the_unsignaled_wrs_before_it() {
    let fake = rc_128();
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(256, 64, false);
    let mut cq = cq_on(&fcq);
    for id in 0..127 {
        write8(&mut qp, id, SendFlags::empty()).unwrap();
    }
    write8(&mut qp, 127, SendFlags::SIGNALED).unwrap();
    assert_eq!(write8(&mut qp, 128, SendFlags::SIGNALED), WR_FULL);
    // One CQE, for the signaled WR at block 127: all 128 WRs retire.
    fcq.push(req(QPN, 127, op::OPCODE_RDMA_WRITE));
    let mut wcs = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut qp, &mut wcs), Ok(1));
    assert_eq!(wcs[0].wr_id(), 127);
    assert_eq!(qp.sq_outstanding_wrs(), 0);
    assert_eq!(qp.sq_free_wrs(), 128);
    // A whole second round fits, then the limit again.
    for id in 200..328 {
        write8(&mut qp, id, SendFlags::SIGNALED).unwrap();
    }
    assert_eq!(write8(&mut qp, 328, SendFlags::SIGNALED), WR_FULL);
    // The lean poll retires one WR per CQE.
    for pi in 128..138u16 {
        fcq.push(req(QPN, pi, op::OPCODE_RDMA_WRITE));
    }
    let mut ids = [0u64; 16];
    assert_eq!(cq.poll_send(&mut qp, &mut ids, |_| {}), Ok(10));
    assert_eq!(ids[..10], (200..210).collect::<Vec<u64>>()[..]);
    assert_eq!(qp.sq_outstanding_wrs(), 118);
    assert_eq!(qp.sq_free_wrs(), 10);
    for id in 400..410 {
        write8(&mut qp, id, SendFlags::SIGNALED).unwrap();
    }
    assert_eq!(write8(&mut qp, 410, SendFlags::SIGNALED), WR_FULL);
}

#[test]
fn errors_and_flushes_return_wr_credits_and_reset_restores_them() {
    let fake = rc_128();
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(256, 64, false);
    let mut cq = cq_on(&fcq);
    for id in 0..10 {
        write8(&mut qp, id, SendFlags::empty()).unwrap();
    }
    // A non-flush error at WR 4: the four before it had completed, WR 4 fails.
    fcq.push(req_err(
        QPN,
        4,
        op::OPCODE_RDMA_WRITE,
        SYNDROME_REMOTE_ACCESS_ERR,
        0,
    ));
    let mut wcs = [Wc::default(); 16];
    assert_eq!(cq.poll(&mut qp, &mut wcs), Ok(1));
    assert_eq!(wcs[0].status(), WcStatus::RemAccessErr);
    assert_eq!(qp.sq_outstanding_wrs(), 5);
    assert_eq!(qp.sq_free_wrs(), 123);
    // The QP is in Error; the rest are flushed by software, two at a time.
    qp.set_state(QpState::Error);
    assert_eq!(qp.flush_outstanding(&mut wcs[..2]), Ok(2));
    assert_eq!(qp.sq_outstanding_wrs(), 3);
    assert_eq!(qp.flush_outstanding(&mut wcs), Ok(3));
    assert!(wcs[..3].iter().all(|w| w.status() == WcStatus::WrFlushErr));
    assert_eq!(qp.sq_outstanding_wrs(), 0);
    assert_eq!(qp.sq_free_wrs(), 128);
    // Reset forgets whatever is outstanding and restores the limit.
    qp.set_state(QpState::Reset);
    qp.set_state(QpState::Rts);
    for id in 0..7 {
        write8(&mut qp, id, SendFlags::empty()).unwrap();
    }
    qp.set_state(QpState::Reset);
    assert_eq!(qp.sq_outstanding_wrs(), 0);
    assert_eq!(qp.sq_free_wrs(), 128);
    qp.set_state(QpState::Rts);
    for id in 0..128 {
        write8(&mut qp, id, SendFlags::empty()).unwrap();
    }
    assert_eq!(write8(&mut qp, 128, SendFlags::empty()), WR_FULL);
}

#[test]
fn a_raw_wqe_larger_than_the_caps_is_still_bounded_by_blocks() {
    // 4 blocks, computed limit 1 (a 256-byte WQE fills the ring); raised to 2, each WR may
    // take 2 blocks before the blocks themselves are the limit.
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 4,
        max_inline: 60,
        max_send_sge: 1,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    assert_eq!(qp.max_send_wr(), 1);
    qp.set_max_send_wr(2).unwrap();
    let mut fcq = FakeCq::new(16, 64, false);
    let mut cq = cq_on(&fcq);
    // A three-block raw SEND (ctrl + inline of 160 bytes: 12 DS, rounded to 192 bytes).
    let mut raw = vec![0u8; 192];
    raw[3] = op::OPCODE_SEND;
    raw[7] = 12;
    raw[11] = op::CTRL_CQ_UPDATE;
    raw[16..20].copy_from_slice(&(0x8000_0000u32 | 160).to_be_bytes());
    qp.post_raw(1, &raw).unwrap();
    assert_eq!((qp.sq_outstanding_wrs(), qp.sq_free_bbs()), (1, 1));
    // One WR is free but only one block: a two-block WQE is refused for its blocks, on the
    // lean and the generic path alike.
    let blocks_full = Err(Error::SqFull {
        limit: SqLimit::Blocks,
        needed: 2,
        free: 1,
    });
    assert_eq!(
        qp.post_write_inline(2, &[1; 60], REMOTE, SendFlags::empty()),
        blocks_full
    );
    assert_eq!(
        qp.post_deferred(&SendWr::write(2, REMOTE).inline(&[1; 60])),
        blocks_full
    );
    // A one-block WQE fits.
    write8(&mut qp, 3, SendFlags::SIGNALED).unwrap();
    assert_eq!(write8(&mut qp, 4, SendFlags::SIGNALED), WR_FULL);
    fcq.push(req(QPN, 0, op::OPCODE_SEND));
    fcq.push(req(QPN, 3, op::OPCODE_RDMA_WRITE));
    let mut wcs = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut qp, &mut wcs), Ok(2));
    assert_eq!((wcs[0].wr_id(), wcs[1].wr_id()), (1, 3));
    assert_eq!(qp.sq_outstanding_wrs(), 0);
    // With the big WQE gone two two-block WQEs fit.
    qp.post_write_inline(5, &[1; 60], REMOTE, SendFlags::empty())
        .unwrap();
    qp.post_write_inline(6, &[1; 60], REMOTE, SendFlags::empty())
        .unwrap();
    assert_eq!(qp.sq_free_bbs(), 0);
}

#[test]
fn set_max_send_wr_checks_its_argument_and_the_queue() {
    let fake = rc_128();
    let mut qp = rts(&fake);
    assert!(matches!(qp.set_max_send_wr(0), Err(Error::BadLayout(_))));
    assert!(matches!(qp.set_max_send_wr(513), Err(Error::BadLayout(_))));
    write8(&mut qp, 1, SendFlags::empty()).unwrap();
    assert!(matches!(
        qp.set_max_send_wr(512),
        Err(Error::WrongState { .. })
    ));
    assert_eq!(qp.max_send_wr(), 128);
}
