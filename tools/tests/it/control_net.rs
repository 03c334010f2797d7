//! perftest's flags for the control connection and the report's CPU column, end to end on the
//! software ConnectX: `--ipv6-addr` (the control connection over IPv6), `--bind_source_ip`
//! (the client's source address, the server's only listening address), their refusals, and
//! `--cpu_util` (perftest's `CPU_Util[%]` column of a `-D` run).

use mlx5_testkit::process::Proc;

use std::path::Path;
use std::time::Duration;

use crate::tools_lat_bw::check_exit;

const LAT: &str = env!("CARGO_BIN_EXE_lat");
const BW: &str = env!("CARGO_BIN_EXE_bw");
const READY: &str = "Waiting for client to connect on TCP port ";

/// A server with `server_args` and a client with `client_args` and the server's `address`
/// (its port appended); returns (server, client) stdout.
pub fn pair(
    tool: &str,
    server_args: &[&str],
    client_args: &[&str],
    address: &str,
) -> (String, String) {
    let mut server = Proc::spawn(Path::new(tool), &[&["-p", "0"], server_args].concat());
    let rest = server.wait_line(READY);
    let port = rest
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(port.parse::<u16>().is_ok(), "no port: {rest:?}");
    let client = Proc::spawn(
        Path::new(tool),
        &[&["-p", port.as_str()], client_args, &[address]].concat(),
    );
    let c = client.finish(Duration::from_secs(120));
    let s = server.finish(Duration::from_secs(120));
    (s, c)
}

/// The ` UDP link` banner line: where each software ConnectX binds its UDP socket (on the
/// control connection's local address).
fn udp_link(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with(" UDP link"))
        .unwrap_or_else(|| panic!("no UDP link line:\n{out}"))
}

fn ipv6_loopback_here() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

#[test]
fn the_control_connection_over_ipv6() {
    if !ipv6_loopback_here() {
        eprintln!("skipped: this host has no IPv6 loopback (::1)");
        return;
    }
    let _heavy = crate::heavy();
    let args = ["write", "-n", "40", "--ipv6-addr"];
    let (server, client) = pair(LAT, &args, &args, "::1");
    assert!(client.contains("t_typical[usec]"), "{client}");
    // Both software ConnectX bound their UDP sockets on the IPv6 control connection's address.
    for out in [&server, &client] {
        let l = udp_link(out);
        assert_eq!(l.matches("at UDP [::1]:").count(), 2, "{l}");
    }
}

#[test]
fn the_client_connects_from_the_source_address_and_the_server_listens_on_one() {
    let _heavy = crate::heavy();
    let (server, client) = pair(
        BW,
        &[
            "write",
            "-n",
            "40",
            "-s",
            "4096",
            "--bind_source_ip",
            "127.0.0.1",
        ],
        &[
            "write",
            "-n",
            "40",
            "-s",
            "4096",
            "--bind_source_ip",
            "127.0.0.2",
        ],
        "127.0.0.1",
    );
    assert!(client.contains("BW average"), "{client}");
    // The client's control connection left from 127.0.0.2: its UDP socket is bound there.
    let l = udp_link(&client);
    assert!(
        l.contains("software ConnectX 10.0.0.2 at UDP 127.0.0.2:")
            && l.contains("peer software ConnectX 10.0.0.1 at UDP 127.0.0.1:"),
        "{l}"
    );
    assert!(udp_link(&server).contains("at UDP 127.0.0.2:"), "{server}");
}

