//! DC against RC in a full mesh: N nodes (software ConnectX devices on one fabric), every node
//! sends M messages to every other node, once over an RC mesh and once over DC, and every
//! message is checked at its receiver. Prints, side by side, the QPs each layout needs and the
//! host memory their queues take (counted on the devices), and exits 0 only if every message
//! arrived intact, exactly once.
//!
//! ```text
//! cargo run --example dc_mesh                8 nodes, 2 DCIs each, 2 messages per pair
//! cargo run --example dc_mesh -- 16 4 3      16 nodes, 4 DCIs each, 3 messages per pair
//! ```
//!
//! - **RC**: a QP per peer on each node, N·(N−1) QPs, each with a send queue of D WRs
//!   (`--depth`) and a receive queue for the M messages of its peer.
//! - **DC**: on each node one DC target (DCT: a number and an access key, receiving into one
//!   SRQ that holds the (N−1)·M receives) and K DC initiators (DCI: a send queue of D WRs whose
//!   WQEs each name their target), N·(K+1) QPs whatever N is. A DCI talks to one target at a
//!   time, connecting in band; a node's sends are spread over its DCIs (UCX's dc_mlx5 keeps a
//!   pool of them for the same reason) and wait for room when a DCI's queue is full.
//!
//! The receive side takes the same memory in both (a receive per message); what RC multiplies
//! by the peers is the QPs and their send queues.

use clap::Parser;
use mlx5_direct::connect::{connect_qps, ConnectParams};
use mlx5_direct::ctx::{DcAddr, DcTarget, Dci, DciInit, Dct};
use mlx5_direct::datapath::{SendWr, Wc, WcOpcode};
use mlx5_direct::sim::{DeviceConfig, QueueMemory};
use mlx5_direct::{Context, Cq, Mr, Pd, Qp, QpInit, SimFabric, Srq};
use std::collections::BTreeSet;
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes per message and per receive slot.
const SLOT: usize = 48;
/// The DC access key of every node's target (UCX's `UCT_IB_KEY`).
const KEY: u64 = 0x1ee7_a330;

/// DC against RC full meshes on the software ConnectX, with their QP counts and memory.
#[derive(Parser)]
#[command(name = "dc_mesh")]
struct Args {
    /// Nodes (software ConnectX devices).
    #[arg(default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=32))]
    nodes: u32,
    /// DC initiators per node.
    #[arg(default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    dcis: u32,
    /// Messages each node sends each other node.
    #[arg(default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    msgs: u32,
    /// Send WRs each QP's send queue holds (an RC QP's, a DCI's).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(8..=1024))]
    depth: u32,
}

/// Message `k` of node `from` to node `to` in `layout`, padded to a slot.
fn message(layout: &str, from: usize, to: usize, k: usize) -> Vec<u8> {
    let mut m = format!("{layout} message {k} from node {from:02} to node {to:02}").into_bytes();
    m.resize(SLOT, b'.');
    m
}

/// One node's side of a layout: its CQ, its registered buffer (a slot per message it
/// receives), what it has received.
struct Node {
    cq: Cq,
    mr: Mr,
    got: BTreeSet<(usize, usize)>,
}

fn node(ctx: &Context, pd: &Pd, slots: usize) -> Result<Node> {
    Ok(Node {
        cq: ctx.create_cq(2 * slots as u32 + 64)?,
        mr: pd.alloc_mr(SLOT * slots)?,
        got: BTreeSet::new(),
    })
}

/// What the devices' queues hold now, summed over the nodes.
fn memory(nodes: &[Context]) -> QueueMemory {
    nodes
        .iter()
        .filter_map(|c| c.sim_device())
        .map(|d| d.queue_memory())
        .fold(QueueMemory::default(), |a, m| QueueMemory {
            qps: a.qps + m.qps,
            qp_bytes: a.qp_bytes + m.qp_bytes,
            srqs: a.srqs + m.srqs,
            srq_bytes: a.srq_bytes + m.srq_bytes,
        })
}

