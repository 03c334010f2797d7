//! The program `benches/count-instructions.sh` runs under `valgrind --tool=callgrind`: it posts
//! N inline 8-byte RDMA WRITEs through BlueFlame and polls their N CQEs on rings in ordinary
//! memory (the `mlx5-ram-rings` crate, `benches/rings/src/lib.rs`), each through one
//! `#[inline(never)]` function whose name the script gives callgrind's `--toggle-collect`, so
//! that only the post (or the poll) is counted.
//!
//! A bench target (`harness = false`), not an example: building data-path objects over memory
//! that no device owns takes `unsafe` (in `benches/rings/src/lib.rs`), which has no place in the
//! examples people copy. The script builds it with
//! `cargo build --release --bench count_post_poll`; `cargo bench` runs it once natively (it
//! ignores the `--bench` flag cargo passes) as a smoke test of its own checks.
//!
//! Usage: `count_post_poll [N] [--sge-db | --bf-flush | --db] [--poll-one | --poll-wcs | --batch |
//! --recv | --flush [--recv] [--poll-one] | --qps K [--recv] | --dc | --rc2]` (N defaults to 10000). With `--sge-db` the posts are 1-SGE RDMA WRITEs
//! on a QP without BlueFlame (the 8-byte doorbell), through `measured_post_sge`; with
//! `--bf-flush` the QP rings in `DoorbellMode::Bf` (rdma-core's exact sequence, a flush after
//! every BlueFlame copy) instead of the default `BfPost`, with `--db` in `DoorbellMode::Db`
//! (the 8-byte doorbell on a QP that has BlueFlame registers; these two apply to the single
//! posts, to `--dc` and to `--rc2`); `--dc` posts the inline WRITE on a DCI to a DC target
//! (`measured_post_dc`), `--rc2` an RC inline WRITE of 40 bytes whose WQE takes two blocks
//! as the DC one does (`measured_post_rc2`), both posting up to the WR limit before polling with `--poll-one` the CQEs are
//! polled one per call through `Cq::poll` (`measured_poll_one`), with `--poll-wcs` up to 16
//! per call through `Cq::poll` (`measured_poll_wcs`). `--batch` posts 16 inline WRITEs per
//! `Qp::batch`, the last signaled (`measured_batch`); `--recv` polls N receive completions
//! 16 a call (`measured_poll_wcs`, the receives posted uncounted; with `--poll-one` too, one a
//! call); `--flush` polls N flush
//! error completions 16 a call (`measured_poll_wcs`: rounds of a fresh QP with its send queue
//! full, one `WR_FLUSH_ERR` CQE for each WR, as a device writes them when the QP goes to
//! Error; the posts uncounted, every completion checked to be its WR's flush; with `--recv` too
//! the receive queue's, with `--poll-one` too one a call, `measured_poll_one`); `--qps K` posts one WRITE
//! on each of K QPs in turn (`measured_post`) and polls their CQEs from one CQ through a
//! `QpTable` (`measured_poll_table`) 16 a call: with one QP a run of 16 CQEs of that QP per
//! call, with two their CQEs interleaved (8 outstanding on each), with 1000 each CQE of
//! another QP; with `--recv` too, receives (one-SGE receive WRs posted uncounted, one
//! responder CQE each) instead of WRITEs. It checks its own results — every post accepted, the
//! polls return exactly the WR ids posted, in order, each completion successful (checked
//! after each measured call returns, outside the count) — and exits non-zero otherwise, so a
//! count is never taken of a run that went wrong.

use mlx5_ram_rings as ram_rings;

use mlx5_qp::{Cq, DcDest, DoorbellMode, Qp, QpTable, SendFlags, SendWr, Sge, Wc};
use mlx5_wqe::opcode as op;
use ram_rings::{build_cq, build_qp, Floor, Rig, RigCfg, PAYLOAD, QPN, REMOTE};
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

/// The payload of the RC post of a two-block WQE: 40 bytes inline make ctrl (16) + raddr (16)
/// + inline header (4) + 40 = 76 bytes, two 64-byte blocks, as the DC post's 96.
pub const PAYLOAD_2BB: [u8; 40] = *b"40 bytes inline: a WQE of 76 bytes, 2 BB";

/// One RC post of a two-block WQE as a user writes it: an RDMA WRITE of `PAYLOAD_2BB`
/// inline, the RC counterpart of `measured_post_dc` (two blocks, the same doorbell mode).
#[inline(never)]
pub fn measured_post_rc2(qp: &mut Qp, wr_id: u64) -> bool {
    let wr = SendWr::write(wr_id, REMOTE).inline(&PAYLOAD_2BB).signaled();
    qp.post(&wr).is_ok()
}

