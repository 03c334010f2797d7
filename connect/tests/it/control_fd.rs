//! One wait for everything: the control socket of a connection is a descriptor, so a server
//! sleeps on its completion channel, the device's event fd and its peers' control sockets at
//! once (`wait_any_readable`), and a rebuild request or an abort wakes it the moment it
//! arrives, with no polling interval; with the `tokio` feature `AsyncConnection` awaits it.

use crate::connect_support;

use connect_support::*;
use mlx5_connect::{AbortCode, Connection, ControlEvent};
use mlx5_hw::device::wait_any_readable;
use mlx5_hw::transition::{self, Step};
use mlx5_hw::{Device, QpState, QpType};
use mlx5_qp::{SendWr, WcStatus};
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// Far longer than anything here takes: only a wait the message did not end reaches it.
const LONG: Duration = Duration::from_secs(60);

#[test]
fn a_rebuild_request_wakes_a_server_asleep_on_its_descriptors() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pb = b.params(&params());
    let (b_id, b_qpn) = (b.info.id, b.info.qpn);
    let server = std::thread::spawn(move || {
        let dev = b.dev.clone();
        let qb = b.qp_ref();
        let mut cb = Connection::accept(&listener, &dev, qb, &mut b.link(), &pb).unwrap();
        // The server's one sleep: its peer's control socket and its device's event fd.
        let control = cb
            .control_fd()
            .expect("a TCP connection has one")
            .as_raw_fd();
        let fds = [dev.async_event_fd().unwrap(), control];
        let ready = wait_any_readable(&fds, LONG).unwrap();
        assert_eq!(ready, [1], "woken by the control socket");
        let (reason, generation) = match cb.poll_control().unwrap() {
            Some(ControlEvent::RebuildRequested { reason, generation }) => (reason, generation),
            other => panic!("{other:?}"),
        };
        assert_eq!(generation, 1);
        let report = cb.rebuild(&dev, &mut b.link(), reason).unwrap();
        (b, cb, report)
    });
    let (qa, pa) = (a.qp_ref(), a.params(&params()));
    let mut ca = Connection::connect(addr, &da, qa, &mut a.link(), &pa).unwrap();
    // The peer's QP fails behind its back; this side exhausts its retries and rebuilds.
    transition::apply(&db, b_id, QpType::Rc, b_qpn, QpState::Rts, &Step::Error).unwrap();
    a.qp.post(&SendWr::send(9).inline(b"lost").signaled())
        .unwrap();
    for _ in 0..1200 {
        if da.query_qp(a.info.id).unwrap().qp_state == QpState::Error {
            break;
        }
        f.advance(Duration::from_millis(50));
    }
    a.qp.set_state(QpState::Error);
    let report = ca
        .rebuild(&da, &mut a.link(), WcStatus::RetryExcErr)
        .unwrap();
    assert_eq!(report.generation, 1);
    let (_b, cb, rb) = server.join().unwrap();
    assert_eq!(rb.reason, WcStatus::RetryExcErr, "the peer learned why");
    assert_eq!((ca.generation(), cb.generation()), (1, 1));
    no_driver_bugs(&f);
}

#[test]
fn the_control_descriptor_is_readable_exactly_while_something_is_there() {
    let (_f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pb = b.params(&params());
    let server = std::thread::spawn(move || {
        let dev = b.dev.clone();
        let qb = b.qp_ref();
        let cb = Connection::accept(&listener, &dev, qb, &mut b.link(), &pb).unwrap();
        (b, cb)
    });
    let (qa, pa) = (a.qp_ref(), a.params(&params()));
    let mut ca = Connection::connect(addr, &da, qa, &mut a.link(), &pa).unwrap();
    let (_b, cb) = server.join().unwrap();
    let fd = [ca.control().unwrap().as_fd().as_raw_fd()];
    // Nothing sent: not readable, and poll_control says so.
    assert!(wait_any_readable(&fd, Duration::ZERO).unwrap().is_empty());
    assert_eq!(ca.poll_control().unwrap(), None);
    // The peer's goodbye: readable, taken, then not readable any more.
    cb.close().unwrap();
    assert_eq!(wait_any_readable(&fd, LONG).unwrap(), [0]);
    assert_eq!(
        ca.poll_control().unwrap(),
        Some(ControlEvent::PeerAborted(AbortCode::Shutdown))
    );
    // The peer closed: the descriptor stays readable (end of file) and says so.
    assert_eq!(wait_any_readable(&fd, LONG).unwrap(), [0]);
    assert!(ca.poll_control().is_err());
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_connection_awaits_the_peer() {
    let (_f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pb = b.params(&params());
    let server = std::thread::spawn(move || {
        let dev = b.dev.clone();
        let qb = b.qp_ref();
        let cb = Connection::accept(&listener, &dev, qb, &mut b.link(), &pb).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut cb = cb.into_async().unwrap();
            let ev = tokio::time::timeout(LONG, cb.next_control())
                .await
                .expect("the peer's goodbye wakes the task")
                .unwrap();
            assert_eq!(ev, ControlEvent::PeerAborted(AbortCode::Shutdown));
            assert_eq!(cb.generation(), 0, "the connection is reachable through it");
            cb.into_inner()
        })
    });
    let (qa, pa) = (a.qp_ref(), a.params(&params()));
    let ca = Connection::connect(addr, &da, qa, &mut a.link(), &pa).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    ca.close().unwrap();
    drop(server.join().unwrap());
}
