//! rdma-core's example programs between two processes, server and client, each on its own
//! software ConnectX: `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`,
//! `ibv_srq_pingpong`, `ibv_xsrq_pingpong`, polling and with `-e` (completion events), and
//! the RC one under 1 % loss.

use std::time::Duration;

use crate::support::{report, start, tcp_port, wait_listen, Output, Scratch};

/// Bound on one program's run (each exchanges at most a few hundred messages).
const LIMIT: Duration = Duration::from_secs(90);

/// Both ends' output and reports.
pub struct Pair {
    pub server: Output,
    pub client: Output,
    pub server_report: std::collections::BTreeMap<String, String>,
    pub client_report: std::collections::BTreeMap<String, String>,
}

/// Run `program args` as server and client (`-p PORT` added, the client also given
/// 127.0.0.1), with launcher options `opts` on both; waits for the server to listen before
/// starting the client. Both must exit 0 with no driver bug in their report.
pub fn pair(name: &str, program: &str, args: &[&str], opts: &[&str]) -> Pair {
    let s = Scratch::new(name);
    let port = tcp_port().to_string();
    let (sr, cr) = (s.path("server.report"), s.path("client.report"));
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-p", &port]);
    let with_report = |r: &std::path::Path| {
        let mut o: Vec<String> = opts.iter().map(|x| x.to_string()).collect();
        o.extend(["--report".to_string(), r.display().to_string()]);
        o
    };
    let so = with_report(&sr);
    let so: Vec<&str> = so.iter().map(String::as_str).collect();
    let server = start(&so, program, &a, &[]);
    wait_listen(port.parse().unwrap(), LIMIT);
    let co = with_report(&cr);
    let co: Vec<&str> = co.iter().map(String::as_str).collect();
    let mut ca = a.clone();
    ca.push("127.0.0.1");
    let client = start(&co, program, &ca, &[]).finish(LIMIT);
    let server = server.finish(LIMIT);
    let what = format!("{program} {}", args.join(" "));
    let client = client.ok(&format!("{what} (client)"));
    let server = server.ok(&format!("{what} (server)"));
    let p = Pair {
        server_report: report(&sr),
        client_report: report(&cr),
        server,
        client,
    };
    for (end, r) in [("server", &p.server_report), ("client", &p.client_report)] {
        assert_eq!(
            r["driver_bugs"], "0",
            "{what}: the {end}'s driver bugs: {r:?}"
        );
        let sent: u64 = r["port_xmit_packets"].parse().unwrap();
        let got: u64 = r["port_rcv_packets"].parse().unwrap();
        assert!(
            sent > 0 && got > 0,
            "{what}: the {end}'s device moved nothing: {r:?}"
        );
    }
    p
}

/// The lines `N iters in ... usec/iter` of both ends, with `n`, and each end's remote GID is
/// the other's local one.
fn check_iters(p: &Pair, n: u32) {
    for (end, o) in [("server", &p.server), ("client", &p.client)] {
        assert!(
            o.stdout.contains(&format!("{n} iters in")),
            "the {end} did not finish {n} iterations:\n{}",
            o.stdout
        );
    }
    let gid = |o: &Output, which: &str| -> String {
        o.stdout
            .lines()
            .find(|l| l.contains(which))
            .and_then(|l| l.split("GID ").nth(1))
            .map(str::to_string)
            .unwrap_or_default()
    };
    let (sl, sr) = (
        gid(&p.server, "local address"),
        gid(&p.server, "remote address"),
    );
    let (cl, cr) = (
        gid(&p.client, "local address"),
        gid(&p.client, "remote address"),
    );
    assert!(sl.starts_with("::ffff:127.") && cl.starts_with("::ffff:127.") && sl != cl);
    assert_eq!((sr, cr), (cl, sl), "each end's remote GID is the other's");
}

fn simple(name: &str, program: &str, extra: &[&str], n: u32) -> Pair {
    let count = n.to_string();
    let mut args = vec!["-g", "0", "-n", &count];
    args.extend_from_slice(extra);
    let p = pair(name, program, &args, &[]);
    check_iters(&p, n);
    p
}

#[test]
fn rc_pingpong() {
    simple("rc", "ibv_rc_pingpong", &[], 50);
}

#[test]
fn rc_pingpong_with_events() {
    simple("rc-e", "ibv_rc_pingpong", &["-e"], 100);
}

#[test]
fn uc_pingpong() {
    simple("uc", "ibv_uc_pingpong", &[], 50);
}

#[test]
fn uc_pingpong_with_events() {
    simple("uc-e", "ibv_uc_pingpong", &["-e"], 50);
}

#[test]
fn ud_pingpong() {
    simple("ud", "ibv_ud_pingpong", &[], 50);
}

#[test]
fn ud_pingpong_with_events() {
    simple("ud-e", "ibv_ud_pingpong", &["-e"], 50);
}

#[test]
fn srq_pingpong() {
    simple("srq", "ibv_srq_pingpong", &[], 50);
}

#[test]
fn srq_pingpong_with_events() {
    simple("srq-e", "ibv_srq_pingpong", &["-e"], 50);
}

fn xsrq(name: &str, extra: &[&str]) {
    let mut args = vec!["-g", "0", "-n", "20"];
    args.extend_from_slice(extra);
    let p = pair(name, "ibv_xsrq_pingpong", &args, &[]);
    for (end, o) in [("server", &p.server), ("client", &p.client)] {
        assert!(o.stdout.contains("success"), "{end}:\n{}", o.stdout);
    }
}

#[test]
fn xsrq_pingpong() {
    xsrq("xsrq", &[]);
}

#[test]
fn xsrq_pingpong_with_events() {
    xsrq("xsrq-e", &["-e"]);
}

/// 1 % of the frames each device sends is dropped: RC recovers every one (retransmission after
/// the ACK timeout, or a NAK), and the reports show it happened.
#[test]
fn rc_pingpong_under_one_percent_loss() {
    let p = pair(
        "rc-loss",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "200", "-e", "-s", "1024"],
        &["--faults", "loss=1%,seed=3"],
    );
    check_iters(&p, 200);
    let dropped: u64 = ["server_report", "client_report"]
        .iter()
        .zip([&p.server_report, &p.client_report])
        .map(|(_, r)| r["fault_dropped"].parse::<u64>().unwrap())
        .sum();
    assert!(dropped > 0, "1 % of about 800 frames: none dropped");
    let recovered: u64 = [&p.server_report, &p.client_report]
        .iter()
        .flat_map(|r| {
            [
                "local_ack_timeout_err",
                "out_of_sequence",
                "duplicate_request",
            ]
            .map(|k| r[k].parse::<u64>().unwrap())
        })
        .sum();
    assert!(
        recovered > 0,
        "losses without a retransmission: {p:?}",
        p = (&p.server_report, &p.client_report)
    );
}
