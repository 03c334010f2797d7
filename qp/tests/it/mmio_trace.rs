//! The MMIO sequence of every post and poll path, recorded by the test-only trace of
//! `mlx5_hw::mmio` (feature `mmio-trace`) on rings in ordinary memory, and checked per
//! doorbell mode and per architecture against the sequences of rdma-core and UCX
//! (`docs/sources.md` §5 and §12):
//!
//! - [`DoorbellMode::Bf`]: rdma-core `providers/mlx5/qp.c` `post_send_db` —
//!   `udma_to_device_barrier` → `dbrec[1]` → `mmio_wc_start` → `mlx5_bf_copy` (64-byte lines,
//!   ascending) → `mmio_flush_writes` → toggle;
//! - [`DoorbellMode::BfPost`]: UCX `uct_ib_mlx5_post_send` → `uct_ib_mlx5_txwq_ring_doorbell`
//!   in `BF_POST` — store fence → DBR → bus store fence → `uct_ib_mlx5_bf_copy` →
//!   `ucs_memory_bus_cacheline_wc_flush` (no fence after the copy);
//! - [`DoorbellMode::Db`] and every batch or WQE larger than a half: the 8-byte doorbell
//!   (`mmio_write64_be`) followed by `mmio_flush_writes`;
//! - polls: `udma_from_device_barrier` after the owner byte, before the rest of the CQE
//!   (rdma-core `mlx5_get_next_cqe`), then the consumer-index record; arming:
//!   `dbrec[1]` → `mmio_wc_start` → doorbell → `mmio_flush_writes` (rdma-core `mlx5_arm_cq`).
//!
//! A software device on x86 cannot see a missing barrier; this trace can (each barrier of
//! `hw/src/mmio.rs` records itself where it issues its instruction), and the release
//! disassembly test of the root crate (`tests/it/mmio_fences.rs`) checks that the
//! instructions are really there.

use crate::common::{req, FakeCq, FakeQp, QpCfg, BF_OFF};
use mlx5_hw::mmio::trace::{self, Event};
use mlx5_hw::mmio::{Insn, Prim};
use mlx5_hw::QpState;
use mlx5_qp::{Cq, DoorbellMode, Qp, RemoteAddr, SendFlags, SendWr, Sge, Wc};

/// The instruction of each primitive on this architecture (rdma-core `util/udma_barrier.h`,
/// UCX `ucs/arch/*/cpu.h`; the table of `docs/sources.md` §12).
fn insn(p: Prim) -> Insn {
    #[cfg(target_arch = "x86_64")]
    return match p {
        Prim::ToDevice | Prim::WcLineDone => Insn::Compiler,
        Prim::FromDevice => Insn::Lfence,
        Prim::Flush | Prim::WcStart => Insn::Sfence,
    };
    #[cfg(target_arch = "aarch64")]
    return match p {
        Prim::ToDevice => Insn::DmbOshst,
        Prim::FromDevice => Insn::DmbOshld,
        Prim::Flush | Prim::WcStart => Insn::DsbSt,
        Prim::WcLineDone => Insn::Dgh,
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return match p {
        Prim::ToDevice | Prim::WcLineDone => Insn::Compiler,
        _ => Insn::Fence,
    };
}

/// One step of an expected sequence, addresses relative to the fake QP / CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    B(Prim),
    /// The SQ doorbell record (`dbrec[1]`) with this value.
    SqDbr(u32),
    /// The CQ consumer-index record (`dbrec[0]`).
    CqCi(u32),
    /// The CQ arm record (`dbrec[1]`), any value.
    CqArm,
    /// A store of `len` bytes at this offset of the QP's bfreg.
    Reg(usize, usize),
}

use Step::*;

/// The trace in terms of [`Step`]; a barrier whose instruction is not this architecture's
/// fails here.
fn steps(events: &[Event], qp: Option<&FakeQp>, cq: Option<&FakeCq>) -> Vec<Step> {
    events
        .iter()
        .map(|e| match *e {
            Event::Barrier(p, i) => {
                assert_eq!(i, insn(p), "{p:?} issued the wrong instruction");
                B(p)
            }
            Event::DbRec { addr, value } => {
                if let Some(q) = qp {
                    if addr == q.dbrec.ptr() as usize + 4 {
                        return SqDbr(value);
                    }
                }
                let c = cq.expect("a record of neither the QP nor the CQ");
                match addr - c.dbrec.ptr() as usize {
                    0 => CqCi(value),
                    4 => CqArm,
                    o => panic!("a store at CQ record offset {o}"),
                }
            }
            Event::Store { addr, len } => {
                let q = qp.expect("a register store without a QP");
                let reg = q.uar.ptr() as usize + BF_OFF;
                assert!(addr >= reg && addr + len <= reg + 512, "outside the bfreg");
                Reg(addr - reg, len)
            }
        })
        .collect()
}

