//! Random sequences of region allocation, WRs that name live or dropped regions, receives,
//! drops, device steps and polls on two connected RC QPs: the device never touches freed memory
//! (freed buffers are quarantined, so an access would fault the test) and every posted WR
//! completes exactly once, whatever the order.

use std::collections::BTreeMap;
use std::time::Duration;

use mlx5_ctx::Mr;
use mlx5_qp::{RemoteAddr, SendWr, Sge};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use crate::support::{pair, End, Params};

#[derive(Clone, Debug)]
enum Op {
    /// A region of 1 << (12 + size) bytes on A (`false`) or B (`true`).
    Alloc { b: bool, size: u8 },
    /// Drop region `i` (mod the live count) on A or B.
    Drop { b: bool, i: usize },
    /// WRITE from A's region `src` into B's region `dst` (live or already dropped).
    Write { src: usize, dst: usize, len: u32 },
    /// READ B's region `dst` into A's region `src`.
    Read { src: usize, dst: usize, len: u32 },
    /// A receive on B into B's region `dst`.
    Recv { dst: usize },
    /// A SEND from A's region `src`, when B has a receive for it.
    Send { src: usize, len: u32 },
    /// Step the fabric `n` times.
    Step { n: u8 },
    /// Poll A or B.
    Poll { b: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), 0u8..3).prop_map(|(b, size)| Op::Alloc { b, size }),
        (any::<bool>(), 0usize..8).prop_map(|(b, i)| Op::Drop { b, i }),
        (0usize..8, 0usize..8, 1u32..20_000).prop_map(|(src, dst, len)| Op::Write {
            src,
            dst,
            len
        }),
        (0usize..8, 0usize..8, 1u32..20_000).prop_map(|(src, dst, len)| Op::Read { src, dst, len }),
        (0usize..8).prop_map(|dst| Op::Recv { dst }),
        (0usize..8, 1u32..4096).prop_map(|(src, len)| Op::Send { src, len }),
        (1u8..30).prop_map(|n| Op::Step { n }),
        any::<bool>().prop_map(|b| Op::Poll { b }),
    ]
}

/// A region as a WR names it: what stays of it after it is dropped.
#[derive(Clone, Copy)]
struct Named {
    sge: Sge,
    remote: RemoteAddr,
}

/// One side's regions: the live ones, and every region ever made (by position).
#[derive(Default)]
struct Regions {
    live: Vec<(usize, Mr)>,
    named: Vec<Named>,
}

impl Regions {
    fn alloc(&mut self, e: &End, size: u8) {
        let mr = e.pd.alloc_mr(1 << (12 + size)).unwrap();
        let named = Named {
            sge: mr.sge(0, mr.len() as u32).unwrap(),
            remote: mr.remote(0).unwrap(),
        };
        self.live.push((self.named.len(), mr));
        self.named.push(named);
    }
    fn drop(&mut self, i: usize) {
        if !self.live.is_empty() {
            let k = i % self.live.len();
            self.live.remove(k);
        }
    }
    fn get(&self, i: usize) -> Option<Named> {
        (!self.named.is_empty()).then(|| self.named[i % self.named.len()])
    }
}

fn sge(n: Named, len: u32) -> Sge {
    Sge {
        length: len.min(n.sge.length),
        ..n.sge
    }
}

fn run(ops: Vec<Op>) {
    let (f, mut a, mut b) = pair(&Params {
        timeout: 10,
        retry_cnt: 2,
        rnr_retry: 1,
        ..Params::default()
    });
    let (mut ra, mut rb) = (Regions::default(), Regions::default());
    ra.alloc(&a, 0);
    rb.alloc(&b, 0);
    // Every WR id posted, and how many completions each got.
    let mut posted_a: BTreeMap<u64, u32> = BTreeMap::new();
    let mut posted_b: BTreeMap<u64, u32> = BTreeMap::new();
    let mut next = 0u64;
    let mut recvs_free = 0u32;
    let mut wcs = [mlx5_qp::Wc::default(); 16];
    let mut poll = |e: &mut End, posted: &mut BTreeMap<u64, u32>| {
        let n = e.cq.poll(&mut e.qp, &mut wcs).unwrap();
        for w in &wcs[..n] {
            *posted
                .get_mut(&w.wr_id())
                .expect("a completion for a WR never posted") += 1;
        }
        n
    };
    for op in ops {
        match op {
            Op::Alloc { b: false, size } => ra.alloc(&a, size),
            Op::Alloc { b: true, size } => rb.alloc(&b, size),
            Op::Drop { b: false, i } => ra.drop(i),
            Op::Drop { b: true, i } => rb.drop(i),
            Op::Write { src, dst, len } | Op::Read { src, dst, len } => {
                let (Some(s), Some(d)) = (ra.get(src), rb.get(dst)) else {
                    continue;
                };
                let l = [sge(s, len.min(d.sge.length))];
                let wr = if matches!(op, Op::Write { .. }) {
                    SendWr::write(next, d.remote)
                } else {
                    SendWr::read(next, d.remote)
                };
                if a.qp.post(&wr.sges(&l).signaled()).is_ok() {
                    posted_a.insert(next, 0);
                }
                next += 1;
            }
            Op::Recv { dst } => {
                let Some(d) = rb.get(dst) else { continue };
                if b.qp.post_recv(next, &[sge(d, 4096)]).is_ok() {
                    posted_b.insert(next, 0);
                    recvs_free += 1;
                }
                next += 1;
            }
            Op::Send { src, len } => {
                let Some(s) = ra.get(src) else { continue };
                if recvs_free == 0 {
                    continue;
                }
                let l = [sge(s, len)];
                if a.qp.post(&SendWr::send(next).sges(&l).signaled()).is_ok() {
                    posted_a.insert(next, 0);
                    recvs_free -= 1;
                }
                next += 1;
            }
            Op::Step { n } => {
                for _ in 0..n {
                    f.fabric().step();
                }
            }
            Op::Poll { b: false } => {
                poll(&mut a, &mut posted_a);
            }
            Op::Poll { b: true } => {
                poll(&mut b, &mut posted_b);
            }
        }
    }
    // Let every timer fire (retransmissions after the peer went to Error, RNR waits).
    for _ in 0..200 {
        f.fabric().run_until_idle();
        while poll(&mut a, &mut posted_a) + poll(&mut b, &mut posted_b) > 0 {}
        if a.qp.sq_outstanding_wrs() == 0 && b.qp.rq_outstanding() == 0 {
            break;
        }
        f.fabric().advance(Duration::from_millis(20));
    }
    // A receive queue the peer never sends into keeps its WRs: move B to Error to flush them.
    if b.qp.rq_outstanding() > 0 {
        b.qp.modify(&mlx5_hw::transition::Step::Error).unwrap();
        f.fabric().run_until_idle();
        while poll(&mut b, &mut posted_b) > 0 {}
    }
    for (side, posted) in [("A", &posted_a), ("B", &posted_b)] {
        for (id, n) in posted {
            assert_eq!(*n, 1, "side {side}: WR {id} completed {n} times");
        }
    }
    assert!(
        f.fabric().driver_bugs().is_empty(),
        "{:?}",
        f.fabric().driver_bugs()
    );
}

proptest! {
    #![proptest_config(Config {
        cases: 32,
        rng_seed: RngSeed::Fixed(0x6d72_6472),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn random_create_post_drop_sequences(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
