//! perftest's tests and output modes, each run once in `--loopback` on the software ConnectX:
//! `lat` and `bw` for write, send, read and atomic (`-A`), on RC and on UC/UD where perftest
//! allows them (`-c`), bidirectional `bw` (`-b`), runs of a duration (`-D`, perftest's
//! duration columns), the sample listing (`-H`), one number for scripts (`--output`), the
//! HdrHistogram log (`--hlog`), `--help` naming every default, the QP transition log
//! (`RUST_LOG`, `-v`), and a 1 GiB message that outlasts the stall timeout: status 1 and the
//! timeout's message, never a signal.

use std::process::{Command, Output};

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the tool")
}

fn ok(bin: &str, args: &[&str]) -> String {
    let out = run(bin, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The numeric rows under the last line that contains `header`.
fn rows(stdout: &str, header: &str) -> Vec<Vec<f64>> {
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .rposition(|l| l.contains(header))
        .unwrap_or_else(|| panic!("no header {header:?} in:\n{stdout}"));
    lines[at + 1..]
        .iter()
        .take_while(|l| !l.starts_with("---") && !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().unwrap_or_else(|_| panic!("{t:?} in {l:?}")))
                .collect()
        })
        .collect()
}

fn field(out: &str, name: &str) -> String {
    let l = out
        .lines()
        .find(|l| l.trim_start().starts_with(name))
        .unwrap_or_else(|| panic!("no {name:?} line:\n{out}"));
    l[l.find(':').unwrap() + 1..].trim().to_string()
}

#[test]
fn every_latency_test_on_every_connection_perftest_allows() {
    for (args, title, size, conn) in [
        (
            &["write", "-n", "20"][..],
            "RDMA_Write Latency Test",
            2.0,
            "RC",
        ),
        (
            &["write", "-c", "UC", "-n", "20", "-s", "300"],
            "RDMA_Write Latency Test",
            300.0,
            "UC",
        ),
        (
            &["send", "-n", "20", "-s", "64"],
            "Send Latency Test",
            64.0,
            "RC",
        ),
        (
            &["send", "-c", "UC", "-n", "20"],
            "Send Latency Test",
            2.0,
            "UC",
        ),
        (
            &["send", "-c", "UD", "-n", "20", "-s", "1024"],
            "Send Latency Test",
            1024.0,
            "UD",
        ),
        (
            &["read", "-n", "20", "-s", "512"],
            "RDMA_Read Latency Test",
            512.0,
            "RC",
        ),
        (
            &["atomic", "-n", "20"],
            "Atomic FETCH_AND_ADD Latency Test",
            8.0,
            "RC",
        ),
        (
            &["atomic", "-A", "CMP_AND_SWAP", "-n", "20"],
            "Atomic CMP_AND_SWAP Latency Test",
            8.0,
            "RC",
        ),
    ] {
        let out = ok(LAT, &[args, &["--loopback"]].concat());
        assert!(out.contains(title), "{args:?}: {out}");
        assert_eq!(field(&out, "Connection type"), conn, "{out}");
        let r = &rows(&out, "t_typical[usec]")[0];
        assert_eq!((r[0], r[1]), (size, 20.0), "{args:?}: {out}");
        assert!(r[2..].iter().all(|&v| v > 0.0), "{args:?}: {r:?}");
    }
}

