//! What `rc_pingpong` and `ud_pingpong` share: `ibv_rc_pingpong`'s flags (rdma-core
//! `libibverbs/examples/rc_pingpong.c`, `usage`), the three ways to run — a server process
//! (no address), a client process (the server's address), or both ends in this process
//! (`--loopback`) — and the report lines.
//!
//! On the software ConnectX (`-d sim`, the default) each process has its own device, and the
//! two learn each other's UDP address on the control socket before the endpoint exchange
//! (`side::Rendezvous`). With `--loopback` both ends run here in two threads, each with its
//! own device on one fabric, connected over a real TCP exchange on 127.0.0.1.
#![allow(dead_code)]

use crate::side::{open_devices, Devices, Rendezvous, Side, SideCfg};
use mlx5_direct::connect::{AbortCode, Connection, ControlEvent};
use mlx5_direct::qp::Wc;
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// Errors of the examples, from any source.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How long one wait for the peer (a message, a completion, the goodbye) may take.
pub const STALL: Duration = Duration::from_secs(10);

/// Options, `ibv_rc_pingpong` style.
#[derive(Clone, Debug)]
pub struct Opts {
    /// The server's address (this side is the client), or none (this side is the server).
    pub server: Option<String>,
    /// `-d`: `sim` (the software ConnectX) or a verbs device (needs `--features verbs`).
    pub device: String,
    /// `-p`: TCP port of the control connection (0: the server picks one and prints it).
    pub port: u16,
    /// `-s`: message size.
    pub size: usize,
    /// `-n`: round trips.
    pub iters: u64,
    /// `--loopback`: both ends in this process.
    pub loopback: bool,
}

/// Parse the command line; `Err` holds the usage text or what is wrong.
pub fn parse(
    name: &str,
    default_size: usize,
    max_size: usize,
) -> std::result::Result<Opts, String> {
    let usage = format!(
        "usage: {name} [-d DEV] [-p PORT] [-s SIZE] [-n ITERS]            server\n       \
         {name} [-d DEV] [-p PORT] [-s SIZE] [-n ITERS] HOST       client\n       \
         {name} --loopback [-s SIZE] [-n ITERS]                    both ends here\n\
         DEV: sim (software ConnectX, default) or a verbs device such as mlx5_0; \
         PORT: 18515 by default, 0 lets the server pick"
    );
    let mut o = Opts {
        server: None,
        device: "sim".into(),
        port: 18515,
        size: default_size,
        iters: 1000,
        loopback: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |flag: &str| args.next().ok_or(format!("{flag} needs a value\n{usage}"));
        match a.as_str() {
            "-d" | "--ib-dev" => o.device = val(&a)?,
            "-p" | "--port" => o.port = val(&a)?.parse().map_err(|e| format!("-p: {e}"))?,
            "-s" | "--size" => o.size = val(&a)?.parse().map_err(|e| format!("-s: {e}"))?,
            "-n" | "--iters" => o.iters = val(&a)?.parse().map_err(|e| format!("-n: {e}"))?,
            "--loopback" => o.loopback = true,
            "-h" | "--help" => return Err(usage),
            s if !s.starts_with('-') && o.server.is_none() => o.server = Some(s.to_string()),
            s => return Err(format!("unexpected argument {s}\n{usage}")),
        }
    }
    if o.size == 0 || o.size > max_size || o.iters == 0 {
        return Err(format!("-s must be 1..={max_size} and -n at least 1"));
    }
    if o.loopback && o.server.is_some() {
        return Err("--loopback runs both ends here: give no server address".into());
    }
    Ok(o)
}

/// Which end a side is.
pub fn who(rv: &Rendezvous) -> &'static str {
    if rv.is_client() {
        "client"
    } else {
        "server"
    }
}

/// Print a line now (the test that starts the server reads it while the server waits).
pub use mlx5_tools::serve::say;

/// What one end did.
pub struct Outcome {
    /// From the first message to the last.
    pub took: Duration,
    /// Messages received and checked.
    pub checked: u64,
}

/// Run the ends this process has: with `--loopback` both (the server in a second thread),
/// else the server or the client. `side` connects one end through its [`Rendezvous`] and
/// runs the ping-pong.
pub fn run<F>(name: &str, o: &Opts, cfg: &SideCfg, side: F) -> Result<()>
where
    F: Fn(Side, &Devices, &Rendezvous, &Opts) -> Result<Outcome> + Sync,
{
    let devs = open_devices(&o.device, o.loopback, o.server.is_some())?;
    let r = run_on(name, o, cfg, &devs, side);
    if r.is_err() {
        for b in devs.driver_bugs() {
            eprintln!("{name}: the software ConnectX reported a driver bug: {b}");
        }
    }
    r
}

