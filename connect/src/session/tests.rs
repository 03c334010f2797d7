//! Tests of the handshake, rebuild and replacement against a fake device.

use super::*;
use crate::fake::FakeDevice;
use crate::plan::plan;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// A link that records what the control path told it.
#[derive(Debug, Default)]
struct Rec {
    states: Vec<QpState>,
    posted_in: Vec<QpState>,
    posted: Arc<AtomicUsize>,
}

impl Link for Rec {
    fn set_state(&mut self, s: QpState) {
        self.states.push(s);
    }
    fn post_receives(&mut self) -> mlx5_qp::Result<()> {
        self.posted_in
            .push(self.states.last().copied().unwrap_or(QpState::Reset));
        self.posted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn poll(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        Ok(0)
    }
    fn flush_outstanding(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
        Ok(0)
    }
}

fn side<'a>(
    dev: &'a dyn Device,
    qp: QpRef,
    link: &'a mut dyn Link,
    params: &'a ConnectParams,
) -> PairSide<'a> {
    PairSide {
        dev,
        qp,
        link,
        params,
    }
}

fn params() -> ConnectParams {
    ConnectParams {
        io_timeout: Duration::from_secs(5),
        ..ConnectParams::default()
    }
}

/// Runs `server` on a thread and `client` here, connected over 127.0.0.1.
fn over_tcp<S, C, RS, RC>(server: S, client: C) -> (RS, RC)
where
    S: FnOnce(&TcpListener) -> RS + Send + 'static,
    RS: Send + 'static,
    C: FnOnce(std::net::SocketAddr) -> RC,
{
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || server(&l));
    let rc = client(addr);
    (t.join().unwrap(), rc)
}

#[test]
fn tcp_handshake_brings_both_sides_to_rts_with_crossed_values() {
    let da = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let db = Arc::new(FakeDevice::new(Mtu::Mtu1024, 2));
    let qa = da.qp(QpType::Rc);
    let qb = db.qp(QpType::Rc);
    let posted_b = Arc::new(AtomicUsize::new(0));
    let pb = posted_b.clone();
    let da2 = da.clone();
    let (ra, (rb, posted_seen_by_b)) = over_tcp(
        move |l| {
            let mut link = Rec::default();
            let c = Connection::accept(l, &*da2, qa, &mut link, &params()).unwrap();
            (c, link)
        },
        |addr| {
            let mut link = Rec {
                posted: pb,
                ..Rec::default()
            };
            let c = Connection::connect(addr, &*db, qb, &mut link, &params()).unwrap();
            let n = link.posted.load(Ordering::SeqCst);
            ((c, link), n)
        },
    );
    let (ca, la) = ra;
    let (cb, lb) = rb;
    assert_eq!(posted_seen_by_b, 1);
    assert_eq!(posted_b.load(Ordering::SeqCst), 1);
    for (c, l) in [(&ca, &la), (&cb, &lb)] {
        assert_eq!(c.state(), QpState::Rts);
        assert_eq!(l.states, [QpState::Init, QpState::Rtr, QpState::Rts]);
        assert_eq!(l.posted_in, [QpState::Init], "receives are posted in Init");
        assert_eq!(c.path_mtu(), Mtu::Mtu1024, "min of both ports' MTUs");
    }
    let aa = da.query_qp(qa.id).unwrap();
    let ab = db.query_qp(qb.id).unwrap();
    assert_eq!(aa.qp_state, QpState::Rts);
    assert_eq!(aa.dest_qp_num, qb.qpn);
    assert_eq!(ab.dest_qp_num, qa.qpn);
    assert_eq!(aa.rq_psn, ab.sq_psn, "a expects what b sends");
    assert_eq!(ab.rq_psn, aa.sq_psn);
    assert_eq!(aa.path_mtu, Mtu::Mtu1024);
    assert_eq!(aa.ah_attr.grh.unwrap().dgid, db.gid);
    assert_eq!(
        (aa.timeout, aa.retry_cnt, aa.rnr_retry, aa.min_rnr_timer),
        (14, 7, 7, 12)
    );
    assert_eq!(ca.peer().psn, cb.local().psn);
}

