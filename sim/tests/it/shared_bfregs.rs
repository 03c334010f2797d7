//! BlueFlame registers shared between QPs (`sim/src/doorbell/shared.rs`): which QPs get a
//! dedicated register and which share one, and the driver bug two unserialised copies into
//! one register are (Mellanox libxlio issue #123), made deterministically store by store.

use crate::common;

use common::*;
use mlx5_cq::CQE_REQ;
use mlx5_hw::{mmio, Device, Mtu, QpType};
use mlx5_sim::{DeviceConfig, DriverBugKind, Fabric};
use mlx5_wqe::*;

/// Two devices; A has `dedicated` dedicated and `shared` shared registers; `n` QPs on A, each
/// connected to one of `n` on B.
struct Many {
    fabric: Fabric,
    a: Vec<Side>,
    b: Vec<Side>,
    opts: Opts,
}

fn many(dedicated: u32, shared: u32, n: usize) -> Many {
    let fabric = Fabric::new();
    let cfg = |ip| DeviceConfig::new(ip).mtu(Mtu::Mtu4096);
    let da = fabric.add_device(cfg([10, 0, 0, 1]).bfregs(dedicated, shared));
    let db = fabric.add_device(cfg([10, 0, 0, 2]));
    let o = Opts::new(QpType::Rc);
    let pa = da.alloc_pd().unwrap();
    let pb = db.alloc_pd().unwrap();
    let a: Vec<Side> = (0..n).map(|_| side_in(&da, pa, &o, None)).collect();
    let b: Vec<Side> = (0..n).map(|_| side_in(&db, pb, &o, None)).collect();
    for (x, y) in a.iter().zip(&b) {
        modify(x, init_attr(&o));
        modify(y, init_attr(&o));
        modify(x, rtr_attr(&o, y.qp.qpn(), y.dev.gid(), 100));
        modify(y, rtr_attr(&o, x.qp.qpn(), x.dev.gid(), 200));
        modify(x, rts_attr(&o, 200));
        modify(y, rts_attr(&o, 100));
    }
    Many {
        fabric,
        a,
        b,
        opts: o,
    }
}

#[test]
fn qps_after_the_dedicated_registers_share_the_fewest_used_one() {
    let m = many(4, 11, 20);
    let shared: Vec<bool> = m.a.iter().map(|s| s.qp.info.layout.bf.shared).collect();
    assert_eq!(shared.iter().filter(|&&s| !s).count(), 4);
    assert!(shared[..4].iter().all(|&s| !s) && shared[4..].iter().all(|&s| s));
    // 16 QPs over 11 registers, each new one on the earliest with the fewest QPs (kernel
    // `alloc_med_class_bfreg`): registers 0..5 get two, the rest one.
    let regs = m.a[0].dev.shared_bfregs();
    let counts: Vec<usize> = regs.iter().map(Vec::len).collect();
    assert_eq!(counts, [2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1]);
    assert_eq!(regs[0], [m.a[4].qp.qpn(), m.a[15].qp.qpn()]);
    let l = |i: usize| m.a[i].qp.info.layout.bf;
    assert_eq!(l(4).reg, l(15).reg, "one register, two QPs");
    // bfregs 0 and 1 of one UAR page: 0x800 and 0x800 + bf_reg_size (512).
    assert_eq!(l(5).reg as usize - l(4).reg as usize, 0x200);
    assert_eq!(l(4).reg as usize % 4096, 0x800);
    assert!((0..20).all(|i| l(i).size == 256));
    m.fabric.run_until_idle();
    assert!(m.fabric.driver_bugs().is_empty());
    drop(m.b);
}

#[test]
fn a_destroyed_qp_frees_its_dedicated_register_and_zero_shared_means_bfreg_0() {
    let f = Fabric::new();
    let d = f.add_device(DeviceConfig::new([10, 0, 0, 1]).bfregs(1, 0));
    let o = Opts::new(QpType::Rc);
    let pd = d.alloc_pd().unwrap();
    let x = side_in(&d, pd, &o, None);
    let y = side_in(&d, pd, &o, None);
    assert!(!x.qp.info.layout.bf.shared);
    // No medium registers: bfreg 0, shared and without BlueFlame (kernel `alloc_bfreg`).
    assert!(y.qp.info.layout.bf.shared);
    assert_eq!(y.qp.info.layout.bf.size, 0);
    d.destroy_qp(x.qp.info.id).unwrap();
    let z = side_in(&d, pd, &o, None);
    assert!(
        !z.qp.info.layout.bf.shared,
        "the dedicated register is free again"
    );
}

/// Write an inline WRITE of `data` to `ra` into the ring and advance the SQ record (nothing
/// rung). Returns the WQE index.
fn stage(qp: &mut Qp, ra: u64, rkey: u32, data: &[u8]) -> u16 {
    let (pi, _) = qp.prepare(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push_inline(&[data]).unwrap();
    });
    qp.write_sq_dbr(qp.sq_pi);
    pi
}

