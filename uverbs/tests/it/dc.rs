//! DC under the emulation: rdma-core's `mlx5dv_create_qp` with DC attributes answered as
//! `mlx5_ib` answers it, so that rdma-core's own DC calls (`dc_objects.c`, compiled here with
//! gcc against libibverbs and libmlx5), UCX's `dc_mlx5` transport (`ucx_info -d`,
//! `ucx_perftest` over UCT and UCP) and perftest's `-c DC` (DCI + DCT with an SRQ) run on the
//! software ConnectX. Every run also checks the devices' DC counters in the reports: the
//! traffic went DCI → DCT.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::pingpong::pair;
use crate::support::{report, run, run_path, start, tcp_port, wait_listen, Scratch};

const LIMIT: Duration = Duration::from_secs(120);

/// A counter of a report (0 when the report has none).
fn count(r: &BTreeMap<String, String>, name: &str) -> u64 {
    r.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[test]
fn rdma_core_dc_calls_create_connect_and_refuse_as_mlx5_ib() {
    let s = Scratch::new("dc-objects");
    let exe = s.path("dc_objects");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/dc_objects.c");
    let st = Command::new("gcc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .args(["-libverbs", "-lmlx5"])
        .status()
        .expect("gcc (Debian: build-essential) and libibverbs-dev");
    assert!(st.success(), "dc_objects.c does not compile");
    let rep = s.path("dc.report");
    let o = run_path(&["--report", rep.to_str().unwrap()], &exe, &[], LIMIT).ok("dc_objects");
    let caps = mlx5_sim::dc::DCI_STREAMS_CAPS;
    for line in [
        format!(
            "dci streams caps reported concurent {} errored {}",
            caps.log_num_concurent, caps.log_num_errored
        ),
        // A DCT has no number before RTR, cannot be queried there (kernel
        // `mlx5_ib_dct_query_qp`), gets its number from the modify to RTR (`modify_dct`).
        "dct qp_num before rtr 0".into(),
        "dct query in reset: Invalid argument".into(),
        "dct qp_num after rtr set".into(),
        "dct state 2".into(),
        // Kernel `check_qp_attr`: a DCI with a receive queue is EINVAL.
        "dci with a receive queue: Invalid argument".into(),
        "send completion success".into(),
        // The receive through the DCT's SRQ: its CQE names the DCT (CQE version 1: the DCT's
        // user index), the bytes arrived.
        "receive completion success wr_id 9 bytes 10 on the dct yes: hello DCT".into(),
        // A wrong access key: the model's answer (docs/software-connectx.md, DC).
        "wrong key completion transport retry counter exceeded".into(),
        // The DCT holds its SRQ (the kernel's use count).
        "srq destroyed before its dct: Device or resource busy".into(),
        "done".into(),
    ] {
        assert!(o.stdout.contains(&line), "no '{line}':\n{}", o.stdout);
    }
    let r = report(&rep);
    assert_eq!(r["driver_bugs"], "0", "{r:?}");
    assert!(count(&r, "dct_connects") >= 1, "{r:?}");
    assert!(count(&r, "dct_key_violations") >= 1, "{r:?}");
}

#[test]
fn ucx_info_lists_dc_mlx5_on_the_device() {
    let o = run(&[], "ucx_info", &["-d"], LIMIT).ok("ucx_info -d");
    let mut lines = o.stdout.lines();
    let mut found = false;
    while let Some(l) = lines.next() {
        if l.trim_end().ends_with("Transport: dc_mlx5") {
            found = lines.next().is_some_and(|d| d.contains("Device: mlx5_0:1"));
            break;
        }
    }
    assert!(found, "no dc_mlx5 on mlx5_0:1:\n{}", o.stdout);
}

/// Server and client of one `ucx_perftest` test over `UCX_TLS=dc_mlx5` alone; the client's
/// final line counts `n` iterations; no driver bug, and the client's DCIs connected to the
/// server's DCT.
fn ucx_perftest(name: &str, args: &[&str], n: u32) {
    let s = Scratch::new(name);
    let port = tcp_port();
    let ps = port.to_string();
    let (sr, cr) = (s.path("server.report"), s.path("client.report"));
    let env = [("UCX_TLS", "dc_mlx5")];
    let server = start(
        &["--report", sr.to_str().unwrap()],
        "ucx_perftest",
        &["-p", &ps],
        &env,
    );
    wait_listen(port, LIMIT);
    let count_s = n.to_string();
    let mut ca = vec!["127.0.0.1", "-p", &ps, "-n", &count_s, "-w", "20"];
    ca.extend_from_slice(args);
    let what = format!("ucx_perftest {} over dc_mlx5", args.join(" "));
    let client = start(
        &["--report", cr.to_str().unwrap()],
        "ucx_perftest",
        &ca,
        &env,
    )
    .finish(LIMIT)
    .ok(&format!("{what} (client)"));
    server.finish(LIMIT).ok(&format!("{what} (server)"));
    let fin = client
        .stdout
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("{what}: no final line:\n{}", client.stdout));
    let iters: u32 = fin
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert_eq!(iters, n, "{what}: {fin}");
    let (sr, cr) = (report(&sr), report(&cr));
    for r in [&sr, &cr] {
        assert_eq!(r["driver_bugs"], "0", "{what}: {r:?}");
    }
    assert!(count(&cr, "dci_connects") > 0, "{what}: client {cr:?}");
    assert!(count(&sr, "dct_connects") > 0, "{what}: server {sr:?}");
}

#[test]
fn ucx_perftest_uct_put_latency_over_dc_mlx5() {
    ucx_perftest(
        "ucx-dc-put",
        &["-t", "put_lat", "-x", "dc_mlx5", "-d", "mlx5_0:1"],
        200,
    );
}

#[test]
fn ucx_perftest_ucp_active_message_bandwidth_over_dc_mlx5() {
    ucx_perftest("ucx-dc-am", &["-t", "ucp_am_bw"], 1000);
}

#[test]
fn ucx_perftest_ucp_tag_latency_over_dc_mlx5() {
    ucx_perftest("ucx-dc-tag", &["-t", "tag_lat"], 200);
}

/// perftest `-c DC` between two processes: the client's table has a row for `bytes` ×
/// 200 iterations; each end's DCI connected to the other's DCT (both for a ping-pong, the
/// client's for a bandwidth test).
fn perftest_dc(program: &str, bytes: u32, ping_pong: bool) {
    let s = bytes.to_string();
    let p = pair(program, program, &["-c", "DC", "-n", "200", "-s", &s], &[]);
    let head = if program.ends_with("_lat") {
        "t_avg[usec]"
    } else {
        "BW average[MB/sec]"
    };
    let mut lines = p.client.stdout.lines().skip_while(|l| !l.contains(head));
    assert!(lines.next().is_some(), "no table:\n{}", p.client.stdout);
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(
        row.len() > 3 && row[0] == s && row[1] == "200",
        "{program} -c DC: row {row:?}\n{}",
        p.client.stdout
    );
    assert!(
        count(&p.client_report, "dci_connects") > 0,
        "{:?}",
        p.client_report
    );
    assert!(
        count(&p.server_report, "dct_connects") > 0,
        "{:?}",
        p.server_report
    );
    if ping_pong {
        assert!(
            count(&p.server_report, "dci_connects") > 0,
            "{:?}",
            p.server_report
        );
        assert!(
            count(&p.client_report, "dct_connects") > 0,
            "{:?}",
            p.client_report
        );
    }
}

#[test]
fn perftest_ib_write_lat_dc() {
    perftest_dc("ib_write_lat", 2, true);
}

#[test]
fn perftest_ib_send_lat_dc() {
    perftest_dc("ib_send_lat", 2, true);
}

#[test]
fn perftest_ib_send_bw_dc() {
    perftest_dc("ib_send_bw", 4096, false);
}

#[test]
fn perftest_ib_read_lat_dc() {
    perftest_dc("ib_read_lat", 2, false);
}
