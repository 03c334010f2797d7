//! `--use-srq` on `--path verbs` (issue 32 point 3): the receives of every QP go through one
//! SRQ posted with `ibv_post_srq_recv` through the dlopen'd libibverbs, on the emulated
//! ConnectX (`mlx5_0` behind Debian's libibverbs + libmlx5 and the preload library): in one
//! process, and against stock `ib_send_bw --use-srq` / `ib_send_lat --use-srq` in both roles.

use crate::mixed_pairs::{against_perftest_on, against_perftest_under, Emu, Scratch};
use std::path::Path;

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");

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

/// `exe args -d mlx5_0 --path verbs` on the emulated device, to its successful end.
fn on_verbs(s: &Scratch, exe: &str, args: &[&str], report: &str) -> String {
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-d", "mlx5_0", "--path", "verbs"]);
    Emu::start(Path::new(exe), &a, s.0.join(report))
        .finish()
        .stdout
}

#[test]
fn verbs_path_receives_through_one_srq() {
    let _g = crate::heavy();
    let s = Scratch::new("verbs-srq");
    // Four QPs on a 64-WR SRQ (16 each at the start), more messages than it holds: every
    // receive is reposted to the SRQ, or the run stalls.
    let out = on_verbs(
        &s,
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
            "150",
            "-s",
            "1024",
        ],
        "bw.report",
    );
    assert!(
        out.contains(" Using SRQ      : ON (64 WRs shared)")
            && out.contains("Data path      : verbs"),
        "{out}"
    );
    let r = row(&out, "MsgRate[Mpps]");
    assert_eq!((r[0], r[1]), (1024.0, 600.0), "{out}");
    assert!(r[3] > 0.0, "{r:?}");
    let out = on_verbs(
        &s,
        LAT,
        &[
            "send",
            "--loopback",
            "--use-srq",
            "-c",
            "UD",
            "-n",
            "60",
            "-s",
            "256",
        ],
        "lat.report",
    );
    assert!(out.contains(" Using SRQ      : ON"), "{out}");
    let r = row(&out, "t_typical[usec]");
    assert_eq!((r[0], r[1]), (256.0, 60.0), "{out}");
}

/// `bw`'s arguments of the SEND runs against `ib_send_bw`: two QPs on one SRQ.
const SRQ_BW: &[&str] = &[
    "send",
    "--use-srq",
    "-q",
    "2",
    "-n",
    "100",
    "-s",
    "2048",
    "-t",
    "16",
];

#[test]
fn verbs_path_srq_against_stock_perftest() {
    let _g = crate::heavy();
    against_perftest_on("verbs", "ib_send_bw", BW, SRQ_BW, "BW average", true);
    against_perftest_on(
        "verbs",
        "ib_send_lat",
        LAT,
        &["send", "--use-srq", "-n", "30", "-s", "64"],
        "t_avg[usec]",
        false,
    );
    // A receiver behind (as a descheduled server process on a loaded machine, where CI met
    // it): the first three SENDs this side's server receives find the SRQ empty. RNR NAKs,
    // the packets dropped behind them, the NAK sequence error the first of those draws, and
    // the resends are flow control, in one run and not in the other: both complete, and the
    // executed requests agree.
    let all = against_perftest_under(
        Some("times=3,rnr=100%"),
        "verbs",
        "ib_send_bw",
        BW,
        SRQ_BW,
        "BW average",
        true,
    );
    // Three of this side's at least; perftest's server and this one may also have fallen
    // behind on their own (a server process descheduled on a loaded machine, as on hardware).
    let count =
        |w: &[(String, u64)], k: &str| w.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
    assert!(
        count(&all[1], "out_of_buffer") >= 3,
        "this side's server: {:?}",
        all[1]
    );
    assert!(
        count(&all[3], "rnr_nak_retry_err") >= 3,
        "perftest's client: {:?}",
        all[3]
    );
}
