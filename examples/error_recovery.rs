//! Error recovery: a peer that stops answering, retry exhaustion, rebuild, resume.
//!
//! ```text
//! cargo run --example error_recovery
//! ```
//!
//! Two RC QPs on the software ConnectX (deterministic mode, virtual time) exchange RDMA
//! WRITEs. Then B's link goes down: A's WRITE is retransmitted every ACK timeout
//! (4.096 µs × 2^timeout) until `retry_cnt` is used up, and completes with
//! `IBV_WC_RETRY_EXC_ERR`; A's QP is in Error and every WR behind it is flushed (seed README
//! §5). The link comes back, both QPs are rebuilt Error → Reset → Init → RTR → RTS with fresh
//! PSNs (`rebuild_pair`, the in-process twin of `Connection::rebuild`), the failed WRITE and
//! the ones flushed behind it are posted again, and B's memory is checked byte for byte.

#[path = "../src/bin/support/side.rs"]
mod side;

use mlx5_direct::hw::PortState;
use mlx5_direct::qp::connect::{
    connect_pair, rebuild_pair, ConnectParams, PairSide, QpLink, RemoteBuffer,
};
use mlx5_direct::qp::{Qp, SendWr, Wc, WcStatus};
use mlx5_direct::sim::Fabric;
use side::{remote, Devices, Side, SideCfg};
use std::process::ExitCode;
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Records written to B: 16 of 64 bytes each, record `i` filled with byte `i + 1`.
const RECORDS: u64 = 16;
const RECORD: usize = 64;
/// Written before the link goes down, during the outage, after the rebuild.
const BEFORE: u64 = 6;
const DURING: u64 = 4;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error_recovery: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Post record `i` (signaled).
fn write_record(a: &mut Side, b_buf: &RemoteBuffer, i: u64) -> Result<()> {
    let off = i as usize * RECORD;
    a.buf.write(off, &[i as u8 + 1; RECORD]);
    let sge = [a.buf.sge(off, RECORD as u32)];
    let wr = SendWr::write(i, remote(b_buf, off as u64))
        .sges(&sge)
        .signaled();
    a.qps[0].post(&wr)?;
    Ok(())
}

fn poll_all(side: &mut Side) -> Result<Vec<Wc>> {
    let mut out = Vec::new();
    let mut wcs = [Wc::default(); 16];
    loop {
        let n = side.cq.poll(&mut side.qps[..], &mut wcs)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&wcs[..n]);
    }
}

fn counter(devs: &Devices, dev: usize, name: &str) -> u64 {
    devs.sims.get(dev).map_or(0, |d| d.counter(name))
}

