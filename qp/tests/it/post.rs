//! Posting against rings in ordinary memory: exact WQE bytes, doorbell record, BlueFlame
//! halves and toggling, the 8-byte doorbell, wrap, raw WQEs, the receive queue's segments
//! (the rules, misuse and a full queue: `post_rules.rs`).

use crate::common;

use common::{FakeQp, QpCfg};
use mlx5_hw::{QpState, QpType};
use mlx5_qp::{Error, Qp, RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge, UdDest};

pub(crate) fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    // These tests are about the ring's mechanics: one WR per block, as the literal layouts
    // were written for (the computed WR limit is tested in wr_limit.rs).
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
}
fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(b[off..off + 8].try_into().unwrap())
}

/// ctrl: `[0]=opmod [1..2]=wqe_index [3]=opcode [4..6]=qpn [7]=ds [11]=fm_ce_se [12..15]=imm`.
fn check_ctrl(b: &[u8], opmod: u8, idx: u16, opcode: u8, qpn: u32, ds: u8, fm_ce_se: u8) {
    assert_eq!(b[0], opmod, "opmod");
    assert_eq!(u16::from_be_bytes([b[1], b[2]]), idx, "wqe_index");
    assert_eq!(b[3], opcode, "opcode");
    assert_eq!(be32(b, 4) >> 8, qpn, "qpn");
    assert_eq!(b[7], ds, "ds");
    assert_eq!(b[8], 0, "signature");
    assert_eq!(b[11], fm_ce_se, "fm_ce_se");
}

#[test]
fn inline_write_goes_through_blueflame_and_toggles() {
    let mut fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let payload = *b"8 bytes!";
    qp.post(
        &SendWr::write(1, RemoteAddr::new(0x1122_3344_5566_7788, 0xabcd))
            .inline(&payload)
            .signaled(),
    )
    .unwrap();
    let b = fake.bb(0).to_vec();
    // 16 ctrl + 16 raddr + align16(4 + 8) = 48 bytes = 3 DS (`docs/sources.md` §2).
    check_ctrl(&b, 0, 0, 0x08, 0x1234, 3, 0x08);
    assert_eq!(be64(&b, 16), 0x1122_3344_5566_7788);
    assert_eq!(be32(&b, 24), 0xabcd);
    assert_eq!(be32(&b, 28), 0);
    assert_eq!(be32(&b, 32), 0x8000_0008);
    assert_eq!(&b[36..44], &payload);
    assert_eq!(fake.sq_dbrec(), 1, "dbrec[1] = next free PI");
    // One 64-byte block in the first half, the second half untouched.
    assert_eq!(&fake.bf()[..64], &fake.bf_line(0)[..]);
    assert!(fake.bf()[64..].iter().all(|&x| x == 0));
    assert_eq!(qp.bf_offset(), 256);

    fake.clear_bf();
    qp.post(&SendWr::send(2).inline(b"x")).unwrap();
    assert_eq!(&fake.bf()[256..320], &fake.bf_line(1)[..]);
    assert!(fake.bf()[..256].iter().all(|&x| x == 0));
    assert_eq!(qp.bf_offset(), 0);
    assert_eq!(fake.sq_dbrec(), 2);
}

#[test]
fn batch_rings_once_with_the_last_ctrl() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let sge = [Sge {
        addr: 0x1000,
        length: 100,
        lkey: 5,
    }];
    {
        let mut b = qp.batch();
        b.post(&SendWr::send(1).sges(&sge)).unwrap();
        b.post(&SendWr::send(2).sges(&sge)).unwrap();
        b.post(&SendWr::send(3).sges(&sge).signaled()).unwrap();
        assert_eq!(b.qp().pending_doorbell(), 3);
        assert_eq!(fake.sq_dbrec(), 0, "nothing announced inside the batch");
    }
    assert_eq!(qp.pending_doorbell(), 0);
    assert_eq!(fake.sq_dbrec(), 3);
    // 8-byte doorbell: ctrl bytes 0..7 of the LAST WQE (at PI 2) at the current half.
    assert_eq!(&fake.bf()[..8], &fake.bb(2)[..8]);
    assert!(fake.bf()[8..].iter().all(|&x| x == 0));
    assert_eq!(qp.bf_offset(), 256, "the half toggles in doorbell mode too");
    // ctrl + one data segment = 2 DS.
    check_ctrl(fake.bb(2), 0, 2, 0x0a, 0x1234, 2, 0x08);
    assert_eq!(be32(fake.bb(2), 16), 100);
    assert_eq!(be32(fake.bb(2), 20), 5);
    assert_eq!(be64(fake.bb(2), 24), 0x1000);
}