#[test]
fn every_bandwidth_test_on_every_connection_perftest_allows() {
    for (args, title, size, iters) in [
        (
            &["send", "-n", "200", "-s", "2048"][..],
            "Send BW Test",
            2048.0,
            200.0,
        ),
        (
            &["send", "-c", "UC", "-n", "200", "-s", "512"],
            "Send BW Test",
            512.0,
            200.0,
        ),
        (
            &["send", "-c", "UD", "-n", "200", "-s", "1024", "-q", "2"],
            "Send BW Test",
            1024.0,
            400.0,
        ),
        (
            &["write", "-c", "UC", "-n", "200", "-s", "4096"],
            "RDMA_Write BW Test",
            4096.0,
            200.0,
        ),
        (
            &["atomic", "-n", "200"],
            "Atomic FETCH_AND_ADD BW Test",
            8.0,
            200.0,
        ),
        (
            &["atomic", "-A", "CMP_AND_SWAP", "-n", "100"],
            "Atomic CMP_AND_SWAP BW Test",
            8.0,
            100.0,
        ),
        (
            &["write", "-b", "-n", "200", "-s", "1024"],
            "RDMA_Write Bidirectional BW Test",
            1024.0,
            200.0,
        ),
        (
            &["send", "-b", "-n", "100", "-s", "1024", "-q", "2"],
            "Send Bidirectional BW Test",
            1024.0,
            200.0,
        ),
    ] {
        let out = ok(BW, &[args, &["--loopback"]].concat());
        assert!(out.contains(title), "{args:?}: {out}");
        let r = &rows(&out, "MsgRate[Mpps]")[0];
        assert_eq!((r[0], r[1]), (size, iters), "{args:?}: {out}");
        // The message rate is never 0 (six decimals of Mpps); the bandwidth columns, with two
        // decimals of MiB/s, may round to 0.00 for 8-byte atomics on a loaded machine.
        assert!(r[2] >= 0.0 && r[3] >= 0.0 && r[4] > 0.0, "{args:?}: {r:?}");
        assert!(
            !out.contains("messages arrived"),
            "{args:?}: a loss in loopback: {out}"
        );
    }
}

#[test]
fn duration_runs_have_perftests_duration_columns() {
    let out = ok(LAT, &["send", "--loopback", "-D", "1"]);
    assert!(
        out.contains("#bytes        #iterations       t_avg[usec]    tps average"),
        "{out}"
    );
    let r = &rows(&out, "tps average")[0];
    assert_eq!(r.len(), 4, "{out}");
    assert!(r[1] > 10.0 && r[2] > 0.0 && r[3] > 0.0, "{r:?}");
    // t_avg × tps: each iteration is a round trip of two halves.
    assert!((r[2] * 2.0 * r[3] / 1e6 - 1.0).abs() < 0.05, "{r:?}");
    let out = ok(BW, &["write", "--loopback", "-D", "1", "-s", "4096"]);
    let r = &rows(&out, "MsgRate[Mpps]")[0];
    assert_eq!(r[0], 4096.0);
    assert!(r[1] > 10.0, "{r:?}");
    assert_eq!(r[2], 0.0, "no peak in a duration run, as perftest: {r:?}");
    assert!(r[3] > 0.0 && r[4] > 0.0, "{r:?}");
}

