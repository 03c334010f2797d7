//! Caller-built WQEs (`Qp::post_raw`) at the edges the other modules leave open, found by
//! mutation testing (`docs/testing.md`): the length rules each on their own, the size limit
//! inclusive, the CQ_UPDATE bit a signal-all QP adds, and the completion's byte count of every
//! atomic opcode the raw path recognises. Also the receive post of a QP with no receive queue
//! at all.

use crate::common;

use common::{req, FakeCq, FakeQp, QpCfg};
use mlx5_hw::QpState;
use mlx5_qp::{Cq, Error, Qp, Sge, Wc, WcOpcode, WcStatus};
use mlx5_wqe::opcode as op;

const QPN: u32 = 0x1234;

fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn cq_on(fcq: &FakeCq) -> Cq {
    // SAFETY: `fcq` owns the memory and outlives the CQ in every test.
    unsafe { Cq::from_layout(&fcq.layout) }.unwrap()
}

/// A raw WQE of `len` bytes (a SEND unless `opcode` says otherwise) whose DS byte is `ds`.
fn raw(len: usize, opcode: u8, opmod: u8, ds: u8, fm_ce_se: u8) -> Vec<u8> {
    let mut w = vec![0u8; len.max(16)];
    w[0] = opmod;
    w[3] = opcode;
    w[7] = ds;
    w[11] = fm_ce_se;
    w.truncate(len);
    w
}

#[test]
fn a_length_that_is_not_a_multiple_of_16_is_refused_even_with_a_matching_ds_byte() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    // 40 bytes: DS byte 2 equals 40 / 16, so only the multiple-of-16 rule refuses it.
    let w = raw(40, op::OPCODE_SEND, 0, 2, 0);
    assert!(matches!(qp.post_raw(1, &w), Err(Error::BadRawWqe(_))));
    // No bytes at all: refused before any byte of it is read.
    assert!(matches!(qp.post_raw(1, &[]), Err(Error::BadRawWqe(_))));
    assert!(matches!(qp.post_raw(1, &w[..8]), Err(Error::BadRawWqe(_))));
    assert_eq!((qp.sq_pi(), fake.sq_dbrec()), (0, 0), "nothing posted");
    assert!(fake.sq.bytes().iter().all(|&b| b == 0), "nothing written");
}

#[test]
fn the_size_limit_is_inclusive() {
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 64,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let max = qp.max_wqe_bytes();
    // 63 DS (`MLX5_WQE_CTRL_DS_MASK`), the largest a DS count says.
    assert_eq!(max, 63 * 16);
    let over = raw(max + 16, op::OPCODE_SEND, 0, (max / 16 + 1) as u8, 0);
    assert_eq!(
        qp.post_raw(1, &over),
        Err(Error::WqeTooLarge {
            bytes: max + 16,
            max
        })
    );
    assert_eq!(qp.sq_pi(), 0, "nothing posted");
    let exact = raw(max, op::OPCODE_SEND, 0, (max / 16) as u8, 0);
    qp.post_raw(2, &exact).unwrap();
    assert_eq!(qp.sq_pi(), 16, "63 DS take 16 blocks");
    assert_eq!(fake.sq_dbrec(), 16);
}

#[test]
fn a_signal_all_qp_adds_cq_update_and_keeps_the_callers_bits() {
    for (sig_all, given, want) in [
        (true, 0, op::CTRL_CQ_UPDATE),
        (true, 0x22, 0x22 | op::CTRL_CQ_UPDATE),
        (true, op::CTRL_CQ_UPDATE, op::CTRL_CQ_UPDATE),
        (false, 0, 0),
        (false, 0x22, 0x22),
    ] {
        let fake = FakeQp::new(&QpCfg {
            sig_all,
            ..QpCfg::default()
        });
        let mut qp = rts(&fake);
        qp.post_raw(1, &raw(16, op::OPCODE_NOP, 0, 1, given))
            .unwrap();
        assert_eq!(
            fake.bb(0)[11],
            want,
            "fm_ce_se of a raw WQE with {given:#x}, sig_all {sig_all}"
        );
    }
}

#[test]
fn every_atomic_completion_reports_its_operand_size() {
    // (opcode, opmod, the completion's byte_len): what the generic post reports for the same
    // WQE (`SendOp::CompSwap` … `MaskedFetchAdd64`): 8 bytes for CS/FA whatever the opmod
    // (rdma-core `handle_good_req`: `wc->byte_len = 8`), the masked ones 4 bytes with opmod
    // `OPMOD_EXT_ATOMIC_32` (0x08, 32-bit operands) and 8 bytes otherwise; other opcodes 0.
    let cases = [
        (op::OPCODE_ATOMIC_CS, 0, WcOpcode::CompSwap, 8),
        (op::OPCODE_ATOMIC_FA, 0x08, WcOpcode::FetchAdd, 8),
        (
            op::OPCODE_ATOMIC_MASKED_CS,
            op::OPMOD_EXT_ATOMIC_32,
            WcOpcode::MaskedCompSwap,
            4,
        ),
        (
            op::OPCODE_ATOMIC_MASKED_FA,
            op::OPMOD_EXT_ATOMIC_32,
            WcOpcode::MaskedFetchAdd,
            4,
        ),
        (
            op::OPCODE_ATOMIC_MASKED_CS,
            op::OPMOD_EXT_ATOMIC_64,
            WcOpcode::MaskedCompSwap,
            8,
        ),
        (
            op::OPCODE_ATOMIC_MASKED_FA,
            op::OPMOD_EXT_ATOMIC_64,
            WcOpcode::MaskedFetchAdd,
            8,
        ),
        (op::OPCODE_SEND, op::OPMOD_EXT_ATOMIC_32, WcOpcode::Send, 0),
    ];
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(16, 64, false);
    let mut cq = cq_on(&fcq);
    for (i, &(opcode, opmod, _, _)) in cases.iter().enumerate() {
        // ctrl + raddr + atomic + one data segment: 4 DS, one block.
        qp.post_raw(
            100 + i as u64,
            &raw(64, opcode, opmod, 4, op::CTRL_CQ_UPDATE),
        )
        .unwrap();
        fcq.push(req(QPN, i as u16, opcode));
    }
    let mut wcs = [Wc::default(); 8];
    assert_eq!(cq.poll(&mut qp, &mut wcs).unwrap(), cases.len());
    for (i, (wc, &(opcode, opmod, wc_op, len))) in wcs.iter().zip(&cases).enumerate() {
        assert_eq!(
            (wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len()),
            (100 + i as u64, WcStatus::Success, wc_op, len),
            "opcode {opcode:#x} opmod {opmod:#x}"
        );
    }
}

#[test]
fn a_qp_without_any_receive_queue_refuses_receives_as_full() {
    let fake = FakeQp::new(&QpCfg {
        rq_cnt: 0,
        ..QpCfg::default()
    });
    // SAFETY: `fake` outlives the QP.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_state(QpState::Init);
    let sge = [Sge {
        addr: 0x10,
        length: 8,
        lkey: 1,
    }];
    // No RQ and no SRQ (a send-only QP created with max_recv_wr 0): the queue holds nothing,
    // which is not the SRQ's "post there" error.
    assert_eq!(qp.post_recv(1, &sge), Err(Error::RqFull { capacity: 0 }));
    assert_eq!(qp.rq_outstanding(), 0);
}
