//! A device that dies with work in flight: every WR a program posted completes exactly once
//! (`Cq::flush_dead`, `ctx/src/dead.rs`), on the software ConnectX directly and on the same
//! model behind unmodified libibverbs + libmlx5 (the preload library of `uverbs/`), where the
//! device, as a ConnectX in internal error, writes no CQE at all after its death.
//!
//! Run plainly, the test runs on two software ConnectX devices, then runs itself again in a
//! child process under `libmlx5sim.so` with `MLX5_TEST_DEVICE=mlx5_0`, once with
//! `RDMAV_ALLOW_DISASSOC_DESTROY=1` and once without (libibverbs' rule for destroying the
//! objects of a disassociated context: with it a destroy's EIO is success). With
//! `MLX5_TEST_DEVICE` set it runs on that device only (the child; or a ConnectX).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use mlx5_ctx::{Context, Cq, Error, QpInit, Unretired};
use mlx5_qp::{RemoteAddr, SendWr, Wc, WcStatus};

use crate::support::{connect_rc, contexts, kill, test_device, Params};

const LONG: Duration = Duration::from_secs(60);

/// The name of the test, for the child's `--exact`.
const NAME: &str = "dead_device::every_wr_of_a_dead_device_completes_exactly_once";

/// Wait for `n` completions of `cq` (a live device).
fn wait_n<R: mlx5_qp::Resolve + ?Sized>(cq: &mut Cq, table: &mut R, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    while got.len() < n {
        let k = got.len();
        got.extend(cq.poll_until(table, LONG, |_| true).unwrap());
        assert!(got.len() > k);
    }
    got
}

/// Everything `cq` hands out after the death, until the wait ends with DeviceFatal.
fn drain_dead<R: mlx5_qp::Resolve + ?Sized>(cq: &mut Cq, table: &mut R) -> (Vec<Wc>, Unretired) {
    match cq.poll_until(table, LONG, |_| false).unwrap_err() {
        Error::DeviceFatal {
            completions,
            unretired,
            ..
        } => (completions, unretired),
        other => panic!("expected DeviceFatal, got {other}"),
    }
}

/// Count each WR id's completions into `seen`.
fn count(seen: &mut BTreeMap<u64, Vec<WcStatus>>, wcs: &[Wc]) {
    for wc in wcs {
        seen.entry(wc.wr_id()).or_default().push(wc.status());
    }
}

