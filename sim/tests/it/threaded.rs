//! Threaded mode: a background thread polls doorbells; the driver only posts and polls.

use crate::common;

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

/// Waits up to `timeout` for `fd` to become readable (`poll(2)`).
fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    r == 1
}

#[test]
fn an_idle_fabric_thread_sleeps() {
    use mlx5_hw::Device;
    // Two connected QPs with armed CQs and no traffic: the thread must not spin. CPU time is
    // bounded generously (a thread that spun would use the whole 2 s).
    let mut p = Pair::new(Opts::new(QpType::Rc));
    p.a.scq.arm(ArmCmd::Next);
    p.b.rcq.arm(ArmCmd::Next);
    let t = p.fabric.start_thread();
    std::thread::sleep(Duration::from_millis(50));
    let before = t.cpu_time().expect("thread CPU clock");
    std::thread::sleep(Duration::from_secs(2));
    let used = t.cpu_time().expect("thread CPU clock") - before;
    eprintln!("idle fabric thread: {used:?} of CPU in 2 s");
    assert!(
        used < Duration::from_millis(250),
        "the idle fabric thread used {used:?} of CPU in 2 s"
    );
    // It still works after sleeping: a doorbell is seen, and the armed CQ's event wakes a
    // waiter on the channel fd.
    let m = p.mem(false, 64);
    let dst = p.mem(true, 64);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(8, m.lkey(), m.addr())).unwrap();
    });
    let ch = p.b.rcq.ch.unwrap();
    let fd = p.b.dev.comp_channel_fd(ch).unwrap();
    assert!(
        wait_readable(fd, Duration::from_secs(10)),
        "no completion event"
    );
    assert_eq!(p.b.dev.get_cq_event(ch).unwrap(), Some(p.b.rcq.info.id));
    p.b.dev.ack_cq_events(p.b.rcq.info.id, 1).unwrap();
    drop(t);
    assert_eq!(p.b.rcq.drain().len(), 1);
    p.assert_no_bugs();
}
