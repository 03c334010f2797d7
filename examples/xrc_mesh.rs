//! XRC against RC in a full mesh: N nodes (software ConnectX devices on one fabric) with P
//! application processes each (P endpoints per device); every endpoint sends one message to
//! every other endpoint, once over an RC mesh and once over XRC, and every message is checked
//! at its receiver. Prints the QP count of both layouts, counted on the devices, and exits 0
//! only if every message arrived intact, exactly once.
//!
//! ```text
//! cargo run --example xrc_mesh              4 nodes × 4 processes
//! cargo run --example xrc_mesh -- 8 4       8 nodes × 4 processes
//! ```
//!
//! - **RC**: one QP per ordered pair of endpoints, N·P·(N·P−1) QPs.
//! - **XRC** (IBTA Annex A14): one XRC SRQ per receiving endpoint; one initiator QP per sender
//!   and destination node (its WRs name the receiving endpoint's SRQ); on each destination
//!   node one target QP per initiator, in the node's XRC domain, delivering into whichever
//!   SRQ a request names. N·P·N initiators + N·P·N targets: the count grows with N²·P instead
//!   of N²·P². (A target is the far end of one reliable connection, so it serves one
//!   initiator; what XRC removes is the per-remote-*process* QP.)

use clap::Parser;
use mlx5_direct::connect::{connect_qps, ConnectParams};
use mlx5_direct::ctx::{connect_xrc, XrcSrq, XrcTarget, Xrcd};
use mlx5_direct::datapath::{SendWr, Wc, WcOpcode};
use mlx5_direct::sim::DeviceConfig;
use mlx5_direct::{Context, Cq, Mr, Pd, Qp, QpInit, SimFabric};
use std::collections::BTreeSet;
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes per message and per buffer slot.
const SLOT: usize = 48;

/// XRC and RC full meshes on the software ConnectX, with their QP counts.
#[derive(Parser)]
#[command(name = "xrc_mesh")]
struct Args {
    /// Nodes (software ConnectX devices).
    #[arg(default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=16))]
    nodes: u32,
    /// Processes per node.
    #[arg(default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    procs: u32,
}

/// The message endpoint `from` sends endpoint `to`.
fn message(layout: &str, from: usize, to: usize) -> Vec<u8> {
    let mut m = format!("{layout} message from endpoint {from:03} to {to:03}").into_bytes();
    m.resize(SLOT, b'.');
    m
}

/// One application process: its CQ, its registered buffer (a receive slot per sender), the
/// QPs it sends on.
struct Endpoint {
    node: usize,
    cq: Cq,
    mr: Mr,
    qps: Vec<Qp>,
    got: BTreeSet<usize>,
}

fn endpoint(ctx: &Context, pd: &Pd, node: usize, total: usize) -> Result<Endpoint> {
    Ok(Endpoint {
        node,
        cq: ctx.create_cq(4 * total as u32 + 16)?,
        mr: pd.alloc_mr(SLOT * total)?,
        qps: Vec::new(),
        got: BTreeSet::new(),
    })
}

/// The QPs the devices hold now (counted by each software ConnectX).
fn live_qps(nodes: &[Context]) -> usize {
    nodes
        .iter()
        .filter_map(|c| c.sim_device())
        .map(|d| d.live_objects().qps)
        .sum()
}

/// Check a receive completion of endpoint `me` in `layout`: slot, length, bytes, sender once.
fn check_recv(layout: &str, me: usize, e: &mut Endpoint, wc: &Wc) -> Result<()> {
    if !wc.is_ok() || wc.opcode() != WcOpcode::Recv || wc.byte_len() as usize != SLOT {
        return Err(format!("{layout}: endpoint {me}: bad completion {wc:?}").into());
    }
    let from = wc.wr_id() as usize;
    let data = e.mr.read(from * SLOT, SLOT)?;
    if data != message(layout, from, me) {
        let text = String::from_utf8_lossy(&data).into_owned();
        return Err(format!("{layout}: endpoint {me}, slot {from}: {text:?}").into());
    }
    if !e.got.insert(from) {
        return Err(format!("{layout}: endpoint {me} got endpoint {from}'s message twice").into());
    }
    Ok(())
}

