//! What the `rc_pingpong` and `ud_pingpong` binaries share: `ibv_rc_pingpong`'s and
//! `ibv_ud_pingpong`'s flags (rdma-core `libibverbs/examples/rc_pingpong.c`,
//! `ud_pingpong.c`, `usage`: `-p -d -i -g -s -m -r -n -e -l`), parsed with clap ([`parse`]);
//! the three ways to run — a server process (no address), a client process (the server's
//! address), or both ends in this process (`--loopback`) — ([`run`]); and their report lines
//! (`N bytes in S seconds = R Mbit/sec`, `N iters in S seconds = U usec/iter`, [`report`]).
//!
//! On the software ConnectX (`-d sim`, the default) each process has its own device, and the
//! two learn each other's UDP address on the control socket before the endpoint exchange
//! ([`Rendezvous`]). With `--loopback` both ends run here in two threads, each with its own
//! device on one fabric, connected over a real TCP exchange on 127.0.0.1.

use crate::devices::{open_devices, Devices};
use crate::limits;
use crate::rendezvous::Rendezvous;
use crate::resources::{Resources, ResourcesCfg};
use crate::serve::say;
use crate::{Error, Result};
use clap::{CommandFactory, FromArgMatches, Parser};
use mlx5_connect::{AbortCode, ConnectParams, Connection, ControlEvent, Endpoint};
use mlx5_hw::{Mtu, QpType};
use mlx5_qp::Wc;
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// How long a wait for the peer that involves no message may take (the client's goodbye
/// after the last message), and the least any wait is given ([`Setup::patience`] for one
/// message).
pub const STALL: Duration = crate::patience::MIN_PATIENCE;

/// How fast a debug build at least fills and checks a message's pattern (a byte loop: about
/// 100 MiB/s measured; a release build does several GiB/s).
const PATTERN_BPS: u64 = 32 << 20;

/// The flags of `ibv_rc_pingpong` / `ibv_ud_pingpong`, with their defaults.
#[derive(Parser, Clone, Debug)]
#[command(
    version,
    after_help = "Without an address this is the server; with one, the client. RUST_LOG=mlx5=info \
                  logs every QP state transition on standard error."
)]
pub struct Opts {
    /// The server's address: given, this side is the client; omitted, the server.
    pub server: Option<String>,
    /// Listen on / connect to TCP port PORT (0: the server picks one and prints it).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Use device DEV: `sim` (the software ConnectX) or a verbs device such as mlx5_0 (through
    /// rdma-core's libibverbs, loaded when the device is opened).
    #[arg(short = 'd', long = "ib-dev", default_value = "sim")]
    pub device: String,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Local port GID index [default: a RoCE v2 GID of an IPv4 address on a verbs device, 0 on
    /// the software ConnectX].
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u8>,
    /// Size of the message to exchange [default: rc_pingpong 4096; ud_pingpong 2048, or the
    /// path MTU when it is smaller].
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the port's active MTU, at most 1024 as
    /// ibv_rc_pingpong].
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u64,
    /// Sleep on CQ events (the CQ's completion channel) instead of polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Service level (RoCE: the priority), 0 to 15.
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Both ends in this process (two threads, two software ConnectX on one fabric).
    #[arg(long)]
    pub loopback: bool,
    /// The endpoint exchange on the TCP connection: `ibv`, ibv_rc_pingpong's "LID:QPN:PSN:GID"
    /// text (the stock program may be either end; the server echoes each message, as the
    /// stock server does); `own`, this crate's (mlx5-connect's messages, the UDP address of a
    /// software ConnectX in another process, a goodbye) [default: ibv for rc_pingpong on a
    /// verbs device, own on the software ConnectX and for ud_pingpong]
    #[arg(long, value_enum)]
    pub exchange: Option<Exchange>,
    /// Log more on standard error (-v: every QP state transition); RUST_LOG decides instead
    /// when set.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Which endpoint exchange the TCP connection carries (`--exchange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Exchange {
    /// `ibv_rc_pingpong`'s ([`crate::ibv_exchange`]).
    Ibv,
    /// This crate's (`mlx5_connect::Connection::over`).
    Own,
}

/// The exchange `o` asks for on `devs`: `--exchange`, else `ibv_rc_pingpong`'s for the RC
/// example on a verbs device and this crate's otherwise. `ibv` is refused for `ud_pingpong`
/// (not spoken yet) and for a software ConnectX reaching another process over UDP (the text
/// has no field for its UDP address).
pub fn exchange(kind: Kind, o: &Opts, devs: &Devices) -> Result<Exchange> {
    match o.exchange {
        Some(Exchange::Ibv) if kind == Kind::Ud => Err(Error::Usage(
            "--exchange ibv: ud_pingpong speaks only its own exchange for now".into(),
        )),
        Some(Exchange::Ibv) if devs.is_sim() && !devs.on_tap() && !o.loopback => Err(Error::Usage(
            "--exchange ibv: the software ConnectX of this process reaches its peer over \
                 UDP, and ibv_rc_pingpong's LID:QPN:PSN:GID has no field for a UDP address: \
                 run it on a verbs device (e.g. mlx5_0 under mlx5sim) or with --exchange own"
                .into(),
        )),
        Some(e) => Ok(e),
        None if kind == Kind::Rc && !devs.is_sim() => Ok(Exchange::Ibv),
        None => Ok(Exchange::Own),
    }
}

/// Which example.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `rc_pingpong`: SEND/RECV over RC.
    Rc,
    /// `ud_pingpong`: datagrams over UD.
    Ud,
}

