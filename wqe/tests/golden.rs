//! Golden byte vectors for send WQEs, in plain Rust (no C compiler needed).
//!
//! The segment vectors are the ones `docs/sources.md` §13 lists, obtained by calling rdma-core
//! 44's `mlx5dv_set_*_seg` helpers (with the bytes those helpers leave untouched zero-filled).
//! The whole-WQE vectors are written out by hand from the layouts of `docs/wqe-layout.md` §2–§6
//! (rdma-core `providers/mlx5/qp.c` `_mlx5_post_send`, UCX `rc_mlx5.inl`), so a change to any
//! byte of any segment, to the segment order, the DS count or the wrap rule fails here.

use mlx5_wqe::*;
use zerocopy::IntoBytes;

/// Parse "5a 12 34 ..." (whitespace and `|` separators ignored).
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    assert_eq!(digits.len() % 2, 0, "odd hex string in the test itself");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

#[repr(C, align(64))]
struct Ring<const N: usize>([u8; N]);

/// Build one WQE at producer index `pi` in a zeroed ring of `bbs` basic blocks; return the
/// ring bytes and `(ds, bbs used)`. `ctrl` is `(opcode, opmod, qpn, fm_ce_se, imm)`, host
/// order.
fn build<const N: usize>(
    pi: u16,
    ctrl: (u8, u8, u32, u8, u32),
    body: impl FnOnce(&mut WqeWriter),
) -> (Ring<N>, u32, u32) {
    let mut r = Ring([0u8; N]);
    // SAFETY: `r` is 64-aligned, N bytes (a power-of-two count of 64-byte blocks), and
    // outlives the writer.
    let ring = unsafe { SqRing::new(r.0.as_mut_ptr(), (N / 64) as u32) };
    let mut w = WqeWriter::new(&ring, pi, 1008);
    body(&mut w);
    let (opcode, opmod, qpn, fm_ce_se, imm) = ctrl;
    let ctrl = CtrlSeg::builder()
        .opcode(opcode)
        .opmod(opmod)
        .qpn(qpn)
        .fm_ce_se(fm_ce_se)
        .imm(imm);
    let (ds, bbs) = w.finish(ctrl);
    (r, ds, bbs)
}

#[test]
fn ctrl_segment_of_the_facts_sheet() {
    let seg = CtrlSeg::builder()
        .wqe_index(0x1234)
        .opcode(0x08)
        .opmod(0x5a)
        .qpn(0xabcdef)
        .fm_ce_se(0x08)
        .ds(3)
        .signature(0x77)
        .imm(0x44332211)
        .build();
    assert_eq!(
        seg.as_bytes(),
        hex("5a 12 34 08 ab cd ef 03 77 00 00 08 44 33 22 11")
    );
    assert_eq!(
        (
            seg.opmod(),
            seg.wqe_index(),
            seg.opcode(),
            seg.qpn(),
            seg.ds()
        ),
        (0x5a, 0x1234, 0x08, 0xabcdef, 3)
    );
    // The immediate travels big-endian (`docs/sources.md` §13: the golden vector passed it to
    // the helper already in network order, as `wr->imm_data` is).
    assert_eq!(seg.imm_bytes(), [0x44, 0x33, 0x22, 0x11]);
    assert_eq!(seg.imm(), 0x44332211);
}

