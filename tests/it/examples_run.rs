//! Every example runs to completion on the software ConnectX and checks its own results (each
//! exits non-zero on any wrong byte, unexpected completion or driver bug); here we run the
//! example binaries themselves and check their exit status and key lines (and those of the
//! bench program `thread_scaling`, which has a `main` of its own).
//!
//! `cargo test` builds the examples next to the tests (`target/<profile>/examples/`); when a
//! test is run alone and the example is not there yet, it is built with cargo first.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    if BENCH_PROGRAMS.contains(&name) {
        return bench(name);
    }
    mlx5_testkit::process::example(
        env!("CARGO"),
        env!("CARGO_MANIFEST_DIR"),
        "mlx5-direct",
        name,
    )
}

/// Programs with a `main` of their own that are bench targets, not examples (they build the
/// data path over RAM rings, with `unsafe` no example has): run here like the examples.
const BENCH_PROGRAMS: &[&str] = &["thread_scaling"];

/// The bench program `name` of this package, built by cargo in the profile of this test (a
/// no-op when it is fresh); cargo's artifact report names the executable, whose file name
/// carries a hash (`target/<profile>/deps/NAME-HASH`).
fn bench(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let release = exe
        .parent()
        .and_then(|d| d.parent())
        .is_some_and(|p| p.ends_with("release"));
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "mlx5-direct", "--bench", name])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if release {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "building the {name} bench failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let path = &l[at..at + l[at..].find('"')?];
            path.contains(name).then(|| PathBuf::from(path))
        })
        .unwrap_or_else(|| panic!("cargo reported no {name} executable"))
}

