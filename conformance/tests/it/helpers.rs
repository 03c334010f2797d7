//! The Rust segment builders and CQE accessors against rdma-core's own static-inline helpers
//! (`mlx5dv_set_ctrl_seg`, `mlx5dv_x86_set_ctrl_seg`, `mlx5dv_set_data_seg`,
//! `mlx5dv_set_dgram_seg`, `mlx5dv_get_cqe_*`, `mlx5dv_set_cqe_owner`), byte for byte, on
//! fixed vectors and on seeded random inputs. Both buffers start zero-filled because the
//! helpers leave ctrl bytes 9–10 and AV bytes 16–19 untouched (`docs/sources.md` §13).

use mlx5_conformance::oracle::{self, CtrlArgs, DgramArgs};
use mlx5_cq::Cqe64;
use mlx5_wqe::{AvSeg, CtrlSeg, DataSeg, SqRing, WqeWriter};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use zerocopy::{FromBytes, IntoBytes};

fn rust_ctrl(a: CtrlArgs) -> [u8; 16] {
    let seg = CtrlSeg::builder()
        .wqe_index(a.pi)
        .opcode(a.opcode)
        .opmod(a.opmod)
        .qpn(a.qpn)
        .fm_ce_se(a.fm_ce_se)
        .ds(a.ds)
        .signature(a.signature)
        // The helper stores its `imm` argument unswapped (it is `wr->imm_data`, already a
        // `__be32`); the builder takes the host-order value.
        .imm(u32::from_be(a.imm))
        .build();
    seg.as_bytes().try_into().unwrap()
}

fn c_ctrl(a: CtrlArgs) -> [u8; 16] {
    let mut b = [0u8; 16];
    oracle::set_ctrl_seg(&mut b, a);
    b
}

fn rust_dgram(a: &DgramArgs) -> [u8; 48] {
    let av = AvSeg::new(
        a.key,
        a.dqp_dct,
        a.ext != 0,
        a.stat_rate_sl,
        a.fl_mlid,
        a.rlid,
        a.rmac,
        a.tclass,
        a.hop_limit,
        a.grh_gid_fl,
        a.rgid,
    );
    av.as_bytes().try_into().unwrap()
}

fn c_dgram(a: &DgramArgs) -> [u8; 48] {
    let mut b = [0u8; 48];
    oracle::set_dgram_seg(&mut b, a);
    b
}

/// A seeded runner with a bounded case count, so the suite is fast and reproducible.
fn runner(cases: u32) -> TestRunner {
    let seed = *b"mlx5-direct conformance seed 01!";
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
    )
}

#[test]
fn ctrl_golden_vector_of_the_facts_sheet() {
    let a = CtrlArgs {
        pi: 0x1234,
        opcode: 0x08,
        opmod: 0x5a,
        qpn: 0xabcdef,
        fm_ce_se: 0x08,
        ds: 3,
        signature: 0x77,
        imm: 0x11223344,
    };
    // `docs/sources.md` §13, with the untouched bytes 9–10 zero-filled.
    let want = [
        0x5a, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03, 0x77, 0, 0, 0x08, 0x44, 0x33, 0x22, 0x11,
    ];
    assert_eq!(c_ctrl(a), want);
    assert_eq!(rust_ctrl(a), want);
}

#[test]
fn ctrl_helper_leaves_stream_id_bytes_untouched() {
    let mut b = [0xee; 16];
    oracle::set_ctrl_seg(
        &mut b,
        CtrlArgs {
            pi: 1,
            opcode: 0x0a,
            qpn: 5,
            ds: 2,
            ..Default::default()
        },
    );
    assert_eq!(&b[9..11], &[0xee, 0xee]);
}

#[test]
fn ctrl_matches_the_sse_variant_too() {
    let a = CtrlArgs {
        pi: 0xfffe,
        opcode: 0x11,
        opmod: 0,
        qpn: 0x00ff_ffff,
        fm_ce_se: 0x88,
        ds: 4,
        signature: 0,
        imm: 0xdead_beef,
    };
    let mut b = [0xee; 16];
    if oracle::x86_set_ctrl_seg(&mut b, a) {
        // The SSE helper writes all 16 bytes, with the stream id zero.
        assert_eq!(b, rust_ctrl(a));
    }
}

