//! `Connection::recover` over TCP: a server whose two QPs share one CQ and one SRQ — one
//! connected to a client over TCP, one in process — recovers the TCP one when that client,
//! driven into Error by a bad rkey, asks for a rebuild; the other QP's requests wait in the
//! shared CQ through the whole recovery and are served afterwards.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use mlx5_connect::{accept_qp, connect_qp, connect_qps, ConnectParams, ControlEvent, Recover};
use mlx5_ctx::QpInit;
use mlx5_qp::{RemoteAddr, SendWr, Wc, WcOpcode, WcStatus};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn the_server_recovers_one_qp_of_a_shared_cq_and_srq_when_its_tcp_peer_asks() {
    let [sctx, c1ctx, c2ctx] = crate::connect_support::contexts();
    let pd = sctx.alloc_pd().unwrap();
    let mut cq = sctx.create_cq(64).unwrap();
    let mut srq = pd.create_srq(8, 1).unwrap();
    let init = QpInit::rc(&cq).srq(&srq);
    let mut qps = [pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap()];
    let mr = pd.alloc_mr(8 * 64).unwrap();
    for k in 0..8u64 {
        srq.post_recv(100 + k, &[mr.sge(k as usize * 64, 64).unwrap()])
            .unwrap();
    }
    let params = ConnectParams::default();

    // The in-process client of QP 1.
    let (pd2, mut cq2) = (c2ctx.alloc_pd().unwrap(), c2ctx.create_cq(16).unwrap());
    let mut q2 = pd2.create_qp(&QpInit::rc(&cq2)).unwrap();
    let _local = connect_qps(&mut qps[1], &mut q2, &params).unwrap();

    // The TCP client of QP 0: one request, a WRITE with a wrong rkey, its recovery, one more
    // request.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (srv_addr, srv_rkey) = (mr.addr(), mr.rkey());
    let client = std::thread::spawn(move || {
        let (pd1, mut cq1) = (c1ctx.alloc_pd().unwrap(), c1ctx.create_cq(16).unwrap());
        let mut q1 = pd1.create_qp(&QpInit::rc(&cq1)).unwrap();
        let mut conn = connect_qp(addr, &mut q1, &ConnectParams::default(), |_| Ok(())).unwrap();
        let src = pd1.alloc_mr(64).unwrap();
        let sge = [src.sge(0, 8).unwrap()];
        q1.post(&SendWr::send(1).sges(&sge).signaled()).unwrap();
        let wrong = RemoteAddr::new(srv_addr, srv_rkey ^ 0x5a5a);
        q1.post(&SendWr::write(77, wrong).sges(&sge).signaled())
            .unwrap();
        let got = cq1.poll_until(&mut q1, WAIT, |w| w.wr_id() == 77).unwrap();
        let failed = got.iter().find(|w| w.wr_id() == 77).unwrap().status();
        assert_eq!(failed, WcStatus::RemAccessErr, "{got:?}");
        let report = conn
            .recover(Recover::new(&mut q1, &mut cq1), failed)
            .unwrap();
        q1.post(&SendWr::send(3).sges(&sge).signaled()).unwrap();
        cq1.wait_for(&mut q1, 3, WAIT).unwrap();
        (report.generation, got)
    });
    let mut conn = accept_qp(&listener, &mut qps[0], &params, |_| Ok(())).unwrap();

    // The other client's two requests arrive on QP 1 and wait in the shared CQ.
    let src2 = pd2.alloc_mr(64).unwrap();
    let sge2 = [src2.sge(0, 8).unwrap()];
    for id in [21, 22] {
        q2.post(&SendWr::send(id).sges(&sge2).signaled()).unwrap();
        cq2.wait_for(&mut q2, id, WAIT).unwrap();
    }

    // The TCP peer asks for a rebuild; the server recovers QP 0 in one call.
    let deadline = Instant::now() + WAIT;
    let reason = loop {
        match conn.poll_control().unwrap() {
            Some(ControlEvent::RebuildRequested { reason, .. }) => break reason,
            Some(other) => panic!("{other:?}"),
            None => {
                assert!(Instant::now() < deadline, "no rebuild request");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    assert_eq!(reason, WcStatus::RemAccessErr);
    let (q0, q1n) = (qps[0].qpn(), qps[1].qpn());
    let report = conn
        .recover(Recover::new(&mut qps[0], &mut cq).srq(&mut srq), reason)
        .unwrap();
    assert_eq!(report.generation, 1);
    assert!(
        report.drained.iter().all(|w| w.qp_num() == q0),
        "{:?}",
        report.drained
    );
    let returned: Vec<u64> = report
        .drained
        .iter()
        .filter(|w| w.opcode() == WcOpcode::Recv && w.is_ok())
        .map(|w| w.wr_id())
        .collect();
    assert_eq!(
        returned.len(),
        1,
        "the first request's SRQ receive came back: {:?}",
        report.drained
    );

    // After it: QP 1's two requests, still in the CQ, and the TCP client's new one.
    let (gen, _) = client.join().unwrap();
    assert_eq!(gen, 1);
    let mut got: Vec<Wc> = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut wcs = [Wc::default(); 8];
    while got.len() < 3 {
        assert!(Instant::now() < deadline, "{got:?}");
        let n = cq
            .poll(
                &mut (&mut qps[..], std::slice::from_mut(&mut srq)),
                &mut wcs,
            )
            .unwrap();
        got.extend_from_slice(&wcs[..n]);
    }
    let mut by_qp: Vec<(u32, WcOpcode, WcStatus)> = got
        .iter()
        .map(|w| (w.qp_num(), w.opcode(), w.status()))
        .collect();
    by_qp.sort_by_key(|g| g.0);
    let ok = WcStatus::Success;
    let mut want = vec![
        (q0, WcOpcode::Recv, ok),
        (q1n, WcOpcode::Recv, ok),
        (q1n, WcOpcode::Recv, ok),
    ];
    want.sort_by_key(|g| g.0);
    assert_eq!(by_qp, want);
    let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id()).chain(returned).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "four SRQ receives, each once: {ids:?}");
    assert_eq!(srq.outstanding(), 4);
}
