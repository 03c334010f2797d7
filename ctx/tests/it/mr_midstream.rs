//! A memory region dropped while WRs that name it are outstanding: the device never touches the
//! freed memory (it is quarantined: an access would fault), and every WR completes exactly once,
//! the ones that come after the region with the error a ConnectX gives for a key that is gone.

use mlx5_qp::{SendWr, WcStatus};

use crate::support::{drain, pair, Params};

const WRS: u64 = 32;
const CHUNK: usize = 256 << 10;

/// Every WR id 0..WRS exactly once; the statuses in order.
fn statuses(wcs: &[mlx5_qp::Wc]) -> Vec<WcStatus> {
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..WRS).collect::<Vec<_>>(),
        "each WR exactly once: {wcs:?}"
    );
    wcs.iter().map(|w| w.status()).collect()
}

/// The statuses are some successes, then the error `first_err`, then flushes.
fn assert_ok_then(st: &[WcStatus], first_err: WcStatus) {
    let ok = st.iter().take_while(|s| **s == WcStatus::Success).count();
    assert!(ok < st.len(), "the drop reached no WR: {st:?}");
    assert_eq!(st[ok], first_err, "{st:?}");
    assert!(
        st[ok + 1..].iter().all(|s| *s == WcStatus::WrFlushErr),
        "{st:?}"
    );
}

/// Post a READ (WR 0, which cannot complete while the link is down) and then WRITEs from
/// `src` into `dst`, the first fenced behind the READ: the device has started on the stream and
/// holds the WRITEs when a region goes away. `drop_it` drops it; then the link comes back.
fn stream_then(
    drop_it: impl FnOnce(&mut Option<mlx5_ctx::Mr>, &mut Option<mlx5_ctx::Mr>),
) -> Vec<WcStatus> {
    let (f, mut a, b) = pair(&Params::default());
    let mut src = Some(a.pd.alloc_mr(CHUNK * WRS as usize).unwrap());
    let mut dst = Some(b.pd.alloc_mr(CHUNK * WRS as usize).unwrap());
    let aux = a.pd.alloc_mr(4096).unwrap();
    let (da, db) = (a.ctx.sim_device().unwrap(), b.ctx.sim_device().unwrap());
    let link = f.fabric().faults().link(da, db);
    link.down();
    {
        let (s, d) = (src.as_ref().unwrap(), dst.as_ref().unwrap());
        s.fill(0, s.len(), 0x5a).unwrap();
        let l = [aux.sge(0, 64).unwrap()];
        a.qp.post(&SendWr::read(0, d.remote(0).unwrap()).sges(&l).signaled())
            .unwrap();
        for i in 1..WRS {
            let off = i as usize * CHUNK;
            let sge = [s.sge(off, CHUNK as u32).unwrap()];
            let wr = SendWr::write(i, d.remote(off).unwrap())
                .sges(&sge)
                .signaled();
            a.qp.post(&if i == 1 { wr.fence() } else { wr }).unwrap();
        }
    }
    f.fabric().run_until_idle();
    assert_eq!(
        drain(&mut a).len(),
        0,
        "nothing completes while the link is down"
    );
    drop_it(&mut src, &mut dst);
    link.up();
    let mut got = Vec::new();
    for _ in 0..100 {
        f.fabric().advance(std::time::Duration::from_millis(100));
        got.extend(drain(&mut a));
        if got.len() as u64 >= WRS {
            break;
        }
    }
    assert!(f.fabric().driver_bugs().is_empty());
    statuses(&got)
}

/// The source of the fenced WRITEs goes away while the device holds them: the READ before them
/// completes, the first WRITE finds its lkey gone, the rest are flushed.
#[test]
fn source_region_dropped_mid_stream() {
    let st = stream_then(|src, _| *src = None);
    assert_eq!(st[0], WcStatus::Success);
    assert_ok_then(&st, WcStatus::LocProtErr);
}

/// The target of the WRITEs goes away on the peer (the READ from it was already served... or
/// not: it too names the target): the peer refuses the rkey.
#[test]
fn target_region_dropped_mid_stream() {
    let st = stream_then(|_, dst| *dst = None);
    assert_ok_then(&st, WcStatus::RemAccessErr);
}

/// Receives posted into a region that is then dropped: the arriving SENDs find the key gone.
#[test]
fn receive_region_dropped_before_the_sends_arrive() {
    let (f, mut a, mut b) = pair(&Params::default());
    let src = a.pd.alloc_mr(4096).unwrap();
    let rbuf = b.pd.alloc_mr(4096).unwrap();
    for i in 0..4u64 {
        b.qp.post_recv(100 + i, &[rbuf.sge(i as usize * 64, 64).unwrap()])
            .unwrap();
    }
    drop(rbuf);
    let sge = [src.sge(0, 64).unwrap()];
    a.qp.post(&SendWr::send(1).sges(&sge).signaled()).unwrap();
    f.fabric().run_until_idle();
    let got = drain(&mut b);
    assert_eq!(got.len(), 4, "every receive completes once: {got:?}");
    assert_eq!(got[0].status(), WcStatus::LocProtErr, "{got:?}");
    assert!(got[1..].iter().all(|w| w.status() == WcStatus::WrFlushErr));
    let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![100, 101, 102, 103]);
}

/// Dropping a region deregisters it (the device forgets the keys at once): the old drop order,
/// freeing without deregistering, would leave it registered over freed memory.
#[test]
fn dropping_a_region_deregisters_it_first() {
    let (_f, a, _b) = pair(&Params::default());
    let before = a.ctx.sim_device().unwrap().live_objects().mrs;
    let mr = a.pd.alloc_mr(1 << 20).unwrap();
    assert_eq!(a.ctx.sim_device().unwrap().live_objects().mrs, before + 1);
    drop(mr);
    assert_eq!(a.ctx.sim_device().unwrap().live_objects().mrs, before);
}
