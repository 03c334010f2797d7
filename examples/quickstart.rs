//! Quickstart: two RC QPs on the software ConnectX (or on an RDMA device), in one process.
//!
//! ```text
//! cargo run --example quickstart
//! RUST_LOG=mlx5=info cargo run --example quickstart     (also log every QP transition)
//! cargo run --example quickstart -- -d mlx5_0           (an mlx5 device, through rdma-core)
//! ```
//!
//! It opens two devices on one fabric, makes a PD, a CQ, an RC QP and a registered buffer on
//! each, connects the QPs (Reset → Init → RTR → RTS, the same code that connects over TCP),
//! then does an RDMA WRITE, an RDMA READ, a SEND with immediate data into a posted receive, an
//! atomic compare-and-swap and an atomic fetch-and-add — checking each result and printing it
//! as it happens. (`examples/hello_write.rs` is the same start with one WRITE.)
//!
//! The fabric is deterministic: nothing moves on the wire until the program steps it, which
//! `Cq::wait_for` does while it waits (`Context::progress`). So every run does the same thing
//! in the same order and prints the same story (only the PSNs change: they are random, as on
//! a NIC), and a `RUST_LOG` trace of one run is the trace of every run. Programs that post from
//! several threads use `Context::sim_pair()`, whose fabric runs on its own thread.
//!
//! With `-d DEVICE` (an mlx5 device such as `mlx5_0`) the two sides are two contexts of that
//! device, opened through libibverbs and libmlx5, and their QPs reach each other through the
//! device's loopback; the same program runs on the software ConnectX behind rdma-core with the
//! preload library of `uverbs/` (`mlx5sim -- target/debug/examples/quickstart -d mlx5_0`).
//!
//! Exit status 0 only if every operation completed with the expected data and the software
//! ConnectX reported no driver bug.

use clap::Parser;
use mlx5_direct::connect::{connect_qps, ConnectParams};
use mlx5_direct::datapath::{SendWr, Wc, WcFlags, WcOpcode};
use mlx5_direct::{Context, Cq, Mr, Qp, QpInit, SimFabric};
use std::process::ExitCode;
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Where things live in each 64 KiB buffer.
const MSG: usize = 0; // outgoing bytes
const LANDING: usize = 4096; // what the peer WRITEs, and what READ brings back
const RECV: usize = 8192; // the posted receive
const COUNTER: usize = 12288; // the 8-byte atomic target (host order, as Linux runs mlx5 atomics)
const RESULT: usize = 12296; // where an atomic's original value lands
/// How long a completion may take before the run fails (it takes microseconds).
const TIMEOUT: Duration = Duration::from_secs(5);

/// Two RC QPs on the software ConnectX: WRITE, READ, SEND with immediate, CAS, FAA, each checked.
/// Set RUST_LOG=mlx5=info to log every QP transition.
#[derive(Parser)]
#[command(name = "quickstart")]
struct Args {
    /// The device: `sim` (two software ConnectX devices on a deterministic fabric), or an RDMA
    /// device such as `mlx5_0`, opened twice through rdma-core (its QPs loop back through it).
    #[arg(short = 'd', long = "ib-dev", default_value = "sim")]
    device: String,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    // Only `-d`: anything else is a usage error (status 2); `--help` says what this does.
    let args = Args::parse();
    match run(&args.device) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One side: its CQ, its RC QP and its 64 KiB buffer (each keeps the PD and the device alive).
struct Side {
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

impl Side {
    fn new(ctx: &Context, name: &str) -> Result<Side> {
        let port = ctx.query_port(1)?;
        let gid = ctx.device().query_gid(1, 0)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(16)?;
        let qp = pd.create_qp(&QpInit::rc(&cq))?;
        let mr = pd.alloc_mr(64 << 10)?;
        println!(
            "  side {name}  {}: port 1 {:?}, GID {gid}, MTU {}; RC QP {:#x}, 64 KiB buffer \
             (lkey {:#x}, rkey {:#x})",
            ctx.name(),
            port.state,
            port.active_mtu.bytes(),
            qp.qpn(),
            mr.lkey(),
            mr.rkey()
        );
        Ok(Side { cq, qp, mr })
    }

    /// Wait for the successful completion of WR `wr_id` (stepping the fabric meanwhile).
    fn done(&mut self, wr_id: u64, what: &str) -> Result<Wc> {
        self.cq
            .wait_for(&mut self.qp, wr_id, TIMEOUT)
            .map_err(|e| format!("{what}: {e}").into())
    }
}

fn check(cond: bool, what: &str) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(what.into())
    }
}

/// The second line of an operation: its completion on A and what it left behind.
fn ok(wc: &Wc, result: std::fmt::Arguments<'_>) {
    println!("         ok: {} on A; {result}", wc.opcode().name());
}

fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

