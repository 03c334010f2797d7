//! One server, many clients, one shared receive queue (SRQ).
//!
//! ```text
//! cargo run --example srq_server -- [CLIENTS 1..=32] [REQUESTS_PER_CLIENT 1..=10000]
//! ```
//!
//! The server has one RC QP per client, all receiving through a single SRQ and completing on
//! one CQ: the receive buffers are a pool shared by every connection instead of a ring per QP.
//! The clients live on several devices of the fabric (round robin), as clients on several
//! hosts would. A completion names the QP the request came in on (`wc.qp_num`), so the server
//! answers on that QP and puts the receive back into the pool. The clients send in rounds,
//! each with a window of requests in flight, so the pool serves more requests than it has
//! receives. The server checks every request (its client, its number, its bytes); each client
//! checks every answer.
//!
//! In one round a client (the middle one) also sends an RDMA WRITE with a wrong rkey: the
//! server's QP for it NAKs (remote access error) and both QPs of that pair go to Error, while
//! the other clients' requests and the server's answers to them sit in the same CQ. The server
//! recovers that one pair in one call (`recover_pair`, `Recover::new(qp, cq).srq(srq)`): the
//! drain takes only the failed QP's completions — its requests still in the SRQ come back with
//! their WR ids and go back into the pool — and leaves the other QPs' in the CQ for the
//! server's next poll. The client sends the requests whose answers were lost again. Nothing is
//! lost: every request is served, every answer checked, every receive put back.
//!
//! The fabric is deterministic (`SimFabric::deterministic`): the program steps it between the
//! phases of a round, so every run takes the same rounds. `RUST_LOG=mlx5=info` logs every QP
//! transition. Exit status 2 for bad arguments, 1 if anything went wrong.

use clap::Parser;
use mlx5_direct::connect::{connect_qps, recover_pair, ConnectParams, Recover};
use mlx5_direct::datapath::{RemoteAddr, SendWr, Wc, WcStatus};
use mlx5_direct::sim::DeviceConfig;
use mlx5_direct::{Context, Cq, Mr, Qp, QpInit, SimFabric};
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes per message and per buffer slot.
const SLOT: usize = 64;
/// Receive WRs in the SRQ: the pool every server QP receives from.
const SRQ_DEPTH: u32 = 64;
/// Devices the clients are spread over, at most.
const CLIENT_DEVICES: usize = 3;
/// Requests in flight per client, at most.
const MAX_WINDOW: u64 = 16;