/// One post of a DCI as a user writes it: the same inline 8-byte RDMA WRITE to a DC target
/// (its address vector, DCT number and access key built once, `DcDest`), one WQE of two
/// 64-byte blocks (ctrl, the 48-byte AV, raddr, inline: 96 bytes) through BlueFlame.
#[inline(never)]
pub fn measured_post_dc(qp: &mut Qp, wr_id: u64, dest: &DcDest) -> bool {
    let wr = SendWr::write(wr_id, REMOTE)
        .inline(&PAYLOAD)
        .signaled()
        .dc(dest);
    qp.post(&wr).is_ok()
}

/// One lean poll of up to 16 ready send completions (`Cq::poll_send`, the batch a send loop
/// drains). The script divides the instructions of all calls by N, the CQEs polled, so the
/// figure is the cost per polled CQE with the per-call overhead spread over its batch.
#[inline(never)]
pub fn measured_poll(cq: &mut Cq, qp: &mut Qp, _wcs: &mut [Wc; 16], ids: &mut [u64; 16]) -> usize {
    cq.poll_send(qp, ids, |_| {}).unwrap_or(0)
}

/// One call of the general poll for a single completion (`Cq::poll` with room for one), what
/// a ping-pong loop calls. The completion array is the caller's, kept across calls (as an
/// `ibv_poll_cq` loop keeps its `ibv_wc` array); the caller checks what it holds (`take_ids`,
/// outside the count: consuming the completions is the application's cost, not the poll's).
#[inline(never)]
pub fn measured_poll_one(
    cq: &mut Cq,
    qp: &mut Qp,
    wcs: &mut [Wc; 16],
    _ids: &mut [u64; 16],
) -> usize {
    cq.poll(qp, &mut wcs[..1]).unwrap_or(0)
}

/// The WR ids of `k` successful completions to `ids`; 0 if one failed (the check of every
/// completion a `measured_poll_*` call wrote, made outside the count).
#[inline(never)]
fn take_ids(wcs: &[Wc; 16], k: usize, ids: &mut [u64; 16]) -> usize {
    let k = k.min(16);
    for i in 0..k {
        if !wcs[i].is_ok() {
            return 0;
        }
        ids[i] = wcs[i].wr_id();
    }
    k
}

/// One call of the general poll with room for 16 completions (`Cq::poll`, into the caller's
/// array); the caller checks them (`take_ids`).
#[inline(never)]
pub fn measured_poll_wcs(
    cq: &mut Cq,
    qp: &mut Qp,
    wcs: &mut [Wc; 16],
    _ids: &mut [u64; 16],
) -> usize {
    cq.poll(qp, wcs).unwrap_or(0)
}

/// `measured_poll_one` or `measured_poll_wcs`, then the check of what it wrote (`take_ids`,
/// not counted): the WR ids to `ids`.
fn poll_checked(
    measured: fn(&mut Cq, &mut Qp, &mut [Wc; 16], &mut [u64; 16]) -> usize,
    cq: &mut Cq,
    qp: &mut Qp,
    wcs: &mut [Wc; 16],
    ids: &mut [u64; 16],
) -> usize {
    let k = measured(cq, qp, wcs, ids);
    take_ids(wcs, k, ids)
}

/// WRs per batch in `measured_batch`.
pub const BATCH: u64 = 16;

/// One batch as a user writes it: 16 inline 8-byte RDMA WRITEs, the last one signaled, one
/// doorbell for them all when the batch ends (`Qp::batch`). The script divides by the WRs.
#[inline(never)]
pub fn measured_batch(qp: &mut Qp, first_id: u64) -> bool {
    let mut b = qp.batch();
    for i in 0..BATCH {
        let flags = if i == BATCH - 1 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let wr = SendWr::write(first_id + i, REMOTE)
            .inline(&PAYLOAD)
            .flags(flags);
        if b.post(&wr).is_err() {
            return false;
        }
    }
    true
}

/// The floor: the stores any post makes (64-byte WQE, doorbell record, BlueFlame copy, fences).
#[inline(never)]
pub fn measured_floor(f: &mut Floor) {
    f.post();
}

