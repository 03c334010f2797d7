//! The lean entry points and the doorbell: each doorbell mode rings as named, a mode change
//! rings what is pending first, the gate leaves what it does not count to the generic path, a
//! shared or 8-byte aligned BlueFlame register, a forgotten batch.

use crate::common;
use crate::lean::qp_in;

use common::{FakeQp, QpCfg};
use mlx5_hw::QpState;
use mlx5_qp::{DoorbellMode, Error, RemoteAddr, SendFlags, SendWr, SqLimit};

#[test]
fn an_8_byte_aligned_blueflame_register_still_gets_the_block() {
    let mut fake = FakeQp::new(&QpCfg::default());
    // SAFETY: 0x808 + two 256-byte halves stay inside the 4 KiB page.
    fake.layout.bf.reg = unsafe { fake.uar.ptr().add(0x808) };
    let mut qp = qp_in(&fake, QpState::Rts);
    qp.post_write_inline(1, b"12345678", RemoteAddr::new(1, 2), SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(&fake.uar.bytes()[0x808..0x848], fake.bb(0));
    assert_eq!(qp.bf_offset(), 256);
}

#[test]
fn doorbell_modes_ring_as_named() {
    let remote = RemoteAddr::new(0x1000, 5);
    // BfPost (the default) and Bf write the same line; Db writes ctrl bytes 0..8 to the
    // current half, and every mode toggles the half.
    for (mode, bf) in [
        (DoorbellMode::BfPost, true),
        (DoorbellMode::Bf, true),
        (DoorbellMode::Db, false),
    ] {
        let mut fake = FakeQp::new(&QpCfg {
            max_inline: 60,
            ..QpCfg::default()
        });
        let mut qp = qp_in(&fake, QpState::Rts);
        assert_eq!(qp.doorbell_mode(), DoorbellMode::BfPost, "the default");
        qp.set_doorbell_mode(mode).unwrap();
        assert_eq!(qp.doorbell_mode(), mode);
        for i in 0..3u16 {
            fake.clear_bf();
            let r = qp.post_write_inline(i as u64, b"12345678", remote, SendFlags::SIGNALED);
            assert_eq!(r, Ok(()), "{mode:?}, post {i}");
            let half = (i as usize % 2) * 256;
            let line = &fake.bf()[half..half + 64];
            if bf {
                assert_eq!(line, &fake.bf_line(i as usize)[..], "{mode:?}");
            } else {
                assert_eq!(&line[..8], &fake.bb(i as usize)[..8], "{mode:?}");
                assert!(line[8..].iter().all(|&x| x == 0), "{mode:?}");
            }
            assert_eq!(fake.sq_dbrec(), i as u32 + 1);
            assert_eq!(qp.bf_offset() as usize, 256 - half, "{mode:?} toggles");
        }
    }
    // Without BlueFlame registers only Db exists.
    let fake = FakeQp::new(&QpCfg {
        bf_size: 0,
        ..QpCfg::default()
    });
    let mut qp = qp_in(&fake, QpState::Rts);
    assert_eq!(qp.doorbell_mode(), DoorbellMode::Db);
    assert!(matches!(
        qp.set_doorbell_mode(DoorbellMode::BfPost),
        Err(Error::BadLayout(_))
    ));
    assert!(matches!(
        qp.set_doorbell_mode(DoorbellMode::Bf),
        Err(Error::BadLayout(_))
    ));
    qp.set_doorbell_mode(DoorbellMode::Db).unwrap();
}

#[test]
fn changing_the_mode_rings_what_is_pending_first() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, QpState::Rts);
    qp.post_deferred(&SendWr::send(1).inline(b"x")).unwrap();
    assert_eq!(fake.sq_dbrec(), 0);
    qp.set_doorbell_mode(DoorbellMode::Db).unwrap();
    assert_eq!(qp.pending_doorbell(), 0);
    assert_eq!(fake.sq_dbrec(), 1);
    assert_eq!(
        &fake.bf()[..64],
        &fake.bf_line(0)[..],
        "rung in the old mode (BlueFlame)"
    );
}

