//! One CQ, several owners: a CQE the table cannot place stays in the CQ, `Cq::poll_own` takes
//! one owner's CQEs from among the others' (which stay, in their order, owner bits right for
//! their new slots), `Cq::discard_next` takes out a stale one on purpose.

use crate::common;

use common::{err, req, resp, FakeCq, FakeQp, FakeSrq, QpCfg};
use mlx5_cq::*;
use mlx5_hw::QpState;
use mlx5_qp::{Cq, Error, Qp, Resolve, SendWr, Sge, Srq, Wc, WcOpcode, WcStatus};

const A: u32 = 0x1234;
const B: u32 = 0x2345;
const SRQN: u32 = 0x55;

/// One QP and the SRQ it receives through, and nothing else: an XRC fallback would take
/// another QP's receives through the same SRQ, so it is off (`Resolve::xrc_srq`).
struct Only<'a> {
    qp: &'a mut Qp,
    srq: Option<&'a mut Srq>,
}

impl Resolve for Only<'_> {
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.qp.qp(qpn)
    }
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.srq.as_deref_mut().filter(|s| s.srqn() == srqn)
    }
    fn xrc_srq(&mut self, _srqn: u32) -> Option<&mut Srq> {
        None
    }
}

fn qp(fake: &FakeQp, srq: bool) -> Qp {
    // SAFETY: `fake` outlives the QP (every test declares the fakes first).
    let mut qp = unsafe { Qp::from_layout(&fake.layout, srq.then_some(SRQN)) }.unwrap();
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn cfg(qpn: u32) -> QpCfg {
    QpCfg {
        qpn,
        uses_srq: true,
        ..QpCfg::default()
    }
}

/// A receive CQE of `qpn` through the SRQ, naming SRQ WQE `idx` (the SRQ number in
/// `srqn_uidx`, as the device writes it).
fn srq_recv(qpn: u32, idx: u16) -> Cqe64 {
    let mut c = resp(CQE_RESP_SEND, qpn, idx, 8, 0);
    c.srqn_uidx = U32::new(SRQN);
    c
}

fn sge() -> [Sge; 1] {
    [Sge {
        addr: 0,
        length: 8,
        lkey: 1,
    }]
}

/// Everything `table` takes with `poll_own`, 3 entries a call.
fn drain_own<R: Resolve + ?Sized>(c: &mut Cq, table: &mut R) -> Vec<Wc> {
    let mut got = Vec::new();
    let mut wcs = [Wc::default(); 3];
    loop {
        let n = c.poll_own(table, &mut wcs).unwrap();
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&wcs[..n]);
    }
}

fn ids(wcs: &[Wc]) -> Vec<(u32, u64, WcStatus)> {
    wcs.iter()
        .map(|w| (w.qp_num(), w.wr_id(), w.status()))
        .collect()
}

