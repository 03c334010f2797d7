//! Decoder tests: field-by-field decodes of known WQEs and CQEs, every error path, and a
//! seeded property test that no input makes the decoder panic.

use mlx5_wqe as w;
use proptest::prelude::*;
use zerocopy::IntoBytes;

use super::*;

fn rc() -> Options {
    Options::default()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn raw(r: &Report, name: &str) -> Vec<u8> {
    r.field(name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .raw
        .clone()
}

fn meaning(r: &Report, name: &str) -> String {
    r.field(name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .meaning
        .clone()
}

#[test]
fn hex_input_forms() {
    let want = vec![0x5a, 0x12, 0x34, 0x08];
    for text in [
        "5a 12 34 08",
        "0x5a,0x12,0x34,0x08",
        "5a123408",
        "5A12\n3408\n",
        "0X5a12 # c\n 3408 #x",
    ] {
        assert_eq!(parse_hex(text), Ok(want.clone()), "{text:?}");
    }
    assert_eq!(
        parse_hex("00 1\n"),
        Err(Error::OddDigits {
            line: 1,
            token: "1".into()
        })
    );
    assert_eq!(
        parse_hex("00\n0xzz"),
        Err(Error::NotHex {
            line: 2,
            token: "0xzz".into()
        })
    );
    assert_eq!(
        parse_hex("0x"),
        Err(Error::NotHex {
            line: 1,
            token: "0x".into()
        })
    );
    assert_eq!(decode(Kind::Send, &[], &rc()).unwrap_err(), Error::Empty);
}

#[test]
fn rc_write_inline_field_by_field() {
    let mut inl = w::InlineHdr::new(8).as_bytes().to_vec();
    inl.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]);
    let b = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0x10)
            .opcode(w::OPCODE_RDMA_WRITE)
            .qpn(0x123)
            .fm_ce_se(w::CTRL_CQ_UPDATE)
            .ds(3)
            .build()
            .as_bytes(),
        w::RaddrSeg::new(0x7f00_0000_1000, 0x1234).as_bytes(),
        &inl,
    ]);
    let r = decode(Kind::Send, &b, &rc()).unwrap();
    assert_eq!(raw(&r, "ctrl.opcode"), [0x08]);
    assert_eq!(meaning(&r, "ctrl.opcode"), "0x08 RDMA_WRITE");
    assert_eq!(raw(&r, "ctrl.wqe_index"), [0x00, 0x10]);
    assert_eq!(raw(&r, "ctrl.qpn"), [0x00, 0x01, 0x23]);
    assert_eq!(r.field("ctrl.fm_ce_se").unwrap().offset, 11);
    assert!(meaning(&r, "ctrl.fm_ce_se").starts_with("CQ_UPDATE ("));
    assert_eq!(
        meaning(&r, "raddr.raddr"),
        "remote address 0x00007f0000001000"
    );
    assert_eq!(r.field("raddr.rkey").unwrap().offset, 24);
    assert_eq!(meaning(&r, "inline.byte_count"), "INLINE_SEG | 8 bytes");
    assert_eq!(raw(&r, "inline.data"), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(r.field("inline.pad").unwrap().offset, 44);
    assert!(r.summary.contains("3 DS = 48 bytes = 1 basic block"));
    let text = r.to_string();
    assert!(text.contains("0x00b  08"), "{text}");
}

#[test]
fn fm_ce_se_names() {
    assert!(names::fm_ce_se(0x8a).starts_with("CQ_UPDATE|SOLICITED|FENCE ("));
    assert!(names::fm_ce_se(0x28).starts_with("CQ_UPDATE|INITIATOR_SMALL_FENCE ("));
    assert!(names::fm_ce_se(0x60).starts_with("STRONG_ORDERING ("));
    assert!(names::fm_ce_se(0x00).starts_with("0 (CQE only on error"));
    assert!(names::fm_ce_se(0x11).contains("RSVD_BIT0|RSVD_BIT4"));
}