#[test]
fn the_lean_gate_counts_blocks_and_leaves_the_rest_to_the_generic_path() {
    // 16 blocks, at most 8 WRs: a lean WQE may take 2 blocks; the gate lets a lean post
    // through while fewer than 8 blocks are outstanding, and the generic path takes the
    // rest up to 8 WRs, whatever their blocks.
    let cfg = QpCfg {
        sq_bbs: 16,
        ..QpCfg::default()
    };
    let fake = FakeQp::new(&cfg);
    let mut qp = qp_in(&fake, QpState::Rts);
    qp.set_max_send_wr(8).unwrap();
    let remote = RemoteAddr::new(0x10, 1);
    let long = [7u8; 40]; // ctrl + raddr + 4 + 40 = 76 bytes: two blocks
    for i in 0..5u64 {
        qp.post_write_inline(i, &long, remote, SendFlags::empty())
            .unwrap();
    }
    assert_eq!((qp.sq_outstanding_bbs(), qp.sq_outstanding_wrs()), (10, 5));
    for i in 5..8u64 {
        qp.post_write_inline(i, b"1", remote, SendFlags::empty())
            .unwrap();
    }
    assert_eq!((qp.sq_outstanding_bbs(), qp.sq_outstanding_wrs()), (13, 8));
    assert!(matches!(
        qp.post_write_inline(8, b"1", remote, SendFlags::empty()),
        Err(Error::SqFull {
            limit: SqLimit::WorkRequests,
            ..
        })
    ));
    assert_eq!(qp.sq_free_wrs(), 0);
}

/// A BlueFlame register shared with other QPs (`BfLayout::shared`) is rung with the 8-byte
/// doorbell only: two threads' unserialised BlueFlame copies into one register would
/// interleave. The default mode is `Db`, the BlueFlame modes are refused, and an inline post
/// that would take BlueFlame on a dedicated register writes only the first 8 bytes.
#[test]
fn a_shared_blueflame_register_gets_only_the_8_byte_doorbell() {
    let fake = FakeQp::new(&QpCfg {
        bf_shared: true,
        ..QpCfg::default()
    });
    let mut qp = qp_in(&fake, QpState::Rts);
    assert_eq!(qp.doorbell_mode(), DoorbellMode::Db);
    for mode in [DoorbellMode::BfPost, DoorbellMode::Bf] {
        assert!(matches!(
            qp.set_doorbell_mode(mode),
            Err(Error::BadLayout(_))
        ));
        assert_eq!(qp.doorbell_mode(), DoorbellMode::Db);
    }
    qp.post(
        &SendWr::write(1, RemoteAddr::new(0x2000, 9))
            .inline(b"8 bytes!")
            .signaled(),
    )
    .unwrap();
    assert_eq!(&fake.bf()[..8], &fake.bb(0)[..8], "the 8-byte doorbell");
    assert!(fake.bf()[8..].iter().all(|&x| x == 0), "no BlueFlame copy");
    let mut b = qp.batch();
    b.post(&SendWr::send(2).inline(b"x")).unwrap();
    drop(b);
    assert!(
        fake.bf()[256 + 8..512].iter().all(|&x| x == 0),
        "a batch of one: no copy"
    );
}

/// A batch guard forgotten (`mem::forget`) after lean posts leaves them pending, never lost:
/// the next post takes the generic path, which rings for them and itself (one doorbell record
/// update to the newest producer index), and the lean path opens again after it.
#[test]
fn a_forgotten_batch_is_rung_by_the_next_post() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, QpState::Rts);
    qp.set_max_send_wr(16).unwrap();
    let r = RemoteAddr::new(0x2000, 9);
    let mut b = qp.batch();
    b.post(&SendWr::write(1, r).inline(b"a")).unwrap();
    b.post(&SendWr::write(2, r).inline(b"b")).unwrap();
    std::mem::forget(b);
    assert_eq!(qp.pending_doorbell(), 2);
    assert_eq!(fake.sq_dbrec(), 0, "nothing announced yet");
    qp.post(&SendWr::write(3, r).inline(b"c").signaled())
        .unwrap();
    assert_eq!(qp.pending_doorbell(), 0);
    assert_eq!(fake.sq_dbrec(), 3, "all three announced");
    assert_eq!(
        &fake.bf()[..8],
        &fake.bb(2)[..8],
        "the 8-byte doorbell of the last WQE"
    );
    // The lean path is open again: a BlueFlame copy of the next one, in the other half.
    qp.post(&SendWr::write(4, r).inline(b"d").signaled())
        .unwrap();
    assert_eq!(fake.sq_dbrec(), 4);
    assert_eq!(
        &fake.bf()[256..256 + 48],
        &fake.bb(3)[..48],
        "ctrl, raddr, inline: 3 DS"
    );
}