#[test]
fn poll_own_takes_one_qps_cqes_and_leaves_the_others_in_order() {
    for (cqe_size, ahead) in [(64, 0), (64, 5), (128, 6)] {
        let (fa, fb, fsrq) = (
            FakeQp::new(&cfg(A)),
            FakeQp::new(&cfg(B)),
            FakeSrq::new(8, 64, SRQN),
        );
        let mut fcq = FakeCq::new(8, cqe_size, false);
        let (mut a, mut b) = (qp(&fa, true), qp(&fb, true));
        // SAFETY: `fsrq` outlives the SRQ.
        let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
        // SAFETY: `fcq` outlives the CQ.
        let mut c = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
        // Move the CQ `ahead` entries on, so that the CQEs below straddle the end of the
        // buffer (the lap's owner bit changes among them).
        for k in 0..ahead {
            b.post(&SendWr::send(900 + k as u64).signaled()).unwrap();
            fcq.push(req(B, k, 0x0a));
        }
        let mut wcs = [Wc::default(); 8];
        assert_eq!(c.poll(&mut b, &mut wcs).unwrap(), ahead as usize);
        for k in 0..4 {
            srq.post_recv(100 + k, &sge()).unwrap();
        }
        for id in [1, 2] {
            a.post(&SendWr::send(id).signaled()).unwrap();
        }
        for id in [11, 12] {
            b.post(&SendWr::send(id).signaled()).unwrap();
        }
        let b0 = ahead;
        // B's send, A's send, B's receive, A's receive, B's send, A's send.
        fcq.push(req(B, b0, 0x0a));
        fcq.push(req(A, 0, 0x0a));
        fcq.push(srq_recv(B, 0));
        fcq.push(srq_recv(A, 1));
        fcq.push(req(B, b0 + 1, 0x0a));
        fcq.push(req(A, 1, 0x0a));

        // A's own, in order, WR ids included (its SRQ receive too); B's stay.
        let mut only_a = Only {
            qp: &mut a,
            srq: Some(&mut srq),
        };
        let got = drain_own(&mut c, &mut only_a);
        assert_eq!(
            ids(&got),
            vec![
                (A, 1, WcStatus::Success),
                (A, 101, WcStatus::Success),
                (A, 2, WcStatus::Success)
            ],
            "{cqe_size}-byte CQEs, {ahead} ahead"
        );
        assert_eq!(c.ci(), ahead as u32 + 3, "only A's three consumed");
        assert_eq!(fcq.set_ci(), ahead as u32 + 3);
        // A plain poll by A now meets B's CQE and leaves it.
        assert!(matches!(
            c.poll(&mut a, &mut wcs),
            Err(Error::UnknownQpn { qpn: B, .. })
        ));
        // The device goes on writing after the moved CQEs: their owner bits are the lap's.
        b.post(&SendWr::send(13).signaled()).unwrap();
        fcq.push(req(B, b0 + 2, 0x0a));
        let mut both = (&mut b, std::slice::from_mut(&mut srq));
        let n = c.poll(&mut both, &mut wcs).unwrap();
        assert_eq!(
            ids(&wcs[..n]),
            vec![
                (B, 11, WcStatus::Success),
                (B, 100, WcStatus::Success),
                (B, 12, WcStatus::Success),
                (B, 13, WcStatus::Success)
            ],
            "B's in their order"
        );
        assert_eq!(wcs[1].opcode(), WcOpcode::Recv);
        assert_eq!(c.poll(&mut both, &mut wcs).unwrap(), 0);
        assert_eq!(srq.outstanding(), 2, "the two receives no CQE named yet");
    }
}

#[test]
fn poll_own_with_none_of_its_own_leaves_everything() {
    let (fa, fb) = (
        FakeQp::new(&QpCfg::default()),
        FakeQp::new(&QpCfg {
            qpn: B,
            ..QpCfg::default()
        }),
    );
    let mut fcq = FakeCq::new(8, 64, false);
    let (mut a, mut b) = (qp(&fa, false), qp(&fb, false));
    // SAFETY: `fcq` outlives the CQ.
    let mut c = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    b.post(&SendWr::send(7).signaled()).unwrap();
    fcq.push(req(B, 0, 0x0a));
    let mut wcs = [Wc::default(); 4];
    assert_eq!(c.poll_own(&mut a, &mut wcs).unwrap(), 0);
    assert_eq!((c.ci(), fcq.set_ci()), (0, 0));
    assert_eq!(c.poll(&mut b, &mut wcs).unwrap(), 1);
    assert_eq!(wcs[0].wr_id(), 7);
}

#[test]
fn a_receive_through_an_srq_missing_from_the_table_stays_and_changes_nothing() {
    let fa = FakeQp::new(&cfg(A));
    let fsrq = FakeSrq::new(4, 64, SRQN);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut a = qp(&fa, true);
    // SAFETY: `fsrq` outlives the SRQ.
    let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    // SAFETY: `fcq` outlives the CQ.
    let mut c = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    srq.post_recv(40, &sge()).unwrap();
    // A receive that failed (a local length error): it moves the QP to Error, once placed.
    fcq.push(err(CQE_RESP_ERR, A, 0, SYNDROME_LOCAL_LENGTH_ERR, 0x11));
    let mut wcs = [Wc::default(); 4];
    let mut no_srq = Only {
        qp: &mut a,
        srq: None,
    };
    let e = c.poll(&mut no_srq, &mut wcs).unwrap_err();
    assert_eq!(
        e,
        Error::UnknownSrqn {
            cqn: 0x77,
            srqn: SRQN
        }
    );
    assert!(e.leaves_cqe());
    assert_eq!(
        c.poll_own(&mut no_srq, &mut wcs).unwrap_err(),
        e,
        "poll_own reports it too: the CQE is its QP's"
    );
    assert_eq!(c.ci(), 0);
    assert_eq!(
        a.state(),
        QpState::Rts,
        "an unplaced CQE moves the QP nowhere"
    );
    let mut with = Only {
        qp: &mut a,
        srq: Some(&mut srq),
    };
    assert_eq!(c.poll(&mut with, &mut wcs).unwrap(), 1);
    assert_eq!((wcs[0].wr_id(), wcs[0].status()), (40, WcStatus::LocLenErr));
    assert_eq!(a.state(), QpState::Error);
}

