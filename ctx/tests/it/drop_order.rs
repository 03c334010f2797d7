//! Every parent/child pair destroys in the right order whatever order the program drops the
//! handles in: a child keeps its parent's device object alive (runtime, through `Arc`), and a
//! region lent with `with_registered` cannot escape its closure (compile time: see the
//! `compile_fail` examples in the crate docs of `mlx5-ctx`).

use mlx5_ctx::{Context, QpInit, SimFabric};
use mlx5_hw::{AhAttr, GlobalRoute};
use mlx5_sim::LiveObjects;

fn live(ctx: &Context) -> LiveObjects {
    ctx.sim_device().unwrap().live_objects()
}

/// All six kinds of objects on one device, handles dropped in each of the 720 orders: the
/// device ends with nothing left and no destroy was refused (the sim refuses to destroy a CQ,
/// SRQ or PD in use, which would leave it behind).
#[test]
fn every_drop_order_leaves_nothing_behind() {
    let f = SimFabric::deterministic();
    let ctx = f.add_device();
    let mut order: Vec<usize> = (0..6).collect();
    let mut count = 0;
    permute(&mut order, 0, &mut |perm| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let srq = pd.create_srq(16, 1).unwrap();
        let qp = pd.create_qp(&QpInit::rc(&cq).srq(&srq)).unwrap();
        let mr = pd.alloc_mr(4096).unwrap();
        let gid = ctx.device().query_gid(1, 0).unwrap();
        let ah = pd
            .create_ah(&AhAttr {
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: gid,
                    ..GlobalRoute::default()
                }),
                ..AhAttr::default()
            })
            .unwrap();
        let want = LiveObjects {
            pds: 1,
            mrs: 1,
            cqs: 1,
            qps: 1,
            srqs: 1,
            ahs: 1,
        };
        assert_eq!(live(&ctx), want);
        let mut slots: Vec<Option<Box<dyn std::any::Any>>> = vec![
            Some(Box::new(pd)),
            Some(Box::new(cq)),
            Some(Box::new(srq)),
            Some(Box::new(qp)),
            Some(Box::new(mr)),
            Some(Box::new(ah)),
        ];
        for &i in perm {
            slots[i] = None;
        }
        assert_eq!(live(&ctx), LiveObjects::default(), "drop order {perm:?}");
        count += 1;
    });
    assert_eq!(count, 720);
}

fn permute(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
    if k == v.len() {
        f(v);
        return;
    }
    for i in k..v.len() {
        v.swap(k, i);
        permute(v, k + 1, f);
        v.swap(k, i);
    }
}

/// A QP keeps its CQ, SRQ and PD on the device after their handles are gone, and releases them
/// when it goes.
#[test]
fn a_child_keeps_its_parents() {
    let f = SimFabric::deterministic();
    let ctx = f.add_device();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let rcq = ctx.create_cq(16).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let qp = pd
        .create_qp(&QpInit::uc(&cq).recv_cq(&rcq).srq(&srq))
        .unwrap();
    let mr = pd.alloc_mr(100).unwrap();
    drop((pd, cq, rcq, srq));
    let l = live(&ctx);
    assert_eq!((l.pds, l.cqs, l.srqs, l.qps, l.mrs), (1, 2, 1, 1, 1));
    drop(qp);
    let l = live(&ctx);
    assert_eq!(
        (l.pds, l.cqs, l.srqs, l.qps, l.mrs),
        (1, 0, 0, 0, 1),
        "the MR holds the PD"
    );
    drop(mr);
    assert_eq!(live(&ctx), LiveObjects::default());
}

/// The context (and the fabric's thread) lives as long as any object made from it.
#[test]
fn objects_keep_the_context_and_its_thread() {
    let (a, b) = Context::sim_pair().unwrap();
    let pd = a.alloc_pd().unwrap();
    let mr = pd.alloc_mr(64).unwrap();
    let probe = b.clone();
    drop((a, b, pd));
    mr.write(0, b"still here").unwrap();
    assert_eq!(mr.read(0, 10).unwrap(), b"still here");
    assert!(probe.sim_fabric().unwrap().is_threaded());
}

/// Objects of two devices cannot be combined into one QP.
#[test]
fn a_cq_of_another_device_is_refused() {
    let f = SimFabric::deterministic();
    let (a, b) = (f.add_device(), f.add_device());
    let pd = a.alloc_pd().unwrap();
    let cq_b = b.create_cq(16).unwrap();
    let e = pd.create_qp(&QpInit::rc(&cq_b)).unwrap_err();
    assert!(e.to_string().contains("belongs to device sim1"), "{e}");
    assert_eq!(live(&a).qps, 0);
}

/// A lent region is deregistered when its closure returns, and also when it panics.
#[test]
fn a_lent_region_is_deregistered_on_return_and_on_panic() {
    let f = SimFabric::deterministic();
    let ctx = f.add_device();
    let pd = ctx.alloc_pd().unwrap();
    let mut buf = vec![7u8; 512];
    let lkey = pd
        .with_registered(&mut buf, mlx5_ctx::mr::all_access(), |mr| {
            assert_eq!(live(&ctx).mrs, 1);
            mr.write(0, b"lent").unwrap();
            mr.lkey()
        })
        .unwrap();
    assert_ne!(lkey, 0);
    assert_eq!(live(&ctx).mrs, 0);
    assert_eq!(&buf[..5], b"lent\x07");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = pd.with_registered(&mut buf, mlx5_ctx::mr::all_access(), |_| panic!("boom"));
    }));
    assert!(r.is_err());
    assert_eq!(live(&ctx).mrs, 0);
}

