//! Recovering one QP of a server whose QPs share one CQ and one SRQ (the shape of
//! `examples/srq_server.rs`): requests in flight on every QP, one client driven into Error by
//! a bad rkey, its QP pair rebuilt. The rebuild's drain takes only the rebuilt QP's CQEs —
//! its SRQ receives come back with their WR ids — and leaves the other QPs' in the CQ, where
//! the server's own poll finds them: every WR of every QP completes exactly once and every
//! consumed SRQ receive comes back.

use std::collections::BTreeMap;

use mlx5_connect::{connect_qps, rebuild_pair, ConnectParams, Connection, QpLink};
use mlx5_ctx::{Context, Cq, Mr, Qp, QpInit, SimFabric, Srq};
use mlx5_hw::QpState;
use mlx5_qp::{RemoteAddr, SendWr, Wc, WcOpcode, WcStatus};

/// Receives in the server's SRQ.
const SRQ_DEPTH: u64 = 16;
/// The first SRQ receive's WR id.
const RECV_ID: u64 = 100;
const SLOT: usize = 64;
const CLIENTS: usize = 3;
/// The client driven into Error.
const BAD: usize = 1;

pub(crate) struct Client {
    pub ctx: Context,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

pub(crate) struct Server {
    pub ctx: Context,
    pub cq: Cq,
    pub srq: Srq,
    pub qps: Vec<Qp>,
    pub mr: Mr,
}

/// The server (one CQ, one SRQ of `SRQ_DEPTH` receives posted, one RC QP per client) and
/// `CLIENTS` clients on devices of their own, connected in process.
pub(crate) fn setup(fabric: &SimFabric) -> (Server, Vec<Client>, Vec<(Connection, Connection)>) {
    let sctx = fabric.add_device();
    let pd = sctx.alloc_pd().unwrap();
    let cq = sctx.create_cq(256).unwrap();
    let mut srq = pd.create_srq(SRQ_DEPTH as u32, 1).unwrap();
    let init = QpInit::rc(&cq).srq(&srq).max_send_wr(16);
    let mut qps: Vec<Qp> = (0..CLIENTS).map(|_| pd.create_qp(&init).unwrap()).collect();
    let mr = pd.alloc_mr(SRQ_DEPTH as usize * SLOT + 4 * SLOT).unwrap();
    for k in 0..SRQ_DEPTH {
        srq.post_recv(
            RECV_ID + k,
            &[mr.sge(k as usize * SLOT, SLOT as u32).unwrap()],
        )
        .unwrap();
    }
    let mut clients = Vec::new();
    let mut conns = Vec::new();
    for sqp in qps.iter_mut() {
        let ctx = fabric.add_device();
        let cpd = ctx.alloc_pd().unwrap();
        let ccq = ctx.create_cq(64).unwrap();
        let mut qp = cpd.create_qp(&QpInit::rc(&ccq).max_recv_wr(8)).unwrap();
        let cmr = cpd.alloc_mr(8 * SLOT).unwrap();
        conns.push(connect_qps(sqp, &mut qp, &ConnectParams::default()).unwrap());
        for k in 0..4u64 {
            qp.post_recv(
                1000 + k,
                &[cmr.sge(4 * SLOT + k as usize * SLOT, SLOT as u32).unwrap()],
            )
            .unwrap();
        }
        clients.push(Client {
            ctx,
            cq: ccq,
            qp,
            mr: cmr,
        });
    }
    let server = Server {
        ctx: sctx,
        cq,
        srq,
        qps,
        mr,
    };
    (server, clients, conns)
}

/// Requests from every client (two each: client 1 WRITEs with immediate, the others SEND),
/// one client at a time so that the server's CQ holds the first client's CQEs ahead of the
/// bad one's; the server's answers (two SENDs per QP, then one more each still in flight when
/// the bad client fails). The server polls nothing. Returns the WR ids the server posted, per
/// QPN.
pub(crate) fn traffic(
    fabric: &SimFabric,
    s: &mut Server,
    clients: &mut [Client],
) -> BTreeMap<u32, Vec<u64>> {
    let f = fabric.fabric();
    for (c, cl) in clients.iter_mut().enumerate() {
        for k in 0..2u64 {
            let id = c as u64 * 10 + k;
            cl.mr.write(0, &[c as u8 + 1; SLOT]).unwrap();
            let sge = [cl.mr.sge(0, SLOT as u32).unwrap()];
            let wr = if c == BAD {
                let at =
                    s.mr.remote(SRQ_DEPTH as usize * SLOT + k as usize * SLOT)
                        .unwrap();
                SendWr::write_imm(id, at, 0x1000 + id as u32)
            } else {
                SendWr::send(id)
            };
            cl.qp.post(&wr.sges(&sge).signaled()).unwrap();
        }
        f.run_until_idle();
    }
    let mut posted: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let sge = [s.mr.sge(0, 8).unwrap()];
    for round in 0..2u64 {
        for (i, qp) in s.qps.iter_mut().enumerate() {
            let id = 500 + i as u64 * 10 + round;
            qp.post(&SendWr::send(id).sges(&sge).signaled()).unwrap();
            posted.entry(qp.qpn()).or_default().push(id);
        }
    }
    f.run_until_idle();
    // One more answer on every QP, still in flight when the bad client's WRITE goes out with
    // a wrong rkey: REMOTE_ACCESS_ERR at the client, both ends of that pair in Error.
    for (i, qp) in s.qps.iter_mut().enumerate() {
        let id = 590 + i as u64;
        qp.post(&SendWr::send(id).sges(&sge).signaled()).unwrap();
        posted.entry(qp.qpn()).or_default().push(id);
    }
    let bad = &mut clients[BAD];
    let sge = [bad.mr.sge(0, 8).unwrap()];
    let wrong = RemoteAddr::new(s.mr.addr(), s.mr.rkey() ^ 0x5a5a);
    bad.qp
        .post(&SendWr::write(77, wrong).sges(&sge).signaled())
        .unwrap();
    f.run_until_idle();
    posted
}

/// Every completion ready on `cq` for the QPs and SRQ of the server.
pub(crate) fn poll_all(s: &mut Server) -> Vec<Wc> {
    let mut got = Vec::new();
    let mut wcs = [Wc::default(); 8];
    loop {
        s.ctx.progress();
        let n =
            s.cq.poll(
                &mut (&mut s.qps[..], std::slice::from_mut(&mut s.srq)),
                &mut wcs,
            )
            .unwrap();
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&wcs[..n]);
    }
}