fn run(device: &str) -> Result<()> {
    // `sim`: two devices on a deterministic fabric, stepped by `Cq::wait_for`; otherwise two
    // contexts of one device (the device runs by itself).
    let fabric = (device == "sim").then(SimFabric::deterministic);
    let (ctx_a, ctx_b) = match &fabric {
        Some(f) => {
            println!("mlx5-direct quickstart: two RC QPs on the software ConnectX\n");
            (f.add_device(), f.add_device())
        }
        None => {
            println!("mlx5-direct quickstart: two RC QPs on {device}\n");
            (Context::open(device)?, Context::open(device)?)
        }
    };
    let mut a = Side::new(&ctx_a, "A")?;
    let mut b = Side::new(&ctx_b, "B")?;

    let (ca, cb) = connect_qps(&mut a.qp, &mut b.qp, &ConnectParams::default())?;
    let (la, lb, mtu) = (ca.local(), cb.local(), ca.path_mtu().bytes());
    println!(
        "  connect Reset → Init → RTR → RTS: A {:#x} (PSN {:#08x}) ⇄ B {:#x} (PSN {:#08x}), \
         path MTU {mtu}\n",
        la.qpn, la.psn, lb.qpn, lb.psn
    );
    // B posts one receive for the SEND below (nothing reaches B before `connect_qps` returns).
    b.qp.post_recv(7, &[b.mr.sge(RECV, 64)?])?;

    // 1. RDMA WRITE: A's bytes land in B's memory; B's CPU is not involved.
    let msg = b"hello from A, by RDMA WRITE";
    println!("  WRITE  A → B  {} bytes into B's buffer", msg.len());
    a.mr.write(MSG, msg)?;
    let (sge, dst) = ([a.mr.sge(MSG, msg.len() as u32)?], b.mr.remote(LANDING)?);
    a.qp.post(&SendWr::write(1, dst).sges(&sge).signaled())?;
    let wc = a.done(1, "WRITE")?;
    let landed = b.mr.read(LANDING, msg.len())?;
    check(landed == msg, "WRITE: B's buffer does not hold A's bytes")?;
    ok(&wc, format_args!("B's memory reads {:?}", text(&landed)));

    // 2. RDMA READ: A fetches B's bytes into its own buffer.
    let data = b"B's data, fetched by READ";
    println!("  READ   A ← B  {} bytes from B's buffer", data.len());
    b.mr.write(MSG, data)?;
    let (sge, src) = ([a.mr.sge(LANDING, data.len() as u32)?], b.mr.remote(MSG)?);
    a.qp.post(&SendWr::read(2, src).sges(&sge).signaled())?;
    let wc = a.done(2, "READ")?;
    let got = a.mr.read(LANDING, data.len())?;
    check(
        got == data && wc.byte_len() as usize == data.len(),
        "READ: wrong bytes",
    )?;
    ok(&wc, format_args!("A's memory reads {:?}", text(&got)));

    // 3. SEND with immediate: consumes the receive B posted.
    println!("  SEND   A → B  \"ping\" with immediate 0xc0ffee, into the receive B posted");
    a.mr.write(MSG, b"ping")?;
    let sge = [a.mr.sge(MSG, 4)?];
    a.qp.post(&SendWr::send_imm(3, 0xC0FFEE).sges(&sge).signaled())?;
    let sent = a.done(3, "SEND")?;
    let recv = b.done(7, "RECV")?;
    let got = b.mr.read(RECV, 4)?;
    let (imm, has_imm) = (recv.imm_data(), recv.flags().contains(WcFlags::WITH_IMM));
    check(
        recv.opcode() == WcOpcode::Recv && recv.wr_id() == 7,
        "RECV: wrong WR",
    )?;
    check(recv.byte_len() == 4 && got == b"ping", "RECV: wrong bytes")?;
    check(has_imm && imm == 0xC0FFEE, "RECV: immediate data lost")?;
    let (op, got) = (recv.opcode().name(), text(&got));
    ok(
        &sent,
        format_args!("{op} on B: wr_id 7, 4 bytes {got:?}, imm {imm:#x}"),
    );

    // 4. Compare-and-swap on B's counter: 0 → 42. The original value lands in A's buffer.
    println!("  CAS    A → B  compare-and-swap B's counter: if 0 then 42");
    let (target, result) = (b.mr.remote(COUNTER)?, a.mr.sge(RESULT, 8)?);
    a.qp.post(&SendWr::comp_swap(4, target, result, 0, 42).signaled())?;
    let wc = a.done(4, "CAS")?;
    let (old, now) = (a.mr.read_u64(RESULT)?, b.mr.read_u64(COUNTER)?);
    check(old == 0 && now == 42, "CAS: wrong values")?;
    ok(
        &wc,
        format_args!("original value {old}, B's counter now {now}"),
    );

    // 5. Fetch-and-add 8.
    println!("  FAA    A → B  fetch-and-add 8 to B's counter");
    a.qp.post(&SendWr::fetch_add(5, target, result, 8).signaled())?;
    let wc = a.done(5, "FAA")?;
    let (old, now) = (a.mr.read_u64(RESULT)?, b.mr.read_u64(COUNTER)?);
    check(old == 42 && now == 50, "FAA: wrong values")?;
    ok(
        &wc,
        format_args!("original value {old}, B's counter now {now}"),
    );

    match &fabric {
        Some(f) => {
            let bugs = f.fabric().driver_bugs();
            check(bugs.is_empty(), &format!("driver bugs: {bugs:?}"))?;
            println!(
                "\n  done: 5 operations, every result checked; the software ConnectX saw no \
                 driver bug"
            );
        }
        None => println!("\n  done: 5 operations on {device}, every result checked"),
    }
    Ok(())
}
