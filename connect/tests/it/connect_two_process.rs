//! Two processes, each with its own software ConnectX, connect and talk the way two hosts
//! running `ibv_rc_pingpong` do — through the project's real connection code.
//!
//! The test (the client, 10.0.0.1) starts this test binary again as the server (10.0.0.2):
//! the `#[ignore]`d peer test named on its command line, which acts only when
//! [`PEER_ENV`](two_process_support::PEER_ENV) carries the client's UDP address. Each process
//! has its own `Fabric` running on its own thread, and its device bound to an ephemeral UDP
//! port on 127.0.0.1: frames for the other IPv4 address travel as datagrams between the two
//! sockets. The server prints its UDP address and the ephemeral TCP port it listens on; the
//! client then runs `Connection::connect` against `Connection::accept` (endpoint exchange,
//! RTR/RTS with the peer's PSN, receives posted before READY). Then:
//!
//! - RC: [`ROUNDS`] SEND ping / SEND pong of 1 to 8192 bytes (multi-packet at the 1024-byte
//!   path MTU) checked byte for byte; an RDMA WRITE with immediate each way into the buffer
//!   the peer announced in its endpoint message; an RDMA READ of the peer's buffer each way;
//!   a last SEND from the server, the client's `close` (ABORT Shutdown), which the server
//!   must see through `poll_control`.
//! - UD: datagrams each way through the address handle the connection created, with the
//!   40-byte GRH area and the source QPN checked.
//!
//! Both processes fail on any driver bug the software ConnectX reported; the server reports
//! its verdict through its exit status and a verdict line, which the client requires. Every
//! wait has a deadline, and the server process is killed if the client test fails.

use crate::two_process_support;

use mlx5_connect::{AbortCode, ConnectParams, Connection, ControlEvent, RemoteBuffer};
use mlx5_hw::{Device, Mtu, QpState, QpType};
use mlx5_qp::{RemoteAddr, SendWr, Wc, WcFlags, WcOpcode};
use std::net::{SocketAddr, TcpListener};
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};
use two_process_support::*;

/// The client's (this test's) device.
const CLIENT_IP: [u8; 4] = [10, 0, 0, 1];
/// The server's (the peer process's) device.
const SERVER_IP: [u8; 4] = [10, 0, 0, 2];
/// Deadline of each single wait: a completion, a line from the peer, a control message.
const STEP: Duration = Duration::from_secs(10);
/// RC ping-pong round trips.
const ROUNDS: usize = 40;
/// RC message sizes, cycled: around the 1024-byte path MTU and up to a full receive slot.
const RC_LENS: [usize; 10] = [1, 8, 63, 64, 1000, 1023, 1024, 1025, 4096, RECV_SLOT];
/// UD round trips.
const UD_ROUNDS: usize = 24;
/// UD datagram sizes: a UD message is one packet, at most the path MTU.
const UD_LENS: [usize; 4] = [1, 64, 1000, 1024];
/// Bytes of each RDMA WRITE with immediate (10 packets).
const WRITE_LEN: usize = 10_000;
/// Bytes of each RDMA READ (12 response packets).
const READ_LEN: usize = 12_000;
/// The immediates of the client's and the server's WRITE.
const IMM: [u32; 2] = [0xc11e_0001, 0x5e7e_0002];
/// Pattern seeds: pings, pongs, WRITE payloads (client, server), READ sources (client, server).
const PING: u32 = 0x1000;
const PONG: u32 = 0x2000;
const WRITE_SEED: [u32; 2] = [0x3001, 0x3002];
const READ_SEED: [u32; 2] = [0x4001, 0x4002];
/// The server's last message before the client shuts down.
const BYE: &[u8] = b"bye";

/// Which end of the pair; indexes the per-role constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Client = 0,
    Server = 1,
}

fn params(end: &End) -> ConnectParams {
    {
        let mut p = ConnectParams::default();
        p.io_timeout = STEP;
        p
    }
    .with_buffer(end.buf.remote())
}

