//! How fast is the software ConnectX itself? Message rate of RC 8-byte RDMA WRITEs through the
//! model on one core, in deterministic mode (no background thread: this thread posts, steps
//! the fabric and polls).
//!
//! ```text
//! cargo run --release --example sim_speed -- [N 1..=1000000000]        (N defaults to 200000)
//! ```
//!
//! For the ping-pong latency in threaded mode use `lat write --loopback -s 8`. These figures
//! describe the model, not a NIC: a ConnectX does tens of millions of messages per second.
//! Exit status 2 for bad arguments, 1 if a WRITE failed or did not land.

use clap::Parser;
use mlx5_direct::connect::{connect_qps, ConnectParams};
use mlx5_direct::datapath::{SendWr, Wc};
use mlx5_direct::{QpInit, SimFabric};
use std::process::ExitCode;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// WRs posted between two steps of the fabric, and the completion interval.
const BURST: u64 = 64;
const SIGNAL_EVERY: u64 = 16;

/// Message rate of the software ConnectX: RC 8-byte RDMA WRITEs on one core.
#[derive(Parser)]
#[command(name = "sim_speed")]
struct Args {
    /// WRITEs to post.
    #[arg(default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    n: u64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    // Bad arguments: clap prints what is wrong and exits with status 2.
    let args = Args::parse();
    match run(args.n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sim_speed: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(n: u64) -> Result<()> {
    let fabric = SimFabric::deterministic();
    let (a, b) = (fabric.add_device(), fabric.add_device());
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut cq, cq_b) = (a.create_cq(64)?, b.create_cq(64)?);
    let mut qp = pd_a.create_qp(&QpInit::rc(&cq))?;
    let mut qp_b = pd_b.create_qp(&QpInit::rc(&cq_b))?;
    let dst = pd_b.alloc_mr(4096)?;
    let _conns = connect_qps(&mut qp, &mut qp_b, &ConnectParams::default())?;
    let target = dst.remote(0)?;

    let mut wcs = [Wc::default(); 32];
    let mut posted = 0u64;
    let mut completed = 0u64;
    let start = Instant::now();
    while completed < n {
        let burst = BURST.min(n - posted);
        for _ in 0..burst {
            let i = posted;
            let payload = i.to_le_bytes();
            let wr = SendWr::write(i, target).inline(&payload);
            let wr = if (i + 1).is_multiple_of(SIGNAL_EVERY) || i + 1 == n {
                wr.signaled()
            } else {
                wr
            };
            qp.post(&wr)?;
            posted += 1;
        }
        fabric.fabric().run_until_idle();
        loop {
            let k = cq.poll(&mut qp, &mut wcs)?;
            if k == 0 {
                break;
            }
            for wc in &wcs[..k] {
                if !wc.is_ok() {
                    return Err(format!("WR {}: {}", wc.wr_id(), wc.status().name()).into());
                }
                completed = wc.wr_id() + 1;
            }
        }
        if burst == 0 && completed < n {
            return Err(format!("stuck at {completed} of {n} completions").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if dst.read(0, 8)? != (n - 1).to_le_bytes() {
        return Err("the last WRITE did not land".into());
    }
    println!(
        "software ConnectX, deterministic mode, one core: {n} RC 8-byte RDMA WRITEs in {secs:.3} s \
         = {:.0} messages/s ({:.2} µs per message, post + model + poll)",
        n as f64 / secs,
        secs * 1e6 / n as f64
    );
    Ok(())
}