/// Check a receive completion of node `me`: its slot holds a message of `layout` to `me`
/// whose sender and number arrive once; `check` may look at the completion too.
fn check_recv(layout: &str, me: usize, n: &mut Node, wc: &Wc) -> Result<()> {
    if !wc.is_ok() || wc.opcode() != WcOpcode::Recv || wc.byte_len() as usize != SLOT {
        return Err(format!("{layout}: node {me}: bad completion {wc:?}").into());
    }
    let slot = wc.wr_id() as usize;
    let data = n.mr.read(slot * SLOT, SLOT)?;
    let text = String::from_utf8_lossy(&data).into_owned();
    let parse = || -> Option<(usize, usize, usize)> {
        let w: Vec<&str> = text.split_whitespace().collect();
        Some((w.get(2)?.parse().ok()?, w.get(5)?.parse().ok()?, {
            w.get(8)?.trim_end_matches('.').parse().ok()?
        }))
    };
    let Some((k, from, to)) = parse() else {
        return Err(format!("{layout}: node {me}, slot {slot}: {text:?}").into());
    };
    if to != me || data != message(layout, from, to, k) {
        return Err(format!("{layout}: node {me}, slot {slot}: {text:?}").into());
    }
    if !n.got.insert((from, k)) {
        return Err(format!("{layout}: node {me} got message {k} of node {from} twice").into());
    }
    Ok(())
}

/// RC: a QP per peer on each node; returns the devices' queue memory with the mesh up.
fn rc_mesh(
    fabric: &SimFabric,
    ctxs: &[Context],
    pds: &[Pd],
    m: usize,
    depth: u32,
) -> Result<QueueMemory> {
    let n = ctxs.len();
    let slots = (n - 1) * m;
    let mut nodes = (0..n)
        .map(|i| node(&ctxs[i], &pds[i], slots))
        .collect::<Result<Vec<_>>>()?;
    // qps[i][k] talks to peers[i][k].
    let mut qps: Vec<Vec<Qp>> = (0..n).map(|_| Vec::new()).collect();
    let mut peers = vec![Vec::new(); n];
    let params = ConnectParams::default();
    for i in 0..n {
        for j in i + 1..n {
            let init = |cq| {
                QpInit::rc(cq)
                    .max_send_wr(depth)
                    .max_recv_wr(m as u32)
                    .max_inline_data(SLOT as u32)
            };
            let mut a = pds[i].create_qp(&init(&nodes[i].cq))?;
            let mut b = pds[j].create_qp(&init(&nodes[j].cq))?;
            connect_qps(&mut a, &mut b, &params)?;
            qps[i].push(a);
            peers[i].push(j);
            qps[j].push(b);
            peers[j].push(i);
        }
    }
    let mem = memory(ctxs);
    for me in 0..n {
        for (k, qp) in qps[me].iter_mut().enumerate() {
            for s in 0..m {
                let slot = k * m + s;
                qp.post_recv(slot as u64, &[nodes[me].mr.sge(slot * SLOT, SLOT as u32)?])?;
            }
        }
    }
    for me in 0..n {
        for (k, qp) in qps[me].iter_mut().enumerate() {
            for s in 0..m {
                let msg = message("RC", me, peers[me][k], s);
                qp.post(&SendWr::send(s as u64).inline(&msg).signaled())?;
            }
        }
    }
    let mut wcs = [Wc::default(); 32];
    let (mut sent, want) = (0, n * (n - 1) * m);
    for _ in 0..1000 {
        let moved = fabric.fabric().run_until_idle() > 0;
        let mut polled = false;
        for (me, nd) in nodes.iter_mut().enumerate() {
            loop {
                let k = nd.cq.poll(&mut qps[me][..], &mut wcs)?;
                if k == 0 {
                    break;
                }
                polled = true;
                for wc in &wcs[..k] {
                    if wc.opcode().is_recv() {
                        check_recv("RC", me, nd, wc)?;
                    } else if wc.is_ok() {
                        sent += 1;
                    } else {
                        return Err(format!("RC: node {me}: send {wc:?}").into());
                    }
                }
            }
        }
        if sent == want && nodes.iter().all(|nd| nd.got.len() == slots) {
            return Ok(mem);
        }
        if !moved && !polled {
            break;
        }
    }
    Err(format!("RC: {} of {want} messages arrived", received(&nodes)).into())
}

