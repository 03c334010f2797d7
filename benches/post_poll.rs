//! What a post and a poll cost, measured against rings in ordinary memory with a RAM page
//! standing in for the UAR (`docs/sources.md` §21), next to the floor: the bare stores any mlx5
//! post must make (a 64-byte WQE, the doorbell record, a 64-byte BlueFlame copy and its
//! fences).
//!
//! Run: `cargo bench -p mlx5-direct --bench post_poll` (about 40 s). Criterion prints its own
//! figures per case; the run ends with a table of each case's median time per operation and its
//! ratio to the floor, measured in the same run. Compare ratios, not absolute times
//! (`docs/sources.md` §21).
//!
//! Every post benchmark writes into the ring for a chunk of WRs, then (outside the timed
//! region) plays the device — one requester CQE naming the last WQE, polled — so that the send
//! queue gets its credits back. The poll benchmark posts and writes its CQEs outside the timed
//! region and times only `Cq::poll`.

use mlx5_ram_rings as ram_rings;

use criterion::{criterion_group, Criterion};
use mlx5_hw::QpType;
use mlx5_qp::{DoorbellMode, QpTable, SendWr, Sge, UdDest, Wc};
use mlx5_wqe::opcode as op;
use ram_rings::{build_cq, build_qp, Floor, Rig, RigCfg, PAYLOAD, REMOTE};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Per-case nanoseconds per operation, one entry per criterion call of `iter_custom`
/// (warm-up and samples), for the closing summary.
static SAMPLES: Mutex<Vec<(&'static str, f64, Vec<f64>)>> = Mutex::new(Vec::new());

/// Remember one measurement of `iters` operations (each `ops_per_iter` WRs or CQEs).
fn record(name: &'static str, ops_per_iter: f64, iters: u64, took: Duration) {
    if iters == 0 {
        return;
    }
    let ns = took.as_nanos() as f64 / (iters as f64 * ops_per_iter);
    let mut s = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    match s.iter_mut().find(|e| e.0 == name) {
        Some(e) => e.2.push(ns),
        None => s.push((name, ops_per_iter, vec![ns])),
    }
}

/// Time `iters` calls of `post` in chunks the send queue can hold, retiring the ring between
/// chunks (untimed). One call posts `wrs` WRs filling `bbs` 64-byte blocks.
fn post_loop(
    rig: &mut Rig,
    iters: u64,
    (wrs, bbs): (u32, u32),
    opcode: u8,
    mut post: impl FnMut(&mut Rig, u64),
) -> Duration {
    let chunk = (rig.qp.sq_free_bbs() / bbs)
        .min(rig.qp.sq_free_wrs() / wrs)
        .max(1) as u64;
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let k = chunk.min(iters - done);
        let t = Instant::now();
        for i in 0..k {
            post(rig, done + i);
        }
        total += t.elapsed();
        rig.retire(opcode);
        done += k;
    }
    total
}

/// One post benchmark: `make` builds and posts one WR on the rig.
fn bench_post(
    c: &mut Criterion,
    name: &'static str,
    cfg: RigCfg,
    bbs: u32,
    opcode: u8,
    post: impl Fn(&mut Rig, u64) + Copy,
) {
    let mut rig = Rig::new(cfg);
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let took = post_loop(&mut rig, iters, (1, bbs), opcode, post);
            record(name, 1.0, iters, took);
            took
        })
    });
}

/// Post one WR and remember its producer index for the retiring CQE.
#[inline(always)]
fn post_one(rig: &mut Rig, wr: &SendWr<'_>) {
    let pi = rig.qp.sq_pi();
    if rig.qp.post(black_box(wr)).is_err() {
        panic!("post failed on a free ring");
    }
    rig.last_pi = pi;
}

