//! Mixed pairs on the emulated device (issue 31 point 3): two processes, each on its own
//! software ConnectX behind Debian's unmodified libibverbs + libmlx5 (the preload library
//! `libmlx5sim.so`, device `mlx5_0`), one driving its QP with this library's direct path on the
//! rings libmlx5 laid out, the other with libmlx5's `ibv_post_send`/`ibv_poll_cq` (`--path
//! verbs`) or a stock rdma-core or perftest program. Every run has each role once on each path,
//! and what each role put on the wire (the device's counters in its report: packets, bytes,
//! the requests its responder executed, errors) must be the same whoever built the WQEs. Each
//! process is killed past a bound that follows from the work asked.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");

/// Bound on one process (a debug build's run of at most a few hundred messages takes seconds).
const LIMIT: Duration = Duration::from_secs(120);

/// A program that must be installed (Debian's ibverbs-utils, perftest; tools/test.sh
/// installs them).
fn need(program: &str) -> PathBuf {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not installed (ibverbs-utils, perftest)"))
}

/// A free TCP port (for a stock server, which cannot pick one and print it).
fn tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("bound").port()
}

/// Wait until something listens on TCP port `port` (without connecting: perftest's server
/// accepts one connection only), at most [`LIMIT`].
fn wait_listen(port: u16) {
    let end = Instant::now() + LIMIT;
    let hex = format!(":{port:04X}");
    while Instant::now() < end {
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let t = std::fs::read_to_string(f).unwrap_or_default();
            // sl local_address rem_address st ...: state 0A is LISTEN.
            if t.lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3 && c[1].ends_with(&hex) && c[3] == "0A"
            }) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on TCP port {port} after {LIMIT:?}");
}

/// A directory of one test's reports, removed at the end.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("mixed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch directory");
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process on the emulated device, its stdout read line by line as it comes.
pub(crate) struct Emu {
    what: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    report: PathBuf,
}

/// How a finished process ended.
pub(crate) struct Ended {
    pub(crate) stdout: String,
    report: BTreeMap<String, String>,
}

impl Emu {
    /// Start `exe args` with the preload library, its report going to `report`.
    pub(crate) fn start(exe: &Path, args: &[&str], report: PathBuf) -> Emu {
        Emu::start_faulty(exe, args, report, None)
    }

    /// [`Emu::start`] with the fault specification `faults` (`MLX5SIM_FAULTS`) for its device.
    pub(crate) fn start_faulty(
        exe: &Path,
        args: &[&str],
        report: PathBuf,
        faults: Option<&str>,
    ) -> Emu {
        let mut cmd = Command::new(exe);
        match faults {
            Some(f) => cmd.env("MLX5SIM_FAULTS", f),
            None => cmd.env_remove("MLX5SIM_FAULTS"),
        };
        let mut child = cmd
            .args(args)
            .env(
                "LD_PRELOAD",
                mlx5_testkit::process::preload_library(env!("CARGO")),
            )
            .env("MLX5SIM_REPORT", &report)
            .env_remove("RUST_LOG")
            .env_remove("MLX5SIM_IP")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let out = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Emu {
            what: format!("{} {}", exe.display(), args.join(" ")),
            child,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
            report,
        }
    }

