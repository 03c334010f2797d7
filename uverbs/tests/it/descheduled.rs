//! A software ConnectX is a thread of its program's process, and a process can stop running
//! for longer than an ACK timeout: on a loaded machine, or here with SIGSTOP. A ConnectX never
//! stops; the emulation must not turn a stopped process into lost frames. Nothing is lost in
//! these runs (no fault rule): each must complete every iteration with no transport retry
//! exhausted (`docs/software-connectx.md`, "Timers between processes").

use std::time::{Duration, Instant};

use crate::support::{report, start, tcp_port, wait_listen, Output, Run, Scratch};

/// Bound on one program's run.
const LIMIT: Duration = Duration::from_secs(120);

/// How long a process is stopped: more than eight of perftest's and ibv_rc_pingpong's 67 ms
/// ACK timeouts (`timeout` 14, `retry_cnt` 7), which a ConnectX peer would have taken for a
/// dead path; less than eight of the default floor between processes (250 ms).
const STOP: Duration = Duration::from_millis(1500);

/// How long the end to be stopped runs between two looks at its socket while the run starts
/// (its part of perftest's exchange and connection takes a few of these): short against a
/// run's data phase ([`ITERS`]), which must not begin and end within one on a loaded machine
/// (CI met one that did, with 600 iterations and 100 ms).
const RESUMED: Duration = Duration::from_millis(20);

/// The iterations of the 16 KiB WRITE runs: about 0.4 s of data phase for the debug build on
/// an idle machine.
const ITERS: &str = "1200";

/// Which end is stopped.
#[derive(Clone, Copy, PartialEq)]
enum Stopped {
    Server,
    Client,
}

