//! DCI WQEs of the data path against the ones libmlx5 builds (rdma-core 44, `ibv_wr_*` plus
//! `mlx5dv_wr_set_dc_addr` / `mlx5dv_wr_set_dc_addr_stream`): every opcode a DCI carries
//! (SEND, SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM, READ, CAS, FAA), inline and gathered, any
//! flags, with and without a stream, at every position of a small ring (so segments and inline
//! payloads wrap at its end), posted one after another on the same ring as a program posts
//! them.
//!
//! The oracle (`oracle.c` `oracle_dci_wqe`) replays libmlx5's stores on a copy of the ring as
//! it was before each post. Which bytes libmlx5 stores is found by replaying on two copies
//! filled with different bytes: where the results agree, libmlx5 wrote the byte, and the data
//! path's byte must be the same. Where they differ, libmlx5 leaves what the ring held, and so
//! does the data path, except in two of libmlx5's gaps, which the device ignores and where the
//! data path writes 0 (as rdma-core's own `ibv_post_send` does): the immediate of an opcode
//! without one (`_common_wqe_init_op` does not touch ctrl bytes 12–15) and the compare operand
//! of a fetch-and-add (`_set_atomic_seg` stores only `swap_add`). The padding after an inline
//! payload both leave alone.

use mlx5_conformance::oracle::{self, DciWr};
use mlx5_hw::QpType;
use mlx5_qp::{DcDest, RemoteAddr, SendFlags, SendWr, Sge, Wc};
use mlx5_ram_rings::{build_cq, build_qp, RigCfg};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const BLOCKS: u32 = 8;
const QPN: u32 = 0x00ab_cd12;

// verbs.h `enum ibv_wr_opcode` and `enum ibv_send_flags`.
const IBV_WR_RDMA_WRITE: u32 = 0;
const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
const IBV_WR_SEND: u32 = 2;
const IBV_WR_SEND_WITH_IMM: u32 = 3;
const IBV_WR_RDMA_READ: u32 = 4;
const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
const IBV_SEND_FENCE: u32 = 1;
const IBV_SEND_SIGNALED: u32 = 2;
const IBV_SEND_SOLICITED: u32 = 4;

fn wr_strategy() -> impl Strategy<Value = DciWr> {
    let opcode = prop_oneof![
        Just(IBV_WR_SEND),
        Just(IBV_WR_SEND_WITH_IMM),
        Just(IBV_WR_RDMA_WRITE),
        Just(IBV_WR_RDMA_WRITE_WITH_IMM),
        Just(IBV_WR_RDMA_READ),
        Just(IBV_WR_ATOMIC_CMP_AND_SWP),
        Just(IBV_WR_ATOMIC_FETCH_AND_ADD),
    ];
    let sge = (
        any::<u64>(),
        prop_oneof![Just(0u32), 1u32..5000],
        any::<u32>(),
    );
    (
        opcode,
        (any::<bool>(), any::<bool>()),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 48),
        (
            0u32..1 << 24,
            any::<u64>(),
            proptest::option::of(any::<u16>()),
        ),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
        (
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..=220),
            proptest::collection::vec(sge, 1..=4),
        ),
    )
        .prop_map(
            |(op, (fence, sol), imm, av, (dctn, key, stream), (ra, rkey, swap, cmp), data)| {
                let (inline, bytes, sges) = data;
                let atomic = matches!(op, IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD);
                let mut w = DciWr {
                    ib_opcode: op,
                    send_flags: IBV_SEND_SIGNALED
                        | if fence { IBV_SEND_FENCE } else { 0 }
                        | if sol { IBV_SEND_SOLICITED } else { 0 },
                    imm_be: imm,
                    av: av.try_into().unwrap(),
                    dctn,
                    dc_key: key,
                    stream,
                    // Atomics: 8-byte aligned targets (the data path refuses others).
                    remote_addr: if atomic { ra & !7 } else { ra },
                    rkey,
                    swap,
                    compare_add: cmp,
                    inline: None,
                    sges: Vec::new(),
                };
                if atomic {
                    // The local buffer: one 8-byte entry (`ibv_wr_set_sge(qp, lkey, addr, 8)`).
                    w.sges = vec![(sges[0].0, 8, sges[0].2)];
                } else if inline && op != IBV_WR_RDMA_READ {
                    w.inline = Some(bytes);
                } else {
                    w.sges = sges;
                }
                w
            },
        )
}

