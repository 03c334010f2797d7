//! A UC QP recovered from SQE through [`Qp::modify`] before its error completion was polled:
//! the data path learns of the recovery from the device's state, so the WRs posted after it
//! complete as before the error.

use mlx5_ctx::{QpInit, SimFabric};
use mlx5_hw::transition::{Changes, Step};
use mlx5_hw::QpState;

use crate::support::connect_uc;
use mlx5_qp::{SendWr, Wc, WcStatus};

#[test]
fn a_uc_qp_recovered_before_its_error_is_polled_completes_as_before_it() {
    let f = SimFabric::deterministic();
    let (ca, cb) = (f.add_device(), f.add_device());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut qa_cq, qb_cq) = (ca.create_cq(64).unwrap(), cb.create_cq(64).unwrap());
    let mut a = pa.create_qp(&QpInit::uc(&qa_cq).max_send_wr(16)).unwrap();
    let mut b = pb.create_qp(&QpInit::uc(&qb_cq).max_send_wr(16)).unwrap();
    connect_uc(&mut a, &b, 0x10, 0x20);
    connect_uc(&mut b, &a, 0x20, 0x10);
    let src = pa.alloc_mr(64).unwrap();
    let dst = pb.alloc_mr(4096).unwrap();
    // WR 1 gathers through a bad lkey: a local protection error, the QP to SQE, WR 2 and 3
    // flushed.
    let mut bad = src.sge(0, 8).unwrap();
    bad.lkey ^= 0x5a5a;
    a.post(
        &SendWr::write(1, dst.remote(0).unwrap())
            .sges(&[bad])
            .signaled(),
    )
    .unwrap();
    a.post(&SendWr::write(2, dst.remote(64).unwrap()).inline(b"flushed"))
        .unwrap();
    a.post(
        &SendWr::write(3, dst.remote(128).unwrap())
            .inline(b"flushed")
            .signaled(),
    )
    .unwrap();
    f.fabric().run_until_idle();
    assert_eq!(a.query().unwrap().qp_state, QpState::Sqe);
    // Recovered before anything was polled.
    a.modify(&Step::Resume(Changes::default())).unwrap();
    assert_eq!(a.state(), QpState::Rts);
    a.post(&SendWr::write(4, dst.remote(256).unwrap()).inline(b"after 4"))
        .unwrap();
    a.post(
        &SendWr::write(5, dst.remote(320).unwrap())
            .inline(b"after 5")
            .signaled(),
    )
    .unwrap();
    f.fabric().run_until_idle();
    let mut all = Vec::new();
    let mut wcs = [Wc::default(); 1];
    while qa_cq.poll(&mut a, &mut wcs).unwrap() == 1 {
        all.push((wcs[0].wr_id(), wcs[0].status()));
    }
    assert_eq!(all.first(), Some(&(1, WcStatus::LocProtErr)), "{all:?}");
    assert_eq!(all.last(), Some(&(5, WcStatus::Success)), "{all:?}");
    let between = &all[1..all.len() - 1];
    assert!(
        between
            .iter()
            .all(|&(id, s)| (id == 2 || id == 3) && s == WcStatus::WrFlushErr),
        "only the WRs before the recovery are flushed: {all:?}"
    );
    assert!(between.iter().any(|&(id, _)| id == 3), "{all:?}");
    let mut got = [0u8; 7];
    dst.read_into(320, &mut got).unwrap();
    assert_eq!(&got, b"after 5");
    dst.read_into(256, &mut got).unwrap();
    assert_eq!(&got, b"after 4");
    assert_eq!((a.state(), a.sq_outstanding_bbs()), (QpState::Rts, 0));
    assert!(f.fabric().driver_bugs().is_empty());
}