#[test]
fn another_qps_receive_through_the_same_srq_is_not_taken_without_the_xrc_fallback() {
    let fa = FakeQp::new(&cfg(A));
    let fsrq = FakeSrq::new(4, 64, SRQN);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut a = qp(&fa, true);
    // SAFETY: `fsrq` outlives the SRQ.
    let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    // SAFETY: `fcq` outlives the CQ.
    let mut c = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    srq.post_recv(50, &sge()).unwrap();
    fcq.push(srq_recv(B, 0));
    let mut wcs = [Wc::default(); 4];
    let mut only_a = Only {
        qp: &mut a,
        srq: Some(&mut srq),
    };
    assert_eq!(c.poll_own(&mut only_a, &mut wcs).unwrap(), 0);
    assert_eq!(c.ci(), 0, "B's receive stays for B's owner");
    // A table with the default fallback (an XRC target's receive is its SRQ's) takes it.
    let mut table = (&mut a, std::slice::from_mut(&mut srq));
    assert_eq!(c.poll(&mut table, &mut wcs).unwrap(), 1);
    assert_eq!((wcs[0].qp_num(), wcs[0].wr_id()), (B, 50));
}

/// A CQ that tracks destroyed QPs (`Cq::track_destroyed`, what `mlx5-ctx` sets on each of its
/// CQs) settles their CQEs itself when a poll meets them among a live QP's: the destroyed
/// QP's send is consumed without a completion, its receive through the SRQ gives the SRQ's
/// WR back (with the destroyed QP's number; the CQE carries the QP's user index, as with CQE
/// version 1, so no XRC fallback finds the SRQ), a receive on a QP's own receive queue is
/// consumed. Untracked, or once the number is forgotten (a new QP got it), such a CQE is
/// `UnknownQpn` and stays; without the SRQ in the table, `UnknownSrqn` and stays.
#[test]
fn a_destroyed_qps_cqes_are_settled_by_a_cq_that_tracks_them() {
    use mlx5_qp::DestroyedQps;
    use std::sync::Arc;
    const C: u32 = 0x3456;
    let (fa, fb, fc) = (
        FakeQp::new(&cfg(A)),
        FakeQp::new(&QpCfg {
            qpn: B,
            ..QpCfg::default()
        }),
        FakeQp::new(&QpCfg {
            qpn: C,
            ..QpCfg::default()
        }),
    );
    let fsrq = FakeSrq::new(8, 64, SRQN);
    let mut fcq = FakeCq::new(16, 64, false);
    let (mut a, mut b, mut cq_c) = (qp(&fa, true), qp(&fb, false), qp(&fc, false));
    // SAFETY: `fsrq` outlives the SRQ.
    let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    // SAFETY: `fcq` outlives the CQ.
    let mut c = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    for k in 0..2 {
        srq.post_recv(100 + k, &sge()).unwrap();
    }
    a.post(&SendWr::send(1).signaled()).unwrap();
    cq_c.post_recv(300, &sge()).unwrap();
    for id in [11, 12, 13] {
        b.post(&SendWr::send(id).signaled()).unwrap();
    }
    let a_recv = |idx| {
        let mut r = srq_recv(A, idx);
        r.srqn_uidx = U32::new(7);
        r
    };
    fcq.push(req(A, 0, 0x0a));
    fcq.push(req(B, 0, 0x0a));
    fcq.push(a_recv(0));
    fcq.push(resp(CQE_RESP_SEND, C, 0, 8, 0));
    fcq.push(req(B, 1, 0x0a));
    drop((a, cq_c));
    let mut wcs = [Wc::default(); 8];
    // The live QP and the SRQ, as one table.
    macro_rules! both {
        () => {
            &mut (&mut b, std::slice::from_mut(&mut srq))
        };
    }
    assert!(
        matches!(
            c.poll(both!(), &mut wcs),
            Err(Error::UnknownQpn { qpn: A, .. })
        ),
        "untracked: the destroyed QP's CQE stays"
    );
    let dead = Arc::new(DestroyedQps::new());
    c.track_destroyed(dead.clone());
    dead.record(A, Some(SRQN));
    dead.record(C, None);
    let n = c.poll(both!(), &mut wcs).unwrap();
    assert_eq!(
        ids(&wcs[..n]),
        vec![
            (B, 11, WcStatus::Success),
            (A, 100, WcStatus::Success),
            (B, 12, WcStatus::Success)
        ],
        "the live QP's completions and the SRQ's receive, the rest consumed"
    );
    assert_eq!(wcs[1].opcode(), WcOpcode::Recv);
    assert_eq!((c.ci(), fcq.set_ci()), (5, 5));
    assert_eq!(srq.outstanding(), 1);

    // The SRQ's receive needs the SRQ; a number alive again is a live QP's.
    fcq.push(a_recv(1));
    assert!(matches!(
        c.poll(&mut b, &mut wcs),
        Err(Error::UnknownSrqn { srqn: SRQN, .. })
    ));
    dead.forget(A);
    assert!(matches!(
        c.poll(both!(), &mut wcs),
        Err(Error::UnknownQpn { qpn: A, .. })
    ));
    dead.record(A, Some(SRQN));
    // The one-entry poll settles them too.
    fcq.push(req(B, 2, 0x0a));
    let mut one = [Wc::default(); 1];
    assert_eq!(c.poll(both!(), &mut one).unwrap(), 1);
    assert_eq!(ids(&one), vec![(A, 101, WcStatus::Success)]);
    assert_eq!(c.poll(both!(), &mut one).unwrap(), 1);
    assert_eq!(ids(&one), vec![(B, 13, WcStatus::Success)]);
    assert_eq!((c.ci(), srq.outstanding()), (7, 0));
}