impl Kind {
    /// The program's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rc => "rc_pingpong",
            Kind::Ud => "ud_pingpong",
        }
    }

    /// The QP type.
    pub fn qp_type(self) -> QpType {
        match self {
            Kind::Rc => QpType::Rc,
            Kind::Ud => QpType::Ud,
        }
    }
}

/// Parse the command line of `kind`'s example: clap prints `--help` and `--version` on
/// standard output and exits 0, a malformed command line on standard error with exit status 2.
/// Also installs the log ([`crate::log::init`]).
pub fn parse(kind: Kind) -> Opts {
    let about = match kind {
        Kind::Rc => "RC ping-pong over SEND/RECV, like rdma-core's ibv_rc_pingpong",
        Kind::Ud => "UD ping-pong over datagrams, like rdma-core's ibv_ud_pingpong",
    };
    let m = Opts::command()
        .name(kind.name())
        .bin_name(kind.name())
        .about(about)
        .get_matches();
    let o = Opts::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
    crate::log::init(o.verbose);
    o
}

/// The checks of the flags that need no device.
pub fn check(o: &Opts) -> Result<()> {
    if o.loopback && o.server.is_some() {
        return Err(Error::Usage(
            "--loopback runs both ends here: give no server address".into(),
        ));
    }
    if let Some(s) = o.size {
        limits::check_size("-s", s)?;
    }
    limits::check_iters("-n", o.iters, limits::MAX_ITERS, "perftest's MAX_ITER")?;
    if !(1..=16384).contains(&o.rx_depth) {
        return Err(Error::Usage(format!(
            "-r {}: the receive depth is 1 to 16384",
            o.rx_depth
        )));
    }
    if o.sl > 15 {
        return Err(Error::Usage(format!(
            "-l {}: the service level is 0 to 15 (a 4-bit field, IBTA Vol. 1 §7.6.5)",
            o.sl
        )));
    }
    mtu(o)?;
    Ok(())
}

/// `-m` as the MTU enum.
pub fn mtu(o: &Opts) -> Result<Option<Mtu>> {
    match o.mtu {
        None => Ok(None),
        Some(m) => Mtu::from_bytes(m).map(Some).ok_or_else(|| {
            Error::Usage(format!(
                "-m {m}: the MTU is one of 256, 512, 1024, 2048, 4096 (IBTA Vol. 1 §7.7.8)"
            ))
        }),
    }
}

/// Which end a side is.
pub fn who(rv: &Rendezvous) -> &'static str {
    if rv.is_client() {
        "client"
    } else {
        "server"
    }
}

/// What a side needs besides its resources: the devices, its rendezvous, the options, the
/// message size and the connection parameters.
pub struct Setup<'a> {
    /// The devices.
    pub devs: &'a Devices,
    /// How this side reaches its peer.
    pub rv: &'a Rendezvous,
    /// The command line.
    pub opts: &'a Opts,
    /// The message size.
    pub size: usize,
    /// Connection parameters (port, GID index, MTU, SL).
    pub params: ConnectParams,
    /// In loopback both sides print: their lines say which side they are.
    pub tag: &'static str,
    /// The endpoint exchange.
    pub exchange: Exchange,
}

