//! Between processes: each side has its own Fabric and device, the device bound to a UDP
//! socket on 127.0.0.1 with the other side as its peer, and RC traffic flows as it does
//! between two hosts running `ibv_rc_pingpong`: SEND ping / SEND pong, then an RDMA WRITE, a
//! READ back and a masked fetch-and-add (whose operands travel in the frame's trailer).
//!
//! - `two_fabrics_over_udp_threaded_and_deterministic`: the server runs on a thread with a
//!   threaded fabric, the client steps its fabric itself (deterministic mode).
//! - `two_processes_over_udp`: the test binary starts itself as the server process
//!   (`MLX5_SIM_UDP_PEER=1`, running `udp_peer_process`); the two exchange QPNs and UDP
//!   addresses over the child's stdin/stdout.
//! - `a_late_fabric_reads_the_ack_before_its_timer_fires`: a fabric stepped by hand as its
//!   thread steps when it wakes late (`Fabric::step_at`) takes the ACK waiting in its socket
//!   before its ACK timer fires.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::ops::*;
use common::*;
use mlx5_cq::*;
use mlx5_hw::{Gid, Mtu, QpType};
use mlx5_sim::{DeviceConfig, Fabric};
use mlx5_wqe::*;

const SERVER_IP: [u8; 4] = [10, 1, 0, 2];
const CLIENT_IP: [u8; 4] = [10, 1, 0, 1];
const PINGS: u32 = 20;
const ENV: &str = "MLX5_SIM_UDP_PEER";

/// What one side tells the other: its UDP address, QPN, and a buffer the peer may write,
/// read and use for atomics.
#[derive(Clone, Copy, Debug)]
struct Info {
    udp: SocketAddr,
    qpn: u32,
    addr: u64,
    rkey: u32,
}

impl Info {
    fn line(&self) -> String {
        format!(
            "PEER {} {} {} {}\n",
            self.udp, self.qpn, self.addr, self.rkey
        )
    }
    /// The info in a line (libtest may have printed `test ... ` before it on the same line).
    fn parse(line: &str) -> Option<Info> {
        let at = line.find("PEER ")?;
        let mut it = line[at + 5..].split_whitespace();
        Some(Info {
            udp: it.next()?.parse().ok()?,
            qpn: it.next()?.parse().ok()?,
            addr: it.next()?.parse().ok()?,
            rkey: it.next()?.parse().ok()?,
        })
    }
}

/// One side: a fabric with one device bound to UDP, an RC QP and 64 KiB of memory.
struct End {
    fabric: Fabric,
    side: Side,
    mem: Mem,
    opts: Opts,
}

impl End {
    fn new(ip: [u8; 4]) -> End {
        let fabric = Fabric::new();
        let dev = fabric.add_device(DeviceConfig::new(ip).mtu(Mtu::Mtu4096));
        let mut opts = Opts::new(QpType::Rc);
        opts.timeout = 12; // 16.8 ms: room for a scheduler hiccup between processes
        let side = side(&dev, &opts, None);
        let mem = Mem::new(&dev, side.pd, 65536, opts.access);
        End {
            fabric,
            side,
            mem,
            opts,
        }
    }

    fn bind(&self) -> SocketAddr {
        self.side.dev.bind_udp("127.0.0.1:0").expect("bind UDP")
    }

    fn info(&self, udp: SocketAddr) -> Info {
        Info {
            udp,
            qpn: self.side.qp.qpn(),
            addr: self.mem.addr(),
            rkey: self.mem.rkey(),
        }
    }

    /// Connect to the peer (both sides send from PSN 0x100, like a fixed pingpong PSN).
    fn connect(&self, peer_ip: [u8; 4], peer: &Info) {
        self.side.dev.add_udp_peer(peer_ip, peer.udp).unwrap();
        let o = &self.opts;
        modify(&self.side, init_attr(o));
        modify(
            &self.side,
            rtr_attr(o, peer.qpn, Gid::from_ipv4(peer_ip), 0x100),
        );
        modify(&self.side, rts_attr(o, 0x100));
    }