/// The same WR on the data path.
fn post(qp: &mut mlx5_qp::Qp, w: &DciWr) -> mlx5_qp::Result<()> {
    let dest = match w.stream {
        Some(s) => DcDest::new(&w.av, w.dctn, w.dc_key).stream(s),
        None => DcDest::new(&w.av, w.dctn, w.dc_key),
    };
    let remote = RemoteAddr::new(w.remote_addr, w.rkey);
    let sges: Vec<Sge> = w
        .sges
        .iter()
        .map(|&(addr, length, lkey)| Sge { addr, length, lkey })
        .collect();
    let imm = u32::from_be(w.imm_be);
    let wr = match w.ib_opcode {
        IBV_WR_SEND => SendWr::send(1),
        IBV_WR_SEND_WITH_IMM => SendWr::send_imm(1, imm),
        IBV_WR_RDMA_WRITE => SendWr::write(1, remote),
        IBV_WR_RDMA_WRITE_WITH_IMM => SendWr::write_imm(1, remote, imm),
        IBV_WR_RDMA_READ => SendWr::read(1, remote),
        IBV_WR_ATOMIC_CMP_AND_SWP => SendWr::comp_swap(1, remote, sges[0], w.compare_add, w.swap),
        _ => SendWr::fetch_add(1, remote, sges[0], w.compare_add),
    };
    let atomic = matches!(
        w.ib_opcode,
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    );
    let wr = match (&w.inline, atomic) {
        (_, true) => wr,
        (Some(b), false) => wr.inline(b),
        (None, false) => wr.sges(&sges),
    };
    let mut flags = SendFlags::SIGNALED;
    if w.send_flags & IBV_SEND_FENCE != 0 {
        flags |= SendFlags::FENCE;
    }
    if w.send_flags & IBV_SEND_SOLICITED != 0 {
        flags |= SendFlags::SOLICITED;
    }
    qp.post(&wr.flags(flags).dc(&dest))
}

/// The offsets (in the WQE, from its ctrl segment) where libmlx5 leaves the ring's bytes, the
/// device ignores them and the data path writes 0: the immediate of an opcode without one, a
/// FAA's compare operand. (The padding after an inline payload both leave alone.)
fn known_gap(w: &DciWr, off: usize) -> bool {
    let with_imm = matches!(
        w.ib_opcode,
        IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM
    );
    if (12..16).contains(&off) && !with_imm {
        return true;
    }
    // ctrl 16 + AV 48 + raddr 16: the atomic segment is bytes 80..96, compare at 88.
    if w.ib_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && (88..96).contains(&off) {
        return true;
    }
    false
}

fn read_ring(p: *const u8) -> Vec<u8> {
    let mut v = vec![0u8; BLOCKS as usize * 64];
    // SAFETY: the ring is BLOCKS × 64 bytes, alive while its QpRings is; nothing writes it
    // during the copy (the data path writes only inside `post`).
    unsafe { core::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), v.len()) };
    v
}

#[test]
fn dci_wqes_are_libmlx5s_byte_for_byte() {
    let cfg = RigCfg {
        qp_type: QpType::Dci,
        sq_bbs: BLOCKS,
        ..RigCfg::rc_bf()
    };
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 48,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[0xdc; 32]),
    );
    runner
        .run(&proptest::collection::vec(wr_strategy(), 1..24), |wrs| {
            let (mut qp, rings) = build_qp(&cfg, QPN);
            let (mut cq, mut cq_rings) = build_cq(64);
            let mut wcs = [Wc::default(); 4];
            for w in &wrs {
                let pi = qp.sq_pi();
                let before = read_ring(rings.sq());
                post(&mut qp, w).map_err(|e| TestCaseError::fail(format!("{e}: {w:?}")))?;
                let after = read_ring(rings.sq());
                let mut zeros = before.clone();
                zeros.fill(0);
                let mut ones = before.clone();
                ones.fill(0xff);
                let mut want = before.clone();
                let ds = oracle::dci_wqe(&mut want, pi as u32, QPN, w) as usize;
                oracle::dci_wqe(&mut zeros, pi as u32, QPN, w);
                oracle::dci_wqe(&mut ones, pi as u32, QPN, w);
                prop_assert!(ds >= 4, "the oracle built it");
                let ring = BLOCKS as usize * 64;
                let start = (pi as usize % BLOCKS as usize) * 64;
                for k in 0..ring {
                    let off = (k + ring - start) % ring;
                    let in_wqe = off < ds.div_ceil(4) * 64;
                    if zeros[k] == ones[k] {
                        prop_assert_eq!(
                            after[k],
                            want[k],
                            "byte {} of the WQE (ring byte {}) of {:?}",
                            off,
                            k,
                            w
                        );
                    } else if after[k] != before[k] {
                        // The data path wrote a byte libmlx5 leaves alone: only in one of
                        // libmlx5's known gaps, and only a zero.
                        prop_assert!(
                            in_wqe && known_gap(w, off) && after[k] == 0,
                            "byte {} (ring byte {}) is {:#x}, libmlx5 leaves it at {:#x} ({:?})",
                            off,
                            k,
                            after[k],
                            before[k],
                            w
                        );
                    }
                }
                // Retire it, as its completion would.
                cq_rings.push_req(QPN, pi, mlx5_wqe::OPCODE_RDMA_WRITE);
                let n = cq
                    .poll(&mut qp, &mut wcs)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(n, 1);
            }
            drop(qp);
            drop(rings);
            Ok(())
        })
        .unwrap();
}