/// One server, many clients, one shared receive queue, on the software ConnectX.
#[derive(Parser)]
#[command(name = "srq_server")]
struct Args {
    /// Clients, each connected to a QP of its own on the server.
    #[arg(default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=32))]
    clients: u64,
    /// Requests each client sends.
    #[arg(default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    requests_per_client: u64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    // Bad arguments: clap prints what is wrong and exits with status 2.
    let args = Args::parse();
    match run(args.clients as usize, args.requests_per_client) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("srq_server: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn request(c: usize, k: u64) -> Vec<u8> {
    let mut m = format!("request {k} from client {c}").into_bytes();
    m.resize(SLOT, b'.');
    m
}

fn answer(c: usize, k: u64) -> Vec<u8> {
    let mut m = format!("answer to client {c}, request {k}").into_bytes();
    m.resize(SLOT, b'.');
    m
}

/// A client: its device's address, its QP, its buffer (`window` send slots, then `window`
/// receive slots) and its progress.
struct Client {
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    sent: u64,
    answered: u64,
}

/// The WR id of the WRITE with a wrong rkey.
const BAD_WRITE: u64 = u64::MAX;

fn run(clients: usize, per: u64) -> Result<()> {
    let window = (SRQ_DEPTH as u64 / clients as u64)
        .clamp(1, MAX_WINDOW)
        .min(per);
    let fabric = SimFabric::deterministic();
    let server = fabric.add_device_with(DeviceConfig::new([10, 0, 0, 1]).name("server"));
    let client_devs: Vec<Context> = (0..clients.min(CLIENT_DEVICES))
        .map(|i| {
            let cfg = DeviceConfig::new([10, 0, 0, 2 + i as u8]).name(&format!("client{i}"));
            fabric.add_device_with(cfg)
        })
        .collect();

    // The server: one CQ with room for every completion that can be outstanding (each QP's
    // sends and the whole pool), one SRQ, one QP per client receiving through it.
    let pd = server.alloc_pd()?;
    let mut cq = server.create_cq(clients as u32 * 2 * window as u32 + SRQ_DEPTH)?;
    let mut srq = pd.create_srq(SRQ_DEPTH, 1)?;
    let init = QpInit::rc(&cq).srq(&srq).max_send_wr(2 * window as u32);
    let mut qps = (0..clients)
        .map(|_| pd.create_qp(&init))
        .collect::<std::result::Result<Vec<Qp>, _>>()?;
    // Pool slots first, then the slots answers are staged in.
    let mr = pd.alloc_mr(2 * SRQ_DEPTH as usize * SLOT)?;
    // Fill the shared pool before any QP can receive.
    for slot in 0..SRQ_DEPTH as usize {
        srq.post_recv(slot as u64, &[mr.sge(slot * SLOT, SLOT as u32)?])?;
    }

    let params = ConnectParams::default();
    let mut cl: Vec<Client> = Vec::new();
    let mut conns = Vec::new();
    for (c, server_qp) in qps.iter_mut().enumerate() {
        let ctx = client_devs[c % client_devs.len()].clone();
        let cpd = ctx.alloc_pd()?;
        let ccq = ctx.create_cq(3 * window as u32)?;
        let init = QpInit::rc(&ccq)
            .max_send_wr(2 * window as u32)
            .max_recv_wr(window as u32);
        let mut qp = cpd.create_qp(&init)?;
        let cmr = cpd.alloc_mr(2 * window as usize * SLOT)?;
        // The server's receives are in the SRQ; the client posts its own after connecting
        // (nothing is sent before `connect_qps` returns).
        conns.push(connect_qps(server_qp, &mut qp, &params)?);
        for k in 0..window {
            let sge = cmr.sge((window + k) as usize * SLOT, SLOT as u32)?;
            qp.post_recv(k, &[sge])?;
        }
        cl.push(Client {
            ctx,
            cq: ccq,
            qp,
            mr: cmr,
            sent: 0,
            answered: 0,
        });
    }
    let ips: Vec<String> = client_devs.iter().map(ipv4).collect();
    println!(
        "srq_server: {} on one CQ, all receiving through one SRQ of {SRQ_DEPTH} receives \
         (SRQN {:#x})",
        plural(clients, "server QP"),
        srq.srqn()
    );
    println!(
        "            {} on {} ({}), {per} requests each, up to {window} in flight per client",
        plural(clients, "client"),
        plural(client_devs.len(), "device"),
        ips.join(", ")
    );

    let mut served = vec![0u64; clients];
    let mut wcs = [Wc::default(); 16];
    let (mut replies, mut rounds, mut reposted) = (0u64, 0u64, 0u64);
    // The round in which the middle client also sends a WRITE with a wrong rkey.
    let (bad, bad_round) = (clients / 2, if per > window { 2 } else { 1 });
    let mut recovered = 0u64;
    while cl.iter().any(|c| c.answered < per) {
        rounds += 1;
        // Every client sends its next window of requests.
        for (c, client) in cl.iter_mut().enumerate() {
            let upto = (client.sent + window).min(per);
            for k in client.sent..upto {
                let off = (k % window) as usize * SLOT;
                client.mr.write(off, &request(c, k))?;
                let sge = [client.mr.sge(off, SLOT as u32)?];
                client.qp.post(&SendWr::send(k).sges(&sge).signaled())?;
            }
            client.sent = upto;
            if c == bad && rounds == bad_round {
                let sge = [client.mr.sge(0, 8)?];
                let wrong = RemoteAddr::new(mr.addr(), mr.rkey() ^ 0x5a5a);
                let wr = SendWr::write(BAD_WRITE, wrong).sges(&sge).signaled();
                client.qp.post(&wr)?;
            }
        }
        fabric.fabric().run_until_idle();
        // The clients see their requests complete; one whose QP failed asks the server to
        // recover the pair (over TCP, `Connection::rebuild` sends the peer a REBUILD and its
        // `poll_control` reports it; here, in one process, the set of failed pairs).
        let mut failed = Vec::new();
        for (c, client) in cl.iter_mut().enumerate() {
            if let Some(why) = client_poll(c, client, window, &mut wcs)? {
                failed.push((c, why));
            }
        }

        // The server recovers each failed pair in one call, on the shared CQ and SRQ, before
        // it serves: the CQ holds the requests of every client, and the drain takes only the
        // failed QP's (their receives come back with their WR ids) and leaves the others'.
        for &(c, why) in &failed {
            let (server_conn, client_conn) = &mut conns[c];
            let client = &mut cl[c];
            let cmr = &client.mr;
            let repost = |qp: &mut mlx5_direct::datapath::Qp| {
                for k in 0..window {
                    let sge = cmr
                        .sge((window + k) as usize * SLOT, SLOT as u32)
                        .map_err(|_| {
                            mlx5_direct::datapath::Error::BadLayout("the client's buffer")
                        })?;
                    qp.post_recv(k, &[sge])?;
                }
                Ok(())
            };
            let (rs, _) = recover_pair(
                (
                    server_conn,
                    Recover::new(&mut qps[c], &mut cq).srq(&mut srq),
                ),
                (
                    client_conn,
                    Recover::new(&mut client.qp, &mut client.cq).receives(repost),
                ),
                why,
            )?;
            if rs.drained.iter().any(|w| w.qp_num() != qps[c].qpn()) {
                return Err("the drain took another QP's completion".into());
            }
            // The failed QP's requests come back from the drain: their receives go back into
            // the pool, and the client, which got no answer, sends the requests again.
            let mut returned = 0;
            for w in rs.drained.iter().filter(|w| w.opcode().is_recv()) {
                let slot = w.wr_id() as usize;
                srq.post_recv(w.wr_id(), &[mr.sge(slot * SLOT, SLOT as u32)?])?;
                returned += 1;
            }
            reposted += returned;
            let again = client.sent - client.answered;
            client.sent = client.answered;
            served[c] = client.answered;
            recovered += 1;
            println!(
                "  recovery  client {c}'s WRITE with a wrong rkey failed with {}: server QPN \
                 {:#x} and client QPN {:#x} rebuilt (generation {}); the drain returned \
                 {returned} SRQ receive(s) of the server QP and left the other clients' requests \
                 in the shared CQ; {again} request(s) to send again",
                why.name(),
                qps[c].qpn(),
                client.qp.qpn(),
                rs.generation,
            );
        }

        // The server takes the requests from the shared pool, checks each, answers on the QP
        // it came in on and puts the receive back into the pool.
        let mut staged = 0usize;
        loop {
            let n = cq.poll(
                &mut (&mut qps[..], std::slice::from_mut(&mut srq)),
                &mut wcs,
            )?;
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                if !wc.is_ok() {
                    let (op, st) = (wc.opcode().name(), wc.status().name());
                    return Err(format!("server: {op} completed with {st}").into());
                }
                if !wc.opcode().is_recv() {
                    continue;
                }
                let c = qps
                    .iter()
                    .position(|q| q.qpn() == wc.qp_num())
                    .ok_or("a request on an unknown QP")?;
                let k = served[c];
                let slot = wc.wr_id() as usize;
                if wc.byte_len() as usize != SLOT || mr.read(slot * SLOT, SLOT)? != request(c, k) {
                    return Err(format!(
                        "server: request {k} of client {c} damaged or out of order"
                    )
                    .into());
                }
                served[c] += 1;
                // Answers are staged behind the pool's slots; a round has at most SRQ_DEPTH.
                let off = (SRQ_DEPTH as usize + staged % SRQ_DEPTH as usize) * SLOT;
                staged += 1;
                mr.write(off, &answer(c, k))?;
                let sge = [mr.sge(off, SLOT as u32)?];
                qps[c].post(&SendWr::send(replies).sges(&sge).signaled())?;
                replies += 1;
                srq.post_recv(wc.wr_id(), &[mr.sge(slot * SLOT, SLOT as u32)?])?;
                reposted += 1;
            }
        }
        fabric.fabric().run_until_idle();

        // Every client checks its answers and reposts its receives.
        for (c, client) in cl.iter_mut().enumerate() {
            if let Some(why) = client_poll(c, client, window, &mut wcs)? {
                return Err(format!("client {c}: a completion failed with {why}").into());
            }
        }
        if rounds > per + 2 {
            return Err("no progress: some requests were never answered".into());
        }
    }
    if recovered != 1 {
        return Err(format!("{recovered} pairs recovered, want the one that failed").into());
    }
    for (c, client) in cl.iter().enumerate() {
        if client.answered != per || served[c] != per {
            return Err(format!(
                "client {c}: served {}, answered {}, want {per}",
                served[c], client.answered
            )
            .into());
        }
        println!(
            "  client {c:>2} on {}: QPN {:#x} ⇄ server QPN {:#x}: {per} requests served from \
             the SRQ, {per} answers checked",
            ipv4(&client.ctx),
            client.qp.qpn(),
            qps[c].qpn()
        );
    }
    let bugs = fabric.fabric().driver_bugs();
    if !bugs.is_empty() {
        return Err(format!("driver bugs: {bugs:?}").into());
    }
    if srq.outstanding() != SRQ_DEPTH {
        return Err(format!(
            "{} receives in the pool at the end, want all {SRQ_DEPTH}",
            srq.outstanding()
        )
        .into());
    }
    let total = clients as u64 * per;
    println!(
        "done: {total} requests through one SRQ of {SRQ_DEPTH} receives in {} \
         ({reposted} receives put back into the pool, all {SRQ_DEPTH} posted at the end), one \
         pair recovered on the shared CQ, every request and every answer checked",
        plural(rounds as usize, "round")
    );
    drop(conns);
    Ok(())
}

