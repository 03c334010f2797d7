//! The program `benches/emulated-instructions.sh` runs under `valgrind --tool=callgrind` with
//! the preload library (`libmlx5sim.so`): on the emulated device `mlx5_0` — Debian's unmodified
//! libibverbs + libmlx5 creating the QPs, the software ConnectX executing them in threads of
//! this process — it posts N inline 8-byte RDMA WRITEs, signaled, from one RC QP to another of
//! the same device, and polls their N send CQEs, through this library's data path (`direct`:
//! `Qp::post`, `Cq::poll` on the rings libmlx5 laid out, called as a user calls them; with
//! `EMULATED_VIA_TOOLS` set, through the tools' wrapper `lat` and `bw` call) or libmlx5's
//! (`verbs`: `ibv_post_send`, `ibv_poll_cq` through `mlx5_tools::path::Verbs`). Each post
//! and each poll goes through one `#[inline(never)]` function the script names to callgrind's
//! `--toggle-collect`; callgrind collects per thread, so what the software ConnectX's threads
//! execute meanwhile is not counted.
//!
//! The WRs go in rounds of 16; after each round the program sleeps (uncounted) until the
//! device had time to complete it, then polls 16 at most a call until the round is in. A poll
//! that finds nothing (the device was slower than the sleep) is counted by callgrind too: the
//! program prints how many calls found nothing, and `--empty` measures such a call alone (polls
//! of an idle CQ), so the script subtracts them. Every post must be accepted and every
//! completion be a successful one of the WR posted, in order; else the exit status is 1 and no
//! count is taken.
//!
//! Usage: `emulated_post_poll N direct|verbs post|poll [--empty]` (the device: `MLX5_DEVICE`,
//! default `mlx5_0`).

use mlx5_connect::ConnectParams;
use mlx5_tools::connecting::{connect_all, DirectLinks};
use mlx5_tools::devices::{open_devices, Devices};
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::path::{DataPath, Direct, Done, Op, Post, Verbs};
use mlx5_tools::resources::{Resources, ResourcesCfg, VerbsResources};
use mlx5_tools::{Error, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// WRs per round (the send queue holds them all).
const ROUND: u64 = 16;
const PAYLOAD: [u8; 8] = *b"8 bytes!";

/// One post (the tools' `DataPath::post`: the WR as `lat` builds it).
#[inline(never)]
pub fn measured_post<P: DataPath>(path: &mut P, post: &Post<'_>) -> bool {
    path.post(0, post).is_ok()
}

/// One poll of up to 16 completions.
#[inline(never)]
pub fn measured_poll<P: DataPath>(path: &mut P, out: &mut [Done; 16]) -> usize {
    path.poll(out).unwrap_or(usize::MAX)
}

/// `Cq::poll` alone, inside [`measured_poll`] of the `direct` path: counted apart by the
/// script (`*measured_cq_poll*`), so that the poll on the rings libmlx5 laid out compares
/// with the figure on rings in ordinary memory without the bench's copy of each completion.
#[inline(never)]
pub fn measured_cq_poll(
    cq: &mut mlx5_ctx::Cq,
    qps: &mut [mlx5_ctx::Qp],
    wcs: &mut [mlx5_qp::Wc],
) -> std::result::Result<usize, mlx5_qp::Error> {
    cq.poll(qps, wcs)
}

/// This library's data path with nothing between the caller and it: `Qp::post` of the WR as
/// a user writes it (`SendWr::write(..).inline(..).signaled()`), `Cq::poll` into the caller's
/// `Wc` array; the completions handed on as the tools' [`Done`] (a copy of the WR id and the
/// direction, outside the poll itself but inside the count: `Wc::is_ok`, `Wc::wr_id` and
/// `Wc::opcode` decode the CQE's bytes the poll copied, about 24 instructions per CQE; the
/// script counts [`measured_cq_poll`] apart).
struct Raw<'a> {
    qps: &'a mut [mlx5_ctx::Qp],
    cq: &'a mut mlx5_ctx::Cq,
    remote: mlx5_qp::RemoteAddr,
    wcs: [mlx5_qp::Wc; 16],
}

impl DataPath for Raw<'_> {
    #[inline(always)]
    fn post(&mut self, q: usize, p: &Post<'_>) -> Result<()> {
        let wr = mlx5_qp::SendWr::write(p.wr_id, self.remote)
            .inline(&PAYLOAD)
            .signaled();
        self.qps[q].post(&wr)?;
        Ok(())
    }
    fn post_recv(&mut self, _q: usize, _wr_id: u64, _sge: mlx5_qp::Sge) -> Result<()> {
        Err(Error::Usage("no receives here".into()))
    }
    #[inline(always)]
    fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
        let m = out.len().min(16);
        let n = measured_cq_poll(self.cq, self.qps, &mut self.wcs[..m])?;
        for (d, wc) in out.iter_mut().zip(&self.wcs[..n]) {
            if !wc.is_ok() {
                return Err(Error::Check(format!(
                    "completion {}: {}",
                    wc.wr_id(),
                    wc.status().name()
                )));
            }
            d.wr_id = wc.wr_id();
            d.recv = wc.opcode().is_recv();
        }
        Ok(n)
    }
    fn set_ud_peer(&mut self, _q: usize, _peer: &mlx5_connect::UdPeer) {}
}

fn cfg() -> ResourcesCfg {
    ResourcesCfg {
        sq_depth: 64,
        rq_depth: 1,
        buf_len: 4096,
        ..ResourcesCfg::rc()
    }
}

