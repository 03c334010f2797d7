//! RC ping-pong over SEND/RECV, like rdma-core's `ibv_rc_pingpong`: a server and a client
//! exchange their QP endpoints over TCP, then bounce a message back and forth.
//!
//! ```text
//! cargo run --example rc_pingpong                        server, on the software ConnectX
//! cargo run --example rc_pingpong -- 127.0.0.1           client, in another terminal
//! cargo run --example rc_pingpong -- --loopback          both ends in one process
//! cargo run --features verbs --example rc_pingpong -- -d mlx5_0            (server on a NIC)
//! cargo run --features verbs --example rc_pingpong -- -d mlx5_0 192.0.2.1  (client)
//! ```
//!
//! Flags: `-p PORT` (TCP, default 18515; `-p 0` lets the server pick and print it), `-s SIZE`
//! (default 4096), `-n ITERS` (default 1000), `-d DEV`. On the software ConnectX each process
//! has its own device; the two swap UDP addresses on the control socket, then connect their
//! QPs with `Connection` as on a NIC, and RoCEv2 frames travel between the processes over UDP.
//! Every message is checked byte for byte on arrival; the exit status says whether all
//! arrived intact.

#[path = "support/pingpong.rs"]
mod pingpong;
use mlx5_tools::side;

use mlx5_direct::connect::{ConnectParams, Connection, QpLink};
use mlx5_direct::hw::QpType;
use mlx5_direct::qp::{Qp, SendWr, Wc};
use pingpong::{drain_sends, finish, say, who, Opts, Outcome, Result, STALL};
use side::{Devices, Rendezvous, Side, SideCfg};
use std::process::ExitCode;
use std::time::Instant;

/// Receives kept posted.
const RECVS: u32 = 16;

fn main() -> ExitCode {
    let o = match pingpong::parse("rc_pingpong", 4096, 1 << 20) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let cfg = SideCfg {
        qp_type: QpType::Rc,
        qps: 1,
        sq_depth: 16,
        rq_depth: RECVS,
        inline: 0,
        buf_len: 2 * o.size,
        srq: None,
    };
    match pingpong::run("rc_pingpong", &o, &cfg, rc_side) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_pingpong: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The message of iteration `i` from the client (`from_client`) or the server.
fn pattern(i: u64, from_client: bool, size: usize) -> Vec<u8> {
    let salt = if from_client { 0x10 } else { 0x80 };
    (0..size)
        .map(|k| (i as u8).wrapping_add(k as u8).wrapping_add(salt))
        .collect()
}

/// One end: connect, then ping-pong — the client sends first, the server answers each
/// message. The buffer's first half is sent, the second receives.
fn rc_side(mut s: Side, devs: &Devices, rv: &Rendezvous, o: &Opts) -> Result<Outcome> {
    let (size, client, who) = (o.size, rv.is_client(), who(rv));
    let recv = s.buf.sge(size, size as u32);
    let params = ConnectParams::default();
    let (control, udp) = rv.control(devs, params.io_timeout)?;
    if let Some(u) = udp {
        say(&format!("  {who}: {u}"));
    }
    let (qp_ref, dev) = (s.qp_ref(0), s.dev.clone());
    let conn = {
        let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, move |qp: &mut Qp| {
            for i in 0..RECVS as u64 {
                qp.post_recv(i, std::slice::from_ref(&recv))?;
            }
            Ok(())
        });
        Connection::over(control, &*dev, qp_ref, &mut link, &params)?
    };
    for (what, e) in [
        ("local address: ", conn.local()),
        ("remote address:", conn.peer()),
    ] {
        say(&format!(
            "  {who}: {what} QPN {:#08x}, PSN {:#08x}, GID {}",
            e.qpn, e.psn, e.gid
        ));
    }
    let mut wcs = [Wc::default(); 16];
    let (mut posted, mut sent) = (0u64, 0u64);
    let mut checked = 0u64;
    let start = Instant::now();
    for i in 0..o.iters {
        let mut send = |s: &mut Side| -> Result<()> {
            s.buf.write(0, &pattern(i, client, size));
            let sge = [s.buf.sge(0, size as u32)];
            s.qps[0].post(&SendWr::send(i).sges(&sge).signaled())?;
            posted += 1;
            Ok(())
        };
        if client {
            send(&mut s)?;
        }
        // Wait for the peer's message; send completions retire on the way.
        let deadline = Instant::now() + STALL;
        let mut got = false;
        while !got {
            let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
            for wc in &wcs[..n] {
                if !wc.is_ok() {
                    let (op, st) = (wc.opcode.name(), wc.status.name());
                    return Err(format!("iteration {i}: {op} completed with {st}").into());
                }
                if !wc.opcode.is_recv() {
                    sent += 1;
                    continue;
                }
                if wc.byte_len as usize != size
                    || s.buf.read(size, size) != pattern(i, !client, size)
                {
                    return Err(format!("iteration {i}: the message arrived damaged").into());
                }
                s.qps[0].post_recv(wc.wr_id, std::slice::from_ref(&recv))?;
                got = true;
                checked += 1;
            }
            if n == 0 {
                if Instant::now() > deadline {
                    return Err(format!(
                        "iteration {i}: no message from the peer for {STALL:?} (this side: \
                             {posted} sends posted, {sent} completed)"
                    )
                    .into());
                }
                // The device thread shares the cores with the spinning ends: let it run.
                std::thread::yield_now();
            }
        }
        if !client {
            send(&mut s)?;
        }
    }
    let took = start.elapsed();
    // Every send acknowledged before the goodbye.
    drain_sends(&mut s, sent, posted, "acknowledged")?;
    finish(conn, client)?;
    say(&format!(
        "  {who}: {} messages of {size} bytes received, every one checked byte for byte",
        o.iters
    ));
    Ok(Outcome { took, checked })
}
