//! Threaded mode under races: the device thread scans the BlueFlame halves while the driver
//! (this test's thread) is in the middle of writing them, including copies deliberately
//! stretched by yields and sleeps between their 8-byte stores. Every WQE must run once, from
//! the ring, with the right data, no QP may stall, and no driver bug may be reported for a
//! correct driver; a wrong copy must still be reported once it has settled.

use crate::common;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use common::*;
use mlx5_cq::CQE_REQ;
use mlx5_hw::{mmio, QpType};
use mlx5_sim::DriverBugKind;
use mlx5_wqe::*;

/// Remote slots (one per WQE in flight at most; far more than the SQ holds).
const SLOTS: usize = 1024;
/// Bytes per slot (the largest inline payload fits).
const SLOT: usize = 128;

/// xorshift64*: a fixed-seed generator so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How to disturb one hand-written BlueFlame copy.
#[derive(Clone, Copy, Debug, Default)]
struct Chaos {
    /// Yield before the stores of these words (bit i: before word i).
    yields: u32,
    /// Sleep before this word.
    sleep_at: Option<usize>,
}

/// The payload of WQE number `k`: `len` bytes that differ from every other WQE's.
fn payload(k: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (k as u8).wrapping_mul(31).wrapping_add(i as u8))
        .collect();
    let n = len.min(8);
    v[..n].copy_from_slice(&k.to_le_bytes()[..n]);
    v
}

/// Write an inline RDMA WRITE of `data` to `ra` into the ring (nothing rung). Returns
/// (index, basic blocks).
fn write_wqe(qp: &mut Qp, ra: u64, rkey: u32, data: &[u8]) -> (u16, u16) {
    let (pi, ds) = qp.prepare(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push_inline(&[data]).unwrap();
    });
    (pi, ds.div_ceil(4) as u16)
}

/// The BlueFlame copy of the `bbs` blocks at `pi`, one 8-byte store at a time
/// (`mmio::ring_db64` is exactly one), ascending like rdma-core's `mlx5_bf_copy`, with the
/// driver thread giving up the CPU where `chaos` says; `corrupt` flips one byte of the copy.
fn bf_copy_by_words(qp: &mut Qp, pi: u16, bbs: u16, chaos: Chaos, corrupt: Option<usize>) {
    let reg = qp.info.layout.bf.reg.wrapping_add(qp.bf_off);
    mmio::wc_start();
    for b in 0..bbs as usize {
        let src = qp.bb_ptr(pi.wrapping_add(b as u16));
        for i in 0..8 {
            let word = b * 8 + i;
            if chaos.yields & (1 << word.min(31)) != 0 {
                std::thread::yield_now();
            }
            if chaos.sleep_at == Some(word) {
                std::thread::sleep(Duration::from_micros(200));
            }
            let mut bytes = [0u8; 8];
            // SAFETY: the block is inside the SQ ring.
            unsafe { core::ptr::copy_nonoverlapping(src.add(i * 8), bytes.as_mut_ptr(), 8) };
            if let Some(c) = corrupt.filter(|c| c / 8 == word) {
                bytes[c % 8] ^= 0x5a;
            }
            // SAFETY: `reg` is the current half of the QP's BlueFlame register, which holds
            // `bbs` (≤ 4) blocks; `bytes` is 8 readable bytes.
            unsafe { mmio::ring_db64(reg.add(word * 8), bytes.as_ptr()) };
        }
    }
    mmio::flush_writes();
    qp.bf_off ^= qp.info.layout.bf.size as usize;
}

/// The 8-byte doorbell for the WQE at `pi` (the record already written).
fn ring_db8(qp: &mut Qp, pi: u16) {
    let reg = qp.info.layout.bf.reg.wrapping_add(qp.bf_off);
    // SAFETY: the current half of the QP's register and the ctrl segment of WQE `pi`.
    unsafe {
        mmio::wc_start();
        mmio::ring_db64(reg, qp.bb_ptr(pi));
        mmio::flush_writes();
    }
    qp.bf_off ^= qp.info.layout.bf.size as usize;
}

