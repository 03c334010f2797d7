//! One server, many clients, one shared receive queue (SRQ).
//!
//! ```text
//! cargo run --example srq_server -- [CLIENTS] [REQUESTS_PER_CLIENT]
//! ```
//!
//! The server has one RC QP per client, all receiving through a single SRQ and completing on
//! one CQ: the receive buffers are a pool shared by every connection instead of a ring per QP
//! (`docs/sources.md` §15). The clients live on several devices of the fabric (round robin), as
//! clients on several hosts would. A completion names the QP the request came in on
//! (`wc.qp_num`), so the server answers on that QP and puts the receive back into the pool.
//! The clients send in rounds, each with a window of requests in flight, so the pool serves
//! more requests than it has receives. The server checks every request (its client, its
//! number, its bytes); each client checks every answer. Deterministic mode on the software
//! ConnectX.

use mlx5_tools::side;

use mlx5_direct::connect::{connect_pair, ConnectParams, Link, PairSide, QpLink};
use mlx5_direct::hw::{QpState, QpType};
use mlx5_direct::qp::{Qp, SendWr, Srq, Wc};
use mlx5_direct::sim::{DeviceConfig, Fabric, SimDevice};
use side::{Side, SideCfg};
use std::process::ExitCode;
use std::sync::Arc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes per message and per buffer slot.
const SLOT: usize = 64;
/// Receive WRs in the SRQ: the pool every server QP receives from.
const SRQ_DEPTH: u32 = 64;
/// Devices the clients are spread over, at most.
const CLIENT_DEVICES: usize = 3;
/// Requests in flight per client, at most.
const MAX_WINDOW: u64 = 16;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> Option<u64> {
        args.get(i).map_or(Some(default), |a| a.parse().ok())
    };
    let (Some(clients), Some(per)) = (num(0, 6), num(1, 20)) else {
        eprintln!("usage: srq_server [CLIENTS 1..=32] [REQUESTS_PER_CLIENT 1..=10000]");
        return ExitCode::from(2);
    };
    if !(1..=32).contains(&clients) || !(1..=10_000).contains(&per) || args.len() > 2 {
        eprintln!("usage: srq_server [CLIENTS 1..=32] [REQUESTS_PER_CLIENT 1..=10000]");
        return ExitCode::from(2);
    }
    match run(clients as usize, per) {
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

fn post_srq(srq: &mut Srq, s_buf: &side::Buf, slot: u64) -> Result<()> {
    let sge = s_buf.sge(slot as usize * SLOT, SLOT as u32);
    srq.post_recv(slot, std::slice::from_ref(&sge))?;
    Ok(())
}

/// A client: its device's address, its side (one QP; send slots then receive slots, `window`
/// of each), and its progress.
struct Client {
    ip: std::net::Ipv4Addr,
    side: Side,
    sent: u64,
    answered: u64,
}

fn run(clients: usize, per: u64) -> Result<()> {
    let window = (SRQ_DEPTH as u64 / clients as u64)
        .clamp(1, MAX_WINDOW)
        .min(per);
    let fabric = Fabric::new();
    let server_dev = fabric.add_device(DeviceConfig::new([10, 0, 0, 1]).name("server"));
    let client_devs: Vec<SimDevice> = (0..clients.min(CLIENT_DEVICES))
        .map(|i| {
            let name = format!("client{i}");
            fabric.add_device(DeviceConfig::new([10, 0, 0, 2 + i as u8]).name(&name))
        })
        .collect();
    let mut server = Side::new(
        Arc::new(server_dev),
        &SideCfg {
            qp_type: QpType::Rc,
            qps: clients as u32,
            sq_depth: 2 * window as u32,
            rq_depth: 0,
            inline: 0,
            buf_len: 2 * SRQ_DEPTH as usize * SLOT,
            srq: Some(SRQ_DEPTH),
        },
    )?;
    // Fill the shared pool before any QP can receive.
    {
        let srq = server.srq.as_mut().ok_or("no SRQ")?;
        for slot in 0..SRQ_DEPTH as u64 {
            post_srq(srq, &server.buf, slot)?;
        }
    }
    let params = ConnectParams::default();
    let mut cl: Vec<Client> = Vec::new();
    let mut conns = Vec::new();
    for c in 0..clients {
        let dev = &client_devs[c % client_devs.len()];
        let mut s = Side::new(
            Arc::new(dev.clone()),
            &SideCfg {
                qp_type: QpType::Rc,
                qps: 1,
                sq_depth: 2 * window as u32,
                rq_depth: window as u32,
                inline: 0,
                buf_len: 2 * window as usize * SLOT,
                srq: None,
            },
        )?;
        let recv: Vec<_> = (0..window)
            .map(|k| s.buf.sge((window + k) as usize * SLOT, SLOT as u32))
            .collect();
        let (rs, rc) = (server.qp_ref(c), s.qp_ref(0));
        let (ds, dc) = (server.dev.clone(), s.dev.clone());
        // The server's receives live in the SRQ: its side of the link posts nothing.
        let mut ls = ServerLink {
            qp: &mut server.qps[c],
        };
        let mut lc = QpLink::new(&mut s.qps[0], &mut s.cq, move |qp: &mut Qp| {
            for (k, sge) in recv.iter().enumerate() {
                qp.post_recv(k as u64, std::slice::from_ref(sge))?;
            }
            Ok(())
        });
        let pair = connect_pair(
            PairSide {
                dev: &*ds,
                qp: rs,
                link: &mut ls,
                params: &params,
            },
            PairSide {
                dev: &*dc,
                qp: rc,
                link: &mut lc,
                params: &params,
            },
        )?;
        conns.push(pair);
        cl.push(Client {
            ip: dev.ipv4(),
            side: s,
            sent: 0,
            answered: 0,
        });
    }
    let ips: Vec<String> = client_devs.iter().map(|d| d.ipv4().to_string()).collect();
    println!(
        "srq_server: {} on one CQ, all receiving through one SRQ of {SRQ_DEPTH} receives \
         (SRQN {:#x})",
        plural(clients, "server QP"),
        server.srq.as_ref().map_or(0, |s| s.srqn())
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
    while cl.iter().any(|c| c.answered < per) {
        rounds += 1;
        // Every client sends its next window of requests.
        for (c, client) in cl.iter_mut().enumerate() {
            let s = &mut client.side;
            let upto = (client.sent + window).min(per);
            for k in client.sent..upto {
                let off = (k % window) as usize * SLOT;
                s.buf.write(off, &request(c, k));
                let sge = [s.buf.sge(off, SLOT as u32)];
                s.qps[0].post(&SendWr::send(k).sges(&sge).signaled())?;
            }
            client.sent = upto;
        }
        fabric.run_until_idle();

        // The server takes the requests from the shared pool, checks each, answers on the QP
        // it came in on and puts the receive back into the pool.
        let mut staged = 0usize;
        loop {
            let n = {
                let srq = server.srq.as_mut().ok_or("no SRQ")?;
                let mut table = (&mut server.qps[..], std::slice::from_mut(srq));
                server.cq.poll(&mut table, &mut wcs)?
            };
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                if !wc.is_ok() {
                    let (op, st) = (wc.opcode.name(), wc.status.name());
                    return Err(format!("server: {op} completed with {st}").into());
                }
                if !wc.opcode.is_recv() {
                    continue;
                }
                let c = server
                    .qps
                    .iter()
                    .position(|q| q.qpn() == wc.qp_num)
                    .ok_or("a request on an unknown QP")?;
                let k = served[c];
                let slot = wc.wr_id as usize;
                if wc.byte_len as usize != SLOT
                    || server.buf.read(slot * SLOT, SLOT) != request(c, k)
                {
                    return Err(format!(
                        "server: request {k} of client {c} damaged or out of order"
                    )
                    .into());
                }
                served[c] += 1;
                // Answers are staged behind the pool's slots; a round has at most SRQ_DEPTH.
                let off = (SRQ_DEPTH as usize + staged % SRQ_DEPTH as usize) * SLOT;
                staged += 1;
                server.buf.write(off, &answer(c, k));
                let sge = [server.buf.sge(off, SLOT as u32)];
                server.qps[c].post(&SendWr::send(replies).sges(&sge).signaled())?;
                replies += 1;
                post_srq(server.srq.as_mut().ok_or("no SRQ")?, &server.buf, wc.wr_id)?;
                reposted += 1;
            }
        }
        fabric.run_until_idle();

        // Every client checks its answers and reposts its receives.
        for (c, client) in cl.iter_mut().enumerate() {
            let s = &mut client.side;
            loop {
                let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
                if n == 0 {
                    break;
                }
                for wc in &wcs[..n] {
                    if !wc.is_ok() {
                        let (op, st) = (wc.opcode.name(), wc.status.name());
                        return Err(format!("client {c}: {op} completed with {st}").into());
                    }
                    if !wc.opcode.is_recv() {
                        continue;
                    }
                    let k = client.answered;
                    let off = (window + wc.wr_id) as usize * SLOT;
                    if s.buf.read(off, SLOT) != answer(c, k) {
                        return Err(format!("client {c}: answer {k} is not its own").into());
                    }
                    client.answered += 1;
                    let sge = s.buf.sge(off, SLOT as u32);
                    s.qps[0].post_recv(wc.wr_id, std::slice::from_ref(&sge))?;
                }
            }
        }
        if rounds > per + 1 {
            return Err("no progress: some requests were never answered".into());
        }
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
            client.ip, client.side.infos[0].qpn, server.infos[c].qpn
        );
    }
    let bugs = fabric.driver_bugs();
    if !bugs.is_empty() {
        return Err(format!("driver bugs: {bugs:?}").into());
    }
    let total = clients as u64 * per;
    println!(
        "done: {total} requests through one SRQ of {SRQ_DEPTH} receives in {rounds} rounds \
         ({reposted} receives put back into the pool), every request and every answer checked"
    );
    drop(conns);
    Ok(())
}

/// `1 client`, `6 clients`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The server side of a connection: the QP's state follows the control path; its receives
/// are in the SRQ, and its completions are polled by the server loop, not during connect.
struct ServerLink<'a> {
    qp: &'a mut Qp,
}

impl Link for ServerLink<'_> {
    fn set_state(&mut self, state: QpState) {
        self.qp.set_state(state);
    }
    fn post_receives(&mut self) -> mlx5_direct::qp::Result<()> {
        Ok(())
    }
    fn poll(&mut self, _out: &mut [Wc]) -> mlx5_direct::qp::Result<usize> {
        Ok(0)
    }
    fn flush_outstanding(&mut self, out: &mut [Wc]) -> mlx5_direct::qp::Result<usize> {
        self.qp.flush_outstanding(out)
    }
    fn data_path(&self) -> Option<&Qp> {
        Some(self.qp)
    }
}