/// Out-of-bounds accesses and SGEs are errors, not panics.
#[test]
fn region_accessors_check_bounds() {
    let f = SimFabric::deterministic();
    let ctx = f.add_device();
    let mr = ctx.alloc_pd().unwrap().alloc_mr(100).unwrap();
    assert!(mr.write(96, b"12345").is_err());
    assert!(mr.read(usize::MAX, 2).is_err());
    assert!(mr.sge(90, 11).is_err());
    assert!(mr.sge(90, 10).is_ok());
    assert!(mr.read_u64_be(93).is_err());
    mr.write_u64_be(92, 0x0102_0304_0506_0708).unwrap();
    assert_eq!(mr.read_u64_be(92).unwrap(), 0x0102_0304_0506_0708);
    assert_eq!(mr.read(92, 1).unwrap(), [0x01]);
    assert!(mr.read_u64(93).is_err());
    mr.write_u64(88, 0x0102_0304_0506_0708).unwrap();
    assert_eq!(mr.read_u64(88).unwrap(), 0x0102_0304_0506_0708);
    assert_eq!(
        mr.read(88, 8).unwrap(),
        0x0102_0304_0506_0708u64.to_ne_bytes()
    );
}

/// A QP dropped with completions still queued on a CQ another QP shares: the CQ's next poll
/// settles them, as rdma-core's destroy cleans them from the CQ (`mlx5_destroy_qp`,
/// `__mlx5_cq_clean`) — the dropped QP's send completion goes with it, its receive through
/// the SRQ comes back as the SRQ's WR (its owner still waits for it) — and the live QP's
/// completions come in their order around them, without an error.
#[test]
fn a_qp_dropped_with_completions_queued_leaves_its_shared_cq_usable() {
    use crate::support::connect_pair_rc;
    use mlx5_qp::{SendWr, Wc};
    let f = SimFabric::deterministic();
    let (ca, cb) = (f.add_device(), f.add_device());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cq, cq_b) = (ca.create_cq(64).unwrap(), cb.create_cq(64).unwrap());
    let mut srq = pa.create_srq(16, 1).unwrap();
    let mut dying = pa.create_qp(&QpInit::rc(&cq).srq(&srq)).unwrap();
    let mut live_qp = pa.create_qp(&QpInit::rc(&cq)).unwrap();
    let mut peers = [
        pb.create_qp(&QpInit::rc(&cq_b)).unwrap(),
        pb.create_qp(&QpInit::rc(&cq_b)).unwrap(),
    ];
    connect_pair_rc(&mut dying, &mut peers[0]);
    connect_pair_rc(&mut live_qp, &mut peers[1]);
    let (ma, mb) = (pa.alloc_mr(4096).unwrap(), pb.alloc_mr(4096).unwrap());
    for k in 0..2u64 {
        srq.post_recv(100 + k, &[ma.sge(k as usize * 64, 64).unwrap()])
            .unwrap();
    }
    for k in 0..2u64 {
        peers[1]
            .post_recv(200 + k, &[mb.sge(512 + k as usize * 64, 64).unwrap()])
            .unwrap();
    }
    let sge = [mb.sge(0, 8).unwrap()];
    let to_peer = [ma.sge(1024, 8).unwrap()];
    // The dying QP's send and receive, between two of the live QP's sends.
    live_qp
        .post(&SendWr::send(1).sges(&to_peer).signaled())
        .unwrap();
    f.fabric().run_until_idle();
    peers[0].post(&SendWr::send(50).sges(&sge)).unwrap();
    dying
        .post(
            &SendWr::write(60, mb.remote(64).unwrap())
                .inline(b"x")
                .signaled(),
        )
        .unwrap();
    f.fabric().run_until_idle();
    live_qp
        .post(&SendWr::send(2).sges(&to_peer).signaled())
        .unwrap();
    f.fabric().run_until_idle();
    let (dying_qpn, live_qpn) = (dying.qpn(), live_qp.qpn());
    drop(dying);
    let mut wcs = [Wc::default(); 8];
    let mut table = (&mut live_qp, std::slice::from_mut(&mut srq));
    let n = cq.poll(&mut table, &mut wcs).unwrap();
    let got: Vec<(u32, u64)> = wcs[..n].iter().map(|w| (w.qp_num(), w.wr_id())).collect();
    assert_eq!(
        got,
        [(live_qpn, 1), (dying_qpn, 100), (live_qpn, 2)],
        "the live QP's sends and the SRQ's receive; the dropped QP's WRITE went with it"
    );
    assert!(wcs[..n].iter().all(Wc::is_ok), "{:?}", &wcs[..n]);
    assert_eq!(cq.ci(), 4, "four CQEs consumed, the WRITE's among them");
    assert_eq!(cq.poll(&mut table, &mut wcs).unwrap(), 0, "nothing left");
    assert_eq!(srq.outstanding(), 1);
    assert_eq!(live(&ca).qps, 1);
}
