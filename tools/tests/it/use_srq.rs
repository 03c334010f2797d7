//! `--use-srq` (perftest's shared receive queue of the send tests) end to end on the software
//! ConnectX: the receives of every QP go through one SRQ of `-r` WRs, in one process and
//! across two, on RC, UC and UD; and the runs perftest or this build refuses.

use mlx5_testkit::process::Proc;

use std::path::Path;
use std::time::Duration;

use crate::tools_lat_bw::check_exit;

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");

fn ok(bin: &str, args: &[&str]) -> String {
    Proc::spawn(Path::new(bin), args).finish(Duration::from_secs(120))
}

/// The numbers of the row under the line holding `header`.
fn row(out: &str, header: &str) -> Vec<f64> {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(header))
        .unwrap_or_else(|| panic!("no {header:?}:\n{out}"));
    lines[at + 1]
        .split_whitespace()
        .map(|t| t.parse().unwrap_or_else(|_| panic!("{t:?} in {out}")))
        .collect()
}

#[test]
fn every_qp_receives_through_one_srq() {
    let _heavy = crate::heavy();
    // Four QPs on a 64-WR SRQ (16 each at the start), more messages than it holds.
    let out = ok(
        BW,
        &[
            "send",
            "--loopback",
            "--use-srq",
            "-q",
            "4",
            "-r",
            "64",
            "-n",
            "300",
            "-s",
            "1024",
        ],
    );
    assert!(
        out.contains(" Using SRQ      : ON (64 WRs shared)"),
        "{out}"
    );
    let r = row(&out, "MsgRate[Mpps]");
    assert_eq!((r[0], r[1]), (1024.0, 1200.0), "{out}");
    assert!(r[3] > 0.0, "{r:?}");
    for conn in ["UC", "UD"] {
        let out = ok(
            BW,
            &[
                "send",
                "--loopback",
                "--use-srq",
                "-c",
                conn,
                "-n",
                "200",
                "-s",
                "512",
            ],
        );
        let r = row(&out, "MsgRate[Mpps]");
        assert_eq!((r[0], r[1]), (512.0, 200.0), "{conn}: {out}");
    }
    let out = ok(
        LAT,
        &["send", "--loopback", "--use-srq", "-n", "100", "-s", "64"],
    );
    assert!(
        out.contains(" Using SRQ      : ON (512 WRs shared)"),
        "{out}"
    );
    let r = row(&out, "t_typical[usec]");
    assert_eq!((r[0], r[1]), (64.0, 100.0), "{out}");
    let out = ok(
        LAT,
        &[
            "send",
            "--loopback",
            "--use-srq",
            "-c",
            "UD",
            "-n",
            "100",
            "-s",
            "256",
        ],
    );
    assert_eq!(row(&out, "t_typical[usec]")[1], 100.0, "{out}");
}

#[test]
fn a_server_on_an_srq_and_a_client_without() {
    let _heavy = crate::heavy();
    // The SRQ is this end's own affair (perftest does not exchange it): one end with it, the
    // other without, both succeed.
    let (server, client) = crate::control_net::pair(
        BW,
        &["send", "-q", "2", "-n", "200", "-s", "2048", "--use-srq"],
        &["send", "-q", "2", "-n", "200", "-s", "2048"],
        "127.0.0.1",
    );
    assert!(server.contains("Using SRQ"), "{server}");
    assert!(!client.contains("Using SRQ"), "{client}");
    let r = row(&client, "MsgRate[Mpps]");
    assert_eq!((r[0], r[1]), (2048.0, 400.0), "{client}");
}

#[test]
fn srq_runs_that_cannot_work_are_refused() {
    check_exit(
        BW,
        &["write", "--loopback", "--use-srq"],
        2,
        "--use-srq: only the send test posts receives",
    );
    check_exit(
        BW,
        &["send", "--loopback", "--use-srq", "-q", "8", "-r", "4"],
        2,
        "--use-srq -q 8 -r 4: each QP's share of the SRQ is -r / -q receives, none here",
    );
}