fn posts(c: &mut Criterion) {
    let rc_bf = RigCfg::rc_bf();
    let rc_db = RigCfg {
        bf_size: 0,
        ..rc_bf
    };
    bench_post(
        c,
        "post/write_inline8_bf",
        rc_bf,
        1,
        op::OPCODE_RDMA_WRITE,
        |rig, i| {
            let wr = SendWr::write(i, REMOTE).inline(&PAYLOAD).signaled();
            post_one(rig, &wr);
        },
    );
    // The same post in rdma-core's exact sequence (a flush after the BlueFlame copy).
    bench_post(
        c,
        "post/write_inline8_bf_flush",
        RigCfg {
            doorbell: Some(DoorbellMode::Bf),
            ..rc_bf
        },
        1,
        op::OPCODE_RDMA_WRITE,
        |rig, i| {
            let wr = SendWr::write(i, REMOTE).inline(&PAYLOAD).signaled();
            post_one(rig, &wr);
        },
    );
    bench_post(
        c,
        "post/write_sge_db",
        rc_db,
        1,
        op::OPCODE_RDMA_WRITE,
        |rig, i| {
            let sge = [Sge {
                addr: 0x1000,
                length: 8,
                lkey: 7,
            }];
            let wr = SendWr::write(i, REMOTE).sges(&sge).signaled();
            post_one(rig, &wr);
        },
    );
    bench_post(
        c,
        "post/send_inline8_bf",
        rc_bf,
        1,
        op::OPCODE_SEND,
        |rig, i| {
            let wr = SendWr::send(i).inline(&PAYLOAD).signaled();
            post_one(rig, &wr);
        },
    );
    bench_post(
        c,
        "post/read_sge_bf",
        rc_bf,
        1,
        op::OPCODE_RDMA_READ,
        |rig, i| {
            let sge = [Sge {
                addr: 0x1000,
                length: 8,
                lkey: 7,
            }];
            let wr = SendWr::read(i, REMOTE).sges(&sge).signaled();
            post_one(rig, &wr);
        },
    );
    bench_post(
        c,
        "post/faa_bf",
        rc_bf,
        1,
        op::OPCODE_ATOMIC_FA,
        |rig, i| {
            let local = Sge {
                addr: 0x1000,
                length: 8,
                lkey: 7,
            };
            let wr = SendWr::fetch_add(i, REMOTE, local, 1).signaled();
            post_one(rig, &wr);
        },
    );
    // UD: ctrl + 48-byte AV + inline = 80 bytes, two blocks, copied whole through BlueFlame.
    let ud = RigCfg {
        qp_type: QpType::Ud,
        ..rc_bf
    };
    let dest = UdDest::new(&[0u8; 48], 0x99, 0x1111_1111);
    bench_post(
        c,
        "post/ud_send_inline8_bf",
        ud,
        2,
        op::OPCODE_SEND,
        move |rig, i| {
            let wr = SendWr::send(i).inline(&PAYLOAD).ud(&dest).signaled();
            post_one(rig, &wr);
        },
    );
    // Sixteen inline WRITEs, one doorbell record update and one 8-byte doorbell.
    let name = "post/batch16_write_inline8_db";
    let mut rig = Rig::new(rc_bf);
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let took = post_loop(
                &mut rig,
                iters,
                (16, 16),
                op::OPCODE_RDMA_WRITE,
                |rig, i| {
                    let mut batch = rig.qp.batch();
                    let mut last = 0;
                    for k in 0..16u64 {
                        last = batch.qp().sq_pi();
                        let wr = SendWr::write(i * 16 + k, REMOTE)
                            .inline(&PAYLOAD)
                            .signaled();
                        if batch.post(black_box(&wr)).is_err() {
                            panic!("post failed on a free ring");
                        }
                    }
                    drop(batch);
                    rig.last_pi = last;
                },
            );
            record(name, 16.0, iters, took);
            took
        })
    });
    posts_many_qps(c, 1000);
}

/// One inline WRITE on each of `qps` QPs in turn (their rings no longer all in cache), the
/// CQEs played and polled through a `QpTable` outside the timed region; the summary gives its
/// ratio to the same post on one QP.
fn posts_many_qps(c: &mut Criterion, qps: u32) {
    let name = "post/write_inline8_bf_1000qps";
    let cfg = RigCfg {
        sq_bbs: 64,
        ..RigCfg::rc_bf()
    };
    // Declared before the table: dropped after the QPs built on them.
    let mut rings = Vec::new();
    let (mut cq, mut cqr) = build_cq(1024);
    let mut table = QpTable::new();
    for i in 0..qps {
        let (qp, r) = build_qp(&cfg, 0x100 + i);
        rings.push(r);
        table.insert_qp(qp);
    }
    let mut wcs = [Wc::default(); 64];
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let k = (qps as u64).min(iters - done);
                let t = Instant::now();
                for i in 0..k {
                    let Some(qp) = table.qp_at(i as usize) else {
                        panic!("QP {i} missing");
                    };
                    let wr = SendWr::write(done + i, REMOTE).inline(&PAYLOAD).signaled();
                    if qp.post(black_box(&wr)).is_err() {
                        panic!("post failed on a free ring");
                    }
                }
                total += t.elapsed();
                for i in 0..k {
                    let Some(qp) = table.qp_at(i as usize) else {
                        panic!("QP {i} missing");
                    };
                    let pi = qp.sq_pi().wrapping_sub(1);
                    cqr.push_req(0x100 + i as u32, pi, op::OPCODE_RDMA_WRITE);
                }
                let mut polled = 0;
                while polled < k {
                    match cq.poll(&mut table, &mut wcs) {
                        Ok(0) | Err(_) => panic!("the played CQEs did not poll"),
                        Ok(n) => polled += n as u64,
                    }
                }
                done += k;
            }
            record(name, 1.0, iters, total);
            total
        })
    });
}

