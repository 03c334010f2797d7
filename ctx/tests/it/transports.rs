//! The transports on the device under test (`support::contexts`: two software ConnectX
//! devices on a threaded fabric, or an mlx5 device through libibverbs and libmlx5 with
//! `MLX5_TEST_DEVICE`, as `tools/rdma-core-suites.sh` runs this module on the software
//! ConnectX behind rdma-core): UC WRITEs, UD SENDs through an address handle, receives of two
//! RC QPs through one SRQ, XRC SENDs into the SRQ they name, and a QP in error whose
//! outstanding WRs all come back flushed, exactly once. Each polls what the rings libmlx5 laid
//! out hold (CQE version 1 there: the CQE's `srqn_uidx` is a user index, not an SRQN).

use std::time::Duration;

use mlx5_ctx::{connect_xrc, Cq, QpInit};
use mlx5_hw::transition::{Step, ToInit, ToRtr, ToRts};
use mlx5_hw::QpState;
use mlx5_qp::{RemoteAddr, SendWr, Wc, WcOpcode, WcStatus};

use crate::support::{connect_pair_rc, connect_uc, contexts, peer_ah, take_driver_bugs};

const WAIT: Duration = Duration::from_secs(10);

/// Poll `cq` with `table` until `n` completions came (or [`WAIT`] passed: a failure).
fn wait_n<R: mlx5_qp::Resolve + ?Sized>(cq: &mut Cq, table: &mut R, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    while got.len() < n {
        let more = cq
            .poll_until(table, WAIT, |_| true)
            .unwrap_or_else(|e| panic!("after {} of {n} completions: {e}", got.len()));
        got.extend(more);
    }
    got
}

#[test]
fn uc_writes_and_ud_sends_arrive() {
    let (a, b) = contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, mut cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (src, dst) = (pa.alloc_mr(4096).unwrap(), pb.alloc_mr(4096).unwrap());
    // UC: WRITEs (a READ is refused at post: UC has none).
    let mut ua = pa.create_qp(&QpInit::uc(&ca)).unwrap();
    let mut ub = pb.create_qp(&QpInit::uc(&cb)).unwrap();
    connect_uc(&mut ua, &ub, 0x30, 0x40);
    connect_uc(&mut ub, &ua, 0x40, 0x30);
    for k in 0..8u64 {
        src.write(k as usize * 64, &[k as u8 + 1; 64]).unwrap();
        let sge = [src.sge(k as usize * 64, 64).unwrap()];
        let to = dst.remote(k as usize * 64).unwrap();
        ua.post(&SendWr::write(k, to).sges(&sge).signaled())
            .unwrap();
    }
    let wcs = wait_n(&mut ca, &mut ua, 8);
    for (k, wc) in wcs.iter().enumerate() {
        assert_eq!((wc.wr_id(), wc.status()), (k as u64, WcStatus::Success));
        assert_eq!(wc.opcode(), WcOpcode::RdmaWrite);
    }
    // A UC WRITE completes at the sender once sent, not once it landed (no ACK: IBTA Vol 1
    // §9.8), so the data may arrive a step of the device later: wait for it, bounded.
    let landed = |k: usize| dst.read(k * 64, 64).unwrap() == vec![k as u8 + 1; 64];
    let start = std::time::Instant::now();
    while !(0..8).all(landed) && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    for k in 0..8 {
        assert_eq!(dst.read(k * 64, 64).unwrap(), vec![k as u8 + 1; 64]);
    }
    let sge = [src.sge(0, 8).unwrap()];
    assert!(ua
        .post(&SendWr::read(99, dst.remote(0).unwrap()).sges(&sge))
        .is_err());
    // UD: SENDs through an address handle, each with the 40-byte GRH in front.
    const QKEY: u32 = 0x1111_2222;
    let ud_rts = |q: &mut mlx5_ctx::Qp| {
        q.modify_all(&[
            Step::Init(ToInit::Datagram {
                port: 1,
                pkey_index: 0,
                qkey: QKEY,
            }),
            Step::Rtr(ToRtr::Ud),
            Step::Rts(ToRts::Unreliable { sq_psn: 0 }),
        ])
        .unwrap()
    };
    let mut da = pa.create_qp(&QpInit::ud(&ca)).unwrap();
    let mut db = pb.create_qp(&QpInit::ud(&cb)).unwrap();
    ud_rts(&mut da);
    ud_rts(&mut db);
    for k in 0..4u64 {
        db.post_recv(k, &[dst.sge(1024 + k as usize * 128, 128).unwrap()])
            .unwrap();
    }
    let ah = pa.create_ah(&peer_ah(&db)).unwrap();
    let dest = ah.dest(db.qpn(), QKEY);
    for k in 0..4u64 {
        let msg = [0xA0 + k as u8; 32];
        da.post(&SendWr::send(k).inline(&msg).ud(&dest).signaled())
            .unwrap();
    }
    assert!(wait_n(&mut ca, &mut da, 4).iter().all(Wc::is_ok));
    let got = wait_n(&mut cb, &mut db, 4);
    for (k, wc) in got.iter().enumerate() {
        assert_eq!((wc.wr_id(), wc.status()), (k as u64, WcStatus::Success));
        assert_eq!((wc.byte_len(), wc.src_qp()), (40 + 32, da.qpn()));
        let at = 1024 + k * 128 + 40;
        assert_eq!(dst.read(at, 32).unwrap(), vec![0xA0 + k as u8; 32]);
    }
    let bugs = take_driver_bugs(&a);
    assert!(bugs.is_empty(), "{bugs:?}");
}