#[test]
fn data_and_datagram_segments_of_the_facts_sheet() {
    let d = DataSeg::new(0x1000, 0xdeadbeef, 0x0102030405060708);
    assert_eq!(
        d.as_bytes(),
        hex("00 00 10 00 de ad be ef 01 02 03 04 05 06 07 08")
    );
    assert_eq!(
        DataSeg::terminator().as_bytes(),
        hex("00000000 00000100 0000000000000000")
    );

    let rgid: [u8; 16] = core::array::from_fn(|i| 0xa0 + i as u8);
    let av = AvSeg::new(
        0x1111222233334444,
        0xabcd,
        true,
        0x55,
        0x66,
        0x7788,
        [1, 2, 3, 4, 5, 6],
        0x99,
        0x40,
        0x0badcafe,
        rgid,
    );
    assert_eq!(
        av.as_bytes(),
        hex("11 11 22 22 33 33 44 44 80 00 ab cd 55 66 77 88
             00 00 00 00 01 02 03 04 05 06 99 40 0b ad ca fe
             a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad ae af")
    );
    assert!(av.is_extended());
    assert_eq!(
        (av.dqpn(), av.rlid(), av.sgid_index(), av.flow_label()),
        (0xabcd, 0x7788, 0xba, 0xdcafe)
    );
}

#[test]
fn other_segments() {
    assert_eq!(
        RaddrSeg::new(0x1122334455667788, 0x99aabbcc).as_bytes(),
        hex("1122334455667788 99aabbcc 00000000")
    );
    assert_eq!(InlineHdr::new(40).as_bytes(), hex("80 00 00 28"));
    assert_eq!(
        AtomicSeg::cas(1, 2).as_bytes(),
        hex("0000000000000002 0000000000000001")
    );
    assert_eq!(
        AtomicSeg::faa(0x10).as_bytes(),
        hex("0000000000000010 0000000000000000")
    );
    assert_eq!(
        MaskedCs64Seg::new(1, 2, 3, 4).as_bytes(),
        hex("0000000000000003 0000000000000001 0000000000000004 0000000000000002")
    );
    assert_eq!(
        MaskedFa64Seg::new(5, 0x8000000000000000).as_bytes(),
        hex("0000000000000005 8000000000000000")
    );
    assert_eq!(
        MaskedCs32Seg::new(1, 2, 3, 4).as_bytes(),
        hex("00000003 00000001 00000004 00000002")
    );
    assert_eq!(
        MaskedFa32Seg::new(7, 0x80000000).as_bytes(),
        hex("00000007 80000000 00000000 00000000")
    );
    assert_eq!(
        XrcSeg::new(0x123456).as_bytes(),
        hex("00123456 00000000 00000000 00000000")
    );
    let mut n = SrqNextSeg::default();
    n.set_next(0x0102);
    assert_eq!(n.as_bytes(), hex("0000 0102 00 0000000000000000000000"));
}

#[test]
fn rc_write_inline_8_bytes() {
    let (r, ds, bbs) = build::<256>(
        0x10,
        (OPCODE_RDMA_WRITE, 0, 0x123, CTRL_CQ_UPDATE, 0),
        |w| {
            w.push(&RaddrSeg::new(0x7f00_0000_1000, 0x1234)).unwrap();
            assert_eq!(w.push_inline(&[&[1, 2, 3, 4], &[5, 6, 7, 8]]).unwrap(), 8);
        },
    );
    assert_eq!((ds, bbs), (3, 1));
    assert_eq!(
        &r.0[..64],
        &hex("00 00 10 08 00 01 23 03 00 00 00 08 00 00 00 00
              00 00 7f 00 00 00 10 00 00 00 12 34 00 00 00 00
              80 00 00 08 01 02 03 04 05 06 07 08 00 00 00 00
              00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")[..]
    );
}

#[test]
fn send_with_immediate_one_sge() {
    let imm = 0xcafe_babe;
    let flags = CTRL_CQ_UPDATE | CTRL_SOLICITED;
    let (r, ds, bbs) = build::<256>(1, (OPCODE_SEND_IMM, 0, 0x42, flags, imm), |w| {
        w.push(&DataSeg::new(0x100, 0x77, 0x1000)).unwrap();
    });
    assert_eq!((ds, bbs), (2, 1));
    assert_eq!(
        &r.0[64..96],
        &hex("00 00 01 0b 00 00 42 02 00 00 00 0a ca fe ba be
              00 00 01 00 00 00 00 77 00 00 00 00 00 00 10 00")[..]
    );
    assert!(
        r.0[..64].iter().chain(&r.0[96..]).all(|&b| b == 0),
        "bytes outside the WQE"
    );
}

#[test]
fn rdma_read_with_fence() {
    let (r, ds, _) = build::<256>(
        2,
        (
            OPCODE_RDMA_READ,
            0,
            0xabcdef,
            CTRL_CQ_UPDATE | CTRL_FENCE,
            0,
        ),
        |w| {
            w.push(&RaddrSeg::new(0x1122334455667788, 0x99aabbcc))
                .unwrap();
            w.push(&DataSeg::new(4096, 0x10, 0x2000)).unwrap();
        },
    );
    assert_eq!(ds, 3);
    assert_eq!(
        &r.0[128..176],
        &hex("00 00 02 10 ab cd ef 03 00 00 00 88 00 00 00 00
              11 22 33 44 55 66 77 88 99 aa bb cc 00 00 00 00
              00 00 10 00 00 00 00 10 00 00 00 00 00 00 20 00")[..]
    );
}

#[test]
fn compare_and_swap_and_fetch_add() {
    let (r, ds, bbs) = build::<256>(0, (OPCODE_ATOMIC_CS, 0, 1, CTRL_CQ_UPDATE, 0), |w| {
        w.push(&RaddrSeg::new(0x8000, 5)).unwrap();
        w.push(&AtomicSeg::cas(1, 2)).unwrap();
        w.push(&DataSeg::new(ATOMIC_SIZE, 6, 0x9000)).unwrap();
    });
    assert_eq!((ds, bbs), (4, 1));
    assert_eq!(
        &r.0[..64],
        &hex("00 00 00 11 00 00 01 04 00 00 00 08 00 00 00 00
              00 00 00 00 00 00 80 00 00 00 00 05 00 00 00 00
              00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 01
              00 00 00 08 00 00 00 06 00 00 00 00 00 00 90 00")[..]
    );

    let (r, ds, _) = build::<256>(0, (OPCODE_ATOMIC_FA, 0, 1, CTRL_CQ_UPDATE, 0), |w| {
        w.push(&RaddrSeg::new(0x8000, 5)).unwrap();
        w.push(&AtomicSeg::faa(0x10)).unwrap();
        w.push(&DataSeg::new(ATOMIC_SIZE, 6, 0x9000)).unwrap();
    });
    assert_eq!(ds, 4);
    assert_eq!(&r.0[..4], &hex("00 00 00 12")[..]);
    assert_eq!(&r.0[32..48], &hex("0000000000000010 0000000000000000")[..]);
}

#[test]
fn masked_atomics_32_bit() {
    let (r, ds, _) = build::<256>(
        0,
        (
            OPCODE_ATOMIC_MASKED_CS,
            OPMOD_EXT_ATOMIC_32,
            2,
            CTRL_CQ_UPDATE,
            0,
        ),
        |w| {
            w.push(&RaddrSeg::new(0x4000, 7)).unwrap();
            w.push(&MaskedCs32Seg::new(0xaaaa, 0xff00, 0xbbbb, 0x00ff))
                .unwrap();
            w.push(&DataSeg::new(4, 8, 0x5000)).unwrap();
        },
    );
    assert_eq!(ds, 4);
    assert_eq!(
        &r.0[..64],
        &hex("08 00 00 14 00 00 02 04 00 00 00 08 00 00 00 00
              00 00 00 00 00 00 40 00 00 00 00 07 00 00 00 00
              00 00 bb bb 00 00 aa aa 00 00 00 ff 00 00 ff 00
              00 00 00 04 00 00 00 08 00 00 00 00 00 00 50 00")[..]
    );

    let (r, ds, _) = build::<256>(
        0,
        (
            OPCODE_ATOMIC_MASKED_FA,
            OPMOD_EXT_ATOMIC_32,
            2,
            CTRL_CQ_UPDATE,
            0,
        ),
        |w| {
            w.push(&RaddrSeg::new(0x4000, 7)).unwrap();
            w.push(&MaskedFa32Seg::new(1, 0x8000_8000)).unwrap();
            w.push(&DataSeg::new(4, 8, 0x5000)).unwrap();
        },
    );
    assert_eq!(ds, 4);
    assert_eq!(&r.0[..4], &hex("08 00 00 15")[..]);
    assert_eq!(
        &r.0[32..48],
        &hex("00000001 80008000 00000000 00000000")[..]
    );
}

#[test]
fn masked_atomics_64_bit() {
    let (r, ds, bbs) = build::<256>(
        0,
        (
            OPCODE_ATOMIC_MASKED_CS,
            OPMOD_EXT_ATOMIC_64,
            3,
            CTRL_CQ_UPDATE,
            0,
        ),
        |w| {
            w.push(&RaddrSeg::new(0x4000, 7)).unwrap();
            w.push(&MaskedCs64Seg::new(1, 2, 3, 4)).unwrap();
            w.push(&DataSeg::new(8, 8, 0x5000)).unwrap();
        },
    );
    // ctrl 16 + raddr 16 + masked 32 + data 16 = 80 bytes: 5 DS, 2 BBs (`docs/sources.md` §2).
    assert_eq!((ds, bbs), (5, 2));
    assert_eq!(
        &r.0[..80],
        &hex("09 00 00 14 00 00 03 05 00 00 00 08 00 00 00 00
              00 00 00 00 00 00 40 00 00 00 00 07 00 00 00 00
              00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 01
              00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 02
              00 00 00 08 00 00 00 08 00 00 00 00 00 00 50 00")[..]
    );

    let (r, ds, _) = build::<256>(
        0,
        (
            OPCODE_ATOMIC_MASKED_FA,
            OPMOD_EXT_ATOMIC_64,
            3,
            CTRL_CQ_UPDATE,
            0,
        ),
        |w| {
            w.push(&RaddrSeg::new(0x4000, 7)).unwrap();
            w.push(&MaskedFa64Seg::new(0x100, 0x8000_0000_0000_0000))
                .unwrap();
            w.push(&DataSeg::new(8, 8, 0x5000)).unwrap();
        },
    );
    assert_eq!(ds, 4);
    assert_eq!(&r.0[..4], &hex("09 00 00 15")[..]);
    assert_eq!(&r.0[32..48], &hex("0000000000000100 8000000000000000")[..]);
}

fn roce_av() -> AvSeg {
    // ::ffff:10.0.0.2, SGID index 3, UDP source port 0xc000, hop limit 64.
    let mut gid = [0u8; 16];
    gid[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
    let mut av = AvSeg::new(
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
        gid,
    );
    av.set_ud_dest(0x222, 0x1111_1111);
    av
}

#[test]
fn ud_send_full_address_vector() {
    let (r, ds, bbs) = build::<256>(0, (OPCODE_SEND, 0, 0x100, CTRL_CQ_UPDATE, 0), |w| {
        w.push(&roce_av()).unwrap();
        w.push(&DataSeg::new(64, 9, 0xa000)).unwrap();
    });
    // 16 + 48 + 16 = 80 bytes: 5 DS, 2 BBs (`docs/sources.md` §2).
    assert_eq!((ds, bbs), (5, 2));
    assert_eq!(
        &r.0[..80],
        &hex("00 00 00 0a 00 01 00 05 00 00 00 08 00 00 00 00
              11 11 11 11 00 00 00 00 80 00 02 22 00 00 c0 00
              00 00 00 00 02 00 00 00 00 01 00 40 00 30 00 00
              00 00 00 00 00 00 00 00 00 00 ff ff 0a 00 00 02
              00 00 00 40 00 00 00 09 00 00 00 00 00 00 a0 00")[..]
    );
}

#[test]
fn ud_send_compact_address_vector() {
    let mut av = roce_av();
    av.set_extended(false); // no EXTENDED_UD_AV: only the 16-byte base AV follows ctrl
    let compact = av.compact();
    assert_eq!(compact.as_bytes(), &av.as_bytes()[..16]);
    let (r, ds, bbs) = build::<256>(0, (OPCODE_SEND, 0, 0x100, CTRL_CQ_UPDATE, 0), |w| {
        w.push(&compact).unwrap();
        w.push(&DataSeg::new(64, 9, 0xa000)).unwrap();
    });
    assert_eq!((ds, bbs), (3, 1));
    assert_eq!(
        &r.0[..48],
        &hex("00 00 00 0a 00 01 00 03 00 00 00 08 00 00 00 00
              11 11 11 11 00 00 00 00 00 00 02 22 00 00 c0 00
              00 00 00 40 00 00 00 09 00 00 00 00 00 00 a0 00")[..]
    );
}

#[test]
fn wqe_wrapped_at_the_ring_end_with_split_inline_payload() {
    // Ring of 4 BBs; producer index 7 → slot 3 (bytes 192..256), wqe_index 7.
    let payload: Vec<u8> = (0x40..0x68).collect(); // 40 bytes
    let (r, ds, bbs) = build::<256>(7, (OPCODE_RDMA_WRITE, 0, 0x55, CTRL_CQ_UPDATE, 0), |w| {
        w.push(&RaddrSeg::new(0xdead_0000, 0x77)).unwrap();
        w.push_inline(&[&payload[..30], &payload[30..]]).unwrap();
    });
    // 16 + 16 + align16(4 + 40) = 80 bytes: 5 DS, 2 BBs.
    assert_eq!((ds, bbs), (5, 2));
    let mut want = hex("00 00 07 08 00 00 55 05 00 00 00 08 00 00 00 00
         00 00 00 00 de ad 00 00 00 00 00 77 00 00 00 00
         80 00 00 28");
    want.extend_from_slice(&payload);
    want.resize(80, 0);
    let mut got = r.0[192..].to_vec();
    got.extend_from_slice(&r.0[..16]);
    assert_eq!(got, want);
    // The payload's split point is the ring end: 28 bytes before it, 12 after.
    assert_eq!(&r.0[228..256], &payload[..28]);
    assert_eq!(&r.0[..12], &payload[28..]);
    assert!(r.0[16..192].iter().all(|&b| b == 0));
}

#[test]
fn fixed_segments_wrap_on_their_own_16_byte_units() {
    // ctrl at 192, AV at 208..256, data wraps to 0.
    let (r, ds, _) = build::<256>(3, (OPCODE_SEND, 0, 0x100, CTRL_CQ_UPDATE, 0), |w| {
        w.push(&roce_av()).unwrap();
        w.push(&DataSeg::new(64, 9, 0xa000)).unwrap();
    });
    assert_eq!(ds, 5);
    assert_eq!(&r.0[208..256], roce_av().as_bytes());
    assert_eq!(&r.0[..16], DataSeg::new(64, 9, 0xa000).as_bytes());
}

#[test]
fn ds_and_basic_block_arithmetic() {
    // `docs/sources.md` §2 ("Typical sizes").
    for (bytes, ds, bbs) in [
        (16, 1, 1),
        (32, 2, 1),
        (40, 3, 1),
        (48, 3, 1),
        (64, 4, 1),
        (80, 5, 2),
        (1008, 63, 16),
    ] {
        assert_eq!(ds_for_bytes(bytes), ds, "{bytes} bytes");
        assert_eq!(bbs_for_ds(ds), bbs, "{ds} DS");
    }
    assert_eq!(inline_seg_size(0), 16);
    assert_eq!(inline_seg_size(12), 16);
    assert_eq!(inline_seg_size(13), 32);
}

#[test]
fn empty_inline_adds_no_segment() {
    let (_, ds, _) = build::<256>(0, (OPCODE_RDMA_WRITE, 0, 1, 0, 0), |w| {
        w.push(&RaddrSeg::new(0, 0)).unwrap();
        assert_eq!(w.push_inline(&[&[], &[]]).unwrap(), 0);
    });
    assert_eq!(ds, 2);
}

#[test]
fn opcode_names() {
    assert_eq!(opcode_name(0x08), Some("RDMA_WRITE"));
    assert_eq!(opcode_name(0x14), Some("ATOMIC_MASKED_CS"));
    assert_eq!(opcode_name(0x25), Some("UMR"));
    assert_eq!(opcode_name(0x02), None);
}
