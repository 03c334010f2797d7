//! Error completions on the software ConnectX: each reported with its status and syndrome
//! name for the WR that failed, every other outstanding WR flushed, nothing lost.

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{Device, PortState, QpState};
use mlx5_qp::{RemoteAddr, SendWr, Sge, Wc, WcStatus};
use std::time::Duration;

/// Collect every completion of `side` (the CQ, moving the virtual clock for timeouts, then
/// `flush_outstanding` once the device has put the QP in Error) and check: WR `first_id`
/// failed with `status` / `syndrome`, each of the five WRs [`post_tail`] posted after it has
/// exactly one flush completion, nothing is left outstanding.
fn expect_failure(
    side: &mut Side,
    f: &mut mlx5_sim::Fabric,
    first_id: u64,
    status: WcStatus,
    syndrome: &str,
) {
    let mut all = drain(f, &mut side.cq, &mut side.qp);
    for _ in 0..50 {
        if !all.is_empty() {
            break;
        }
        f.advance(Duration::from_millis(100));
        all.extend(drain(f, &mut side.cq, &mut side.qp));
    }
    let attr = side.dev.query_qp(side.info.id).unwrap();
    assert_eq!(
        attr.qp_state,
        QpState::Error,
        "the device moved the QP to Error"
    );
    side.qp.set_state(QpState::Error);
    let mut wcs = [Wc::default(); 4];
    loop {
        let n = side.qp.flush_outstanding(&mut wcs).unwrap();
        if n == 0 {
            break;
        }
        all.extend_from_slice(&wcs[..n]);
    }
    let failing = all
        .iter()
        .find(|w| w.status() != WcStatus::WrFlushErr)
        .expect("an error completion");
    assert_eq!(
        (failing.wr_id(), failing.status()),
        (first_id, status),
        "{all:?}"
    );
    assert_eq!(failing.syndrome_name(), Some(syndrome));
    // Every WR after the failing one: exactly one flush completion each.
    let mut ids: Vec<u64> = all
        .iter()
        .filter(|w| w.wr_id() > first_id)
        .map(|w| w.wr_id())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (first_id + 1..first_id + 6).collect::<Vec<_>>(),
        "{all:?}"
    );
    assert!(all
        .iter()
        .filter(|w| w.wr_id() > first_id)
        .all(|w| w.status() == WcStatus::WrFlushErr));
    assert_eq!(side.qp.sq_outstanding_bbs(), 0);
    posted_in_error_is_flushed(side, f, first_id);
}

/// A QP in Error takes new work, and the device flushes it (IBTA Vol. 1 §10.3.1; libmlx5
/// checks no state, `mlx5_post_send` / `mlx5_post_recv`): an unsignaled send, a signaled one
/// and a receive, each completed once with WR_FLUSH_ERR and its own opcode, in order; the
/// poll accepts the CQEs the device writes for them; nothing is left outstanding.
fn posted_in_error_is_flushed(side: &mut Side, f: &mut mlx5_sim::Fabric, first_id: u64) {
    use mlx5_qp::WcOpcode;
    let (s1, s2, r) = (first_id + 100, first_id + 101, first_id + 200);
    side.qp.post(&SendWr::send(s1).inline(b"late")).unwrap();
    side.qp
        .post(
            &SendWr::write(s2, RemoteAddr::new(0, 0))
                .inline(b"w")
                .signaled(),
        )
        .unwrap();
    side.qp.post_recv(r, &[side.buf.sge(0, 8)]).unwrap();
    let mut late = drain(f, &mut side.cq, &mut side.qp);
    late.sort_by_key(|w| w.wr_id());
    let got: Vec<(u64, WcStatus, WcOpcode)> = late
        .iter()
        .map(|w| (w.wr_id(), w.status(), w.opcode()))
        .collect();
    let flush = WcStatus::WrFlushErr;
    assert_eq!(
        got,
        vec![
            (s1, flush, WcOpcode::Send),
            (s2, flush, WcOpcode::RdmaWrite),
            (r, flush, WcOpcode::Recv)
        ]
    );
    assert_eq!(
        (side.qp.sq_outstanding_bbs(), side.qp.rq_outstanding()),
        (0, 0)
    );
    let mut wcs = [Wc::default(); 4];
    assert_eq!(side.qp.flush_outstanding(&mut wcs).unwrap(), 0);
    no_driver_bugs(f);
}

