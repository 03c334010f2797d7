//! Completion channels through the owning API: many CQs on one channel, one event per arm
//! and the CQ that fired, solicited-only arming, acknowledgements in batches and before a CQ is
//! destroyed (a raw destroy with events unacknowledged is refused with a clear error; the
//! owning drop acknowledges first and leaves nothing), the channel outliving its CQs, the
//! blocking single-CQ wait, and the asynchronous event queue (QP fatal, access error, port, SRQ
//! limit, last WQE reached).
//! Deterministic fabric: every step is the test's (the software ConnectX checks the arm
//! sequence numbers and reports a wrong one as a driver bug).

use std::time::Duration;

use crate::support::connect_pair_rc;
use mlx5_ctx::channel::ACK_BATCH;
use mlx5_ctx::{
    AsyncEvent, CompChannel, Context, Cq, CqInit, Error, Mr, Pd, Qp, QpInit, SimFabric,
};
use mlx5_hw::{CqInitAttr, PortState};
use mlx5_qp::{RemoteAddr, SendWr, Wc};

/// Bytes per message and per receive slot.
pub const SLOT: usize = 64;

/// `n` RC QPs on device A (one CQ, no channel) connected to `n` on device B, whose QPs each
/// complete on a CQ of their own, all on one channel.
pub struct Rig {
    pub a: Context,
    pub b: Context,
    pub a_qps: Vec<Qp>,
    pub a_cq: Cq,
    pub b_qps: Vec<Qp>,
    pub b_cqs: Vec<Cq>,
    pub ch: CompChannel,
    pub a_mr: Mr,
    pub b_mr: Mr,
    pub b_pd: Pd,
}

impl Rig {
    pub fn new(a: Context, b: Context, n: usize) -> Rig {
        let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let a_cq = a.create_cq(1024).unwrap();
        let ch = b.create_comp_channel().unwrap();
        let b_cqs: Vec<Cq> = (0..n).map(|_| b.create_cq_on(256, &ch).unwrap()).collect();
        let mut a_qps = Vec::new();
        let mut b_qps = Vec::new();
        for cq in &b_cqs {
            let mut qa = pd_a.create_qp(&QpInit::rc(&a_cq)).unwrap();
            let mut qb = pd_b.create_qp(&QpInit::rc(cq)).unwrap();
            connect_pair_rc(&mut qa, &mut qb);
            a_qps.push(qa);
            b_qps.push(qb);
        }
        let a_mr = pd_a.alloc_mr(SLOT * n).unwrap();
        let b_mr = pd_b.alloc_mr(SLOT * n).unwrap();
        Rig {
            a,
            b,
            a_qps,
            a_cq,
            b_qps,
            b_cqs,
            ch,
            a_mr,
            b_mr,
            b_pd: pd_b,
        }
    }

    /// Post one receive on B's QP `i`.
    pub fn post_recv(&mut self, i: usize, wr_id: u64) {
        let sge = self.b_mr.sge(i * SLOT, SLOT as u32).unwrap();
        self.b_qps[i].post_recv(wr_id, &[sge]).unwrap();
    }

    /// SEND 8 bytes (`wr_id` big-endian) from A's QP `i`, solicited or not; retires A's send
    /// completions polled so far.
    pub fn send(&mut self, i: usize, wr_id: u64, solicited: bool) {
        self.a_mr.write(i * SLOT, &wr_id.to_be_bytes()).unwrap();
        let sge = [self.a_mr.sge(i * SLOT, 8).unwrap()];
        let wr = SendWr::send(wr_id).sges(&sge).signaled();
        let wr = if solicited { wr.solicited() } else { wr };
        self.a_qps[i].post(&wr).unwrap();
        self.drain_a();
    }

