//! Work detection: the device learns of send work only from doorbell / BlueFlame writes, checks
//! them against the ring and the doorbell record, and executes the BlueFlame copy.

use crate::common;

use common::*;
use mlx5_hw::QpType;
use mlx5_sim::DriverBugKind;
use mlx5_wqe::*;

fn write_inline(qp: &mut Qp, ra: u64, rkey: u32, payload: &[u8]) -> (u16, u32) {
    qp.prepare(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        w.push_inline(&[payload]).unwrap();
    })
}

fn kinds(p: &Pair) -> Vec<DriverBugKind> {
    p.fabric
        .take_driver_bugs()
        .into_iter()
        .map(|b| b.kind)
        .collect()
}

#[test]
fn nothing_happens_without_a_doorbell() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    let (pi, ds) = write_inline(&mut p.a.qp, remote.addr(), remote.rkey(), b"data");
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    p.run();
    assert_eq!(
        remote.read(0, 4),
        [0; 4],
        "a doorbell record alone is not a doorbell"
    );
    assert!(p.a.scq.poll().is_none());
    p.a.qp.doorbell(pi, ds);
    p.run();
    assert_eq!(remote.read(0, 4), b"data");
    assert_eq!(p.a.scq.poll().unwrap().wqe_counter(), pi);
    p.assert_no_bugs();
}

#[test]
fn blueflame_executes_the_register_copy_and_reports_a_mismatch() {
    let mut o = Opts::new(QpType::Rc);
    o.mode = Ring::Bf;
    let mut p = Pair::new(o);
    let remote = p.mem(true, 64);
    // A clean BlueFlame post first: no bug.
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(remote.addr(), remote.rkey()))
            .unwrap();
        w.push_inline(&[b"first"]).unwrap();
    });
    p.run();
    assert_eq!(remote.read(0, 5), b"first");
    p.assert_no_bugs();
    // Copy says "COPY", then the ring is changed to "RING" before the device looks.
    let (pi, ds) = write_inline(&mut p.a.qp, remote.addr() + 8, remote.rkey(), b"COPY");
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    p.a.qp.bf_copy(pi, ds.div_ceil(4) as usize);
    // Payload starts at ctrl 16 + raddr 16 + inline header 4 = byte 36 of the WQE.
    let ring = p.a.qp.bb_ptr(pi);
    for (i, b) in b"RING".iter().enumerate() {
        // SAFETY: inside the SQ ring.
        unsafe { *ring.add(36 + i) = *b };
    }
    p.run();
    assert_eq!(
        remote.read(8, 4),
        b"COPY",
        "the NIC executes the BlueFlame copy"
    );
    assert_eq!(kinds(&p), vec![DriverBugKind::BlueFlameMismatch]);
    assert_eq!(p.a.scq.drain().len(), 2);
}

#[test]
fn doorbell_checks_index_qpn_and_record() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    let (ra, rk) = (remote.addr(), remote.rkey());
    // 1. The record is not advanced: nothing executes, DbrNotAdvanced.
    let (pi, _) = write_inline(&mut p.a.qp, ra, rk, b"one");
    let mut ctrl = [0u8; 8];
    // SAFETY: the ctrl segment of the WQE.
    unsafe { core::ptr::copy_nonoverlapping(p.a.qp.bb_ptr(pi), ctrl.as_mut_ptr(), 8) };
    p.a.qp.ring_raw(ctrl);
    p.run();
    assert_eq!(kinds(&p), vec![DriverBugKind::DbrNotAdvanced]);
    assert_eq!(remote.read(0, 3), [0; 3]);
    // 2. Record advanced, doorbell names a wrong index: reported, work still done (up to the
    //    record).
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    let mut bad = ctrl;
    bad[2] ^= 0x40;
    p.a.qp.ring_raw(bad);
    p.run();
    assert_eq!(kinds(&p), vec![DriverBugKind::DoorbellIndexMismatch]);
    assert_eq!(remote.read(0, 3), b"one");
    // 3. A doorbell with nothing new.
    p.a.qp.ring_raw(ctrl);
    p.run();
    assert_eq!(kinds(&p), vec![DriverBugKind::DoorbellNothingNew]);
    // 4. Another QP's number in the doorbell.
    let (pi, _) = write_inline(&mut p.a.qp, ra + 8, rk, b"two");
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    let mut c = [0u8; 8];
    // SAFETY: ctrl of the new WQE.
    unsafe { core::ptr::copy_nonoverlapping(p.a.qp.bb_ptr(pi), c.as_mut_ptr(), 8) };
    c[6] ^= 1;
    p.a.qp.ring_raw(c);
    p.run();
    let k = kinds(&p);
    assert!(k.contains(&DriverBugKind::DoorbellQpnMismatch), "{k:?}");
    // 5. A garbage record far ahead of the device.
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi.wrapping_add(5000));
    p.a.qp.ring_raw(c);
    p.run();
    assert!(kinds(&p).contains(&DriverBugKind::DbrOverflow));
}

#[test]
fn blueflame_same_half_twice_is_reported() {
    let mut o = Opts::new(QpType::Rc);
    o.mode = Ring::Bf;
    let mut p = Pair::new(o);
    let remote = p.mem(true, 64);
    for k in 0..2u64 {
        let (pi, ds) = write_inline(&mut p.a.qp, remote.addr() + k * 8, remote.rkey(), b"xy");
        p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
        p.a.qp.bf_copy(pi, ds.div_ceil(4) as usize);
        p.a.qp.bf_off = 0; // a driver that forgets to toggle
        p.run();
    }
    assert_eq!(kinds(&p), vec![DriverBugKind::BlueFlameHalfNotToggled]);
    assert_eq!(remote.read(8, 2), b"xy");
}

#[test]
fn one_doorbell_for_a_batch_names_the_last_wqe() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    let mut last = (0, 0);
    for k in 0..3u64 {
        last = write_inline(&mut p.a.qp, remote.addr() + k * 8, remote.rkey(), b"batch");
    }
    p.a.qp.write_sq_dbr(p.a.qp.sq_pi);
    // rdma-core `post_send_db`: one doorbell with the ctrl of the last WQE of the batch.
    p.a.qp.doorbell(last.0, last.1);
    p.run();
    for k in 0..3 {
        assert_eq!(remote.read(k * 8, 5), b"batch");
    }
    assert_eq!(p.a.scq.drain().len(), 3);
    p.assert_no_bugs();
}
