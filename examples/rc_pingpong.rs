//! RC ping-pong over SEND/RECV, like rdma-core's `ibv_rc_pingpong`: a server and a client
//! exchange their QP endpoints over TCP, then bounce a message back and forth.
//!
//! ```text
//! cargo run --example rc_pingpong -- --loopback          both ends here (software ConnectX)
//! cargo run --features verbs --example rc_pingpong -- -d mlx5_0                (server)
//! cargo run --features verbs --example rc_pingpong -- -d mlx5_0 192.0.2.1      (client)
//! ```
//!
//! The software ConnectX lives inside one process (it has no transport between processes
//! yet), so on it both ends run here, in two threads, each with its own device on the shared
//! fabric (threaded mode), connected through a real TCP exchange on 127.0.0.1 — the same
//! `Connection::accept` / `Connection::connect` a server and a client process use. Every
//! message is checked byte for byte; the exit status says whether all arrived intact.

#[path = "../src/bin/support/side.rs"]
mod side;

use mlx5_direct::hw::QpType;
use mlx5_direct::qp::connect::{ConnectParams, Connection, QpLink};
use mlx5_direct::qp::{Qp, SendWr, Wc};
use side::{open_devices, Side, SideCfg};
use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const RECVS: u32 = 16;

/// Options, `ibv_rc_pingpong` style.
struct Opts {
    server: Option<String>,
    device: String,
    port: u16,
    size: usize,
    iters: u64,
    loopback: bool,
}