    /// Poll `cq` (0 send, 1 receive) until a CQE arrives; in deterministic mode the caller's
    /// fabric is stepped and its clock moved along with the wall clock.
    fn wait(&mut self, recv: bool, deterministic: bool) -> Cqe64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if deterministic {
                self.fabric.advance(Duration::from_micros(20));
            }
            let c = if recv {
                self.side.rcq.poll()
            } else {
                self.side.scq.poll()
            };
            if let Some(c) = c {
                return c;
            }
            assert!(Instant::now() < deadline, "no completion within 20 s");
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// The server: answers each ping with a pong, then waits for `bye` and checks what the client
/// wrote into its memory.
fn server(tell: impl FnOnce(Info), hear: impl FnOnce() -> Info, bye: impl FnOnce()) {
    let mut s = End::new(SERVER_IP);
    let udp = s.bind();
    for k in 0..PINGS as usize {
        s.side.qp.post_recv(&[s.mem.sge(k * 64, 64)]);
    }
    tell(s.info(udp));
    let peer = hear();
    s.connect(CLIENT_IP, &peer);
    let _thread = s.fabric.start_thread();
    for k in 0..PINGS as usize {
        let r = s.wait(true, false);
        assert_eq!(outcome(&r), (CQE_RESP_SEND, 0, k as u16));
        let ping = s.mem.read(k * 64, r.byte_cnt() as usize);
        assert_eq!(ping, format!("ping {k}").into_bytes());
        let pong = format!("pong {k}").into_bytes();
        s.mem.write(4096 + k * 64, &pong);
        let off = 4096 + k * 64;
        let idx = send(&mut s.side.qp, &s.mem, off, pong.len() as u32);
        assert_eq!(outcome(&s.wait(false, false)), (CQE_REQ, 0, idx));
    }
    bye();
    // The client's WRITE and masked fetch-and-add landed.
    assert_eq!(s.mem.read(8192, 12), b"written over");
    assert_eq!(s.mem.read(16384, 8), 0x0000_0001_0000_00ffu64.to_ne_bytes());
}

/// The client: pings, then WRITE, READ back, masked fetch-and-add; deterministic mode.
fn client(tell: impl FnOnce(Info), hear: impl FnOnce() -> Info, bye: impl FnOnce()) {
    let mut c = End::new(CLIENT_IP);
    let udp = c.bind();
    for k in 0..PINGS as usize {
        c.side.qp.post_recv(&[c.mem.sge(k * 64, 64)]);
    }
    let peer = hear();
    tell(c.info(udp));
    c.connect(SERVER_IP, &peer);
    for k in 0..PINGS as usize {
        let ping = format!("ping {k}").into_bytes();
        c.mem.write(4096 + k * 64, &ping);
        let idx = send(&mut c.side.qp, &c.mem, 4096 + k * 64, ping.len() as u32);
        assert_eq!(outcome(&c.wait(false, true)), (CQE_REQ, 0, idx));
        let r = c.wait(true, true);
        assert_eq!(outcome(&r), (CQE_RESP_SEND, 0, k as u16));
        assert_eq!(
            c.mem.read(k * 64, r.byte_cnt() as usize),
            format!("pong {k}").into_bytes()
        );
    }
    // WRITE into the server, READ it back.
    c.mem.write(20000, b"written over");
    let (ra, rk) = (peer.addr + 8192, peer.rkey);
    let (ll, la) = (c.mem.lkey(), c.mem.addr());
    let w = c
        .side
        .qp
        .post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(ra, rk)).unwrap();
            w.push(&DataSeg::new(12, ll, la + 20000)).unwrap();
        });
    assert_eq!(outcome(&c.wait(false, true)), (CQE_REQ, 0, w));
    let r = c.side.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push(&DataSeg::new(12, ll, la + 30000)).unwrap();
    });
    assert_eq!(outcome(&c.wait(false, true)), (CQE_REQ, 0, r));
    assert_eq!(c.mem.read(30000, 12), b"written over");
    // Masked fetch-and-add twice on two 32-bit fields of one word (boundary at bit 31): the
    // low field wraps without carrying into the high one, which proves the operands crossed.
    let ra = peer.addr + 16384;
    for add in [0x0000_0001_0000_0100u64, 0x0000_0000_ffff_ffffu64] {
        let f = c.side.qp.post(
            OPCODE_ATOMIC_MASKED_FA,
            OPMOD_EXT_ATOMIC_64,
            CTRL_CQ_UPDATE,
            0,
            |w| {
                w.push(&RaddrSeg::new(ra, rk)).unwrap();
                w.push(&MaskedFa64Seg::new(add, 1 << 31)).unwrap();
                w.push(&DataSeg::new(8, ll, la + 40000)).unwrap();
            },
        );
        assert_eq!(outcome(&c.wait(false, true)), (CQE_REQ, 0, f));
    }
    assert_eq!(
        c.mem.read(40000, 8),
        0x0000_0001_0000_0100u64.to_ne_bytes(),
        "the second fetch-add saw the first"
    );
    bye();
    assert!(c.fabric.driver_bugs().is_empty());
    assert_eq!(c.fabric.malformed_frames(), 0);
}