/// The start of every SQ doorbell (rdma-core `post_send_db`, UCX
/// `uct_ib_mlx5_txwq_ring_doorbell`): store barrier, `dbrec[1]`, WC start.
fn begin(pi: u32) -> Vec<Step> {
    vec![B(Prim::ToDevice), SqDbr(pi), B(Prim::WcStart)]
}

/// A BlueFlame copy of `lines` lines into the half at `half` followed by `end`.
fn bf(pi: u32, half: usize, lines: usize, end: Prim) -> Vec<Step> {
    let mut v = begin(pi);
    v.extend((0..lines).map(|k| Reg(half + 64 * k, 64)));
    v.push(B(end));
    v
}

/// The 8-byte doorbell into `half`, flushed.
fn db(pi: u32, half: usize) -> Vec<Step> {
    let mut v = begin(pi);
    v.extend([Reg(half, 8), B(Prim::Flush)]);
    v
}

fn qp_in(fake: &FakeQp, mode: DoorbellMode) -> Qp {
    // SAFETY: `fake` owns the memory and outlives the QP in every test.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_state(QpState::Rts);
    qp.set_doorbell_mode(mode).unwrap();
    // Room for every post of a test without retiring any (16 blocks, one WR each).
    qp.set_max_send_wr(12).unwrap();
    qp
}

const REMOTE: RemoteAddr = RemoteAddr::new(0x1000, 7);
const SGE: Sge = Sge {
    addr: 0x2000,
    length: 8,
    lkey: 9,
};

/// Every one-block post the QP offers (the generic `post` and the four lean entry points).
fn one_block_posts(qp: &mut Qp, i: u64) {
    let wr = SendWr::write(i, REMOTE).inline(b"12345678").signaled();
    match i % 5 {
        0 => qp.post(&wr).unwrap(),
        1 => qp
            .post_write_inline(i, b"8 bytes!", REMOTE, SendFlags::SIGNALED)
            .unwrap(),
        2 => qp.post_write(i, SGE, REMOTE, SendFlags::SIGNALED).unwrap(),
        3 => qp.post_send_inline(i, b"hi", SendFlags::SIGNALED).unwrap(),
        _ => qp.post_send(i, SGE, SendFlags::SIGNALED).unwrap(),
    }
}

/// Ten one-block posts in `mode` (two through each entry point), each traced alone.
fn one_block_sequence(mode: DoorbellMode) {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, mode);
    for i in 0..10u64 {
        trace::start();
        one_block_posts(&mut qp, i);
        let got = steps(&trace::take(), Some(&fake), None);
        let pi = i as u32 + 1;
        let want = match mode {
            // The halves alternate (rdma-core `bf->offset ^= bf->buf_size`).
            DoorbellMode::Bf => bf(pi, (i as usize % 2) * 256, 1, Prim::Flush),
            DoorbellMode::BfPost => bf(pi, (i as usize % 2) * 256, 1, Prim::WcLineDone),
            // bf.size 256 but 8-byte doorbells only: UCX's DB mode also toggles.
            DoorbellMode::Db => db(pi, (i as usize % 2) * 256),
            other => panic!("no expected sequence for {other:?}"),
        };
        assert_eq!(got, want, "{mode:?}, post {i} (entry point {})", i % 5);
    }
}

#[test]
fn bf_mode_is_rdma_cores_post_send_db() {
    one_block_sequence(DoorbellMode::Bf);
}

#[test]
fn bf_post_mode_is_ucx_bf_post() {
    one_block_sequence(DoorbellMode::BfPost);
}

#[test]
fn db_mode_is_the_flushed_8_byte_doorbell() {
    one_block_sequence(DoorbellMode::Db);
}

#[test]
fn without_blueflame_every_doorbell_is_8_bytes_at_the_register() {
    let fake = FakeQp::new(&QpCfg {
        bf_size: 0,
        ..QpCfg::default()
    });
    // SAFETY: as in `qp_in`.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    qp.set_state(QpState::Rts);
    qp.set_max_send_wr(12).unwrap();
    for i in 0..5u64 {
        trace::start();
        one_block_posts(&mut qp, i);
        // `offset ^= 0`: the register stays put (rdma-core `post_send_db`).
        assert_eq!(
            steps(&trace::take(), Some(&fake), None),
            db(i as u32 + 1, 0)
        );
    }
}

