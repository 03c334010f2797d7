//! The ping-pong tools speak `ibv_rc_pingpong` / `ibv_ud_pingpong`: they run in one process
//! (`--loopback`) and as a server and a client process (each with its own software ConnectX),
//! print `ibv_rc_pingpong`'s address and result lines, take its flags, answer `--help` on
//! standard output with status 0, and end every bad command line — overflowing, zero,
//! negative or non-numeric numbers, unknown flags, a client with no server, a server port in
//! use — with status 1 or 2 and a message, under a timeout.
//!
//! They are binaries of this crate (`src/bin/rc_pingpong.rs`, `src/bin/ud_pingpong.rs`), which
//! cargo builds for these tests.

use mlx5_testkit::process;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// The ping-pong binary `name` of this crate (cargo builds a package's binaries for its
/// integration tests).
fn program(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "rc_pingpong" => env!("CARGO_BIN_EXE_rc_pingpong"),
        "ud_pingpong" => env!("CARGO_BIN_EXE_ud_pingpong"),
        other => panic!("no ping-pong binary {other}"),
    })
}

fn run(name: &str, args: &[&str]) -> Output {
    Command::new(program(name))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the program")
}

fn run_ok(name: &str, args: &[&str]) -> String {
    let out = run(name, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `ibv_rc_pingpong`'s result lines for `iters` exchanges of `size` bytes.
fn check_result_lines(out: &str, size: u64, iters: u64) {
    let bytes = format!("{} bytes in ", 2 * size * iters);
    let l = out
        .lines()
        .find(|l| l.starts_with(&bytes))
        .unwrap_or_else(|| panic!("no {bytes:?} line:\n{out}"));
    assert!(l.ends_with(" Mbit/sec") && l.contains(" seconds = "), "{l}");
    let l = out
        .lines()
        .find(|l| l.starts_with(&format!("{iters} iters in ")))
        .unwrap_or_else(|| panic!("no iters line:\n{out}"));
    assert!(l.ends_with(" usec/iter"), "{l}");
}

#[test]
fn rc_pingpong_loopback_over_tcp_exchange() {
    let out = run_ok(
        "rc_pingpong",
        &["--loopback", "-n", "50", "-s", "1024", "-r", "8"],
    );
    for who in ["server", "client"] {
        assert!(
            out.contains(&format!("[{who}]   remote address: LID 0x0000, QPN 0x")),
            "{out}"
        );
        let line = format!("[{who}]   50 messages of 1024 bytes received, every one checked");
        assert!(out.contains(&line), "{line:?} missing:\n{out}");
    }
    check_result_lines(&out, 1024, 50);
}

#[test]
fn ud_pingpong_loopback_defaults_to_the_path_mtu() {
    // ibv_ud_pingpong's 2048 bytes do not fit the software ConnectX's 1024-byte MTU.
    let out = run_ok("ud_pingpong", &["--loopback", "-n", "20"]);
    for who in ["server", "client"] {
        assert!(
            out.contains(&format!("[{who}]   20 datagrams of 1024 bytes received")),
            "{out}"
        );
    }
    check_result_lines(&out, 1024, 20);
}

/// The server and the client of a ping-pong tool as two processes, each with its own
/// software ConnectX (see [`process::two_processes`]).
fn two_processes(name: &str, args: &[&str]) -> (String, String) {
    process::two_processes(
        &program(name),
        args,
        "server waiting for a client on TCP port ",
        Duration::from_secs(60),
    )
}

#[test]
fn rc_pingpong_server_and_client_processes() {
    let (s, c) = two_processes("rc_pingpong", &["-n", "100", "-s", "3000", "-m", "2048"]);
    for (out, peer_ip) in [(&s, "10.0.0.2"), (&c, "10.0.0.1")] {
        // Each process has its own device, and learnt the other's UDP address.
        assert_eq!(out.matches("(software ConnectX").count(), 1, "{out}");
        assert!(
            out.contains(&format!(
                "peer software ConnectX {peer_ip} at UDP 127.0.0.1:"
            )),
            "{out}"
        );
        let line = "  100 messages of 3000 bytes received, every one checked byte";
        assert!(out.contains(line), "{line:?} missing:\n{out}");
        check_result_lines(out, 3000, 100);
    }
    // The QPNs and PSNs one side announced are the ones the other side used.
    let addr = |out: &str, which: &str| -> String {
        let l = out
            .lines()
            .find(|l| l.contains(which))
            .unwrap_or_else(|| panic!("no {which} in {out}"));
        l[l.find("QPN").unwrap()..].to_string()
    };
    assert_eq!(addr(&s, "local address"), addr(&c, "remote address"));
    assert_eq!(addr(&c, "local address"), addr(&s, "remote address"));
}

#[test]
fn ud_pingpong_server_and_client_processes() {
    let (s, c) = two_processes("ud_pingpong", &["-n", "60", "-s", "700"]);
    for out in [&s, &c] {
        let line = "  60 datagrams of 700 bytes received from QPN 0x";
        assert!(out.contains(line), "{line:?} missing:\n{out}");
        assert!(
            out.contains("every one checked byte for byte (60 with a GRH in front)"),
            "{out}"
        );
        check_result_lines(out, 700, 60);
    }
}

#[test]
fn help_is_on_stdout_with_status_0_and_names_ibv_pingpongs_flags() {
    for name in ["rc_pingpong", "ud_pingpong"] {
        let out = run(name, &["--help"]);
        assert_eq!(out.status.code(), Some(0), "{name}");
        let help = String::from_utf8_lossy(&out.stdout);
        for f in [
            "-p,", "-d,", "-i,", "-g,", "-s,", "-m,", "-r,", "-n,", "-e,", "-l,",
        ] {
            assert!(help.contains(f), "{name}: no {f} in\n{help}");
        }
        for d in ["[default: 18515]", "[default: 500]", "[default: 1000]"] {
            assert!(help.contains(d), "{name}: no {d} in\n{help}");
        }
        assert!(out.stderr.is_empty());
    }
}

#[test]
fn pingpong_mistakes_are_clear_errors() {
    let err = |name: &str, args: &[&str], code: i32, needle: &str| {
        let out = run(name, args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {e}");
        assert!(
            e.contains(needle) && !e.contains("panicked"),
            "{args:?}: {e}"
        );
    };
    err(
        "rc_pingpong",
        &["--loopback", "192.0.2.1"],
        2,
        "give no server address",
    );
    err(
        "ud_pingpong",
        &["--loopback", "-s", "2048"],
        2,
        "at most one MTU",
    );
    // Every build opens verbs devices through rdma-core: no mlx5_0 here is a clear error.
    err(
        "rc_pingpong",
        &["-d", "mlx5_0", "--loopback"],
        1,
        "device mlx5_0: ",
    );
}

/// `name args` ends within `limit` with 1 or 2 and a message.
fn bounded(name: &str, args: &[String], limit: Duration) -> std::result::Result<(), String> {
    let (code, e) = process::run_bounded(&program(name), args, limit)?;
    match code {
        Some(1 | 2) if !e.trim().is_empty() && !e.contains("panicked") => Ok(()),
        code => Err(format!("{name} {args:?}: exit {code:?}: {e}")),
    }
}

#[test]
fn bad_arguments_never_crash_the_pingpong_tools() {
    let taken = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = taken.local_addr().unwrap().port().to_string();
    let free = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port().to_string())
        .unwrap();
    let mut table: Vec<(&str, Vec<String>)> = Vec::new();
    for name in ["rc_pingpong", "ud_pingpong"] {
        for a in [
            &["--loopback", "-n", "18446744073709551615"][..],
            &["--loopback", "-n", "18446744073709551616"],
            &["--loopback", "-n", "0"],
            &["--loopback", "-n", "-3"],
            &["--loopback", "-n", "ten"],
            &["--loopback", "-s", "0"],
            &["--loopback", "-s", "1073741825"],
            &["--loopback", "-s", "99999999999999999999999"],
            &["--loopback", "-r", "0"],
            &["--loopback", "-r", "4000000000"],
            &["--loopback", "-m", "3000"],
            &["--loopback", "-l", "16"],
            &["--loopback", "-i", "3"],
            &["--loopback", "-g", "9"],
            &["--loopback", "-p", "99999"],
            &["--loopback", "--frobnicate"],
            &["-d", "no_such_device", "--loopback"],
            &["-p", &port],
            &["-p", &free, "127.0.0.1"],
            &["-p", "1", "no-such-host.invalid"],
        ] {
            table.push((name, a.iter().map(|s| s.to_string()).collect()));
        }
    }
    let mut failures = Vec::new();
    for chunk in table.chunks(4) {
        let runs: Vec<_> = chunk
            .iter()
            .cloned()
            .map(|(n, a)| std::thread::spawn(move || bounded(n, &a, Duration::from_secs(40))))
            .collect();
        for r in runs {
            if let Err(e) = r.join().expect("a run panicked") {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "unclean exits:\n{}",
        failures.join("\n")
    );
    drop(taken);
}