#[test]
fn send_with_sges_and_immediate() {
    let imm = 0xcafe_babe;
    let b = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(1)
            .opcode(w::OPCODE_SEND_IMM)
            .qpn(0x42)
            .fm_ce_se(0x0a)
            .ds(3)
            .imm(imm)
            .build()
            .as_bytes(),
        w::DataSeg::new(0x100, 0x77, 0x1000).as_bytes(),
        w::DataSeg::new(0x200, 0x78, 0x2000).as_bytes(),
    ]);
    let r = decode(Kind::Send, &b, &rc()).unwrap();
    assert_eq!(
        meaning(&r, "ctrl.imm"),
        "immediate ca fe ba be (network order)"
    );
    let lkeys: Vec<_> = r.fields("data.lkey").map(|f| f.meaning.clone()).collect();
    assert_eq!(lkeys, ["lkey 0x00000077", "lkey 0x00000078"]);
    assert_eq!(r.fields("data.addr").nth(1).unwrap().offset, 40);
}

#[test]
fn atomics() {
    let cas = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0)
            .opcode(w::OPCODE_ATOMIC_CS)
            .qpn(1)
            .fm_ce_se(8)
            .ds(4)
            .build()
            .as_bytes(),
        w::RaddrSeg::new(0x8000, 5).as_bytes(),
        w::AtomicSeg::cas(1, 2).as_bytes(),
        w::DataSeg::new(8, 6, 0x9000).as_bytes(),
    ]);
    let r = decode(Kind::Send, &cas, &rc()).unwrap();
    assert_eq!(
        meaning(&r, "atomic.swap_add"),
        "swap value 0x0000000000000002"
    );
    assert_eq!(
        meaning(&r, "atomic.compare"),
        "compare value 0x0000000000000001"
    );

    let m64 = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0)
            .opcode(w::OPCODE_ATOMIC_MASKED_CS)
            .opmod(w::OPMOD_EXT_ATOMIC_64)
            .qpn(1)
            .fm_ce_se(8)
            .ds(5)
            .build()
            .as_bytes(),
        w::RaddrSeg::new(0x8000, 5).as_bytes(),
        w::MaskedCs64Seg::new(1, 2, 3, 4).as_bytes(),
        w::DataSeg::new(8, 6, 0x9000).as_bytes(),
    ]);
    let r = decode(Kind::Send, &m64, &rc()).unwrap();
    assert_eq!(
        meaning(&r, "matomic.compare_mask"),
        "compare mask 0x0000000000000002"
    );
    assert_eq!(r.field("data.byte_count").unwrap().offset, 64);

    let m32 = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0)
            .opcode(w::OPCODE_ATOMIC_MASKED_FA)
            .opmod(w::OPMOD_EXT_ATOMIC_32)
            .qpn(1)
            .fm_ce_se(8)
            .ds(4)
            .build()
            .as_bytes(),
        w::RaddrSeg::new(0x8000, 5).as_bytes(),
        w::MaskedFa32Seg::new(7, 0x8000_0000).as_bytes(),
        w::DataSeg::new(4, 6, 0x9000).as_bytes(),
    ]);
    let r = decode(Kind::Send, &m32, &rc()).unwrap();
    assert_eq!(
        meaning(&r, "matomic.field_boundary"),
        "field boundary 0x80000000"
    );

    let mut bad = m32.clone();
    bad[0] = 0x0a;
    assert_eq!(
        decode(Kind::Send, &bad, &rc()).unwrap_err(),
        Error::UnknownAtomicOpmod(0x0a)
    );
}

#[test]
fn ud_compact_and_full_av() {
    let mut av = w::AvSeg::new(
        0,
        0,
        true,
        0,
        0,
        0xc000,
        [2, 0, 0, 0, 0, 1],
        0,
        64,
        3 << 20,
        [0; 16],
    );
    av.set_ud_dest(0x222, 0x1111_1111);
    let ud = Options {
        qp_type: QpType::Ud,
        ..Options::default()
    };
    let full = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0)
            .opcode(w::OPCODE_SEND)
            .qpn(0x100)
            .fm_ce_se(8)
            .ds(5)
            .build()
            .as_bytes(),
        av.as_bytes(),
        w::DataSeg::new(64, 9, 0xa000).as_bytes(),
    ]);
    let r = decode(Kind::Send, &full, &ud).unwrap();
    assert_eq!(
        meaning(&r, "av.dqp_dct"),
        "EXTENDED_UD_AV | destination QP 0x000222"
    );
    assert_eq!(
        meaning(&r, "av.grh_gid_fl"),
        "SGID index 3, flow label 0x00000"
    );
    assert_eq!(r.field("data.lkey").unwrap().offset, 68);

    let mut compact = av.as_bytes()[..16].to_vec();
    compact[8] &= 0x7f;
    let small = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0)
            .opcode(w::OPCODE_SEND)
            .qpn(0x100)
            .fm_ce_se(8)
            .ds(3)
            .build()
            .as_bytes(),
        &compact,
        w::DataSeg::new(64, 9, 0xa000).as_bytes(),
    ]);
    let r = decode(Kind::Send, &small, &ud).unwrap();
    assert!(r.field("av.rgid").is_none());
    assert_eq!(meaning(&r, "av.qkey"), "Q_Key 0x11111111");
    assert_eq!(r.field("data.lkey").unwrap().offset, 36);

    // The full AV claims 48 bytes but the DS count leaves only 32 after ctrl.
    let mut short = full.clone();
    short[7] = 3;
    match decode(Kind::Send, &short, &ud).unwrap_err() {
        Error::Truncated {
            offset: 16,
            need: 48,
            have: 32,
            ..
        } => {}
        e => panic!("{e}"),
    }
}