impl Setup<'_> {
    /// How long one wait for the peer's message may take: the peer fills it, the device moves
    /// it there and the answer back at its slowest pace (`crate::patience`), this side checks
    /// it, and the transport's retries.
    pub fn patience(&self) -> crate::patience::Patience {
        use crate::patience::{self, Pace, Patience};
        let size = self.size as u64;
        let prm = &self.params;
        // The RC transport's retries (ud_pingpong's UD never retries: less than this).
        let kind = QpType::Rc;
        Patience::for_work(
            Pace::of(self.devs),
            size.saturating_mul(2),
            2,
            Duration::from_secs_f64(2.0 * size as f64 / PATTERN_BPS as f64),
            patience::retry_budget(kind, prm.timeout, prm.retry_cnt),
            &patience::describe_budget(kind, prm.timeout, prm.retry_cnt),
        )
    }

    /// Say `line`, prefixed in loopback with the side.
    pub fn say(&self, line: &str) {
        say(&format!("{}{line}", self.tag));
    }

    /// `ibv_rc_pingpong`'s address line for `e`: `  local address:  LID 0x0000, QPN
    /// 0x000103, PSN 0x4a2b1c, GID ::ffff:10.0.0.1`.
    pub fn address(&self, what: &str, e: &Endpoint) {
        self.say(&format!(
            "  {what} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
            e.lid,
            e.qpn,
            e.psn,
            std::net::Ipv6Addr::from(e.gid.0)
        ));
    }
}

/// What one end did.
pub struct Outcome {
    /// From the first message to the last.
    pub took: Duration,
    /// Messages received and checked.
    pub checked: u64,
}

/// The shape of an end of `kind` for messages of `size` bytes (UD: `extra` more bytes of each
/// receive for the GRH).
pub fn cfg(kind: Kind, o: &Opts, size: usize, extra: usize) -> ResourcesCfg {
    ResourcesCfg {
        qp_type: kind.qp_type(),
        qps: 1,
        sq_depth: 16,
        rq_depth: o.rx_depth,
        inline: 0,
        buf_len: 2 * size + extra,
        srq: None,
        events: o.events,
    }
}

