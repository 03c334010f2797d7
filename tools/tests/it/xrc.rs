//! `-c XRC` (issue 32 point 3) on the software ConnectX: every test of `lat` and `bw` over XRC
//! initiators sending to the peer's XRC targets and XRC SRQ, in one process and across two
//! (the tools' own exchange, the XRC addresses and SRQ number carried over the RC QPs), and the
//! runs this build refuses with `-c XRC`.

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

/// The XRC line names this end's initiators and targets, the peer's targets and both SRQs;
/// the banner says XRC.
fn ran_over_xrc(out: &str, qps: usize) {
    let line = out
        .lines()
        .find(|l| l.starts_with(" XRC: initiator"))
        .unwrap_or_else(|| panic!("no XRC line:\n{out}"));
    assert!(
        line.contains("sending to the peer's target") && line.contains("into XRC SRQ 0x"),
        "{line}"
    );
    // One initiator QPN per QP (`0x` each) before "sending".
    let inis = line
        .split("sending")
        .next()
        .map_or(0, |s| s.matches("0x").count());
    assert_eq!(inis, qps, "{line}");
    assert!(out.contains("Connection type: XRC"), "{out}");
}

#[test]
fn every_test_over_xrc_in_one_process() {
    let _heavy = crate::heavy();
    for test in ["send", "write", "read", "atomic"] {
        let out = ok(
            BW,
            &[
                test,
                "-c",
                "XRC",
                "--loopback",
                "-q",
                "2",
                "-n",
                "150",
                "-s",
                "8",
            ],
        );
        ran_over_xrc(&out, 2);
        let r = row(&out, "MsgRate[Mpps]");
        assert_eq!((r[0], r[1]), (8.0, 300.0), "{test}: {out}");
        assert!(r[3] > 0.0, "{test}: {r:?}");
        let out = ok(LAT, &[test, "-c", "XRC", "--loopback", "-n", "60"]);
        ran_over_xrc(&out, 1);
        let r = row(&out, "t_typical[usec]");
        assert_eq!(r[1], 60.0, "{test}: {out}");
        assert!(r[2] > 0.0, "{test}: {r:?}");
    }
    // SENDs of every QP land in one XRC SRQ of -r × -q receives, reposted as they complete:
    // more messages than it holds.
    let out = ok(
        BW,
        &[
            "send",
            "-c",
            "XRC",
            "--loopback",
            "-q",
            "3",
            "-r",
            "16",
            "-n",
            "100",
            "-s",
            "1024",
        ],
    );
    ran_over_xrc(&out, 3);
    assert_eq!(row(&out, "MsgRate[Mpps]")[1], 300.0, "{out}");
}

#[test]
fn xrc_across_two_processes() {
    let _heavy = crate::heavy();
    let args = ["send", "-c", "XRC", "-q", "2", "-n", "100", "-s", "2048"];
    let (server, client) = crate::control_net::pair(BW, &args, &args, "127.0.0.1");
    ran_over_xrc(&server, 2);
    ran_over_xrc(&client, 2);
    assert_eq!(row(&client, "MsgRate[Mpps]")[1], 200.0, "{client}");
    let args = ["write", "-c", "XRC", "-n", "40", "-s", "64"];
    let (server, client) = crate::control_net::pair(LAT, &args, &args, "127.0.0.1");
    ran_over_xrc(&server, 1);
    assert_eq!(row(&client, "t_typical[usec]")[1], 40.0, "{client}");
    // A server of -c RC and a client of -c XRC both stop at connect, naming both.
    let (server, client) = crate::tools_lat_bw::refused_pair(
        (LAT, &["write", "-n", "5"]),
        (LAT, &["write", "-c", "XRC", "-n", "5"]),
        Duration::from_secs(8),
    );
    for err in [server, client] {
        assert!(err.contains("client -c XRC, server -c RC"), "{err}");
    }
}

/// `lat -c XRC` against stock `ib_send_lat`/`ib_write_lat`/`ib_read_lat`/`ib_atomic_lat -c XRC`
/// under the emulation (stock perftest on the software ConnectX through libmlx5), each
/// serving once and connecting once: perftest's XRC layout (one initiator and one target per
/// end, endpoint messages initiator first) over its own exchange.
#[test]
fn lat_xrc_against_stock_perftest_both_roles() {
    let _g = crate::heavy();
    for (program, args) in [
        (
            "ib_send_lat",
            &["send", "-c", "XRC", "-n", "20", "-s", "300"][..],
        ),
        (
            "ib_write_lat",
            &["write", "-c", "XRC", "-n", "20", "-s", "64"],
        ),
        ("ib_read_lat", &["read", "-c", "XRC", "-n", "20"]),
        ("ib_atomic_lat", &["atomic", "-c", "XRC", "-n", "20"]),
    ] {
        crate::mixed_pairs::against_perftest_on("direct", program, LAT, args, "t_avg[usec]", false);
    }
}

/// `bw -c XRC` against stock `ib_send_bw`/`ib_write_bw -c XRC` under the emulation (stock
/// perftest on the software ConnectX through libmlx5), each serving once and connecting once:
/// perftest's one-way XRC layout (the client's initiators, the server's targets, one endpoint
/// message per QP) over its own exchange, with two QPs; each role puts the same traffic on the wire
/// whoever drives it.
#[test]
fn bw_xrc_against_stock_perftest_both_roles() {
    let _g = crate::heavy();
    for (program, args) in [
        ("ib_send_bw", &["send", "-c", "XRC", "-q", "2"][..]),
        ("ib_write_bw", &["write", "-c", "XRC", "-q", "2"]),
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "100", "-s", "4096", "-t", "16"]);
        crate::mixed_pairs::against_perftest_on("direct", program, BW, &a, "BW average", true);
    }
}

#[test]
fn xrc_runs_this_build_refuses() {
    check_exit(
        BW,
        &["send", "-c", "XRC", "--loopback", "--path", "verbs"],
        2,
        "-c XRC --path verbs: not in this build",
    );
    for bin in [LAT, BW] {
        check_exit(
            bin,
            &[
                "write",
                "-c",
                "XRC",
                "--perftest",
                "--path",
                "verbs",
                "-p",
                "1",
                "127.0.0.1",
            ],
            2,
            "-c XRC --path verbs: not in this build",
        );
    }
    // bw -c XRC speaks perftest's exchange now: on a software ConnectX over UDP it is refused
    // for the UDP address only, as every other connection type is.
    check_exit(
        BW,
        &["write", "-c", "XRC", "--perftest", "-p", "1", "127.0.0.1"],
        2,
        "exchange has no field for a UDP address",
    );
}