    /// The rest of the first stdout line containing `tag`.
    pub(crate) fn wait_line(&mut self, tag: &str) -> String {
        let end = Instant::now() + LIMIT;
        loop {
            match self
                .lines
                .recv_timeout(end.saturating_duration_since(Instant::now()))
            {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if let Some(at) = l.find(tag) {
                        return l[at + tag.len()..].to_string();
                    }
                }
                Err(e) => panic!(
                    "{}: no line with {tag:?} ({e}):\n{}",
                    self.what,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Wait for the exit (killed past [`LIMIT`]); it must be 0 with no driver bug reported.
    pub(crate) fn finish(mut self) -> Ended {
        let end = Instant::now() + LIMIT;
        let status = loop {
            match self.child.try_wait().expect("wait") {
                Some(s) => break Some(s),
                None if Instant::now() > end => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let stdout = self.seen.join("\n");
        assert!(
            status.is_some_and(|s| s.success()),
            "{} {}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            self.what,
            status.map_or("still ran at the limit: killed".to_string(), |s| s
                .to_string())
        );
        let text = std::fs::read_to_string(&self.report)
            .unwrap_or_else(|e| panic!("{}: no report: {e}", self.what));
        let report: BTreeMap<String, String> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            report.get("driver_bugs").map(String::as_str),
            Some("0"),
            "{}: driver bugs: {report:?}\n{stderr}",
            self.what
        );
        Ended { stdout, report }
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a device's report says it put on the wire and executed for its peer: the counters
/// that depend on the traffic alone, not on who built the WQEs.
const WIRE: &[&str] = &[
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_data",
    "port_rcv_data",
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "duplicate_request",
    "out_of_buffer",
    "rnr_nak_retry_err",
];

/// The counts of [`WIRE`] that tell of the transport's recovery, whose values depend on the
/// machine's load: a retransmitted request, a SEND that found no receive WQE (RNR NAK sent), an
/// RNR NAK received.
const RECOVERY: &[&str] = &["duplicate_request", "out_of_buffer", "rnr_nak_retry_err"];

/// The two runs' traffic as compared: without the recovery counts themselves ([`RECOVERY`]),
/// and when any run resent requests (a requester's ACK timeout, or an RNR NAK because a
/// receiver on a loaded machine reposted late: the transport's recovery, not a difference in
/// the WQEs) without the packet and byte counts, which then include the copies and the packets
/// dropped behind an RNR NAK: the executed requests still must agree.
/// `resent`: whether any of the runs resent ([`resent`]).
fn agree(a: &[(String, u64)], b: &[(String, u64)], resent: bool) -> (Wire, Wire) {
    let keep = |w: &[(String, u64)]| -> Vec<(String, u64)> {
        w.iter()
            .filter(|(n, _)| {
                let counted_twice = resent && n.starts_with("port_");
                !RECOVERY.contains(&n.as_str()) && !counted_twice
            })
            .cloned()
            .collect()
    };
    (keep(a), keep(b))
}

/// Whether any of these wire counts shows a resent request: a duplicate a responder saw, or an
/// RNR NAK, after which the requester sends again what the responder dropped.
fn resent<'a>(ws: impl IntoIterator<Item = &'a [(String, u64)]>) -> bool {
    ws.into_iter().any(|w| {
        w.iter()
            .any(|(n, v)| RECOVERY.contains(&n.as_str()) && *v > 0)
    })
}

/// A device's wire counts by name.
pub(crate) type Wire = Vec<(String, u64)>;

/// Counters that must stay 0 in a clean run.
const ERRORS: &[&str] = &[
    "port_rcv_errors",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "unexpected_response",
];

fn wire(r: &BTreeMap<String, String>, what: &str) -> Vec<(String, u64)> {
    // A SEND that found the receive queue empty (`out_of_buffer`: a receiver that reposts late,
    // as a loaded machine makes perftest's and ours) is answered with an RNR NAK, and the
    // responder drops the packets behind it until the resend, counting them as out of
    // sequence: flow control, not an error (IBTA Vol 1 §9.7.5.2.8). The first packet behind
    // it draws one NAK sequence error (the responder's once-per-gap NAK, as rxe's
    // `check_psn`, which an RNR NAK does not mark as sent), which the requester counts in
    // `packet_seq_err` and ignores while it waits out the RNR timer: at most one per RNR NAK
    // received.
    let count = |k: &str| r.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let rnr = count("out_of_buffer") > 0;
    let rnr_naks = count("rnr_nak_retry_err");
    for e in ERRORS {
        if rnr && *e == "out_of_sequence" {
            continue;
        }
        if rnr_naks > 0 && *e == "packet_seq_err" {
            assert!(
                count(e) <= rnr_naks,
                "{what}: more NAK sequence errors than RNR NAKs in {r:?}"
            );
            continue;
        }
        assert_eq!(
            r.get(*e).map(String::as_str),
            Some("0"),
            "{what}: {e} in {r:?}"
        );
    }
    WIRE.iter()
        .map(|k| {
            let v = r
                .get(*k)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what}: no {k} in {r:?}"));
            (k.to_string(), v)
        })
        .collect()
}

/// Server and client of `tool` (`lat` or `bw`) with `args`, the server on path `server` and
/// the client on `client`: both stdouts and what each put on the wire.
fn tool_pair(
    tool: &str,
    args: &[&str],
    server: &str,
    client: &str,
) -> [(String, Vec<(String, u64)>); 2] {
    let exe = Path::new(tool);
    let s = Scratch::new(&format!(
        "{}-{}-{server}-{client}",
        exe.file_name().unwrap().to_string_lossy(),
        args[0]
    ));
    let common = |path: &'static str| -> Vec<String> {
        let mut a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
        a.extend(["-d", "mlx5_0", "--path", path].map(String::from));
        a
    };
    let path = |p: &str| if p == "direct" { "direct" } else { "verbs" };
    let mut sa = common(path(server));
    sa.extend(["-p", "0"].map(String::from));
    let sa: Vec<&str> = sa.iter().map(String::as_str).collect();
    let mut srv = Emu::start(exe, &sa, s.0.join("server.report"));
    let port = srv.wait_line("Waiting for client to connect on TCP port ");
    let port = port
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut ca = common(path(client));
    ca.extend(["-p".to_string(), port, "127.0.0.1".to_string()]);
    let ca: Vec<&str> = ca.iter().map(String::as_str).collect();
    let c = Emu::start(exe, &ca, s.0.join("client.report")).finish();
    let sv = srv.finish();
    let what = format!("{tool} {args:?}");
    [
        (
            sv.stdout,
            wire(&sv.report, &format!("{what} server ({server})")),
        ),
        (
            c.stdout,
            wire(&c.report, &format!("{what} client ({client})")),
        ),
    ]
}

/// The counters of a bandwidth run that do not depend on when the device acknowledges: a
/// responder coalesces the ACKs of a burst (IB spec §9.7.5.1.1: one ACK may cover several
/// requests), how many depends on how the requests arrive in time. The server's received
/// traffic and executed requests, the client's transmitted traffic.
const BURST_SERVER: &[&str] = &[
    "port_rcv_packets",
    "port_rcv_data",
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
];
const BURST_CLIENT: &[&str] = &["port_xmit_packets", "port_xmit_data"];

/// `tool args` with the direct path serving a verbs client and the other way round: each run
/// completes, its table has a row, and each role puts the same traffic on the wire in both
/// (with `burst`, the traffic that does not depend on ACK coalescing, [`BURST_SERVER`]).
fn mixed(tool: &str, args: &[&str], table: &str, burst: bool) {
    let a = tool_pair(tool, args, "direct", "verbs");
    let b = tool_pair(tool, args, "verbs", "direct");
    for (run, [(so, _), (co, _)]) in [("direct server", &a), ("verbs server", &b)] {
        assert!(
            co.contains(table) && co.contains("Data path"),
            "{tool} {args:?} ({run}): the client printed no table:\n{co}\n--- server\n{so}"
        );
    }
    let re = resent([&a[0].1[..], &a[1].1[..], &b[0].1[..], &b[1].1[..]]);
    for (role, k, only) in [("server", 0, BURST_SERVER), ("client", 1, BURST_CLIENT)] {
        let pick = |w: &[(String, u64)]| -> Vec<(String, u64)> {
            w.iter()
                .filter(|(n, _)| !burst || only.contains(&n.as_str()))
                .cloned()
                .collect()
        };
        let (l, r) = agree(&pick(&a[k].1), &pick(&b[k].1), re);
        assert_eq!(
            l, r,
            "{tool} {args:?}: the {role}'s traffic differs between the direct path and libmlx5's \
             (left: the server on the direct path, right: on libmlx5)"
        );
    }
}

#[test]
fn lat_write_direct_and_verbs() {
    let _g = crate::heavy();
    mixed(
        LAT,
        &["write", "-n", "40", "-s", "64"],
        "t_avg[usec]",
        false,
    );
}

#[test]
fn lat_send_direct_and_verbs() {
    let _g = crate::heavy();
    mixed(
        LAT,
        &["send", "-n", "40", "-s", "300"],
        "t_avg[usec]",
        false,
    );
}

#[test]
fn lat_read_direct_and_verbs() {
    let _g = crate::heavy();
    mixed(
        LAT,
        &["read", "-n", "40", "-s", "2000"],
        "t_avg[usec]",
        false,
    );
}

#[test]
fn lat_atomics_direct_and_verbs() {
    let _g = crate::heavy();
    mixed(
        LAT,
        &["atomic", "-n", "40", "-A", "FETCH_AND_ADD"],
        "t_avg[usec]",
        false,
    );
    mixed(
        LAT,
        &["atomic", "-n", "40", "-A", "CMP_AND_SWAP"],
        "t_avg[usec]",
        false,
    );
}

#[test]
fn bw_write_send_read_direct_and_verbs() {
    let _g = crate::heavy();
    for test in ["write", "send", "read"] {
        mixed(
            BW,
            &[test, "-n", "200", "-s", "4096", "-t", "16"],
            "BW average",
            true,
        );
    }
}

/// Stock perftest `program` (under the preload library, libmlx5 building its WQEs) against
/// `tool test` on the direct path, each as the server once: both complete and print their
/// table (`table`), and each role puts the same traffic on the wire whoever drives it (with
/// `burst`, what ACK coalescing leaves alone).
fn against_perftest(program: &str, tool: &str, args: &[&str], table: &str, burst: bool) {
    against_perftest_on("direct", program, tool, args, table, burst)
}

/// [`against_perftest`] with this side on `path` (`direct` or `verbs`).
pub(crate) fn against_perftest_on(
    path: &str,
    program: &str,
    tool: &str,
    args: &[&str],
    table: &str,
    burst: bool,
) {
    against_perftest_under(None, path, program, tool, args, table, burst);
}

/// [`against_perftest_on`] with this side's devices under the fault specification `faults`
/// (`MLX5SIM_FAULTS`; perftest's run without): the four devices' wire counts (perftest's
/// server, this side's server, this side's client, perftest's client).
pub(crate) fn against_perftest_under(
    faults: Option<&str>,
    path: &str,
    program: &str,
    tool: &str,
    args: &[&str],
    table: &str,
    burst: bool,
) -> Vec<Wire> {
    let stock = need(program);
    let s = Scratch::new(&format!("{program}-{path}-{}", args.join("")));
    let ours = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
        a.extend(["-d", "mlx5_0", "--path", path].map(String::from));
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    // perftest's flags: lat/bw's test name is not one of them.
    let theirs = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = args[1..].iter().map(|x| x.to_string()).collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let strs = |v: &[String]| v.iter().map(String::as_str).collect::<Vec<_>>().join(" ");
    // perftest serving this side.
    let port = tcp_port().to_string();
    let sa = theirs(&["-p", &port]);
    let srv = Emu::start_faulty(
        &stock,
        &sa.iter().map(String::as_str).collect::<Vec<_>>(),
        s.0.join("a-server.report"),
        None,
    );
    wait_listen(port.parse().unwrap());
    let ca = ours(&["-p", &port, "127.0.0.1"]);
    let c1 = Emu::start_faulty(
        Path::new(tool),
        &ca.iter().map(String::as_str).collect::<Vec<_>>(),
        s.0.join("a-client.report"),
        faults,
    )
    .finish();
    let s1 = srv.finish();
    // This side serving perftest.
    let sa = ours(&["-p", "0"]);
    let mut srv = Emu::start_faulty(
        Path::new(tool),
        &sa.iter().map(String::as_str).collect::<Vec<_>>(),
        s.0.join("b-server.report"),
        faults,
    );
    let port = srv.wait_line("Waiting for client to connect on TCP port ");
    let port = port
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let ca = theirs(&["-p", &port, "127.0.0.1"]);
    let c2 = Emu::start_faulty(
        &stock,
        &ca.iter().map(String::as_str).collect::<Vec<_>>(),
        s.0.join("b-client.report"),
        None,
    )
    .finish();
    let s2 = srv.finish();
    let what = format!("{program} / {} {}", tool, strs(&ours(&[])));
    // perftest's READ and atomic latency servers only serve: no table (`run_iter_lat`).
    let passive = tool == LAT && matches!(args[0], "read" | "atomic");
    for (who, out) in [
        (
            "perftest's server",
            if passive { &c1.stdout } else { &s1.stdout },
        ),
        ("this side's client", &c1.stdout),
        ("perftest's client", &c2.stdout),
    ] {
        assert!(
            out.contains(table),
            "{what}: {who} printed no table:\n{out}"
        );
    }
    assert!(
        c1.stdout.contains("Exchange       : perftest")
            && s2.stdout.contains("Exchange       : perftest"),
        "{what}: this side did not name its perftest peer:\n{}\n{}",
        c1.stdout,
        s2.stdout
    );
    let all: Vec<Vec<(String, u64)>> = [&s1.report, &s2.report, &c1.report, &c2.report]
        .iter()
        .map(|r| wire(r, &what))
        .collect();
    let re = resent(all.iter().map(Vec::as_slice));
    for (role, a, b, only) in [
        ("server", &s1.report, &s2.report, BURST_SERVER),
        ("client", &c1.report, &c2.report, BURST_CLIENT),
    ] {
        let pick = |r: &BTreeMap<String, String>, whose: &str| -> Vec<(String, u64)> {
            wire(r, &format!("{what}: {whose} {role}"))
                .into_iter()
                .filter(|(n, _)| !burst || only.contains(&n.as_str()))
                .collect()
        };
        let (l, r) = agree(
            &pick(a, "the first run's"),
            &pick(b, "the second run's"),
            re,
        );
        assert_eq!(
            l, r,
            "{what}: the {role}'s traffic differs between perftest's (left) and this side's \
             (right)"
        );
    }
    all
}

#[test]
fn stock_perftest_latency_against_the_direct_path() {
    let _g = crate::heavy();
    against_perftest(
        "ib_write_lat",
        LAT,
        &["write", "-n", "40", "-s", "64"],
        "t_avg[usec]",
        false,
    );
    against_perftest(
        "ib_send_lat",
        LAT,
        &["send", "-n", "40", "-s", "300"],
        "t_avg[usec]",
        false,
    );
    against_perftest(
        "ib_read_lat",
        LAT,
        &["read", "-n", "40", "-s", "2000"],
        "t_avg[usec]",
        false,
    );
    for a in ["FETCH_AND_ADD", "CMP_AND_SWAP"] {
        against_perftest(
            "ib_atomic_lat",
            LAT,
            &["atomic", "-n", "40", "-A", a],
            "t_avg[usec]",
            false,
        );
    }
}

#[test]
fn stock_perftest_bandwidth_against_the_direct_path() {
    let _g = crate::heavy();
    for (program, test) in [
        ("ib_write_bw", "write"),
        ("ib_send_bw", "send"),
        ("ib_read_bw", "read"),
    ] {
        against_perftest(
            program,
            BW,
            &[test, "-n", "200", "-s", "4096", "-t", "16"],
            "BW average",
            true,
        );
    }
}

/// The `N iters in` line and the addresses of a pingpong's output: (local GID, remote GID).
fn pingpong_gids(out: &str, n: u32) -> (String, String) {
    assert!(
        out.contains(&format!("{n} iters in")),
        "not {n} iterations:\n{out}"
    );
    let gid = |which: &str| -> String {
        out.lines()
            .find(|l| l.contains(which))
            .and_then(|l| l.split("GID ").nth(1))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no {which} line:\n{out}"))
    };
    (gid("local address"), gid("remote address"))
}

/// Stock `ibv_rc_pingpong` (libmlx5's `ibv_post_send`/`ibv_poll_cq`) against `rc_pingpong`
/// on the direct path, both under the preload library, each as the server once, speaking the
/// stock program's exchange: both finish every iteration, this side's client gets every
/// message back byte for byte from the stock server, the stock client (`-c`) finds its buffer
/// intact after this side's server echoed it, the addresses cross, and each role puts the
/// same traffic on the wire whoever drives it.
#[test]
fn stock_ibv_rc_pingpong_against_the_direct_path() {
    let _g = crate::heavy();
    let stock = need("ibv_rc_pingpong");
    let ours = Path::new(env!("CARGO_BIN_EXE_rc_pingpong"));
    let s = Scratch::new("ibv-rc-pingpong");
    let n = 30u32;
    let count = n.to_string();
    let common = ["-g", "0", "-n", count.as_str(), "-s", "1500"];
    let mut runs = Vec::new();
    for (server_is_stock, tag) in [(true, "a"), (false, "b")] {
        let port = tcp_port().to_string();
        let mut sa: Vec<&str> = common.to_vec();
        sa.extend(["-p", &port]);
        let mut ca = sa.clone();
        // The stock client checks its buffer at the end (`-c`); this side's picks the
        // device by name.
        let (se, ce): (&Path, &Path) = if server_is_stock {
            ca.extend(["-d", "mlx5_0", "--exchange", "ibv"]);
            (&stock, ours)
        } else {
            sa.extend(["-d", "mlx5_0"]);
            ca.push("-c");
            (ours, &stock)
        };
        ca.push("127.0.0.1");
        let srv = Emu::start(se, &sa, s.0.join(format!("{tag}-server.report")));
        wait_listen(port.parse().unwrap());
        let c = Emu::start(ce, &ca, s.0.join(format!("{tag}-client.report"))).finish();
        let sv = srv.finish();
        let (sl, sr) = pingpong_gids(&sv.stdout, n);
        let (cl, cr) = pingpong_gids(&c.stdout, n);
        assert!(sl != cl && (sr.as_str(), cr.as_str()) == (cl.as_str(), sl.as_str()));
        let (ours_out, stock_out) = if server_is_stock {
            (&c.stdout, &sv.stdout)
        } else {
            (&sv.stdout, &c.stdout)
        };
        let want = if server_is_stock {
            "every one back byte for byte"
        } else {
            "received and sent back"
        };
        assert!(ours_out.contains(want), "{ours_out}");
        assert!(!stock_out.contains("invalid data"), "{stock_out}");
        runs.push((sv.report, c.report));
    }
    let all: Vec<Vec<(String, u64)>> = runs
        .iter()
        .flat_map(|(s, c)| [wire(s, "server"), wire(c, "client")])
        .collect();
    let re = resent(all.iter().map(Vec::as_slice));
    for (role, k) in [("server", 0), ("client", 1)] {
        let pick = |r: &(BTreeMap<String, String>, BTreeMap<String, String>), whose: &str| {
            wire(if k == 0 { &r.0 } else { &r.1 }, &format!("{whose} {role}"))
        };
        let (l, r) = agree(
            &pick(&runs[0], "the stock"),
            &pick(&runs[1], "this side's"),
            re,
        );
        assert_eq!(
            l, r,
            "ibv_rc_pingpong: the {role}'s traffic differs between runs (left: the stock \
             server, right: this side's)"
        );
    }
}

/// `--exchange ibv` where it cannot work is refused before anything waits (exit status 2):
/// a software ConnectX reaching another process over UDP, and `ud_pingpong`.
#[test]
fn ibv_exchange_refusals() {
    for (exe, args, needle) in [
        (
            env!("CARGO_BIN_EXE_rc_pingpong"),
            &["--exchange", "ibv", "-p", "1", "127.0.0.1"][..],
            "no field for a UDP address",
        ),
        (
            env!("CARGO_BIN_EXE_ud_pingpong"),
            &["--exchange", "ibv", "--loopback"][..],
            "ud_pingpong speaks only its own exchange",
        ),
    ] {
        let out = Command::new(exe)
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{exe} {args:?}: {err}");
        assert!(err.contains(needle), "{exe} {args:?}: {err}");
    }
}

/// `ibv_rc_pingpong`'s exchange between two ends of this side, in one process on the software
/// ConnectX (`--loopback`): the server echoes, the client checks every message back.
#[test]
fn ibv_exchange_in_loopback() {
    let out = Command::new(env!("CARGO_BIN_EXE_rc_pingpong"))
        .args(["--loopback", "--exchange", "ibv", "-n", "20", "-s", "300"])
        .env_remove("RUST_LOG")
        .output()
        .expect("run");
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        so.contains("[client]   20 messages of 300 bytes received, every one back byte for byte"),
        "{so}"
    );
    assert!(
        so.contains("[server]   20 messages of 300 bytes received and sent back"),
        "{so}"
    );
}

/// What one side saw of one operation: its completions (opcode as `enum ibv_wc_opcode`, for
/// receives the byte count, the immediate) and the bytes of its buffer the operation touched.
type Seen = (Vec<Cqe>, Vec<u8>);
/// A completion as compared: opcode (`enum ibv_wc_opcode`), receive length, immediate.
type Cqe = (u32, Option<u32>, Option<u32>);
/// A completion as polled: WR id, success, then as [`Cqe`].
type Polled = (u64, bool, u32, Option<u32>, Option<u32>);

/// One end of the opcode test: post, post a receive, poll, whichever data path drives it.
trait End {
    fn post(&mut self, wr_id: u64, op: &Opc, local: (u64, u32, u32)) -> mlx5_tools::Result<()>;
    fn recv(&mut self, wr_id: u64, local: (u64, u32, u32)) -> mlx5_tools::Result<()>;
    /// The next completion: (wr_id, ok, opcode, byte_len for receives, imm).
    fn next(&mut self) -> mlx5_tools::Result<Option<Polled>>;
}

/// The seven operations, on the peer's buffer at `addr`/`rkey`.
#[derive(Clone, Copy, Debug)]
enum Opc {
    Send,
    SendImm(u32),
    Write(u64, u32),
    WriteImm(u64, u32, u32),
    Read(u64, u32),
    CmpSwap(u64, u32, u64, u64),
    FetchAdd(u64, u32, u64),
}

struct DirectEnd<'a> {
    qp: &'a mut mlx5_ctx::Qp,
    cq: &'a mut mlx5_ctx::Cq,
}

impl End for DirectEnd<'_> {
    fn post(
        &mut self,
        wr_id: u64,
        op: &Opc,
        (addr, length, lkey): (u64, u32, u32),
    ) -> mlx5_tools::Result<()> {
        use mlx5_qp::{RemoteAddr, SendWr, Sge};
        let sge = [Sge { addr, length, lkey }];
        let r = |addr, rkey| RemoteAddr { addr, rkey };
        let wr = match *op {
            Opc::Send => SendWr::send(wr_id).sges(&sge),
            Opc::SendImm(imm) => SendWr::send_imm(wr_id, imm).sges(&sge),
            Opc::Write(a, k) => SendWr::write(wr_id, r(a, k)).sges(&sge),
            Opc::WriteImm(a, k, imm) => SendWr::write_imm(wr_id, r(a, k), imm).sges(&sge),
            Opc::Read(a, k) => SendWr::read(wr_id, r(a, k)).sges(&sge),
            Opc::CmpSwap(a, k, c, s) => SendWr::comp_swap(wr_id, r(a, k), sge[0], c, s),
            Opc::FetchAdd(a, k, add) => SendWr::fetch_add(wr_id, r(a, k), sge[0], add),
        };
        self.qp.post(&wr.signaled())?;
        Ok(())
    }
    fn recv(
        &mut self,
        wr_id: u64,
        (addr, length, lkey): (u64, u32, u32),
    ) -> mlx5_tools::Result<()> {
        self.qp
            .post_recv(wr_id, &[mlx5_qp::Sge { addr, length, lkey }])?;
        Ok(())
    }
    fn next(&mut self) -> mlx5_tools::Result<Option<Polled>> {
        let mut wcs = [mlx5_qp::Wc::default(); 1];
        let n = self.cq.poll(std::slice::from_mut(self.qp), &mut wcs)?;
        Ok((n == 1).then(|| {
            let w = &wcs[0];
            let recv = w.opcode().is_recv();
            let imm = w
                .flags()
                .contains(mlx5_qp::WcFlags::WITH_IMM)
                .then(|| w.imm_data());
            (
                w.wr_id(),
                w.is_ok(),
                w.opcode() as u32,
                recv.then(|| w.byte_len()),
                flag(recv, imm),
            )
        }))
    }
}

