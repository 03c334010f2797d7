//! Shared receive resources on the software ConnectX: an SRQ shared by several RC QPs, and
//! one CQ per device serving many QPs, all of them through a `QpTable`.

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{CqInitAttr, Device, QpInitAttr, QpState, QpType, SrqInitAttr};
use mlx5_qp::{Cq, Qp, QpTable, SendWr, Srq, Wc, WcOpcode, WcStatus};
use std::collections::HashSet;

#[test]
fn srq_shared_by_several_qps() {
    let (f, da, db) = fabric2();
    let o = Opts::default();
    let pa = da.alloc_pd().unwrap();
    let pb = db.alloc_pd().unwrap();
    let cqa = da
        .create_cq(&CqInitAttr {
            cqe: 512,
            ..CqInitAttr::default()
        })
        .unwrap();
    let cqb = db
        .create_cq(&CqInitAttr {
            cqe: 512,
            ..CqInitAttr::default()
        })
        .unwrap();
    let srq_info = db
        .create_srq(
            pb,
            &SrqInitAttr {
                max_wr: 64,
                max_sge: 2,
                srq_limit: 0,
            },
        )
        .unwrap();
    // SAFETY: the CQs, SRQ and QPs are never destroyed while the test runs.
    let mut cq_a = unsafe { Cq::from_layout(&cqa.layout) }.unwrap();
    // SAFETY: as above: CQ `cqb` stays alive for the whole test and only `cq_b` consumes it.
    let mut cq_b = unsafe { Cq::from_layout(&cqb.layout) }.unwrap();
    // SAFETY: as above: the SRQ stays alive for the whole test and only `srq` posts to it.
    let srq = unsafe { Srq::from_layout(&srq_info.layout) }.unwrap();
    let srqn = srq_info.layout.srqn;
    let mut ta = QpTable::new();
    let mut tb = QpTable::new();
    let srq_pos = tb.insert_srq(srq);
    let buf_a = Buf::new(&da, pa, 1 << 16, all_access());
    let buf_b = Buf::new(&db, pb, 1 << 16, all_access());
    let nq = 4;
    let mut qpns = Vec::new();
    for _ in 0..nq {
        let ia = da
            .create_qp(
                pa,
                &QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: cqa.id,
                    recv_cq: cqa.id,
                    srq: None,
                    cap: o.cap,
                    sq_sig_all: false,
                },
            )
            .unwrap();
        let ib = db
            .create_qp(
                pb,
                &QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: cqb.id,
                    recv_cq: cqb.id,
                    srq: Some(srq_info.id),
                    cap: o.cap,
                    sq_sig_all: false,
                },
            )
            .unwrap();
        // SAFETY: as above.
        let qa = unsafe { Qp::from_layout(&ia.layout, None) }.unwrap();
        // SAFETY: as above: QP `ib` stays alive for the whole test, `qb` alone posts to it, and
        // it receives through the SRQ `srqn`, which `tb` holds.
        let qb = unsafe { Qp::from_layout(&ib.layout, Some(srqn)) }.unwrap();
        let mut sa = Side {
            dev: da.clone(),
            pd: pa,
            cq: make_cq(&da, 4, 64),
            cq_id: cqa.id,
            channel: None,
            info: ia,
            qp: qa,
            buf: Buf::new(&da, pa, 64, all_access()),
        };
        let mut sb = Side {
            dev: db.clone(),
            pd: pb,
            cq: make_cq(&db, 4, 64),
            cq_id: cqb.id,
            channel: None,
            info: ib,
            qp: qb,
            buf: Buf::new(&db, pb, 64, all_access()),
        };
        connect(&mut sa, &db, ib.qpn);
        connect(&mut sb, &da, ia.qpn);
        assert_eq!(sb.qp.state(), QpState::Rts);
        qpns.push((ia.qpn, ib.qpn));
        ta.insert_qp(sa.qp);
        tb.insert_qp(sb.qp);
    }
    // 60 receives of 128 bytes each on the SRQ.
    let srq = tb.srq_at(srq_pos).unwrap();
    for i in 0..60u64 {
        srq.post_recv(1000 + i, &[buf_b.sge(i as usize * 128, 128)])
            .unwrap();
    }
    // Each A-side QP sends 15 messages, interleaved; messages carry (qp, seq).
    for seq in 0..15u8 {
        for (k, qa) in ta.qps_mut().iter_mut().enumerate() {
            let msg = [k as u8, seq, 0xee, 0xee];
            qa.post(&SendWr::send(u64::from(seq)).inline(&msg).signaled())
                .unwrap();
        }
    }
    f.run_until_idle();
    let mut wcs = vec![Wc::default(); 128];
    let n = cq_a.poll(&mut ta, &mut wcs).unwrap();
    assert_eq!(n, 60);
    assert!(wcs[..n]
        .iter()
        .all(|w| w.status() == WcStatus::Success && w.opcode() == WcOpcode::Send));
    let n = cq_b.poll(&mut tb, &mut wcs).unwrap();
    assert_eq!(n, 60);
    let mut ids = HashSet::new();
    let mut per_qp = vec![Vec::new(); nq];
    for w in &wcs[..n] {
        assert_eq!(
            (w.status(), w.opcode(), w.byte_len()),
            (WcStatus::Success, WcOpcode::Recv, 4)
        );
        assert!(ids.insert(w.wr_id()), "wr_id {} twice", w.wr_id());
        let slot = (w.wr_id() - 1000) as usize;
        let got = &buf_b.bytes()[slot * 128..slot * 128 + 4];
        let k = got[0] as usize;
        assert_eq!(
            qpns[k].1,
            w.qp_num(),
            "message landed in a WQE completed on its own QP"
        );
        assert_eq!(w.src_qp(), qpns[k].0);
        per_qp[k].push(got[1]);
    }
    for (k, seqs) in per_qp.iter().enumerate() {
        assert_eq!(seqs, &(0..15).collect::<Vec<u8>>(), "QP {k} in order");
    }
    let srq = tb.srq_at(srq_pos).unwrap();
    assert_eq!(srq.outstanding(), 0);
    // Freed WQEs are reusable: the list cycles.
    for i in 0..srq.capacity() as u64 {
        srq.post_recv(5000 + i, &[buf_b.sge(0, 128)]).unwrap();
    }
    assert!(srq.post_recv(1, &[]).is_err());
    let _ = buf_a;
    no_driver_bugs(&f);
}