fn run_on<F>(name: &str, o: &Opts, cfg: &SideCfg, devs: &Devices, side: F) -> Result<()>
where
    F: Fn(Side, &Devices, &Rendezvous, &Opts) -> Result<Outcome> + Sync,
{
    say(&format!("{name}: {}", devs.name));
    if o.loopback {
        let peer = devs.peer.clone().unwrap_or_else(|| devs.local.clone());
        let a = Side::new(devs.local.clone(), cfg)?;
        let b = Side::new(peer, cfg)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        say(&format!(
            "{name}: server and client in one process, control connection on 127.0.0.1:{port}"
        ));
        let server_rv = Rendezvous::Server(listener);
        let client_rv = Rendezvous::Client {
            host: "127.0.0.1".into(),
            port,
        };
        let (server, client) = std::thread::scope(|sc| {
            let server = sc.spawn(|| side(b, devs, &server_rv, o));
            let client = side(a, devs, &client_rv, o);
            (server.join(), client)
        });
        let server = server.map_err(|_| "the server thread panicked")??;
        let client = client?;
        for (who, end) in [("server", &server), ("client", &client)] {
            if end.checked != o.iters {
                return Err(
                    format!("the {who} checked {} of {} messages", end.checked, o.iters).into(),
                );
            }
        }
        report(o, client.took);
        return Ok(());
    }
    let me = Side::new(devs.local.clone(), cfg)?;
    let rv = Rendezvous::new(o.server.as_deref(), o.port)?;
    if let Rendezvous::Server(l) = &rv {
        say(&format!(
            "{name}: server waiting for a client on TCP port {}",
            l.local_addr()?.port()
        ));
    }
    let done = side(me, devs, &rv, o)?;
    if done.checked != o.iters {
        return Err(format!("checked {} of {} messages", done.checked, o.iters).into());
    }
    report(o, done.took);
    Ok(())
}

/// `ibv_rc_pingpong`'s two result lines (both directions count).
pub fn report(o: &Opts, took: Duration) {
    let bytes = 2 * o.size as u64 * o.iters;
    let secs = took.as_secs_f64().max(1e-9);
    say(&format!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    ));
    say(&format!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        o.iters,
        secs * 1e6 / o.iters as f64
    ));
}

/// After the last message: poll until every one of the `posted` sends has completed (`sent`
/// already have), failing on an error completion or when [`STALL`] passes without them all;
/// `unfinished` says what the missing sends were not (e.g. "acknowledged").
pub fn drain_sends(s: &mut Side, mut sent: u64, posted: u64, unfinished: &str) -> Result<()> {
    let mut wcs = [Wc::default(); 16];
    let deadline = Instant::now() + STALL;
    while sent < posted {
        let n = s.cq.poll(&mut s.qps[..], &mut wcs)?;
        for wc in &wcs[..n] {
            if !wc.is_ok() {
                return Err(
                    format!("last sends: {} {}", wc.opcode.name(), wc.status.name()).into(),
                );
            }
            sent += u64::from(!wc.opcode.is_recv());
        }
        if Instant::now() > deadline {
            return Err(
                format!("{} sends not {unfinished} within {STALL:?}", posted - sent).into(),
            );
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// The end of a run: the client says goodbye (an ABORT Shutdown on the control connection),
/// the server waits for it, so neither tears its QP down while the other still needs it (the
/// ACK of a last message, a retransmission).
pub fn finish(conn: Connection, client: bool) -> Result<()> {
    if client {
        conn.close()?;
        return Ok(());
    }
    let mut conn = conn;
    let deadline = Instant::now() + STALL;
    loop {
        match conn.poll_control()? {
            Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => return Ok(()),
            Some(ControlEvent::PeerAborted(code)) => {
                return Err(format!("the client aborted: {}", code.describe()).into())
            }
            Some(ControlEvent::RebuildRequested { reason, .. }) => {
                return Err(format!("the client asked for a rebuild ({})", reason.name()).into())
            }
            None if Instant::now() > deadline => {
                return Err(format!("no goodbye from the client within {STALL:?}").into())
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}