/// One call of the general poll with room for 16 completions on a CQ that serves many QPs,
/// found through a `QpTable`; the caller checks them (`take_ids`).
#[inline(never)]
pub fn measured_poll_table(cq: &mut Cq, table: &mut QpTable, wcs: &mut [Wc; 16]) -> usize {
    cq.poll(table, wcs).unwrap_or(0)
}

/// What the command line asks for.
#[derive(Default)]
struct Args {
    n: u64,
    sge_db: bool,
    bf_flush: bool,
    poll_one: bool,
    poll_wcs: bool,
    batch: bool,
    recv: bool,
    flush: bool,
    dc: bool,
    rc2: bool,
    db: bool,
    qps: Option<u32>,
}

const USAGE: &str = "usage: count_post_poll [N > 0] [--sge-db | --bf-flush | --db] \
[--poll-one | --poll-wcs | --batch | --recv | --flush [--recv] [--poll-one] | --qps K [--recv] \
| --dc | --rc2]";

impl Args {
    /// The doorbell mode `--bf-flush` or `--db` asks for (the rig's default, `BfPost`,
    /// without either).
    fn doorbell(&self) -> Option<DoorbellMode> {
        if self.bf_flush {
            Some(DoorbellMode::Bf)
        } else {
            self.db.then_some(DoorbellMode::Db)
        }
    }
}

fn parse() -> Option<Args> {
    let mut a = Args {
        n: 10_000,
        ..Args::default()
    };
    let mut it = std::env::args().skip(1);
    while let Some(s) = it.next() {
        match s.as_str() {
            "--sge-db" => a.sge_db = true,
            "--bf-flush" => a.bf_flush = true,
            "--poll-one" => a.poll_one = true,
            "--poll-wcs" => a.poll_wcs = true,
            "--batch" => a.batch = true,
            "--recv" => a.recv = true,
            "--flush" => a.flush = true,
            "--dc" => a.dc = true,
            "--rc2" => a.rc2 = true,
            "--db" => a.db = true,
            "--qps" => {
                a.qps = Some(
                    it.next()?
                        .parse()
                        .ok()
                        .filter(|&k| (1..=1024).contains(&k))?,
                )
            }
            // What `cargo bench` passes to a bench binary.
            "--bench" => {}
            _ => a.n = s.parse().ok().filter(|&v| v > 0)?,
        }
    }
    Some(a)
}

/// Check that `got` WR ids are `next`, `next + step`, ...; advance `next`.
fn check_ids(ids: &[u64], next: &mut u64, step: u64) -> bool {
    for id in ids {
        if *id != *next {
            eprintln!("poll: WR id {id}, expected {next}");
            return false;
        }
        *next += step;
    }
    true
}

/// Inline WRITEs posted in batches of 16 (the last signaled), one CQE per batch.
fn run_batch(n: u64) -> bool {
    let mut rig = Rig::new(RigCfg::rc_bf());
    let mut ids = [0u64; 16];
    let mut wcs = [Wc::default(); 16];
    let chunk = (rig.qp.sq_free_bbs().min(rig.qp.sq_free_wrs()) as u64 / BATCH) * BATCH;
    let (mut done, mut next) = (0, BATCH - 1);
    while done < n {
        let k = chunk.min(n - done).div_ceil(BATCH) * BATCH;
        let first = rig.qp.sq_pi();
        for b in 0..k / BATCH {
            if !measured_batch(&mut rig.qp, done + b * BATCH) {
                eprintln!("batch at {} was refused", done + b * BATCH);
                return false;
            }
        }
        for b in 0..k / BATCH {
            let last = first.wrapping_add((b * BATCH + BATCH - 1) as u16);
            rig.push_req_cqe(last, op::OPCODE_RDMA_WRITE);
        }
        let mut polled = 0;
        while polled < k / BATCH {
            let got = measured_poll(&mut rig.cq, &mut rig.qp, &mut wcs, &mut ids);
            if got == 0 || !check_ids(&ids[..got], &mut next, BATCH) {
                eprintln!("batch poll after {polled} CQEs failed");
                return false;
            }
            polled += got as u64;
        }
        done += k;
    }
    rig.qp.sq_outstanding_bbs() == 0
}

