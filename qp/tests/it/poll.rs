//! Polling hand-written CQEs: wr_id recovery, unsignaled runs, CQ wrap and owner flips, error
//! and flush accounting, a READ reply's scatter, bad CQEs, the 16-bit counters' wrap, a
//! `QpTable`, arming (receives: `poll_recv.rs`).

use crate::common;
use mlx5_wqe::opcode as op;

use common::{req, req_bytes, req_err, resp, FakeCq, FakeQp, QpCfg};
use mlx5_cq::*;
use mlx5_hw::QpState;
use mlx5_qp::{Cq, Error, Qp, QpTable, RemoteAddr, SendWr, Sge, SqLimit, Wc, WcOpcode, WcStatus};

pub(crate) const QPN: u32 = 0x1234;

pub(crate) fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` outlives the QP.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    // These tests are about the ring's mechanics: one WR per block, as the literal layouts
    // were written for (the computed WR limit is tested in wr_limit.rs).
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

pub(crate) fn cq(fake: &FakeCq) -> Cq {
    // SAFETY: `fake` outlives the CQ.
    unsafe { Cq::from_layout(&fake.layout) }.unwrap()
}

#[test]
fn signaled_completion_returns_wr_id_and_updates_ci() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut c = cq(&fcq);
    let mut wcs = [Wc::default(); 4];
    assert_eq!(
        c.poll(&mut qp, &mut wcs).unwrap(),
        0,
        "fresh CQ (op_own 0xF0) is empty"
    );
    qp.post(
        &SendWr::write(0xaa, RemoteAddr::new(0, 1))
            .inline(b"abc")
            .signaled(),
    )
    .unwrap();
    let sge = [Sge {
        addr: 0x100,
        length: 64,
        lkey: 1,
    }];
    qp.post(
        &SendWr::read(0xbb, RemoteAddr::new(0, 1))
            .sges(&sge)
            .signaled(),
    )
    .unwrap();
    fcq.push(req(QPN, 0, 0x08));
    fcq.push(req_bytes(QPN, 1, 0x10, 64));
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 2);
    assert_eq!(
        (wcs[0].wr_id(), wcs[0].opcode(), wcs[0].status()),
        (0xaa, WcOpcode::RdmaWrite, WcStatus::Success)
    );
    assert_eq!(
        (wcs[1].wr_id(), wcs[1].opcode(), wcs[1].byte_len()),
        (0xbb, WcOpcode::RdmaRead, 64)
    );
    assert_eq!(wcs[1].qp_num(), QPN);
    assert_eq!(fcq.set_ci(), 2);
    assert_eq!(qp.sq_outstanding_bbs(), 0);
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 0);
}

#[test]
fn unsignaled_run_is_retired_by_one_completion() {
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 8,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut c = cq(&fcq);
    for i in 0..7 {
        qp.post(&SendWr::send(i).inline(b"x")).unwrap();
    }
    qp.post(&SendWr::send(7).inline(b"x").signaled()).unwrap();
    assert_eq!(
        qp.post(&SendWr::send(8)),
        Err(Error::SqFull {
            limit: SqLimit::WorkRequests,
            needed: 1,
            free: 0
        })
    );
    fcq.push(req(QPN, 7, 0x0a));
    let mut wcs = [Wc::default(); 8];
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 1);
    assert_eq!(wcs[0].wr_id(), 7);
    assert_eq!(qp.sq_free_bbs(), 8, "every block came back");
    qp.post(&SendWr::send(8)).unwrap();
}

#[test]
fn cq_wrap_flips_the_owner_bit() {
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 64,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(4, 64, false);
    let mut c = cq(&fcq);
    let mut wcs = [Wc::default(); 3];
    let mut seen = Vec::new();
    for round in 0..5u64 {
        for k in 0..3 {
            let id = round * 3 + k;
            let pi = qp.sq_pi();
            qp.post(&SendWr::send(id).inline(b"x").signaled()).unwrap();
            fcq.push(req(QPN, pi, 0x0a));
        }
        let n = c.poll(&mut qp, &mut wcs).unwrap();
        seen.extend(wcs[..n].iter().map(|w| w.wr_id()));
        assert_eq!(fcq.set_ci(), c.ci() & 0xff_ffff);
    }
    assert_eq!(seen, (0..15).collect::<Vec<_>>());
    assert_eq!(c.ci(), 15);
}

#[test]
fn stale_cqe_from_the_previous_lap_is_not_consumed() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(2, 64, false);
    let mut c = cq(&fcq);
    let mut wcs = [Wc::default(); 4];
    for _ in 0..2 {
        let pi = qp.sq_pi();
        qp.post(&SendWr::send(pi as u64).signaled()).unwrap();
        fcq.push(req(QPN, pi, 0x0a));
    }
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 2);
    // Slot 0 still holds lap-0 CQE (owner 0); on lap 1 software expects owner 1.
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 0);
}

#[test]
fn error_then_flush_accounts_for_every_wr() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(16, 64, false);
    let mut c = cq(&fcq);
    // 0 unsig, 1 unsig, 2 sig (fails), 3 unsig, 4 sig, 5 unsig
    for (i, sig) in [false, false, true, false, true, false].iter().enumerate() {
        let wr = SendWr::send(100 + i as u64).inline(b"x");
        qp.post(&if *sig { wr.signaled() } else { wr }).unwrap();
    }
    fcq.push(req_err(
        QPN,
        2,
        op::OPCODE_SEND,
        SYNDROME_REMOTE_ACCESS_ERR,
        0x42,
    ));
    fcq.push(req_err(QPN, 4, op::OPCODE_SEND, SYNDROME_WR_FLUSH_ERR, 0));
    let mut wcs = [Wc::default(); 8];
    let n = c.poll(&mut qp, &mut wcs).unwrap();
    let got: Vec<_> = wcs[..n].iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        vec![
            (102, WcStatus::RemAccessErr),
            (103, WcStatus::WrFlushErr),
            (104, WcStatus::WrFlushErr),
        ]
    );
    assert_eq!(wcs[0].syndrome(), 0x13);
    assert_eq!(wcs[0].vendor_err(), 0x42);
    assert_eq!(wcs[0].syndrome_name(), Some("REMOTE_ACCESS_ERR"));
    assert_eq!(wcs[0].status().name(), "IBV_WC_REM_ACCESS_ERR");
    // The error completion moved the data path to Error by itself.
    assert_eq!(qp.state(), QpState::Error);
    // WR 105 got no CQE yet (this fake device flushes nothing by itself): the caller could
    // flush it. A send posted now is accepted, and the device flushes it with the CQE a
    // ConnectX writes for it (its WQE index, syndrome WR_FLUSH_ERR): that CQE names an
    // outstanding WQE, so the poll retires 105 and 9, one flush each.
    qp.post(&SendWr::send(9).inline(b"x")).unwrap();
    fcq.push(req_err(QPN, 6, op::OPCODE_SEND, SYNDROME_WR_FLUSH_ERR, 0));
    let n = c.poll(&mut qp, &mut wcs).unwrap();
    let got: Vec<_> = wcs[..n].iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        vec![(105, WcStatus::WrFlushErr), (9, WcStatus::WrFlushErr)]
    );
    assert_eq!(qp.sq_outstanding_bbs(), 0);
    assert_eq!(qp.flush_outstanding(&mut wcs).unwrap(), 0);
}

#[test]
fn a_first_flush_error_reports_the_earlier_unsignaled_wrs() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(16, 64, false);
    let mut c = cq(&fcq);
    for i in 0..4u64 {
        let wr = SendWr::send(i).inline(b"x");
        qp.post(&if i == 3 { wr.signaled() } else { wr }).unwrap();
    }
    fcq.push(req_err(QPN, 3, op::OPCODE_SEND, SYNDROME_WR_FLUSH_ERR, 0));
    // A one-entry array: the run is reported across four polls, the CQE consumed last.
    let mut one = [Wc::default(); 1];
    let mut ids = Vec::new();
    for _ in 0..4 {
        assert_eq!(c.poll(&mut qp, &mut one).unwrap(), 1);
        ids.push(one[0].wr_id());
        assert_eq!(one[0].status(), WcStatus::WrFlushErr);
    }
    assert_eq!(ids, vec![0, 1, 2, 3]);
    assert_eq!(c.ci(), 1);
    assert_eq!(c.poll(&mut qp, &mut one).unwrap(), 0);
}

#[test]
fn requester_scatter_copies_a_read_reply() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(4, 64, false);
    let mut c = cq(&fcq);
    let mut dst = [0u8; 16];
    let sg = [Sge {
        addr: dst.as_mut_ptr() as u64,
        length: 16,
        lkey: 1,
    }];
    qp.post(
        &SendWr::read(5, RemoteAddr::new(0x40, 2))
            .sges(&sg)
            .signaled(),
    )
    .unwrap();
    let mut b = *req_bytes(QPN, 0, 0x10, 16).as_bytes();
    b[..16].copy_from_slice(b"sixteen bytes!!!");
    b[63] |= INLINE_SCATTER_32;
    fcq.push(Cqe64::from_bytes(&b));
    let mut wcs = [Wc::default(); 1];
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 1);
    assert_eq!(&dst, b"sixteen bytes!!!");
}

#[test]
fn bad_cqes_are_errors_after_the_good_ones() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut c = cq(&fcq);
    qp.post(&SendWr::send(1).signaled()).unwrap();
    fcq.push(req(QPN, 0, 0x0a));
    fcq.push(req(0x999, 0, 0x0a)); // unknown QP
    fcq.push(req(QPN, 5, 0x0a)); // nothing outstanding there
    let mut b = *req(QPN, 0, 0x0a).as_bytes();
    b[63] |= 0x0c; // compressed
    fcq.push(Cqe64::from_bytes(&b));
    let mut wcs = [Wc::default(); 4];
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 1, "the good one first");
    let unknown = Error::UnknownQpn {
        cqn: 0x77,
        qpn: 0x999,
    };
    assert!(unknown.leaves_cqe());
    let unknown = Err(unknown);
    assert_eq!(c.poll(&mut qp, &mut wcs), unknown);
    assert_eq!(
        (c.ci(), fcq.set_ci()),
        (1, 1),
        "another QP's CQE stays in the CQ"
    );
    assert_eq!(c.poll(&mut qp, &mut wcs), unknown, "met again");
    let gone = c
        .discard_next()
        .expect("the stale CQE, taken out on purpose");
    assert_eq!((gone.qpn(), gone.wqe_counter()), (0x999, 0));
    assert!(matches!(
        c.poll(&mut qp, &mut wcs),
        Err(Error::BadCqe { wqe_counter: 5, .. })
    ));
    assert!(matches!(
        c.poll(&mut qp, &mut wcs),
        Err(Error::UnsupportedCqe { format: 3, .. })
    ));
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 0);
    assert_eq!(
        fcq.set_ci(),
        4,
        "the bad CQEs are consumed, the unknown one discarded"
    );
    assert!(
        c.discard_next().is_none(),
        "an empty CQ has nothing to discard"
    );
}

#[test]
fn arming_writes_the_record_and_the_uar() {
    let fcq = FakeCq::new(8, 64, false);
    let mut c = cq(&fcq);
    c.arm(false);
    assert_eq!(fcq.arm_rec(), 0);
    assert_eq!(&fcq.uar.bytes()[0x20..0x28], &[0, 0, 0, 0, 0, 0, 0, 0x77]);
    c.ack_event();
    c.arm(true);
    let want = (1u32 << 28) | (1 << 24);
    assert_eq!(fcq.arm_rec(), want);
    let mut exp = want.to_be_bytes().to_vec();
    exp.extend_from_slice(&0x77u32.to_be_bytes());
    assert_eq!(&fcq.uar.bytes()[0x20..0x28], &exp[..]);
    for _ in 0..3 {
        c.ack_event();
    }
    assert_eq!(c.arm_sn(), 0, "2-bit sequence number wraps");
}

#[test]
fn sixteen_bit_counters_wrap() {
    // More than 65536 blocks through a 64-block ring: wqe_index, wqe_counter and the doorbell
    // record wrap at 0xffff; the RQ counter too.
    let fake = FakeQp::new(&QpCfg {
        sq_bbs: 64,
        rq_cnt: 16,
        ..QpCfg::default()
    });
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(64, 64, false);
    let mut c = cq(&fcq);
    let mut wcs = [Wc::default(); 8];
    let mut next_expected = 15u64;
    for i in 0..70_000u64 {
        let pi = qp.sq_pi();
        assert_eq!(pi, i as u16);
        let sig = i % 16 == 15;
        let wr = SendWr::send(i).inline(b"w");
        qp.post(&if sig { wr.signaled() } else { wr }).unwrap();
        assert_eq!(fake.sq_dbrec(), u32::from(pi.wrapping_add(1)));
        assert_eq!(
            u16::from_be_bytes([fake.bb(pi as usize % 64)[1], fake.bb(pi as usize % 64)[2]]),
            pi
        );
        if sig {
            fcq.push(req(QPN, pi, 0x0a));
            let n = c.poll(&mut qp, &mut wcs).unwrap();
            assert_eq!(n, 1);
            assert_eq!(wcs[0].wr_id(), next_expected);
            next_expected += 16;
            assert_eq!(qp.sq_outstanding_bbs(), 0);
        }
        if i % 4 == 0 {
            let r = i / 4;
            qp.post_recv(r, &[]).unwrap();
            fcq.push(resp(CQE_RESP_SEND, QPN, r as u16, 0, 0));
            assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 1);
            assert_eq!(wcs[0].wr_id(), r);
        }
    }
    assert_eq!(fcq.set_ci(), c.ci() & 0xff_ffff);
}

/// A `QpTable` finds every QP by its QPN in constant time however the QPNs fall: sequential
/// ones, ones whose low bits collide (the table grows until they differ), and a QPN inserted
/// twice (the later QP wins). Each CQE reaches its own QP's WR.
#[test]
fn qp_table_finds_each_qp_whatever_its_qpn() {
    let qpns: Vec<u32> = (0..40u32)
        .map(|i| 0x40 + i)
        .chain((1..20u32).map(|i| i << 12 | 7))
        .chain([0x00ff_ffff, 0x0000_0001])
        .collect();
    let fakes: Vec<FakeQp> = qpns
        .iter()
        .map(|&qpn| {
            FakeQp::new(&QpCfg {
                qpn,
                ..QpCfg::default()
            })
        })
        .collect();
    let dup = FakeQp::new(&QpCfg {
        qpn: qpns[3],
        ..QpCfg::default()
    });
    let mut fcq = FakeCq::new(256, 64, false);
    let mut cq = cq(&fcq);
    let mut table = QpTable::new();
    for f in &fakes {
        table.insert_qp(rts(f));
    }
    let dup_pos = table.insert_qp(rts(&dup));
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    for (pos, &qpn) in qpns.iter().enumerate() {
        let pos = if pos == 3 { dup_pos } else { pos };
        let qp = table.qp_at(pos).unwrap();
        qp.post(&SendWr::send(qpn as u64 * 10).sges(&sge).signaled())
            .unwrap();
        fcq.push(req(qpn, 0, mlx5_wqe::opcode::OPCODE_SEND));
    }
    let mut wcs = [Wc::default(); 16];
    let mut got = Vec::new();
    loop {
        let n = cq.poll(&mut table, &mut wcs).unwrap();
        if n == 0 {
            break;
        }
        got.extend(wcs[..n].iter().map(|w| (w.qp_num(), w.wr_id(), w.status())));
    }
    let want: Vec<_> = qpns
        .iter()
        .map(|&q| (q, q as u64 * 10, WcStatus::Success))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        table.qp_at(3).unwrap().sq_outstanding_wrs(),
        0,
        "nothing posted on the replaced QP"
    );
}
