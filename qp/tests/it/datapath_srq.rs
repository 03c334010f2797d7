//! An SRQ shared by several RC QPs on the software ConnectX, one CQ per device serving all of
//! them through a `QpTable`.

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
    let mut cq_b = unsafe { Cq::from_layout(&cqb.layout) }.unwrap();
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