#[test]
fn two_fabrics_over_udp_threaded_and_deterministic() {
    let (to_client, from_server) = mpsc::channel();
    let (to_server, from_client) = mpsc::channel();
    let (bye_tx, bye_rx) = mpsc::channel::<()>();
    let srv = std::thread::spawn(move || {
        server(
            |i| to_client.send(i).unwrap(),
            || from_client.recv().unwrap(),
            || bye_rx.recv().unwrap(),
        )
    });
    client(
        |i| to_server.send(i).unwrap(),
        || from_server.recv().unwrap(),
        || bye_tx.send(()).unwrap(),
    );
    srv.join().expect("server thread");
}

/// The server half of `two_processes_over_udp`; does nothing unless started by it.
#[test]
fn udp_peer_process() {
    if std::env::var(ENV).is_err() {
        return;
    }
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let wait = Duration::from_secs(20);
    server(
        |i| {
            let mut out = std::io::stdout();
            out.write_all(i.line().as_bytes()).unwrap();
            out.flush().unwrap();
        },
        || Info::parse(&rx.recv_timeout(wait).unwrap_or_default()).expect("client info"),
        || {
            let _ = rx.recv_timeout(wait);
        },
    );
}

#[test]
fn two_processes_over_udp() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "udp::udp_peer_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the server process");
    let child_in = child.stdin.take().unwrap();
    let child_out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in child_out.lines().map_while(Result::ok) {
            if let Some(i) = Info::parse(&l) {
                let _ = tx.send(i);
            }
        }
    });
    let child_in = std::cell::RefCell::new(child_in);
    let say = |line: &[u8]| {
        let mut w = child_in.borrow_mut();
        w.write_all(line).unwrap();
        w.flush().unwrap();
    };
    client(
        |i| say(i.line().as_bytes()),
        || {
            rx.recv_timeout(Duration::from_secs(20))
                .expect("server info")
        },
        || say(b"BYE\n"),
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "server process: {status}");
}

/// A fabric thread that ran late — descheduled for twenty ACK timeouts while the peer's ACK
/// waited in its socket — receives that ACK before it fires the timer it answers
/// (`Fabric::step_at`, what the thread does each pass): the WRITE completes without a
/// timeout or a retransmission. Were the timers fired first (a step at the late time, then
/// the socket read), the requester would count a local ACK timeout and resend. Both ends are
/// stepped by hand, the ACK-timeout floor between processes off (the hardware timer).
#[test]
fn a_late_fabric_reads_the_ack_before_its_timer_fires() {
    let mut c = End::new(CLIENT_IP);
    let s = End::new(SERVER_IP);
    for e in [&c, &s] {
        e.fabric.set_remote_ack_timeout_floor(Duration::ZERO);
    }
    let (cu, su) = (c.bind(), s.bind());
    let (ci, si) = (c.info(cu), s.info(su));
    c.connect(SERVER_IP, &si);
    s.connect(CLIENT_IP, &ci);
    // `opts.timeout` 12: 4.096 µs << 12, the local ACK timeout (IBTA Vol 1 §9.7.6.1.3).
    let ack_timeout = Duration::from_nanos(4096 << 12);

    c.mem.write(20000, b"late but ok");
    let (ll, la) = (c.mem.lkey(), c.mem.addr());
    let w = c
        .side
        .qp
        .post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(si.addr + 8192, si.rkey)).unwrap();
            w.push(&DataSeg::new(11, ll, la + 20000)).unwrap();
        });
    // The request leaves; the server takes it and sends its ACK (loopback UDP: in the
    // client's socket once sent).
    c.fabric.run_until_idle();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.side.dev.counter("rx_write_requests") == 0 {
        assert!(Instant::now() < deadline, "the server never got the WRITE");
        std::thread::sleep(Duration::from_millis(1));
        s.fabric.run_until_idle();
    }
    assert_eq!(s.mem.read(8192, 11), b"late but ok");
    assert!(c.side.scq.poll().is_none(), "no ACK read yet");

    // The client's fabric wakes twenty timeouts late.
    let late = c.fabric.now() + 20 * ack_timeout;
    let mut steps = 0;
    while c.fabric.step_at(late) {
        steps += 1;
        assert!(steps < 1000, "the late pass never went idle");
    }
    assert_eq!(outcome(&c.wait(false, true)), (CQE_REQ, 0, w));
    assert_eq!(c.side.dev.counter("local_ack_timeout_err"), 0, "a timeout");
    s.fabric.run_until_idle();
    assert_eq!(s.side.dev.counter("duplicate_request"), 0, "a resend");
    assert_eq!(s.side.dev.counter("rx_write_requests"), 1);
}