    /// Poll A's send completions (all must succeed).
    pub fn drain_a(&mut self) {
        let mut wcs = [Wc::default(); 32];
        loop {
            let n = self.a_cq.poll(&mut self.a_qps[..], &mut wcs).unwrap();
            for wc in &wcs[..n] {
                assert!(wc.is_ok(), "send failed: {wc:?}");
            }
            if n == 0 {
                return;
            }
        }
    }

    /// Everything B's CQ `i` holds now.
    pub fn drain_b(&mut self, i: usize) -> Vec<Wc> {
        let mut out = Vec::new();
        let mut wcs = [Wc::default(); 32];
        loop {
            let n = self.b_cqs[i].poll(&mut self.b_qps[..], &mut wcs).unwrap();
            out.extend_from_slice(&wcs[..n]);
            if n == 0 {
                return out;
            }
        }
    }
}

fn deterministic_rig(n: usize) -> (SimFabric, Rig) {
    let f = SimFabric::deterministic();
    let (a, b) = (f.add_device(), f.add_device());
    (f, Rig::new(a, b, n))
}

fn assert_no_bugs(f: &SimFabric) {
    let bugs = f.fabric().take_driver_bugs();
    assert!(bugs.is_empty(), "driver bugs: {bugs:?}");
}

/// Every event the channel has now, in order.
fn events(ch: &CompChannel) -> Vec<mlx5_hw::CqId> {
    std::iter::from_fn(|| ch.get_event().unwrap()).collect()
}

#[test]
fn many_cqs_on_one_channel_say_which_fired() {
    let n = 4;
    let (f, mut r) = deterministic_rig(n);
    assert_eq!(r.ch.cq_count(), n);
    for cq in &r.b_cqs {
        assert!(cq.channel().unwrap().same_channel(&r.ch));
    }
    // More rounds than the acknowledgement batch and than the 2-bit arm sequence number
    // wraps: the software ConnectX checks every arm's sequence number.
    let rounds = 2 * ACK_BATCH as u64 + 3;
    let mut got = vec![0u64; n];
    for round in 0..rounds {
        for cq in &mut r.b_cqs {
            cq.arm(false);
        }
        // Two of the four QPs receive this round.
        let fire = [round as usize % n, (round as usize + 2) % n];
        for &i in &fire {
            r.post_recv(i, round);
            r.send(i, round, false);
        }
        r.a.progress();
        // Which CQs fired: the two that completed. An arm still in flight when a CQE is
        // written fires again on arrival (its consumer index is behind the CQE: the race the
        // index exists for, which the software ConnectX plays by seeing arms last), so a CQ
        // armed in an earlier round too may fire twice; never one without a completion.
        let mut ids = events(&r.ch);
        ids.sort();
        ids.dedup();
        let mut want: Vec<_> = fire.iter().map(|&i| r.b_cqs[i].id()).collect();
        want.sort();
        assert_eq!(ids, want, "round {round}: the CQs that fired");
        for &i in &fire {
            let wcs = r.drain_b(i);
            assert_eq!(wcs.len(), 1);
            assert_eq!(wcs[0].wr_id(), round);
            assert_eq!(wcs[0].qp_num(), r.b_qps[i].qpn());
            got[i] += 1;
            assert!(
                r.ch.unacked(r.b_cqs[i].id()) < ACK_BATCH,
                "acked in batches"
            );
        }
        // The CQs that did not fire are still armed: no event without a completion.
        assert_eq!(r.ch.get_event().unwrap(), None);
    }
    assert_eq!(got.iter().sum::<u64>(), 2 * rounds);
    r.ch.flush_acks().unwrap();
    for cq in &r.b_cqs {
        assert_eq!(r.ch.unacked(cq.id()), 0);
    }
    assert_no_bugs(&f);
}