/// Poll every endpoint until every message arrived and every send completed (or nothing moves).
fn collect(
    layout: &str,
    fabric: &SimFabric,
    eps: &mut [Endpoint],
    srqs: &mut [Vec<XrcSrq>],
    sends: usize,
) -> Result<()> {
    let total = eps.len();
    let mut sent = 0;
    let mut wcs = [Wc::default(); 32];
    for _round in 0..1000 {
        let moved = fabric.fabric().run_until_idle() > 0;
        let mut polled = false;
        for (me, e) in eps.iter_mut().enumerate() {
            loop {
                let n = match srqs.get_mut(me) {
                    Some(s) => e.cq.poll(&mut (&mut e.qps[..], &mut s[..]), &mut wcs)?,
                    None => e.cq.poll(&mut e.qps[..], &mut wcs)?,
                };
                if n == 0 {
                    break;
                }
                polled = true;
                for wc in &wcs[..n] {
                    if wc.opcode().is_recv() {
                        check_recv(layout, me, e, wc)?;
                    } else if wc.is_ok() {
                        sent += 1;
                    } else {
                        return Err(format!("{layout}: endpoint {me}: send {wc:?}").into());
                    }
                }
            }
        }
        let all = eps.iter().all(|e| e.got.len() == total - 1);
        if all && sent == sends {
            return Ok(());
        }
        if !moved && !polled {
            break;
        }
    }
    let missing: usize = eps.iter().map(|e| total - 1 - e.got.len()).sum();
    Err(format!(
        "{layout}: {missing} message(s) and {} send completion(s) missing",
        sends - sent
    )
    .into())
}

/// RC: a QP on each side of every pair of endpoints.
fn rc_mesh(fabric: &SimFabric, nodes: &[Context], pds: &[Pd], procs: usize) -> Result<usize> {
    let total = nodes.len() * procs;
    let mut eps = (0..total)
        .map(|e| endpoint(&nodes[e / procs], &pds[e / procs], e / procs, total))
        .collect::<Result<Vec<_>>>()?;
    // peers[e][k]: the endpoint QP k of endpoint e talks to.
    let mut peers = vec![Vec::new(); total];
    let params = ConnectParams::default();
    for i in 0..total {
        for j in i + 1..total {
            let mut a = pds[eps[i].node].create_qp(&QpInit::rc(&eps[i].cq).max_recv_wr(2))?;
            let mut b = pds[eps[j].node].create_qp(&QpInit::rc(&eps[j].cq).max_recv_wr(2))?;
            connect_qps(&mut a, &mut b, &params)?;
            eps[i].qps.push(a);
            peers[i].push(j);
            eps[j].qps.push(b);
            peers[j].push(i);
        }
    }
    let qps = live_qps(nodes);
    for (me, e) in eps.iter_mut().enumerate() {
        for (k, &from) in peers[me].iter().enumerate() {
            let sge = e.mr.sge(from * SLOT, SLOT as u32)?;
            e.qps[k].post_recv(from as u64, &[sge])?;
        }
    }
    for (me, e) in eps.iter_mut().enumerate() {
        for (k, &to) in peers[me].iter().enumerate() {
            let msg = message("RC", me, to);
            e.qps[k].post(&SendWr::send(to as u64).inline(&msg).signaled())?;
        }
    }
    collect("RC", fabric, &mut eps, &mut [], total * (total - 1))?;
    Ok(qps)
}

