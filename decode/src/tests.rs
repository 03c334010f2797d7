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

/// A ctrl segment from its fields in host order (`imm` too).
fn ctrl(pi: u16, opcode: u8, opmod: u8, qpn: u32, flags: u8, ds: u8, imm: u32) -> w::CtrlSeg {
    w::CtrlSeg::builder()
        .wqe_index(pi)
        .opcode(opcode)
        .opmod(opmod)
        .qpn(qpn)
        .fm_ce_se(flags)
        .ds(ds)
        .imm(imm)
        .build()
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

fn sample(name: &str) -> Vec<u8> {
    let path = format!("{}/../docs/samples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse_hex(&text).unwrap()
}

fn completions(r: &Report) -> Vec<String> {
    r.sections
        .iter()
        .flat_map(|s| &s.fields)
        .filter(|f| f.name.starts_with("completion["))
        .map(|f| f.meaning.clone())
        .collect()
}

fn zip(z: Zip) -> Options {
    Options {
        zip: z,
        ..Options::default()
    }
}

/// A 64-byte CQE with the given op_own, QPN, WQE counter and byte count.
fn cqe(op_own: u8, qpn: u32, send_opcode: u8, counter: u16, bytes: u32) -> [u8; 64] {
    let mut q = [0u8; 64];
    q[44..48].copy_from_slice(&bytes.to_be_bytes());
    q[56..60].copy_from_slice(&((send_opcode as u32) << 24 | qpn).to_be_bytes());
    q[60..62].copy_from_slice(&counter.to_be_bytes());
    q[63] = op_own;
    q
}

#[test]
fn added_send_opcodes_are_named_and_their_segments_shown_raw() {
    use crate::opcode as o;
    for (op, name) in [
        (o::WAIT, "WAIT"),
        (o::SEND_EN, "SEND_EN"),
        (o::SET_PSV, "SET_PSV"),
        (o::GET_PSV, "GET_PSV"),
        (o::CHECK_PSV, "CHECK_PSV"),
        (o::DUMP, "DUMP"),
        (o::RGET_PSV, "RGET_PSV"),
        (o::RCHECK_PSV, "RCHECK_PSV"),
        (o::TAG_MATCHING, "TAG_MATCHING"),
        (o::ENHANCED_MPSW, "ENHANCED_MPSW"),
        (o::FLOW_TBL_ACCESS, "FLOW_TBL_ACCESS"),
        (o::ACCESS_ASO, "ACCESS_ASO"),
        (o::MMO, "MMO"),
    ] {
        assert_eq!(send_opcode_name(op), Some(name));
        let b = cat(&[ctrl(0, op, 0, 7, 8, 2, 0).as_bytes(), &[0xab; 16]]);
        let r = decode(Kind::Send, &b, &rc()).unwrap();
        assert_eq!(meaning(&r, "ctrl.opcode"), format!("{op:#04x} {name}"));
        let seg = r.field("raw").unwrap();
        assert_eq!((seg.offset, seg.raw.len()), (16, 16), "{name}");
        assert!(r.sections[1].title.contains("not decoded"), "{name}");
        // A requester CQE of that WQE names the opcode too.
        let q = cqe(0x00, 7, op, 0, 0);
        let r = decode(Kind::Cqe, &q, &rc()).unwrap();
        assert!(
            meaning(&r, "cqe.sop_drop_qpn").contains(name),
            "{}",
            meaning(&r, "cqe.sop_drop_qpn")
        );
    }
    // The opcodes mlx5_wqe builds keep their names; gaps stay unknown.
    assert_eq!(send_opcode_name(w::OPCODE_UMR), Some("UMR"));
    for gap in [0x02, 0x13, 0x16, 0x1a, 0x24, 0x2a, 0x30, 0xff] {
        assert_eq!(send_opcode_name(gap), None, "{gap:#x}");
    }
}

#[test]
fn xrc_bind_and_local_inv_carry_no_xrc_segment() {
    let xrc = Options {
        qp_type: QpType::Xrc,
        ..Options::default()
    };
    // rdma-core posts IBV_WR_LOCAL_INV as a UMR WQE without the XRC segment.
    let umr = cat(&[
        ctrl(0, w::OPCODE_UMR, 0, 9, 8, 2, 0x1234_5600).as_bytes(),
        &[0; 16],
    ]);
    let r = decode(Kind::Send, &umr, &xrc).unwrap();
    assert!(r.field("xrc.xrc_srqn").is_none());
    assert_eq!(r.field("raw").unwrap().offset, 16);
    assert!(r.notes[0].contains("no XRC segment"), "{:?}", r.notes);
    // A SEND on the same QP has it.
    let mut seg = [0u8; 16];
    seg[..4].copy_from_slice(&0x77u32.to_be_bytes());
    let send = cat(&[
        ctrl(0, w::OPCODE_SEND, 0, 9, 8, 3, 0).as_bytes(),
        &seg,
        w::DataSeg::new(1, 2, 3).as_bytes(),
    ]);
    let r = decode(Kind::Send, &send, &xrc).unwrap();
    assert_eq!(meaning(&r, "xrc.xrc_srqn"), "XRC SRQ 0x000077");
    assert_eq!(r.field("data.lkey").unwrap().offset, 36);
}

#[test]
fn signature_error_cqe_field_by_field() {
    let b = sample("cqe-sig-err.hex");
    let r = decode(Kind::Cqe, &b, &rc()).unwrap();
    assert!(r
        .summary
        .starts_with("signature-error CQE: mkey 0x00abcd12"));
    assert!(r.summary.ends_with("completes no work request"));
    assert_eq!(meaning(&r, "sigerr.syndrome"), "0x0800 (REFTAG)");
    assert_eq!(r.field("sigerr.syndrome").unwrap().offset, 32);
    assert_eq!(raw(&r, "sigerr.expected_ref_tag"), [0, 0, 0x10, 0]);
    assert_eq!(raw(&r, "sigerr.actual_ref_tag"), [0, 0, 0x10, 1]);
    assert!(meaning(&r, "sigerr.domain").starts_with("1 (memory domain)"));
    assert_eq!(r.field("sigerr.mkey").unwrap().offset, 36);
    assert_eq!(
        meaning(&r, "sigerr.sig_err_offset"),
        "offset of the bad block 0x200"
    );
    assert!(r.notes[0].contains("must consume it"));
    // Several syndrome bits, and bits no source names.
    let mut q = [0u8; 64];
    q[32..34].copy_from_slice(&0x3800u16.to_be_bytes());
    q[63] = 0xc1;
    let r = decode(Kind::Cqe, &q, &rc()).unwrap();
    assert_eq!(
        meaning(&r, "sigerr.syndrome"),
        "0x3800 (REFTAG|APPTAG|GUARD)"
    );
    q[32..34].copy_from_slice(&0x0001u16.to_be_bytes());
    let r = decode(Kind::Cqe, &q, &rc()).unwrap();
    assert_eq!(meaning(&r, "sigerr.syndrome"), "0x0001 (unknown bits)");
    // In a run of slots it completes nothing: the REQ CQEs around it do.
    let ring = cat(&[&cqe(0x00, 5, 8, 1, 0), &b, &cqe(0x00, 5, 8, 2, 0)]);
    let r = decode(Kind::Cq, &ring, &rc()).unwrap();
    assert_eq!(
        completions(&r),
        [
            "slot 0: REQ on QP 0x000005, WQE counter 0x0001, 0 bytes",
            "slot 2: REQ on QP 0x000005, WQE counter 0x0002, 0 bytes"
        ]
    );
    assert!(r
        .sections
        .iter()
        .any(|s| s.title.starts_with("slot 1: signature-error CQE")));
}

#[test]
fn basic_compressed_session_expands_into_its_completions() {
    let b = sample("cq-zip-basic.hex");
    let r = decode(Kind::Cq, &b, &rc()).unwrap();
    assert_eq!(
        completions(&r),
        [
            "slot 0: REQ 0x10 RDMA_READ on QP 0x000123, WQE counter 0x0010, 64 bytes (mini-CQE)",
            "slot 1: REQ 0x10 RDMA_READ on QP 0x000123, WQE counter 0x0011, 64 bytes (mini-CQE)",
            "slot 2: REQ 0x10 RDMA_READ on QP 0x000123, WQE counter 0x0012, 64 bytes (mini-CQE)",
        ]
    );
    assert_eq!(
        meaning(&r, "cqe.byte_cnt"),
        "3 completions in this compression session (basic layout)"
    );
    let counters: Vec<usize> = r.fields("mini.wqe_counter").map(|f| f.offset).collect();
    assert_eq!(counters, [64, 72, 80]);
    assert_eq!(r.field("mini.s_wqe_opcode").unwrap().offset, 66);
    assert_eq!(r.field("session.hole").unwrap().offset, 128);
    // The title alone, as one CQE.
    let r = decode(Kind::Cqe, &b[..64], &rc()).unwrap();
    assert!(r
        .summary
        .starts_with("compressed session title (basic layout): REQ"));
    assert!(r
        .summary
        .contains("3 completion(s) from WQE counter 0x0010"));
}

#[test]
fn basic_session_of_ten_uses_a_second_array_eight_slots_on() {
    // Responder session: title RESP_SEND at WQE counter 0x20, 10 completions; arrays at slots
    // 1 (completions 0..8) and 8 (completions 8, 9) (Linux en_rx.c, DPDK mlx5_rx.c).
    let mut slots = vec![[0u8; 64]; 11];
    slots[0] = cqe(0x2c, 0x42, 0, 0x20, 10);
    for k in 0..10usize {
        let a = if k < 8 { 1 } else { 8 };
        let e = k % 8;
        slots[a][8 * e + 4..8 * e + 8].copy_from_slice(&(100 + k as u32).to_be_bytes());
    }
    slots[10] = cqe(0x20, 0x42, 0, 0x2a, 7);
    let b: Vec<u8> = slots.concat();
    let r = decode(Kind::Cq, &b, &rc()).unwrap();
    let c = completions(&r);
    assert_eq!(c.len(), 11);
    assert_eq!(
        c[8],
        "slot 8: RESP_SEND on QP 0x000042, WQE counter 0x0028, 108 bytes (mini-CQE)"
    );
    assert_eq!(
        c[9],
        "slot 9: RESP_SEND on QP 0x000042, WQE counter 0x0029, 109 bytes (mini-CQE)"
    );
    assert_eq!(
        c[10],
        "slot 10: RESP_SEND on QP 0x000042, WQE counter 0x002a, 7 bytes"
    );
    let holes: Vec<usize> = r.fields("session.hole").map(|f| f.offset / 64).collect();
    assert_eq!(holes, [2, 3, 4, 5, 6, 7, 9]);
    // Completion 9 is read from slot 8, entry 1.
    let c9 = r.fields("mini.byte_cnt").nth(9).unwrap();
    assert_eq!(c9.offset, 8 * 64 + 8 + 4);
    // A session cut short by the end of the input is a note, not an error.
    let r = decode(Kind::Cq, &b[..5 * 64], &rc()).unwrap();
    assert_eq!(completions(&r).len(), 5);
    assert!(r.notes.iter().any(|n| n.contains("5 of them past the end")));
    // A title counting fewer than 2 completions contradicts the layout.
    let mut bad = b.clone();
    bad[44..48].copy_from_slice(&1u32.to_be_bytes());
    assert!(matches!(
        decode(Kind::Cq, &bad, &rc()),
        Err(Error::Compressed { offset: 0, .. })
    ));
}

#[test]
fn enhanced_compressed_blocks_continue_from_their_title() {
    let b = sample("cq-zip-enhanced.hex");
    let r = decode(Kind::Cq, &b, &zip(Zip::Enhanced)).unwrap();
    assert_eq!(
        completions(&r),
        [
            "slot 0: RESP_SEND on QP 0x000042, WQE counter 0x0007, 256 bytes",
            "slot 1: RESP_SEND on QP 0x000042, WQE counter 0x0008, 128 bytes (mini-CQE)",
            "slot 2: RESP_SEND on QP 0x000042, WQE counter 0x0009, 512 bytes (mini-CQE)",
            "slot 3: RESP_SEND on QP 0x000042, WQE counter 0x000a, 64 bytes (mini-CQE)",
        ]
    );
    assert_eq!(
        r.field("block.validity_iteration_count").unwrap().offset,
        126
    );
    assert!(meaning(&r, "block.op_own").starts_with("3 mini-CQE(s)"));
    assert_eq!(r.fields("block.hole").count(), 2);
    // A second block right after the first continues the counter (UCX unzip).
    let mut two = b.clone();
    let mut blk = [0u8; 64];
    blk[4..8].copy_from_slice(&9u32.to_be_bytes());
    blk[63] = 0x0c; // one mini-CQE
    two.extend_from_slice(&blk);
    let r = decode(Kind::Cq, &two, &zip(Zip::Enhanced)).unwrap();
    assert_eq!(
        completions(&r)[4],
        "slot 4: RESP_SEND on QP 0x000042, WQE counter 0x000b, 9 bytes (mini-CQE)"
    );
    // A requester title: the mini-CQEs carry their own WQE counter and opcode.
    let mut req = cqe(0x00, 0x99, 0x08, 0x30, 0).to_vec();
    let mut blk = [0u8; 64];
    blk[0..2].copy_from_slice(&0x31u16.to_be_bytes());
    blk[2] = 0x0a;
    blk[8..10].copy_from_slice(&0x33u16.to_be_bytes());
    blk[10] = 0x08;
    blk[63] = 0x1c;
    req.extend_from_slice(&blk);
    req.extend_from_slice(&[0; 64]);
    let r = decode(Kind::Cq, &req, &zip(Zip::Enhanced)).unwrap();
    assert_eq!(
        completions(&r)[1..],
        [
            "slot 1: REQ 0x0a SEND on QP 0x000099, WQE counter 0x0031, 0 bytes (mini-CQE)",
            "slot 2: REQ 0x08 RDMA_WRITE on QP 0x000099, WQE counter 0x0033, 0 bytes (mini-CQE)",
        ]
    );
    // Without its title in the input, a block lists no completions but says why.
    let r = decode(Kind::Cq, &b[64..], &zip(Zip::Enhanced)).unwrap();
    assert!(completions(&r).is_empty());
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("no uncompressed CQE precedes")));
    // One block on its own, as a CQE: both readings of each mini-CQE.
    let r = decode(Kind::Cqe, &b[64..128], &zip(Zip::Enhanced)).unwrap();
    assert!(r
        .summary
        .starts_with("compressed CQE block (enhanced layout): 3 mini-CQE(s)"));
    assert_eq!(r.fields("mini.info").count(), 3);
    // More than 7 mini-CQEs do not fit a block.
    let mut bad = b[64..128].to_vec();
    bad[63] = 0x7c;
    assert!(matches!(
        decode(Kind::Cqe, &bad, &zip(Zip::Enhanced)),
        Err(Error::Compressed { offset: 0, .. })
    ));
}