#[test]
fn one_event_per_arm_and_arming_with_completions_waiting_fires_at_once() {
    let (f, mut r) = deterministic_rig(1);
    let fd_readable = |ch: &CompChannel| ch.wait_event(Duration::ZERO).unwrap();
    // Not armed: the completion comes, the event does not.
    r.post_recv(0, 1);
    r.send(0, 1, false);
    r.a.progress();
    assert_eq!(fd_readable(&r.ch), None);
    // Armed with that CQE still waiting past the consumer index: fires at once.
    r.b_cqs[0].arm(false);
    r.a.progress();
    assert_eq!(fd_readable(&r.ch), Some(r.b_cqs[0].id()));
    assert_eq!(r.drain_b(0).len(), 1);
    // Armed with nothing waiting: the next completion fires it, once.
    r.b_cqs[0].arm(false);
    r.a.progress();
    assert_eq!(fd_readable(&r.ch), None);
    for k in 2..4 {
        r.post_recv(0, k);
        r.send(0, k, false);
    }
    r.a.progress();
    assert_eq!(fd_readable(&r.ch), Some(r.b_cqs[0].id()));
    assert_eq!(fd_readable(&r.ch), None, "one event per arm");
    assert_eq!(r.drain_b(0).len(), 2);
    assert_no_bugs(&f);
}

#[test]
fn solicited_only_arming() {
    let (f, mut r) = deterministic_rig(1);
    for k in 0..3 {
        r.post_recv(0, k);
    }
    r.b_cqs[0].arm(true);
    // An unsolicited SEND completes without an event ...
    r.send(0, 0, false);
    r.a.progress();
    assert_eq!(r.ch.wait_event(Duration::ZERO).unwrap(), None);
    // ... and a solicited one fires the arm.
    r.send(0, 1, true);
    r.a.progress();
    assert_eq!(
        r.ch.wait_event(Duration::ZERO).unwrap(),
        Some(r.b_cqs[0].id())
    );
    let wcs = r.drain_b(0);
    assert_eq!(
        wcs.iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
        vec![0, 1]
    );
    // A solicited-only arm with only an unsolicited CQE waiting stays quiet; a later arm for
    // any completion fires at once (IBTA Vol. 1 §11.4.2.2: it takes precedence).
    r.send(0, 2, false);
    r.a.progress();
    r.b_cqs[0].arm(true);
    r.a.progress();
    assert_eq!(r.ch.wait_event(Duration::ZERO).unwrap(), None);
    r.b_cqs[0].arm(false);
    assert_eq!(
        r.ch.wait_event(Duration::ZERO).unwrap(),
        Some(r.b_cqs[0].id())
    );
    assert_eq!(r.drain_b(0).len(), 1);
    assert_no_bugs(&f);
}

