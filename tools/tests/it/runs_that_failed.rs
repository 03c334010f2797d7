//! Runs that failed (issue 32, "runs that fail today"), each pinned: what went wrong is named
//! in every test. The timeouts themselves (a 1 GiB message, 64 QPs of them, a `-D 11` run) are
//! pinned by the computed limits and their messages in unit tests (`bw`'s `end.rs`,
//! `mlx5_tools::patience`, `mlx5_tools::pingpong`), not by waiting for them here.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the tool")
}

fn ok(bin: &str, args: &[&str]) -> (String, String) {
    let out = run(bin, args);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}\n{o}\n{e}",
        out.status
    );
    (o, e)
}

/// The numeric rows under the line that contains `header`.
fn rows(out: &str, header: &str) -> Vec<Vec<f64>> {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(header))
        .unwrap_or_else(|| panic!("no {header:?} in:\n{out}"));
    lines[at + 1..]
        .iter()
        .take_while(|l| !l.starts_with("---") && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect()
}

/// `bw send -a` on RC stalled after the first size (its receives were counted as posted
/// when they had been consumed, so the second size's SENDs met RNR NAKs forever); on UC they
/// were dropped, and the UC receiver gave up on a message a fixed half second after the last
/// one, though a debug build was still moving it. `-n 1` keeps the 23 sizes short.
#[test]
fn bw_send_runs_every_size_on_rc_and_uc() {
    let _heavy = super::heavy();
    for conn in ["RC", "UC"] {
        let (out, err) = ok(BW, &["send", "-a", "-n", "1", "-c", conn, "--loopback"]);
        let r = rows(&out, "MsgRate[Mpps]");
        assert_eq!(r.len(), 23, "{conn}: 2 B to 8 MiB: {out}");
        for (i, row) in r.iter().enumerate() {
            assert_eq!(row[0], (2u64 << i) as f64, "{conn}: {out}");
            assert_eq!(row[1], 1.0, "{conn}: {out}");
        }
        assert!(!out.contains("messages arrived"), "{conn}: a loss: {out}");
        assert!(!err.contains("error"), "{conn}: {err}");
    }
}

/// `bw send -c UD`: a server killed mid-run left its client sending for the rest of the run
/// and reporting success (UD sends complete without the peer). The client watches its control
/// connection and stops.
#[test]
fn a_client_whose_server_went_away_fails() {
    let _heavy = super::heavy();
    let mut server = Command::new(BW)
        .args(["send", "-c", "UD", "-s", "64", "-n", "20000000", "-p", "0"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let ready = "Waiting for client to connect on TCP port ";
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let port = loop {
        let l = lines.next().expect("the server's port line").expect("text");
        if let Some(at) = l.find(ready) {
            break l[at + ready.len()..]
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        }
    };
    let mut client = Command::new(BW)
        .args([
            "send",
            "-c",
            "UD",
            "-s",
            "64",
            "-n",
            "20000000",
            "-p",
            &port,
            "127.0.0.1",
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    // Let the run start (the banner is out), then kill the server.
    let mut out = BufReader::new(client.stdout.take().expect("stdout")).lines();
    for l in out.by_ref() {
        if l.expect("text").contains("#bytes") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    server.kill().expect("kill the server");
    let _ = server.wait();
    let killed = Instant::now();
    let status = loop {
        if let Some(st) = client.try_wait().expect("wait") {
            break st;
        }
        if killed.elapsed() > Duration::from_secs(30) {
            let _ = client.kill();
            panic!("the client still sends 30 s after its server went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().expect("stderr"), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("closed the control connection during the run"),
        "{err}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "noticed only after {:?}",
        killed.elapsed()
    );
}

/// `bw`'s `-I` defaulted to 220/236/188 bytes where perftest's bandwidth tests use 0, so small
/// messages went inline only here; now the default is perftest's, and `-I` asks for more.
#[test]
fn bw_sends_nothing_inline_unless_asked() {
    let (out, _) = ok(BW, &["write", "--loopback", "-n", "20", "-s", "64"]);
    assert!(out.contains("Max inline data: 0[B]"), "{out}");
    let (out, _) = ok(
        BW,
        &["write", "--loopback", "-n", "20", "-s", "64", "-I", "64"],
    );
    assert!(out.contains("Max inline data: 64[B]"), "{out}");
    // lat keeps perftest's latency defaults.
    let (out, _) = ok(LAT, &["write", "--loopback", "-n", "20"]);
    assert!(out.contains("Max inline data: 220[B]"), "{out}");
}

/// `-s` takes perftest's forms: `0x` hexadecimal, `K` and `M` suffixes.
#[test]
fn sizes_in_perftests_forms() {
    let (out, _) = ok(LAT, &["write", "--loopback", "-n", "10", "-s", "0x40"]);
    assert_eq!(rows(&out, "t_typical[usec]")[0][0], 64.0, "{out}");
    let (out, _) = ok(BW, &["write", "--loopback", "-n", "20", "-s", "1K"]);
    assert_eq!(rows(&out, "MsgRate[Mpps]")[0][0], 1024.0, "{out}");
    let e = run(LAT, &["write", "--loopback", "-s", "010"]);
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("octal"));
}

/// `-D` with `-n` was refused; as perftest's, the duration wins and the run says so.
#[test]
fn a_duration_wins_over_iterations() {
    let (out, err) = ok(
        LAT,
        &["write", "--loopback", "-D", "2", "-f", "0", "-n", "5"],
    );
    assert!(
        err.contains("-n 5 is ignored: -D 2 runs for a time"),
        "{err}"
    );
    let r = rows(&out, "tps average");
    assert!(r[0][1] > 5.0, "more iterations than -n: {out}");
}

/// `t_typical` and `p50` disagreed for even sample counts (the median of perftest's
/// `get_median` against the sample at ⌈n/2⌉): both are the median now.
#[test]
fn t_typical_is_p50() {
    let (out, _) = ok(LAT, &["write", "--loopback", "-n", "40", "-s", "8"]);
    let typical = rows(&out, "t_typical[usec]")[0][4];
    let line = out
        .lines()
        .find(|l| l.contains("percentiles[usec]"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains(&format!("p50={typical:.2}")),
        "{typical}: {line}"
    );
}

/// `rc_pingpong -s 4096` against a `-s 64` peer said "the message arrived damaged"; both ends
/// name the mismatch now.
#[test]
fn rc_pingpong_names_a_size_mismatch() {
    let _heavy = super::heavy();
    let example = env!("CARGO_BIN_EXE_rc_pingpong");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port().to_string())
        .unwrap();
    let server = Command::new(example)
        .args(["-p", &port, "-s", "64", "-n", "3"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new(example)
        .args(["-p", &port, "-s", "4096", "-n", "3", "127.0.0.1"])
        .env_remove("RUST_LOG")
        .output()
        .expect("run the client");
    let s = server.wait_with_output().expect("the server ends");
    let (se, ce) = (
        String::from_utf8_lossy(&s.stderr),
        String::from_utf8_lossy(&client.stderr),
    );
    assert!(
        se.contains("the peer's message is longer than this side's -s 64"),
        "server: {se}"
    );
    assert!(
        ce.contains("refused this side's message of 4096 bytes") && ce.contains("same -s"),
        "client: {ce}"
    );
}