/// Store words `words` of the first block of WQE `pi` into the QP's current half, one 8-byte
/// store each (no toggle).
fn store(qp: &Qp, pi: u16, words: std::ops::Range<usize>) {
    let reg = qp.info.layout.bf.reg.wrapping_add(qp.bf_off);
    let src = qp.bb_ptr(pi);
    for i in words {
        // SAFETY: the QP's register half (256 bytes) and the WQE's first block in its ring.
        unsafe { mmio::ring_db64(reg.add(i * 8), src.add(i * 8)) };
    }
}

fn toggle(qp: &mut Qp) {
    qp.bf_off ^= qp.info.layout.bf.size as usize;
}

/// Both WQEs ran from the ring: one good completion each, and the data arrived.
fn both_ran(m: &mut Many, remote: &Mem, want: &[(u16, &[u8])]) {
    m.fabric.run_until_idle();
    for (k, (index, data)) in want.iter().enumerate() {
        let c = m.a[k].scq.poll().expect("a completion");
        assert_eq!((c.opcode(), c.wqe_counter()), (CQE_REQ, *index));
        assert_eq!(remote.read(k * 64, data.len()), *data);
    }
}

fn remote(m: &Many) -> Mem {
    Mem::new(&m.b[0].dev, m.b[0].pd, 4096, m.opts.access)
}

#[test]
fn two_copies_mixed_in_one_shared_register_are_a_driver_bug() {
    let mut m = many(0, 1, 2);
    assert_eq!(
        m.a[0].qp.info.layout.bf.reg, m.a[1].qp.info.layout.bf.reg,
        "one register"
    );
    let r = remote(&m);
    let (dx, dy) = (*b"XXXXxxxx", *b"YYYYyyyy");
    let x = stage(&mut m.a[0].qp, r.addr(), r.rkey(), &dx);
    let y = stage(&mut m.a[1].qp, r.addr() + 64, r.rkey(), &dy);
    // Thread Y starts its copy, thread X copies whole, thread Y finishes: no lock.
    store(&m.a[1].qp, y, 0..4);
    store(&m.a[0].qp, x, 0..8);
    store(&m.a[1].qp, y, 4..8);
    mmio::flush_writes();
    toggle(&mut m.a[0].qp);
    toggle(&mut m.a[1].qp);
    both_ran(&mut m, &r, &[(x, &dx), (y, &dy)]);
    let bugs = m.fabric.take_driver_bugs();
    assert_eq!(
        bugs.iter().map(|b| b.kind).collect::<Vec<_>>(),
        [DriverBugKind::BlueFlameInterleaved],
        "{bugs:#?}"
    );
    assert_eq!(bugs[0].object, m.a[0].qp.qpn(), "{}", bugs[0]);
    assert!(
        bugs[0].detail.contains(&format!("{:#x}", m.a[1].qp.qpn())),
        "{}",
        bugs[0]
    );
}

#[test]
fn serialised_writes_into_a_shared_register_are_no_bug() {
    let mut m = many(0, 1, 2);
    let r = remote(&m);
    let (dx, dy) = (*b"XXXXxxxx", *b"YYYYyyyy");
    // X copies whole (under the lock), then Y rings the same half with an 8-byte doorbell,
    // all before the device looks: only Y's first word is left over X's lines.
    let x = stage(&mut m.a[0].qp, r.addr(), r.rkey(), &dx);
    let y = stage(&mut m.a[1].qp, r.addr() + 64, r.rkey(), &dy);
    store(&m.a[0].qp, x, 0..8);
    store(&m.a[1].qp, y, 0..1);
    mmio::flush_writes();
    toggle(&mut m.a[0].qp);
    toggle(&mut m.a[1].qp);
    both_ran(&mut m, &r, &[(x, &dx), (y, &dy)]);
    assert!(
        m.fabric.driver_bugs().is_empty(),
        "{:#?}",
        m.fabric.driver_bugs()
    );
    // 8-byte doorbells only, many rounds: every WQE runs once.
    for k in 0..50u64 {
        let d = k.to_le_bytes();
        let x = stage(&mut m.a[0].qp, r.addr(), r.rkey(), &d);
        let y = stage(&mut m.a[1].qp, r.addr() + 64, r.rkey(), &d);
        store(&m.a[1].qp, y, 0..1);
        toggle(&mut m.a[1].qp);
        store(&m.a[0].qp, x, 0..1);
        toggle(&mut m.a[0].qp);
        both_ran(&mut m, &r, &[(x, &d), (y, &d)]);
    }
    assert!(
        m.fabric.driver_bugs().is_empty(),
        "{:#?}",
        m.fabric.driver_bugs()
    );
}

