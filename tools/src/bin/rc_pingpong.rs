//! RC ping-pong over SEND/RECV, like rdma-core's `ibv_rc_pingpong`: a server and a client
//! exchange their QP endpoints over TCP, then bounce a message back and forth.
//!
//! ```text
//! cargo run --release --bin rc_pingpong                 server, on the software ConnectX
//! cargo run --release --bin rc_pingpong -- 127.0.0.1    client, in another terminal
//! cargo run --release --bin rc_pingpong -- --loopback   both ends in one process
//! cargo run --release --bin rc_pingpong -- -d mlx5_0            (server on a NIC)
//! cargo run --release --bin rc_pingpong -- -d mlx5_0 192.0.2.1  (client)
//! ```
//!
//! Flags as `ibv_rc_pingpong` (`--help`): `-p PORT` (default 18515; `-p 0` lets the server
//! pick and print it), `-d DEV`, `-i PORT`, `-g GID_INDEX`, `-s SIZE` (default 4096), `-m MTU`
//! (default 1024), `-r RX_DEPTH` (default 500), `-n ITERS` (default 1000), `-l SL`, `-e`
//! (refused until the owning API has completion channels). On the software ConnectX each
//! process has its own device; the two swap UDP addresses on the control socket, then connect
//! their QPs with `Connection` as on a NIC, and RoCEv2 frames travel between the processes
//! over UDP. Every message is checked byte for byte on arrival; the exit status says whether
//! all arrived intact. The last two lines are `ibv_rc_pingpong`'s.
//!
//! On a verbs device the TCP connection carries `ibv_rc_pingpong`'s own exchange
//! (`--exchange ibv`, the default there; `mlx5_tools::ibv_exchange`), so either end may be the
//! stock program: `ibv_rc_pingpong -g 0` as the server and `rc_pingpong -d mlx5_0 -g 0 HOST`
//! as the client, or the other way. The stock server sends back the buffer it received into,
//! and so does this one then: the client checks that every message comes back byte for byte,
//! the server that each has the size asked.
#![forbid(unsafe_code)]

use mlx5_connect::{Connection, QpLink};
use mlx5_qp::{SendWr, Wc};
use mlx5_tools::ibv_exchange;
use mlx5_tools::pingpong::{self, drain_sends, finish, Exchange, Kind, Outcome, Setup};
use mlx5_tools::resources::Resources;
use mlx5_tools::{Error, Result};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let o = pingpong::parse(Kind::Rc);
    match pingpong::run(Kind::Rc, &o, 4096, false, 0, rc_side) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_pingpong: FAILED: {e}");
            ExitCode::from(e.exit_code())
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
fn rc_side(mut s: Resources, st: &Setup<'_>) -> Result<Outcome> {
    let (size, client) = (st.size, st.rv.is_client());
    let recv = s.mr.sge(size, size as u32)?;
    let (qp_ref, ctx) = (s.qp_ref(0), s.context().clone());
    let depth = st.opts.rx_depth;
    let receives = move |qp: &mut mlx5_qp::Qp| {
        for i in 0..u64::from(depth) {
            qp.post_recv(i, std::slice::from_ref(&recv))?;
        }
        Ok(())
    };
    // ibv_rc_pingpong's exchange: its server echoes what it receives, so does this one.
    let ibv = st.exchange == Exchange::Ibv;
    let conn = if ibv {
        let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, receives);
        ibv_exchange::connect(st.rv, ctx.device(), qp_ref, &mut link, &st.params)?
    } else {
        let (control, udp) = st.rv.control(st.devs, st.params.io_timeout)?;
        if let Some(u) = udp {
            st.say(&format!("  {u}"));
        }
        let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, receives);
        Connection::over(control, ctx.device(), qp_ref, &mut link, &st.params)?
    };
    st.address("local address: ", conn.local());
    st.address("remote address:", conn.peer());
    let mut wcs = [Wc::default(); 16];
    let (mut posted, mut sent, mut checked) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    for i in 0..st.opts.iters {
        let mut send = |s: &mut Resources| -> Result<()> {
            let msg = if ibv && !client {
                // The message just received (the receive half), sent back.
                s.mr.read(size, size)?
            } else {
                pattern(i, client, size)
            };
            s.mr.write(0, &msg)?;
            let sge = [s.mr.sge(0, size as u32)?];
            s.qps[0].post(&SendWr::send(i).sges(&sge).signaled())?;
            posted += 1;
            Ok(())
        };
        if client {
            send(&mut s)?;
        }
        // Wait for the peer's message; send completions retire on the way.
        let patience = st.patience();
        let deadline = Instant::now() + patience.limit;
        let mut got = false;
        while !got {
            let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
            for wc in &wcs[..n] {
                if wc.status() == mlx5_qp::WcStatus::LocLenErr && wc.opcode().is_recv() {
                    return Err(Error::Check(format!(
                        "iteration {i}: the peer's message is longer than this side's -s \
                         {size} (its receive completed with {}): start both with the same -s",
                        wc.status().name()
                    )));
                }
                if wc.status() == mlx5_qp::WcStatus::RemInvReqErr {
                    return Err(Error::Check(format!(
                        "iteration {i}: the peer refused this side's message of {size} bytes \
                         ({}): its receive buffer is smaller, is its -s smaller? Start both \
                         with the same -s",
                        wc.status().name()
                    )));
                }
                if !wc.is_ok() {
                    return Err(Error::completion(wc));
                }
                if !wc.opcode().is_recv() {
                    sent += 1;
                    continue;
                }
                if wc.byte_len() as usize != size {
                    return Err(Error::Check(format!(
                        "iteration {i}: the peer's message is {} bytes, this side's -s is \
                         {size}: start both with the same -s",
                        wc.byte_len()
                    )));
                }
                // Own exchange: the peer's pattern. ibv_rc_pingpong's: the client gets its own
                // message back; a server echoes whatever came (the stock client sends its
                // buffer, 0x7b bytes or the last message it received).
                let want = match (ibv, client) {
                    (false, _) => Some(pattern(i, !client, size)),
                    (true, true) => Some(pattern(i, true, size)),
                    (true, false) => None,
                };
                if want.is_some_and(|w| s.mr.read(size, size).ok() != Some(w)) {
                    return Err(Error::Check(format!(
                        "iteration {i}: the message arrived damaged{}",
                        if ibv {
                            " (the server's echo differs from what this side sent)"
                        } else {
                            ""
                        }
                    )));
                }
                s.qps[0].post_recv(wc.wr_id(), std::slice::from_ref(&recv))?;
                got = true;
                checked += 1;
            }
            if n == 0 {
                if Instant::now() > deadline {
                    return Err(Error::Check(format!(
                        "iteration {i}: no message from the peer in {} (the time for {}; this side: \
                         {posted} sends posted, {sent} completed)",
                        mlx5_tools::patience::human(patience.limit),
                        patience.why
                    )));
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
    if ibv {
        // ibv_rc_pingpong's exchange has no goodbye: each end stops after its last
        // completion.
        drop(conn);
        st.say(&format!(
            "  {} messages of {size} bytes received{}",
            st.opts.iters,
            if client {
                ", every one back byte for byte"
            } else {
                " and sent back"
            }
        ));
        return Ok(Outcome { took, checked });
    }
    finish(conn, client)?;
    st.say(&format!(
        "  {} messages of {size} bytes received, every one checked byte for byte",
        st.opts.iters
    ));
    Ok(Outcome { took, checked })
}
