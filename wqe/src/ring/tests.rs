//! The writer's wrapping, limits and arithmetic, and its lean form against the general one.

use super::*;
use crate::seg::{DataSeg, MaskedCs64Seg, RaddrSeg};

#[repr(C, align(64))]
struct Ring([u8; 256]);

#[test]
fn arithmetic() {
    assert_eq!(ds_for_bytes(16), 1);
    assert_eq!(ds_for_bytes(40), 3);
    assert_eq!(bbs_for_ds(4), 1);
    assert_eq!(bbs_for_ds(5), 2);
}

#[test]
fn wraps_segments_and_inline() {
    let mut r = Ring([0xee; 256]);
    // SAFETY: `r` is 64-byte aligned (`Ring`), 256 bytes = 4 blocks (a power of two), and
    // outlives `ring` and every writer made from it.
    let ring = unsafe { SqRing::new(r.0.as_mut_ptr(), 4) };
    // Start in the last block: ctrl at 192, raddr at 208, inline header at 224.
    let mut w = WqeWriter::new(&ring, 3, 1008);
    w.push(&RaddrSeg::new(0x1122, 7)).unwrap();
    let payload: [u8; 40] = core::array::from_fn(|i| i as u8);
    w.push_inline(&[&payload]).unwrap();
    let ctrl = crate::CtrlSeg::builder()
        .opcode(crate::OPCODE_RDMA_WRITE)
        .qpn(0x42)
        .fm_ce_se(0x08);
    let (ds, bbs) = w.finish(ctrl);
    assert_eq!(ds, 5);
    assert_eq!(bbs, 2);
    assert_eq!(&r.0[224..228], &[0x80, 0, 0, 40]);
    assert_eq!(&r.0[228..256], &payload[..28]);
    assert_eq!(&r.0[0..12], &payload[28..]);
    assert_eq!(r.0[192 + 7], 5);
}

/// The segment after an inline one starts right after the inline segment's last 16-byte
/// unit (`align16(4 + len)` bytes after its start), wherever that is: inside a block,
/// exactly at the ring end (the cursor wraps to the start, never stays at the end), past
/// the end (the payload wrapped); and the size counts the padded segment.
#[test]
fn the_segment_after_an_inline_one_starts_where_it_ends() {
    // (first block, payload length, offset where the next segment must land, DS after it)
    let cases: [(u16, usize, usize, u32); 7] = [
        (0, 1, 48, 4),   // ctrl 0, raddr 16, inline 32..48 (4 + 1 → 16), data at 48
        (0, 12, 48, 4),  // 4 + 12 = 16 exactly: one unit
        (0, 13, 64, 5),  // 4 + 13 → 32: the next block
        (3, 12, 240, 4), // ctrl 192, raddr 208, inline 224..240
        (3, 28, 0, 5),   // inline 224..256 ends at the ring end: the cursor wraps
        (3, 29, 16, 6),  // 4 + 29 → 48: 224..256 and 0..16, the next at 16
        (2, 60, 224, 7), // ctrl 128, raddr 144, inline 160..224 (4 + 60 = 64)
    ];
    let all: [u8; 64] = core::array::from_fn(|i| i as u8);
    for (pi, len, next_at, ds) in cases {
        let mut r = Ring([0xee; 256]);
        // SAFETY: `r` is 64-byte aligned (`Ring`), 256 bytes = 4 blocks (a power of two), and
        // outlives `ring` and every writer made from it.
        let ring = unsafe { SqRing::new(r.0.as_mut_ptr(), 4) };
        let mut w = WqeWriter::new(&ring, pi, 1008);
        w.push(&RaddrSeg::new(0x1122, 7)).unwrap();
        let payload = &all[..len];
        // Two parts: the cursor must not depend on how the payload is split.
        let parts: [&[u8]; 2] = [&payload[..1], &payload[1..]];
        assert_eq!(w.push_inline(&parts).unwrap(), len as u32);
        let inline_at = (pi as usize * 64 + 32) % 256;
        let seg = (4 + len).div_ceil(16) * 16;
        assert_eq!(w.size(), 32 + seg, "pi {pi} len {len}: size");
        assert_eq!(next_at, (inline_at + seg) % 256, "the table itself");
        let want_next = next_at;
        w.push(&DataSeg::new(0xabcd, 0x55, 0x1_0000_2000)).unwrap();
        let (got_ds, _) = w.finish(crate::CtrlSeg::builder().opcode(8).qpn(1));
        assert_eq!(got_ds, ds, "pi {pi} len {len}: DS");
        // The data segment (byte count 0xabcd first) is exactly at the expected place.
        assert_eq!(
            &r.0[want_next..want_next + 8],
            &[0, 0, 0xab, 0xcd, 0, 0, 0, 0x55],
            "pi {pi} len {len}: the next segment is not where the inline one ends"
        );
        // The payload, wrapping at the ring end, and the inline header.
        assert_eq!(
            &r.0[inline_at..inline_at + 4],
            &(0x8000_0000u32 | len as u32).to_be_bytes()
        );
        for (i, b) in payload.iter().enumerate() {
            assert_eq!(r.0[(inline_at + 4 + i) % 256], *b, "payload byte {i}");
        }
    }
}