#[test]
fn the_client_does_not_return_before_the_server_posted_receives() {
    // The server's receive closure takes a while; the client's connect must wait for it
    // (the second handshake), or its first send would meet RNR.
    for _ in 0..3 {
        let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
        let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
        let flag = Arc::new(AtomicUsize::new(0));
        struct Slow(Arc<AtomicUsize>);
        impl Link for Slow {
            fn set_state(&mut self, _s: QpState) {}
            fn post_receives(&mut self) -> mlx5_qp::Result<()> {
                std::thread::sleep(Duration::from_millis(30));
                self.0.store(1, Ordering::SeqCst);
                Ok(())
            }
            fn poll(&mut self, _o: &mut [Wc]) -> mlx5_qp::Result<usize> {
                Ok(0)
            }
            fn flush_outstanding(&mut self, _o: &mut [Wc]) -> mlx5_qp::Result<usize> {
                Ok(0)
            }
        }
        let (f2, d2) = (flag.clone(), d.clone());
        let (_, seen) = over_tcp(
            move |l| Connection::accept(l, &*d2, qa, &mut Slow(f2), &params()).unwrap(),
            |addr| {
                Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).unwrap();
                flag.load(Ordering::SeqCst)
            },
        );
        assert_eq!(seen, 1);
    }
}

#[test]
fn ud_handshake_sets_qkey_and_creates_the_peer_address() {
    let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let (qa, qb) = (d.qp(QpType::Ud), d.qp(QpType::Ud));
    let pa = ConnectParams {
        qkey: 0x1234,
        ..params()
    };
    let d2 = d.clone();
    let (ca, cb) = over_tcp(
        move |l| Connection::accept(l, &*d2, qa, &mut Rec::default(), &pa).unwrap(),
        |addr| Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).unwrap(),
    );
    let ua = ca.ud_peer().unwrap();
    let ub = cb.ud_peer().unwrap();
    assert_eq!((ua.qpn, ua.qkey), (qb.qpn, crate::params::DEFAULT_QKEY));
    assert_eq!((ub.qpn, ub.qkey), (qa.qpn, 0x1234));
    assert_eq!(ca.state(), QpState::Rts);
    assert_eq!(cb.state(), QpState::Rts);
}