/// Bytes waiting in the receive queue of the UDP socket bound to `ip:port` (`/proc/net/udp`),
/// if there is such a socket.
fn udp_backlog(ip: [u8; 4], port: u16) -> Option<u64> {
    // local_address is the address as a native-endian hex u32 and the port in hex.
    let local = format!("{:08X}:{port:04X}", u32::from_ne_bytes(ip));
    let t = std::fs::read_to_string("/proc/net/udp").ok()?;
    t.lines().skip(1).find_map(|l| {
        let c: Vec<&str> = l.split_whitespace().collect();
        if c.len() > 4 && c[1] == local {
            let (_, rx) = c[4].split_once(':')?;
            u64::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

/// A free UDP port for the devices' sockets (on the two devices' addresses).
fn udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("a free port");
    s.local_addr().expect("bound").port()
}

/// Run `program args` as server and client (launcher options `opts` on both), and stop `who`
/// for [`STOP`] while frames are coming to it: stopped for 100 ms at a time, let run for
/// [`RESUMED`] between, until its device's socket holds frames it has not read (the run is
/// under way), then kept stopped. Returns both outputs and reports.
fn run_stopping(
    name: &str,
    program: &str,
    args: &[&str],
    opts: &[&str],
    who: Stopped,
) -> [(Output, std::collections::BTreeMap<String, String>); 2] {
    let s = Scratch::new(name);
    let port = tcp_port();
    let p = port.to_string();
    let udp = udp_port();
    // Addresses of this run (the process id), so parallel runs do not meet.
    let id = std::process::id();
    let ips = [
        [127, 76, (id >> 8) as u8, id as u8],
        [127, 75, (id >> 8) as u8, id as u8],
    ];
    let (sr, cr) = (s.path("server.report"), s.path("client.report"));
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-p", &p]);
    let opts_with = |r: &std::path::Path, ip: [u8; 4]| {
        let mut o: Vec<String> = opts.iter().map(|x| x.to_string()).collect();
        o.extend(["--report".into(), r.display().to_string()]);
        o.extend(["--port".into(), udp.to_string()]);
        o.extend(["--ip".into(), std::net::Ipv4Addr::from(ip).to_string()]);
        o
    };
    let so = opts_with(&sr, ips[0]);
    let so: Vec<&str> = so.iter().map(String::as_str).collect();
    let mut server = start(&so, program, &a, &[]);
    wait_listen(port, LIMIT);
    let co = opts_with(&cr, ips[1]);
    let co: Vec<&str> = co.iter().map(String::as_str).collect();
    let mut ca = a.clone();
    ca.push("127.0.0.1");
    let mut client = start(&co, program, &ca, &[]);
    let (target, ip): (&mut Run, _) = if who == Stopped::Server {
        (&mut server, ips[0])
    } else {
        (&mut client, ips[1])
    };
    let pid = target.id() as libc::pid_t;
    let end = Instant::now() + LIMIT;
    loop {
        assert!(
            target.running() && Instant::now() < end,
            "{program}: the run ended before frames came to the stopped end; ask for more \
             iterations"
        );
        // SAFETY: kill(2) on the process this test started and has not reaped (running()).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        std::thread::sleep(Duration::from_millis(100));
        if udp_backlog(ip, udp).is_some_and(|n| n > 0) {
            break;
        }
        // SAFETY: as above; the process is stopped, not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        std::thread::sleep(RESUMED);
    }
    std::thread::sleep(STOP);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let what = format!(
        "{program} {} with the {} stopped",
        args.join(" "),
        match who {
            Stopped::Server => "server",
            Stopped::Client => "client",
        }
    );
    let client = client.finish(LIMIT).ok(&format!("{what} (client)"));
    let server = server.finish(LIMIT).ok(&format!("{what} (server)"));
    let out = [(server, report(&sr)), (client, report(&cr))];
    for (end, (_, r)) in ["server", "client"].iter().zip(&out) {
        assert_eq!(r["driver_bugs"], "0", "{what}: the {end}'s report: {r:?}");
        assert_eq!(
            r["req_transport_retries_exceeded"], "0",
            "{what}: the {end}'s report: {r:?}"
        );
        assert_eq!(r["fault_dropped"], "0", "{what}: the {end}'s report: {r:?}");
    }
    out
}

/// The responder of a bandwidth run is stopped for 1.5 s: the requester's ACK timer expires
/// several times (the floor between processes is 250 ms), never eight times in a row, and the
/// run completes every iteration (perftest fails on an error completion and waits for every
/// one it posted). With the 67 ms timer a ConnectX applies (`--ack-floor-ms 0`), the same run
/// ended in RETRY_EXC_ERR half a second into the stop.
#[test]
fn a_stopped_peer_costs_timeouts_not_the_connection() {
    let [(_, _), (c, cr)] = run_stopping(
        "stopped-peer",
        "ib_write_bw",
        &["-s", "16384", "-n", ITERS],
        &[],
        Stopped::Server,
    );
    assert!(
        c.stdout.contains(&format!("16384      {ITERS}")),
        "no result row for {ITERS} iterations:\n{}",
        c.stdout
    );
    // The stop was felt: the client's requester waited out its timer.
    let timeouts: u64 = cr["local_ack_timeout_err"].parse().unwrap();
    assert!(timeouts >= 1, "the stop did not reach the run: {cr:?}");
}

/// The requester's own process is stopped for 1.5 s in the middle of a bandwidth run, with the
/// floor off (the timer `timeout` asks for, as on a ConnectX): the ACKs that came meanwhile
/// wait in its socket and are taken before its timer is looked at, and the run completes. (It
/// completed before the fabric thread received first too, after many more spurious timeouts:
/// this guards the outcome, `docs/software-connectx.md` has the counts.)
#[test]
fn a_stopped_requester_takes_its_acks_before_its_timer() {
    let [(_, _), (c, _)] = run_stopping(
        "stopped-requester",
        "ib_write_bw",
        &["-s", "16384", "-n", ITERS],
        &["--ack-floor-ms", "0"],
        Stopped::Client,
    );
    assert!(
        c.stdout.contains(&format!("16384      {ITERS}")),
        "no result row for {ITERS} iterations:\n{}",
        c.stdout
    );
}