#[test]
fn masked_atomic_second_half_wraps() {
    let mut r = Ring([0; 256]);
    // SAFETY: `r` is 64-byte aligned (`Ring`), 256 bytes = 4 blocks (a power of two), and
    // outlives `ring` and every writer made from it.
    let ring = unsafe { SqRing::new(r.0.as_mut_ptr(), 4) };
    let mut w = WqeWriter::new(&ring, 3, 1008);
    w.push(&RaddrSeg::new(0, 0)).unwrap();
    w.push(&DataSeg::new(1, 2, 3)).unwrap();
    w.push(&MaskedCs64Seg::new(1, 2, 3, 4)).unwrap();
    assert_eq!(u64::from_be_bytes(r.0[240..248].try_into().unwrap()), 3);
    assert_eq!(u64::from_be_bytes(r.0[0..8].try_into().unwrap()), 4);
}

/// The ring's accessors, a WQE of exactly the limit (accepted: the limit is inclusive,
/// rdma-core `mlx5_calc_send_wqe` refuses only what exceeds it) and the error's message.
#[test]
fn the_limit_is_inclusive_and_accessors_say_the_ring() {
    let mut r = Ring([0; 256]);
    let base = r.0.as_mut_ptr();
    // SAFETY: `base` is `r`'s 64-byte aligned 256 bytes = 4 blocks (a power of two); `r`
    // outlives `ring` and every writer made from it.
    let ring = unsafe { SqRing::new(base, 4) };
    assert_eq!(ring.wqe_cnt(), 4);
    assert_eq!(ring.start(), base);
    assert_eq!(ring.end(), base.wrapping_add(256));
    assert_eq!(ring.bytes(), 256);
    assert_eq!(ring.max_wqe_bytes(), 256);
    let mut w = WqeWriter::new(&ring, 1, 64);
    assert_eq!(w.ctrl_ptr(), base.wrapping_add(64));
    w.push(&RaddrSeg::new(0, 0)).unwrap();
    // ctrl 16 + raddr 16 + inline align16(4 + 28) = 64: exactly the limit.
    assert_eq!(w.push_inline(&[&[7u8; 28]]).unwrap(), 28);
    assert_eq!(w.size(), 64);
    assert!(
        w.push(&DataSeg::new(1, 2, 3)).is_err(),
        "one unit past the limit"
    );
    extern crate std;
    use std::string::ToString;
    assert_eq!(
        WqeError::TooLarge {
            needed: 80,
            max: 64
        }
        .to_string(),
        "WQE of 80 bytes exceeds the 64-byte limit of this queue"
    );
}

#[test]
fn too_large_is_an_error() {
    let mut r = Ring([0; 256]);
    // SAFETY: `r` is 64-byte aligned (`Ring`) with room for the 1 block (a power of two),
    // and outlives `ring` and every writer made from it.
    let ring = unsafe { SqRing::new(r.0.as_mut_ptr(), 1) };
    let mut w = WqeWriter::new(&ring, 0, 1008);
    w.push(&RaddrSeg::new(0, 0)).unwrap();
    let big = [0u8; 64];
    assert_eq!(
        w.push_inline(&[&big]),
        Err(WqeError::TooLarge {
            needed: 32 + 80,
            max: 64
        })
    );
}

/// The lean form writes what the general one writes: for every start block (the last
/// one wraps) and payload lengths around the block and ring ends, `reserved` + `put` +
/// `put_inline` + `finish_words` (given the ctrl words `finish` wrote) leave the same
/// ring bytes, cursor and size as `new` + `push` + `push_inline` + `finish`.
#[test]
fn the_reserved_writer_writes_what_the_general_one_writes() {
    for pi in 0..4u16 {
        for len in [0usize, 1, 4, 7, 8, 12, 13, 16, 27, 28, 29, 44, 60, 100, 180] {
            for with_raddr in [false, true] {
                let mut buf = [0u8; 180];
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = (i as u8).wrapping_mul(7) ^ 0x5a;
                }
                let data = &buf[..len];
                let (mut a, mut b) = (Ring([0xee; 256]), Ring([0xee; 256]));
                // SAFETY: both buffers are 64-byte aligned, 4 blocks, and outlive the rings.
                let (ra, rb) = unsafe {
                    (
                        SqRing::new(a.0.as_mut_ptr(), 4),
                        SqRing::new(b.0.as_mut_ptr(), 4),
                    )
                };
                let raddr = RaddrSeg::new(0x1122_3344_5566, 0x77);
                let mut g = WqeWriter::new(&ra, pi, 256);
                if with_raddr {
                    g.push(&raddr).unwrap();
                }
                g.push_inline(&[data]).unwrap();
                let (g_size, g_cur) = (g.size(), g.cursor() as usize - ra.start() as usize);
                let ctrl = g.ctrl_ptr();
                g.finish(crate::seg::CtrlSeg::builder().qpn(0x12_3456).opcode(8));
                // SAFETY: the ctrl segment's 16 bytes, just written.
                let (w0, w1) = unsafe {
                    (
                        (ctrl as *const u64).read(),
                        (ctrl as *const u64).add(1).read(),
                    )
                };
                // SAFETY: the blocks are this test's; the segments fit the ring (len ≤
                // 180 with ctrl and raddr: 236 bytes) and `raddr` ends in the first block.
                let mut l = unsafe { WqeWriter::reserved(&rb, pi, rb.bb(pi)) };
                // SAFETY: made by `reserved` above, the segments within its blocks.
                unsafe {
                    if with_raddr {
                        l.put(raddr);
                    }
                    l.put_inline(data);
                }
                let (l_size, l_cur) = (l.size(), l.cursor() as usize - rb.start() as usize);
                // SAFETY: made by `reserved` above.
                unsafe { l.finish_words(w0, w1) };
                assert_eq!(a.0, b.0, "pi {pi}, len {len}, raddr {with_raddr}");
                assert_eq!((g_size, g_cur), (l_size, l_cur), "pi {pi}, len {len}");
            }
        }
    }
}
