//! One server, many clients, one shared receive queue (SRQ).
//!
//! ```text
//! cargo run --example srq_server -- [CLIENTS] [MESSAGES_PER_CLIENT]
//! ```
//!
//! The server has one RC QP per client, all receiving through a single SRQ and completing on
//! one CQ: the receive buffers are a pool shared by every connection instead of a ring per QP
//! (seed README §1). A completion names the QP the message came in on (`wc.qp_num`), so the
//! server answers on that QP. Each client checks that every answer is its own; the server
//! checks every request. Deterministic mode on the software ConnectX.

#[path = "../src/bin/support/side.rs"]
mod side;

use mlx5_direct::hw::QpType;
use mlx5_direct::qp::connect::{connect_pair, ConnectParams, PairSide, QpLink};
use mlx5_direct::qp::{Qp, SendWr, Srq, Wc};
use side::{Devices, Side, SideCfg};
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes per message and per SRQ buffer slot.
const SLOT: usize = 64;
/// Receive WRs in the SRQ.
const SRQ_DEPTH: u32 = 64;

fn main() -> ExitCode {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let clients = args.first().copied().unwrap_or(4) as usize;
    let per = args.get(1).copied().unwrap_or(8);
    if !(1..=32).contains(&clients) || per == 0 || clients as u64 * per > SRQ_DEPTH as u64 {
        eprintln!(
            "usage: srq_server [CLIENTS 1..=32] [MESSAGES], CLIENTS × MESSAGES ≤ {SRQ_DEPTH}"
        );
        return ExitCode::from(2);
    }
    match run(clients, per) {
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

fn run(clients: usize, per: u64) -> Result<()> {
    let devs = Devices::sim_pair(false);
    let fabric = devs.fabric.clone().ok_or("no fabric")?;
    let peer_dev = devs.peer.clone().ok_or("no client device")?;
    let mut server = Side::new(
        devs.local.clone(),
        &SideCfg {
            qp_type: QpType::Rc,
            qps: clients as u32,
            sq_depth: 2 * per as u32,
            rq_depth: 0,
            inline: 0,
            buf_len: (SRQ_DEPTH as usize + clients * per as usize) * SLOT,
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
    let mut cl: Vec<Side> = Vec::new();
    let params = ConnectParams::default();
    let mut conns = Vec::new();
    for c in 0..clients {
        let mut s = Side::new(
            peer_dev.clone(),
            &SideCfg {
                qp_type: QpType::Rc,
                qps: 1,
                sq_depth: 2 * per as u32,
                rq_depth: per as u32,
                inline: 0,
                buf_len: 2 * per as usize * SLOT,
                srq: None,
            },
        )?;
        let recv: Vec<_> = (0..per)
            .map(|k| s.buf.sge((per + k) as usize * SLOT, SLOT as u32))
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
        cl.push(s);
    }
    println!(
        "srq_server: {clients} clients, {per} requests each, one SRQ of {SRQ_DEPTH} receives \
         (SRQN {:#x}) behind {clients} server QPs on one CQ",
        server.srq.as_ref().map_or(0, |s| s.srqn())
    );

    // Every client sends its requests.
    for (c, s) in cl.iter_mut().enumerate() {
        for k in 0..per {
            let off = k as usize * SLOT;
            s.buf.write(off, &request(c, k));
            let sge = [s.buf.sge(off, SLOT as u32)];
            s.qps[0].post(&SendWr::send(k).sges(&sge).signaled())?;
        }
    }
    fabric.run_until_idle();

    // The server takes them from the shared pool and answers on the QP each came in on.
    let mut served = vec![0u64; clients];
    let mut wcs = [Wc::default(); 16];
    let mut replies = 0u64;
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
                return Err(format!("server: {} {}", wc.opcode.name(), wc.status.name()).into());
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
            if server.buf.read(slot * SLOT, SLOT) != request(c, k) {
                return Err(
                    format!("server: request {k} of client {c} damaged or out of order").into(),
                );
            }
            served[c] += 1;
            let off = (SRQ_DEPTH as usize + replies as usize) * SLOT;
            server.buf.write(off, &answer(c, k));
            let sge = [server.buf.sge(off, SLOT as u32)];
            server.qps[c].post(&SendWr::send(replies).sges(&sge).signaled())?;
            replies += 1;
            post_srq(server.srq.as_mut().ok_or("no SRQ")?, &server.buf, wc.wr_id)?;
        }
    }
    fabric.run_until_idle();

    // Every client checks its answers.
    for (c, s) in cl.iter_mut().enumerate() {
        let mut got = 0;
        loop {
            let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                if !wc.is_ok() {
                    return Err(
                        format!("client {c}: {} {}", wc.opcode.name(), wc.status.name()).into(),
                    );
                }
                if wc.opcode.is_recv() {
                    let off = (per + wc.wr_id) as usize * SLOT;
                    if s.buf.read(off, SLOT) != answer(c, wc.wr_id) {
                        return Err(
                            format!("client {c}: answer {} is not its own", wc.wr_id).into()
                        );
                    }
                    got += 1;
                }
            }
        }
        if got != per || served[c] != per {
            return Err(format!(
                "client {c}: served {}, answered {got}, want {per}",
                served[c]
            )
            .into());
        }
        println!(
            "  client {c}: QPN {:#x} ⇄ server QPN {:#x}: {per} requests served from the SRQ, {per} answers checked",
            s.infos[0].qpn,
            server.infos[c].qpn
        );
    }
    let bugs = fabric.driver_bugs();
    if !bugs.is_empty() {
        return Err(format!("driver bugs: {bugs:?}").into());
    }
    println!(
        "done: {} requests through one SRQ, every one answered on its own connection",
        clients as u64 * per
    );
    drop(conns);
    Ok(())
}

/// The server side of a connection: the QP's state follows the control path; its receives
/// are in the SRQ, and its completions are polled by the server loop, not during connect.
struct ServerLink<'a> {
    qp: &'a mut Qp,
}

impl mlx5_direct::qp::connect::Link for ServerLink<'_> {
    fn set_state(&mut self, state: mlx5_direct::hw::QpState) {
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