#[test]
fn two_rc_qps_receive_through_one_srq() {
    let (a, b) = contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, mut cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let mut srq = pb.create_srq(16, 1).unwrap();
    let mut senders = [
        pa.create_qp(&QpInit::rc(&ca)).unwrap(),
        pa.create_qp(&QpInit::rc(&ca)).unwrap(),
    ];
    let init = QpInit::rc(&cb).srq(&srq);
    let mut receivers = [pb.create_qp(&init).unwrap(), pb.create_qp(&init).unwrap()];
    for (s, r) in senders.iter_mut().zip(receivers.iter_mut()) {
        connect_pair_rc(s, r);
    }
    let (src, dst) = (pa.alloc_mr(4096).unwrap(), pb.alloc_mr(4096).unwrap());
    for k in 0..8u64 {
        srq.post_recv(100 + k, &[dst.sge(k as usize * 64, 64).unwrap()])
            .unwrap();
    }
    for k in 0..8u64 {
        let q = k as usize % 2;
        src.write(k as usize * 16, &k.to_be_bytes()).unwrap();
        let sge = [src.sge(k as usize * 16, 8).unwrap()];
        senders[q]
            .post(&SendWr::send(k).sges(&sge).signaled())
            .unwrap();
    }
    assert!(wait_n(&mut ca, &mut senders[..], 8).iter().all(Wc::is_ok));
    let got = wait_n(
        &mut cb,
        &mut (&mut receivers[..], std::slice::from_mut(&mut srq)),
        8,
    );
    let mut ids: Vec<u64> = got.iter().map(Wc::wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (100..108).collect::<Vec<_>>(), "each receive once");
    for wc in &got {
        assert!(wc.is_ok(), "{wc:?}");
        let from = receivers.iter().position(|r| r.qpn() == wc.qp_num());
        assert!(from.is_some(), "the receiving QP's number: {wc:?}");
        let slot = (wc.wr_id() - 100) as usize;
        let v = u64::from_be_bytes(dst.read(slot * 64, 8).unwrap().try_into().unwrap());
        assert_eq!(
            v as usize % 2,
            from.unwrap(),
            "sent on the QP paired with it"
        );
    }
}