/// One CQ per device shared by six RC QPs with receive queues of their own, their work
/// interleaved — per QP, in turn, a SEND (consuming a receive at the peer), a signaled WRITE
/// and every other round an unsignaled one — polled through a `QpTable` with room for 1, 3
/// and 16 completions a call: each QP's send completions in posting order (the unsignaled
/// WRITEs retired silently by the next signaled CQE), each peer QP's receives in order with
/// the payload of its own sender, the WRITEs' bytes in place, no driver bug.
#[test]
fn one_cq_shared_by_many_rc_qps() {
    const NQ: usize = 6;
    const ROUNDS: u64 = 10;
    for room in [1usize, 3, 16] {
        let (f, da, db) = fabric2();
        let o = Opts::default();
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let attr = CqInitAttr {
            cqe: 512,
            ..CqInitAttr::default()
        };
        let (cqa, cqb) = (da.create_cq(&attr).unwrap(), db.create_cq(&attr).unwrap());
        // SAFETY: the CQs and QPs are never destroyed while the test runs.
        let mut cq_a = unsafe { Cq::from_layout(&cqa.layout) }.unwrap();
        // SAFETY: as above: CQ `cqb` stays alive for the whole test and only `cq_b` consumes it.
        let mut cq_b = unsafe { Cq::from_layout(&cqb.layout) }.unwrap();
        let (mut ta, mut tb) = (QpTable::new(), QpTable::new());
        let buf_a = Buf::new(&da, pa, 1 << 16, all_access());
        let buf_b = Buf::new(&db, pb, 1 << 16, all_access());
        let mut qpns = Vec::new();
        for _ in 0..NQ {
            let init = |cq| QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: o.cap,
                sq_sig_all: false,
            };
            let ia = da.create_qp(pa, &init(cqa.id)).unwrap();
            let ib = db.create_qp(pb, &init(cqb.id)).unwrap();
            // SAFETY: as above.
            let qa = unsafe { Qp::from_layout(&ia.layout, None) }.unwrap();
            // SAFETY: as above: QP `ib` stays alive for the whole test and `qb` alone posts to it.
            let qb = unsafe { Qp::from_layout(&ib.layout, None) }.unwrap();
            let side = |dev: &mlx5_sim::SimDevice, pd, cq_id, info, qp| Side {
                dev: dev.clone(),
                pd,
                cq: make_cq(dev, 4, 64),
                cq_id,
                channel: None,
                info,
                qp,
                buf: Buf::new(dev, pd, 64, all_access()),
            };
            let mut sa = side(&da, pa, cqa.id, ia, qa);
            let mut sb = side(&db, pb, cqb.id, ib, qb);
            connect(&mut sa, &db, ib.qpn);
            connect(&mut sb, &da, ia.qpn);
            qpns.push((ia.qpn, ib.qpn));
            ta.insert_qp(sa.qp);
            tb.insert_qp(sb.qp);
        }
        // Receives: 64 bytes each, QP k's at slots k * ROUNDS ...
        for (k, qb) in tb.qps_mut().iter_mut().enumerate() {
            for i in 0..ROUNDS {
                let slot = k * ROUNDS as usize + i as usize;
                qb.post_recv(5000 + slot as u64, &[buf_b.sge(slot * 64, 64)])
                    .unwrap();
            }
        }
        // Per round, per QP: a SEND [k, round], a signaled WRITE of 4 bytes, every other
        // round an unsignaled WRITE before it. WR ids: k * 1000 + round * 10 + j.
        let mut want_a = vec![Vec::new(); NQ];
        for r in 0..ROUNDS {
            for (k, qa) in ta.qps_mut().iter_mut().enumerate() {
                let id = |j: u64| k as u64 * 1000 + r * 10 + j;
                let msg = [k as u8, r as u8, 0xee, 0xee];
                qa.post(&SendWr::send(id(0)).inline(&msg).signaled())
                    .unwrap();
                want_a[k].push(id(0));
                let dst = buf_b.remote(0x8000 + (k * ROUNDS as usize + r as usize) * 8);
                if r % 2 == 1 {
                    qa.post(&SendWr::write(id(1), dst).inline(&[r as u8; 4]))
                        .unwrap();
                }
                let dst = buf_b.remote(0x8000 + (k * ROUNDS as usize + r as usize) * 8 + 4);
                qa.post(&SendWr::write(id(2), dst).inline(&[k as u8; 4]).signaled())
                    .unwrap();
                want_a[k].push(id(2));
            }
        }
        let wa = drain_room(&f, &mut cq_a, &mut ta, room);
        let wb = drain_room(&f, &mut cq_b, &mut tb, room);
        let mut got_a = vec![Vec::new(); NQ];
        for w in &wa {
            assert!(w.is_ok(), "room {room}: {w:?}");
            let k = qpns.iter().position(|q| q.0 == w.qp_num()).unwrap();
            got_a[k].push(w.wr_id());
        }
        assert_eq!(got_a, want_a, "room {room}: each QP's sends in order");
        let mut seen = HashSet::new();
        let mut per_qp = vec![Vec::new(); NQ];
        for w in &wb {
            assert_eq!(
                (w.status(), w.opcode(), w.byte_len()),
                (WcStatus::Success, WcOpcode::Recv, 4),
                "room {room}"
            );
            assert!(seen.insert(w.wr_id()), "wr_id {} twice", w.wr_id());
            let slot = (w.wr_id() - 5000) as usize;
            let got = &buf_b.bytes()[slot * 64..slot * 64 + 2];
            let k = got[0] as usize;
            assert_eq!(slot / ROUNDS as usize, k, "a receive of QP {k}'s own queue");
            assert_eq!((w.qp_num(), w.src_qp()), (qpns[k].1, qpns[k].0));
            per_qp[k].push(got[1]);
        }
        for (k, rounds) in per_qp.iter().enumerate() {
            assert_eq!(
                rounds,
                &(0..ROUNDS as u8).collect::<Vec<u8>>(),
                "QP {k} in order"
            );
            for r in 0..ROUNDS as usize {
                let at = 0x8000 + (k * ROUNDS as usize + r) * 8;
                let first = if r % 2 == 1 { [r as u8; 4] } else { [0; 4] };
                assert_eq!(&buf_b.bytes()[at..at + 4], &first, "QP {k} round {r}");
                assert_eq!(&buf_b.bytes()[at + 4..at + 8], &[k as u8; 4]);
            }
        }
        for q in ta.qps_mut().iter().chain(tb.qps_mut().iter()) {
            assert_eq!((q.sq_outstanding_bbs(), q.rq_outstanding()), (0, 0));
        }
        let _ = buf_a;
        no_driver_bugs(&f);
    }
}