#[test]
fn deferred_posts_and_explicit_ring() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    qp.post_deferred(&SendWr::send(1).inline(b"a")).unwrap();
    assert_eq!(fake.sq_dbrec(), 0);
    qp.ring_doorbell();
    assert_eq!(fake.sq_dbrec(), 1);
    // A single pending WQE still goes through BlueFlame.
    assert_eq!(&fake.bf()[..64], &fake.bf_line(0)[..]);
    qp.ring_doorbell(); // nothing pending: no second write, no toggle
    assert_eq!(qp.bf_offset(), 256);
}

#[test]
fn without_blueflame_only_8_byte_doorbells() {
    let fake = FakeQp::new(&QpCfg {
        bf_size: 0,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    for i in 0..3u16 {
        qp.post(&SendWr::send(i as u64).inline(b"hello")).unwrap();
        assert_eq!(&fake.bf()[..8], &fake.bb(i as usize)[..8]);
        assert!(fake.bf()[8..].iter().all(|&x| x == 0));
        assert_eq!(qp.bf_offset(), 0);
    }
}

#[test]
fn wqe_larger_than_a_half_uses_the_doorbell() {
    let fake = FakeQp::new(&QpCfg {
        max_inline: 512,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let big = [0x5a; 300];
    qp.post(&SendWr::send(1).inline(&big)).unwrap();
    // 16 + align16(304) = 320 bytes = 5 blocks > 256.
    assert_eq!(qp.sq_pi(), 5);
    assert_eq!(&fake.bf()[..8], &fake.bb(0)[..8]);
    assert!(fake.bf()[8..].iter().all(|&x| x == 0));
    // Exactly 256 bytes (4 blocks) still goes through BlueFlame.
    let fit = [0x33; 236];
    qp.post(&SendWr::send(2).inline(&fit)).unwrap();
    assert_eq!(qp.sq_pi(), 9);
    assert_eq!(&fake.bf()[256..512], &fake.wqe(5, 4)[..]);
}

#[test]
fn inline_wraps_at_the_ring_end_and_blueflame_copies_the_logical_wqe() {
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 4,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    // Fill blocks 0..2 and retire them by hand through a completion-free reset of indices:
    // post three 1-block WQEs, then complete them with a CQE.
    for i in 0..3 {
        qp.post(&SendWr::send(i).inline(b"z")).unwrap();
    }
    let mut cq = common::FakeCq::new(8, 64, false);
    // SAFETY: `cq` (the fake CQ's memory) is declared before `c` and outlives it; `c` is its
    // only consumer.
    let mut c = unsafe { mlx5_qp::Cq::from_layout(&cq.layout) }.unwrap();
    cq.push(common::req(0x1234, 2, 0x0a));
    let mut wcs = [mlx5_qp::Wc::default(); 4];
    // The CQE names WQE 2: it gets the completion (rdma-core reports every CQE it polls; a
    // device writes one only for a signaled WQE), the unsignaled 0 and 1 before it are
    // retired silently.
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 1);
    assert_eq!((wcs[0].wr_id(), wcs[0].is_ok()), (2, true));
    assert_eq!(qp.sq_free_bbs(), 4);
    // Now a 2-block inline WRITE at block 3: ctrl+raddr at 192..224, inline header at 224,
    // 28 payload bytes to the ring end and the rest at the ring start.
    let payload: Vec<u8> = (0..60).collect();
    qp.post(&SendWr::write(9, RemoteAddr::new(0xdead_0000, 1)).inline(&payload))
        .unwrap();
    let ring = fake.sq.bytes();
    check_ctrl(&ring[192..], 0, 3, 0x08, 0x1234, 6, 0);
    assert_eq!(be32(ring, 224), 0x8000_0000 | 60);
    assert_eq!(&ring[228..256], &payload[..28]);
    assert_eq!(&ring[0..32], &payload[28..]);
    // The BF copy is the logically contiguous WQE: block 3, then block 0.
    assert_eq!(qp.bf_offset(), 0, "fourth post toggled back");
    assert_eq!(&fake.bf()[256..384], &fake.wqe(3, 2)[..]);
    assert_eq!(fake.sq_dbrec(), 5);
}

#[test]
fn masked_atomic_wqe_wraps_to_the_ring_start() {
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 4,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    for i in 0..3 {
        qp.post(&SendWr::send(i).inline(b"z")).unwrap();
    }
    let mut cq = common::FakeCq::new(8, 64, false);
    // SAFETY: `cq` (the fake CQ's memory) is declared before `c` and outlives it; `c` is its
    // only consumer.
    let mut c = unsafe { mlx5_qp::Cq::from_layout(&cq.layout) }.unwrap();
    cq.push(common::req(0x1234, 2, 0x0a));
    c.poll(&mut qp, &mut [mlx5_qp::Wc::default(); 1]).unwrap();
    let local = Sge {
        addr: 0x8000,
        length: 8,
        lkey: 3,
    };
    let op = SendOp::MaskedCompSwap64 {
        remote: RemoteAddr::new(0x4000, 2),
        local,
        compare: 0x1111,
        compare_mask: 0x2222,
        swap: 0x3333,
        swap_mask: 0x4444,
    };
    qp.post(&SendWr::new(5, op).signaled()).unwrap();
    let ring = fake.sq.bytes();
    // ctrl 192, raddr 208, the 32 operand bytes 224..256, the data segment wraps to 0..16.
    check_ctrl(&ring[192..], 0x09, 3, 0x14, 0x1234, 5, 0x08);
    assert_eq!(be64(ring, 224), 0x3333, "swap");
    assert_eq!(be64(ring, 232), 0x1111, "compare");
    assert_eq!(be64(ring, 240), 0x4444, "swap mask");
    assert_eq!(be64(ring, 248), 0x2222, "compare mask");
    assert_eq!(be32(ring, 0), 8, "data segment byte_count = operand size");
    assert_eq!(be32(ring, 4), 3);
    assert_eq!(be64(ring, 8), 0x8000);
    assert_eq!(qp.sq_pi(), 5);
}

#[test]
fn every_rc_opcode_has_its_segments() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let remote = RemoteAddr::new(0x10_0000, 0x99);
    let local = Sge {
        addr: 0x2000,
        length: 8,
        lkey: 7,
    };
    let sg = [local];
    let l4 = Sge { length: 4, ..local };
    // (wr, opcode, opmod, ds, imm)
    let cases: Vec<(SendWr, u8, u8, u8, u32)> = vec![
        (SendWr::send(0).sges(&sg), 0x0a, 0, 2, 0),
        (
            SendWr::send_imm(0, 0x1122_3344).sges(&sg),
            0x0b,
            0,
            2,
            0x1122_3344,
        ),
        (SendWr::write(0, remote).sges(&sg), 0x08, 0, 3, 0),
        (SendWr::write_imm(0, remote, 7).sges(&sg), 0x09, 0, 3, 7),
        (SendWr::read(0, remote).sges(&sg), 0x10, 0, 3, 0),
        (SendWr::comp_swap(0, remote, local, 1, 2), 0x11, 0, 4, 0),
        (SendWr::fetch_add(0, remote, local, 3), 0x12, 0, 4, 0),
        (
            SendWr::new(
                0,
                SendOp::MaskedCompSwap32 {
                    remote,
                    local: l4,
                    compare: 1,
                    compare_mask: 2,
                    swap: 3,
                    swap_mask: 4,
                },
            ),
            0x14,
            0x08,
            4,
            0,
        ),
        (
            SendWr::new(
                0,
                SendOp::MaskedFetchAdd32 {
                    remote,
                    local: l4,
                    add: 5,
                    field_boundary: 6,
                },
            ),
            0x15,
            0x08,
            4,
            0,
        ),
        (
            SendWr::new(
                0,
                SendOp::MaskedFetchAdd64 {
                    remote,
                    local,
                    add: 5,
                    field_boundary: 6,
                },
            ),
            0x15,
            0x09,
            4,
            0,
        ),
    ];
    for (i, (wr, opcode, opmod, ds, imm)) in cases.iter().enumerate() {
        let pi = qp.sq_pi();
        qp.post(wr).unwrap();
        let b = fake.bb(pi as usize % 16);
        check_ctrl(b, *opmod, pi, *opcode, 0x1234, *ds, 0);
        assert_eq!(be32(b, 12), *imm, "case {i}: immediate travels big-endian");
        if *opcode >= 0x08 && *opcode != 0x0a && *opcode != 0x0b {
            assert_eq!(be64(b, 16), 0x10_0000, "case {i}: raddr");
            assert_eq!(be32(b, 24), 0x99, "case {i}: rkey");
        }
        match *opcode {
            0x11 => {
                assert_eq!(be64(b, 32), 2, "swap");
                assert_eq!(be64(b, 40), 1, "compare");
                assert_eq!(be32(b, 48), 8);
            }
            0x12 => {
                assert_eq!(be64(b, 32), 3);
                assert_eq!(be64(b, 40), 0);
            }
            0x14 => {
                assert_eq!(
                    [be32(b, 32), be32(b, 36), be32(b, 40), be32(b, 44)],
                    [3, 1, 4, 2]
                );
                assert_eq!(be32(b, 48), 4, "operand size");
            }
            0x15 if *opmod == 0x08 => {
                assert_eq!(
                    [be32(b, 32), be32(b, 36), be32(b, 40), be32(b, 44)],
                    [5, 6, 0, 0]
                );
                assert_eq!(be32(b, 48), 4);
            }
            0x15 => {
                assert_eq!([be64(b, 32), be64(b, 40)], [5, 6]);
                assert_eq!(be32(b, 48), 8);
            }
            _ => {}
        }
        // Retire so the ring never fills (a fake completion is not needed: reset indices).
        if qp.sq_free_bbs() < 4 {
            qp.set_state(QpState::Reset);
            qp.set_state(QpState::Rts);
        }
    }
}

#[test]
fn flags_fence_solicited_and_sig_all() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    qp.post(&SendWr::send(0).flags(SendFlags::FENCE | SendFlags::SOLICITED))
        .unwrap();
    assert_eq!(fake.bb(0)[11], 0x80 | 0x02);
    qp.post(&SendWr::send(0).signaled().fence()).unwrap();
    assert_eq!(fake.bb(1)[11], 0x88);
    let fake2 = FakeQp::new(&QpCfg {
        sig_all: true,
        ..QpCfg::default()
    });
    let mut qp2 = rts(&fake2);
    qp2.post(&SendWr::send(0)).unwrap();
    assert_eq!(fake2.bb(0)[11], 0x08, "sq_sig_all signals every WQE");
}

#[test]
fn zero_length_sges_are_skipped_and_empty_inline_adds_no_segment() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let sg = [
        Sge {
            addr: 1,
            length: 0,
            lkey: 1,
        },
        Sge {
            addr: 2,
            length: 5,
            lkey: 2,
        },
        Sge {
            addr: 3,
            length: 0,
            lkey: 3,
        },
    ];
    qp.post(&SendWr::send(0).sges(&sg)).unwrap();
    assert_eq!(fake.bb(0)[7], 2);
    assert_eq!(be64(fake.bb(0), 24), 2);
    qp.post(&SendWr::send(0).inline(&[])).unwrap();
    assert_eq!(fake.bb(1)[7], 1);
    qp.post(&SendWr::send(0).inline_parts(&[b"ab", b"", b"cde"]))
        .unwrap();
    assert_eq!(be32(fake.bb(2), 16), 0x8000_0005);
    assert_eq!(&fake.bb(2)[20..25], b"abcde");
}

