//! UD ping-pong, like rdma-core's `ibv_ud_pingpong`: datagrams between two UD QPs, each
//! addressed with an address handle for the peer's port, the peer's QPN and its Q_Key.
//!
//! ```text
//! cargo run --release --bin ud_pingpong                 server, on the software ConnectX
//! cargo run --release --bin ud_pingpong -- 127.0.0.1    client, in another terminal
//! cargo run --release --bin ud_pingpong -- --loopback   both ends in one process
//! ```
//!
//! Flags as `ibv_ud_pingpong` (`--help`): `-p -d -i -g -s -m -r -n -e -l`; `-s` defaults to
//! 2048, or the path MTU when it is smaller (the software ConnectX's port runs at 1024). The
//! QPNs and Q_Keys cross on the TCP control connection (and, on the software ConnectX, the UDP
//! addresses of the two devices). A UD message is at most one path MTU, and on RoCE every
//! receive starts with the 40-byte GRH the device writes in front of the payload (IBTA
//! §11.4.1.2; `IBV_WC_GRH`), so receive buffers are 40 bytes longer than the message. Every
//! datagram is checked byte for byte, and its source QPN against the peer's.
#![forbid(unsafe_code)]

use mlx5_connect::{Connection, QpLink};
use mlx5_qp::{SendWr, Wc, WcFlags};
use mlx5_tools::path::GRH;
use mlx5_tools::pingpong::{self, drain_sends, finish, Kind, Outcome, Setup, STALL};
use mlx5_tools::resources::Resources;
use mlx5_tools::{Error, Result};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let o = pingpong::parse(Kind::Ud);
    match pingpong::run(Kind::Ud, &o, 2048, true, GRH, ud_side) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ud_pingpong: FAILED: {e}");
            ExitCode::from(e.exit_code())
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
fn ud_side(mut s: Resources, st: &Setup<'_>) -> Result<Outcome> {
    let (size, client) = (st.size, st.rv.is_client());
    let recv = s.mr.sge(size, (size + GRH) as u32)?;
    let (control, udp) = st.rv.control(st.devs, st.params.io_timeout)?;
    if let Some(u) = udp {
        st.say(&format!("  {u}"));
    }
    let (qp_ref, ctx) = (s.qp_ref(0), s.context().clone());
    let depth = st.opts.rx_depth;
    let conn = {
        let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, move |qp: &mut mlx5_qp::Qp| {
            for i in 0..u64::from(depth) {
                qp.post_recv(i, std::slice::from_ref(&recv))?;
            }
            Ok(())
        });
        Connection::over(control, ctx.device(), qp_ref, &mut link, &st.params)?
    };
    let peer = *conn
        .ud_peer()
        .ok_or_else(|| Error::Check("the UD connect made no address handle for the peer".into()))?;
    // The connection made the peer's address handle; it is this side's to destroy.
    let _ah = mlx5_tools::connecting::AhGuard::of(&ctx, &conn);
    let mtu = conn.path_mtu().bytes() as usize;
    if size > mtu {
        return Err(Error::Usage(format!(
            "-s {size}: a UD message is at most one MTU ({mtu} bytes): use -s {mtu} or less"
        )));
    }
    let dest = peer.dest();
    st.address("local address: ", conn.local());
    st.address("remote address:", conn.peer());
    let mut wcs = [Wc::default(); 16];
    let (mut posted, mut sent, mut grh, mut checked) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    for i in 0..st.opts.iters {
        let mut send = |s: &mut Resources| -> Result<()> {
            s.mr.write(0, &pattern(i, client, size))?;
            let sge = [s.mr.sge(0, size as u32)?];
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
                    return Err(Error::completion(wc));
                }
                if !wc.opcode().is_recv() {
                    sent += 1;
                    continue;
                }
                let off = if wc.flags().contains(WcFlags::GRH) {
                    grh += 1;
                    GRH
                } else {
                    0
                };
                if wc.src_qp() != peer.qpn {
                    let (got, want) = (wc.src_qp(), peer.qpn);
                    return Err(Error::Check(format!(
                        "iteration {i}: from QPN {got:#x}, want {want:#x}"
                    )));
                }
                if wc.byte_len() as usize != size + off
                    || s.mr.read(size + off, size)? != pattern(i, !client, size)
                {
                    return Err(Error::Check(format!(
                        "iteration {i}: the datagram arrived damaged"
                    )));
                }
                s.qps[0].post_recv(wc.wr_id(), std::slice::from_ref(&recv))?;
                got = true;
                checked += 1;
            }
            if n == 0 {
                if Instant::now() > deadline {
                    // UD has no retransmission: a lost datagram ends the run (as in
                    // ibv_ud_pingpong).
                    return Err(Error::Check(format!(
                        "iteration {i}: no datagram from the peer for {STALL:?} (this side: \
                         {posted} sends posted, {sent} completed)"
                    )));
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
    st.say(&format!(
        "  {} datagrams of {size} bytes received from QPN {:#08x}, every one checked byte for \
         byte ({grh} with a GRH in front)",
        st.opts.iters, peer.qpn
    ));
    Ok(Outcome { took, checked })
}