#[test]
fn destroy_with_unacknowledged_events_is_refused_and_drop_acknowledges_first() {
    let (f, mut r) = deterministic_rig(2);
    let dev = r.b.sim_device().unwrap().clone();
    // Five events taken from CQ 0, fewer than a batch: none acknowledged yet.
    for k in 0..5 {
        r.b_cqs[0].arm(false);
        r.post_recv(0, k);
        r.send(0, k, false);
        r.a.progress();
        assert_eq!(events(&r.ch), vec![r.b_cqs[0].id()]);
        r.drain_b(0);
    }
    let cq0 = r.b_cqs[0].id();
    assert_eq!(r.ch.unacked(cq0), 5);
    // CQ 1 fires too, and its event is left queued (not taken).
    r.b_cqs[1].arm(false);
    r.post_recv(1, 7);
    r.send(1, 7, false);
    r.a.progress();
    // The QPs go first (a QP holds its CQ); the CQs stay, held by the test.
    let before = dev.live_objects();
    r.b_qps.clear();
    assert_eq!(dev.live_objects().qps, before.qps - 2);
    // Destroying the device CQ behind the owning layer's back is refused, saying why and what
    // to call (verbs would wait for the acknowledgements forever).
    let e = r.b.device().destroy_cq(cq0).unwrap_err();
    assert!(matches!(e, mlx5_hw::Error::Busy(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("not acknowledged") && msg.contains("ack_cq_events(cq, 5)"),
        "{msg}"
    );
    // The owning drop acknowledges the five first, then destroys: nothing is left behind.
    let cqs_before = dev.live_objects().cqs;
    let cq = r.b_cqs.remove(0);
    drop(cq);
    assert_eq!(dev.live_objects().cqs, cqs_before - 1);
    assert_eq!(r.ch.cq_count(), 1);
    // The channel outlives the handle the test holds while a CQ is on it ...
    let id = r.ch.id();
    let ch = std::mem::replace(&mut r.ch, r.b.create_comp_channel().unwrap());
    drop(ch);
    assert!(
        r.b.device().comp_channel_fd(id).is_ok(),
        "CQ 1 still holds it"
    );
    // ... and goes with its last CQ, whose queued (never taken) event goes with it.
    r.b_cqs.clear();
    assert_eq!(dev.live_objects().cqs, cqs_before - 2);
    assert!(matches!(
        r.b.device().comp_channel_fd(id),
        Err(mlx5_hw::Error::UnknownHandle { .. })
    ));
    assert_no_bugs(&f);
}

#[test]
fn poll_blocking_sleeps_on_a_channel_of_its_own_only() {
    let (f, mut r) = deterministic_rig(2);
    let mut wcs = [Wc::default(); 4];
    let e = r.b_cqs[0]
        .poll_blocking(&mut r.b_qps[..], &mut wcs, 0, Duration::ZERO)
        .unwrap_err();
    assert!(matches!(e, Error::Events(_)), "{e}");
    assert!(
        e.to_string()
            .contains("shares its completion channel with 1 other"),
        "{e}"
    );
    // A CQ without a channel has nothing to sleep on.
    let mut plain = r.b.create_cq(16).unwrap();
    let e = plain
        .poll_blocking(&mut r.b_qps[..], &mut wcs, 0, Duration::ZERO)
        .unwrap_err();
    assert!(e.to_string().contains("no completion channel"), "{e}");
    // Alone on its channel: waits (stepping the deterministic fabric), arms, takes the event.
    let ch = r.b.create_comp_channel().unwrap();
    let mut cq = r.b.create_cq_on(16, &ch).unwrap();
    let mut qa = r.a_qps[0].pd().create_qp(&QpInit::rc(&r.a_cq)).unwrap();
    let mut qb = r.b_pd.create_qp(&QpInit::rc(&cq)).unwrap();
    connect_pair_rc(&mut qa, &mut qb);
    assert_eq!(
        cq.poll_blocking(&mut qb, &mut wcs, 3, Duration::ZERO)
            .unwrap(),
        0,
        "nothing posted: the deadline passes"
    );
    for k in 0..3 {
        let sge = r.b_mr.sge(0, SLOT as u32).unwrap();
        qb.post_recv(k, &[sge]).unwrap();
        let src = [r.a_mr.sge(0, 8).unwrap()];
        qa.post(&SendWr::send(k).sges(&src).signaled()).unwrap();
        let n = cq
            .poll_blocking(&mut qb, &mut wcs, 0, Duration::from_secs(5))
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(wcs[0].wr_id(), k);
    }
    drop((qa, qb, cq));
    assert_eq!(ch.cq_count(), 0);
    assert_no_bugs(&f);
}

#[test]
fn a_cq_joins_only_a_channel_of_its_context() {
    let (_f, r) = deterministic_rig(1);
    let e = r.a.create_cq_on(16, &r.ch).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    let e =
        r.b.create_cq_with(&CqInit {
            attr: CqInitAttr {
                channel: Some(r.ch.id()),
                ..CqInitAttr::default()
            },
        })
        .unwrap_err();
    assert!(e.to_string().contains("create_cq_on"), "{e}");
}

#[test]
fn async_events_qp_fatal_access_error_and_port() {
    let (f, mut r) = deterministic_rig(1);
    let ev_a = r.a.async_events().unwrap();
    let ev_b = r.b.async_events().unwrap();
    // One consumer per device queue.
    let e = r.a.async_events().unwrap_err();
    assert!(e.to_string().contains("already taken"), "{e}");
    use std::os::fd::AsRawFd;
    assert!(ev_a.as_raw_fd() >= 0);
    // A WRITE to an rkey B never gave: A's QP fails (fatal), B's sees an access error.
    let src = [r.a_mr.sge(0, 8).unwrap()];
    r.a_qps[0]
        .post(
            &SendWr::write(5, RemoteAddr::new(0x1000, 0xdead_beef))
                .sges(&src)
                .signaled(),
        )
        .unwrap();
    let a_ev = ev_a.wait_event(Duration::from_secs(5)).unwrap();
    assert_eq!(a_ev, Some(AsyncEvent::QpFatal(r.a_qps[0].id())));
    let b_ev = ev_b.wait_event(Duration::from_secs(5)).unwrap();
    assert_eq!(b_ev, Some(AsyncEvent::QpAccessError(r.b_qps[0].id())));
    let mut wcs = [Wc::default(); 4];
    let n = r.a_cq.poll(&mut r.a_qps[..], &mut wcs).unwrap();
    assert_eq!(n, 1);
    assert!(!wcs[0].is_ok());
    // Port down and up.
    let dev_b = r.b.sim_device().unwrap();
    dev_b.set_port_state(PortState::Down);
    dev_b.set_port_state(PortState::Active);
    assert_eq!(ev_b.next_event(), Some(AsyncEvent::PortError(1)));
    assert_eq!(ev_b.next_event(), Some(AsyncEvent::PortActive(1)));
    assert_eq!(ev_b.wait_event(Duration::ZERO).unwrap(), None);
    // Dropped, the queue can be taken again.
    drop(ev_a);
    let again = r.a.async_events().unwrap();
    assert_eq!(again.next_event(), None);
    let _ = f.fabric().take_driver_bugs();
}

#[test]
fn async_events_srq_limit_and_last_wqe_reached() {
    let f = SimFabric::deterministic();
    let (a, b) = (f.add_device(), f.add_device());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let mut srq = pd_b.create_srq(7, 1).unwrap();
    let mut qa = pd_a.create_qp(&QpInit::rc(&cq_a)).unwrap();
    let mut qb = pd_b.create_qp(&QpInit::rc(&cq_b).srq(&srq)).unwrap();
    connect_pair_rc(&mut qa, &mut qb);
    let ev = b.async_events().unwrap();
    let (src, dst) = (pd_a.alloc_mr(64).unwrap(), pd_b.alloc_mr(64).unwrap());
    for k in 0..3 {
        srq.post_recv(k, &[dst.sge(0, 64).unwrap()]).unwrap();
    }
    srq.arm_limit(2).unwrap();
    let sge = [src.sge(0, 8).unwrap()];
    qa.post(&SendWr::send(1).sges(&sge)).unwrap();
    assert_eq!(
        ev.wait_event(Duration::ZERO).unwrap(),
        None,
        "2 left: not below 2"
    );
    qa.post(&SendWr::send(2).sges(&sge)).unwrap();
    assert_eq!(
        ev.wait_event(Duration::from_secs(5)).unwrap(),
        Some(AsyncEvent::SrqLimitReached(srq.id()))
    );
    // The QP on the SRQ goes to Error: last WQE reached (IBV_EVENT_QP_LAST_WQE_REACHED, man
    // ibv_get_async_event), named by the owning QP's id.
    qb.modify(&mlx5_hw::transition::Step::Error).unwrap();
    assert_eq!(
        ev.wait_event(Duration::from_secs(5)).unwrap(),
        Some(AsyncEvent::QpLastWqeReached(qb.id()))
    );
    let _ = f.fabric().take_driver_bugs();
}
