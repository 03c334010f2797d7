//! Shared BlueFlame registers under two threads: 2 threads × 32 QPs on one context, which has
//! rdma-core's default 4 dedicated registers and 11 shared ones (`sim/src/doorbell/shared.rs`),
//! so most QPs share a register with QPs of the other thread. Every thread posts thousands of
//! lean inline WRITEs (the BlueFlame-eligible shape); the QPs on shared registers ring the
//! 8-byte doorbell (`mlx5_hw::BfLayout::shared`), which cannot interleave. No driver bug may be
//! reported, every WR must complete exactly once and every byte must arrive. Through rdma-core
//! (`MLX5_TEST_DEVICE`) the QPs all have dedicated registers (BlueFlame copies from both
//! threads, each to its own register) and the same counts and bytes are checked.

use std::time::{Duration, Instant};

use mlx5_ctx::{Cq, Qp, QpInit};
use mlx5_qp::{DoorbellMode, SendFlags, Wc, WcStatus};

use crate::support::{connect_rc, Params};

const THREADS: usize = 2;
const QPS: usize = 32;
/// Posts per QP: 32 × 256 = 8192 per thread.
const POSTS: usize = 256;

fn wr_id(t: usize, q: usize, k: usize) -> u64 {
    ((t * QPS + q) * POSTS + k) as u64
}

/// The 8 bytes WR `id` writes, at `id × 8` in the remote region.
fn value(id: u64) -> u64 {
    id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

#[test]
fn two_threads_of_32_qps_on_shared_registers_lose_and_corrupt_nothing() {
    let (a, b) = crate::support::contexts();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cq_b = b.create_cq(64).unwrap();
    let remote = pd_b.alloc_mr(THREADS * QPS * POSTS * 8).unwrap();
    let cqs: Vec<Cq> = (0..THREADS).map(|_| a.create_cq(4096).unwrap()).collect();
    // Created alternately, so that QPs of both threads land on each shared register.
    let mut qps: Vec<Vec<Qp>> = (0..THREADS).map(|_| Vec::new()).collect();
    let mut peers = Vec::new();
    for q in 0..QPS {
        for t in 0..THREADS {
            let init = QpInit::rc(&cqs[t]).max_send_wr(64).max_recv_wr(1);
            let mut qa = pd_a.create_qp(&init).unwrap();
            let mut qb = pd_b
                .create_qp(&QpInit::rc(&cq_b).max_send_wr(1).max_recv_wr(1))
                .unwrap();
            let psn = (q * THREADS + t) as u32;
            connect_rc(&mut qa, &qb, &Params::default(), psn, psn + 0x1000);
            connect_rc(&mut qb, &qa, &Params::default(), psn + 0x1000, psn);
            qps[t].push(qa);
            peers.push(qb);
        }
    }
    let modes: Vec<DoorbellMode> = qps.iter().flatten().map(|q| q.doorbell_mode()).collect();
    let db = modes.iter().filter(|&&m| m == DoorbellMode::Db).count();
    if let Some(dev) = a.sim_device() {
        assert_eq!(
            (modes.len() - db, db),
            (4, 60),
            "4 dedicated registers, 60 QPs sharing"
        );
        let sharing = dev.shared_bfregs();
        assert_eq!(sharing.len(), 11);
        let of_thread = |qpn: u32, t: usize| qps[t].iter().any(|q| q.qpn() == qpn);
        assert!(
            sharing
                .iter()
                .all(|r| r.iter().any(|&n| of_thread(n, 0)) && r.iter().any(|&n| of_thread(n, 1))),
            "every shared register has QPs of both threads: {sharing:?}"
        );
    } else {
        // Through rdma-core every QP is created on a thread domain of its own, which libmlx5
        // gives a dedicated register (hw/src/verbs/mlx5.rs `create_qp`; rdma-core
        // providers/mlx5/verbs.c `mlx5_alloc_td`): BlueFlame on all 64, none shared.
        assert_eq!((modes.len() - db, db), (64, 0), "dedicated registers");
    }

    let raddr = remote.remote(0).unwrap();
    let results: Vec<(Vec<u64>, Cq, Vec<Qp>)> = std::thread::scope(|s| {
        let handles: Vec<_> = cqs
            .into_iter()
            .zip(qps)
            .enumerate()
            .map(|(t, (mut cq, mut qps))| {
                s.spawn(move || {
                    let mut done = Vec::with_capacity(QPS * POSTS);
                    let mut wcs = [Wc::default(); 64];
                    let mut poll = |cq: &mut Cq, qps: &mut Vec<Qp>, done: &mut Vec<u64>| {
                        let n = cq.poll(&mut qps[..], &mut wcs).unwrap();
                        for wc in &wcs[..n] {
                            assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
                            done.push(wc.wr_id());
                        }
                    };
                    let deadline = Instant::now() + Duration::from_secs(120);
                    for k in 0..POSTS {
                        for q in 0..QPS {
                            let id = wr_id(t, q, k);
                            let mut ra = raddr;
                            ra.addr += id * 8;
                            let data = value(id).to_le_bytes();
                            while qps[q]
                                .post_write_inline(id, &data, ra, SendFlags::SIGNALED)
                                .is_err()
                            {
                                // The SQ is full: reap completions first.
                                poll(&mut cq, &mut qps, &mut done);
                                assert!(Instant::now() < deadline, "thread {t} stalled");
                                std::thread::yield_now();
                            }
                        }
                        poll(&mut cq, &mut qps, &mut done);
                    }
                    while done.len() < QPS * POSTS {
                        poll(&mut cq, &mut qps, &mut done);
                        assert!(
                            Instant::now() < deadline,
                            "thread {t} stalled with {} of {} completions",
                            done.len(),
                            QPS * POSTS
                        );
                        std::thread::yield_now();
                    }
                    (done, cq, qps)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // The QPs are still alive: their doorbell counts are in the device's stats.
    if let Some(dev) = a.sim_device() {
        let stats = dev.doorbell_stats();
        assert!(stats.doorbells > 0, "{stats:?}");
    }
    for (t, (done, _, _)) in results.iter().enumerate() {
        let mut done = done.clone();
        done.sort_unstable();
        let want: Vec<u64> = (0..QPS)
            .flat_map(|q| (0..POSTS).map(move |k| wr_id(t, q, k)))
            .collect();
        let mut want = want;
        want.sort_unstable();
        assert_eq!(done, want, "thread {t}: every WR completes exactly once");
    }
    for id in 0..(THREADS * QPS * POSTS) as u64 {
        let got = remote.read(id as usize * 8, 8).unwrap();
        assert_eq!(got, value(id).to_le_bytes(), "WR {id}'s bytes");
    }
    let bugs = crate::support::take_driver_bugs(&a);
    assert!(bugs.is_empty(), "driver bugs: {bugs:#?}");
    drop((results, peers));
}
