//! No input crashes a tool: `lat`, `bw` and `wqe-dump` are run with a table of bad arguments —
//! overflowing numbers, zero, negative, non-numeric, missing files, unwritable paths, unknown
//! flags, a client with no server, a server port in use — and each run must end, under a
//! timeout, with exit status 1 or 2 and a message on standard error: never 101 (a panic), 134
//! (an abort), 139 (a segfault), another signal, or a hang.

use std::net::TcpListener;
use std::time::Duration;

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");
const WQE_DUMP: &str = env!("CARGO_BIN_EXE_wqe-dump");

/// Run `bin args` with no standard input for at most `limit`; the exit code (`None`: killed by
/// a signal) and standard error. Panics when it is still running at the limit.
pub fn run_bounded(bin: &str, args: &[String], limit: Duration) -> (Option<i32>, String) {
    mlx5_testkit::process::run_bounded(std::path::Path::new(bin), args, limit)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every case of `table` (program, arguments) ends with 1 or 2 and a message, run a few at a
/// time; `limit` bounds each run.
pub fn check_table(table: Vec<(&'static str, Vec<String>)>, limit: Duration) {
    let mut failures = Vec::new();
    for chunk in table.chunks(4) {
        let runs: Vec<_> = chunk
            .iter()
            .cloned()
            .map(|(bin, args)| {
                std::thread::spawn(move || {
                    let (code, err) = run_bounded(bin, &args, limit);
                    (bin, args, code, err)
                })
            })
            .collect();
        for r in runs {
            let (bin, args, code, err) = r.join().expect("a run panicked");
            let name = bin.rsplit('/').next().unwrap_or(bin);
            let clean = matches!(code, Some(1) | Some(2))
                && !err.trim().is_empty()
                && !err.contains("panicked");
            if !clean {
                failures.push(format!("{name} {args:?}: exit {code:?}: {err}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "unclean exits:\n{}",
        failures.join("\n")
    );
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// A TCP port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn bad_arguments_never_crash_lat_or_bw() {
    let big = "18446744073709551615";
    let bigger = "18446744073709551616";
    let mut table = Vec::new();
    for bin in [LAT, BW] {
        for a in [
            &["write", "--loopback", "-n", big][..],
            &["write", "--loopback", "-n", bigger],
            &["write", "--loopback", "-n", "100000000000"],
            &["write", "--loopback", "-n", "0"],
            &["write", "--loopback", "-n", "-1"],
            &["write", "--loopback", "-n", "many"],
            &["write", "--loopback", "-s", "0"],
            &["write", "--loopback", "-s", "1073741825"],
            &["write", "--loopback", "-s", bigger],
            &["write", "--loopback", "-s", "-5"],
            &["write", "--loopback", "-p", "65536"],
            &["write", "--loopback", "-i", "0"],
            &["write", "--loopback", "-i", "2"],
            &["write", "--loopback", "-x", "7"],
            &["write", "--loopback", "-I", "4294967295"],
            &["write", "--loopback", "-m", "9000"],
            &["write", "--loopback", "-u", "99"],
            &["write", "--loopback", "-D", "0"],
            &["write", "--loopback", "-D", big],
            &["read", "--loopback", "-c", "UD"],
            &["atomic", "--loopback", "-s", "64"],
            &["send", "--loopback", "-r", "0"],
            &["send", "--loopback", "-e", "--path", "verbs"],
            &["write", "--loopback", "--output", "nothing"],
            &["write", "--loopback", "--bogus"],
            &["fly", "--loopback"],
            &["write", "-d", "no_such_device", "--loopback"],
            &["send", "-c", "UD", "-s", "4000", "--loopback", "-n", "5"],
        ] {
            table.push((bin, args(a)));
        }
    }
    for a in [
        &["write", "--loopback", "-t", "0"][..],
        &["write", "--loopback", "-t", "15001"],
        &["write", "--loopback", "-q", "0"],
        &["write", "--loopback", "-q", "100000"],
        &["write", "--loopback", "--cq-mod", "0"],
        &["write", "--loopback", "-Q", "5000"],
    ] {
        table.push((BW, args(a)));
    }
    for a in [
        &[
            "write",
            "--loopback",
            "--histogram",
            "/nonexistent-dir/lat.svg",
        ][..],
        &["write", "--loopback", "--hlog", "/proc/lat.hlog"],
        // -D with -a (perftest: duration mode does not run all sizes); -D with -n runs, the
        // duration winning as perftest's (runs_that_failed.rs).
        &["write", "--loopback", "-H", "-D", "2", "-a"],
    ] {
        table.push((LAT, args(a)));
    }
    check_table(table, Duration::from_secs(30));
}

#[test]
fn a_client_with_no_server_and_a_server_port_in_use_are_clear_errors() {
    // Something listens: the server cannot.
    let taken = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = taken.local_addr().unwrap().port().to_string();
    // Nothing listens: the client retries for its 10 s I/O timeout, then says so.
    let none = free_port().to_string();
    let mut table = Vec::new();
    for bin in [LAT, BW] {
        table.push((bin, args(&["write", "-p", &port])));
        table.push((bin, args(&["write", "-p", &none, "127.0.0.1"])));
        table.push((bin, args(&["write", "-p", "1", "no-such-host.invalid"])));
    }
    check_table(table, Duration::from_secs(40));
    drop(taken);
}

#[test]
fn bad_input_never_crashes_wqe_dump() {
    let dir = std::env::temp_dir().join(format!("mlx5-tools-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let junk = write("junk.hex", b"zz 0x1g ,, 12 3");
    let odd = write("odd.hex", b"0a0b0");
    let empty = write("empty.hex", b"");
    let binary = write("binary.hex", &[0xff, 0xfe, 0x00, 0x80]);
    let short = write("short.hex", b"00 01 02 03");
    let mut table = Vec::new();
    for a in [
        vec!["send".to_string(), "/nonexistent/wqe.hex".to_string()],
        vec!["send".into(), junk.clone()],
        vec!["send".into(), odd.clone()],
        vec!["cqe".into(), empty.clone()],
        vec!["recv".into(), binary.clone()],
        vec!["cqe".into(), short.clone()],
        vec![
            "send".into(),
            short.clone(),
            "--qp-type".into(),
            "rd".into(),
        ],
        vec![
            "cqe".into(),
            short.clone(),
            "--cqe-size".into(),
            "18446744073709551616".into(),
        ],
        vec!["recv".into(), short.clone(), "--sges".into(), "-1".into()],
        vec![
            "srq".into(),
            short,
            "--sges".into(),
            "99999999999999999999".into(),
        ],
        vec!["frobnicate".into()],
        vec!["send".into(), "--bogus".into()],
        vec![],
    ] {
        table.push((WQE_DUMP, a));
    }
    check_table(table, Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).ok();
}

/// `--tap NAME`: a name Linux would refuse, an interface that does not exist, one that is no
/// TAP device, `--tap` with `--loopback` or a verbs device, `--tap-ip` alone: each is refused
/// with a message saying so, before anything waits for a peer.
#[test]
fn a_bad_tap_is_a_clear_error() {
    let port = free_port().to_string();
    let cases: [(&[&str], &str); 7] = [
        (&["--tap", "a/b"], "has no '/'"),
        (&["--tap", "sixteen-bytes-xx"], "1 to 15 bytes"),
        (
            &["--tap", "nosuchtap7"],
            "no network interface of that name",
        ),
        (&["--tap", "lo"], "not a TUN/TAP device"),
        (&["--tap", "tap0", "--loopback"], "--loopback runs two"),
        (&["--tap", "tap0", "-d", "mlx5_0"], "is for -d sim"),
        (&["--tap-ip", "192.168.77.9"], "--tap"),
    ];
    for bin in [LAT, BW] {
        for (extra, want) in cases {
            let mut a = args(&["write", "-p", &port]);
            a.extend(args(extra));
            let (code, err) = run_bounded(bin, &a, Duration::from_secs(30));
            assert!(
                matches!(code, Some(1) | Some(2))
                    && err.contains(want)
                    && !err.contains("panicked"),
                "{bin} {a:?}: exit {code:?}, wanted {want:?} in: {err}"
            );
        }
    }
}

/// Endless or random input (`/dev/zero`, `/dev/urandom`) ends `wqe-dump` at the first byte
/// that cannot be part of a dump, before it reads more: it once read everything first (7–8 GB
/// of memory in 12 s). Valid text beyond the 16 MiB a dump may have is refused at that bound.
#[test]
fn endless_or_random_input_stops_wqe_dump_at_once() {
    for kind in ["send", "recv", "srq", "cqe", "cq"] {
        for dev in ["/dev/zero", "/dev/urandom"] {
            let (code, err) = run_bounded(WQE_DUMP, &args(&[kind, dev]), Duration::from_secs(10));
            assert_eq!(code, Some(2), "{kind} {dev}: {err}");
            assert!(err.contains("stopped reading there"), "{kind} {dev}: {err}");
        }
    }
    let dir = std::env::temp_dir().join(format!("mlx5-tools-long-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let long = dir.join("blank.hex");
    std::fs::write(&long, vec![b' '; (16 << 20) + 1]).unwrap();
    let (code, err) = run_bounded(
        WQE_DUMP,
        &args(&["cq", long.to_str().unwrap()]),
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("longer than 16 MiB"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
