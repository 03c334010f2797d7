//! `-c DC`: `lat` and `bw` over DC initiators and targets, as perftest runs them. The library
//! part step by step on a deterministic pair of software ConnectX devices (the RC QPs carry
//! the DC addresses, then every WR goes DCI `q` → the peer's DCT `q`, receives come from the
//! SRQ reported for the DCT they reached, and the devices count DC connections); the tools end
//! to end in loopback and as two processes, each end naming the DCTs the other reached.

use mlx5_testkit::process;
use mlx5_tools::args::{BwArgs, Test};
use mlx5_tools::connecting::connect_all;
use mlx5_tools::dc::{self, DcEnd};
use mlx5_tools::devices::Devices;
use mlx5_tools::hello::Tool;
use mlx5_tools::inline::InlineRequest;
use mlx5_tools::path::{DataPath, Done, Op, Post};
use mlx5_tools::resources::Resources;
use mlx5_tools::run::RunPlan;

use clap::Parser;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Poll `path` (stepping the fabric of `devs`) until `want` completions came.
fn poll_n(devs: &Devices, path: &mut dyn DataPath, want: usize) -> Vec<Done> {
    let mut got = Vec::new();
    let mut out = [Done::default(); 8];
    for _ in 0..200 {
        devs.local.progress();
        let n = path.poll(&mut out).unwrap();
        got.extend_from_slice(&out[..n]);
        if got.len() >= want {
            break;
        }
    }
    assert_eq!(got.len(), want, "{got:?}");
    got
}

#[test]
fn dc_path_goes_from_each_dci_to_the_peers_dct_of_the_same_index() {
    let args = BwArgs::try_parse_from(["bw", "send", "-c", "DC", "-q", "2", "-r", "4", "-s", "64"])
        .unwrap();
    let c = &args.common;
    let sizes = c.sizes(Test::Send, 64).unwrap();
    let length = c.length(1000, 1000, "the test's limit").unwrap();
    let run = RunPlan::new(c, Tool::Bw, Test::Send, sizes, length).unwrap();
    let devs = Devices::sim_pair(false).unwrap();
    let cfg = run.cfg(2, 16);
    let req = InlineRequest::new(None, 0);
    let (mut a, _) = Resources::with_inline(&devs.local, &cfg, req).unwrap();
    let (mut b, _) = Resources::with_inline(devs.peer_or_local(), &cfg, req).unwrap();
    let mut dc_a = DcEnd::new(&mut a, &run, 2, 16, 0).unwrap();
    let mut dc_b = DcEnd::new(&mut b, &run, 2, 16, 0).unwrap();
    // The receives are the SRQ's: none on the RC QPs.
    assert!(run.receives(&a.mr).unwrap().is_none());
    let params = run.params.clone();
    let (end_a, end_b) = (a.end(&params), b.end(&params));
    let (mut links_a, mr_a) = a.links(None).unwrap();
    let (mut links_b, mr_b) = b.links(None).unwrap();
    let conn = connect_all(
        &devs,
        &end_a,
        &mut links_a,
        Some((&end_b, &mut links_b)),
        None,
        None,
    )
    .unwrap();
    let mtu = conn.conns[0].path_mtu();
    dc::exchange(
        &mut [
            (&mut dc_a, &mut links_a, mr_a, mtu),
            (&mut dc_b, &mut links_b, mr_b, mtu),
        ],
        Duration::from_secs(5),
    )
    .unwrap();
    // Each end names its DCIs, the peer's DCTs and its own.
    let (line_a, line_b) = (dc_a.describe(), dc_b.describe());
    let dcts = |line: &str, after: &str| {
        let at = line.find(after).unwrap() + after.len();
        line[at..].split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(
        dcts(&line_a, "the peer's DCT "),
        dcts(&line_b, "); DCT "),
        "{line_a}\n{line_b}"
    );
    let remote_b = mlx5_tools::resources::remote_buffer(mr_b);
    let mut pa = dc_a.path(links_a.cq, false).unwrap();
    let mut pb = dc_b.path(links_b.cq, false).unwrap();
    mr_a.write(0, b"to DCT one").unwrap();
    for (q, op) in [(1, Op::Send), (0, Op::Send)] {
        let post = Post {
            wr_id: 10 + q as u64,
            op,
            sge: mr_a.sge(0, 10).unwrap(),
            inline: None,
            signaled: true,
        };
        pa.post(q, &post).unwrap();
    }
    // A WRITE on DCI 0 into B's send half.
    let w = Post {
        wr_id: 20,
        op: Op::Write(mlx5_qp::RemoteAddr::new(remote_b.addr + 8, remote_b.rkey)),
        sge: mr_a.sge(0, 10).unwrap(),
        inline: Some(b"written!!!"),
        signaled: true,
    };
    pa.post(0, &w).unwrap();
    let mut sent = poll_n(&devs, &mut pa, 3);
    sent.sort_by_key(|d| d.wr_id);
    let sent: Vec<_> = sent.iter().map(|d| (d.qp, d.wr_id, d.recv)).collect();
    assert_eq!(sent, [(0, 10, false), (1, 11, false), (0, 20, false)]);
    let mut got = poll_n(&devs, &mut pb, 2);
    got.sort_by_key(|d| d.qp);
    // The receive that reached DCT 1 is reported for QP 1, from the SRQ's receives.
    assert_eq!(
        got.iter()
            .map(|d| (d.qp, d.recv, d.byte_len))
            .collect::<Vec<_>>(),
        [(0, true, 10), (1, true, 10)]
    );
    let half = run.half;
    assert_eq!(mr_b.read(half, 10).unwrap(), b"to DCT one");
    assert_eq!(mr_b.read(8, 10).unwrap(), b"written!!!");
    let sim = |d: &mlx5_ctx::Context, name: &str| d.sim_device().unwrap().counter(name);
    assert!(sim(&devs.local, "dci_connects") >= 2, "two DCIs connected");
    let peer = devs.peer_or_local();
    assert!(sim(peer, "dct_connects") >= 2);
    assert_eq!(sim(peer, "dct_key_violations"), 0);
}

fn lat_row(out: &str) -> Vec<f64> {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("t_typical[usec]"))
        .unwrap_or_else(|| panic!("no header:\n{out}"));
    lines[at + 1]
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect()
}