#[test]
fn send_errors() {
    let ok = cat(&[
        w::CtrlSeg::builder()
            .wqe_index(0)
            .opcode(w::OPCODE_SEND)
            .qpn(1)
            .fm_ce_se(8)
            .ds(2)
            .build()
            .as_bytes(),
        w::DataSeg::new(1, 2, 3).as_bytes(),
    ]);
    // DS count beyond the bytes given.
    assert_eq!(
        decode(Kind::Send, &ok[..24], &rc()).unwrap_err(),
        Error::DsBeyondInput {
            ds: 2,
            need: 32,
            have: 24
        }
    );
    // Shorter than a ctrl segment.
    assert!(matches!(
        decode(Kind::Send, &ok[..10], &rc()),
        Err(Error::Truncated {
            need: 16,
            have: 10,
            ..
        })
    ));
    // Unknown opcode.
    let mut b = ok.clone();
    b[3] = 0x02;
    assert_eq!(
        decode(Kind::Send, &b, &rc()).unwrap_err(),
        Error::UnknownOpcode(0x02)
    );
    // DS 0.
    let mut b = ok.clone();
    b[7] = 0;
    assert_eq!(decode(Kind::Send, &b, &rc()).unwrap_err(), Error::ZeroDs);
    // An inline length running past the DS count.
    let mut b = ok.clone();
    b[16..20].copy_from_slice(w::InlineHdr::new(40).as_bytes());
    assert!(matches!(
        decode(Kind::Send, &b, &rc()),
        Err(Error::Truncated {
            offset: 16,
            need: 44,
            have: 16,
            ..
        })
    ));
    // Trailing bytes are a note, not an error.
    let mut b = ok.clone();
    b.extend_from_slice(&[0; 32]);
    let r = decode(Kind::Send, &b, &rc()).unwrap();
    assert_eq!(r.notes.len(), 1);
    // Every error is one line.
    for e in [
        Error::ZeroDs,
        Error::UnknownOpcode(2),
        Error::DsBeyondInput {
            ds: 2,
            need: 32,
            have: 24,
        },
    ] {
        assert!(!e.to_string().contains('\n'));
    }
}

#[test]
fn receive_and_srq() {
    let b = cat(&[
        w::DataSeg::new(4096, 0x42, 0x2000).as_bytes(),
        w::DataSeg::terminator().as_bytes(),
    ]);
    let r = decode(Kind::Recv, &b, &rc()).unwrap();
    assert!(r
        .summary
        .starts_with("receive WQE: 1 scatter entr(ies) in 2 slot(s)"));
    assert_eq!(
        r.fields("data.lkey").nth(1).unwrap().meaning,
        "MLX5_INVALID_LKEY: the scatter list ends here"
    );
    let three = Options {
        sges: Some(3),
        ..Options::default()
    };
    assert!(matches!(
        decode(Kind::Recv, &b, &three),
        Err(Error::Truncated { offset: 32, .. })
    ));
    assert!(matches!(
        decode(Kind::Recv, &b[..20], &rc()),
        Err(Error::Length { got: 20, .. })
    ));

    let mut next = w::SrqNextSeg::default();
    next.set_next(5);
    let s = cat(&[next.as_bytes(), &b]);
    let r = decode(Kind::Srq, &s, &rc()).unwrap();
    assert_eq!(meaning(&r, "next.next_wqe_index"), "next free WQE 5");
    assert_eq!(r.field("data.byte_count").unwrap().offset, 16);
}