#[test]
fn cqe128_first_half_grh_and_ring_lengths() {
    // flags_rqpn bit 29: the GRH is in the CQE; UCX reads it just before the 64-byte CQE.
    let mut q = cqe(0x20, 1, 0, 0, 40);
    q[24..28].copy_from_slice(&(1u32 << 29 | 0x55).to_be_bytes());
    let mut big = vec![0u8; 64];
    big.extend_from_slice(&q);
    let opts = Options {
        cqe_size: 128,
        ..Options::default()
    };
    let r = decode(Kind::Cqe, &big, &opts).unwrap();
    let g = r.field("cqe128.grh").unwrap();
    assert_eq!((g.offset, g.raw.len()), (24, 40));
    assert!(g.meaning.contains("struct mlx5_cqe128"));
    // Several slots given to the one-CQE kind: a hint towards `cq`.
    let two = [q, q].concat();
    match decode(Kind::Cqe, &two, &rc()).unwrap_err() {
        Error::Length { expected, .. } => assert!(expected.contains("`cq` kind"), "{expected}"),
        e => panic!("{e}"),
    }
    assert!(matches!(
        decode(Kind::Cq, &two[..100], &rc()),
        Err(Error::Length { got: 100, .. })
    ));
    let r = decode(Kind::Cq, &[big.clone(), big].concat(), &opts).unwrap();
    assert_eq!(completions(&r).len(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d6c_7835), ..ProptestConfig::default() })]

    /// Arbitrary bytes never make the decoder panic, whatever the kind and options.
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), k in 0usize..5, q in 0usize..4, sges in proptest::option::of(1usize..8), big in any::<bool>(), enhanced in any::<bool>()) {
        let kind = [Kind::Send, Kind::Recv, Kind::Srq, Kind::Cqe, Kind::Cq][k];
        let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Xrc][q];
        let zip = if enhanced { Zip::Enhanced } else { Zip::Basic };
        let opts = Options { qp_type, cqe_size: if big { 128 } else { 64 }, sges, zip };
        if let Ok(r) = decode(kind, &bytes, &opts) {
            let _ = r.to_string();
        }
    }

    /// Runs of CQ slots whose op_own bytes are mostly compressed or signature entries never
    /// make the decoder panic (random bytes rarely hit format 3 with a sane count).
    #[test]
    fn cq_runs_never_panic(slots in proptest::collection::vec((any::<[u8; 8]>(), any::<u32>(), 0u8..16, any::<u8>()), 1..12), enhanced in any::<bool>(), big in any::<bool>()) {
        let size = if big { 128 } else { 64 };
        let mut b = Vec::new();
        for (head, count, op, low) in &slots {
            let mut s = vec![0u8; size];
            let q = size - 64;
            s[q..q + 8].copy_from_slice(head);
            s[q + 44..q + 48].copy_from_slice(&(count % 24).to_be_bytes());
            s[q + 63] = op << 4 | (low & 0x0f) | if low & 0x10 != 0 { 0x0c } else { 0 };
            b.extend_from_slice(&s);
        }
        let zip = if enhanced { Zip::Enhanced } else { Zip::Basic };
        let opts = Options { cqe_size: size, zip, ..Options::default() };
        if let Ok(r) = decode(Kind::Cq, &b, &opts) {
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