/// Run `kind`'s example: check the flags, open the devices, run the ends this process has
/// (with `--loopback` both, the server in a second thread, else the server or the client) and
/// print the report. `side` connects one end and runs the ping-pong. `default_size` is the
/// message size without `-s` (`mtu_cap`: at most the port's MTU), `extra` the receive room
/// beyond the message (UD: the GRH).
pub fn run<F>(
    kind: Kind,
    o: &Opts,
    default_size: u64,
    mtu_cap: bool,
    extra: usize,
    side: F,
) -> Result<()>
where
    F: Fn(Resources, &Setup<'_>) -> Result<Outcome> + Sync,
{
    check(o)?;
    let devs = open_devices(&o.device, o.loopback, o.server.is_some())?;
    let r = run_on(kind, o, &devs, default_size, mtu_cap, extra, side);
    if r.is_err() {
        devs.print_driver_bugs(kind.name());
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn run_on<F>(
    kind: Kind,
    o: &Opts,
    devs: &Devices,
    default_size: u64,
    mtu_cap: bool,
    extra: usize,
    side: F,
) -> Result<()>
where
    F: Fn(Resources, &Setup<'_>) -> Result<Outcome> + Sync,
{
    let name = kind.name();
    devs.check_port(o.ib_port)?;
    let port = devs.local.query_port(o.ib_port)?;
    let wanted = mtu(o)?;
    let size = match o.size {
        Some(s) => s,
        None if mtu_cap => {
            let m = wanted.unwrap_or(port.active_mtu).min(port.active_mtu);
            default_size.min(u64::from(m.bytes()))
        }
        None => default_size,
    } as usize;
    let max_wr = devs.local.query_device()?.max_qp_wr;
    if o.rx_depth > max_wr {
        return Err(Error::Usage(format!(
            "-r {}: {} holds at most {max_wr} receives per queue",
            o.rx_depth, devs.name
        )));
    }
    let ends = if o.loopback { 2 } else { 1 };
    limits::check_memory("the buffers", ((2 * size + extra) * ends) as u64)?;
    let mut params = ConnectParams::default();
    params.port = o.ib_port;
    params.gid_index = devs.gid_index(o.ib_port, o.gid_idx)?;
    // ibv_rc_pingpong's default path MTU is 1024 (`mtu = IBV_MTU_1024`).
    params.max_mtu = Some(wanted.unwrap_or(Mtu::Mtu1024));
    params.sl = o.sl;
    let cfg = cfg(kind, o, size, extra);
    let exchange = exchange(kind, o, devs)?;
    say(&format!("{name}: {}", devs.name));
    if o.loopback {
        let a = Resources::new(&devs.local, &cfg)?;
        let b = Resources::new(devs.peer_or_local(), &cfg)?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| Error::Net {
            during: "listen on 127.0.0.1".into(),
            source: e,
        })?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        say(&format!(
            "{name}: server and client in one process, control connection on 127.0.0.1:{port}"
        ));
        let server_rv = Rendezvous::server(listener);
        let client_rv = Rendezvous::client("127.0.0.1", port);
        let setup = |rv, tag| Setup {
            devs,
            rv,
            opts: o,
            size,
            params: params.clone(),
            tag,
            exchange,
        };
        let (ss, cs) = (
            setup(&server_rv, "[server] "),
            setup(&client_rv, "[client] "),
        );
        let (server, client) = std::thread::scope(|sc| {
            let server = sc.spawn(|| side(b, &ss));
            let client = side(a, &cs);
            (server.join(), client)
        });
        let server = server.map_err(|_| Error::Check("the server thread panicked".into()))??;
        let client = client?;
        for (who, end) in [("server", &server), ("client", &client)] {
            if end.checked != o.iters {
                return Err(Error::Check(format!(
                    "the {who} checked {} of {} messages",
                    end.checked, o.iters
                )));
            }
        }
        report(size, o.iters, client.took);
        return Ok(());
    }
    let me = Resources::new(&devs.local, &cfg)?;
    let rv = Rendezvous::new(o.server.as_deref(), o.port)?;
    if !rv.is_client() {
        say(&format!(
            "{name}: server waiting for a client on TCP port {}",
            rv.port().unwrap_or(o.port)
        ));
    }
    let setup = Setup {
        devs,
        rv: &rv,
        opts: o,
        size,
        params,
        tag: "",
        exchange,
    };
    let done = side(me, &setup)?;
    if done.checked != o.iters {
        return Err(Error::Check(format!(
            "checked {} of {} messages",
            done.checked, o.iters
        )));
    }
    report(size, o.iters, done.took);
    Ok(())
}

/// `ibv_rc_pingpong`'s two result lines (both directions count).
pub fn report(size: usize, iters: u64, took: Duration) {
    let bytes = 2 * size as u64 * iters;
    let usec = (took.as_secs_f64() * 1e6).max(1e-3);
    say(&format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    ));
    say(&format!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters.max(1) as f64
    ));
}

/// After the last message: poll until every one of the `posted` sends has completed (`sent`
/// already have), failing on an error completion or when the time the outstanding messages
/// take at the device's slowest pace passes without them all (`crate::patience`; the buffer
/// of `s` holds one message each way); `unfinished` says what the missing sends were not
/// (e.g. "acknowledged").
pub fn drain_sends(s: &mut Resources, mut sent: u64, posted: u64, unfinished: &str) -> Result<()> {
    use crate::patience::{Pace, Patience};
    let mut wcs = [Wc::default(); 16];
    let pace = if s.context().sim_device().is_some() {
        Pace::SOFTWARE_CONNECTX
    } else {
        Pace::SOFTWARE_VERBS
    };
    let out = posted.saturating_sub(sent);
    let patience = Patience::for_work(
        pace,
        (s.mr.len() as u64 / 2).saturating_mul(out),
        out,
        Duration::ZERO,
        Some(Duration::ZERO),
        "the transport's retries",
    );
    let deadline = Instant::now() + patience.limit;
    while sent < posted {
        let n = if s.cq.channel().is_some() {
            // `-e`: sleep on the CQ's completion channel (bounded, so the deadline still runs).
            s.cq.poll_blocking(&mut s.qps[..], &mut wcs, 0, Duration::from_millis(20))?
        } else {
            s.cq.poll(&mut s.qps[..], &mut wcs)?
        };
        for wc in &wcs[..n] {
            if !wc.is_ok() {
                return Err(Error::completion(wc));
            }
            sent += u64::from(!wc.opcode().is_recv());
        }
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "{} sends not {unfinished} within {} (time for {})",
                posted - sent,
                crate::patience::human(patience.limit),
                patience.why
            )));
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
                return Err(Error::Peer {
                    peer: "the client".into(),
                    why: format!("it aborted: {}", code.describe()),
                })
            }
            Some(ControlEvent::RebuildRequested { reason, .. }) => {
                return Err(Error::Peer {
                    peer: "the client".into(),
                    why: format!("it asked for a rebuild ({})", reason.name()),
                })
            }
            Some(other) => {
                return Err(Error::Peer {
                    peer: "the client".into(),
                    why: format!("an unexpected control event: {other:?}"),
                })
            }
            None if Instant::now() > deadline => {
                return Err(Error::stuck(
                    "the client's goodbye",
                    STALL,
                    "the client had its last message and this side's last send was acknowledged",
                    "the client's check of that message and its goodbye",
                ))
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Opts {
        Opts::try_parse_from(std::iter::once("rc_pingpong").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn a_wait_for_a_message_follows_its_size() {
        // `rc_pingpong --loopback -s 1073741824 -n 2` failed at a fixed 10 s: filling,
        // moving and checking a gigabyte takes longer. The wait's limit is what that takes at
        // the software ConnectX's slowest pace (`crate::patience`).
        let devs = crate::devices::Devices::sim_pair(false).unwrap();
        let rv = Rendezvous::client("127.0.0.1", 1);
        let o = opts(&["--loopback"]);
        let setup = |size: usize| Setup {
            devs: &devs,
            rv: &rv,
            opts: &o,
            size,
            params: ConnectParams::default(),
            tag: "",
            exchange: Exchange::Own,
        };
        let small = setup(4096).patience();
        assert!(small.limit < Duration::from_secs(12), "{small:?}");
        let big = setup(1 << 30).patience();
        // 2 GiB moved at 1 MiB/s, 2 GiB of pattern at 32 MiB/s.
        assert!(big.limit > Duration::from_secs(2048 + 64), "{big:?}");
        assert!(
            big.why.contains("2.0 GiB") && big.why.contains("the software ConnectX"),
            "{}",
            big.why
        );
    }

    #[test]
    fn ibv_pingpong_flags_parse_and_are_checked() {
        let o = opts(&[
            "-p", "1", "-d", "mlx5_0", "-i", "1", "-g", "3", "-s", "64", "-m", "2048", "-r", "16",
            "-n", "5", "-l", "2", "host",
        ]);
        assert_eq!(
            (o.port, o.gid_idx, o.size, o.rx_depth, o.iters, o.sl),
            (1, Some(3), Some(64), 16, 5, 2)
        );
        assert_eq!(mtu(&o).unwrap(), Some(Mtu::Mtu2048));
        check(&o).unwrap();
        let bad = |args: &[&str], needle: &str| {
            let e = check(&opts(args)).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(needle), "{args:?}: {e}");
        };
        bad(&["-m", "1500"], "256, 512");
        bad(&["-l", "16"], "0 to 15");
        bad(&["-n", "0"], "at least 1");
        bad(&["-s", "0"], "between 1 and");
        bad(&["-r", "0"], "1 to 16384");
        bad(&["--loopback", "h"], "give no server address");
        assert!(Opts::try_parse_from(["rc_pingpong", "-s", "-1"]).is_err());
        assert!(Opts::try_parse_from(["rc_pingpong", "-p", "65536"]).is_err());
    }

    #[test]
    fn report_lines_are_ibv_rc_pingpongs() {
        // 1000 iterations of 4096 bytes in 0.5 s: 8192000 bytes, 131.07 Mbit/s, 500 usec/iter.
        let bytes = 2 * 4096u64 * 1000;
        assert_eq!(bytes, 8_192_000);
        report(4096, 1000, Duration::from_millis(500));
    }
}
