//! `lat --timestamps` on the software ConnectX: the measuring end's CQ has completion
//! timestamps (stamped from the device's virtual clock), and under the perftest row a NIC
//! line gives the same run measured with the device clock: one sample per pair of
//! consecutive iterations, positive and ordered figures. Combinations it cannot serve (`-D`,
//! `-e`, `--output`) are usage errors (exit 2) saying why. Its run on Soft-RoCE, which has no
//! completion timestamps, is checked by `tools/rxe-vm/perf-tools.sh`.

use std::process::Command;

const LAT: &str = env!("CARGO_BIN_EXE_lat");

/// The fields of the NIC line (`name value` pairs after the colon) of `out`.
fn nic_fields(out: &str) -> Vec<(String, f64)> {
    let line = out
        .lines()
        .find(|l| l.starts_with(" NIC (CQE timestamps, "))
        .unwrap_or_else(|| panic!("no NIC line in:\n{out}"));
    assert!(
        line.starts_with(" NIC (CQE timestamps, 156250 kHz): "),
        "not the software ConnectX's 156.25 MHz clock: {line}"
    );
    assert!(line.ends_with(" [usec]"), "{line}");
    let body = &line[line.find("): ").unwrap() + 3..line.len() - " [usec]".len()];
    let toks: Vec<&str> = body.split_whitespace().collect();
    assert_eq!(toks.len() % 2, 0, "{line}");
    toks.chunks(2)
        .map(|p| {
            let v = p[1]
                .parse()
                .unwrap_or_else(|_| panic!("not a number {:?} in {line}", p[1]));
            (p[0].to_string(), v)
        })
        .collect()
}

fn run_ok(args: &[&str]) -> String {
    let out = Command::new(LAT).args(args).output().expect("run lat");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "lat {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn check(test: &[&str], size: f64, iters: f64) {
    let n = iters.to_string();
    let s = size.to_string();
    let mut args = test.to_vec();
    args.extend(["--loopback", "--timestamps", "-n", &n, "-s", &s]);
    let out = run_ok(&args);
    assert!(
        out.contains("Timestamps     : CQE completion timestamps"),
        "{out}"
    );
    // The CPU's perftest row is still there, for the same size and count.
    let row = out
        .lines()
        .find(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.len() == 9 && t[0] == s && t[1] == n
        })
        .unwrap_or_else(|| panic!("no CPU row for {s} bytes x {n}:\n{out}"));
    assert!(!row.is_empty());
    let f = nic_fields(&out);
    let names: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "#bytes",
            "#samples",
            "t_min",
            "t_max",
            "t_typical",
            "t_avg",
            "t_stdev",
            "99%",
            "99.9%"
        ],
        "{out}"
    );
    let v: Vec<f64> = f.iter().map(|(_, v)| *v).collect();
    assert_eq!((v[0], v[1]), (size, iters - 1.0), "{out}");
    // Two operations the software ConnectX handles in one pass of its thread share a stamp
    // (its clock moves per pass), so a single interval may be 0; the run's are not.
    assert!(
        v[2] >= 0.0 && v[4] > 0.0 && v[5] > 0.0,
        "no NIC interval: {out}"
    );
    assert!(
        v[2] <= v[4] && v[4] <= v[3],
        "t_min ≤ t_typical ≤ t_max: {out}"
    );
    assert!(v[2] <= v[5] && v[5] <= v[3], "t_min ≤ t_avg ≤ t_max: {out}");
}

#[test]
fn send_and_write_report_the_nic_clock_next_to_the_cpu() {
    let _heavy = crate::heavy();
    check(&["send"], 64.0, 30.0);
    check(&["write"], 8.0, 30.0);
}

#[test]
fn read_and_atomics_report_the_nic_clock_next_to_the_cpu() {
    let _heavy = crate::heavy();
    check(&["read"], 512.0, 20.0);
    check(&["atomic", "-A", "CMP_AND_SWAP"], 8.0, 20.0);
}

#[test]
fn what_timestamps_cannot_serve_is_a_usage_error() {
    for (extra, why) in [
        (&["-D", "2"][..], "--timestamps cannot be used with -D"),
        (&["-e"][..], "--timestamps cannot be used with -e"),
        (
            &["--output", "latency"][..],
            "--timestamps cannot be used with --output",
        ),
    ] {
        let mut args = vec!["write", "--loopback", "--timestamps"];
        args.extend(extra);
        let out = Command::new(LAT).args(&args).output().expect("run lat");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "lat {args:?}: {err}");
        assert!(err.contains(why), "lat {args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
