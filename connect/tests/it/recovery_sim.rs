//! Recovery on the software ConnectX (`docs/sources.md` §19–§20): a peer QP in Error makes the
//! requester exhaust its retries (RETRY_EXC_ERR), a receiver with nothing posted makes it
//! exhaust its RNR retries (RNR_RETRY_EXC_ERR); `rebuild` / `rebuild_pair` drain, reset and
//! reconnect with fresh PSNs, every posted WR is accounted for, and data flows again.

use crate::connect_support;

use connect_support::*;
use mlx5_connect::{self as connect, diag, Connection, ControlEvent};
use mlx5_hw::transition::{self, Step};
use mlx5_hw::{Device, QpState, QpType};
use mlx5_qp::{SendWr, Wc, WcOpcode, WcStatus};
use mlx5_sim::Fabric;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Moves the virtual clock until `pred` holds (at most 60 virtual seconds).
fn advance_until(f: &Fabric, mut pred: impl FnMut() -> bool) {
    for _ in 0..1200 {
        if pred() {
            return;
        }
        f.advance(Duration::from_millis(50));
    }
    panic!("condition not reached after 60 s of virtual time");
}

/// Polls `s` while moving the clock until completions arrive; returns them all.
fn wait_completions(f: &Fabric, s: &mut Side) -> Vec<Wc> {
    let mut got = Vec::new();
    advance_until(f, || {
        got = s.pump(f);
        !got.is_empty()
    });
    got
}

fn put_in_error(s: &Side) {
    transition::apply(
        &s.dev,
        s.info.id,
        s.info.layout.qp_type,
        s.info.qpn,
        s.dev.query_qp(s.info.id).unwrap().qp_state,
        &Step::Error,
    )
    .unwrap();
}

/// After a rebuild: a SEND and a WRITE from `a` arrive intact at `b`.
fn traffic_flows(f: &Fabric, a: &mut Side, b: &mut Side, b_buf: connect::RemoteBuffer, tag: u8) {
    let msg = [tag; 64];
    a.qp.post(&SendWr::send(77).inline(&msg).signaled())
        .unwrap();
    let wa = a.pump(f);
    assert_eq!(wa.len(), 1, "{wa:?}");
    assert_eq!((wa[0].wr_id(), wa[0].status()), (77, WcStatus::Success));
    let wb = b.pump(f);
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!((wb[0].opcode(), wb[0].byte_len()), (WcOpcode::Recv, 64));
    assert_eq!(b.slot((wb[0].wr_id() - 1000) as usize, 64), &msg[..]);
    let data = [tag ^ 0xff; 32];
    a.qp.post(
        &SendWr::write(78, remote(&b_buf, 128))
            .inline(&data)
            .signaled(),
    )
    .unwrap();
    let wa = a.pump(f);
    assert_eq!((wa.len(), wa[0].status()), (1, WcStatus::Success), "{wa:?}");
    assert_eq!(&b.buf.bytes()[128..160], &data[..]);
}

/// Every WR id in `ids` appears exactly once in `wcs`.
fn each_once(wcs: &[Wc], ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        let n = wcs.iter().filter(|w| w.wr_id() == id).count();
        assert_eq!(n, 1, "wr_id {id} retired {n} times in {wcs:?}");
    }
}

#[test]
fn peer_in_error_gives_retry_exceeded_and_rebuild_restores_traffic() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let (mut ca, mut cb) = connect_pair(&mut a, &mut b, &params());
    let before = diag::counter_report(&da, 1).unwrap();

    put_in_error(&b);
    b.qp.set_state(QpState::Error);
    a.qp.post(&SendWr::send(1).inline(b"lost").signaled())
        .unwrap();
    let polled = wait_completions(&f, &mut a);
    let wc = polled[0];
    assert_eq!(
        (wc.wr_id(), wc.status()),
        (1, WcStatus::RetryExcErr),
        "{wc:?}"
    );
    let dump = diag::WcReport(&wc).to_string();
    assert!(
        dump.contains("TRANSPORT_RETRY_EXC_ERR") && dump.contains("local_ack_timeout_err"),
        "{dump}"
    );
    let grew = diag::counter_report(&da, 1).unwrap().delta(&before);
    assert!(
        grew.iter()
            .any(|c| c.name == "local_ack_timeout_err" && c.value >= 7),
        "the requester's ACK timer fired once per try: {grew:?}"
    );
    assert_eq!(da.query_qp(a.info.id).unwrap().qp_state, QpState::Error);

    let old_psns = (ca.local().psn, cb.local().psn);
    let (ra, rb) = rebuild_pair(&mut a, &mut ca, &mut b, &mut cb, wc.status());
    assert_eq!((ra.generation, rb.generation), (1, 1));
    assert_eq!(
        (ra.from_state, rb.from_state),
        (QpState::Error, QpState::Error)
    );
    // Nothing lost: the SEND and the 8 receives each side had posted come back exactly once,
    // polled by the test or drained by the rebuild.
    let all_a: Vec<Wc> = polled.iter().chain(&ra.drained).copied().collect();
    each_once(&all_a, [1].into_iter().chain(1000..1008));
    each_once(&rb.drained, 1000..1008);
    assert!(all_a[1..]
        .iter()
        .all(|w| w.status() == WcStatus::WrFlushErr));
    assert!(rb
        .drained
        .iter()
        .all(|w| w.status() == WcStatus::WrFlushErr));
    assert_eq!(ra.sq_psn.0, old_psns.0);
    assert_eq!(ra.peer_psn, cb.local().psn);
    assert_eq!(da.query_qp(a.info.id).unwrap().rq_psn, cb.local().psn);
    assert_eq!(db.query_qp(b.info.id).unwrap().rq_psn, ca.local().psn);
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(b.qp.rq_outstanding(), 8, "receives reposted");

    let (ba, bb) = (ca.remote_buffer().unwrap(), cb.remote_buffer().unwrap());
    traffic_flows(&f, &mut a, &mut b, ba, 0x11);
    traffic_flows(&f, &mut b, &mut a, bb, 0x22);
    no_driver_bugs(&f);
}