/// The bad client's error, then its pair rebuilt with the low-level API: the server's side
/// through a `QpLink` on the shared CQ, with the shared SRQ.
#[test]
fn rebuilding_one_qp_on_a_shared_cq_and_srq_loses_nothing() {
    let fabric = SimFabric::deterministic();
    let (mut s, mut clients, mut conns) = setup(&fabric);
    let posted = traffic(&fabric, &mut s, &mut clients);
    let bad = &mut clients[BAD];
    let failed = bad
        .cq
        .poll_until(&mut bad.qp, std::time::Duration::from_secs(5), |w| {
            w.wr_id() == 77
        })
        .unwrap();
    let bad_write = failed.iter().find(|w| w.wr_id() == 77).unwrap();
    assert_eq!(bad_write.status(), WcStatus::RemAccessErr, "{failed:?}");
    let qpn = s.qps[BAD].qpn();

    let (server_dev, client_dev) = (s.ctx.clone(), bad.ctx.clone());
    let (sconn, cconn) = &mut conns[BAD];
    let (rs, _rc) = {
        let mut ls =
            QpLink::new(&mut s.qps[BAD], &mut s.cq, |_: &mut mlx5_qp::Qp| Ok(())).srq(&mut s.srq);
        let mut lc = QpLink::new(&mut bad.qp, &mut bad.cq, |_: &mut mlx5_qp::Qp| Ok(()));
        rebuild_pair(
            server_dev.device(),
            sconn,
            &mut ls,
            client_dev.device(),
            cconn,
            &mut lc,
            WcStatus::RemAccessErr,
        )
        .unwrap()
    };
    assert!(
        rs.drained.iter().all(|w| w.qp_num() == qpn),
        "the drain took only the rebuilt QP's completions: {:?}",
        rs.drained
    );
    let polled = poll_all(&mut s);
    assert!(
        polled.iter().all(|w| w.qp_num() != qpn),
        "nothing of the rebuilt QP is left in the CQ: {polled:?}"
    );
    check_every_wr_once(&s, &posted, rs.drained.iter().chain(&polled));
    let srq_back: Vec<u64> = rs
        .drained
        .iter()
        .filter(|w| w.opcode().is_recv())
        .map(|w| w.wr_id())
        .collect();
    assert_eq!(
        srq_back.len(),
        2,
        "the rebuilt QP's two SRQ receives came back: {:?}",
        rs.drained
    );
    assert!(rs
        .drained
        .iter()
        .filter(|w| w.opcode().is_recv())
        .all(|w| w.opcode() == WcOpcode::RecvRdmaWithImm && w.is_ok()));
    assert_eq!(s.qps[BAD].state(), QpState::Rts);
    traffic_after(&fabric, &mut s, &mut clients);
}

