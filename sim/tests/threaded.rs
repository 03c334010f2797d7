//! Threaded mode: a background thread polls doorbells; the driver only posts and polls.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mlx5_cq::*;
use mlx5_hw::QpType;
use mlx5_wqe::*;

#[test]
fn background_thread_executes_posts() {
    let mut o = Opts::new(QpType::Rc);
    o.mode = Ring::Bf;
    let mut p = Pair::new(o);
    let remote = p.mem(true, 4096);
    let t = p.fabric.start_thread();
    assert!(t.is_running());
    let (ra, rk) = (remote.addr(), remote.rkey());
    for k in 0..200u64 {
        let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(ra + (k % 64) * 8, rk)).unwrap();
            w.push_inline(&[&k.to_le_bytes()]).unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let c = loop {
            if let Some(c) = p.a.scq.poll() {
                break c;
            }
            assert!(Instant::now() < deadline, "no completion for WQE {k}");
            std::thread::yield_now();
        };
        assert_eq!((c.opcode(), c.wqe_counter()), (CQE_REQ, idx));
        assert_eq!(remote.read(((k % 64) * 8) as usize, 8), k.to_le_bytes());
    }
    drop(t);
    p.assert_no_bugs();
}

#[test]
fn background_thread_recovers_from_loss_on_the_wall_clock() {
    let mut o = Opts::new(QpType::Rc);
    o.timeout = 6; // 262 µs
    let mut p = Pair::new(o);
    let local = p.mem(false, 4096);
    let remote = p.mem(true, 4096);
    p.fabric.set_seed(1);
    p.fabric
        .faults()
        .link(&p.a.dev, &p.b.dev)
        .loss(mlx5_sim::Rate(0.1))
        .reorder(Duration::from_micros(3));
    let t = p.fabric.start_thread();
    let (ra, rk, ll, la) = (remote.addr(), remote.rkey(), local.lkey(), local.addr());
    for k in 0..30u64 {
        local.write((k * 8) as usize, &k.to_le_bytes());
        let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(ra + k * 8, rk)).unwrap();
            w.push(&DataSeg::new(8, ll, la + k * 8)).unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let c = loop {
            if let Some(c) = p.a.scq.poll() {
                break c;
            }
            assert!(Instant::now() < deadline, "no completion for WQE {k}");
            std::thread::yield_now();
        };
        assert_eq!(
            (c.opcode(), c.wqe_counter()),
            (CQE_REQ, idx),
            "syndrome {:#x}, counters {:?}",
            c.as_err().syndrome,
            mlx5_hw::Device::counters(&p.a.dev, 1)
        );
        assert_eq!(remote.read((k * 8) as usize, 8), k.to_le_bytes());
    }
    drop(t);
    assert!(
        p.fabric.faults().stats().dropped > 0,
        "some frames were lost"
    );
    p.assert_no_bugs();
}
