//! Does the data path scale with threads? One QP and its CQ per thread, no lock on the hot
//! path: each thread posts inline 8-byte RDMA WRITEs through BlueFlame on its own QP and
//! polls their completions (`Cq::poll_send`) on its own CQ, on rings in ordinary memory with
//! the thread itself playing the device (it writes one CQE per WQE). Run with 1 thread and
//! then with THREADS at once; prints messages per second per thread and the THREADS / 1
//! ratio. Near 1.0 means the threads share nothing on the hot path (the layout rule of the
//! `mlx5_qp` data path: every object owns whole cache lines).
//!
//! ```text
//! cargo bench --bench thread_scaling -- [THREADS 1..=64] [--msgs M]
//! ```
//! THREADS defaults to 2 (this machine's cores), M (messages per thread) to 2000000.
//!
//! A measurement program, not a usage example: building data-path objects over memory that
//! no device owns takes `unsafe`, which lives in the benchmarks' RAM-ring support (the
//! `mlx5-ram-rings` crate, `benches/rings/src/lib.rs`, shared with the criterion and callgrind
//! benchmarks), so it is a bench target (`harness = false`: its own `main`), not an example.
//! Exit status 2 for bad arguments, 1 if a post or poll went wrong.

use mlx5_ram_rings as ram_rings;

use clap::Parser;
use mlx5_direct::datapath::SendWr;
use mlx5_wqe::opcode as op;
use ram_rings::{Rig, RigCfg, PAYLOAD, REMOTE};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Messages per second per thread, 1 thread against THREADS.
#[derive(Parser)]
#[command(name = "thread_scaling")]
struct Args {
    /// Threads of the second run, each with its own QP and CQ.
    #[arg(default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// Messages each thread posts and polls.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    msgs: u64,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Post and poll `n` WRITEs on a QP and CQ of this thread's own; the time it took.
fn one_thread(n: u64) -> Result<Duration, String> {
    let mut rig = Rig::new(RigCfg::rc_bf());
    let mut ids = [0u64; 16];
    let chunk = 64u64;
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        let k = chunk.min(n - done);
        let first = rig.qp.sq_pi();
        for i in 0..k {
            let wr = SendWr::write(done + i, REMOTE).inline(&PAYLOAD).signaled();
            rig.qp
                .post(&wr)
                .map_err(|e| format!("post {}: {e}", done + i))?;
        }
        for i in 0..k {
            rig.push_req_cqe(first.wrapping_add(i as u16), op::OPCODE_RDMA_WRITE);
        }
        let mut polled = 0;
        while polled < k {
            let got = rig
                .cq
                .poll_send(&mut rig.qp, &mut ids, |wc| eprintln!("unexpected {wc:?}"))
                .map_err(|e| format!("poll: {e}"))?;
            if got == 0 {
                return Err(format!("no completion after {}", done + polled));
            }
            polled += got as u64;
        }
        done += k;
    }
    Ok(start.elapsed())
}

/// Run `threads` threads at once; messages per second of each.
fn run(threads: u32, n: u64) -> Result<Vec<f64>, String> {
    let handles: Vec<_> = (0..threads)
        .map(|_| std::thread::spawn(move || one_thread(n)))
        .collect();
    handles
        .into_iter()
        .map(|h| {
            let t = h.join().map_err(|_| "a thread panicked".to_string())??;
            Ok(n as f64 / t.as_secs_f64())
        })
        .collect()
}

fn main() -> ExitCode {
    // Bad arguments: clap prints what is wrong and exits with status 2.
    let args = Args::parse();
    let report = |label: &str, rates: &[f64]| {
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let each: Vec<String> = rates.iter().map(|r| format!("{:.2}", r / 1e6)).collect();
        println!(
            "{label}: {:.2} M msgs/s per thread (threads: {})",
            mean / 1e6,
            each.join(", ")
        );
        mean
    };
    let result = run(1, args.msgs).and_then(|one| {
        let one = report("1 thread", &one);
        let many = run(args.threads, args.msgs)?;
        // With one thread asked for, the second run is the first's repeat (its ratio says how
        // much the machine varies from run to run).
        let label = match args.threads {
            1 => "1 thread, again".to_string(),
            n => format!("{n} threads"),
        };
        let many = report(&label, &many);
        println!("{label} / 1 thread, per thread: {:.2}", many / one);
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("thread_scaling: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