#[test]
fn control_connection_flags_that_cannot_work_are_refused() {
    for (args, needle) in [
        (
            &["write", "127.0.0.1", "--bind_source_ip", "::1"][..],
            "--bind_source_ip ::1: an IPv6 source address is for a control connection over \
             IPv6: add --ipv6-addr",
        ),
        (
            &[
                "write",
                "::1",
                "--ipv6-addr",
                "--bind_source_ip",
                "127.0.0.1",
            ][..],
            "--ipv6-addr makes the control connection IPv6",
        ),
        (
            &["write", "--loopback", "--ipv6-addr"][..],
            "--ipv6-addr: --loopback runs both ends in this process, with no control connection",
        ),
        (
            &["write", "--loopback", "--bind_source_ip", "127.0.0.1"][..],
            "--bind_source_ip: --loopback",
        ),
        (
            &["write", "--bind_source_ip", "0.0.0.0"][..],
            "not an address of one interface",
        ),
        (
            &["write", "::1", "-p", "1"][..],
            "::1 has no IPv4 address (it resolves to ::1): the control connection is IPv4; add \
             --ipv6-addr",
        ),
        // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no interface here has it.
        (
            &["write", "--bind_source_ip", "192.0.2.7", "-p", "0"][..],
            "--bind_source_ip 192.0.2.7: no interface of this host has that address",
        ),
        (
            &[
                "write",
                "127.0.0.1",
                "-p",
                "1",
                "--bind_source_ip",
                "192.0.2.7",
            ][..],
            "--bind_source_ip 192.0.2.7: the control connection cannot start from that address",
        ),
        (
            &["write", "--loopback", "--cpu_util"][..],
            "--cpu_util: the utilisation is taken over a run's measured window",
        ),
    ] {
        check_exit(LAT, args, 2, needle);
    }
}

/// The numbers of the row under the header that ends with `CPU_Util[%]`.
fn cpu_row(out: &str) -> Vec<f64> {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.ends_with("    CPU_Util[%]"))
        .unwrap_or_else(|| panic!("no CPU_Util[%] column:\n{out}"));
    lines[at + 1]
        .split_whitespace()
        .map(|t| t.parse().unwrap_or_else(|_| panic!("{t:?} in {out}")))
        .collect()
}

#[test]
fn cpu_util_adds_perftests_column_to_duration_runs() {
    let _heavy = crate::heavy();
    let out = Proc::spawn(
        Path::new(LAT),
        &["send", "--loopback", "-D", "2", "--cpu_util"],
    )
    .finish(Duration::from_secs(60));
    let r = cpu_row(&out);
    assert_eq!(r.len(), 5, "{out}");
    assert!(r[1] > 0.0 && (0.0..=100.0).contains(&r[4]), "{r:?}");
    // The row carries perftest's separator: a tab before the figure.
    assert!(out.lines().any(|l| l.contains("\t    ")), "{out:?}");
    let out = Proc::spawn(
        Path::new(BW),
        &["write", "--loopback", "-D", "2", "-s", "4096", "--cpu_util"],
    )
    .finish(Duration::from_secs(60));
    let r = cpu_row(&out);
    assert_eq!(r.len(), 6, "{out}");
    assert!(
        r[1] > 0.0 && r[3] > 0.0 && (0.0..=100.0).contains(&r[5]),
        "{r:?}"
    );
}

#[test]
fn a_duration_average_spans_the_window_not_its_completions() {
    // bw write -D with -n-sized completions moderated by -Q: few signaled completions fall in
    // the window. The average used to be taken between the first and last of them, and with one
    // inside the window it spanned nothing (6250000000000.00 MiB/s). Now: the window's span,
    // so the average cannot exceed what the iterations moved in it.
    let _heavy = crate::heavy();
    let out = Proc::spawn(
        Path::new(BW),
        &[
            "write",
            "--loopback",
            "-D",
            "3",
            "-f",
            "1",
            "-s",
            "65536",
            "-Q",
            "100",
        ],
    )
    .finish(Duration::from_secs(60));
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("MsgRate[Mpps]"))
        .unwrap_or_else(|| panic!("{out}"));
    let r: Vec<f64> = lines[at + 1]
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    // iterations × size over the 1-second window, in MiB/s.
    let expected = r[1] * 65536.0 / 1048576.0;
    assert!(
        (r[3] - expected).abs() <= expected * 0.01 + 0.01,
        "average {} for {} iterations in a 1 s window: {out}",
        r[3],
        r[1]
    );
}