struct VerbsEnd<'d> {
    qp: mlx5_hw::verbs::baseline::BaselineQp<'d>,
    cq: mlx5_hw::verbs::baseline::BaselineCq<'d>,
}

impl End for VerbsEnd<'_> {
    fn post(
        &mut self,
        wr_id: u64,
        op: &Opc,
        (addr, length, lkey): (u64, u32, u32),
    ) -> mlx5_tools::Result<()> {
        use mlx5_hw::verbs::baseline::{SendOp, SendWr, Sge};
        let sge = [Sge { addr, length, lkey }];
        let op = match *op {
            Opc::Send => SendOp::Send,
            Opc::SendImm(imm) => SendOp::SendImm(imm),
            Opc::Write(remote_addr, rkey) => SendOp::Write { remote_addr, rkey },
            Opc::WriteImm(remote_addr, rkey, imm) => SendOp::WriteImm {
                remote_addr,
                rkey,
                imm,
            },
            Opc::Read(remote_addr, rkey) => SendOp::Read { remote_addr, rkey },
            Opc::CmpSwap(remote_addr, rkey, compare, swap) => SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            },
            Opc::FetchAdd(remote_addr, rkey, add) => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            },
        };
        self.qp.post_send(&SendWr::new(wr_id, op, &sge))?;
        Ok(())
    }
    fn recv(
        &mut self,
        wr_id: u64,
        (addr, length, lkey): (u64, u32, u32),
    ) -> mlx5_tools::Result<()> {
        self.qp.post_recv(
            wr_id,
            &[mlx5_hw::verbs::baseline::Sge { addr, length, lkey }],
        )?;
        Ok(())
    }
    fn next(&mut self) -> mlx5_tools::Result<Option<Polled>> {
        let mut c = [mlx5_hw::verbs::baseline::Completion::default(); 1];
        let n = self.cq.poll(&mut c)?;
        Ok((n == 1).then(|| {
            let w = &c[0];
            let recv = w.opcode >= 128;
            (
                w.wr_id,
                w.is_success(),
                w.opcode,
                recv.then_some(w.byte_len),
                flag(recv, w.imm),
            )
        }))
    }
}