/// The list of destroyed QPs is bounded: the oldest is forgotten first, a number recorded
/// again moves to the end.
#[test]
fn the_destroyed_qp_list_keeps_the_latest() {
    use mlx5_qp::{DestroyedQp, DestroyedQps};
    let d = DestroyedQps::new();
    for qpn in 0..DestroyedQps::CAPACITY as u32 {
        d.record(qpn, None);
    }
    d.record(0, Some(9));
    d.record(70_000, None);
    assert_eq!(d.len(), DestroyedQps::CAPACITY);
    assert_eq!(d.get(1), None, "the oldest went");
    assert_eq!(
        d.get(0),
        Some(DestroyedQp {
            qpn: 0,
            srqn: Some(9)
        })
    );
    assert!(d.get(70_000).is_some() && d.get(2).is_some());
    d.forget(2);
    assert_eq!(d.get(2), None);
}

/// A DC target has no data path: no table holds it. Its receive CQE names it by number and,
/// with CQE version 1, carries its own user index in `srqn_uidx`, which no SRQ fallback finds;
/// a CQ that tracks its DC targets (`Cq::track_dc_targets`) completes it on the DCT's SRQ, or
/// leaves it as `UnknownSrqn` when the table lacks that SRQ. Untracked: `UnknownQpn`.
#[test]
fn a_dc_targets_receive_completes_on_its_srq_by_the_targets_number() {
    use mlx5_qp::DcTargets;
    use std::sync::Arc;
    const DCT: u32 = 0x4567;
    let fsrq = FakeSrq::new(8, 64, SRQN);
    let mut fcq = FakeCq::new(8, 64, false);
    // SAFETY: `fsrq` outlives the SRQ.
    let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    // SAFETY: `fcq` outlives the CQ.
    let mut c = unsafe { Cq::from_layout(&fcq.layout) }.unwrap();
    srq.post_recv(70, &sge()).unwrap();
    let mut r = srq_recv(DCT, 0);
    r.srqn_uidx = U32::new(9);
    fcq.push(r);
    let mut wcs = [Wc::default(); 4];
    let mut none: [Qp; 0] = [];
    assert!(matches!(
        c.poll(
            &mut (&mut none[..], std::slice::from_mut(&mut srq)),
            &mut wcs
        ),
        Err(Error::UnknownQpn { qpn: DCT, .. })
    ));
    let targets = Arc::new(DcTargets::new());
    targets.add(DCT, SRQN);
    c.track_dc_targets(targets.clone());
    assert!(matches!(
        c.poll(&mut none[..], &mut wcs),
        Err(Error::UnknownSrqn { srqn: SRQN, .. })
    ));
    let n = c
        .poll(
            &mut (&mut none[..], std::slice::from_mut(&mut srq)),
            &mut wcs,
        )
        .unwrap();
    assert_eq!(ids(&wcs[..n]), vec![(DCT, 70, WcStatus::Success)]);
    assert_eq!((c.ci(), srq.outstanding()), (1, 0));
    targets.remove(DCT);
    assert_eq!(targets.srq_of(DCT), None);
}