fn post_tail(side: &mut Side, first_id: u64) {
    for k in 1..6 {
        let wr = SendWr::write(first_id + k, RemoteAddr::new(0, 0)).inline(b"tail");
        side.qp
            .post(&if k % 2 == 0 { wr.signaled() } else { wr })
            .unwrap();
    }
}

#[test]
fn remote_access_error_bad_rkey() {
    let (mut f, mut a, b) = pair(&Opts::default());
    a.qp.post(&SendWr::write(1, b.buf.remote(0)).inline(b"fine"))
        .unwrap();
    let bad = RemoteAddr::new(b.buf.addr(), b.buf.mr.rkey ^ 0x5500);
    a.qp.post(&SendWr::write(10, bad).inline(b"bad rkey"))
        .unwrap();
    post_tail(&mut a, 10);
    expect_failure(
        &mut a,
        &mut f,
        10,
        WcStatus::RemAccessErr,
        "REMOTE_ACCESS_ERR",
    );
    assert_eq!(
        &b.buf.bytes()[..4],
        b"fine",
        "the unsignaled WR before the error executed"
    );
    no_driver_bugs(&f);
}

#[test]
fn remote_access_error_out_of_bounds() {
    let (mut f, mut a, b) = pair(&Opts::default());
    let past = b.buf.remote(b.buf.mr.length as usize - 2);
    a.qp.post(&SendWr::write(20, past).inline(b"overflow").signaled())
        .unwrap();
    post_tail(&mut a, 20);
    expect_failure(
        &mut a,
        &mut f,
        20,
        WcStatus::RemAccessErr,
        "REMOTE_ACCESS_ERR",
    );
    no_driver_bugs(&f);
}

#[test]
fn local_protection_error_bad_lkey() {
    let (mut f, mut a, b) = pair(&Opts::default());
    let sge = Sge {
        lkey: a.buf.mr.lkey ^ 0x77,
        ..a.buf.sge(0, 16)
    };
    a.qp.post(&SendWr::write(30, b.buf.remote(0)).sges(&[sge]))
        .unwrap();
    post_tail(&mut a, 30);
    expect_failure(&mut a, &mut f, 30, WcStatus::LocProtErr, "LOCAL_PROT_ERR");
    no_driver_bugs(&f);
}

#[test]
fn receive_too_small_is_a_local_length_error_at_the_responder() {
    let (mut f, mut a, mut b) = pair(&Opts::default());
    b.qp.post_recv(7, &[b.buf.sge(0, 4)]).unwrap();
    b.qp.post_recv(8, &[b.buf.sge(64, 64)]).unwrap();
    a.qp.post(
        &SendWr::send(40)
            .inline(b"longer than four bytes")
            .signaled(),
    )
    .unwrap();
    post_tail(&mut a, 40);
    let wb = drain(&f, &mut b.cq, &mut b.qp);
    assert_eq!(wb[0].wr_id(), 7);
    assert_eq!(
        (wb[0].status(), wb[0].syndrome_name()),
        (WcStatus::LocLenErr, Some("LOCAL_LENGTH_ERR"))
    );
    assert!(
        wb[1..].iter().all(|w| w.status() == WcStatus::WrFlushErr),
        "{wb:?}"
    );
    assert_eq!(wb.iter().map(|w| w.wr_id()).collect::<Vec<_>>(), vec![7, 8]);
    expect_failure(
        &mut a,
        &mut f,
        40,
        WcStatus::RemInvReqErr,
        "REMOTE_INVAL_REQ_ERR",
    );
    no_driver_bugs(&f);
}