#[test]
fn ctrl_random() {
    let strat = (
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        0u32..1 << 24,
        any::<u8>(),
        0u8..64,
        any::<u8>(),
        any::<u32>(),
    );
    runner(256)
        .run(
            &strat,
            |(pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm)| {
                let a = CtrlArgs {
                    pi,
                    opcode,
                    opmod,
                    qpn,
                    fm_ce_se,
                    ds,
                    signature,
                    imm,
                };
                prop_assert_eq!(rust_ctrl(a), c_ctrl(a));
                let mut sse = [0u8; 16];
                if oracle::x86_set_ctrl_seg(&mut sse, a) {
                    prop_assert_eq!(rust_ctrl(a), sse);
                }
                // And the getters read back what went in.
                let seg = CtrlSeg::read_from_bytes(&c_ctrl(a)[..]).unwrap();
                prop_assert_eq!(
                    (
                        seg.wqe_index(),
                        seg.opcode(),
                        seg.opmod(),
                        seg.qpn(),
                        seg.ds(),
                        seg.imm_bytes()
                    ),
                    (pi, opcode, opmod, qpn, ds, imm.to_ne_bytes())
                );
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn data_golden_and_random() {
    let mut b = [0u8; 16];
    oracle::set_data_seg(&mut b, 0x1000, 0xdeadbeef, 0x0102030405060708);
    let want = [
        0, 0, 0x10, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    assert_eq!(b, want);
    assert_eq!(
        DataSeg::new(0x1000, 0xdeadbeef, 0x0102030405060708).as_bytes(),
        &want
    );

    runner(256)
        .run(
            &(any::<u32>(), any::<u32>(), any::<u64>()),
            |(len, lkey, addr)| {
                let mut c = [0u8; 16];
                oracle::set_data_seg(&mut c, len, lkey, addr);
                let seg = DataSeg::new(len, lkey, addr);
                prop_assert_eq!(seg.as_bytes(), &c[..]);
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn dgram_golden_vector_of_the_facts_sheet() {
    let a = DgramArgs {
        key: 0x1111222233334444,
        dqp_dct: 0xabcd,
        ext: 1,
        stat_rate_sl: 0x55,
        fl_mlid: 0x66,
        rlid: 0x7788,
        rmac: [1, 2, 3, 4, 5, 6],
        tclass: 0x99,
        hop_limit: 0x40,
        grh_gid_fl: 0x0badcafe,
        rgid: core::array::from_fn(|i| 0xa0 + i as u8),
    };
    let mut want = [0u8; 48];
    want[..16].copy_from_slice(&[
        0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x80, 0, 0xab, 0xcd, 0x55, 0x66, 0x77, 0x88,
    ]);
    want[16..32].copy_from_slice(&[
        0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 0x99, 0x40, 0x0b, 0xad, 0xca, 0xfe,
    ]);
    for (i, b) in want[32..].iter_mut().enumerate() {
        *b = 0xa0 + i as u8;
    }
    assert_eq!(c_dgram(&a), want);
    assert_eq!(rust_dgram(&a), want);
}

#[test]
fn dgram_random() {
    let strat = (
        (
            any::<u64>(),
            0u32..1 << 24,
            0u8..2,
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
        ),
        (
            any::<[u8; 6]>(),
            any::<u8>(),
            any::<u8>(),
            any::<u32>(),
            any::<[u8; 16]>(),
        ),
    );
    runner(128)
        .run(
            &strat,
            |((key, dqp, ext, srs, fl, rlid), (rmac, tclass, hop, gfl, rgid))| {
                let a = DgramArgs {
                    key,
                    dqp_dct: dqp,
                    ext,
                    stat_rate_sl: srs,
                    fl_mlid: fl,
                    rlid,
                    rmac,
                    tclass,
                    hop_limit: hop,
                    grh_gid_fl: gfl,
                    rgid,
                };
                prop_assert_eq!(rust_dgram(&a), c_dgram(&a));
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn ud_destination_overwrite_matches_the_helper() {
    // rdma-core copies the AH's AV and then overwrites dqp_dct and the qkey; with a qkey the
    // helper's BE64 key is qkey << 32.
    let base = DgramArgs {
        ext: 1,
        stat_rate_sl: 0x20,
        rlid: 0x12b7,
        ..Default::default()
    };
    let mut av = AvSeg::read_from_bytes(&c_dgram(&base)[..]).unwrap();
    av.set_ud_dest(0x00abcdef, 0x11111111);
    let want = c_dgram(&DgramArgs {
        key: 0x11111111 << 32,
        dqp_dct: 0xabcdef,
        ..base
    });
    assert_eq!(av.as_bytes(), &want[..]);
}

#[test]
fn cqe_accessors() {
    // `docs/wqe-layout.md` §9: op_own 0xd3 → owner 1, se 1, format 0, opcode 13 (REQ_ERR).
    let mut raw = [0u8; 64];
    raw[63] = 0xd3;
    assert_eq!(oracle::cqe_fields(&raw), (1, 1, 0, 13));
    for op_own in 0..=255u8 {
        raw[63] = op_own;
        let cqe = Cqe64::from_bytes(&raw);
        assert_eq!(
            (cqe.owner(), cqe.se(), cqe.format(), cqe.opcode()),
            oracle::cqe_fields(&raw),
            "op_own {op_own:#04x}"
        );
        for v in 0..=3u8 {
            let mut c = raw;
            oracle::set_cqe_owner(&mut c, v);
            let mut r = cqe;
            r.set_owner(v);
            assert_eq!(r.as_bytes(), &c, "set_owner({v}) on op_own {op_own:#04x}");
        }
    }
}

/// A whole WQE from `WqeWriter` against one assembled from the C helpers: RC RDMA WRITE with
/// `n` gather entries, at a random producer index of a small ring (so it often wraps).
#[test]
fn writer_wqes_match_helper_built_wqes() {
    #[repr(C, align(64))]
    struct Ring([u8; 256]);
    let strat = (
        any::<u16>(),
        0u32..1 << 24,
        1usize..4,
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    );
    runner(128)
        .run(&strat, |(pi, qpn, n, raddr, rkey, lkey)| {
            let mut r = Ring([0; 256]);
            // SAFETY: `r` is 64-aligned, 256 bytes = 4 basic blocks, and outlives the writer.
            let ring = unsafe { SqRing::new(r.0.as_mut_ptr(), 4) };
            let mut w = WqeWriter::new(&ring, pi, 256);
            w.push(&mlx5_wqe::RaddrSeg::new(raddr, rkey)).unwrap();
            for i in 0..n {
                w.push(&DataSeg::new(64 * i as u32 + 1, lkey, raddr ^ i as u64))
                    .unwrap();
            }
            let ctrl = CtrlSeg::builder()
                .opcode(mlx5_wqe::OPCODE_RDMA_WRITE)
                .qpn(qpn)
                .fm_ce_se(0x08);
            let (ds, _) = w.finish(ctrl);

            // The same WQE, linear, from the C helpers (raddr has no helper: BE fields).
            let mut lin = vec![0u8; 16 * (2 + n)];
            let mut ctrl = [0u8; 16];
            let a = CtrlArgs {
                pi,
                opcode: 0x08,
                qpn,
                fm_ce_se: 0x08,
                ds: ds as u8,
                ..Default::default()
            };
            oracle::set_ctrl_seg(&mut ctrl, a);
            lin[..16].copy_from_slice(&ctrl);
            lin[16..24].copy_from_slice(&raddr.to_be_bytes());
            lin[24..28].copy_from_slice(&rkey.to_be_bytes());
            for i in 0..n {
                let mut d = [0u8; 16];
                oracle::set_data_seg(&mut d, 64 * i as u32 + 1, lkey, raddr ^ i as u64);
                lin[32 + 16 * i..48 + 16 * i].copy_from_slice(&d);
            }
            prop_assert_eq!(ds as usize, 2 + n);
            let start = (pi as usize % 4) * 64;
            for (k, b) in lin.iter().enumerate() {
                prop_assert_eq!(r.0[(start + k) % 256], *b, "byte {} of the WQE", k);
            }
            Ok(())
        })
        .unwrap();
}