/// Receives: N one-SGE receive WRs posted (not counted), one responder CQE each, polled 16 a
/// call through `Cq::poll` (with `one`, one a call: `measured_poll_one`).
fn run_recv(n: u64, one: bool) -> bool {
    let measured = if one {
        measured_poll_one
    } else {
        measured_poll_wcs
    };
    let cfg = RigCfg {
        rq_wqes: 1024,
        ..RigCfg::rc_bf()
    };
    let mut rig = Rig::new(cfg);
    let mut ids = [0u64; 16];
    let mut wcs = [Wc::default(); 16];
    let (mut done, mut next, mut rq_pi) = (0u64, 0u64, 0u16);
    let sge = [Sge {
        addr: 0x2000,
        length: 64,
        lkey: 9,
    }];
    while done < n {
        let k = 1024.min(n - done);
        for i in 0..k {
            if rig.qp.post_recv(done + i, &sge).is_err() {
                eprintln!("receive {} was refused", done + i);
                return false;
            }
        }
        for _ in 0..k {
            rig.cqr.push_recv(QPN, rq_pi, 8, 0x99);
            rq_pi = rq_pi.wrapping_add(1);
        }
        let mut polled = 0;
        while polled < k {
            let got = poll_checked(measured, &mut rig.cq, &mut rig.qp, &mut wcs, &mut ids);
            if got == 0 || !check_ids(&ids[..got], &mut next, 1) {
                eprintln!("receive poll after {} failed", done + polled);
                return false;
            }
            polled += got as u64;
        }
        done += k;
    }
    rig.qp.rq_outstanding() == 0
}

/// Flush errors: rounds of a fresh QP, its send queue (or with `recv` its receive queue)
/// filled with signaled inline WRITEs (receives of one SGE), not counted, one flush error CQE
/// for each as a device writes them when the QP goes to Error, polled 16 a call through
/// `Cq::poll` (`measured_poll_wcs`; with `one`, one a call, `measured_poll_one`); each
/// completion must be its WR's `IBV_WC_WR_FLUSH_ERR`, in order.
fn run_flush(n: u64, recv: bool, one: bool) -> bool {
    let mut wcs = [Wc::default(); 16];
    let mut done = 0u64;
    let sge = [Sge {
        addr: 0x2000,
        length: 64,
        lkey: 9,
    }];
    let measured = if one {
        measured_poll_one
    } else {
        measured_poll_wcs
    };
    while done < n {
        let cfg = RigCfg {
            rq_wqes: if recv { 1024 } else { 0 },
            ..RigCfg::rc_bf()
        };
        let mut rig = Rig::new(cfg);
        let room = if recv {
            1024
        } else {
            rig.qp.sq_free_bbs().min(rig.qp.sq_free_wrs()) as u64
        };
        let k = room.min(n - done);
        for i in 0..k {
            let posted = if recv {
                rig.qp.post_recv(done + i, &sge)
            } else {
                let wr = SendWr::write(done + i, REMOTE).inline(&PAYLOAD).signaled();
                rig.qp.post(&wr)
            };
            if posted.is_err() {
                eprintln!("post {} was refused", done + i);
                return false;
            }
            if recv {
                rig.cqr.push_recv_flush(QPN, i as u16);
            } else {
                rig.cqr.push_flush(QPN, i as u16, op::OPCODE_RDMA_WRITE);
            }
        }
        let mut next = done;
        while next < done + k {
            let got = measured(&mut rig.cq, &mut rig.qp, &mut wcs, &mut [0; 16]);
            let ok = got != 0
                && wcs[..got].iter().enumerate().all(|(j, w)| {
                    w.status() == mlx5_qp::WcStatus::WrFlushErr && w.wr_id() == next + j as u64
                });
            if !ok {
                eprintln!("flush poll after {next} failed");
                return false;
            }
            next += got as u64;
        }
        if rig.qp.sq_outstanding_bbs() != 0 || rig.qp.rq_outstanding() != 0 {
            return false;
        }
        done += k;
    }
    true
}