#[test]
fn cqes() {
    let mut e = [0u8; 64];
    e[54] = 0x81;
    e[55] = 0x15;
    e[56..60].copy_from_slice(&[0x08, 0x00, 0x01, 0x23]);
    e[61] = 3;
    e[63] = 0xd3;
    let r = decode(Kind::Cqe, &e, &rc()).unwrap();
    assert!(
        r.summary
            .contains("TRANSPORT_RETRY_EXC_ERR -> IBV_WC_RETRY_EXC_ERR (12)"),
        "{}",
        r.summary
    );
    assert_eq!(
        meaning(&r, "err.op_own"),
        "opcode 13 REQ_ERR, format 0 (no inline data), SE 1, owner 1"
    );
    assert_eq!(
        meaning(&r, "err.s_wqe_opcode_qpn"),
        "send opcode 0x08 RDMA_WRITE, QP 0x000123"
    );
    assert_eq!(r.field("err.syndrome").unwrap().offset, 55);

    let mut ok = [0u8; 64];
    ok[44..48].copy_from_slice(&4096u32.to_be_bytes());
    ok[56..60].copy_from_slice(&[0x00, 0x00, 0x00, 0x42]);
    ok[63] = 0x20;
    let r = decode(Kind::Cqe, &ok, &rc()).unwrap();
    assert_eq!(meaning(&r, "cqe.byte_cnt"), "4096 bytes");
    assert!(r.summary.starts_with("CQE: RESP_SEND on QP 0x000042"));

    // 128-byte CQE: the 64-byte CQE is the second half.
    let mut big = vec![0u8; 64];
    big.extend_from_slice(&ok);
    let r = decode(
        Kind::Cqe,
        &big,
        &Options {
            cqe_size: 128,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(r.field("cqe.op_own").unwrap().offset, 127);
    assert!(matches!(
        decode(Kind::Cqe, &big, &rc()),
        Err(Error::Length { got: 128, .. })
    ));

    // Unknown opcode, never-written entry.
    ok[63] = 0x70;
    assert_eq!(
        decode(Kind::Cqe, &ok, &rc()).unwrap_err(),
        Error::UnknownCqeOpcode(7)
    );
    ok[63] = 0xf0;
    assert_eq!(decode(Kind::Cqe, &ok, &rc()).unwrap().notes.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d6c_7835), ..ProptestConfig::default() })]

    /// Arbitrary bytes never make the decoder panic, whatever the kind and options.
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), k in 0usize..4, q in 0usize..4, sges in proptest::option::of(1usize..8), big in any::<bool>()) {
        let kind = [Kind::Send, Kind::Recv, Kind::Srq, Kind::Cqe][k];
        let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Xrc][q];
        let opts = Options { qp_type, cqe_size: if big { 128 } else { 64 }, sges };
        if let Ok(r) = decode(kind, &bytes, &opts) {
            let _ = r.to_string();
        }
    }

    /// Any well-formed RC WRITE with data segments decodes to the values that went in.
    #[test]
    fn write_roundtrip(pi in any::<u16>(), qpn in 0u32..1 << 24, raddr in any::<u64>(), rkey in any::<u32>(), n in 1usize..4) {
        let mut b = w::CtrlSeg::builder().wqe_index(pi).opcode(w::OPCODE_RDMA_WRITE).qpn(qpn).fm_ce_se(8).ds(2 + n as u8).build().as_bytes().to_vec();
        b.extend_from_slice(w::RaddrSeg::new(raddr, rkey).as_bytes());
        for i in 0..n {
            b.extend_from_slice(w::DataSeg::new(i as u32, 7, raddr ^ i as u64).as_bytes());
        }
        let r = decode(Kind::Send, &b, &rc()).unwrap();
        prop_assert_eq!(raw(&r, "ctrl.wqe_index"), pi.to_be_bytes().to_vec());
        prop_assert_eq!(raw(&r, "ctrl.qpn"), qpn.to_be_bytes()[1..].to_vec());
        prop_assert_eq!(raw(&r, "raddr.raddr"), raddr.to_be_bytes().to_vec());
        prop_assert_eq!(r.fields("data.addr").count(), n);
    }
}
