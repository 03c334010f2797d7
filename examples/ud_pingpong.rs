//! UD ping-pong, like rdma-core's `ibv_ud_pingpong`: datagrams between two UD QPs, each
//! addressed with an address handle for the peer's port, the peer's QPN and its Q_Key.
//!
//! ```text
//! cargo run --example ud_pingpong                        server, on the software ConnectX
//! cargo run --example ud_pingpong -- 127.0.0.1           client, in another terminal
//! cargo run --example ud_pingpong -- --loopback          both ends in one process
//! ```
//!
//! Flags as `rc_pingpong`: `-p PORT` (default 18515, `-p 0`: the server picks), `-s SIZE`
//! (default 1024), `-n ITERS` (default 1000), `-d DEV`. The QPNs and Q_Keys cross on the TCP
//! control connection (and, on the software ConnectX, the UDP addresses of the two devices).
//! A UD message is at most one path MTU, and on RoCE every receive starts with the 40-byte
//! GRH the device writes in front of the payload (IBTA §11.4.1.2; `IBV_WC_GRH`), so receive
//! buffers are 40 bytes longer than the message. Every datagram is checked byte for byte, and
//! its source QPN against the peer's.

#[path = "support/pingpong.rs"]
mod pingpong;
use mlx5_tools::side;

use mlx5_direct::connect::{ConnectParams, Connection, QpLink};
use mlx5_direct::hw::QpType;
use mlx5_direct::qp::{Qp, SendWr, Wc, WcFlags};
use pingpong::{drain_sends, finish, say, who, Opts, Outcome, Result, STALL};
use side::{Devices, Rendezvous, Side, SideCfg};
use std::process::ExitCode;
use std::time::Instant;

/// Bytes of the GRH in front of every UD receive on RoCE.
const GRH: usize = 40;
/// Receives kept posted.
const RECVS: u32 = 8;

fn main() -> ExitCode {
    let o = match pingpong::parse("ud_pingpong", 1024, 4096) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let cfg = SideCfg {
        qp_type: QpType::Ud,
        qps: 1,
        sq_depth: 16,
        rq_depth: RECVS,
        inline: 0,
        buf_len: 2 * o.size + GRH,
        srq: None,
    };
    match pingpong::run("ud_pingpong", &o, &cfg, ud_side) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ud_pingpong: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The datagram of iteration `i` from the client (`from_client`) or the server.
fn pattern(i: u64, from_client: bool, size: usize) -> Vec<u8> {
    let from = if from_client { 0xa } else { 0xb };
    (0..size)
        .map(|k| from ^ (i as u8).wrapping_mul(31).wrapping_add(k as u8))
        .collect()
}

/// One end: connect (UD: Init → RTR → RTS and an address handle for the peer), then
/// ping-pong — the client sends first, the server answers each datagram. The buffer's first
/// `size` bytes are sent; the receive area behind them holds the GRH and the payload.
fn ud_side(mut s: Side, devs: &Devices, rv: &Rendezvous, o: &Opts) -> Result<Outcome> {
    let (size, client, who) = (o.size, rv.is_client(), who(rv));
    let recv = s.buf.sge(size, (size + GRH) as u32);
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
    let peer = *conn
        .ud_peer()
        .ok_or("UD connect made no address handle for the peer")?;
    let mtu = conn.path_mtu().bytes() as usize;
    if size > mtu {
        return Err(
            format!("a UD message is at most one MTU ({mtu} bytes), not {size}: use -s").into(),
        );
    }
    let dest = peer.dest();
    let (l, r) = (conn.local(), conn.peer());
    say(&format!(
        "  {who}: local address:  QPN {:#08x}, Q_Key {:#x}, GID {}",
        l.qpn, l.qkey, l.gid
    ));
    say(&format!(
        "  {who}: remote address: QPN {:#08x}, Q_Key {:#x}, GID {}",
        r.qpn, r.qkey, r.gid
    ));
    let mut wcs = [Wc::default(); 16];
    let (mut posted, mut sent, mut grh) = (0u64, 0u64, 0u64);
    let mut checked = 0u64;
    let start = Instant::now();
    for i in 0..o.iters {
        let mut send = |s: &mut Side| -> Result<()> {
            s.buf.write(0, &pattern(i, client, size));
            let sge = [s.buf.sge(0, size as u32)];
            s.qps[0].post(&SendWr::send(i).sges(&sge).ud(&dest).signaled())?;
            posted += 1;
            Ok(())
        };
        if client {
            send(&mut s)?;
        }
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
                let off = if wc.flags.contains(WcFlags::GRH) {
                    grh += 1;
                    GRH
                } else {
                    0
                };
                if wc.src_qp != peer.qpn {
                    let (got, want) = (wc.src_qp, peer.qpn);
                    return Err(format!("iteration {i}: from QPN {got:#x}, want {want:#x}").into());
                }
                if wc.byte_len as usize != size + off
                    || s.buf.read(size + off, size) != pattern(i, !client, size)
                {
                    return Err(format!("iteration {i}: the datagram arrived damaged").into());
                }
                s.qps[0].post_recv(wc.wr_id, std::slice::from_ref(&recv))?;
                got = true;
                checked += 1;
            }
            if n == 0 {
                if Instant::now() > deadline {
                    // UD has no retransmission: a lost datagram ends the run (as in
                    // ibv_ud_pingpong).
                    return Err(format!(
                        "iteration {i}: no datagram from the peer for {STALL:?} (this side: \
                             {posted} sends posted, {sent} completed)"
                    )
                    .into());
                }
                std::thread::yield_now();
            }
        }
        if !client {
            send(&mut s)?;
        }
    }
    let took = start.elapsed();
    drain_sends(&mut s, sent, posted, "completed")?;
    finish(conn, client)?;
    say(&format!(
        "  {who}: {} datagrams of {size} bytes received from QPN {:#08x}, every one checked byte \
         for byte ({grh} with a GRH in front)",
        o.iters, peer.qpn
    ));
    Ok(Outcome { took, checked })
}