/// `qps` QPs on one CQ: one inline WRITE on each in turn (`measured_post`), one CQE each in
/// the same order, polled 16 a call through a `QpTable` (`measured_poll_table`) after every
/// 16 posts (at most 512: CQEs of 16 QPs or more each name another QP), so that one QP's
/// figure is of calls as full as the many QPs' (a send queue of 128 blocks takes 16 WRs).
fn run_qps(n: u64, qps: u32, recv: bool) -> bool {
    let cfg = RigCfg {
        sq_bbs: 128,
        rq_wqes: if recv { 32 } else { 0 },
        ..RigCfg::rc_bf()
    };
    let sge = [Sge {
        addr: 0x2000,
        length: 64,
        lkey: 9,
    }];
    // Declared before the table: dropped after the QPs built on them.
    let mut rings = Vec::new();
    let (mut cq, mut cqr) = build_cq(1024);
    let mut table = QpTable::new();
    let mut qpns = Vec::new();
    for i in 0..qps {
        let qpn = 0x100 + i;
        let (qp, r) = build_qp(&cfg, qpn);
        rings.push(r);
        table.insert_qp(qp);
        qpns.push(qpn);
    }
    let mut ids = [0u64; 16];
    let mut wcs = [Wc::default(); 16];
    let (mut done, mut next) = (0u64, 0u64);
    while done < n {
        let k = (qps as u64 * 32).min(n - done);
        for i in 0..k {
            let pos = (i % qps as u64) as usize;
            let Some(qp) = table.qp_at(pos) else {
                return false;
            };
            if recv {
                // The receive queue's WQE index (`wqe_counter` of its CQE): its
                // outstanding receives follow the ones retired.
                let rq_pi = (done + i) / qps as u64;
                if qp.post_recv(done + i, &sge).is_err() {
                    eprintln!("receive {} on QP {pos} was refused", done + i);
                    return false;
                }
                cqr.push_recv(qpns[pos], rq_pi as u16, 8, 0x99);
            } else {
                let pi = qp.sq_pi();
                if !measured_post(qp, done + i) {
                    eprintln!("post {} on QP {pos} was refused", done + i);
                    return false;
                }
                cqr.push_req(qpns[pos], pi, op::OPCODE_RDMA_WRITE);
            }
            // Poll before the CQ (1024 entries) or a send queue fills.
            if (i + 1) % (qps as u64 * 16).min(512) == 0 || i + 1 == k {
                while next < done + i + 1 {
                    let got = measured_poll_table(&mut cq, &mut table, &mut wcs);
                    let got = take_ids(&wcs, got, &mut ids);
                    if got == 0 || !check_ids(&ids[..got], &mut next, 1) {
                        eprintln!("poll of {qps} QPs after {next} failed");
                        return false;
                    }
                }
            }
        }
        done += k;
    }
    table
        .qps_mut()
        .iter()
        .all(|q| q.sq_outstanding_bbs() == 0 && q.rq_outstanding() == 0)
}

/// Two stores to one word with the x86 compiler barriers of the doorbell sequence between
/// them (`mmio::to_device_barrier`, `mmio::wc_line_done`): a compiler barrier must keep the
/// first store, which stands for a ring store before the doorbell record; without one LLVM
/// deletes it as dead. `tests/it/mmio_fences.rs` finds both stores in the release code, so an
/// emptied compiler barrier fails a test although it emits no instruction.
#[inline(never)]
pub fn measured_compiler_barriers(word: &mut u32) {
    *word = 1;
    mlx5_hw::mmio::to_device_barrier();
    *word = 2;
    mlx5_hw::mmio::wc_line_done();
    *word = 3;
}

fn main() -> ExitCode {
    let Some(a) = parse() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let n = a.n;
    let ok = if a.batch {
        run_batch(n)
    } else if a.flush {
        run_flush(n, a.recv, a.poll_one)
    } else if let Some(k) = a.qps {
        run_qps(n, k, a.recv)
    } else if a.recv {
        run_recv(n, a.poll_one)
    } else if a.dc || a.rc2 {
        run_two_blocks(n, a.doorbell(), a.dc)
    } else {
        run_single(&a)
    };
    if !ok {
        return ExitCode::FAILURE;
    }
    let mut word = 0;
    measured_compiler_barriers(&mut word);
    if word != 3 {
        return ExitCode::FAILURE;
    }
    let mut floor = Floor::new();
    for _ in 0..n {
        measured_floor(&mut floor);
    }
    println!("posted and polled {n} WRs");
    ExitCode::SUCCESS
}

