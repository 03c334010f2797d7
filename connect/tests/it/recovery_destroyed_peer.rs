//! Recovery after one side's QP was destroyed, on the software ConnectX (`docs/sources.md` §20).
//!
//! The side whose QP is gone creates a new QP (a new QPN), hands it to
//! `Connection::replace_qp` — which retires the old QP's WRs — and destroys the old one. The
//! surviving side's sends now go to a QPN that no longer exists: the peer's port drops them
//! (`rx_dropped`), the requester's ACK timer runs out of retries (RETRY_EXC_ERR), and its
//! rebuild learns the new QPN and PSN from the REBUILD message (TCP) or from the pair
//! (in-process). Every posted WR is retired exactly once and data flows again, checked byte
//! for byte.

use crate::connect_support;

use connect_support::*;
use mlx5_connect::{self as connect, diag, Connection, ControlEvent, QpRef};
use mlx5_hw::transition::{self, Step};
use mlx5_hw::{CqInitAttr, Device, QpCap, QpInitAttr, QpState, QpType};
use mlx5_qp::{Cq, Qp, SendWr, Wc, WcOpcode, WcStatus};
use mlx5_sim::{Fabric, SimDevice};
use std::net::TcpListener;
use std::sync::mpsc;
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

/// Every WR id in `ids` appears exactly once in `wcs`, and nothing else does.
fn each_once(wcs: &[Wc], ids: impl IntoIterator<Item = u64>) {
    let ids: Vec<u64> = ids.into_iter().collect();
    for &id in &ids {
        let n = wcs.iter().filter(|w| w.wr_id() == id).count();
        assert_eq!(n, 1, "wr_id {id} retired {n} times in {wcs:?}");
    }
    assert_eq!(wcs.len(), ids.len(), "unexpected completions in {wcs:?}");
}

/// A SEND and a WRITE from `a` arrive intact at `b` (whose buffer `a` learned as `b_buf`).
fn traffic_flows(f: &Fabric, a: &mut Side, b: &mut Side, b_buf: connect::RemoteBuffer, tag: u8) {
    let msg: Vec<u8> = (0..96u8).map(|i| i ^ tag).collect();
    a.qp.post(&SendWr::send(77).inline(&msg).signaled())
        .unwrap();
    let wa = a.pump(f);
    assert_eq!(wa.len(), 1, "{wa:?}");
    assert_eq!((wa[0].wr_id(), wa[0].status()), (77, WcStatus::Success));
    let wb = b.pump(f);
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!(
        (wb[0].status(), wb[0].opcode(), wb[0].byte_len()),
        (WcStatus::Success, WcOpcode::Recv, 96)
    );
    assert_eq!(b.slot((wb[0].wr_id() - 1000) as usize, 96), &msg[..]);
    let data = [tag ^ 0xff; 48];
    a.qp.post(
        &SendWr::write(78, remote(&b_buf, 128))
            .inline(&data)
            .signaled(),
    )
    .unwrap();
    let wa = a.pump(f);
    assert_eq!((wa.len(), wa[0].status()), (1, WcStatus::Success), "{wa:?}");
    assert_eq!(&b.buf.bytes()[128..176], &data[..]);
}