#[test]
fn incompatible_peer_gets_an_abort_not_a_timeout() {
    let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Ud));
    let d2 = d.clone();
    let t0 = Instant::now();
    let (ra, rb) = over_tcp(
        move |l| Connection::accept(l, &*d2, qa, &mut Rec::default(), &params()).map(|_| ()),
        |addr| Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).map(|_| ()),
    );
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "no side waited for a timeout"
    );
    for r in [ra, rb] {
        match r {
            Err(ConnectError::Incompatible(m)) => assert!(m.contains("RC") && m.contains("UD")),
            Err(ConnectError::PeerAborted { code, .. }) => {
                assert_eq!(code, AbortCode::Incompatible)
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_failed_modify_aborts_the_peer_and_names_the_step() {
    let da = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let db = Arc::new(FakeDevice::new(Mtu::Mtu4096, 2));
    *db.fail_to.lock().unwrap() = Some(QpState::Rts);
    let (qa, qb) = (da.qp(QpType::Rc), db.qp(QpType::Rc));
    let mut lb = Rec::default();
    let (ra, rb) = over_tcp(
        move |l| Connection::accept(l, &*da, qa, &mut Rec::default(), &params()).map(|_| ()),
        |addr| Connection::connect(addr, &*db, qb, &mut lb, &params()).map(|_| ()),
    );
    assert!(matches!(rb, Err(ConnectError::Device(_))), "{rb:?}");
    assert!(
        matches!(
            ra,
            Err(ConnectError::PeerAborted {
                code: AbortCode::ConnectFailed,
                ..
            })
        ),
        "{ra:?}"
    );
    assert_eq!(
        lb.states.last(),
        Some(&QpState::Rtr),
        "the data path knows where it stopped"
    );
}

#[test]
fn a_used_qp_is_refused_by_connect() {
    let d = FakeDevice::new(Mtu::Mtu4096, 1);
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    d.force_state(qa.id, QpState::Rts);
    let e = connect_pair(
        side(&d, qa, &mut Rec::default(), &params()),
        side(&d, qb, &mut Rec::default(), &params()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("use rebuild"), "{e}");
}

#[test]
fn garbage_on_the_control_port_is_a_wire_error() {
    let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let qa = d.qp(QpType::Rc);
    let (ra, _) = over_tcp(
        move |l| Connection::accept(l, &*d, qa, &mut Rec::default(), &params()).map(|_| ()),
        |addr| {
            use std::io::Write;
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
        },
    );
    assert!(matches!(ra, Err(ConnectError::Wire(_))), "{ra:?}");
}

#[test]
fn in_process_pair_uses_the_same_attributes() {
    let d = FakeDevice::new(Mtu::Mtu2048, 1);
    let (qa, qb) = (d.qp(QpType::Uc), d.qp(QpType::Uc));
    let (mut la, mut lb) = (Rec::default(), Rec::default());
    let (ca, cb) = connect_pair(
        side(&d, qa, &mut la, &params()),
        side(&d, qb, &mut lb, &params()),
    )
    .unwrap();
    let aa = d.query_qp(qa.id).unwrap();
    let ab = d.query_qp(qb.id).unwrap();
    assert_eq!((aa.qp_state, ab.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(aa.rq_psn, ab.sq_psn);
    assert_eq!(aa.qp_access_flags, mlx5_hw::AccessFlags::REMOTE_WRITE);
    assert_eq!(
        ca.plan().rtr,
        plan(ca.local(), cb.local(), &params()).unwrap().rtr
    );
    assert_eq!(la.posted_in, [QpState::Init]);
    assert!(ca.ud_peer().is_none());
    assert!(d.ahs().is_empty());
}

#[test]
fn in_process_rebuild_from_error_uses_fresh_psns() {
    let d = FakeDevice::new(Mtu::Mtu4096, 1);
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    let (mut la, mut lb) = (Rec::default(), Rec::default());
    let (mut ca, mut cb) = connect_pair(
        side(&d, qa, &mut la, &params()),
        side(&d, qb, &mut lb, &params()),
    )
    .unwrap();
    d.force_state(qa.id, QpState::Error);
    let old = (ca.local().psn, cb.local().psn);
    let (ra, rb) = rebuild_pair(
        &d,
        &mut ca,
        &mut la,
        &d,
        &mut cb,
        &mut lb,
        WcStatus::RetryExcErr,
    )
    .unwrap();
    assert_eq!((ra.generation, rb.generation), (1, 1));
    assert_eq!(ra.from_state, QpState::Error);
    assert_eq!(rb.from_state, QpState::Rts);
    assert_eq!(ra.sq_psn.0, old.0);
    assert_eq!(ra.peer_psn, rb.sq_psn.1);
    assert_eq!(
        lb.states,
        [
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Error,
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts
        ]
    );
    assert_eq!(lb.posted_in, [QpState::Init, QpState::Init]);
    let aa = d.query_qp(qa.id).unwrap();
    let ab = d.query_qp(qb.id).unwrap();
    assert_eq!(aa.rq_psn, ab.sq_psn);
    assert_eq!(ab.rq_psn, aa.sq_psn);
    assert_eq!(aa.sq_psn, ca.local().psn);
    assert_eq!(ca.generation(), 1);
}

#[test]
fn tcp_rebuild_is_answered_by_the_peer() {
    let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    let d2 = d.clone();
    let (server, (client, report)) = over_tcp(
        move |l| {
            let mut link = Rec::default();
            let mut c = Connection::accept(l, &*d2, qa, &mut link, &params()).unwrap();
            // The passive side: wait for the peer's request, then rebuild.
            let deadline = Instant::now() + Duration::from_secs(5);
            let ev = loop {
                if let Some(ev) = c.poll_control().unwrap() {
                    break ev;
                }
                assert!(Instant::now() < deadline, "no rebuild request arrived");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(
                ev,
                ControlEvent::RebuildRequested {
                    reason: WcStatus::RnrRetryExcErr,
                    generation: 1
                }
            );
            let r = c.rebuild(&*d2, &mut link, WcStatus::Success).unwrap();
            (c, r)
        },
        |addr| {
            let mut link = Rec::default();
            let mut c = Connection::connect(addr, &*d, qb, &mut link, &params()).unwrap();
            d.force_state(qb.id, QpState::Error);
            let r = c.rebuild(&*d, &mut link, WcStatus::RnrRetryExcErr).unwrap();
            (c, r)
        },
    );
    let (cs, rs) = server;
    assert_eq!(
        rs.reason,
        WcStatus::RnrRetryExcErr,
        "the peer's reason is reported"
    );
    assert_eq!(rs.from_state, QpState::Rts);
    assert_eq!(report.from_state, QpState::Error);
    assert_eq!((cs.generation(), client.generation()), (1, 1));
    assert_eq!(cs.peer().psn, client.local().psn);
    assert_eq!(client.peer().psn, cs.local().psn);
    assert_eq!(report.peer_psn, rs.sq_psn.1);
}

#[test]
fn replace_qp_refuses_a_qp_that_cannot_take_over() {
    let d = FakeDevice::new(Mtu::Mtu4096, 1);
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    let (mut ca, _) = connect_pair(
        side(&d, qa, &mut Rec::default(), &params()),
        side(&d, qb, &mut Rec::default(), &params()),
    )
    .unwrap();
    let ud = d.qp(QpType::Ud);
    let used = d.qp(QpType::Rc);
    d.force_state(used.id, QpState::Init);
    for (new, want) in [(qa, "current QP"), (ud, "UD QP"), (used, "INIT")] {
        let mut link = Rec::default();
        let e = ca.replace_qp(&d, new, &mut link).unwrap_err();
        assert!(
            matches!(e, ConnectError::InvalidReplacement { .. }) && e.to_string().contains(want),
            "{e}"
        );
        assert!(link.states.is_empty(), "the old QP was left alone");
    }
    assert_eq!(ca.qp(), qa, "nothing swapped");
    assert_eq!(d.query_qp(qa.id).unwrap().qp_state, QpState::Rts);
}

#[test]
fn replace_qp_retires_the_old_qp_and_the_rebuild_announces_the_new_one() {
    let d = FakeDevice::new(Mtu::Mtu4096, 1);
    let (qa, qb) = (d.qp(QpType::Uc), d.qp(QpType::Uc));
    let (mut la, mut lb) = (Rec::default(), Rec::default());
    let (mut ca, mut cb) = connect_pair(
        side(&d, qa, &mut la, &params()),
        side(&d, qb, &mut lb, &params()),
    )
    .unwrap();
    // Still known to the device: moved to Error before it is given up.
    let qb2 = d.qp(QpType::Uc);
    let old = cb.replace_qp(&d, qb2, &mut lb).unwrap();
    assert_eq!(old, qb);
    assert_eq!(d.query_qp(qb.id).unwrap().qp_state, QpState::Error);
    assert_eq!(lb.states.last(), Some(&QpState::Error));
    assert_eq!((cb.qp(), cb.state()), (qb2, QpState::Reset));
    d.destroy_qp(qb.id).unwrap();
    // Already destroyed: only the data path can be flushed; not an error.
    let qb3 = d.qp(QpType::Uc);
    assert_eq!(cb.replace_qp(&d, qb3, &mut Rec::default()).unwrap(), qb2);
    d.destroy_qp(qb2.id).unwrap();

    let mut lb3 = Rec::default();
    let (ra, rb) = rebuild_pair(
        &d,
        &mut ca,
        &mut la,
        &d,
        &mut cb,
        &mut lb3,
        WcStatus::RetryExcErr,
    )
    .unwrap();
    assert_eq!(
        rb.qpn,
        (qb.qpn, qb3.qpn),
        "the last generation's QPN, then the new"
    );
    assert_eq!(ra.qpn, (qa.qpn, qa.qpn));
    assert_eq!(ra.peer_qpn, (qb.qpn, qb3.qpn));
    assert_eq!(rb.from_state, QpState::Reset);
    assert_eq!(
        lb3.states,
        [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts],
        "no Reset->Reset modify for the new QP"
    );
    assert_eq!(lb3.posted_in, [QpState::Init]);
    let (aa, ab) = (d.query_qp(qa.id).unwrap(), d.query_qp(qb3.id).unwrap());
    assert_eq!((aa.dest_qp_num, ab.dest_qp_num), (qb3.qpn, qa.qpn));
    assert_eq!((aa.rq_psn, ab.rq_psn), (ab.sq_psn, aa.sq_psn));
    assert_eq!(
        (cb.qp(), cb.local().qpn, ca.peer().qpn),
        (qb3, qb3.qpn, qb3.qpn)
    );
    // The next rebuild is an ordinary one again.
    let (_, rb) = rebuild_pair(
        &d,
        &mut ca,
        &mut la,
        &d,
        &mut cb,
        &mut lb3,
        WcStatus::Success,
    )
    .unwrap();
    assert_eq!(
        (rb.qpn, rb.peer_qpn),
        ((qb3.qpn, qb3.qpn), (qa.qpn, qa.qpn))
    );
}

#[test]
fn tcp_rebuild_after_replace_reaches_the_new_qpn() {
    let d = Arc::new(FakeDevice::new(Mtu::Mtu4096, 1));
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    let qb2 = d.qp(QpType::Rc);
    let d2 = d.clone();
    let (server, client) = over_tcp(
        move |l| {
            let mut link = Rec::default();
            let mut c = Connection::accept(l, &*d2, qa, &mut link, &params()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.poll_control().unwrap().is_none() {
                assert!(Instant::now() < deadline, "no rebuild request arrived");
                std::thread::sleep(Duration::from_millis(1));
            }
            let r = c.rebuild(&*d2, &mut link, WcStatus::Success).unwrap();
            (c, r)
        },
        |addr| {
            let mut c = Connection::connect(addr, &*d, qb, &mut Rec::default(), &params()).unwrap();
            c.replace_qp(&*d, qb2, &mut Rec::default()).unwrap();
            d.destroy_qp(qb.id).unwrap();
            let r = c
                .rebuild(&*d, &mut Rec::default(), WcStatus::LocQpOpErr)
                .unwrap();
            (c, r)
        },
    );
    let ((cs, rs), (cc, rc)) = (server, client);
    assert_eq!(rs.peer_qpn, (qb.qpn, qb2.qpn));
    assert_eq!(rs.reason, WcStatus::LocQpOpErr);
    assert_eq!(rc.qpn, (qb.qpn, qb2.qpn));
    assert_eq!(cs.peer().qpn, qb2.qpn);
    assert_eq!(d.query_qp(qa.id).unwrap().dest_qp_num, qb2.qpn);
    assert_eq!(d.query_qp(qb2.id).unwrap().dest_qp_num, qa.qpn);
    assert_eq!(cc.state(), QpState::Rts);
}

#[test]
fn rebuild_without_a_control_channel_is_refused() {
    let d = FakeDevice::new(Mtu::Mtu4096, 1);
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    let (mut ca, _) = connect_pair(
        side(&d, qa, &mut Rec::default(), &params()),
        side(&d, qb, &mut Rec::default(), &params()),
    )
    .unwrap();
    assert!(matches!(
        ca.rebuild(&d, &mut Rec::default(), WcStatus::Success),
        Err(ConnectError::NoControlChannel)
    ));
}

#[test]
fn out_of_band_phases_connect_with_the_endpoints_the_caller_carried() {
    let d = FakeDevice::new(Mtu::Mtu1024, 1);
    let (qa, qb) = (d.qp(QpType::Rc), d.qp(QpType::Rc));
    let (mut la, mut lb) = (Rec::default(), Rec::default());
    let p = params();
    let ea = Connection::prepare_out_of_band(&d, qa, &mut la, &p).unwrap();
    let eb = Connection::prepare_out_of_band(&d, qb, &mut lb, &p).unwrap();
    // Phase one leaves the QP in Init with its receives posted, and announces it.
    assert_eq!(d.query_qp(qa.id).unwrap().qp_state, QpState::Init);
    assert_eq!(la.posted_in, [QpState::Init]);
    assert_eq!(ea.qpn, qa.qpn);
    // The caller's protocol may carry the endpoint in its own form: a changed PSN is the one
    // the peer expects.
    let carried = Endpoint {
        psn: 0x123456,
        ..ea
    };
    let cb = Connection::finish_out_of_band(&d, qb, &mut lb, &p, eb, carried).unwrap();
    let ca = Connection::finish_out_of_band(&d, qa, &mut la, &p, ea, eb).unwrap();
    let (aa, ab) = (d.query_qp(qa.id).unwrap(), d.query_qp(qb.id).unwrap());
    assert_eq!((aa.qp_state, ab.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(ab.rq_psn, 0x123456);
    assert_eq!((aa.rq_psn, aa.dest_qp_num), (eb.psn, qb.qpn));
    assert_eq!(ca.peer().qpn, qb.qpn);
    assert_eq!(cb.state(), QpState::Rts);
    // No control channel of this crate: polling it says so.
    let mut ca = ca;
    assert!(matches!(
        ca.poll_control(),
        Err(ConnectError::NoControlChannel)
    ));
}