fn ok(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn lat_and_bw_run_every_test_over_dc_in_loopback() {
    let lat = env!("CARGO_BIN_EXE_lat");
    for (test, size) in [
        ("write", "32"),
        ("send", "300"),
        ("read", "64"),
        ("atomic", "8"),
    ] {
        let out = ok(
            lat,
            &[test, "-c", "DC", "--loopback", "-n", "30", "-s", size],
        );
        assert!(out.contains("Connection type: DC"), "{out}");
        assert!(out.contains(" DC: DCI 0x"), "{out}");
        let r = lat_row(&out);
        assert_eq!((r[0], r[1]), (size.parse().unwrap(), 30.0), "{out}");
        assert!(r[2..].iter().all(|&v| v > 0.0), "{out}");
    }
    // perftest's inline default for DC: 150 bytes.
    let out = ok(lat, &["write", "-c", "dc", "--loopback", "-n", "5"]);
    assert!(out.contains("Max inline data: 150[B]"), "{out}");
    let bw = env!("CARGO_BIN_EXE_bw");
    let out = ok(
        bw,
        &[
            "send",
            "-c",
            "DC",
            "--loopback",
            "-q",
            "2",
            "-n",
            "100",
            "-s",
            "1024",
            "-b",
        ],
    );
    assert!(out.contains("Send Bidirectional BW Test"), "{out}");
    let row = out
        .lines()
        .skip_while(|l| !l.contains("#bytes"))
        .nth(1)
        .unwrap();
    let v: Vec<f64> = row.split_whitespace().map(|t| t.parse().unwrap()).collect();
    // perftest's #iterations of a bidirectional run: -n per QP, both QPs (as for RC, the
    // perftest_tests module); the bandwidth counts both directions.
    assert_eq!((v[0], v[1]), (1024.0, 200.0), "{out}");
    assert!(v[2..].iter().all(|&x| x > 0.0), "{out}");
}

#[test]
fn dc_across_processes_and_its_refusals() {
    let _heavy = crate::heavy();
    let lat = env!("CARGO_BIN_EXE_lat");
    let (server, client) = process::two_processes(
        Path::new(lat),
        &["send", "-c", "DC", "-n", "30", "-s", "100"],
        "Waiting for client to connect on TCP port ",
        Duration::from_secs(60),
    );
    let r = lat_row(&client);
    assert_eq!((r[0], r[1]), (100.0, 30.0), "{client}");
    // Each end's DCI reaches the DCT the other created.
    let word = |out: &str, after: &str| {
        let l = out.lines().find(|l| l.starts_with(" DC: ")).unwrap();
        let at = l.find(after).unwrap() + after.len();
        l[at..].split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(
        word(&client, "the peer's DCT "),
        word(&server, "); DCT "),
        "{server}\n{client}"
    );
    assert_eq!(word(&server, "the peer's DCT "), word(&client, "); DCT "));
    let bw = env!("CARGO_BIN_EXE_bw");
    let (_, client) = process::two_processes(
        Path::new(bw),
        &["write", "-c", "DC", "-q", "2", "-n", "100", "-s", "4096"],
        "Waiting for client to connect on TCP port ",
        Duration::from_secs(60),
    );
    assert!(client.contains("Connection type: DC"), "{client}");
    let check = crate::tools_lat_bw::check_exit;
    check(
        lat,
        &["write", "-c", "DC", "--path", "verbs", "--loopback"],
        2,
        "DC does not support old post send flow",
    );
    // A server started for RC and a DC client both stop, naming the connection types.
    let (server, client) = crate::tools_lat_bw::refused_pair(
        (lat, &["write", "-n", "5"]),
        (lat, &["write", "-c", "DC", "-n", "5"]),
        Duration::from_secs(8),
    );
    for err in [server, client] {
        assert!(err.contains("client -c DC, server -c RC"), "{err}");
    }
}

/// `-c DC` with perftest's exchange (`--perftest`) is refused before anything waits (exit 2):
/// the DC addresses travel over RC QPs of these tools, which stock perftest does not open.
#[test]
fn dc_with_perftests_exchange_is_refused_clearly() {
    for exe in [env!("CARGO_BIN_EXE_lat"), env!("CARGO_BIN_EXE_bw")] {
        let out = std::process::Command::new(exe)
            .args(["write", "-c", "DC", "--perftest", "-p", "1", "127.0.0.1"])
            .env_remove("RUST_LOG")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{exe}: {err}");
        assert!(
            err.contains("-c DC runs only between these tools"),
            "{exe}: {err}"
        );
    }
}

/// `-c DC` on `mlx5_0` through Debian's libibverbs and libmlx5 (the preload library's software
/// ConnectX): libmlx5 asks for CQE version 1, so a DCT's receive CQE carries the DCT's user
/// index in `srqn_uidx`, which no SRQ has — the CQ completes it on the DCT's SRQ by the DCT's
/// number (`mlx5_qp::DcTargets`). Before, the first SEND a DCT received ended the run with
/// "completion for QPN ..., which is not in the table". Every test of `lat`, and `bw` SENDs in
/// both directions over two DCIs, in loopback; and `lat send` as two processes, each DCI
/// reaching the other process's DCT.
#[test]
fn dc_through_rdma_core_receives_on_the_dct_srq() {
    use crate::mixed_pairs::{Emu, Scratch};
    let _heavy = crate::heavy();
    let s = Scratch::new("dc-rdma-core");
    let lat = env!("CARGO_BIN_EXE_lat");
    let bw = env!("CARGO_BIN_EXE_bw");
    let runs: [(&str, &[&str], &str); 5] = [
        (lat, &["send", "-s", "100"], " 100     30 "),
        (lat, &["write", "-s", "32"], " 32      30 "),
        (lat, &["read", "-s", "64"], " 64      30 "),
        (lat, &["atomic", "-s", "8"], " 8       30 "),
        (
            bw,
            &["send", "-q", "2", "-s", "1024", "-b"],
            " 1024       200 ",
        ),
    ];
    for (k, (exe, args, row)) in runs.into_iter().enumerate() {
        let mut a = args.to_vec();
        a.extend([
            "-c",
            "DC",
            "--loopback",
            "-n",
            if exe == bw { "100" } else { "30" },
        ]);
        a.extend(["-d", "mlx5_0"]);
        let end = Emu::start(Path::new(exe), &a, s.0.join(format!("{k}.report"))).finish();
        assert!(
            end.stdout.contains("Connection type: DC") && end.stdout.contains(row),
            "{exe} {a:?}:\n{}",
            end.stdout
        );
    }
    let args = ["send", "-c", "DC", "-n", "30", "-s", "100", "-d", "mlx5_0"];
    let mut a = args.to_vec();
    a.extend(["-p", "0"]);
    let mut server = Emu::start(Path::new(lat), &a, s.0.join("server.report"));
    let port = server.wait_line("Waiting for client to connect on TCP port ");
    let port = port
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut a = args.to_vec();
    a.extend(["-p", &port, "127.0.0.1"]);
    let client = Emu::start(Path::new(lat), &a, s.0.join("client.report")).finish();
    let server = server.finish();
    assert!(client.stdout.contains(" 100     30 "), "{}", client.stdout);
    assert!(
        server.stdout.contains("receiving here through one SRQ"),
        "{}",
        server.stdout
    );
}