// ---------------------------------------------------------------------------------------------
// Data-path steps shared by both roles.

/// Post a signaled SEND of `data` (staged in the buffer) and wait for its completion.
fn send(end: &mut End, wr_id: u64, data: &[u8], ud: Option<&mlx5_qp::UdDest>) {
    end.buf.write(STAGE_OFF, data);
    let sge = [end.buf.sge(STAGE_OFF, data.len())];
    let wr = SendWr::send(wr_id).sges(&sge).signaled();
    let wr = match ud {
        Some(d) => wr.ud(d),
        None => wr,
    };
    end.qp.post(&wr).expect("post SEND");
    sent(end, wr_id, WcOpcode::Send, "SEND");
}

/// Wait for the completion of the send WR `wr_id`.
fn sent(end: &mut End, wr_id: u64, opcode: WcOpcode, what: &str) -> Wc {
    let w = end.next(what, STEP, |w| w.opcode() == opcode && w.wr_id() == wr_id);
    assert_eq!(w.qp_num(), end.qp_ref.qpn);
    w
}

/// Wait for the next receive completion, check its opcode, its length and that its slot holds
/// `expect` after `skip` bytes (the GRH area of a UD receive); repost the slot.
fn received(end: &mut End, what: &str, skip: usize, expect: &[u8]) -> Wc {
    let w = end.next(what, STEP, |w| {
        matches!(w.opcode(), WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    });
    assert_eq!(w.opcode(), WcOpcode::Recv, "{what}: {w:?}");
    assert_eq!(w.byte_len() as usize, skip + expect.len(), "{what}: {w:?}");
    let slot = w.wr_id() as usize;
    assert!(slot < RECV_SLOTS, "{what}: unknown receive {w:?}");
    let got = end.buf.bytes(slot * RECV_SLOT + skip, expect.len());
    if got != expect {
        let at = got.iter().zip(expect).position(|(a, b)| a != b);
        panic!(
            "{what}: the payload differs from byte {at:?} on ({} bytes)",
            expect.len()
        );
    }
    end.repost(w.wr_id());
    w
}

/// This role's RDMA WRITE with immediate into the peer's buffer, then the peer's into ours.
fn write_imm_exchange(end: &mut End, role: Role, peer: &RemoteBuffer) {
    let me = role as usize;
    let outgoing = |end: &mut End| {
        let data = pattern(WRITE_SEED[me], WRITE_LEN);
        end.buf.write(STAGE_OFF, &data);
        let sge = [end.buf.sge(STAGE_OFF, WRITE_LEN)];
        let to = RemoteAddr::new(peer.addr + WRITE_DST_OFF as u64, peer.rkey);
        end.qp
            .post(&SendWr::write_imm(100, to, IMM[me]).sges(&sge).signaled())
            .expect("post WRITE_IMM");
        sent(end, 100, WcOpcode::RdmaWrite, "WRITE_IMM");
    };
    // The client writes first, the server answers: as ping-pong, one message in flight.
    if role == Role::Client {
        outgoing(end);
        incoming_write_imm(end, role);
    } else {
        incoming_write_imm(end, role);
        outgoing(end);
    }
}

/// Receive the peer's WRITE_IMM and check its immediate and the bytes it left in our buffer
/// (and that the bytes around it are untouched).
fn incoming_write_imm(end: &mut End, role: Role) {
    let peer = 1 - role as usize;
    let w = end.next("the peer's WRITE_IMM", STEP, |w| {
        matches!(w.opcode(), WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    });
    assert_eq!(w.opcode(), WcOpcode::RecvRdmaWithImm, "{w:?}");
    assert!(w.flags().contains(WcFlags::WITH_IMM), "{w:?}");
    assert_eq!(w.imm_data(), IMM[peer], "{w:?}");
    assert_eq!(w.byte_len() as usize, WRITE_LEN, "{w:?}");
    end.repost(w.wr_id());
    let got = end.buf.bytes(WRITE_DST_OFF, WRITE_LEN);
    assert!(
        got == pattern(WRITE_SEED[peer], WRITE_LEN).as_slice(),
        "the WRITE_IMM payload differs"
    );
    assert_eq!(
        end.buf.bytes(WRITE_DST_OFF - 8, 8),
        &[0; 8],
        "written before"
    );
    assert_eq!(
        end.buf.bytes(WRITE_DST_OFF + WRITE_LEN, 8),
        &[0; 8],
        "written past"
    );
}

/// RDMA READ the peer's READ source into our buffer and check it byte for byte.
fn read_peer(end: &mut End, role: Role, peer: &RemoteBuffer) {
    let from = RemoteAddr::new(peer.addr + READ_SRC_OFF as u64, peer.rkey);
    let sge = [end.buf.sge(READ_DST_OFF, READ_LEN)];
    end.qp
        .post(&SendWr::read(200, from).sges(&sge).signaled())
        .expect("post READ");
    let w = sent(end, 200, WcOpcode::RdmaRead, "READ");
    assert_eq!(w.byte_len() as usize, READ_LEN, "{w:?}");
    let want = pattern(READ_SEED[1 - role as usize], READ_LEN);
    assert!(
        end.buf.bytes(READ_DST_OFF, READ_LEN) == want.as_slice(),
        "the READ brought other bytes than the peer's buffer holds"
    );
}

/// The peer's buffer as announced in its endpoint message.
fn peer_buffer(conn: &Connection) -> RemoteBuffer {
    let b = conn
        .remote_buffer()
        .expect("the peer announced its buffer in the endpoint message");
    assert_eq!(b.len, BUF_LEN as u64);
    b
}

/// Server: wait for the client's `close` (ABORT Shutdown) on the control connection.
fn wait_shutdown(conn: &mut Connection) {
    let deadline = Instant::now() + STEP;
    loop {
        match conn.poll_control().expect("poll the control connection") {
            Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => return,
            Some(other) => panic!("expected the client's shutdown, got {other:?}"),
            None => {
                assert!(Instant::now() < deadline, "no shutdown within {STEP:?}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The two roles.

fn rc_client(end: &mut End, conn: &Connection) {
    let peer = peer_buffer(conn);
    for k in 0..ROUNDS {
        let len = RC_LENS[k % RC_LENS.len()];
        send(end, k as u64, &pattern(PING + k as u32, len), None);
        let pong = pattern(PONG + k as u32, len);
        received(end, &format!("pong {k}"), 0, &pong);
    }
    write_imm_exchange(end, Role::Client, &peer);
    read_peer(end, Role::Client, &peer);
    received(end, "the server's bye", 0, BYE);
}

fn rc_server(end: &mut End, conn: &Connection) {
    let peer = peer_buffer(conn);
    for k in 0..ROUNDS {
        let len = RC_LENS[k % RC_LENS.len()];
        let ping = pattern(PING + k as u32, len);
        received(end, &format!("ping {k}"), 0, &ping);
        send(end, k as u64, &pattern(PONG + k as u32, len), None);
    }
    write_imm_exchange(end, Role::Server, &peer);
    read_peer(end, Role::Server, &peer);
    send(end, 300, BYE, None);
}

/// The 40-byte GRH area that precedes a UD receive's payload (IBTA §11.4.1.2).
const GRH: usize = 40;

fn ud_client(end: &mut End, conn: &Connection) {
    let ud = *conn
        .ud_peer()
        .expect("UD connect creates the peer's address handle");
    let dest = ud.dest();
    for k in 0..UD_ROUNDS {
        let len = UD_LENS[k % UD_LENS.len()];
        send(end, k as u64, &pattern(PING + k as u32, len), Some(&dest));
        let pong = pattern(PONG + k as u32, len);
        let w = received(end, &format!("pong {k}"), GRH, &pong);
        assert_eq!(w.src_qp(), ud.qpn, "{w:?}");
        assert!(w.flags().contains(WcFlags::GRH), "{w:?}");
    }
}

fn ud_server(end: &mut End, conn: &Connection) {
    let ud = *conn
        .ud_peer()
        .expect("UD connect creates the peer's address handle");
    let dest = ud.dest();
    for k in 0..UD_ROUNDS {
        let len = UD_LENS[k % UD_LENS.len()];
        let ping = pattern(PING + k as u32, len);
        let w = received(end, &format!("ping {k}"), GRH, &ping);
        assert_eq!(w.src_qp(), ud.qpn, "{w:?}");
        send(end, k as u64, &pattern(PONG + k as u32, len), Some(&dest));
    }
}

// ---------------------------------------------------------------------------------------------
// The processes.

/// The client process: start the peer, learn its UDP and TCP addresses, connect, run `talk`,
/// close, and require the peer's verdict.
fn client(qp_type: QpType, peer_test: &str, rounds: usize, talk: fn(&mut End, &Connection)) {
    let t0 = Instant::now();
    let mut end = End::new(CLIENT_IP, qp_type);
    end.buf.write(
        READ_SRC_OFF,
        &pattern(READ_SEED[Role::Client as usize], READ_LEN),
    );
    let mut peer = PeerProcess::spawn(peer_test, end.udp);
    end.watch = Some(peer.gone_flag());
    let ready = peer.wait_tagged(READY_TAG, STEP);
    let (peer_udp, peer_tcp, peer_qpn) = parse_ready(&ready);
    end.dev
        .add_udp_peer(SERVER_IP, peer_udp)
        .expect("add the peer's UDP address");
    let thread = end.fabric.start_thread();
    assert!(thread.is_running(), "the fabric thread did not start");
    // A panic from here on is reported with everything the peer printed.
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        let p = params(&end);
        let (dev, qp) = (end.dev.clone(), end.qp_ref);
        let conn = Connection::connect(peer_tcp, &dev, qp, &mut end.link(), &p)
            .unwrap_or_else(|e| panic!("connect to the peer at {peer_tcp}: {e}"));
        assert_eq!(conn.peer().qpn, peer_qpn, "the QPN the peer announced");
        check_rts(&end, &conn);
        talk(&mut end, &conn);
        conn.close().expect("close the connection");
        peer.expect_success(STEP)
    }));
    let verdict = match r {
        Ok(v) => v,
        Err(e) => {
            // Stop the peer first so its output is complete.
            let st = peer.wait_exit(Duration::from_millis(200));
            drop(thread);
            eprintln!("client failed; peer status {st:?}\n{}", peer.dump());
            panic::resume_unwind(e);
        }
    };
    drop(thread);
    assert!(verdict.starts_with("ok"), "peer verdict: {verdict}");
    assert!(
        end.stashed().is_empty(),
        "unconsumed completions: {:?}",
        end.stashed()
    );
    assert!(
        end.rcv_packets() >= rounds as u64,
        "fewer frames arrived over UDP than pongs: {}",
        end.traffic()
    );
    end.assert_clean();
    eprintln!(
        "{qp_type:?} two-process ping-pong: {:?}; client: {}; peer: {verdict}",
        t0.elapsed(),
        end.traffic()
    );
}

/// The server process: bind, tell the client where to reach it, accept, run `talk`, wait for
/// the client's shutdown, print the verdict.
fn server(qp_type: QpType, rounds: usize, talk: fn(&mut End, &Connection)) {
    let Some(parent_udp) = peer_role() else {
        eprintln!("not started as a peer process ({PEER_ENV} unset): nothing to do");
        return;
    };
    let mut end = End::new(SERVER_IP, qp_type);
    end.buf.write(
        READ_SRC_OFF,
        &pattern(READ_SEED[Role::Server as usize], READ_LEN),
    );
    end.dev
        .add_udp_peer(CLIENT_IP, parent_udp)
        .expect("add the parent's UDP address");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the control listener");
    let tcp = listener.local_addr().expect("listener address");
    let thread = end.fabric.start_thread();
    assert!(thread.is_running(), "the fabric thread did not start");
    say(
        READY_TAG,
        &format!("udp={} tcp={tcp} qpn={}", end.udp, end.qp_ref.qpn),
    );
    let p = params(&end);
    let (dev, qp) = (end.dev.clone(), end.qp_ref);
    let mut conn = Connection::accept(&listener, &dev, qp, &mut end.link(), &p)
        .unwrap_or_else(|e| panic!("accept the client: {e}"));
    check_rts(&end, &conn);
    talk(&mut end, &conn);
    wait_shutdown(&mut conn);
    drop(thread);
    assert!(
        end.stashed().is_empty(),
        "unconsumed completions: {:?}",
        end.stashed()
    );
    assert!(
        end.rcv_packets() >= rounds as u64,
        "fewer frames arrived over UDP than pings: {}",
        end.traffic()
    );
    end.assert_clean();
    say(
        VERDICT_TAG,
        &format!(
            "ok qpn={:#x} driver_bugs=0 malformed_frames=0 {}",
            qp.qpn,
            end.traffic()
        ),
    );
}

/// `udp=<addr> tcp=<addr> qpn=<n>` from the peer's ready line.
fn parse_ready(s: &str) -> (SocketAddr, SocketAddr, u32) {
    let field = |name: &str| -> &str {
        s.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in the peer's ready line {s:?}"))
    };
    let addr = |name: &str| -> SocketAddr {
        field(name)
            .parse()
            .unwrap_or_else(|e| panic!("{name} in the peer's ready line {s:?}: {e}"))
    };
    let qpn = field("qpn=")
        .parse()
        .unwrap_or_else(|e| panic!("qpn= in the peer's ready line {s:?}: {e}"));
    (addr("udp="), addr("tcp="), qpn)
}

/// The device holds what the connection says: RTS, and for RC the peer's QPN and PSN (allowing
/// for a ping that already arrived) and the path MTU both ports allow.
fn check_rts(end: &End, conn: &Connection) {
    let a = end.dev.query_qp(end.qp_ref.id).expect("query the QP");
    assert_eq!(a.qp_state, QpState::Rts);
    assert_eq!(
        end.qp.state(),
        QpState::Rts,
        "the data path learned the state"
    );
    assert_eq!(a.sq_psn, conn.local().psn);
    if end.qp_ref.qp_type == QpType::Rc {
        assert_eq!(a.dest_qp_num, conn.peer().qpn);
        // The query reports the live next PSN (as mlx5 and rxe do): the client's first ping
        // (one packet; it then waits for the pong) may already have arrived when the server
        // checks, nothing more can have.
        let (peer_psn, seen) = (
            conn.peer().psn,
            a.rq_psn.wrapping_sub(conn.peer().psn) & 0xff_ffff,
        );
        assert!(
            seen <= 1,
            "rq_psn {:#x}: the peer's PSN is {peer_psn:#x} and at most one ping is in flight",
            a.rq_psn
        );
        assert_eq!(a.path_mtu, Mtu::Mtu1024);
    }
}

#[test]
fn rc_pingpong_between_two_processes() {
    client(
        QpType::Rc,
        "connect_two_process::rc_peer_process",
        ROUNDS,
        rc_client,
    );
}

#[test]
fn ud_pingpong_between_two_processes() {
    client(
        QpType::Ud,
        "connect_two_process::ud_peer_process",
        UD_ROUNDS,
        ud_client,
    );
}

/// The server process of [`rc_pingpong_between_two_processes`].
#[test]
#[ignore = "the peer process of rc_pingpong_between_two_processes, which starts it"]
fn rc_peer_process() {
    server(QpType::Rc, ROUNDS, rc_server);
}

/// The server process of [`ud_pingpong_between_two_processes`].
#[test]
#[ignore = "the peer process of ud_pingpong_between_two_processes, which starts it"]
fn ud_peer_process() {
    server(QpType::Ud, UD_ROUNDS, ud_server);
}