/// A completion's immediate: a receive's value; of a send-side completion only that it has one
/// (libmlx5 sets `IBV_WC_WITH_IMM` on the requester's completion of SEND/WRITE with immediate and
/// leaves `imm_data` as it was, rdma-core `providers/mlx5/cq.c` `handle_good_req`: 0 stands for
/// "flagged").
fn flag(recv: bool, imm: Option<u32>) -> Option<u32> {
    if recv {
        imm
    } else {
        imm.map(|_| 0)
    }
}

/// Wait for `n` completions of `end` (each successful) within a bound.
fn completions(end: &mut dyn End, n: usize) -> Vec<Cqe> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < n {
        match end.next().expect("poll") {
            Some((id, ok, op, len, imm)) => {
                assert!(ok, "completion of WR {id} failed (opcode {op})");
                got.push((op, len, imm));
            }
            None => {
                assert!(
                    Instant::now() < deadline,
                    "{} of {n} completions in 30 s",
                    got.len()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    got
}

/// Every opcode from `x` to `y`; what each side saw of each. Buffers (each 8 KiB):
/// [0, 1024) what is sent or written, [1024, 2048) receives, [2048, 3072) written, [3072,
/// 4096) read into, 4096 the atomic target, 4104 the atomic result.
#[allow(clippy::too_many_arguments)]
fn opcodes(
    x: &mut dyn End,
    xm: &mlx5_ctx::Mr,
    y: &mut dyn End,
    ym: &mlx5_ctx::Mr,
    y_remote: (u64, u32),
) -> Vec<(Seen, Seen)> {
    let (ya, yk) = y_remote;
    let xs = |off: u64, len: u32| (xm.addr() + off, len, xm.lkey());
    let ys = |off: u64, len: u32| (ym.addr() + off, len, ym.lkey());
    let pattern: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
    // Both buffers as the other direction found them.
    xm.write(0, &[0u8; 8192]).unwrap();
    ym.write(0, &[0u8; 8192]).unwrap();
    xm.write(0, &pattern).unwrap();
    ym.write(4096, &0x0102_0304_0506_0708u64.to_ne_bytes())
        .unwrap();
    let ops = [
        (Opc::Send, 64u32, true),
        (Opc::SendImm(0x1122_3344), 65, true),
        (Opc::Write(ya + 2048, yk), 100, false),
        (Opc::WriteImm(ya + 2048, yk, 0xa1b2_c3d4), 101, true),
        (Opc::Read(ya, yk), 200, false),
        (
            Opc::CmpSwap(ya + 4096, yk, 0x0102_0304_0506_0708, 9),
            8,
            false,
        ),
        (Opc::FetchAdd(ya + 4096, yk, 5), 8, false),
    ];
    let mut seen = Vec::new();
    for (k, (op, len, consumes)) in ops.iter().enumerate() {
        if *consumes {
            y.recv(k as u64, ys(1024, 1024)).unwrap();
        }
        let local = match op {
            Opc::Read(..) => xs(3072, *len),
            Opc::CmpSwap(..) | Opc::FetchAdd(..) => xs(4104, 8),
            _ => xs(0, *len),
        };
        x.post(k as u64, op, local).unwrap();
        let xc = completions(x, 1);
        let yc = completions(y, usize::from(*consumes));
        let xb = xm.read(3072, 1024 + 16).unwrap();
        let yb = ym.read(1024, 4096 - 1024 + 8).unwrap();
        seen.push(((xc, xb), (yc, yb)));
    }
    seen
}

/// The child half of `every_opcode_direct_and_libmlx5` (run by it under the preload library):
/// one QP on this library's data path and one on libmlx5's, on the emulated device, connected
/// to each other; every opcode one way, then the other.
#[test]
#[ignore = "the child half of every_opcode_direct_and_libmlx5, which runs it under the preload library"]
fn every_opcode_child() {
    use mlx5_tools::connecting::{connect_all, VerbsLinks};
    use mlx5_tools::devices::open_devices;
    use mlx5_tools::inline::InlineRequest;
    use mlx5_tools::path::Verbs;
    use mlx5_tools::resources::{Resources, ResourcesCfg, VerbsResources};
    let devs = open_devices("mlx5_0", true, false).expect("mlx5_0 (run under libmlx5sim.so)");
    let mut params = mlx5_connect::ConnectParams::default();
    params.gid_index = devs.gid_index(1, None).unwrap();
    let cfg = ResourcesCfg {
        sq_depth: 16,
        rq_depth: 16,
        buf_len: 8192,
        ..ResourcesCfg::rc()
    };
    let none = InlineRequest {
        bytes: 0,
        explicit: false,
    };
    let (mut a, _) = Resources::with_inline(&devs.local, &cfg, none).unwrap();
    let (b, _) =
        VerbsResources::with_inline(&devs.local, devs.verbs_device().unwrap(), &cfg, none).unwrap();
    let (end_a, end_b) = (a.end(&params), b.end(&params));
    let conn = {
        let mut vb = Verbs::claim(&b).unwrap();
        let mut lb = VerbsLinks::new(&mut vb, None);
        let (mut la, _) = a.links(None).unwrap();
        connect_all(&devs, &end_a, &mut la, Some((&end_b, &mut lb)), None, None).unwrap()
    };
    let rb = conn.conns[0].remote_buffer().unwrap();
    let ra = conn.peer[0].remote_buffer().unwrap();
    let mut vb = VerbsEnd {
        qp: mlx5_hw::verbs::baseline::BaselineQp::new(&b.verbs, b.qps[0].id).unwrap(),
        cq: mlx5_hw::verbs::baseline::BaselineCq::new(&b.verbs, b.cq.id).unwrap(),
    };
    let Resources {
        qps, cq, mr: am, ..
    } = &mut a;
    let mut da = DirectEnd {
        qp: &mut qps[0],
        cq,
    };
    let forth = opcodes(&mut da, am, &mut vb, &b.mr, (rb.addr, rb.rkey));
    let back = opcodes(&mut vb, &b.mr, &mut da, am, (ra.addr, ra.rkey));
    for (k, (f, bk)) in forth.iter().zip(&back).enumerate() {
        let first = |a: &[u8], b: &[u8]| a.iter().zip(b).position(|(x, y)| x != y);
        assert!(
            f == bk,
            "operation {k}: direct → libmlx5 and libmlx5 → direct differ: completions \
             requester {:?} / {:?}, responder {:?} / {:?}; first differing byte of the \
             requester's buffer from 3072: {:?}, of the responder's from 1024: {:?}",
            f.0 .0,
            bk.0 .0,
            f.1 .0,
            bk.1 .0,
            first(&f.0 .1, &bk.0 .1),
            first(&f.1 .1, &bk.1 .1)
        );
    }
    // The completions are what each opcode makes (ibv_wc_opcode; receives: bytes, immediate).
    let want: [(Vec<Cqe>, Vec<Cqe>); 7] = [
        (vec![(0, None, None)], vec![(128, Some(64), None)]),
        (
            vec![(0, None, Some(0))],
            vec![(128, Some(65), Some(0x1122_3344))],
        ),
        (vec![(1, None, None)], vec![]),
        (
            vec![(1, None, Some(0))],
            vec![(129, Some(101), Some(0xa1b2_c3d4))],
        ),
        (vec![(2, None, None)], vec![]),
        (vec![(3, None, None)], vec![]),
        (vec![(4, None, None)], vec![]),
    ];
    for (k, ((xc, _), (yc, _))) in forth.iter().enumerate() {
        assert_eq!((xc, yc), (&want[k].0, &want[k].1), "operation {k}");
    }
    println!("every opcode both ways: the same completions and bytes");
}

/// Every opcode (SEND, SEND with immediate, RDMA WRITE, WRITE with immediate, READ,
/// CMP_SWAP, FETCH_ADD) between a QP this library's direct path drives and one libmlx5 drives
/// (`ibv_post_send`/`ibv_poll_cq`), both on the emulated device in one process, each way:
/// the completions on both sides and the bytes each operation left in both buffers are the same
/// whoever built the WQEs, and the completions are the opcode's.
#[test]
fn every_opcode_direct_and_libmlx5() {
    let _g = crate::heavy();
    let s = Scratch::new("opcodes");
    let exe = std::env::current_exe().expect("this test binary");
    let e = Emu::start(
        &exe,
        &[
            "--exact",
            "mixed_pairs::every_opcode_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ],
        s.0.join("opcodes.report"),
    )
    .finish();
    assert!(e.stdout.contains("every opcode both ways"), "{}", e.stdout);
    let w = wire(&e.report, "opcodes");
    let get = |k: &str| w.iter().find(|(n, _)| n == k).map(|x| x.1).unwrap();
    // Each way: 2 READs ... one of each request executed by each responder.
    assert_eq!(
        (
            get("rx_write_requests"),
            get("rx_read_requests"),
            get("rx_atomic_requests")
        ),
        (4, 2, 4),
        "{w:?}"
    );
}