/// A posted WQE awaiting its completion.
struct Posted {
    index: u16,
    slot: usize,
    data: Vec<u8>,
}

/// Poll one completion (waiting at most 10 s) and check it and its data.
fn reap(p: &mut Pair, remote: &Mem, pending: &mut VecDeque<Posted>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        if let Some(c) = p.a.scq.poll() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "stalled: no completion for WQE {} ({} pending); driver bugs {:#?}",
            pending.front().map_or(0, |x| x.index),
            pending.len(),
            p.fabric.driver_bugs()
        );
        std::thread::yield_now();
    };
    let want = pending
        .pop_front()
        .expect("a completion for nothing posted");
    assert_eq!(
        (c.opcode(), c.wqe_counter()),
        (CQE_REQ, want.index),
        "syndrome {:#x}: the WQE did not run from the ring as written",
        c.as_err().syndrome
    );
    assert_eq!(
        remote.read(want.slot * SLOT, want.data.len()),
        want.data,
        "WQE {} wrote the wrong bytes",
        want.index
    );
}

fn bf_pair() -> Pair {
    let mut o = Opts::new(QpType::Rc);
    o.mode = Ring::Bf;
    o.cap.max_inline_data = 160;
    Pair::new(o)
}

#[test]
fn racing_blueflame_copies_and_doorbells_never_stall_or_misexecute() {
    const WQES: u64 = 30_000;
    let mut p = bf_pair();
    let remote = p.mem(true, SLOTS * SLOT);
    let (ra, rk) = (remote.addr(), remote.rkey());
    let wqe_cnt = p.a.qp.info.layout.sq.wqe_cnt as usize;
    // Keep the SQ at most half full (in basic blocks), so posting never waits on a full ring.
    let max_bbs = wqe_cnt / 2;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut pending: VecDeque<Posted> = VecDeque::new();
    let mut in_sq = VecDeque::<u16>::new();
    let started = Instant::now();
    let t = p.fabric.start_thread();
    let mut k = 0u64;
    let (mut singles, mut stretched, mut batches) = (0u32, 0u32, 0u32);
    while k < WQES {
        // Phases of 1000 WQEs: streaming (the driver outruns the device and halves are
        // overwritten between scans) and lock-step like a latency run (each post waits for
        // its completion, so the device watches every copy, stretched ones mid-way).
        if (k / 1000) % 2 == 1 {
            while !pending.is_empty() {
                reap(&mut p, &remote, &mut pending);
                in_sq.pop_front();
            }
        }
        let batch = if rng.below(4) == 0 {
            2 + rng.below(4) as usize
        } else {
            1
        };
        // One WQE: 8 bytes (one block) mostly, 100 bytes (three blocks) sometimes.
        let lens: Vec<usize> = (0..batch)
            .map(|_| if rng.below(4) == 0 { 100 } else { 8 })
            .collect();
        let need: usize = lens.iter().map(|&l| if l > 8 { 3 } else { 1 }).sum();
        while in_sq.iter().map(|&b| b as usize).sum::<usize>() + need > max_bbs {
            reap(&mut p, &remote, &mut pending);
            in_sq.pop_front();
        }
        let mut last = (0u16, 0u16);
        for &len in &lens {
            let slot = (k as usize) % SLOTS;
            let data = payload(k, len);
            last = write_wqe(&mut p.a.qp, ra + (slot * SLOT) as u64, rk, &data);
            pending.push_back(Posted {
                index: last.0,
                slot,
                data,
            });
            in_sq.push_back(last.1);
            k += 1;
        }
        p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
        if batch > 1 {
            // rdma-core `post_send_db`: one 8-byte doorbell with the last WQE's ctrl.
            ring_db8(&mut p.a.qp, last.0);
            batches += 1;
            continue;
        }
        singles += 1;
        let words = last.1 as usize * 8;
        let mut chaos = Chaos::default();
        if rng.below(6) == 0 {
            stretched += 1;
            for _ in 0..1 + rng.below(3) {
                chaos.yields |= 1 << (1 + rng.below(words as u64 - 1));
            }
            if rng.below(40) == 0 {
                chaos.sleep_at = Some(1 + rng.below(words as u64 - 1) as usize);
            }
        }
        if last.1 == 1 && chaos.yields == 0 && rng.below(2) == 0 {
            // The qp crate's one-block copy: four 16-byte stores.
            let reg = p.a.qp.info.layout.bf.reg.wrapping_add(p.a.qp.bf_off);
            // SAFETY: the current half of the register and a block of the ring, both
            // 16-byte aligned.
            unsafe {
                mmio::wc_start();
                mmio::bf_copy_bb(reg, p.a.qp.bb_ptr(last.0));
                mmio::flush_writes();
            }
            p.a.qp.bf_off ^= p.a.qp.info.layout.bf.size as usize;
        } else {
            bf_copy_by_words(&mut p.a.qp, last.0, last.1, chaos, None);
        }
    }
    while !pending.is_empty() {
        reap(&mut p, &remote, &mut pending);
    }
    let elapsed = started.elapsed();
    let stats = p.a.dev.doorbell_stats();
    drop(t);
    eprintln!(
        "{WQES} WQEs in {elapsed:?}: {singles} BlueFlame ({stretched} stretched), {batches} \
         batches; device: {stats:?}"
    );
    p.assert_no_bugs();
    assert!(
        stats.bf_verified_late > 0,
        "the device never caught a copy in the middle (the race was not exercised): {stats:?}"
    );
    // Back in deterministic mode the halves are as it expects them: posts are clean.
    for j in 0..4u64 {
        let idx = p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&RaddrSeg::new(ra + j * 8, rk)).unwrap();
            w.push_inline(&[&j.to_le_bytes()]).unwrap();
        });
        p.run();
        let c = p.a.scq.poll().expect("deterministic completion");
        assert_eq!((c.opcode(), c.wqe_counter()), (CQE_REQ, idx));
    }
    p.assert_no_bugs();
}

