//! Hello, RDMA WRITE: open the software ConnectX, connect two RC QPs, WRITE 5 bytes from A's
//! memory into B's, poll the completion, check the bytes. No `unsafe`: every object owns its
//! device object and cleans up in the right order when dropped.
//!
//! ```text
//! cargo run --example hello_write
//! ```

use mlx5_direct::connect::{connect_qps, ConnectParams};
use mlx5_direct::datapath::SendWr;
use mlx5_direct::{Context, QpInit};
use std::time::Duration;

use clap::Parser;

/// WRITE "hello" from one QP into another's memory and check the bytes.
#[derive(Parser)]
struct Args {
    /// The device: `sim` (two software ConnectX devices on one fabric), or an RDMA device
    /// such as `mlx5_0`, opened twice through rdma-core (the two QPs loop back through it).
    #[arg(short = 'd', long = "ib-dev", default_value = "sim")]
    device: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // `sim`: two software ConnectX devices on one fabric, run by its own thread; otherwise two
    // contexts of one RDMA device, whose QPs reach each other through the device's loopback.
    let (a, b) = if args.device == "sim" {
        Context::sim_pair()?
    } else {
        (Context::open(&args.device)?, Context::open(&args.device)?)
    };
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (mut cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
    let mut qp_a = pd_a.create_qp(&QpInit::rc(&cq_a))?;
    let mut qp_b = pd_b.create_qp(&QpInit::rc(&cq_b))?;
    // Page-aligned registered buffers; dropping one deregisters it before freeing it.
    let (src, dst) = (pd_a.alloc_mr(4096)?, pd_b.alloc_mr(4096)?);

    // Reset → Init → RTR → RTS on both sides, in one call.
    let _conns = connect_qps(&mut qp_a, &mut qp_b, &ConnectParams::default())?;

    src.write(0, b"hello")?;
    let sge = [src.sge(0, 5)?];
    qp_a.post(&SendWr::write(1, dst.remote(0)?).sges(&sge).signaled())?;
    let wc = cq_a.wait_for(&mut qp_a, 1, Duration::from_secs(5))?;

    let landed = dst.read(0, 5)?;
    if landed != b"hello" {
        return Err(format!("B's memory holds {landed:?}").into());
    }
    println!(
        "WRITE {} ({} → {}): B's memory reads {:?}",
        wc.status().name(),
        a.name(),
        b.name(),
        String::from_utf8_lossy(&landed)
    );
    Ok(())
}