fn scenario(a: Context, b: Context) {
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    // A: one CQ shared by two QPs (one with its own receive queue, one on an SRQ), and a third
    // QP whose sends and receives go to two CQs of their own.
    let mut shared = a.create_cq(128).unwrap();
    let (mut scq, mut rcq) = (a.create_cq(64).unwrap(), a.create_cq(64).unwrap());
    let mut srq = pa.create_srq(16, 1).unwrap();
    let mut qps = [
        pa.create_qp(&QpInit::rc(&shared)).unwrap(),
        pa.create_qp(&QpInit::rc(&shared).srq(&srq)).unwrap(),
    ];
    let mut split = pa.create_qp(&QpInit::rc(&scq).recv_cq(&rcq)).unwrap();
    // B: the peers, which post no receive: A's SENDs meet RNR NAKs and stay outstanding
    // (rnr_retry 7 retries for ever).
    let bcq = b.create_cq(64).unwrap();
    let mut peers = [
        pb.create_qp(&QpInit::rc(&bcq)).unwrap(),
        pb.create_qp(&QpInit::rc(&bcq)).unwrap(),
        pb.create_qp(&QpInit::rc(&bcq)).unwrap(),
    ];
    let mut bcq = bcq;
    // The peers ask for the longest RNR NAK timer (655 ms): A's SENDs wait in RNR without
    // keeping the device busy.
    let p = Params {
        min_rnr_timer: 0,
        ..Params::default()
    };
    for (i, (q, peer)) in qps
        .iter_mut()
        .chain(std::iter::once(&mut split))
        .zip(peers.iter_mut())
        .enumerate()
    {
        let (x, y) = (0x100 + i as u32 * 0x10, 0x200 + i as u32 * 0x10);
        connect_rc(q, peer, &p, x, y);
        connect_rc(peer, q, &p, y, x);
    }
    let ma = pa.alloc_mr(4096).unwrap();
    let mb = pb.alloc_mr(4096).unwrap();
    let remote = RemoteAddr {
        addr: mb.addr(),
        rkey: mb.rkey(),
    };
    let sge = |off: usize| [ma.sge(off, 8).unwrap()];
    // Receives on A: 4 on QP 0's own queue, 4 on the SRQ, 4 on the split QP.
    for k in 0..4u64 {
        qps[0].post_recv(100 + k, &sge(64 * k as usize)).unwrap();
        srq.post_recv(200 + k, &[ma.sge(512 + 64 * k as usize, 8).unwrap()])
            .unwrap();
        split
            .post_recv(300 + k, &sge(1024 + 64 * k as usize))
            .unwrap();
    }
    // B sends two messages to each: A's device writes their receive CQEs before it ACKs them,
    // so once B has its completions they wait unpolled in A's CQs when A dies.
    let src = [mb.sge(0, 8).unwrap()];
    for (i, peer) in peers.iter_mut().enumerate() {
        for k in 0..2u64 {
            peer.post(&SendWr::send(900 + i as u64 * 10 + k).sges(&src).signaled())
                .unwrap();
        }
    }
    let got = wait_n(&mut bcq, &mut peers[..], 6);
    assert!(got.iter().all(Wc::is_ok), "{got:?}");
    // A's sends: a WRITE that completes (polled before the death; on the split QP, whose send
    // CQ holds nothing else), then SENDs that meet RNR,
    // signaled or not, on each QP.
    let mut posted: Vec<u64> = (100..104).chain(300..304).collect();
    let g = sge(0);
    split
        .post(&SendWr::write(1, remote).sges(&g).signaled())
        .unwrap();
    let w = scq.wait_for(&mut split, 1, LONG).unwrap();
    assert!(w.is_ok());
    posted.push(1);
    for (i, q) in qps
        .iter_mut()
        .chain(std::iter::once(&mut split))
        .enumerate()
    {
        for k in 0..3u64 {
            let id = 10 + i as u64 * 10 + k;
            let g = sge(2048);
            let wr = SendWr::send(id).sges(&g);
            q.post(&if k == 1 { wr } else { wr.signaled() }).unwrap();
            posted.push(id);
        }
    }
    let mut seen = BTreeMap::new();
    count(&mut seen, &[w]);

    kill(&a);

    // The shared CQ: the receive CQEs written before the death, then the flushes of QP 0's
    // and QP 1's sends and of QP 0's receives, then the SRQ's two receives left.
    let srqn = srq.srqn();
    let mut table = (&mut qps[..], std::slice::from_mut(&mut srq));
    let (wcs, left) = drain_dead(&mut shared, &mut table);
    count(&mut seen, &wcs);
    let ok: Vec<u64> = wcs.iter().filter(|w| w.is_ok()).map(Wc::wr_id).collect();
    assert_eq!(
        ok.len(),
        4,
        "the four receives completed before the death: {wcs:?}"
    );
    assert!(wcs
        .iter()
        .filter(|w| !w.is_ok())
        .all(|w| w.status() == WcStatus::WrFlushErr));
    assert_eq!(left.waiting_for_cq, []);
    assert_eq!(left.srq_outstanding, []);
    let srq_flushed: Vec<u64> = wcs
        .iter()
        .filter(|w| !w.is_ok() && (200..204).contains(&w.wr_id()))
        .map(Wc::wr_id)
        .collect();
    assert_eq!(
        srq_flushed.len(),
        2,
        "the SRQ's two unconsumed receives: {wcs:?}"
    );
    assert_eq!(
        table.1[0].outstanding(),
        0,
        "SRQ {srqn:#x} holds nothing more"
    );
    // The split QP, its send CQ first: kept back until its receive CQ was polled dry too.
    let (wcs, left) = drain_dead(&mut scq, &mut split);
    assert!(wcs.is_empty(), "{wcs:?}");
    assert_eq!(left.waiting_for_cq, [(split.qpn(), rcq.id())]);
    let (wcs, left) = drain_dead(&mut rcq, &mut split);
    assert!(left.is_complete(), "{left:?}");
    assert_eq!(wcs.len(), 4, "two received, two flushed: {wcs:?}");
    assert!(wcs.iter().all(|w| w.opcode().is_recv()));
    count(&mut seen, &wcs);
    let (wcs, _) = drain_dead(&mut scq, &mut split);
    assert_eq!(wcs.len(), 3, "the split QP's three sends: {wcs:?}");
    assert!(wcs
        .iter()
        .all(|w| w.status() == WcStatus::WrFlushErr && !w.opcode().is_recv()));
    count(&mut seen, &wcs);

    // Every WR posted completed exactly once: to the QPs and to the SRQ.
    let ids: Vec<u64> = seen.keys().copied().collect();
    let srq_ids: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|i| (200..204).contains(i))
        .collect();
    assert_eq!(srq_ids.len(), 4, "the SRQ's four receives: {ids:?}");
    let mut expected = posted.clone();
    expected.extend(&srq_ids);
    expected.sort_unstable();
    assert_eq!(ids, expected);
    for (id, st) in &seen {
        assert_eq!(st.len(), 1, "WR {id} completed {} times: {st:?}", st.len());
    }
    // Nothing more, and a second wait ends at once.
    let (wcs, _) = drain_dead(&mut shared, &mut table);
    assert!(wcs.is_empty(), "{wcs:?}");
    // A post after the death is accepted (a QP in Error takes posts, and libmlx5 checks no
    // state) and flushed by the next wait, once.
    let g = sge(0);
    table.0[1]
        .post(&SendWr::send(77).sges(&g).signaled())
        .unwrap();
    let (wcs, _) = drain_dead(&mut shared, &mut table);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id(), w.status()))
            .collect::<Vec<_>>(),
        [(77, WcStatus::WrFlushErr)]
    );
    // wait_for ends too. flush_dead on a live device is refused; through rdma-core the peer
    // is the same (dead) device, opened twice, and has nothing outstanding.
    let e = shared.wait_for(&mut qps[..], 5, LONG).unwrap_err();
    assert!(matches!(e, Error::DeviceFatal { .. }), "{e}");
    let mut w = [Wc::default(); 4];
    if b.is_fatal() {
        let (n, left) = bcq.flush_dead(&mut peers[..], &mut w).unwrap();
        assert_eq!((n, left.is_complete()), (0, true));
    } else {
        let e = bcq.flush_dead(&mut peers[..], &mut w).unwrap_err();
        assert!(matches!(e, Error::Alive { .. }), "{e}");
    }
    // Everything drops (qps before the SRQ, the CQs last; a destroy refused by a disassociated
    // context without RDMAV_ALLOW_DISASSOC_DESTROY is logged, never a panic).
    drop((qps, split, srq, shared, scq, rcq, ma, pa));
}

#[test]
fn every_wr_of_a_dead_device_completes_exactly_once() {
    if test_device().is_some() {
        let (a, b) = contexts();
        scenario(a, b);
        return;
    }
    let (a, b) = contexts();
    scenario(a, b);
    // The same through rdma-core, in a process of its own (the device stays dead).
    let lib = mlx5_testkit::process::preload_library(env!("CARGO"));
    for disassoc in [true, false] {
        let control = std::env::temp_dir().join(format!(
            "mlx5-dead-device-{}-{disassoc}",
            std::process::id()
        ));
        std::fs::write(&control, "").unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env("LD_PRELOAD", &lib)
            .env("MLX5_TEST_DEVICE", "mlx5_0")
            .env("MLX5SIM_CONTROL", &control)
            .env_remove("RDMAV_ALLOW_DISASSOC_DESTROY");
        if disassoc {
            cmd.env("RDMAV_ALLOW_DISASSOC_DESTROY", "1");
        }
        let out = cmd
            .output()
            .expect("run the test again under libmlx5sim.so");
        let _ = std::fs::remove_file(&control);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "through rdma-core (RDMAV_ALLOW_DISASSOC_DESTROY {}): {}\n{stdout}\n{}",
            if disassoc { "=1" } else { "unset" },
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