#[test]
fn xrc_sends_land_in_the_srq_they_name() {
    let (a, b) = contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, mut cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let xrcd = b.open_xrcd().unwrap();
    let mut srqs = [
        pb.create_xrc_srq(&xrcd, &cb, 8, 1).unwrap(),
        pb.create_xrc_srq(&xrcd, &cb, 8, 1).unwrap(),
    ];
    let tgt = xrcd.create_target().unwrap();
    let mut ini = pa.create_qp(&QpInit::xrc_send(&ca)).unwrap();
    connect_xrc(&mut ini, &tgt).unwrap();
    let dst = pb.alloc_mr(4096).unwrap();
    for (s, srq) in srqs.iter_mut().enumerate() {
        for k in 0..4u64 {
            let at = (s * 4 + k as usize) * 64;
            srq.post_recv(s as u64 * 10 + k, &[dst.sge(at, 64).unwrap()])
                .unwrap();
        }
    }
    let nums = [srqs[0].srq_num(), srqs[1].srq_num()];
    for k in 0..8u64 {
        let s = k as usize % 2;
        let msg = [k as u8 + 0x50; 16];
        ini.post(&SendWr::send(k).inline(&msg).xrc(nums[s]).signaled())
            .unwrap();
    }
    assert!(wait_n(&mut ca, &mut ini, 8).iter().all(Wc::is_ok));
    let got = wait_n(
        &mut cb,
        &mut (&mut [] as &mut [mlx5_ctx::Qp], &mut srqs[..]),
        8,
    );
    let mut ids: Vec<u64> = got.iter().map(Wc::wr_id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        vec![0, 1, 2, 3, 10, 11, 12, 13],
        "each receive of each SRQ once"
    );
    for wc in &got {
        assert!(wc.is_ok(), "{wc:?}");
        assert_eq!(wc.byte_len(), 16);
    }
    let bugs = take_driver_bugs(&a);
    assert!(bugs.is_empty(), "{bugs:?}");
}

/// A WRITE with a bad rkey puts the requester in error: it completes with a remote access
/// error, every WR behind it and every posted receive comes back flushed (on a ConnectX the
/// device writes those flush CQEs), each once; the QP is then reset and connected again.
#[test]
fn a_qp_in_error_flushes_everything_once_and_recovers() {
    let (a, b) = contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let mut qa = pa.create_qp(&QpInit::rc(&ca)).unwrap();
    let mut qb = pb.create_qp(&QpInit::rc(&cb)).unwrap();
    connect_pair_rc(&mut qa, &mut qb);
    let (src, dst) = (pa.alloc_mr(4096).unwrap(), pb.alloc_mr(4096).unwrap());
    for k in 0..3u64 {
        qa.post_recv(50 + k, &[src.sge(2048, 64).unwrap()]).unwrap();
    }
    let sge = [src.sge(0, 8).unwrap()];
    let bad = RemoteAddr {
        rkey: 0xdead_beef,
        ..dst.remote(0).unwrap()
    };
    qa.post(&SendWr::write(1, bad).sges(&sge).signaled())
        .unwrap();
    for k in 2..6u64 {
        qa.post(
            &SendWr::write(k, dst.remote(0).unwrap())
                .sges(&sge)
                .signaled(),
        )
        .unwrap();
    }
    let got = wait_n(&mut ca, &mut qa, 8);
    assert_eq!(
        (got[0].wr_id(), got[0].status()),
        (1, WcStatus::RemAccessErr),
        "{got:?}"
    );
    let mut flushed: Vec<u64> = got[1..]
        .iter()
        .inspect(|wc| assert_eq!(wc.status(), WcStatus::WrFlushErr, "{wc:?}"))
        .map(Wc::wr_id)
        .collect();
    flushed.sort_unstable();
    assert_eq!(flushed, vec![2, 3, 4, 5, 50, 51, 52], "each WR once");
    let mut wcs = [Wc::default(); 4];
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ca.poll(&mut qa, &mut wcs).unwrap(), 0, "nothing more");
    assert_eq!(qa.query().unwrap().qp_state, QpState::Error);
    // Reset, then connected again, with the peer moved back too.
    qa.modify(&Step::Reset).unwrap();
    qb.modify(&Step::Reset).unwrap();
    connect_pair_rc(&mut qa, &mut qb);
    qa.post(
        &SendWr::write(9, dst.remote(64).unwrap())
            .sges(&sge)
            .signaled(),
    )
    .unwrap();
    ca.wait_for(&mut qa, 9, WAIT).unwrap();
    let bugs = take_driver_bugs(&a);
    assert!(bugs.is_empty(), "{bugs:?}");
}
