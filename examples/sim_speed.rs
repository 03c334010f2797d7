//! How fast is the software ConnectX itself? Message rate of RC 8-byte RDMA WRITEs through the
//! model on one core, in deterministic mode (no background thread: this thread posts, steps
//! the fabric and polls).
//!
//! ```text
//! cargo run --release --example sim_speed -- [N]        (N defaults to 200000)
//! ```
//!
//! For the ping-pong latency in threaded mode use `lat write --loopback -s 8`. These figures
//! describe the model, not a NIC: a ConnectX does tens of millions of messages per second.

use mlx5_tools::side;

use mlx5_direct::connect::{connect_pair, ConnectParams, ControlOnly, PairSide, QpLink};
use mlx5_direct::qp::{Qp, SendWr, Wc};
use side::{remote, Devices, Side, SideCfg};
use std::process::ExitCode;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// WRs posted between two steps of the fabric, and the completion interval.
const BURST: u64 = 64;
const SIGNAL_EVERY: u64 = 16;

fn main() -> ExitCode {
    let n = match std::env::args().nth(1).map(|a| a.parse::<u64>()) {
        None => 200_000,
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("usage: sim_speed [N > 0]");
            return ExitCode::from(2);
        }
    };
    match run(n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sim_speed: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(n: u64) -> Result<()> {
    let devs = Devices::sim_pair(false);
    let fabric = devs.fabric.clone().ok_or("no fabric")?;
    let mut a = Side::new(devs.local.clone(), &SideCfg::rc())?;
    let b = Side::new(devs.peer.clone().ok_or("no peer")?, &SideCfg::rc())?;
    let (pa, pb) = (
        ConnectParams::default(),
        ConnectParams::default().with_buffer(b.buf.remote_buffer()),
    );
    let (ra, rb) = (a.qp_ref(0), b.qp_ref(0));
    let da = a.dev.clone();
    let (ca, _cb) = {
        let mut la = QpLink::new(&mut a.qps[0], &mut a.cq, |_: &mut Qp| Ok(()));
        connect_pair(
            PairSide {
                dev: &*da,
                qp: ra,
                link: &mut la,
                params: &pa,
            },
            PairSide {
                dev: &*b.dev,
                qp: rb,
                link: &mut ControlOnly,
                params: &pb,
            },
        )?
    };
    let target = remote(&ca.remote_buffer().ok_or("no buffer")?, 0);
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
            a.qps[0].post(&wr)?;
            posted += 1;
        }
        fabric.run_until_idle();
        loop {
            let k = a.cq.poll(&mut a.qps[..], &mut wcs)?;
            if k == 0 {
                break;
            }
            for wc in &wcs[..k] {
                if !wc.is_ok() {
                    return Err(format!("WR {}: {}", wc.wr_id, wc.status.name()).into());
                }
                completed = wc.wr_id + 1;
            }
        }
        if burst == 0 && completed < n {
            return Err(format!("stuck at {completed} of {n} completions").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if b.buf.read(0, 8) != (n - 1).to_le_bytes() {
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