#[test]
fn the_listing_one_number_and_the_histogram_log() {
    // -H: perftest's "#, usec" listing of every sample, sorted, then the header and the row.
    let out = ok(LAT, &["write", "--loopback", "-n", "7", "-H"]);
    let at = out.find("#, usec").unwrap_or_else(|| panic!("{out}"));
    let listed: Vec<f64> = out[at..]
        .lines()
        .skip(1)
        .take_while(|l| l.contains(", "))
        .map(|l| l.split(", ").nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(listed.len(), 7, "{out}");
    assert!(
        listed.windows(2).all(|w| w[0] <= w[1]),
        "sorted: {listed:?}"
    );
    assert_eq!(rows(&out, "t_typical[usec]")[0][1], 7.0);
    // --output=latency: one number per size and nothing else.
    let out = ok(LAT, &["read", "--loopback", "-n", "10", "--output=latency"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].parse::<f64>().unwrap() > 0.0, "{out}");
    for (which, args) in [
        ("bandwidth", &["write", "-s", "4096", "-n", "100"][..]),
        ("message_rate", &["send", "-s", "64", "-n", "100"]),
    ] {
        let out = ok(BW, &[args, &["--loopback", "--output", which]].concat());
        assert_eq!(out.lines().count(), 1, "{which}: {out}");
        assert!(out.trim().parse::<f64>().unwrap() > 0.0, "{which}: {out}");
    }
    // --hlog: an HdrHistogram interval log, one interval per size, and the SVG next to it.
    let dir = std::env::temp_dir().join(format!("mlx5-tools-hlog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, svg) = (dir.join("lat.hlog"), dir.join("lat.svg"));
    ok(
        LAT,
        &[
            "write",
            "--loopback",
            "-a",
            "-n",
            "2",
            "--hlog",
            log.to_str().unwrap(),
            "--histogram",
            svg.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.starts_with("#[Histogram log format version 1.3]"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("Tag=size=")).count(),
        23,
        "{text}"
    );
    assert!(text.contains("Tag=size=8388608,"), "{text}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn help_names_every_default() {
    for (bin, flags) in [
        (
            LAT,
            &[
                "-s", "-n", "-p", "-d", "-i", "-c", "-A", "-r", "-u", "--path",
            ][..],
        ),
        (BW, &["-s", "-n", "-q", "-t", "-Q", "-p", "-c", "-r", "-u"]),
    ] {
        let out = Command::new(bin).arg("--help").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = help.lines().collect();
        // An option's first line: at most 6 spaces, then a dash.
        let is_opt = |l: &str| {
            let t = l.trim_start();
            t.starts_with('-') && l.len() - t.len() <= 6
        };
        for f in flags {
            let at = lines
                .iter()
                .position(|l| {
                    let t = l.trim_start();
                    is_opt(l)
                        && (t.starts_with(&format!("{f},")) || t.starts_with(&format!("{f} ")))
                })
                .unwrap_or_else(|| panic!("{bin}: no {f} in\n{help}"));
            let entry: Vec<&str> = std::iter::once(lines[at])
                .chain(lines[at + 1..].iter().take_while(|l| !is_opt(l)).copied())
                .collect();
            let entry = entry.join(" ");
            assert!(
                entry.contains("default"),
                "{bin} {f}: no default in {entry:?}"
            );
        }
    }
}

#[test]
fn rust_log_shows_one_line_per_qp_transition() {
    let out = Command::new(LAT)
        .args(["write", "--loopback", "-n", "3"])
        .env("RUST_LOG", "mlx5=info")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let moves: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("mlx5_hw::transition") && l.contains("QP modified"))
        .collect();
    // Reset→Init→RTR→RTS on both QPs.
    assert_eq!(moves.len(), 6, "{err}");
    for l in &moves {
        for f in [
            "old_state=",
            "new_state=",
            "qpn=",
            "dest_qpn=",
            "sq_psn=",
            "rq_psn=",
            "path_mtu=",
            "dgid=",
        ] {
            assert!(l.contains(f), "{f} missing in {l}");
        }
    }
    assert!(
        moves.iter().any(|l| l.contains("new_state=\"RTS\"")),
        "{err}"
    );
    // -v does the same without RUST_LOG; without either, nothing is logged.
    let v = run(BW, &["write", "--loopback", "-n", "10", "-v"]);
    assert!(String::from_utf8_lossy(&v.stderr).contains("QP modified"));
    let quiet = run(BW, &["write", "--loopback", "-n", "10"]);
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
}

#[test]
fn a_gigabyte_message_ends_with_the_timeouts_message_never_a_signal() {
    // A debug build's software ConnectX moves a 1 GiB message in minutes; told the device keeps
    // at least 1 GB/s (MLX5_TOOLS_MIN_BPS), the run gives up after about 13 s with the
    // timeout's message (or, on a build that fast, succeeds). It used to free its buffer under
    // the device thread and die of SIGSEGV on that path.
    let _heavy = crate::heavy();
    let runs: Vec<_> = [LAT, BW]
        .into_iter()
        .map(|bin| {
            std::thread::spawn(move || {
                let out = std::process::Command::new(bin)
                    .args(["write", "--loopback", "-s", "1073741824", "-n", "2"])
                    .env("MLX5_TOOLS_MIN_BPS", "1000000000")
                    .env_remove("RUST_LOG")
                    .output()
                    .expect("run the tool");
                (bin, out)
            })
        })
        .collect();
    for r in runs {
        let (bin, out) = r.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {}
            Some(1) => assert!(
                err.contains("timed out after") && err.contains("MLX5_TOOLS_MIN_BPS"),
                "{bin}: {err}"
            ),
            other => panic!("{bin}: exit {other:?} (a signal?): {err}"),
        }
    }
}
