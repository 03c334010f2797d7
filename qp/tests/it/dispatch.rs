//! What decides the path of a post or a completion, at its edges (found by mutation testing,
//! `docs/testing.md`): a SEND with a UD destination or an XRC SRQ number never takes a lean
//! path, which has no place for either — through `post` and through a batch alike — and an
//! error completion polled on a QP already in Error leaves it there (a UC send error would
//! otherwise move it to SQE, out of Error).

use crate::common;

use common::{req_err, FakeCq, FakeQp, QpCfg};
use mlx5_hw::{QpState, QpType};
use mlx5_qp::{Cq, Qp, SendFlags, SendWr, UdDest, Wc, WcStatus};
use mlx5_wqe::opcode as op;

const QPN: u32 = 0x1234;
/// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR` (mlx5dv.h).
const FLUSH: u8 = 0x05;

fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
}

/// A UD SEND of one inline byte: ctrl, the 48-byte datagram segment (Q_Key at its bytes 0..4,
/// `dqp_dct` with `MLX5_EXTENDED_UD_AV` at 8..12, rdma-core `_set_datagram_seg`), the inline
/// segment: 5 DS over two blocks.
fn check_ud(fake: &FakeQp, pi: u16) {
    let w = fake.wqe(pi, 2);
    assert_eq!((w[3], w[7]), (op::OPCODE_SEND, 5), "opcode, DS");
    assert_eq!(be32(&w, 16), 0x1111_1111, "Q_Key");
    assert_eq!(
        be32(&w, 24),
        0x8000_0000 | 0x42,
        "extended AV, destination QPN"
    );
    assert_eq!(be32(&w, 64), 0x8000_0001, "inline header after the AV");
    assert_eq!(w[68], b'x');
}

/// An XRC SEND of one inline byte: ctrl, the XRC segment (the SRQ number, BE32), the inline
/// segment: 3 DS (`docs/wqe-layout.md`, XRC segment).
fn check_xrc(fake: &FakeQp, pi: u16) {
    let w = fake.wqe(pi, 1);
    assert_eq!((w[3], w[7]), (op::OPCODE_SEND, 3), "opcode, DS");
    assert_eq!(be32(&w, 16), 0x77, "the remote XRC SRQ");
    assert_eq!(be32(&w, 32), 0x8000_0001);
    assert_eq!(w[36], b'x');
}

#[test]
fn a_ud_send_keeps_its_destination_through_post_and_batch() {
    let fake = FakeQp::new(&QpCfg {
        qp_type: QpType::Ud,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let dest = UdDest::new(&[0; 48], 0x42, 0x1111_1111);
    let wr = SendWr::send(1).inline(b"x").ud(&dest).signaled();
    qp.post(&wr).unwrap();
    check_ud(&fake, 0);
    {
        let mut b = qp.batch();
        b.post(&wr).unwrap();
        b.post(&wr).unwrap();
    }
    check_ud(&fake, 2);
    check_ud(&fake, 4);
    assert_eq!(fake.sq_dbrec(), 6);
}

#[test]
fn an_xrc_send_keeps_its_srq_number_through_post_and_batch() {
    let fake = FakeQp::new(&QpCfg {
        qp_type: QpType::XrcSend,
        rq_cnt: 0,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let wr = SendWr::send(1).inline(b"x").xrc(0x77).signaled();
    qp.post(&wr).unwrap();
    check_xrc(&fake, 0);
    {
        let mut b = qp.batch();
        b.post(&wr).unwrap();
        b.post(&wr).unwrap();
    }
    check_xrc(&fake, 1);
    check_xrc(&fake, 2);
    assert_eq!(fake.sq_dbrec(), 3);
}

#[test]
fn flushed_sends_leave_a_uc_qp_in_error() {
    for qp_type in [QpType::Uc, QpType::Rc] {
        let fake = FakeQp::new(&QpCfg {
            qp_type,
            ..QpCfg::default()
        });
        let mut qp = rts(&fake);
        let mut fcq = FakeCq::new(16, 64, false);
        // SAFETY: `fcq` outlives the CQ.
        let mut cq = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
        for id in 0..2 {
            qp.post_send_inline(id, b"x", SendFlags::SIGNALED).unwrap();
        }
        // The control path moved the QP to Error; the device flushes what was outstanding.
        qp.set_state(QpState::Error);
        fcq.push(req_err(QPN, 0, op::OPCODE_SEND, FLUSH, 0));
        fcq.push(req_err(QPN, 1, op::OPCODE_SEND, FLUSH, 0));
        let mut wcs = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut qp, &mut wcs).unwrap(), 2);
        assert!(wcs[..2].iter().all(|w| w.status() == WcStatus::WrFlushErr));
        assert_eq!(
            qp.state(),
            QpState::Error,
            "{qp_type:?}: never out of Error"
        );
    }
}