fn run() -> Result<()> {
    println!("mlx5-direct error recovery: retry exhaustion, rebuild, resume\n");
    let devs = Devices::sim_pair(false);
    let fabric: Fabric = devs.fabric.clone().ok_or("no fabric")?;
    let mut a = Side::new(devs.local.clone(), &SideCfg::rc())?;
    let mut b = Side::new(devs.peer.clone().ok_or("no peer device")?, &SideCfg::rc())?;
    // A short ACK timeout (4.096 µs × 2^10 ≈ 4.2 ms) and 3 retries: exhaustion in ~17 ms of
    // virtual time.
    let base = ConnectParams {
        timeout: 10,
        retry_cnt: 3,
        ..ConnectParams::default()
    };
    let (pa, pb) = (
        base.clone().with_buffer(a.buf.remote_buffer()),
        base.with_buffer(b.buf.remote_buffer()),
    );
    let (ra, rb) = (a.qp_ref(0), b.qp_ref(0));
    let (da, db) = (a.dev.clone(), b.dev.clone());
    let (mut ca, mut cb) = {
        let mut la = QpLink::new(&mut a.qps[0], &mut a.cq, |_: &mut Qp| Ok(()));
        let mut lb = QpLink::new(&mut b.qps[0], &mut b.cq, |_: &mut Qp| Ok(()));
        connect_pair(
            PairSide {
                dev: &*da,
                qp: ra,
                link: &mut la,
                params: &pa,
            },
            PairSide {
                dev: &*db,
                qp: rb,
                link: &mut lb,
                params: &pb,
            },
        )?
    };
    let b_buf = ca.remote_buffer().ok_or("B announced no buffer")?;
    println!(
        "  connected   A {:#x} ⇄ B {:#x}, ACK timeout 4.096 µs × 2^10, retry_cnt 3",
        ca.local().qpn,
        cb.local().qpn
    );

    // Normal traffic.
    for i in 0..BEFORE {
        write_record(&mut a, &b_buf, i)?;
    }
    fabric.run_until_idle();
    let done = poll_all(&mut a)?;
    if done.len() != BEFORE as usize || done.iter().any(|w| !w.is_ok()) {
        return Err(format!("before the fault: {done:?}").into());
    }
    println!("  traffic     records 0..{BEFORE} written to B, all completed");

    // B's link goes down; A keeps writing.
    let sim_b = devs.sims.get(1).ok_or("no software ConnectX B")?;
    sim_b.set_port_state(PortState::Down);
    println!("  fault       B's port goes down");
    for i in BEFORE..BEFORE + DURING {
        write_record(&mut a, &b_buf, i)?;
    }
    let retries_before = counter(&devs, 0, "local_ack_timeout_err");
    let mut seen = Vec::new();
    let mut waited = Duration::ZERO;
    while seen.is_empty() && waited < Duration::from_secs(1) {
        fabric.advance(Duration::from_millis(1));
        waited += Duration::from_millis(1);
        seen = poll_all(&mut a)?;
    }
    seen.extend(poll_all(&mut a)?);
    let first = seen
        .first()
        .ok_or("no completion after 1 s of virtual time")?;
    if first.status != WcStatus::RetryExcErr {
        return Err(format!("expected RETRY_EXC_ERR first, got {first:?}").into());
    }
    println!(
        "  error       after {:?} of virtual time: WR {} completed with {} (syndrome {}); \
         ACK timeouts counted: {}",
        waited,
        first.wr_id,
        first.status.name(),
        first.syndrome_name().unwrap_or("?"),
        counter(&devs, 0, "local_ack_timeout_err") - retries_before
    );

    // Link back; rebuild both QPs. The rebuild drains what is left and flushes the rest.
    sim_b.set_port_state(PortState::Active);
    let (rep_a, rep_b) = {
        let mut la = QpLink::new(&mut a.qps[0], &mut a.cq, |_: &mut Qp| Ok(()));
        let mut lb = QpLink::new(&mut b.qps[0], &mut b.cq, |_: &mut Qp| Ok(()));
        rebuild_pair(
            &*da,
            &mut ca,
            &mut la,
            &*db,
            &mut cb,
            &mut lb,
            WcStatus::RetryExcErr,
        )?
    };
    // Every WR posted during the outage is accounted for exactly once: the error completion
    // above, and a flush (now or in the rebuild's drain) for each one behind it.
    let mut retired: Vec<u64> = seen.iter().map(|w| w.wr_id).collect();
    retired.extend(rep_a.drained.iter().map(|w| w.wr_id));
    retired.sort_unstable();
    let expected: Vec<u64> = (BEFORE..BEFORE + DURING).collect();
    if retired != expected {
        return Err(
            format!("WRs retired during the outage: {retired:?}, want {expected:?}").into(),
        );
    }
    let flushed = seen
        .iter()
        .chain(rep_a.drained.iter())
        .filter(|w| w.status == WcStatus::WrFlushErr)
        .count() as u64;
    if flushed != DURING - 1 {
        return Err(format!("{flushed} flushed WRs, want {}", DURING - 1).into());
    }
    println!(
        "  rebuild     link up; both QPs Error → Reset → Init → RTR → RTS, generation {}; \
         A's PSN {:#08x} → {:#08x}, B's {:#08x} → {:#08x}",
        rep_a.generation, rep_a.sq_psn.0, rep_a.sq_psn.1, rep_b.sq_psn.0, rep_b.sq_psn.1
    );
    println!(
        "              every WR of the outage retired once: 1 × {}, {} × {}",
        WcStatus::RetryExcErr.name(),
        DURING - 1,
        WcStatus::WrFlushErr.name()
    );

    // Resume: post the lost records again, then the rest.
    for i in BEFORE..RECORDS {
        write_record(&mut a, &b_buf, i)?;
    }
    fabric.run_until_idle();
    let done = poll_all(&mut a)?;
    if done.len() != (RECORDS - BEFORE) as usize || done.iter().any(|w| !w.is_ok()) {
        return Err(format!("after the rebuild: {done:?}").into());
    }
    for i in 0..RECORDS {
        let got = b.buf.read(i as usize * RECORD, RECORD);
        if got.iter().any(|&x| x != i as u8 + 1) {
            return Err(format!("record {i} in B's memory is wrong: {got:?}").into());
        }
    }
    println!(
        "  resume      records {BEFORE}..{RECORDS} written again; all {RECORDS} records verified \
         in B's memory"
    );
    let bugs = fabric.driver_bugs();
    if !bugs.is_empty() {
        return Err(format!("driver bugs: {bugs:?}").into());
    }
    println!("\n  done: recovered from RETRY_EXC_ERR with no data lost and no driver bug");
    Ok(())
}