/// How long one example run may take before the test kills it and fails (they take well
/// under a second; a debug build on a loaded machine a few).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Run example `name` with `args` and the extra environment `env` (`RUST_LOG` is cleared
/// first, so a developer's setting does not change what the example prints), killing it if it
/// has not ended within [`RUN_TIMEOUT`]: a hang fails the test instead of stalling the suite.
fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(example(name))
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start example");
    // Read both pipes while waiting, so a chatty example cannot block on a full pipe.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for example") {
            break st;
        }
        if start.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("example {name} {args:?} still running after {RUN_TIMEOUT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

fn run_ok(name: &str, args: &[&str]) -> String {
    let out = run(name, args, &[]);
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
    let out = run("quickstart", &[], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    for op in ["WRITE", "READ", "SEND", "CAS", "FAA"] {
        assert!(
            stdout.contains(&format!("  {op} ")),
            "{op} missing:\n{stdout}"
        );
    }
    assert_eq!(stdout.matches("         ok: ").count(), 5, "{stdout}");
    for line in [
        "B's memory reads \"hello from A, by RDMA WRITE\"",
        "A's memory reads \"B's data, fetched by READ\"",
        "IBV_WC_RECV on B: wr_id 7, 4 bytes \"ping\", imm 0xc0ffee",
        "original value 0, B's counter now 42",
        "original value 42, B's counter now 50",
        "done: 5 operations, every result checked; the software ConnectX saw no driver bug",
    ] {
        assert!(stdout.contains(line), "{line:?} missing:\n{stdout}");
    }
    // Without RUST_LOG nothing is logged.
    assert!(stderr.is_empty(), "{stderr}");
}

/// The value of `key=` in a log line (`key="x"` or `key=x`), quotes removed.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!(" {key}=");
    let rest = &line[line.find(&pat)? + pat.len()..];
    Some(match rest.strip_prefix('"') {
        Some(q) => &q[..q.find('"')?],
        None => rest.split(' ').next()?,
    })
}

/// `RUST_LOG=mlx5=info` shows one line per QP transition with the old and new state, the QPN,
/// the destination QPN, the PSNs and the path; the PSNs logged are the ones the quickstart
/// printed.
#[test]
fn quickstart_logs_every_transition_with_rust_log() {
    let out = run("quickstart", &[], &[("RUST_LOG", "mlx5=info")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("mlx5_hw::transition") && l.contains("QP modified"))
        .collect();
    // Reset → Init → RTR → RTS on each of the two QPs.
    assert_eq!(lines.len(), 6, "{stderr}");
    let mut steps = Vec::new();
    for l in &lines {
        for key in [
            "old_state",
            "new_state",
            "qpn",
            "dest_qpn",
            "sq_psn",
            "rq_psn",
            "path_mtu",
            "dgid",
        ] {
            assert!(field(l, key).is_some(), "no {key} in {l:?}");
        }
        steps.push((
            field(l, "old_state").unwrap(),
            field(l, "new_state").unwrap(),
        ));
    }
    for step in [("RESET", "INIT"), ("INIT", "RTR"), ("RTR", "RTS")] {
        assert_eq!(steps.iter().filter(|s| **s == step).count(), 2, "{steps:?}");
    }
    // The RTS lines carry the connection: the peer's QPN, this side's PSN, the peer's PSN
    // as the expected one, and the peer's GID as the path.
    let printed = stdout
        .lines()
        .find(|l| l.contains("connect Reset → Init → RTR → RTS"))
        .unwrap_or_else(|| panic!("no connect line:\n{stdout}"));
    let psns: Vec<u32> = printed
        .match_indices("(PSN 0x")
        .map(|(at, m)| {
            let hex: String = printed[at + m.len()..]
                .chars()
                .take_while(char::is_ascii_hexdigit)
                .collect();
            u32::from_str_radix(&hex, 16).expect("hex PSN")
        })
        .collect();
    assert_eq!(psns.len(), 2, "{printed}");
    let mut rts: Vec<(u32, u32)> = lines
        .iter()
        .filter(|l| field(l, "new_state") == Some("RTS"))
        .map(|l| {
            assert_ne!(field(l, "dest_qpn"), Some("0"), "{l}");
            assert!(
                field(l, "dgid")
                    .is_some_and(|g| g.ends_with(":0a00:0001") || g.ends_with(":0a00:0002")),
                "{l}"
            );
            let n = |k| field(l, k).and_then(|v| v.parse().ok()).expect("a number");
            (n("sq_psn"), n("rq_psn"))
        })
        .collect();
    rts.sort_unstable();
    let mut want = vec![(psns[0], psns[1]), (psns[1], psns[0])];
    want.sort_unstable();
    assert_eq!(rts, want, "{stderr}");
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
    // Client 3's bad rkey: its pair recovered on the shared CQ and SRQ; the drain gave back
    // the server QP's 10 requests of that round (their receives into the pool again, the
    // requests sent again) and left the other clients' for the server.
    assert!(
        out.contains(
            "recovery  client 3's WRITE with a wrong rkey failed with IBV_WC_REM_ACCESS_ERR"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "the drain returned 10 SRQ receive(s) of the server QP and left the other clients' \
             requests in the shared CQ; 10 request(s) to send again"
        ),
        "{out}"
    );
    assert!(
        out.contains("(250 receives put back into the pool, all 64 posted at the end)"),
        "{out}"
    );
}

#[test]
fn srq_server_single_client() {
    let out = run_ok("srq_server", &["1", "5"]);
    assert!(out.contains("1 client on 1 device (10.0.0.2)"), "{out}");
    assert!(out.contains("done: 5 requests"), "{out}");
    assert!(out.contains("one pair recovered on the shared CQ"), "{out}");
}

#[test]
fn hello_write() {
    let out = run_ok("hello_write", &[]);
    assert!(out.contains("B's memory reads \"hello\""), "{out}");
}

/// The preload library that plays the kernel side of an mlx5 device `mlx5_0` on the software
/// ConnectX (uverbs/), for an example to run through unmodified libibverbs + libmlx5.
fn through_rdma_core() -> [(&'static str, String); 1] {
    let lib = mlx5_testkit::process::preload_library(env!("CARGO"));
    [("LD_PRELOAD", lib.display().to_string())]
}

fn run_through_rdma_core(name: &str, args: &[&str]) -> Output {
    let env = through_rdma_core();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run(name, args, &env)
}

/// The quickstart, hello_write and ud_multicast with `-d mlx5_0`: contexts opened through libibverbs and
/// libmlx5 (the objects created by `ibv_*`, the rings from `mlx5dv_init_obj`), our data path on
/// the rings libmlx5 laid out, on the software ConnectX behind the preload library; the
/// library reports any driver bug it saw on standard error at exit.
#[test]
fn examples_through_rdma_core() {
    let out = run_through_rdma_core("quickstart", &["-d", "mlx5_0"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(
        stdout.contains("two RC QPs on mlx5_0") && stdout.contains("done: 5 operations on mlx5_0"),
        "{stdout}"
    );
    for op in ["WRITE", "READ", "SEND", "CAS", "FAA"] {
        assert!(stdout.contains(&format!("  {op} ")), "{op}:\n{stdout}");
    }
    assert!(!stderr.contains("driver bug"), "{stderr}");
    let out = run_through_rdma_core("hello_write", &["-d", "mlx5_0"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(
        stdout.contains("IBV_WC_SUCCESS (mlx5_0 → mlx5_0): B's memory reads \"hello\""),
        "{stdout}"
    );
    assert!(!stderr.contains("driver bug"), "{stderr}");
    // UD multicast: attach, fan-out to the QPs of two contexts, detach.
    let out = run_through_rdma_core("ud_multicast", &["-d", "mlx5_0"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("ud_multicast: OK"), "{stdout}");
    assert!(!stderr.contains("driver bug"), "{stderr}");
    // A device that is not there: a clear error naming it (status 1), not a panic.
    for name in ["quickstart", "hello_write"] {
        let out = run_through_rdma_core(name, &["-d", "mlx5_7"]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {}: {e}", out.status);
        assert!(
            e.contains("mlx5_7") && !e.contains("panicked"),
            "{name}: {e}"
        );
    }
}

#[test]
fn sim_speed() {
    let out = run_ok("sim_speed", &["3000"]);
    assert!(out.contains("3000 RC 8-byte RDMA WRITEs"), "{out}");
    assert!(out.contains("messages/s"), "{out}");
}

/// The thread benchmark runs 1 thread, then the threads asked for, and prints each run's
/// rate per thread and their ratio (a positive number; its value is the machine's).
#[test]
fn thread_scaling() {
    let out = run_ok("thread_scaling", &["2", "--msgs", "20000"]);
    assert!(out.contains("1 thread: "), "{out}");
    assert!(out.contains("2 threads: "), "{out}");
    let ratio = out
        .lines()
        .find_map(|l| l.strip_prefix("2 threads / 1 thread, per thread: "))
        .and_then(|r| r.trim().parse::<f64>().ok());
    assert!(ratio.is_some_and(|r| r > 0.0), "{out}");
    let out = run_ok("thread_scaling", &["1", "--msgs", "1000"]);
    assert!(
        out.contains("1 thread, again / 1 thread, per thread: "),
        "{out}"
    );
}

/// Bad arguments to an example are a usage error (exit status 2) with a message on stderr,
/// never a panic (101), an abort (134), a crash (139) or a hang (each run under a timeout).
#[test]
fn example_argument_mistakes_are_clear_errors() {
    let cases: &[(&str, &[&str], i32, &str)] = &[
        ("quickstart", &["extra"], 2, "unexpected argument 'extra'"),
        (
            "quickstart",
            &["--verbose"],
            2,
            "unexpected argument '--verbose'",
        ),
        ("error_recovery", &["1"], 2, "unexpected argument '1'"),
        ("srq_server", &["0", "5"], 2, "0 is not in 1..=32"),
        ("srq_server", &["33"], 2, "33 is not in 1..=32"),
        ("srq_server", &["4", "0"], 2, "0 is not in 1..=10000"),
        (
            "srq_server",
            &["4", "10001"],
            2,
            "10001 is not in 1..=10000",
        ),
        (
            "srq_server",
            &["many"],
            2,
            "invalid value 'many' for '[CLIENTS]'",
        ),
        ("srq_server", &["-3"], 2, "unexpected argument '-3'"),
        ("srq_server", &["1", "2", "3"], 2, "unexpected argument '3'"),
        ("hello_write", &["5"], 2, "unexpected argument '5'"),
        ("sim_speed", &["0"], 2, "0 is not in 1..=1000000000"),
        ("sim_speed", &["1e6"], 2, "invalid value '1e6' for '[N]'"),
        ("sim_speed", &["99999999999999999999"], 2, "invalid value"),
        ("sim_speed", &["--n", "5"], 2, "unexpected argument '--n'"),
        ("xrc_mesh", &["1"], 2, "1 is not in 2..=16"),
        ("xrc_mesh", &["4", "-7"], 2, "unexpected argument '-7'"),
        ("dc_mesh", &["1"], 2, "1 is not in 2..=32"),
        ("dc_mesh", &["4", "9"], 2, "9 is not in 1..=8"),
        (
            "dc_mesh",
            &["4", "2", "2", "--depth", "4"],
            2,
            "4 is not in 8..=1024",
        ),
        ("thread_scaling", &["0"], 2, "0 is not in 1..=64"),
        ("thread_scaling", &["two"], 2, "invalid value 'two'"),
        ("ud_multicast", &["extra"], 2, "extra"),
        #[cfg(feature = "tokio")]
        ("async_server", &["-c", "0"], 2, "not a number in range"),
        #[cfg(feature = "tokio")]
        ("async_server", &["-n"], 2, "-n needs a count"),
        #[cfg(feature = "tokio")]
        ("async_server", &["--loopback", "host"], 2, "no HOST"),
    ];
    for &(name, args, code, needle) in cases {
        let out = run(name, args, &[]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name} {args:?}: {}: {e}",
            out.status
        );
        assert!(
            e.contains(needle),
            "{name} {args:?}: {needle:?} not in {e:?}"
        );
        assert!(!e.contains("panicked"), "{name} {args:?}: {e}");
    }
    // `--help` says what each one does and succeeds.
    for name in [
        "hello_write",
        "quickstart",
        "error_recovery",
        "srq_server",
        "sim_speed",
    ] {
        let out = run(name, &["--help"], &[]);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && help.contains(&format!("Usage: {name}")),
            "{help}"
        );
    }
}

#[test]
fn ud_multicast() {
    let out = run_ok("ud_multicast", &[]);
    assert!(
        out.contains("receiver 3 (device B) detached after 5 datagrams"),
        "{out}"
    );
    for (r, dev, n) in [(1, 'A', 10), (2, 'B', 10), (3, 'B', 5)] {
        let line = format!("receiver {r} (device {dev}): {n} datagrams, each once, checked");
        assert!(out.contains(&line), "{line:?} missing:\n{out}");
    }
    assert!(out.contains("ud_multicast: OK"), "{out}");
}

#[test]
fn xrc_mesh() {
    let out = run_ok("xrc_mesh", &[]);
    assert!(
        out.contains("RC : 240 QPs = N·P·(N·P−1); 240 messages checked"),
        "{out}"
    );
    assert!(out.contains("XRC: 128 QPs = 64 initiators (N·P·N) + 64 targets, and 16 XRC SRQs; 240 messages checked"), "{out}");
    assert!(out.contains("xrc_mesh: OK"), "{out}");
}

#[test]
fn dc_mesh() {
    let out = run_ok("dc_mesh", &["6", "2", "2"]);
    assert!(
        out.contains("RC            5         30") && out.contains("60 messages checked"),
        "{out}"
    );
    assert!(
        out.contains("DC            3         18")
            && out.contains("2 DCI(s) + 1 DCT + 1 SRQ per node"),
        "{out}"
    );
    assert!(out.contains("DC uses 1.7× fewer QPs"), "{out}");
    assert!(out.contains("dc_mesh: OK"), "{out}");
}

/// The tokio server serves several clients event-driven, every CQ on one completion channel,
/// and checks every reply (issue: completion channels and tokio).
#[cfg(feature = "tokio")]
#[test]
fn async_server_loopback_checks_every_reply() {
    let out = run_ok("async_server", &["--loopback", "-c", "3", "-n", "50"]);
    assert!(
        out.contains("150 replies checked (3 clients × 50 requests)"),
        "{out}"
    );
}

/// The examples use only the library's public API (README): the facade `mlx5_direct` and no
/// other crate of the workspace, and no `unsafe` (outside comments). Programs that need more
/// are tools (`tools/src/bin/`) or bench targets (`benches/`).
#[test]
fn examples_use_only_the_public_api() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let internal = [
        "mlx5_wqe",
        "mlx5_cq",
        "mlx5_hw",
        "mlx5dv_sys",
        "mlx5_qp",
        "mlx5_sim",
        "mlx5_ctx",
        "mlx5_connect",
        "mlx5_decode",
        "mlx5_tools",
        "mlx5_ram_rings",
        "mlx5_testkit",
    ];
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(&p).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let at = format!("{}:{}", p.display(), i + 1);
            for c in internal {
                let named = code.match_indices(c).any(|(k, _)| {
                    !code[..k].ends_with(|ch: char| ch == '_' || ch.is_alphanumeric())
                        && code[k + c.len()..].starts_with("::")
                        || code.trim_start().starts_with(&format!("use {c}"))
                });
                assert!(!named, "{at}: uses {c}, not the public API: {line}");
            }
            let words: Vec<&str> = code
                .split(|ch: char| !(ch == '_' || ch.is_alphanumeric()))
                .collect();
            assert!(
                !words.contains(&"unsafe"),
                "{at}: unsafe in an example: {line}"
            );
        }
    }
    assert!(n >= 8, "only {n} examples found");
}