fn parse() -> std::result::Result<Opts, String> {
    let mut o = Opts {
        server: None,
        device: "sim".into(),
        port: 18515,
        size: 4096,
        iters: 1000,
        loopback: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
        match a.as_str() {
            "-d" | "--ib-dev" => o.device = val(&a)?,
            "-p" | "--port" => o.port = val(&a)?.parse().map_err(|e| format!("-p: {e}"))?,
            "-s" | "--size" => o.size = val(&a)?.parse().map_err(|e| format!("-s: {e}"))?,
            "-n" | "--iters" => o.iters = val(&a)?.parse().map_err(|e| format!("-n: {e}"))?,
            "--loopback" => o.loopback = true,
            "-h" | "--help" => {
                return Err(
                    "usage: rc_pingpong [--loopback] [-d DEV] [-p PORT] [-s SIZE] \
                            [-n ITERS] [SERVER]"
                        .into(),
                )
            }
            s if !s.starts_with('-') => o.server = Some(s.to_string()),
            s => return Err(format!("unknown option {s}")),
        }
    }
    if o.size == 0 || o.size > 1 << 20 || o.iters == 0 {
        return Err("-s must be 1..=1048576 and -n at least 1".into());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_pingpong: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cfg(size: usize) -> SideCfg {
    SideCfg {
        qp_type: QpType::Rc,
        qps: 1,
        sq_depth: 16,
        rq_depth: RECVS,
        inline: 0,
        buf_len: 2 * size,
        srq: None,
    }
}

/// The message of iteration `i` from the client (`from_client`) or the server.
fn pattern(i: u64, from_client: bool, size: usize) -> Vec<u8> {
    let salt = if from_client { 0x10 } else { 0x80 };
    (0..size)
        .map(|k| (i as u8).wrapping_add(k as u8).wrapping_add(salt))
        .collect()
}

/// Connect over TCP, then ping-pong. The buffer's first half is sent, the second receives.
fn side_main(
    mut s: Side,
    server: Option<String>,
    listener: Option<TcpListener>,
    o: &Opts,
) -> Result<(Duration, Side)> {
    let size = o.size;
    let recv = s.buf.sge(size, size as u32);
    let params = ConnectParams::default();
    let qp_ref = s.qp_ref(0);
    let dev = s.dev.clone();
    let client = server.is_some();
    let conn = {
        let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, move |qp: &mut Qp| {
            for i in 0..RECVS as u64 {
                qp.post_recv(i, std::slice::from_ref(&recv))?;
            }
            Ok(())
        });
        match (&listener, &server) {
            (Some(l), _) => Connection::accept(l, &*dev, qp_ref, &mut link, &params)?,
            (None, Some(h)) => {
                Connection::connect((h.as_str(), o.port), &*dev, qp_ref, &mut link, &params)?
            }
            (None, None) => return Err("no listener and no server address".into()),
        }
    };
    let (l, r) = (conn.local(), conn.peer());
    println!(
        "  {}: local address:  QPN {:#08x}, PSN {:#08x}, GID {}",
        if client { "client" } else { "server" },
        l.qpn,
        l.psn,
        l.gid
    );
    println!(
        "  {}: remote address: QPN {:#08x}, PSN {:#08x}, GID {}",
        if client { "client" } else { "server" },
        r.qpn,
        r.psn,
        r.gid
    );
    let mut wcs = [Wc::default(); 16];
    let start = Instant::now();
    for i in 0..o.iters {
        let send = |s: &mut Side| -> Result<()> {
            s.buf.write(0, &pattern(i, client, size));
            let sge = [s.buf.sge(0, size as u32)];
            s.qps[0].post(&SendWr::send(i).sges(&sge).signaled())?;
            Ok(())
        };
        if client {
            send(&mut s)?;
        }
        // Wait for the peer's message (send completions retire on the way).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = false;
        while !got {
            let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
            for wc in &wcs[..n] {
                if !wc.is_ok() {
                    return Err(format!(
                        "iteration {i}: {} {}",
                        wc.opcode.name(),
                        wc.status.name()
                    )
                    .into());
                }
                if wc.opcode.is_recv() {
                    let want = pattern(i, !client, size);
                    if wc.byte_len as usize != size || s.buf.read(size, size) != want {
                        return Err(format!("iteration {i}: the message arrived damaged").into());
                    }
                    s.qps[0].post_recv(wc.wr_id, std::slice::from_ref(&recv))?;
                    got = true;
                }
            }
            if n == 0 {
                // Two spinning ends and the device thread share the cores: let it run.
                std::thread::yield_now();
            }
            if Instant::now() > deadline {
                return Err(format!("iteration {i}: no message from the peer for 10 s").into());
            }
        }
        if !client {
            send(&mut s)?;
        }
    }
    let took = start.elapsed();
    // Let the last send complete before the QP goes away.
    std::thread::sleep(Duration::from_millis(20));
    let _ = s.cq.poll(&mut s.qps[..], &mut wcs);
    drop(conn);
    Ok((took, s))
}

fn report(o: &Opts, took: Duration) {
    let bytes = 2 * o.size as u64 * o.iters;
    let secs = took.as_secs_f64();
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        o.iters,
        secs * 1e6 / o.iters as f64
    );
}

fn run(o: &Opts) -> Result<()> {
    let devs = open_devices(&o.device, o.loopback)?;
    if o.loopback {
        let peer = devs.peer.clone().unwrap_or_else(|| devs.local.clone());
        let a = Side::new(devs.local.clone(), &cfg(o.size))?;
        let b = Side::new(peer, &cfg(o.size))?;
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        println!("rc_pingpong: server and client in one process, TCP exchange on 127.0.0.1:{port}");
        let server_opts = Opts {
            server: None,
            device: o.device.clone(),
            port,
            ..*o
        };
        let client_opts = Opts {
            server: Some("127.0.0.1".into()),
            device: o.device.clone(),
            port,
            ..*o
        };
        let server = std::thread::spawn(move || side_main(b, None, Some(listener), &server_opts));
        let (took, a) = side_main(a, Some("127.0.0.1".into()), None, &client_opts)?;
        let (_, b) = server.join().map_err(|_| "the server thread panicked")??;
        report(o, took);
        drop((a, b));
        return Ok(());
    }
    let s = Side::new(devs.local.clone(), &cfg(o.size))?;
    let listener = match &o.server {
        None => Some(TcpListener::bind(("0.0.0.0", o.port))?),
        Some(_) => None,
    };
    let (took, _s) = side_main(s, o.server.clone(), listener, o)?;
    report(o, took);
    Ok(())
}