/// A new QP (and CQ) in `s`'s PD, with the caps `Side::new` uses: what an application creates
/// to replace a QP that is gone.
fn new_qp(s: &Side) -> (Cq, mlx5_hw::QpInfo, Qp) {
    let cqi = s
        .dev
        .create_cq(&CqInitAttr {
            cqe: 256,
            cqe_size: 64,
            ignore_overrun: false,
            channel: None,
        })
        .unwrap();
    // SAFETY: the CQ is never destroyed in these tests.
    let cq = unsafe { Cq::from_layout(&cqi.layout) }.unwrap();
    let info = s
        .dev
        .create_qp(
            s.pd,
            &QpInitAttr {
                qp_type: s.info.layout.qp_type,
                send_cq: cqi.id,
                recv_cq: cqi.id,
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    max_send_sge: 2,
                    max_recv_sge: 2,
                    max_inline_data: 128,
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    // SAFETY: the QP is destroyed only after this `Qp` is dropped (see `replace`).
    let qp = unsafe { Qp::from_layout(&info.layout, None) }.unwrap();
    (cq, info, qp)
}

/// The application's side of losing a QP: create a new one, `replace_qp` (which retires the
/// old QP's WRs through its data path), drop the old data path, destroy the old QP. Returns
/// the old QP's number.
fn replace(s: &mut Side, conn: &mut Connection) -> u32 {
    let (cq, info, qp) = new_qp(s);
    let dev = s.dev.clone();
    let new_ref = QpRef::new(&info, s.pd);
    let old = conn.replace_qp(&dev, new_ref, &mut s.link()).unwrap();
    assert_eq!((old.id, old.qpn), (s.info.id, s.info.qpn));
    assert_eq!(conn.qp(), new_ref);
    assert_eq!(conn.state(), QpState::Reset);
    let old_info = std::mem::replace(&mut s.info, info);
    drop(std::mem::replace(&mut s.qp, qp));
    s.cq = cq;
    dev.destroy_qp(old_info.id).unwrap();
    assert!(dev.query_qp(old_info.id).is_err(), "the old QP is gone");
    old_info.qpn
}

/// `a` sends to a peer QPN that no longer exists: the peer's port drops every try and the
/// requester gives up with RETRY_EXC_ERR. Returns what `a` polled.
fn send_into_the_void(f: &Fabric, a: &mut Side, peer_dev: &SimDevice) -> Vec<Wc> {
    let before = diag::counter_report(peer_dev, 1).unwrap();
    let before_a = diag::counter_report(&a.dev, 1).unwrap();
    a.qp.post(&SendWr::send(1).inline(b"to a QP that is gone").signaled())
        .unwrap();
    let mut polled = Vec::new();
    advance_until(f, || {
        polled.extend(a.pump(f));
        !polled.is_empty()
    });
    assert_eq!(
        (polled[0].wr_id(), polled[0].status()),
        (1, WcStatus::RetryExcErr),
        "{polled:?}"
    );
    assert!(
        diag::WcReport(&polled[0])
            .to_string()
            .contains("TRANSPORT_RETRY_EXC_ERR"),
        "{:?}",
        polled[0]
    );
    let dropped = diag::counter_report(peer_dev, 1).unwrap().delta(&before);
    assert!(
        dropped
            .iter()
            .any(|c| c.name == "rx_dropped" && c.value >= 7),
        "the peer's port dropped every try to the vanished QPN: {dropped:?}"
    );
    let timeouts = diag::counter_report(&a.dev, 1).unwrap().delta(&before_a);
    assert!(
        timeouts
            .iter()
            .any(|c| c.name == "local_ack_timeout_err" && c.value >= 7),
        "the requester's ACK timer fired once per try: {timeouts:?}"
    );
    assert_eq!(a.dev.query_qp(a.info.id).unwrap().qp_state, QpState::Error);
    a.qp.set_state(QpState::Error);
    polled
}

/// The state both sides must be in after the rebuild: A's QP points at B's new QPN with B's
/// new PSN and vice versa.
fn check_crossed(a: &Side, ca: &Connection, b: &Side, cb: &Connection) {
    let qa = a.dev.query_qp(a.info.id).unwrap();
    let qb = b.dev.query_qp(b.info.id).unwrap();
    assert_eq!((qa.qp_state, qb.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(qa.dest_qp_num, b.info.qpn, "A talks to B's new QP");
    assert_eq!(qb.dest_qp_num, a.info.qpn);
    assert_eq!(qa.rq_psn, cb.local().psn);
    assert_eq!(qb.rq_psn, ca.local().psn);
    assert_eq!(ca.peer().qpn, b.info.qpn);
    assert_eq!(cb.local().qpn, b.info.qpn);
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(b.qp.rq_outstanding(), 8, "receives posted on the new QP");
}

#[test]
fn in_process_peer_qp_destroyed_and_replaced() {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let (mut ca, mut cb) = connect_pair(&mut a, &mut b, &params());
    let (ba, bb) = (ca.remote_buffer().unwrap(), cb.remote_buffer().unwrap());
    traffic_flows(&f, &mut a, &mut b, ba, 0x10);

    let old_b = replace(&mut b, &mut cb);
    assert_ne!(old_b, b.info.qpn, "a new QPN");
    let polled = send_into_the_void(&f, &mut a, &db);

    let old_psns = (ca.local().psn, cb.local().psn);
    let (ra, rb) = rebuild_pair(&mut a, &mut ca, &mut b, &mut cb, WcStatus::RetryExcErr);
    assert_eq!((ra.generation, rb.generation), (1, 1));
    assert_eq!(
        (ra.from_state, rb.from_state),
        (QpState::Error, QpState::Reset)
    );
    assert_eq!(rb.qpn, (old_b, b.info.qpn), "B reports the swap");
    assert_eq!(ra.qpn, (a.info.qpn, a.info.qpn));
    assert_eq!(ra.peer_qpn, (old_b, b.info.qpn), "A learned the new QPN");
    assert_eq!(ra.peer_psn, cb.local().psn);
    assert_ne!(ra.sq_psn.1, old_psns.0, "fresh PSNs");
    // A: the failed SEND (polled) and its 8 receives (drained), once each. B: the old QP's 7
    // receives left after the first SEND consumed 1000, retired by replace_qp and reported by
    // the rebuild, once each.
    let all_a: Vec<Wc> = polled.iter().chain(&ra.drained).copied().collect();
    each_once(&all_a, [1].into_iter().chain(1000..1008));
    assert!(all_a[1..]
        .iter()
        .all(|w| w.status() == WcStatus::WrFlushErr));
    each_once(&rb.drained, 1001..1008);
    assert!(rb
        .drained
        .iter()
        .all(|w| w.status() == WcStatus::WrFlushErr));
    assert!(rb.drained.iter().all(|w| w.qp_num() == old_b), "{rb:?}");
    check_crossed(&a, &ca, &b, &cb);

    traffic_flows(&f, &mut a, &mut b, ba, 0x21);
    traffic_flows(&f, &mut b, &mut a, bb, 0x32);
    no_driver_bugs(&f);
}

/// How the side that lost its QP starts the rebuild over TCP.
#[derive(Clone, Copy, Debug)]
enum Initiator {
    /// At once, after replacing: both REBUILDs cross, each side uses the other's.
    Replacer,
    /// When the survivor asks (after its RETRY_EXC_ERR): `poll_control` sees the REBUILD.
    Survivor,
}

fn tcp_peer_qp_destroyed(who: Initiator) {
    let (f, da, db) = fabric2();
    let mut a = Side::new(&da, QpType::Rc);
    let mut b = Side::new(&db, QpType::Rc);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pb = b.params(&params());
    let (gone_tx, gone_rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let dev = b.dev.clone();
        let qb = b.qp_ref();
        let mut cb = Connection::accept(&listener, &dev, qb, &mut b.link(), &pb).unwrap();
        // The QP fails and the application replaces it.
        transition::apply(&dev, qb.id, QpType::Rc, qb.qpn, QpState::Rts, &Step::Error).unwrap();
        b.qp.set_state(QpState::Error);
        let old = replace(&mut b, &mut cb);
        gone_tx.send((old, b.info.qpn)).unwrap();
        let reason = match who {
            Initiator::Replacer => WcStatus::Success,
            Initiator::Survivor => {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
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
                }
            }
        };
        let report = cb.rebuild(&dev, &mut b.link(), reason).unwrap();
        (b, cb, report, old)
    });
    let (qa, pa) = (a.qp_ref(), a.params(&params()));
    let mut ca = Connection::connect(addr, &da, qa, &mut a.link(), &pa).unwrap();
    let old_b = ca.peer().qpn;
    let (gone, new_b) = gone_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(gone, old_b);
    assert_ne!(new_b, old_b);

    let polled = send_into_the_void(&f, &mut a, &db);
    let ra = ca
        .rebuild(&da, &mut a.link(), WcStatus::RetryExcErr)
        .unwrap();
    let (mut b, cb, rb, old) = server.join().unwrap();
    assert_eq!(old, old_b);
    assert_eq!((ca.generation(), cb.generation()), (1, 1));
    assert_eq!(
        ra.peer_qpn,
        (old_b, new_b),
        "A learned the new QPN from REBUILD"
    );
    assert_eq!(rb.qpn, (old_b, new_b));
    assert_eq!(ca.peer().psn, cb.local().psn);
    match who {
        Initiator::Survivor => assert_eq!(rb.reason, WcStatus::RetryExcErr, "B learned why"),
        Initiator::Replacer => assert_eq!(ra.reason, WcStatus::RetryExcErr),
    }
    let all_a: Vec<Wc> = polled.iter().chain(&ra.drained).copied().collect();
    each_once(&all_a, [1].into_iter().chain(1000..1008));
    each_once(&rb.drained, 1000..1008);
    assert!(rb
        .drained
        .iter()
        .all(|w| w.status() == WcStatus::WrFlushErr && w.qp_num() == old_b));
    check_crossed(&a, &ca, &b, &cb);

    let (ba, bb) = (ca.remote_buffer().unwrap(), cb.remote_buffer().unwrap());
    traffic_flows(&f, &mut a, &mut b, ba, 0x43);
    traffic_flows(&f, &mut b, &mut a, bb, 0x54);
    let dump = diag::qp_report(&db, &cb.qp(), Some(&b.qp))
        .unwrap()
        .to_string();
    assert!(dump.contains("state RTS [data path: RTS]"), "{dump}");
    no_driver_bugs(&f);
}

#[test]
fn tcp_peer_qp_destroyed_replacer_rebuilds_first() {
    tcp_peer_qp_destroyed(Initiator::Replacer);
}

#[test]
fn tcp_peer_qp_destroyed_survivor_asks_after_retry_exceeded() {
    tcp_peer_qp_destroyed(Initiator::Survivor);
}