/// The N WRs in rounds; counts the polls that found nothing.
fn run<P: DataPath>(path: &mut P, n: u64, post: Post<'_>, poll: bool, empty: bool) -> Result<()> {
    let mut out = [Done::default(); 16];
    if empty {
        // Polls of an idle CQ: what one that finds nothing costs.
        for _ in 0..n {
            if measured_poll(path, &mut out) != 0 {
                return Err(Error::Check("a completion on an idle CQ".into()));
            }
        }
        println!("empty polls: {n}");
        return Ok(());
    }
    let (mut next, mut polled, mut empties, mut calls) = (0u64, 0u64, 0u64, 0u64);
    while next < n {
        let round = ROUND.min(n - next);
        for k in 0..round {
            let p = Post {
                wr_id: next + k,
                ..post
            };
            let ok = if poll {
                path.post(0, &p).is_ok()
            } else {
                measured_post(path, &p)
            };
            if !ok {
                return Err(Error::Check(format!("post {} refused", next + k)));
            }
        }
        next += round;
        std::thread::sleep(Duration::from_millis(if poll { 20 } else { 1 }));
        let deadline = Instant::now() + Duration::from_secs(120);
        while polled < next {
            let got = if poll {
                calls += 1;
                measured_poll(path, &mut out)
            } else {
                path.poll(&mut out)?
            };
            if got == usize::MAX {
                return Err(Error::Check("a poll failed".into()));
            }
            for d in &out[..got] {
                if d.wr_id != polled || d.recv {
                    return Err(Error::Check(format!(
                        "completion {polled}: {d:?} (expected a successful send, WR {polled})"
                    )));
                }
                polled += 1;
            }
            if got == 0 {
                empties += 1;
                if Instant::now() > deadline {
                    return Err(Error::Check(format!("WR {polled} never completed")));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    if poll {
        println!("polls: {calls} calls, {empties} found nothing, {polled} completions");
    }
    Ok(())
}

fn bench() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            Error::Usage("usage: emulated_post_poll N direct|verbs post|poll [--empty]".into())
        })?;
    let path = args.get(1).map(String::as_str).unwrap_or("direct");
    let poll = args.get(2).map(String::as_str) == Some("poll");
    let empty = args.iter().any(|a| a == "--empty");
    let name = std::env::var("MLX5_DEVICE").unwrap_or_else(|_| "mlx5_0".into());
    let devs: Devices = open_devices(&name, true, false)?;
    let mut params = ConnectParams::default();
    params.gid_index = devs.gid_index(1, None)?;
    let inline = InlineRequest {
        bytes: 64,
        explicit: false,
    };
    match path {
        "direct" => {
            let (mut a, _) = Resources::with_inline(&devs.local, &cfg(), inline)?;
            let (mut b, _) = Resources::with_inline(&devs.local, &cfg(), inline)?;
            let (end_a, end_b) = (a.end(&params), b.end(&params));
            let (mut la, mr) = a.links(None)?;
            let (mut lb, _) = b.links(None)?;
            let conn = connect_all(&devs, &end_a, &mut la, Some((&end_b, &mut lb)), None, None)?;
            let rb = conn.conns[0]
                .remote_buffer()
                .ok_or_else(|| Error::Check("no remote buffer".into()))?;
            let DirectLinks { qps, cq, .. } = la;
            let remote = mlx5_qp::RemoteAddr {
                addr: rb.addr,
                rkey: rb.rkey,
            };
            if std::env::var_os("EMULATED_VIA_TOOLS").is_some() {
                // The tools' wrapper (what lat and bw call), for comparison.
                let mut p = Direct::new(qps, cq);
                let post = Post {
                    wr_id: 0,
                    op: Op::Write(remote),
                    sge: mr.sge(0, 8)?,
                    inline: Some(&PAYLOAD),
                    signaled: true,
                };
                return run(&mut p, n, post, poll, empty);
            }
            let mut p = Raw {
                qps,
                cq,
                remote,
                wcs: [mlx5_qp::Wc::default(); 16],
            };
            let post = Post {
                wr_id: 0,
                op: Op::Write(mlx5_qp::RemoteAddr {
                    addr: rb.addr,
                    rkey: rb.rkey,
                }),
                sge: mr.sge(0, 8)?,
                inline: Some(&PAYLOAD),
                signaled: true,
            };
            run(&mut p, n, post, poll, empty)
        }
        "verbs" => {
            use mlx5_tools::connecting::connect_verbs;
            let dev = devs.verbs_device()?;
            let (a, _) = VerbsResources::with_inline(&devs.local, dev.clone(), &cfg(), inline)?;
            let (b, _) = VerbsResources::with_inline(&devs.local, dev, &cfg(), inline)?;
            let (end_a, end_b) = (a.end(&params), b.end(&params));
            let mut va = Verbs::claim(&a)?;
            let mut vb = Verbs::claim(&b)?;
            let conn = connect_verbs(
                &devs,
                (&end_a, &mut va, None),
                Some((&end_b, &mut vb, None)),
                None,
                None,
            )?;
            let rb = conn.conns[0]
                .remote_buffer()
                .ok_or_else(|| Error::Check("no remote buffer".into()))?;
            let post = Post {
                wr_id: 0,
                op: Op::Write(mlx5_qp::RemoteAddr {
                    addr: rb.addr,
                    rkey: rb.rkey,
                }),
                sge: a.mr.sge(0, 8)?,
                inline: Some(&PAYLOAD),
                signaled: true,
            };
            run(&mut va, n, post, poll, empty)
        }
        other => Err(Error::Usage(format!(
            "{other}: the path is direct or verbs"
        ))),
    }
}

fn main() -> ExitCode {
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("emulated_post_poll: {e}");
            ExitCode::FAILURE
        }
    }
}
