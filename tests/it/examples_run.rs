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
    // Each step, in order.
    let steps = [
        "1 connect    RC QPs A 0x",
        "2 traffic    records 0..6 written to B, all completed",
        "3 fault      link A ⇄ B drops every frame (loss rate 1.0",
        "completed with IBV_WC_RETRY_EXC_ERR (syndrome TRANSPORT_RETRY_EXC_ERR)",
        "A's QP is in ERR; records 6..10 never reached B",
        "5 rebuild    both QPs Error → Reset → Init → RTR → RTS, generation 1",
        "1 × IBV_WC_RETRY_EXC_ERR, 3 × IBV_WC_WR_FLUSH_ERR",
        "6 heal       fault removed",
        "7 resume     records 6..16 written",
        "all 16 records verified in B's memory",
        "done: recovered from RETRY_EXC_ERR with no data lost and no driver bug",
    ];
    let mut from = 0;
    for s in steps {
        let at = out[from..]
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} missing or out of order:\n{out}"));
        from += at + s.len();
    }
    // The loss really was injected: retransmissions timed out and frames were dropped.
    let n = |tag: &str| -> u64 {
        let at = out
            .find(tag)
            .unwrap_or_else(|| panic!("no {tag:?}:\n{out}"))
            + tag.len();
        let digits: String = out[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("no number after {tag:?}:\n{out}"))
    };
    assert_eq!(
        n("ACK timeouts counted by A: "),
        4,
        "retry_cnt 3: 1 + 3 timeouts"
    );
    assert!(n("frames dropped by the fault: ") >= 4, "{out}");
}

#[test]
fn srq_server() {
    // 6 clients on 3 devices, 40 requests each: 240 requests through a pool of 64 receives.
    let out = run_ok("srq_server", &["6", "40"]);
    assert!(
        out.contains("6 clients on 3 devices (10.0.0.2, 10.0.0.3, 10.0.0.4)"),
        "{out}"
    );
    for c in 0..6 {
        let ip = 2 + c % 3;
        let line = format!("client  {c} on 10.0.0.{ip}: QPN 0x");
        assert!(out.contains(&line), "{line:?} missing:\n{out}");
    }
    // Each client line says every one of its requests was served and checked, and every
    // answer checked.
    assert_eq!(
        out.matches("40 requests served from the SRQ, 40 answers checked")
            .count(),
        6,
        "{out}"
    );
    assert!(
        out.contains("done: 240 requests through one SRQ of 64 receives"),
        "{out}"
    );
    assert!(
        out.contains("(240 receives put back into the pool)"),
        "{out}"
    );
}

#[test]
fn srq_server_single_client_and_bad_arguments() {
    let out = run_ok("srq_server", &["1", "5"]);
    assert!(out.contains("1 client on 1 device (10.0.0.2)"), "{out}");
    assert!(out.contains("done: 5 requests"), "{out}");
    let bad = Command::new(example("srq_server"))
        .args(["0", "5"])
        .output()
        .expect("run example");
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn sim_speed() {
    let out = run_ok("sim_speed", &["3000"]);
    assert!(out.contains("3000 RC 8-byte RDMA WRITEs"), "{out}");
    assert!(out.contains("messages/s"), "{out}");
}