fn polls(c: &mut Criterion) {
    let name = "poll/ready_cqe";
    let mut rig = Rig::new(RigCfg::rc_bf());
    let mut wcs = [Wc::default(); 1];
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            // As many signaled WRs as the send queue holds (its WR limit), at most 512.
            let chunk = u64::from(rig.qp.max_send_wr()).min(512);
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let k = chunk.min(iters - done);
                // The device's part, untimed: k signaled WQEs, each with its own CQE.
                for i in 0..k {
                    let pi = rig.qp.sq_pi();
                    let wr = SendWr::write(i, REMOTE).inline(&PAYLOAD).signaled();
                    if rig.qp.post(&wr).is_err() {
                        panic!("post failed on a free ring");
                    }
                    rig.push_req_cqe(pi, op::OPCODE_RDMA_WRITE);
                }
                let t = Instant::now();
                for _ in 0..k {
                    match rig.cq.poll(&mut rig.qp, black_box(&mut wcs)) {
                        Ok(1) => {}
                        other => panic!("expected one completion, got {other:?}"),
                    }
                }
                total += t.elapsed();
                done += k;
            }
            record(name, 1.0, iters, total);
            total
        })
    });

    let name = "poll/empty_cq";
    let mut rig = Rig::new(RigCfg::rc_bf());
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                match rig.cq.poll(&mut rig.qp, black_box(&mut wcs)) {
                    Ok(0) => {}
                    other => panic!("expected an empty CQ, got {other:?}"),
                }
            }
            let took = t.elapsed();
            record(name, 1.0, iters, took);
            took
        })
    });
}

fn floor(c: &mut Criterion) {
    let name = "floor/wqe64_dbrec_bf64";
    let mut f = Floor::new();
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                f.post();
                black_box(&mut f);
            }
            let took = t.elapsed();
            record(name, 1.0, iters, took);
            took
        })
    });
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The closing table: each case's median ns per operation (WR or CQE) over criterion's calls,
/// and its ratio to the floor.
fn summary() {
    let mut s = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    if s.is_empty() {
        return;
    }
    let mut rows: Vec<(&str, f64, f64)> = s
        .iter_mut()
        .map(|(name, per, v)| (*name, *per, median(v)))
        .collect();
    let floor = rows.iter().find(|r| r.0.starts_with("floor/")).map(|r| r.2);
    let one_qp = rows
        .iter()
        .find(|r| r.0 == "post/write_inline8_bf")
        .map(|r| r.2);
    let many = rows
        .iter()
        .find(|r| r.0 == "post/write_inline8_bf_1000qps")
        .map(|r| r.2);
    let batch = rows
        .iter()
        .find(|r| r.0 == "post/batch16_write_inline8_db")
        .map(|r| r.2);
    rows.sort_by_key(|r| !r.0.starts_with("floor/"));
    println!();
    println!("summary: median time per operation (WR or CQE) and ratio to the floor");
    println!("{:<40} {:>10} {:>9}", "case", "ns/op", "x floor");
    for (name, per, ns) in rows {
        let ratio = floor.map_or("-".to_string(), |f| format!("{:.2}", ns / f));
        let label = if per > 1.0 {
            format!("{name} (per WR)")
        } else {
            name.to_string()
        };
        println!("{label:<40} {ns:>10.2} {ratio:>9}");
    }
    if let (Some(one), Some(many)) = (one_qp, many) {
        println!("1000 QPs round-robin / one QP, per post: {:.2}", many / one);
    }
    if let (Some(one), Some(batch)) = (one_qp, batch) {
        println!(
            "batch of 16 per WR / one post per doorbell: {:.2}",
            batch / one
        );
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = floor, posts, polls
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo test --benches` / `--test` runs each case once: nothing worth a table.
    if !std::env::args().any(|a| a == "--test" || a == "--list") {
        summary();
    }
}