/// Every WR the server posted completed exactly once on its own QP, and every SRQ receive a
/// request consumed (two per client) came back exactly once, on the QP it came in on.
pub(crate) fn check_every_wr_once<'w>(
    s: &Server,
    posted: &BTreeMap<u32, Vec<u64>>,
    all: impl Iterator<Item = &'w Wc>,
) {
    let mut sends: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut recvs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for w in all {
        let into = if w.opcode().is_recv() {
            &mut recvs
        } else {
            &mut sends
        };
        into.entry(w.qp_num()).or_default().push(w.wr_id());
    }
    for v in sends.values_mut().chain(recvs.values_mut()) {
        v.sort_unstable();
    }
    assert_eq!(&sends, posted, "every send WR of every QP exactly once");
    let mut ids: Vec<u64> = recvs.values().flatten().copied().collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2 * CLIENTS, "each SRQ receive once: {recvs:?}");
    for qp in &s.qps {
        assert_eq!(
            recvs.get(&qp.qpn()).map_or(0, Vec::len),
            2,
            "QP {:#x}: {recvs:?}",
            qp.qpn()
        );
    }
    assert!(ids
        .iter()
        .all(|id| (RECV_ID..RECV_ID + SRQ_DEPTH).contains(id)));
    assert_eq!(
        s.srq.outstanding() as u64,
        SRQ_DEPTH - 2 * CLIENTS as u64,
        "the receives no request consumed are still posted"
    );
}

/// After the rebuild the bad client's requests reach the server again, through the SRQ.
pub(crate) fn traffic_after(fabric: &SimFabric, s: &mut Server, clients: &mut [Client]) {
    let bad = &mut clients[BAD];
    let sge = [bad.mr.sge(0, 8).unwrap()];
    bad.qp
        .post(&SendWr::send(88).sges(&sge).signaled())
        .unwrap();
    fabric.fabric().run_until_idle();
    let got = poll_all(s);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].qp_num(), got[0].opcode(), got[0].status()),
        (s.qps[BAD].qpn(), WcOpcode::Recv, WcStatus::Success)
    );
}

/// The same scenario recovered on the owning objects in one call (`recover_pair`): the
/// server's QP with the shared CQ and SRQ, the client's with its receives posted again.
#[test]
fn recover_pair_on_the_owning_objects_loses_nothing() {
    use mlx5_connect::{recover_pair, Recover};
    let fabric = SimFabric::deterministic();
    let (mut s, mut clients, mut conns) = setup(&fabric);
    let posted = traffic(&fabric, &mut s, &mut clients);
    let qpn = s.qps[BAD].qpn();
    let bad = &mut clients[BAD];
    let (sconn, cconn) = &mut conns[BAD];
    let cmr = &bad.mr;
    let repost = |qp: &mut mlx5_qp::Qp| {
        for k in 0..4u64 {
            let at = 4 * SLOT + k as usize * SLOT;
            qp.post_recv(1000 + k, &[cmr.sge(at, SLOT as u32).unwrap()])?;
        }
        Ok(())
    };
    let (rs, rc) = recover_pair(
        (
            sconn,
            Recover::new(&mut s.qps[BAD], &mut s.cq).srq(&mut s.srq),
        ),
        (
            cconn,
            Recover::new(&mut bad.qp, &mut bad.cq).receives(repost),
        ),
        WcStatus::RemAccessErr,
    )
    .unwrap();
    assert!(
        rs.drained.iter().all(|w| w.qp_num() == qpn),
        "{:?}",
        rs.drained
    );
    assert!(
        rc.drained
            .iter()
            .any(|w| w.wr_id() == 77 && w.status() == WcStatus::RemAccessErr),
        "the client's drain has the failed WRITE: {:?}",
        rc.drained
    );
    assert_eq!(
        bad.qp.rq_outstanding(),
        4,
        "the client's receives posted again"
    );
    let polled = poll_all(&mut s);
    check_every_wr_once(&s, &posted, rs.drained.iter().chain(&polled));
    traffic_after(&fabric, &mut s, &mut clients);
}