#[test]
fn multi_block_wqes_copy_every_line_in_order_and_larger_ones_ring_8_bytes() {
    for mode in [DoorbellMode::Bf, DoorbellMode::BfPost] {
        let fake = FakeQp::new(&QpCfg::default());
        let mut qp = qp_in(&fake, mode);
        // 100 bytes of inline data: ctrl + raddr + 4 + 100 → 9 DS, 3 blocks (`mlx5_bf_copy`
        // copies align64(ds × 16) bytes).
        let data = [0x5a; 100];
        trace::start();
        qp.post_write_inline(1, &data, REMOTE, SendFlags::SIGNALED)
            .unwrap();
        let end = if mode == DoorbellMode::Bf {
            Prim::Flush
        } else {
            Prim::WcLineDone
        };
        assert_eq!(
            steps(&trace::take(), Some(&fake), None),
            bf(3, 0, 3, end),
            "{mode:?}: three lines"
        );
        // 200 bytes: 16 DS, 4 blocks = 256 bytes, exactly a half.
        let data = [0xa5; 200];
        trace::start();
        qp.post_write_inline(2, &data, REMOTE, SendFlags::SIGNALED)
            .unwrap();
        assert_eq!(
            steps(&trace::take(), Some(&fake), None),
            bf(7, 256, 4, end),
            "{mode:?}: a whole half"
        );
    }
    // A WQE larger than a half (`size <= bf->buf_size / 16` fails): the 8-byte doorbell.
    let fake = FakeQp::new(&QpCfg {
        bf_size: 128,
        ..QpCfg::default()
    });
    let mut qp = qp_in(&fake, DoorbellMode::Bf);
    let data = [1; 100];
    trace::start();
    qp.post_write_inline(1, &data, REMOTE, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(steps(&trace::take(), Some(&fake), None), db(3, 0));
}

#[test]
fn a_batch_rings_once_with_the_8_byte_doorbell_in_every_mode() {
    for mode in [DoorbellMode::Bf, DoorbellMode::BfPost, DoorbellMode::Db] {
        let fake = FakeQp::new(&QpCfg::default());
        let mut qp = qp_in(&fake, mode);
        trace::start();
        for i in 0..3 {
            qp.post_deferred(&SendWr::write(i, REMOTE).inline(b"abc"))
                .unwrap();
        }
        assert!(
            trace::take().is_empty(),
            "{mode:?}: nothing before the doorbell"
        );
        trace::start();
        qp.ring_doorbell();
        // BlueFlame only for a single WQE (rdma-core `post_send_db`: `nreq == 1`).
        assert_eq!(
            steps(&trace::take(), Some(&fake), None),
            db(3, 0),
            "{mode:?}"
        );
    }
}

#[test]
fn poll_orders_the_cqe_after_its_owner_then_writes_the_consumer_index() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, DoorbellMode::BfPost);
    let mut fcq = FakeCq::new(8, 64, false);
    // SAFETY: `fcq` owns the memory and outlives the CQ.
    let mut cq = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    for i in 0..3u64 {
        qp.post_write_inline(i, b"x", REMOTE, SendFlags::SIGNALED)
            .unwrap();
        fcq.push(req(0x1234, i as u16, mlx5_wqe::opcode::OPCODE_RDMA_WRITE));
    }
    let mut wcs = [Wc::default(); 4];
    trace::start();
    let n = cq.poll(&mut qp, &mut wcs).unwrap();
    let got = steps(&trace::take(), None, Some(&fcq));
    assert_eq!(n, 3);
    // One load barrier per CQE, each after its owner test; one CI record for the batch.
    let fence = B(Prim::FromDevice);
    #[cfg(target_arch = "x86_64")]
    let want = vec![fence, fence, fence, CqCi(3)];
    #[cfg(not(target_arch = "x86_64"))]
    let want = vec![fence, fence, fence, fence, CqCi(3)];
    assert_eq!(got, want);
    trace::start();
    assert_eq!(cq.poll(&mut qp, &mut wcs).unwrap(), 0);
    assert_eq!(
        trace::take(),
        vec![],
        "an empty CQ: nothing ordered, nothing written"
    );

    // The lean send poll: the same barrier per CQE.
    for i in 3..5u64 {
        qp.post_write_inline(i, b"x", REMOTE, SendFlags::SIGNALED)
            .unwrap();
        fcq.push(req(0x1234, i as u16, mlx5_wqe::opcode::OPCODE_RDMA_WRITE));
    }
    let mut ids = [0u64; 16];
    trace::start();
    assert_eq!(cq.poll_send(&mut qp, &mut ids, |_| {}).unwrap(), 2);
    let got = steps(&trace::take(), None, Some(&fcq));
    assert_eq!(got.last(), Some(&CqCi(5)), "{got:?}");
    let fences = &got[..got.len() - 1];
    assert!(
        !fences.is_empty() && fences.iter().all(|s| *s == fence),
        "the lean poll orders the CQEs after their owner bytes: {got:?}"
    );
}

#[test]
fn arm_writes_the_record_then_fences_around_the_doorbell() {
    let fcq = FakeCq::new(8, 64, false);
    // SAFETY: as above.
    let mut cq = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    trace::start();
    cq.arm(false);
    // rdma-core `mlx5_arm_cq`: record, `mmio_wc_start`, 64-bit doorbell, `mmio_flush_writes`.
    assert_eq!(
        steps(&trace::take(), None, Some(&fcq)),
        vec![CqArm, B(Prim::WcStart), B(Prim::Flush)]
    );
}

#[test]
fn the_trace_is_off_until_started() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = qp_in(&fake, DoorbellMode::Bf);
    qp.post_write_inline(1, b"x", REMOTE, SendFlags::SIGNALED)
        .unwrap();
    assert!(trace::take().is_empty());
}