#[test]
fn read_without_responder_resources_is_an_invalid_request() {
    let (mut f, mut a, b) = pair_with(&Opts::default(), |_| {}, |attr| attr.max_dest_rd_atomic = 0);
    a.qp.post(
        &SendWr::read(50, b.buf.remote(0))
            .sges(&[a.buf.sge(0, 8)])
            .signaled(),
    )
    .unwrap();
    post_tail(&mut a, 50);
    expect_failure(
        &mut a,
        &mut f,
        50,
        WcStatus::RemInvReqErr,
        "REMOTE_INVAL_REQ_ERR",
    );
    no_driver_bugs(&f);
}

#[test]
fn rnr_retries_exhausted() {
    let (mut f, mut a, _b) = pair_with(&Opts::default(), |attr| attr.rnr_retry = 1, |_| {});
    a.qp.post(&SendWr::send(60).inline(b"nobody listens"))
        .unwrap();
    post_tail(&mut a, 60);
    expect_failure(
        &mut a,
        &mut f,
        60,
        WcStatus::RnrRetryExcErr,
        "RNR_RETRY_EXC_ERR",
    );
    no_driver_bugs(&f);
}

#[test]
fn transport_retries_exhausted_when_the_peer_is_gone() {
    let (mut f, mut a, b) = pair_with(
        &Opts::default(),
        |attr| {
            attr.retry_cnt = 1;
            attr.timeout = 8;
        },
        |_| {},
    );
    b.dev.set_port_state(PortState::Down);
    a.qp.post(&SendWr::write(70, b.buf.remote(0)).inline(b"lost"))
        .unwrap();
    post_tail(&mut a, 70);
    expect_failure(
        &mut a,
        &mut f,
        70,
        WcStatus::RetryExcErr,
        "TRANSPORT_RETRY_EXC_ERR",
    );
    no_driver_bugs(&f);
}

#[test]
fn malformed_raw_wqe_is_a_local_qp_operation_error() {
    let (mut f, mut a, _b) = pair(&Opts::default());
    // A ctrl-only WQE with an opcode RC does not execute (MLX5_OPCODE_TSO, raw Ethernet only).
    let mut wqe = [0u8; 16];
    wqe[3] = 0x0e;
    wqe[7] = 1;
    wqe[11] = 0x08;
    a.qp.post_raw(80, &wqe).unwrap();
    post_tail(&mut a, 80);
    expect_failure(&mut a, &mut f, 80, WcStatus::LocQpOpErr, "LOCAL_QP_OP_ERR");
    no_driver_bugs(&f);
}

/// The control path moves `side`'s QP to Error (the data path is not told: it follows the
/// device's completions).
fn device_to_error(side: &Side) {
    let attr = mlx5_hw::QpAttr {
        qp_state: QpState::Error,
        ..Default::default()
    };
    side.dev
        .modify_qp(side.info.id, &attr, mlx5_hw::AttrMask::STATE)
        .unwrap();
}

#[test]
fn moving_to_error_flushes_sends_and_receives() {
    let (f, mut a, _b) = pair(&Opts::default());
    for i in 0..4 {
        a.qp.post_recv(100 + i, &[a.buf.sge(0, 8)]).unwrap();
    }
    // Unsignaled sends the peer never answers (the RNR wait keeps them outstanding).
    for i in 0..3 {
        a.qp.post(&SendWr::send(i).inline(b"x")).unwrap();
    }
    device_to_error(&a);
    a.qp.set_state(QpState::Error);
    let mut all = drain(&f, &mut a.cq, &mut a.qp);
    let mut wcs = [Wc::default(); 8];
    let n = a.qp.flush_outstanding(&mut wcs).unwrap();
    all.extend_from_slice(&wcs[..n]);
    let mut ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2, 100, 101, 102, 103], "{all:?}");
    assert!(all.iter().all(|w| w.status() == WcStatus::WrFlushErr));
    assert_eq!(a.qp.rq_outstanding(), 0);
    // Back to work: Reset clears the rings, and the QP can be connected again.
    a.dev
        .modify_qp(
            a.info.id,
            &mlx5_hw::QpAttr {
                qp_state: QpState::Reset,
                ..Default::default()
            },
            mlx5_hw::AttrMask::STATE,
        )
        .unwrap();
    a.qp.set_state(QpState::Reset);
    assert_eq!(a.qp.sq_pi(), 0);
    no_driver_bugs(&f);
}