/// Wait (at most 5 s) until the fabric reports a driver bug; all of them.
fn wait_for_bugs(p: &Pair) -> Vec<mlx5_sim::DriverBug> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let b = p.fabric.take_driver_bugs();
        if !b.is_empty() || Instant::now() > deadline {
            return b;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Post one WQE with a hand-made copy, wait for its completion; returns its index.
fn post_copy(
    p: &mut Pair,
    remote: &Mem,
    slot: usize,
    data: &[u8],
    copy_bbs: Option<u16>,
    corrupt: Option<usize>,
) -> u16 {
    let (ra, rk) = (remote.addr(), remote.rkey());
    let (pi, bbs) = write_wqe(&mut p.a.qp, ra + (slot * SLOT) as u64, rk, data);
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    bf_copy_by_words(
        &mut p.a.qp,
        pi,
        copy_bbs.unwrap_or(bbs),
        Chaos::default(),
        corrupt,
    );
    let mut pending = VecDeque::from([Posted {
        index: pi,
        slot,
        data: data.to_vec(),
    }]);
    reap(p, remote, &mut pending);
    pi
}

/// A correct post rung with the 8-byte doorbell, to the other half (it settles the write
/// before it).
fn post_db8(p: &mut Pair, remote: &Mem, slot: usize) {
    let data = payload(slot as u64, 8);
    let (ra, rk) = (remote.addr(), remote.rkey());
    let (pi, _) = write_wqe(&mut p.a.qp, ra + (slot * SLOT) as u64, rk, &data);
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    ring_db8(&mut p.a.qp, pi);
    let mut pending = VecDeque::from([Posted {
        index: pi,
        slot,
        data,
    }]);
    reap(p, remote, &mut pending);
}

#[test]
fn a_wrong_copy_is_reported_once_settled_and_the_ring_executes() {
    let mut p = bf_pair();
    let remote = p.mem(true, SLOTS * SLOT);
    let t = p.fabric.start_thread();
    // A good copy is verified.
    post_copy(&mut p, &remote, 0, b"verified", None, None);
    post_db8(&mut p, &remote, 1);
    std::thread::sleep(Duration::from_millis(5));
    assert!(p.a.dev.doorbell_stats().bf_verified >= 1);
    // Byte 40 is in the inline payload (ctrl 16 + raddr 16 + inline header 4 = 36): the copy
    // says something else than the ring, and the completion shows the ring's bytes ran.
    let idx = post_copy(&mut p, &remote, 2, b"RINGRING", None, Some(40));
    std::thread::sleep(Duration::from_millis(5));
    post_db8(&mut p, &remote, 3);
    let bugs = wait_for_bugs(&p);
    assert_eq!(bugs.len(), 1, "{bugs:#?}");
    assert_eq!(bugs[0].kind, DriverBugKind::BlueFlameMismatch);
    assert!(
        bugs[0].detail.contains(&format!("WQE {idx} ")) && bugs[0].detail.contains("byte 40"),
        "{}",
        bugs[0].detail
    );
    // A copy one block short of a two-block WQE.
    std::thread::sleep(Duration::from_millis(5));
    post_copy(&mut p, &remote, 4, &[7u8; 40], Some(1), None);
    std::thread::sleep(Duration::from_millis(5));
    post_db8(&mut p, &remote, 5);
    let bugs = wait_for_bugs(&p);
    assert_eq!(
        bugs.iter().map(|b| b.kind).collect::<Vec<_>>(),
        vec![DriverBugKind::BlueFlameSize],
        "{bugs:#?}"
    );
    // With no doorbell after it, a wrong copy is judged at the deadline.
    std::thread::sleep(Duration::from_millis(5));
    post_copy(&mut p, &remote, 6, b"deadline", None, Some(44));
    let bugs = wait_for_bugs(&p);
    assert_eq!(
        bugs.iter().map(|b| b.kind).collect::<Vec<_>>(),
        vec![DriverBugKind::BlueFlameMismatch],
        "{bugs:#?}"
    );
    assert!(bugs[0].detail.contains("ms after"), "{}", bugs[0].detail);
    drop(t);
}

#[test]
fn the_record_drives_execution_and_junk_is_cleaned_silently() {
    let mut p = bf_pair();
    let remote = p.mem(true, SLOTS * SLOT);
    let (ra, rk) = (remote.addr(), remote.rkey());
    let t = p.fabric.start_thread();
    // A doorbell record alone: threaded mode runs the ring up to it (a doorbell the device
    // missed can never stall a QP).
    let data = payload(9, 8);
    let (pi, _) = write_wqe(&mut p.a.qp, ra, rk, &data);
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    let mut pending = VecDeque::from([Posted {
        index: pi,
        slot: 0,
        data,
    }]);
    reap(&mut p, &remote, &mut pending);
    // Junk in both halves behind an unchanged first word (what a copy that went on after
    // being judged leaves): cleaned without a report, and later posts are judged cleanly.
    std::thread::sleep(Duration::from_millis(2));
    for half in 0..2 {
        let reg = p.a.qp.info.layout.bf.reg.wrapping_add(half * 256);
        for w in 1..32 {
            // SAFETY: inside the QP's BlueFlame register.
            unsafe {
                core::ptr::write_volatile(reg.add(w * 8) as *mut u64, 0x1234_5678 * w as u64)
            };
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    for k in 0..200u64 {
        let slot = 1 + k as usize % 64;
        if k % 3 == 0 {
            post_db8(&mut p, &remote, slot);
        } else {
            post_copy(
                &mut p,
                &remote,
                slot,
                &payload(k, 8 + k as usize % 90),
                None,
                None,
            );
        }
    }
    drop(t);
    p.assert_no_bugs();
    assert!(p.a.dev.doorbell_stats().bf_verified > 0);
}
