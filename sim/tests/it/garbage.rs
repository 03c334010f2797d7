//! Nothing in a ring, a doorbell record or a UAR page can make the device panic or touch memory
//! outside a registered region (seeded, bounded property test).

use crate::common;

use std::time::Duration;

use common::*;
use mlx5_hw::QpType;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

#[derive(Clone, Debug)]
struct Garbage {
    ring: Vec<u8>,
    patch_qpn: bool,
    sq_dbr: u32,
    rq_dbr: u32,
    bf: Vec<u8>,
    half: bool,
    rq: Vec<u8>,
    set_ci: u32,
    arm: u64,
    ud: bool,
}

fn garbage() -> impl Strategy<Value = Garbage> {
    (
        proptest::collection::vec(any::<u8>(), 0..4096),
        any::<bool>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 8..256),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..512),
        any::<u32>(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(ring, patch_qpn, sq_dbr, rq_dbr, bf, half, rq, set_ci, arm, ud)| Garbage {
                ring,
                patch_qpn,
                sq_dbr,
                rq_dbr,
                bf,
                half,
                rq,
                set_ci,
                arm,
                ud,
            },
        )
}

fn poke(p: *mut u8, bytes: &[u8], max: usize) {
    for (i, b) in bytes.iter().take(max).enumerate() {
        // SAFETY: callers pass a device buffer of at least `max` bytes.
        unsafe { core::ptr::write_volatile(p.add(i), *b) };
    }
}

static CQES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn run(g: &Garbage) {
    let mut p_scq;
    let mut o = Opts::new(if g.ud { QpType::Ud } else { QpType::Rc });
    o.cap.max_send_wr = 8;
    let p = Pair::new(o);
    p_scq = Cq {
        info: p.a.scq.info,
        ci: 0,
        sn: 0,
        ch: None,
    };
    // Registered memory the garbage might name (it must be the only memory touched).
    let guard = p.mem(true, 256);
    let la = p.a.qp.info.layout;
    let ring_len = la.sq.wqe_cnt as usize * 64;
    let mut ring = g.ring.clone();
    if g.patch_qpn {
        // Make every 64-byte block's ctrl carry the right QPN and a small DS so that decoding
        // goes past the first checks.
        for blk in ring.chunks_mut(64) {
            if blk.len() >= 8 {
                let q = p.a.qp.qpn().to_be_bytes();
                blk[4..7].copy_from_slice(&q[1..4]);
                blk[7] &= 0x0f;
            }
        }
    }
    poke(la.sq.buf, &ring, ring_len);
    let lb = p.b.qp.info.layout;
    poke(lb.rq.buf, &g.rq, (lb.rq.wqe_cnt * lb.rq.stride) as usize);
    // SAFETY: the QPs' and CQs' doorbell records and UAR pages.
    unsafe {
        let sq_dbr = if g.patch_qpn { g.sq_dbr % 80 } else { g.sq_dbr };
        mlx5_hw::mmio::write_dbrec(la.dbrec.add(1), sq_dbr);
        mlx5_hw::mmio::write_dbrec(lb.dbrec, g.rq_dbr);
        let reg = la.bf.reg.add(if g.half { 256 } else { 0 });
        poke(reg, &g.bf, 256);
        let c = p.a.scq.info.layout;
        // A garbage consumer index overruns the CQ at once; keep it sane when the ring is
        // the target.
        mlx5_hw::mmio::write_dbrec(c.dbrec, if g.patch_qpn { 0 } else { g.set_ci });
        mlx5_hw::mmio::write_dbrec(c.dbrec.add(1), (g.arm >> 32) as u32);
        core::ptr::write_volatile(c.cq_uar.add(0x20) as *mut u64, g.arm);
    }
    p.fabric.run_until_idle();
    p.fabric.advance(Duration::from_secs(2));
    let _ = guard.read(0, 256);
    let n = p_scq.drain().len();
    CQES.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

#[test]
fn garbage_never_panics() {
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7u8; 32]),
    );
    runner
        .run(&garbage(), |g| {
            run(&g);
            Ok(())
        })
        .unwrap();
    // The garbage reached the WQE decoder (error CQEs were written), it did not just bounce off.
    assert!(CQES.load(std::sync::atomic::Ordering::Relaxed) > 0);
}