/// WQEs of two blocks: with `dc`, a DCI posting N inline WRITEs to one DC target
/// (`measured_post_dc`), otherwise an RC QP posting N inline WRITEs of 40 bytes
/// (`measured_post_rc2`); one CQE each, polled 16 a call (`measured_poll`, not the figure of
/// this run), the doorbell in `doorbell` mode (the rig's `BfPost` when `None`); as many WRs
/// posted before the polls as the ring and the WR limit take. Every
/// WQE must take exactly two blocks, checked after each post (outside the count).
fn run_two_blocks(n: u64, doorbell: Option<DoorbellMode>, dc: bool) -> bool {
    let cfg = RigCfg {
        qp_type: if dc {
            mlx5_hw::QpType::Dci
        } else {
            mlx5_hw::QpType::Rc
        },
        doorbell,
        ..RigCfg::rc_bf()
    };
    let what = if dc { "DC" } else { "RC two-block" };
    let mut rig = Rig::new(cfg);
    // An address handle's AV for RoCE (extended, the GID of 10.0.0.2), DCT 0x3a1, UCX's key.
    let mut av = [0u8; 48];
    av[8] = 0x80;
    av[20..26].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    av[27] = 64;
    av[42..44].copy_from_slice(&[0xff, 0xff]);
    av[44..48].copy_from_slice(&[10, 0, 0, 2]);
    let dest = DcDest::new(&av, 0x3a1, 0x1ee7_a330);
    let mut ids = [0u64; 16];
    let mut wcs = [Wc::default(); 16];
    let mut done = 0;
    let mut pis = Vec::with_capacity(1024);
    while done < n {
        let k = (rig.qp.sq_free_bbs() / 2).min(rig.qp.sq_free_wrs()) as u64;
        let k = k.min(n - done);
        pis.clear();
        for i in 0..k {
            let pi = rig.qp.sq_pi();
            pis.push(pi);
            let posted = if dc {
                measured_post_dc(&mut rig.qp, done + i, &dest)
            } else {
                measured_post_rc2(&mut rig.qp, done + i)
            };
            if !posted {
                eprintln!("{what} post {} was refused", done + i);
                return false;
            }
            if rig.qp.sq_pi() != pi.wrapping_add(2) {
                eprintln!(
                    "{what} post {} took {} blocks, not 2",
                    done + i,
                    rig.qp.sq_pi().wrapping_sub(pi)
                );
                return false;
            }
        }
        for &pi in &pis {
            rig.push_req_cqe(pi, op::OPCODE_RDMA_WRITE);
        }
        let mut polled = 0;
        while polled < k {
            let got = measured_poll(&mut rig.cq, &mut rig.qp, &mut wcs, &mut ids);
            if got == 0 {
                eprintln!("{what} poll after {}: no completion", done + polled);
                return false;
            }
            for (j, id) in ids[..got].iter().enumerate() {
                if *id != done + polled + j as u64 {
                    eprintln!("{what} poll {}: WR id {id}", done + polled + j as u64);
                    return false;
                }
            }
            polled += got as u64;
        }
        done += k;
    }
    rig.qp.sq_outstanding_bbs() == 0
}

/// One QP, one post per doorbell, in the shapes and poll calls the flags choose.
fn run_single(a: &Args) -> bool {
    let (n, sge_db, poll_one, poll_wcs) = (a.n, a.sge_db, a.poll_one, a.poll_wcs);
    let cfg = RigCfg {
        bf_size: if sge_db { 0 } else { 256 },
        doorbell: a.doorbell(),
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
    let mut chunk = rig.qp.sq_free_bbs().min(rig.qp.sq_free_wrs()) as u64;
    if poll_wcs {
        // Batches of 16: every call finds 16 CQEs ready (but at the end of the CQ's lap and
        // of the send ring, where a run stops), not a remainder after each chunk.
        chunk -= chunk % 16;
    }
    let mut ids = [0u64; 16];
    let mut wcs = [Wc::default(); 16];
    let mut done = 0;
    while done < n {
        let k = chunk.min(n - done);
        let first = rig.qp.sq_pi();
        for i in 0..k {
            if !post(&mut rig.qp, done + i) {
                eprintln!("post {} was refused", done + i);
                return false;
            }
        }
        // Play the device: one CQE per WQE, in order.
        for i in 0..k {
            rig.push_req_cqe(first.wrapping_add(i as u16), op::OPCODE_RDMA_WRITE);
        }
        let mut polled = 0;
        while polled < k {
            let got = if poll_one || poll_wcs {
                poll_checked(poll, &mut rig.cq, &mut rig.qp, &mut wcs, &mut ids)
            } else {
                poll(&mut rig.cq, &mut rig.qp, &mut wcs, &mut ids)
            };
            if got == 0 {
                eprintln!("poll after {}: no completion", done + polled);
                return false;
            }
            for (j, id) in ids[..got].iter().enumerate() {
                if *id != done + polled + j as u64 {
                    eprintln!("poll {}: WR id {id}", done + polled + j as u64);
                    return false;
                }
            }
            polled += got as u64;
        }
        done += k;
    }
    if rig.qp.sq_outstanding_bbs() != 0 {
        eprintln!("{} blocks still outstanding", rig.qp.sq_outstanding_bbs());
        return false;
    }
    true
}
