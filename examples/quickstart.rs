//! Quickstart: two RC QPs on the software ConnectX, in one process.
//!
//! ```text
//! cargo run --example quickstart
//! RUST_LOG=mlx5=info cargo run --example quickstart     (also log every QP transition)
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
//! Exit status 0 only if every operation completed with the expected data and the software
//! ConnectX reported no driver bug.

use mlx5_direct::connect::{connect_qps, ConnectParams};
use mlx5_direct::qp::{SendWr, WcFlags, WcOpcode};
use mlx5_direct::{Context, Cq, Mr, Qp, QpInit, SimFabric};
use std::process::ExitCode;
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Where things live in each 64 KiB buffer.
const MSG: usize = 0; // outgoing bytes
const LANDING: usize = 4096; // what the peer WRITEs, and what READ brings back
const RECV: usize = 8192; // the posted receive
const COUNTER: usize = 12288; // the 8-byte atomic target (big-endian, as the NIC sees it)
const RESULT: usize = 12296; // where an atomic's original value lands
/// How long a completion may take before the run fails (it takes microseconds).
const TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run() {
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
    fn done(&mut self, wr_id: u64, what: &str) -> Result<mlx5_direct::qp::Wc> {
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

fn run() -> Result<()> {
    println!("mlx5-direct quickstart: two RC QPs on the software ConnectX\n");
    let fabric = SimFabric::deterministic();
    let mut a = Side::new(&fabric.add_device(), "A")?;
    let mut b = Side::new(&fabric.add_device(), "B")?;

    let (ca, cb) = connect_qps(&mut a.qp, &mut b.qp, &ConnectParams::default())?;
    println!(
        "  connect Reset → Init → RTR → RTS: A {:#x} (PSN {:#08x}) ⇄ B {:#x} (PSN {:#08x}), \
         path MTU {}\n",
        ca.local().qpn,
        ca.local().psn,
        cb.local().qpn,
        cb.local().psn,
        ca.path_mtu().bytes()
    );
    // B posts one receive for the SEND below (nothing reaches B before this returns).
    b.qp.post_recv(7, &[b.mr.sge(RECV, 64)?])?;

    // 1. RDMA WRITE: A's bytes land in B's memory; B's CPU is not involved.
    let text = b"hello from A, by RDMA WRITE";
    a.mr.write(MSG, text)?;
    let sge = [a.mr.sge(MSG, text.len() as u32)?];
    a.qp.post(&SendWr::write(1, b.mr.remote(LANDING)?).sges(&sge).signaled())?;
    let wc = a.done(1, "WRITE")?;
    let landed = b.mr.read(LANDING, text.len())?;
    check(landed == text, "WRITE: B's buffer does not hold A's bytes")?;
    println!("  WRITE  A → B  {} bytes into B's buffer", text.len());
    println!(
        "         ok: {} on A; B's memory reads {:?}",
        wc.opcode.name(),
        String::from_utf8_lossy(&landed)
    );

    // 2. RDMA READ: A fetches B's bytes into its own buffer.
    let data = b"B's data, fetched by READ";
    b.mr.write(MSG, data)?;
    let sge = [a.mr.sge(LANDING, data.len() as u32)?];
    a.qp.post(&SendWr::read(2, b.mr.remote(MSG)?).sges(&sge).signaled())?;
    let wc = a.done(2, "READ")?;
    let got = a.mr.read(LANDING, data.len())?;
    check(got == data, "READ: wrong bytes")?;
    check(wc.byte_len as usize == data.len(), "READ: wrong byte count")?;
    println!("  READ   A ← B  {} bytes from B's buffer", wc.byte_len);
    println!(
        "         ok: {} on A; A's memory reads {:?}",
        wc.opcode.name(),
        String::from_utf8_lossy(&got)
    );

    // 3. SEND with immediate: consumes the receive B posted.
    let ping = b"ping";
    a.mr.write(MSG, ping)?;
    let sge = [a.mr.sge(MSG, ping.len() as u32)?];
    a.qp.post(&SendWr::send_imm(3, 0xC0FFEE).sges(&sge).signaled())?;
    let sent = a.done(3, "SEND")?;
    let recv = b.done(7, "RECV")?;
    let got = b.mr.read(RECV, ping.len())?;
    check(recv.opcode == WcOpcode::Recv, "RECV: wrong opcode")?;
    check(recv.byte_len == 4 && got == ping, "RECV: wrong bytes")?;
    check(
        recv.flags.contains(WcFlags::WITH_IMM) && recv.imm_data == 0xC0FFEE,
        "RECV: immediate data lost",
    )?;
    println!(
        "  SEND   A → B  {:?} with immediate {:#x}, into the receive B posted",
        String::from_utf8_lossy(ping),
        0xC0FFEE
    );
    println!(
        "         ok: {} on A; {} on B: wr_id {}, {} bytes {:?}, imm {:#x}",
        sent.opcode.name(),
        recv.opcode.name(),
        recv.wr_id,
        recv.byte_len,
        String::from_utf8_lossy(&got),
        recv.imm_data
    );

    // 4. Compare-and-swap on B's counter: 0 → 42. The original value lands in A's buffer.
    let (target, result) = (b.mr.remote(COUNTER)?, a.mr.sge(RESULT, 8)?);
    a.qp.post(&SendWr::comp_swap(4, target, result, 0, 42).signaled())?;
    let wc = a.done(4, "CAS")?;
    let (old, now) = (a.mr.read_u64_be(RESULT)?, b.mr.read_u64_be(COUNTER)?);
    check(old == 0 && now == 42, "CAS: wrong values")?;
    println!("  CAS    A → B  compare-and-swap B's counter: if 0 then 42");
    println!(
        "         ok: {} on A; original value {old}, B's counter now {now}",
        wc.opcode.name()
    );

    // 5. Fetch-and-add 8.
    a.qp.post(&SendWr::fetch_add(5, target, result, 8).signaled())?;
    let wc = a.done(5, "FAA")?;
    let (old, now) = (a.mr.read_u64_be(RESULT)?, b.mr.read_u64_be(COUNTER)?);
    check(old == 42 && now == 50, "FAA: wrong values")?;
    println!("  FAA    A → B  fetch-and-add 8 to B's counter");
    println!(
        "         ok: {} on A; original value {old}, B's counter now {now}",
        wc.opcode.name()
    );

    let bugs = fabric.fabric().driver_bugs();
    check(
        bugs.is_empty(),
        &format!("the software ConnectX reported driver bugs: {bugs:?}"),
    )?;
    println!(
        "\n  done: 5 operations, every result checked; the software ConnectX saw no driver bug"
    );
    Ok(())
}