fn received(nodes: &[Node]) -> usize {
    nodes.iter().map(|nd| nd.got.len()).sum()
}

/// DC: one target and `k` initiators per node; returns the devices' queue memory with the mesh
/// up and the connections the initiators opened.
fn dc_mesh(
    fabric: &SimFabric,
    ctxs: &[Context],
    pds: &[Pd],
    k: usize,
    m: usize,
    depth: u32,
) -> Result<(QueueMemory, u64)> {
    let n = ctxs.len();
    let slots = (n - 1) * m;
    let mut nodes = (0..n)
        .map(|i| node(&ctxs[i], &pds[i], slots))
        .collect::<Result<Vec<_>>>()?;
    let mut srqs: Vec<Srq> = Vec::with_capacity(n);
    let mut dcts: Vec<Dct> = Vec::with_capacity(n);
    let mut dcis: Vec<Vec<Dci>> = Vec::with_capacity(n);
    for i in 0..n {
        let srq = pds[i].create_srq(slots as u32, 1)?;
        dcts.push(pds[i].create_dct(&nodes[i].cq, &srq, KEY)?);
        srqs.push(srq);
        let init = DciInit {
            max_send_wr: depth,
            max_inline_data: SLOT as u32,
            ..DciInit::new(&nodes[i].cq)
        };
        dcis.push(
            (0..k)
                .map(|_| pds[i].create_dci(&init))
                .collect::<std::result::Result<_, _>>()?,
        );
    }
    let mem = memory(ctxs);
    // What each node publishes: its target's address, number and key.
    let addrs: Vec<DcAddr> = dcts.iter().map(Dct::addr).collect();
    // targets[i][j]: node i's destination for node j, on the DCI that sends to j.
    let mut targets: Vec<Vec<Option<DcTarget>>> = Vec::with_capacity(n);
    for (i, mine) in dcis.iter().enumerate() {
        let row = (0..n)
            .map(|j| (j != i).then(|| mine[j % k].target(&addrs[j])).transpose())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        targets.push(row);
    }
    for (me, srq) in srqs.iter_mut().enumerate() {
        for slot in 0..slots {
            srq.post_recv(slot as u64, &[nodes[me].mr.sge(slot * SLOT, SLOT as u32)?])?;
        }
    }
    // Each node's sends, in order: (to, message number); posted as the DCIs have room.
    let mut todo: Vec<std::collections::VecDeque<(usize, usize)>> = (0..n)
        .map(|me| {
            (0..m)
                .flat_map(|s| (0..n).filter(move |&t| t != me).map(move |t| (t, s)))
                .collect()
        })
        .collect();
    let dci_qpns: Vec<BTreeSet<u32>> = dcis
        .iter()
        .map(|d| d.iter().map(|q| q.qpn()).collect())
        .collect();
    let mut wcs = [Wc::default(); 32];
    let (mut sent, want) = (0, n * (n - 1) * m);
    for _ in 0..10_000 {
        let mut posted = false;
        for (me, q) in todo.iter_mut().enumerate() {
            while let Some(&(to, s)) = q.front() {
                let (Some(dest), dci) = (&targets[me][to], &mut dcis[me][to % k]) else {
                    q.pop_front();
                    continue;
                };
                let msg = message("DC", me, to, s);
                match dci.post(&SendWr::send(s as u64).inline(&msg).dc(dest).signaled()) {
                    Ok(()) => {
                        q.pop_front();
                        posted = true;
                    }
                    // That DCI's queue is full: the rest waits for its completions.
                    Err(mlx5_direct::datapath::Error::SqFull { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let moved = fabric.fabric().run_until_idle() > 0;
        let mut polled = false;
        for (me, nd) in nodes.iter_mut().enumerate() {
            loop {
                let got = nd.cq.poll(
                    &mut (&mut dcis[me][..], std::slice::from_mut(&mut srqs[me])),
                    &mut wcs,
                )?;
                if got == 0 {
                    break;
                }
                polled = true;
                for wc in &wcs[..got] {
                    if wc.opcode().is_recv() {
                        // The DCT's number, and a DCI of some other node as the source.
                        let from_dci = dci_qpns
                            .iter()
                            .enumerate()
                            .any(|(i, s)| i != me && s.contains(&wc.src_qp()));
                        if wc.qp_num() != dcts[me].number() || !from_dci {
                            return Err(format!("DC: node {me}: completion {wc:?}").into());
                        }
                        check_recv("DC", me, nd, wc)?;
                    } else if wc.is_ok() {
                        sent += 1;
                    } else {
                        return Err(format!("DC: node {me}: send {wc:?}").into());
                    }
                }
            }
        }
        if sent == want && nodes.iter().all(|nd| nd.got.len() == slots) {
            let connects = dcis
                .iter()
                .flatten()
                .filter_map(|d| {
                    d.context()
                        .sim_device()
                        .and_then(|s| s.dc_stats(d.id()).ok())
                })
                .map(|s| s.connects)
                .sum();
            return Ok((mem, connects));
        }
        if !moved && !polled && !posted {
            break;
        }
    }
    Err(format!("DC: {} of {want} messages arrived", received(&nodes)).into())
}

fn kib(b: usize) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

fn run(args: &Args) -> Result<()> {
    let (n, k, m, d) = (
        args.nodes as usize,
        args.dcis as usize,
        args.msgs as usize,
        args.depth,
    );
    let fabric = SimFabric::deterministic();
    let ctxs: Vec<Context> = (0..n)
        .map(|i| {
            fabric.add_device_with(
                DeviceConfig::new([10, 0, 0, 1 + i as u8]).name(&format!("node{i}")),
            )
        })
        .collect();
    let pds = ctxs
        .iter()
        .map(Context::alloc_pd)
        .collect::<std::result::Result<Vec<Pd>, _>>()?;
    let msgs = n * (n - 1) * m;
    println!(
        "{n} nodes; every node sends {m} {SLOT}-byte message(s) to each of the other {}; send \
         queues of {d} WRs",
        n - 1
    );
    let base = memory(&ctxs);
    let rc = rc_mesh(&fabric, &ctxs, &pds, m, d)?;
    let rc_qps = rc.qps - base.qps;
    if rc_qps != n * (n - 1) {
        return Err(format!("RC mesh holds {rc_qps} QPs, expected N·(N−1)").into());
    }
    let dc_base = memory(&ctxs);
    let (dc, connects) = dc_mesh(&fabric, &ctxs, &pds, k, m, d)?;
    let dc_qps = dc.qps - dc_base.qps;
    if dc_qps != n * (k + 1) {
        return Err(format!("DC mesh holds {dc_qps} QPs, expected N·(K+1)").into());
    }
    let rc_bytes = rc.total() - base.total();
    let dc_bytes = dc.total() - dc_base.total();
    println!(
        "{:<4} {:>10} {:>10} {:>14} {:>14}",
        "", "QPs/node", "QPs", "queue memory", "per node"
    );
    println!(
        "{:<4} {:>10} {:>10} {:>14} {:>14}   {msgs} messages checked",
        "RC",
        n - 1,
        rc_qps,
        kib(rc_bytes),
        kib(rc_bytes / n)
    );
    println!(
        "{:<4} {:>10} {:>10} {:>14} {:>14}   {msgs} messages checked; {k} DCI(s) + 1 DCT + 1 SRQ per node, {connects} in-band connections",
        "DC",
        k + 1,
        dc_qps,
        kib(dc_bytes),
        kib(dc_bytes / n)
    );
    println!(
        "DC uses {:.1}× fewer QPs and {:.1}× less queue memory than RC ({rc_qps} → {dc_qps} QPs)",
        rc_qps as f64 / dc_qps as f64,
        rc_bytes as f64 / dc_bytes.max(1) as f64
    );
    println!("dc_mesh: OK");
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
            eprintln!("dc_mesh: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