#[test]
fn a_record_without_any_write_on_the_shared_register_does_nothing() {
    let mut m = many(0, 1, 2);
    let r = remote(&m);
    let x = stage(&mut m.a[0].qp, r.addr(), r.rkey(), b"12345678");
    m.fabric.run_until_idle();
    assert!(m.a[0].scq.poll().is_none(), "no doorbell, no work");
    store(&m.a[0].qp, x, 0..1);
    toggle(&mut m.a[0].qp);
    both_ran(&mut m, &r, &[(x, b"12345678")]);
    assert!(m.fabric.driver_bugs().is_empty());
}

#[test]
fn a_doorbell_of_a_qp_destroyed_before_the_device_looked_is_no_bug() {
    let mut m = many(0, 1, 3);
    let r = remote(&m);
    let x = stage(&mut m.a[0].qp, r.addr(), r.rkey(), b"12345678");
    store(&m.a[0].qp, x, 0..1);
    let y = stage(&mut m.a[1].qp, r.addr() + 64, r.rkey(), b"abcdefgh");
    toggle(&mut m.a[1].qp);
    store(&m.a[1].qp, y, 0..1);
    let dev = m.a[0].dev.clone();
    dev.destroy_qp(m.a[0].qp.info.id).unwrap();
    m.fabric.run_until_idle();
    let c = m.a[1].scq.poll().expect("Y's doorbell still counts");
    assert_eq!(c.wqe_counter(), y);
    assert!(
        m.fabric.driver_bugs().is_empty(),
        "{:#?}",
        m.fabric.driver_bugs()
    );
    // The last QP leaves the register clean for the next one.
    dev.destroy_qp(m.a[1].qp.info.id).unwrap();
    dev.destroy_qp(m.a[2].qp.info.id).unwrap();
    let o = Opts::new(QpType::Rc);
    let z = side_in(&dev, m.a[0].pd, &o, None);
    assert_eq!(z.qp.info.layout.bf.reg, m.a[1].qp.info.layout.bf.reg);
    m.fabric.run_until_idle();
    assert!(
        m.fabric.driver_bugs().is_empty(),
        "{:#?}",
        m.fabric.driver_bugs()
    );
}

#[test]
fn a_foreign_qpn_on_a_shared_register_is_reported() {
    let mut m = many(0, 1, 2);
    let r = remote(&m);
    let x = stage(&mut m.a[0].qp, r.addr(), r.rkey(), b"12345678");
    let mut w = [0u8; 8];
    // SAFETY: the first 8 bytes of WQE x's ctrl segment.
    unsafe { core::ptr::copy_nonoverlapping(m.a[0].qp.bb_ptr(x), w.as_mut_ptr(), 8) };
    w[4..7].copy_from_slice(&[0xab, 0xcd, 0xef]);
    m.a[0].qp.ring_raw(w);
    m.fabric.run_until_idle();
    let bugs = m.fabric.take_driver_bugs();
    assert_eq!(
        bugs.iter().map(|b| b.kind).collect::<Vec<_>>(),
        [DriverBugKind::DoorbellQpnMismatch],
        "{bugs:#?}"
    );
}

/// Wait (at most 10 s, a hang guard) for the next completion on `s`'s send CQ.
fn next_cqe(s: &mut Side, fabric: &Fabric) -> mlx5_cq::Cqe64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(c) = s.scq.poll() {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stalled; driver bugs {:#?}",
            fabric.driver_bugs()
        );
        std::thread::yield_now();
    }
}

#[test]
fn threads_writing_one_shared_register_under_its_lock_are_no_bug() {
    const N: usize = 1500;
    let m = many(0, 1, 2);
    let r = Mem::new(&m.b[0].dev, m.b[0].pd, 2 * N * 8, m.opts.access);
    let thread = m.fabric.start_thread();
    // rdma-core's per-register lock (`need_lock`): copies and doorbells never overlap.
    let lock = std::sync::Mutex::new(());
    let Many { fabric, a, b, .. } = m;
    std::thread::scope(|s| {
        for (t, mut side) in a.into_iter().enumerate() {
            let (lock, r, fabric) = (&lock, &r, &fabric);
            s.spawn(move || {
                for k in 0..N {
                    let slot = t * N + k;
                    let data = (slot as u64 * 0x9e37_79b9 + 1).to_le_bytes();
                    let qp = &mut side.qp;
                    let pi = stage(qp, r.addr() + slot as u64 * 8, r.rkey(), &data);
                    {
                        let _held = lock.lock().unwrap();
                        if t == 0 {
                            qp.bf_copy(pi, 1);
                        } else {
                            store(qp, pi, 0..1);
                            mmio::flush_writes();
                            toggle(qp);
                        }
                    }
                    let c = next_cqe(&mut side, fabric);
                    assert_eq!((c.opcode(), c.wqe_counter()), (CQE_REQ, pi));
                    assert_eq!(r.read(slot * 8, 8), data, "thread {t} WQE {k}");
                }
            });
        }
    });
    drop(thread);
    assert!(
        fabric.driver_bugs().is_empty(),
        "{:#?}",
        fabric.driver_bugs()
    );
    drop(b);
}