#[test]
fn bad_lkey_in_the_receive_is_a_remote_operational_error() {
    let (mut f, mut a, mut b) = pair(&Opts::default());
    let bad = Sge {
        lkey: b.buf.mr.lkey ^ 0x99,
        ..b.buf.sge(0, 64)
    };
    b.qp.post_recv(9, &[bad]).unwrap();
    a.qp.post(&SendWr::send(90).inline(b"to a bad buffer"))
        .unwrap();
    post_tail(&mut a, 90);
    let wb = drain(&f, &mut b.cq, &mut b.qp);
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!((wb[0].wr_id(), wb[0].status()), (9, WcStatus::LocProtErr));
    assert_eq!(wb[0].syndrome_name(), Some("LOCAL_PROT_ERR"));
    expect_failure(&mut a, &mut f, 90, WcStatus::RemOpErr, "REMOTE_OP_ERR");
    no_driver_bugs(&f);
}

/// A QP moved to Error before the device ran its WQEs: the device flushes every outstanding
/// WR, one CQE each (carrying the WQE's opcode). Polled one at a time and 16 at a time (the
/// poll's flush paths), each completion is its WR's flush, in order, with the opcode it was
/// posted with; the receives' flushes follow; nothing is left outstanding.
#[test]
fn flushes_report_the_opcode_each_wr_was_posted_with() {
    use mlx5_qp::WcOpcode;
    for room in [1, 16] {
        let (f, mut a, _b) = pair(&Opts::default());
        for i in 0..3 {
            a.qp.post_recv(100 + i, &[a.buf.sge(0, 8)]).unwrap();
        }
        let r = RemoteAddr::new(0x1000, 7);
        let sge = [a.buf.sge(0, 8)];
        let wrs = [
            (SendWr::write(0, r).inline(b"w"), WcOpcode::RdmaWrite),
            (SendWr::send(1).inline(b"s"), WcOpcode::Send),
            (
                SendWr::write_imm(2, r, 5).inline(b"wi"),
                WcOpcode::RdmaWrite,
            ),
            (SendWr::send_imm(3, 6).inline(b"si"), WcOpcode::Send),
            (SendWr::read(4, r).sges(&sge), WcOpcode::RdmaRead),
            (SendWr::write(5, r).inline(b"w"), WcOpcode::RdmaWrite),
        ];
        for (wr, _) in &wrs {
            a.qp.post(&wr.signaled()).unwrap();
        }
        device_to_error(&a);
        let all = drain_room(&f, &mut a.cq, &mut a.qp, room);
        let sends: Vec<(u64, WcStatus, WcOpcode)> = all
            .iter()
            .filter(|w| !w.opcode().is_recv())
            .map(|w| (w.wr_id(), w.status(), w.opcode()))
            .collect();
        let want: Vec<(u64, WcStatus, WcOpcode)> = wrs
            .iter()
            .map(|(wr, op)| (wr.wr_id(), WcStatus::WrFlushErr, *op))
            .collect();
        assert_eq!(sends, want, "room {room}: {all:?}");
        let recvs: Vec<(u64, WcStatus)> = all
            .iter()
            .filter(|w| w.opcode().is_recv())
            .map(|w| (w.wr_id(), w.status()))
            .collect();
        let f3 = WcStatus::WrFlushErr;
        assert_eq!(recvs, [(100, f3), (101, f3), (102, f3)], "room {room}");
        assert!(all
            .iter()
            .all(|w| w.syndrome_name() == Some("WR_FLUSH_ERR")));
        assert_eq!((a.qp.sq_outstanding_bbs(), a.qp.rq_outstanding()), (0, 0));
        assert_eq!(a.qp.state(), QpState::Error, "the QP followed the device");
        no_driver_bugs(&f);
    }
}
