//! UCX 1.13 (`ucx-utils`): `ucx_info -d` finds the device's transports, and `ucx_perftest`
//! runs a put latency and an active-message bandwidth test between two processes over
//! `rc_mlx5` (UCT, UCX's own mlx5 data path on the rings libmlx5 created) and over `ud_mlx5`
//! (UCP on UD alone, which carries the puts as messages).

use std::time::Duration;

use crate::support::{report, run, start, tcp_port, wait_listen, Scratch};

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn ucx_info_lists_the_mlx5_transports_on_the_device() {
    let o = run(&[], "ucx_info", &["-d"], LIMIT).ok("ucx_info -d");
    // Each transport's block: "Transport: X" then "Device: mlx5_0:1".
    let on_device = |tl: &str| {
        let mut lines = o.stdout.lines();
        while let Some(l) = lines.next() {
            if l.trim_end().ends_with(&format!("Transport: {tl}")) {
                if let Some(d) = lines.next() {
                    if d.contains("Device: mlx5_0:1") {
                        return true;
                    }
                }
            }
        }
        false
    };
    for tl in ["rc_mlx5", "ud_mlx5", "rc_verbs", "ud_verbs"] {
        assert!(on_device(tl), "no {tl} on mlx5_0:1:\n{}", o.stdout);
    }
}

/// Server and client of one `ucx_perftest` test with `UCX_TLS=tls`; the client's final line
/// counts `n` iterations; no driver bug, and the devices carried the traffic.
fn perftest(name: &str, tls: &str, args: &[&str], n: u32) {
    let s = Scratch::new(name);
    let port = tcp_port();
    let ps = port.to_string();
    let (sr, cr) = (s.path("server.report"), s.path("client.report"));
    let env = [("UCX_TLS", tls)];
    let server = start(
        &["--report", sr.to_str().unwrap()],
        "ucx_perftest",
        &["-p", &ps],
        &env,
    );
    wait_listen(port, LIMIT);
    let count = n.to_string();
    let mut ca = vec!["127.0.0.1", "-p", &ps, "-n", &count, "-w", "20"];
    ca.extend_from_slice(args);
    let client = start(
        &["--report", cr.to_str().unwrap()],
        "ucx_perftest",
        &ca,
        &env,
    )
    .finish(LIMIT)
    .ok(&format!("ucx_perftest {} (client)", args.join(" ")));
    server
        .finish(LIMIT)
        .ok(&format!("ucx_perftest {} (server)", args.join(" ")));
    let fin = client
        .stdout
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("no final line:\n{}", client.stdout));
    let iters: u32 = fin
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert_eq!(iters, n, "{fin}");
    for r in [report(&sr), report(&cr)] {
        assert_eq!(r["driver_bugs"], "0", "{r:?}");
        assert!(r["port_xmit_packets"].parse::<u64>().unwrap() > 0, "{r:?}");
    }
}

#[test]
fn rc_mlx5_put_latency() {
    perftest(
        "ucx-rc-put",
        "rc_mlx5",
        &["-t", "put_lat", "-x", "rc_mlx5", "-d", "mlx5_0:1"],
        200,
    );
}

#[test]
fn rc_mlx5_active_message_bandwidth() {
    perftest(
        "ucx-rc-am",
        "rc_mlx5",
        &["-t", "am_bw", "-x", "rc_mlx5", "-d", "mlx5_0:1"],
        1000,
    );
}

#[test]
fn ud_mlx5_put_latency() {
    perftest("ucx-ud-put", "ud_mlx5", &["-t", "ucp_put_lat"], 200);
}

#[test]
fn ud_mlx5_active_message_bandwidth() {
    perftest("ucx-ud-am", "ud_mlx5", &["-t", "ucp_am_bw"], 1000);
}
