//! The program `benches/count-instructions.sh` runs under `valgrind --tool=callgrind`: it posts
//! N inline 8-byte RDMA WRITEs through BlueFlame and polls their N CQEs on rings in ordinary
//! memory (`support/ram_rings.rs`), each through one `#[inline(never)]` function whose name the
//! script gives callgrind's `--toggle-collect`, so that only the post (or the poll) is counted.
//!
//! A bench target (`harness = false`), not an example: building data-path objects over memory
//! that no device owns takes `unsafe` (in `support/ram_rings.rs`), which has no place in the
//! examples people copy. The script builds it with
//! `cargo build --release --bench count_post_poll`; `cargo bench` runs it once natively (it
//! ignores the `--bench` flag cargo passes) as a smoke test of its own checks.
//!
//! Usage: `count_post_poll [N] [--sge-db | --bf-flush] [--poll-one | --poll-wcs]` (default
//! 10000). With `--sge-db` the posts are 1-SGE RDMA WRITEs on a QP without BlueFlame (the
//! 8-byte doorbell), through `measured_post_sge`; with `--bf-flush` the QP rings in
//! `DoorbellMode::Bf` (rdma-core's exact sequence, a flush after every BlueFlame copy) instead
//! of the default `BfPost`; with `--poll-one` the CQEs are polled one per call through
//! `Cq::poll` (`measured_poll_one`), with `--poll-wcs` up to 16 per call through `Cq::poll`
//! (`measured_poll_wcs`). It checks its own results — every post accepted, the polls return
//! exactly the WR ids posted, in order — and exits non-zero otherwise, so a count is never
//! taken of a run that went wrong.

#[path = "support/ram_rings.rs"]
mod ram_rings;

use mlx5_qp::{Cq, DoorbellMode, Qp, SendWr, Sge, Wc};
use mlx5_wqe::opcode as op;
use ram_rings::{Floor, Rig, RigCfg, PAYLOAD, REMOTE};
use std::process::ExitCode;

/// One post as a user writes it: build the WR, post it (BlueFlame, one 64-byte block).
#[inline(never)]
pub fn measured_post(qp: &mut Qp, wr_id: u64) -> bool {
    let wr = SendWr::write(wr_id, REMOTE).inline(&PAYLOAD).signaled();
    qp.post(&wr).is_ok()
}

/// One post of a 1-SGE RDMA WRITE (the 8-byte doorbell when the QP has no BlueFlame).
#[inline(never)]
pub fn measured_post_sge(qp: &mut Qp, wr_id: u64) -> bool {
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 7,
    }];
    let wr = SendWr::write(wr_id, REMOTE).sges(&sge).signaled();
    qp.post(&wr).is_ok()
}

/// One lean poll of up to 16 ready send completions (`Cq::poll_send`, the batch a send loop
/// drains). The script divides the instructions of all calls by N, the CQEs polled, so the
/// figure is the cost per polled CQE with the per-call overhead spread over its batch.
#[inline(never)]
pub fn measured_poll(cq: &mut Cq, qp: &mut Qp, ids: &mut [u64; 16]) -> usize {
    cq.poll_send(qp, ids, |_| {}).unwrap_or(0)
}

/// One call of the general poll for a single completion (`Cq::poll` with room for one), what
/// a ping-pong loop calls; its WR id goes to `ids[0]`.
#[inline(never)]
pub fn measured_poll_one(cq: &mut Cq, qp: &mut Qp, ids: &mut [u64; 16]) -> usize {
    let mut wc = [Wc::default(); 1];
    match cq.poll(qp, &mut wc) {
        Ok(1) if wc[0].is_ok() => {
            ids[0] = wc[0].wr_id;
            1
        }
        _ => 0,
    }
}

/// One call of the general poll with room for 16 completions (`Cq::poll`); their WR ids go
/// to `ids`.
#[inline(never)]
pub fn measured_poll_wcs(cq: &mut Cq, qp: &mut Qp, ids: &mut [u64; 16]) -> usize {
    let mut wcs = [Wc::default(); 16];
    match cq.poll(qp, &mut wcs) {
        Ok(k) if wcs[..k].iter().all(|w| w.is_ok()) => {
            for (id, w) in ids.iter_mut().zip(&wcs[..k]) {
                *id = w.wr_id;
            }
            k
        }
        _ => 0,
    }
}

/// The floor: the stores any post makes (64-byte WQE, doorbell record, BlueFlame copy, fences).
#[inline(never)]
pub fn measured_floor(f: &mut Floor) {
    f.post();
}

fn main() -> ExitCode {
    let mut n: u64 = 10_000;
    let (mut sge_db, mut bf_flush, mut poll_one, mut poll_wcs) = (false, false, false, false);
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--sge-db" => sge_db = true,
            "--bf-flush" => bf_flush = true,
            "--poll-one" => poll_one = true,
            "--poll-wcs" => poll_wcs = true,
            // What `cargo bench` passes to a bench binary.
            "--bench" => {}
            _ => match a.parse() {
                Ok(v) if v > 0 => n = v,
                _ => {
                    eprintln!(
                        "usage: count_post_poll [N > 0] [--sge-db | --bf-flush] [--poll-one | --poll-wcs]"
                    );
                    return ExitCode::from(2);
                }
            },
        }
    }
    let cfg = RigCfg {
        bf_size: if sge_db { 0 } else { 256 },
        doorbell: bf_flush.then_some(DoorbellMode::Bf),
        ..RigCfg::rc_bf()
    };
    let post = if sge_db {
        measured_post_sge
    } else {
        measured_post
    };
    let poll = if poll_one {
        measured_poll_one
    } else if poll_wcs {
        measured_poll_wcs
    } else {
        measured_poll
    };
    let mut rig = Rig::new(cfg);
    let chunk = rig.qp.sq_free_bbs().min(rig.qp.sq_free_wrs()) as u64;
    let mut ids = [0u64; 16];
    let mut done = 0;
    while done < n {
        let k = chunk.min(n - done);
        let first = rig.qp.sq_pi();
        for i in 0..k {
            if !post(&mut rig.qp, done + i) {
                eprintln!("post {} was refused", done + i);
                return ExitCode::FAILURE;
            }
        }
        // Play the device: one CQE per WQE, in order.
        for i in 0..k {
            rig.push_req_cqe(first.wrapping_add(i as u16), op::OPCODE_RDMA_WRITE);
        }
        let mut polled = 0;
        while polled < k {
            let got = poll(&mut rig.cq, &mut rig.qp, &mut ids);
            if got == 0 {
                eprintln!("poll after {}: no completion", done + polled);
                return ExitCode::FAILURE;
            }
            for (j, id) in ids[..got].iter().enumerate() {
                if *id != done + polled + j as u64 {
                    eprintln!("poll {}: WR id {id}", done + polled + j as u64);
                    return ExitCode::FAILURE;
                }
            }
            polled += got as u64;
        }
        done += k;
    }
    if rig.qp.sq_outstanding_bbs() != 0 {
        eprintln!("{} blocks still outstanding", rig.qp.sq_outstanding_bbs());
        return ExitCode::FAILURE;
    }
    let mut floor = Floor::new();
    for _ in 0..n {
        measured_floor(&mut floor);
    }
    if sge_db {
        println!("posted and polled {n} 1-SGE RDMA WRITEs (8-byte doorbell)");
    } else {
        println!("posted and polled {n} inline 8-byte RDMA WRITEs");
    }
    ExitCode::SUCCESS
}