/// Everything ready on a client's CQ: its requests' completions, and its answers, each checked
/// (the answer to its next request) and its receive posted again. The status of the first
/// completion that failed, if one did (its QP is in Error: the rest are flushes).
fn client_poll(
    c: usize,
    client: &mut Client,
    window: u64,
    wcs: &mut [Wc],
) -> Result<Option<WcStatus>> {
    let mut failed = None;
    loop {
        let n = client.cq.poll(&mut client.qp, wcs)?;
        if n == 0 {
            return Ok(failed);
        }
        for wc in &wcs[..n] {
            if !wc.is_ok() {
                failed = failed.or(Some(wc.status()));
                continue;
            }
            if wc.wr_id() == BAD_WRITE {
                return Err(format!("client {c}: the WRITE with a wrong rkey succeeded").into());
            }
            if !wc.opcode().is_recv() {
                continue;
            }
            let k = client.answered;
            let off = (window + wc.wr_id()) as usize * SLOT;
            if client.mr.read(off, SLOT)? != answer(c, k) {
                return Err(format!("client {c}: answer {k} is not its own").into());
            }
            client.answered += 1;
            client
                .qp
                .post_recv(wc.wr_id(), &[client.mr.sge(off, SLOT as u32)?])?;
        }
    }
}

/// The IPv4 address of a software ConnectX.
fn ipv4(ctx: &Context) -> String {
    ctx.sim_device()
        .map_or_else(|| "?".into(), |d| d.ipv4().to_string())
}

/// `1 client`, `6 clients`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