#[test]
fn ud_send_carries_the_address_vector() {
    let fake = FakeQp::new(&QpCfg {
        qp_type: QpType::Ud,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let mut av = [0u8; 48];
    for (i, b) in av.iter_mut().enumerate() {
        *b = i as u8;
    }
    let dest = UdDest::new(&av, 0xabcdef, 0x1111_2222);
    let sg = [Sge {
        addr: 0x500,
        length: 10,
        lkey: 4,
    }];
    qp.post(&SendWr::send_imm(0, 0xfeed).sges(&sg).ud(&dest))
        .unwrap();
    let w = fake.wqe(0, 2);
    // ctrl + 48-byte AV + data = 80 bytes = 5 DS, 2 blocks (`docs/sources.md` §2).
    check_ctrl(&w, 0, 0, 0x0b, 0x1234, 5, 0);
    assert_eq!(be32(&w, 16), 0x1111_2222, "Q_Key in the key's high word");
    assert_eq!(be32(&w, 20), 0);
    assert_eq!(
        be32(&w, 24),
        0x8000_0000 | 0xabcdef,
        "extended AV + destination QPN"
    );
    assert_eq!(&w[28..64], &av[12..48], "the rest of the AV is the AH's");
    assert_eq!(be32(&w, 64), 10);
    assert_eq!(qp.sq_pi(), 2);

    let compact = UdDest::compact(&av, 0x42, 7);
    qp.post(&SendWr::send(1).inline(b"hi").ud(&compact))
        .unwrap();
    let b = fake.bb(2);
    check_ctrl(b, 0, 2, 0x0a, 0x1234, 3, 0);
    assert_eq!(be32(b, 24), 0x42, "compact AV: extended bit clear");
    assert_eq!(&b[28..32], &av[12..16]);
    assert_eq!(be32(b, 32), 0x8000_0002);
}

#[test]
fn raw_wqe_gets_index_and_qpn() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    qp.post(&SendWr::send(0)).unwrap();
    let mut wqe = [0u8; 32];
    wqe[0] = 0;
    wqe[3] = 0x0a; // SEND
    wqe[7] = 2; // ds
    wqe[11] = 0x08;
    wqe[16..20].copy_from_slice(&7u32.to_be_bytes());
    wqe[1] = 0xff; // garbage index and QPN: overwritten
    wqe[4] = 0xff;
    qp.post_raw(77, &wqe).unwrap();
    check_ctrl(fake.bb(1), 0, 1, 0x0a, 0x1234, 2, 0x08);
    assert_eq!(be32(fake.bb(1), 16), 7);
    assert_eq!(
        &fake.bf()[256..320],
        &fake.bf_line(1)[..],
        "raw WQEs ring like any other"
    );
    wqe[7] = 3;
    assert!(matches!(qp.post_raw(1, &wqe), Err(Error::BadRawWqe(_))));
    // Issue 18: the device reads the whole DS byte (the software ConnectX, like the NIC, takes
    // all 8 bits of `qpn_ds`'s low byte), so bits 7:6 set are a different size, not the same.
    wqe[7] = 0x42;
    assert!(matches!(qp.post_raw(1, &wqe), Err(Error::BadRawWqe(_))));
    assert_eq!(qp.sq_pi(), 2, "nothing posted");
    assert!(matches!(
        qp.post_raw(1, &wqe[..20]),
        Err(Error::BadRawWqe(_))
    ));
}

#[test]
fn receive_queue_writes_segments_and_terminator() {
    let fake = FakeQp::new(&QpCfg {
        rq_cnt: 4,
        rq_stride: 64,
        max_recv_sge: 4,
        ..QpCfg::default()
    });
    // SAFETY: `fake` outlives the QP.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    let sg = [
        Sge {
            addr: 0x10,
            length: 32,
            lkey: 1,
        },
        Sge {
            addr: 0x20,
            length: 16,
            lkey: 2,
        },
    ];
    assert!(
        matches!(qp.post_recv(1, &sg), Err(Error::WrongState { .. })),
        "Reset"
    );
    qp.set_state(QpState::Init);
    qp.post_recv(1, &sg).unwrap();
    let r = fake.rq.bytes();
    assert_eq!([be32(r, 0), be32(r, 4)], [32, 1]);
    assert_eq!(be64(r, 8), 0x10);
    assert_eq!([be32(r, 16), be32(r, 20)], [16, 2]);
    assert_eq!(
        [be32(r, 32), be32(r, 36)],
        [0, 0x100],
        "terminator (MLX5_INVALID_LKEY)"
    );
    assert_eq!(fake.rq_dbrec(), 1);
    let wrs = [
        RecvWr {
            wr_id: 2,
            sges: &sg[..1],
        },
        RecvWr {
            wr_id: 3,
            sges: &[],
        },
    ];
    qp.post_recv_list(&wrs).unwrap();
    assert_eq!(fake.rq_dbrec(), 3);
    assert_eq!(
        be32(fake.rq.bytes(), 128 + 4),
        0x100,
        "empty receive: terminator first"
    );
    let five = [Sge::default(); 5];
    assert!(matches!(
        qp.post_recv(4, &five),
        Err(Error::TooManySges { given: 5, max: 4 })
    ));
    qp.post_recv(4, &[]).unwrap();
    assert_eq!(qp.post_recv(5, &[]), Err(Error::RqFull { capacity: 4 }));
    // All or nothing: a list that does not fit writes nothing.
    assert_eq!(fake.rq_dbrec(), 4);
}
