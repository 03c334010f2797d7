//! DC on the owning API, without `unsafe`: a DCT on each of two devices reached by its
//! address, number and key; one DCI posting to both; receives polled from each DCT's SRQ;
//! a DCI that failed (wrong key: RETRY_EXC_ERR) recovered and posting again; streams checked;
//! objects dropped in any order.

use std::time::Duration;

use mlx5_ctx::{DciInit, SimFabric};
use mlx5_hw::{DciStreams, QpState};
use mlx5_qp::{SendWr, Wc, WcOpcode, WcStatus};

#[test]
fn one_dci_sends_to_dcts_on_two_devices_and_recovers_from_a_wrong_key() {
    let f = SimFabric::deterministic();
    let (a, b, c) = (f.add_device(), f.add_device(), f.add_device());
    let pa = a.alloc_pd().unwrap();
    let mut cqa = a.create_cq(64).unwrap();
    let mra = pa.alloc_mr(4096).unwrap();
    let mut dci = pa
        .create_dci(&DciInit {
            timeout: 1,
            retry_cnt: 1,
            ..DciInit::new(&cqa)
        })
        .unwrap();
    assert_eq!(dci.state(), QpState::Rts);
    let mut targets = Vec::new();
    for ctx in [&b, &c] {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let mut srq = pd.create_srq(16, 1).unwrap();
        let mr = pd.alloc_mr(4096).unwrap();
        let dct = pd.create_dct(&cq, &srq, 0xfeed).unwrap();
        assert_eq!(dct.state().unwrap(), QpState::Rtr);
        srq.post_recv(7, &[mr.sge(0, 256).unwrap()]).unwrap();
        targets.push((dct, cq, srq, mr));
    }
    let dests: Vec<_> = targets
        .iter()
        .map(|t| dci.target(&t.0.addr()).unwrap())
        .collect();
    for (i, (t, d)) in targets.iter().zip(&dests).enumerate() {
        let msg = format!("hello DCT {i}");
        dci.post(
            &SendWr::send(i as u64)
                .inline(msg.as_bytes())
                .dc(d)
                .signaled(),
        )
        .unwrap();
        dci.post(
            &SendWr::write(10 + i as u64, t.3.remote(1024).unwrap())
                .inline(b"written")
                .dc(d)
                .signaled(),
        )
        .unwrap();
    }
    let mut wcs = [Wc::default(); 8];
    let mut done = Vec::new();
    for _ in 0..100 {
        a.progress();
        let n = cqa.poll(&mut dci, &mut wcs).unwrap();
        done.extend_from_slice(&wcs[..n]);
        if done.len() == 4 {
            break;
        }
    }
    let mut ids: Vec<_> = done.iter().map(|w| (w.wr_id(), w.status())).collect();
    ids.sort_by_key(|x| x.0);
    assert_eq!(
        ids,
        [0, 1, 10, 11].map(|i| (i, WcStatus::Success)).to_vec(),
        "{done:?}"
    );
    for (i, t) in targets.iter_mut().enumerate() {
        let (dct, cq, srq, mr) = t;
        let n = cq
            .poll(
                &mut (&mut [] as &mut [mlx5_ctx::Qp], std::slice::from_mut(srq)),
                &mut wcs,
            )
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            (
                wcs[0].wr_id(),
                wcs[0].opcode(),
                wcs[0].qp_num(),
                wcs[0].src_qp()
            ),
            (7, WcOpcode::Recv, dct.number(), dci.qpn())
        );
        let msg = format!("hello DCT {i}");
        assert_eq!(mr.read(0, msg.len()).unwrap(), msg.as_bytes());
        assert_eq!(mr.read(1024, 7).unwrap(), b"written");
    }
    // A wrong key: the target drops the request, the DCI runs out of retries and fails.
    let mut wrong = targets[0].0.addr();
    wrong.key ^= 1;
    let bad = dci.target(&wrong).unwrap();
    dci.post(&SendWr::send(99).inline(b"x").dc(&bad).signaled())
        .unwrap();
    let mut got = None;
    for _ in 0..200 {
        f.fabric().advance(Duration::from_micros(20));
        if cqa.poll(&mut dci, &mut wcs).unwrap() == 1 {
            got = Some(wcs[0]);
            break;
        }
    }
    let w = got.expect("the error completion");
    assert_eq!((w.wr_id(), w.status()), (99, WcStatus::RetryExcErr));
    assert_eq!(dci.state(), QpState::Error);
    // Recovered, it reaches the targets again.
    dci.recover().unwrap();
    assert_eq!(dci.state(), QpState::Rts);
    let sge = targets[1].3.sge(512, 64).unwrap();
    targets[1].2.post_recv(8, &[sge]).unwrap();
    dci.post(&SendWr::send(100).inline(b"again").dc(&dests[1]).signaled())
        .unwrap();
    let mut ok = false;
    for _ in 0..100 {
        a.progress();
        if cqa.poll(&mut dci, &mut wcs).unwrap() == 1 {
            assert_eq!((wcs[0].wr_id(), wcs[0].status()), (100, WcStatus::Success));
            ok = true;
            break;
        }
    }
    assert!(ok);
    assert_eq!(targets[1].3.read(512, 5).unwrap(), b"again");
    // Streams: only on a DCI created with them, and within their number.
    assert!(dci.target_on_stream(&targets[0].0.addr(), 0).is_err());
    let streams = pa
        .create_dci(&DciInit {
            streams: Some(DciStreams {
                log_num_concurent: 2,
                log_num_errored: 1,
            }),
            ..DciInit::new(&cqa)
        })
        .unwrap();
    let s3 = streams.target_on_stream(&targets[0].0.addr(), 3).unwrap();
    assert_eq!(s3.stream_id(), 3);
    assert!(streams.target_on_stream(&targets[0].0.addr(), 4).is_err());
    let _ = mra;
    // Dropped with the DCTs first, their SRQs and CQs after: the owners keep the order right.
    drop(targets);
    drop(dests);
    drop(dci);
    assert_eq!(b.sim_device().unwrap().live_objects().qps, 0);
    assert_eq!(a.sim_device().unwrap().live_objects().qps, 1);
}