/// XRC: an SRQ per receiving endpoint, an initiator per sender and node, a target per
/// initiator.
fn xrc_mesh(
    fabric: &SimFabric,
    nodes: &[Context],
    pds: &[Pd],
    procs: usize,
) -> Result<(usize, usize)> {
    let (n, total) = (nodes.len(), nodes.len() * procs);
    let xrcds = nodes
        .iter()
        .map(Context::open_xrcd)
        .collect::<std::result::Result<Vec<Xrcd>, _>>()?;
    let mut eps = (0..total)
        .map(|e| endpoint(&nodes[e / procs], &pds[e / procs], e / procs, total))
        .collect::<Result<Vec<_>>>()?;
    let mut srqs = Vec::with_capacity(total);
    for e in &eps {
        let srq = pds[e.node].create_xrc_srq(&xrcds[e.node], &e.cq, total as u32, 1)?;
        srqs.push(vec![srq]);
    }
    // inis[e][d]: endpoint e's initiator to node d; its target lives on node d.
    let mut targets: Vec<XrcTarget> = Vec::new();
    for e in eps.iter_mut() {
        for x in &xrcds {
            let mut ini = pds[e.node].create_qp(&QpInit::xrc_send(&e.cq).max_inline_data(64))?;
            let tgt = x.create_target()?;
            connect_xrc(&mut ini, &tgt)?;
            e.qps.push(ini);
            targets.push(tgt);
        }
    }
    let qps = live_qps(nodes);
    for (me, s) in srqs.iter_mut().enumerate() {
        for from in (0..total).filter(|&f| f != me) {
            let sge = eps[me].mr.sge(from * SLOT, SLOT as u32)?;
            s[0].post_recv(from as u64, &[sge])?;
        }
    }
    let srq_nums: Vec<u32> = srqs.iter().map(|s| s[0].srq_num()).collect();
    for (me, e) in eps.iter_mut().enumerate() {
        for to in (0..total).filter(|&t| t != me) {
            let msg = message("XRC", me, to);
            let wr = SendWr::send(to as u64)
                .inline(&msg)
                .xrc(srq_nums[to])
                .signaled();
            e.qps[to / procs].post(&wr)?;
        }
    }
    collect("XRC", fabric, &mut eps, &mut srqs, total * (total - 1))?;
    let _ = n;
    Ok((qps, srqs.len()))
}

fn run(args: &Args) -> Result<()> {
    let (n, p) = (args.nodes as usize, args.procs as usize);
    let fabric = SimFabric::deterministic();
    let nodes: Vec<Context> = (0..n)
        .map(|i| {
            fabric.add_device_with(
                DeviceConfig::new([10, 0, 0, 1 + i as u8]).name(&format!("node{i}")),
            )
        })
        .collect();
    let pds = nodes
        .iter()
        .map(Context::alloc_pd)
        .collect::<std::result::Result<Vec<Pd>, _>>()?;
    let total = n * p;
    println!("{n} nodes × {p} processes = {total} endpoints; every endpoint sends one {SLOT}-byte message to each of the other {}", total - 1);

    let rc = rc_mesh(&fabric, &nodes, &pds, p)?;
    let want_rc = total * (total - 1);
    if rc != want_rc {
        return Err(format!("RC mesh holds {rc} QPs, expected N·P·(N·P−1) = {want_rc}").into());
    }
    println!(
        "RC : {rc} QPs = N·P·(N·P−1); {} messages checked",
        total * (total - 1)
    );

    let (xrc, srqs) = xrc_mesh(&fabric, &nodes, &pds, p)?;
    let want_xrc = 2 * n * p * n;
    if xrc != want_xrc {
        return Err(format!("XRC mesh holds {xrc} QPs, expected 2·N·P·N = {want_xrc}").into());
    }
    println!(
        "XRC: {xrc} QPs = {} initiators (N·P·N) + {} targets, and {srqs} XRC SRQs; {} messages checked",
        xrc / 2,
        xrc / 2,
        total * (total - 1)
    );
    println!(
        "XRC uses {:.1}× fewer QPs than RC ({rc} → {xrc})",
        rc as f64 / xrc as f64
    );
    println!("xrc_mesh: OK");
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xrc_mesh: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