/// `Recover` takes the QP's own objects only, checked before anything is touched: another
/// connection's QP, a CQ the QP does not complete on, its SRQ missing or another one.
#[test]
fn recover_refuses_objects_that_are_not_the_qps() {
    use mlx5_connect::{recover_pair, ConnectError, Recover};
    let fabric = SimFabric::deterministic();
    let (mut s, mut clients, mut conns) = setup(&fabric);
    let other_srq_pd = s.ctx.alloc_pd().unwrap();
    let mut other_srq = other_srq_pd.create_srq(4, 1).unwrap();
    let mut other_cq = s.ctx.create_cq(8).unwrap();
    let (first, rest) = conns.split_at_mut(1);
    let (c0, _) = &mut first[0];
    let (c1, cc1) = &mut rest[0];
    let (q0, qs) = s.qps.split_at_mut(1);
    fn expect<T: std::fmt::Debug>(r: mlx5_connect::Result<T>, what: &str) {
        match r {
            Err(ConnectError::WrongObjects { why, .. }) => assert!(why.contains(what), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    let cl = &mut clients[1];
    // Connection 1 with QP 0.
    expect(
        recover_pair(
            (c1, Recover::new(&mut q0[0], &mut s.cq).srq(&mut s.srq)),
            (cc1, Recover::new(&mut cl.qp, &mut cl.cq)),
            WcStatus::Success,
        ),
        "recover it with its own QP",
    );
    // QP 1 with a CQ it does not report to, without its SRQ, with another SRQ.
    expect(
        c1.recover(
            Recover::new(&mut qs[0], &mut other_cq).srq(&mut s.srq),
            WcStatus::Success,
        ),
        "its sends complete on CQ",
    );
    expect(
        c1.recover(Recover::new(&mut qs[0], &mut s.cq), WcStatus::Success),
        "give it with Recover::srq",
    );
    expect(
        c1.recover(
            Recover::new(&mut qs[0], &mut s.cq).srq(&mut other_srq),
            WcStatus::Success,
        ),
        "not the SRQ",
    );
    // The client's QP has its own receive queue: an SRQ is refused, and so is a receive CQ
    // it does not use.
    let mut ccq2 = cl.ctx.create_cq(8).unwrap();
    let cpd = cl.qp.pd().clone();
    let mut csrq = cpd.create_srq(4, 1).unwrap();
    expect(
        cc1.recover(
            Recover::new(&mut cl.qp, &mut cl.cq).srq(&mut csrq),
            WcStatus::Success,
        ),
        "a receive queue of its own",
    );
    expect(
        cc1.recover(
            Recover::new(&mut cl.qp, &mut cl.cq).recv_cq(&mut ccq2),
            WcStatus::Success,
        ),
        "its receives complete on CQ",
    );
    // Nothing was touched: every QP is still in RTS.
    for qp in q0.iter().chain(qs.iter()) {
        assert_eq!(qp.query().unwrap().qp_state, QpState::Rts);
    }
    let _ = c0;
}

/// A link to a QP that receives through an SRQ, given without it, could not give the QP's
/// receives back: the rebuild stops before anything is consumed (`Undrained`), the QP in
/// Error; with the SRQ the same rebuild then succeeds and loses nothing.
#[test]
fn a_link_without_the_qps_srq_stops_the_rebuild_and_consumes_nothing() {
    use mlx5_connect::ConnectError;
    let fabric = SimFabric::deterministic();
    let (mut s, mut clients, mut conns) = setup(&fabric);
    let posted = traffic(&fabric, &mut s, &mut clients);
    let (server_dev, client_dev) = (s.ctx.clone(), clients[BAD].ctx.clone());
    let ci_before = s.cq.ci();
    let (sconn, cconn) = &mut conns[BAD];
    let bad = &mut clients[BAD];
    {
        let mut ls = QpLink::new(&mut s.qps[BAD], &mut s.cq, |_: &mut mlx5_qp::Qp| Ok(()));
        let mut lc = QpLink::new(&mut bad.qp, &mut bad.cq, |_: &mut mlx5_qp::Qp| Ok(()));
        let e = rebuild_pair(
            server_dev.device(),
            sconn,
            &mut ls,
            client_dev.device(),
            cconn,
            &mut lc,
            WcStatus::RemAccessErr,
        )
        .unwrap_err();
        assert!(matches!(e, ConnectError::Undrained { .. }), "{e}");
        assert!(e.to_string().contains("QpLink::srq"), "{e}");
    }
    assert_eq!(s.cq.ci(), ci_before, "nothing consumed from the shared CQ");
    assert_eq!(s.qps[BAD].query().unwrap().qp_state, QpState::Error);
    // Again, with the SRQ.
    let (rs, _) = {
        let mut ls =
            QpLink::new(&mut s.qps[BAD], &mut s.cq, |_: &mut mlx5_qp::Qp| Ok(())).srq(&mut s.srq);
        let mut lc = QpLink::new(&mut bad.qp, &mut bad.cq, |_: &mut mlx5_qp::Qp| Ok(()));
        rebuild_pair(
            server_dev.device(),
            sconn,
            &mut ls,
            client_dev.device(),
            cconn,
            &mut lc,
            WcStatus::RemAccessErr,
        )
        .unwrap()
    };
    let polled = poll_all(&mut s);
    check_every_wr_once(&s, &posted, rs.drained.iter().chain(&polled));
}
