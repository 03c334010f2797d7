//! perftest 4.5 (Debian's `perftest`) between two processes: the latency tests print their
//! `t_min ... t_avg` table and the bandwidth tests their `BW average` table for the iterations
//! asked.

use crate::pingpong::pair;

/// The table's data row: the line after the header containing `head`, starting with `bytes`
/// and `iters`; its numbers.
fn row(out: &str, head: &str, bytes: u32, iters: u32) -> Vec<f64> {
    let mut lines = out.lines().skip_while(|l| !l.contains(head));
    assert!(lines.next().is_some(), "no table with '{head}':\n{out}");
    let r = lines
        .next()
        .unwrap_or_else(|| panic!("a table without a row:\n{out}"));
    let v: Vec<f64> = r
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(f64::NAN))
        .collect();
    assert!(
        v.len() >= 3 && v[0] == bytes as f64 && v[1] == iters as f64,
        "row '{r}' is not {bytes} bytes × {iters} iterations"
    );
    v
}

/// The scratch directory's name of a run: the program and its extra flags (two tests of one
/// program run at the same time).
fn scratch_name(program: &str, extra: &[&str]) -> String {
    let mut n = program.to_string();
    for x in extra {
        n.push('_');
        n.extend(x.chars().filter(char::is_ascii_alphanumeric));
    }
    n
}

fn lat(program: &str, bytes: u32, extra: &[&str]) {
    let n = "200";
    let s = bytes.to_string();
    let mut args = vec!["-n", n, "-s", &s];
    args.extend_from_slice(extra);
    let p = pair(&scratch_name(program, extra), program, &args, &[]);
    // Both ends measure a ping-pong (WRITE, SEND); READ and atomics only the client.
    let mut ends = vec![&p.client.stdout];
    if program == "ib_write_lat" || program == "ib_send_lat" {
        ends.push(&p.server.stdout);
    }
    for o in ends {
        let v = row(o, "t_avg[usec]", bytes, 200);
        // t_min ≤ t_typical, t_avg ≤ t_max, every one a positive time.
        assert!(
            v[2] > 0.0 && v[2] <= v[3] && v[2] <= v[5] && v[5] <= v[3],
            "{v:?}"
        );
    }
}

fn bw(program: &str, extra: &[&str]) {
    let mut args = vec!["-n", "200", "-s", "4096"];
    args.extend_from_slice(extra);
    let p = pair(&scratch_name(program, extra), program, &args, &[]);
    let v = row(&p.client.stdout, "BW average[MB/sec]", 4096, 200);
    assert!(v[3] > 0.0, "no bandwidth: {v:?}");
    assert!(
        p.server.stdout.contains("BW average[MB/sec]"),
        "server:\n{}",
        p.server.stdout
    );
}

#[test]
fn ib_write_lat() {
    lat("ib_write_lat", 2, &[]);
}

#[test]
fn ib_send_lat() {
    lat("ib_send_lat", 2, &[]);
}

#[test]
fn ib_read_lat() {
    lat("ib_read_lat", 2, &[]);
}

#[test]
fn ib_atomic_lat() {
    lat("ib_atomic_lat", 8, &[]);
}

#[test]
fn ib_write_bw() {
    bw("ib_write_bw", &[]);
}

#[test]
fn ib_send_bw() {
    bw("ib_send_bw", &[]);
}

#[test]
fn ib_read_bw() {
    bw("ib_read_bw", &[]);
}

/// XRC (`-c XRC`): perftest connects its initiators and targets with RC's masks, whose bits
/// the kernel drops for XRC QPs before its state table sees them (`modify_qp_mask`): without
/// that the initiator's RTR was refused (EINVAL, "Failed to modify QP to RTR").
#[test]
fn ib_send_lat_xrc() {
    lat("ib_send_lat", 2, &["-c", "XRC"]);
}

#[test]
fn ib_write_bw_xrc() {
    bw("ib_write_bw", &["-c", "XRC"]);
}

/// `--use-srq`: the server's receives on a shared receive queue.
#[test]
fn ib_send_bw_srq() {
    bw("ib_send_bw", &["--use-srq"]);
}

/// `--use-srq` on the latency test: both ends receive through their SRQ (perftest creates it
/// on both sides of a latency run, `srq_exists`).
#[test]
fn ib_send_lat_srq() {
    lat("ib_send_lat", 2, &["--use-srq"]);
}

/// SEND over XRC: the initiator addresses the peer's XRC SRQ by the SRQN of its endpoint
/// message, and the target QP receives through that SRQ.
#[test]
fn ib_send_bw_xrc() {
    bw("ib_send_bw", &["-c", "XRC"]);
}

/// UD multicast between two processes with no peer named (`MLX5SIM_PEERS` unset): both ends
/// attach their QP to one IPv4 group (`-g`, with `-M` the IPv4-mapped MGID: perftest's default
/// group is IPv6, which the software ConnectX does not model) and send to it; the frames cross
/// as real IP multicast on loopback. Each end receives the other's datagrams and, as its QP is
/// attached and does not block multicast loopback, its own.
#[test]
fn ib_send_lat_multicast_without_peers() {
    // A group of this run (239/8: organisation-local scope), so parallel runs do not meet.
    let pid = std::process::id();
    let mgid = format!(
        "0:0:0:0:0:0:0:0:0:0:255:255:239:77:{}:{}",
        (pid >> 8) & 0xff,
        pid & 0xff
    );
    let p = pair(
        "ib_send_lat-mcast",
        "ib_send_lat",
        &["-c", "UD", "-g", "-M", &mgid, "-n", "100", "-s", "2"],
        &[],
    );
    let group = format!("255:255:239:77:{:02}:{:02}", (pid >> 8) & 0xff, pid & 0xff);
    for (end, o, r) in [
        ("server", &p.server.stdout, &p.server_report),
        ("client", &p.client.stdout, &p.client_report),
    ] {
        row(o, "t_avg[usec]", 2, 100);
        assert!(
            o.contains("QPN 0xffffff")
                && o.contains(&format!("MGID: 00:00:00:00:00:00:00:00:00:00:{group}")),
            "{end}:\n{o}"
        );
        let n = |k: &str| -> u64 { r[k].parse().unwrap() };
        assert_eq!(n("port_xmit_packets"), 100, "{end}: {r:?}");
        assert_eq!(
            n("port_rcv_packets"),
            200,
            "{end}: the other's 100 and its own: {r:?}"
        );
    }
}