#[test]
fn rnr_retries_exhausted_then_rebuild_with_receives_posted() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    b.recv_count.store(0, Ordering::SeqCst);
    let p = {
        let mut p = params();
        p.rnr_retry = 2;
        p.min_rnr_timer = 1;
        p
    };
    let (mut ca, mut cb) = connect_pair(&mut a, &mut b, &p);
    let (a0, b0) = (
        diag::counter_report(&da, 1).unwrap(),
        diag::counter_report(&db, 1).unwrap(),
    );
    a.qp.post(&SendWr::send(5).inline(b"nobody listens").signaled())
        .unwrap();
    let wc = wait_completions(&f, &mut a)[0];
    assert_eq!(
        (wc.wr_id(), wc.status()),
        (5, WcStatus::RnrRetryExcErr),
        "{wc:?}"
    );
    let dump = diag::WcReport(&wc).to_string();
    assert!(
        dump.contains("RNR_RETRY_EXC_ERR") && dump.contains("out_of_buffer (peer)"),
        "{dump}"
    );
    let ga = diag::counter_report(&da, 1).unwrap().delta(&a0);
    let gb = diag::counter_report(&db, 1).unwrap().delta(&b0);
    assert!(
        ga.iter().any(|c| c.name == "rnr_nak_retry_err"),
        "requester counts RNR NAKs: {ga:?}"
    );
    assert!(
        gb.iter().any(|c| c.name == "out_of_buffer"),
        "responder counts no-buffer: {gb:?}"
    );

    // The fix for RNR (`docs/sources.md` §19–§20): post receives (here: at all) and rebuild.
    b.recv_count.store(8, Ordering::SeqCst);
    let (ra, _rb) = rebuild_pair(&mut a, &mut ca, &mut b, &mut cb, wc.status());
    assert_eq!(ra.generation, 1);
    assert_eq!(b.qp.rq_outstanding(), 8);
    let bb = ca.remote_buffer().unwrap();
    traffic_flows(&f, &mut a, &mut b, bb, 0x33);
    no_driver_bugs(&f);
}

#[test]
fn tcp_rebuild_after_retry_exceeded_is_answered_by_the_peer_thread() {
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
        // Serve until the peer asks for a rebuild.
        let deadline = Instant::now() + Duration::from_secs(20);
        let reason = loop {
            match cb.poll_control().unwrap() {
                Some(ControlEvent::RebuildRequested { reason, generation }) => {
                    assert_eq!(generation, 1);
                    break reason;
                }
                Some(other) => panic!("{other:?}"),
                None => {
                    assert!(Instant::now() < deadline, "no rebuild request");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        let report = cb.rebuild(&dev, &mut b.link(), reason).unwrap();
        (b, cb, report)
    });
    let (qa, pa) = (a.qp_ref(), a.params(&params()));
    let mut ca = Connection::connect(addr, &da, qa, &mut a.link(), &pa).unwrap();

    // The peer's QP fails behind its back (its thread does not know yet).
    transition::apply(&db, b_id, QpType::Rc, b_qpn, QpState::Rts, &Step::Error).unwrap();
    a.qp.post(&SendWr::send(9).inline(b"into the void").signaled())
        .unwrap();
    advance_until(&f, || {
        da.query_qp(a.info.id).unwrap().qp_state == QpState::Error
    });
    a.qp.set_state(QpState::Error);

    let report = ca
        .rebuild(&da, &mut a.link(), WcStatus::RetryExcErr)
        .unwrap();
    let first = report
        .first_error()
        .expect("the drain found the error completion");
    assert_eq!((first.wr_id(), first.status()), (9, WcStatus::RetryExcErr));
    each_once(&report.drained, [9].into_iter().chain(1000..1008));
    let (mut b, cb, rb) = server.join().unwrap();
    assert_eq!(rb.reason, WcStatus::RetryExcErr, "the peer learned why");
    assert_eq!(rb.from_state, QpState::Error);
    each_once(&rb.drained, 1000..1008);
    assert_eq!((ca.generation(), cb.generation()), (1, 1));
    assert_eq!(ca.peer().psn, cb.local().psn);
    assert_eq!(da.query_qp(a.info.id).unwrap().qp_state, QpState::Rts);
    assert_eq!(db.query_qp(b_id).unwrap().qp_state, QpState::Rts);

    let (ba, bb) = (ca.remote_buffer().unwrap(), cb.remote_buffer().unwrap());
    traffic_flows(&f, &mut a, &mut b, ba, 0x44);
    traffic_flows(&f, &mut b, &mut a, bb, 0x55);
    let dump = diag::qp_report(&da, &ca.qp(), Some(&a.qp))
        .unwrap()
        .to_string();
    assert!(dump.contains("state RTS [data path: RTS]"), "{dump}");
    no_driver_bugs(&f);
}
