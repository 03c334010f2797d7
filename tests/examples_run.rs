//! Every example runs to completion on the software ConnectX and checks its own results (each
//! exits non-zero on any wrong byte, unexpected completion or driver bug); here we run the
//! example binaries themselves and check their exit status and key lines.
//!
//! `cargo test` builds the examples next to the tests (`target/<profile>/examples/`); when a
//! test is run alone and the example is not there yet, it is built with cargo first.

use std::path::PathBuf;
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("examples").join(name);
    if !bin.is_file() {
        let release = profile_dir.ends_with("release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "mlx5-direct", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if release {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo");
        assert!(st.success(), "building example {name} failed");
    }
    bin
}

fn run_ok(name: &str, args: &[&str]) -> String {
    let out: Output = Command::new(example(name))
        .args(args)
        .output()
        .expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn quickstart() {
    let out = run_ok("quickstart", &[]);
    for op in ["WRITE", "READ", "SEND", "CAS", "FAA"] {
        assert!(out.contains(&format!("  {op} ")), "{op} missing:\n{out}");
    }
    assert_eq!(out.matches("         ok: ").count(), 5, "{out}");
    assert!(
        out.contains("original value 42, B's counter now 50"),
        "{out}"
    );
    assert!(out.contains("imm 0xc0ffee"), "{out}");
}

#[test]
fn error_recovery() {
    let out = run_ok("error_recovery", &[]);
    assert!(out.contains("IBV_WC_RETRY_EXC_ERR"), "{out}");
    assert!(out.contains("generation 1"), "{out}");
    assert!(out.contains("all 16 records verified"), "{out}");
}

#[test]
fn rc_pingpong_loopback_over_tcp_exchange() {
    let out = run_ok("rc_pingpong", &["--loopback", "-n", "50", "-s", "1024"]);
    assert!(out.contains("server: remote address"), "{out}");
    assert!(out.contains("client: remote address"), "{out}");
    assert!(out.contains("50 iters in"), "{out}");
}

#[test]
fn rc_pingpong_without_a_peer_is_a_clear_error() {
    let out = Command::new(example("rc_pingpong"))
        .args(["-n", "1"])
        .output()
        .expect("run example");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--loopback") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn ud_pingpong() {
    let out = run_ok("ud_pingpong", &["-n", "20", "-s", "256"]);
    assert!(out.contains("40 datagrams checked"), "{out}");
}

#[test]
fn srq_server() {
    let out = run_ok("srq_server", &["5", "6"]);
    assert_eq!(out.matches("6 answers checked").count(), 5, "{out}");
    assert!(out.contains("done: 30 requests through one SRQ"), "{out}");
}

#[test]
fn sim_speed() {
    let out = run_ok("sim_speed", &["3000"]);
    assert!(out.contains("3000 RC 8-byte RDMA WRITEs"), "{out}");
    assert!(out.contains("messages/s"), "{out}");
}
