//! Polling hand-written CQEs: wr_id recovery, unsignaled runs, CQ wrap and owner flips, error
//! and flush accounting, receives (RQ and SRQ), inline scatter, set_ci, arming.

use crate::common;
use mlx5_wqe::opcode as op;

use common::{err, req, req_bytes, req_err, resp, FakeCq, FakeQp, FakeSrq, QpCfg};
use mlx5_cq::*;
use mlx5_hw::QpState;
use mlx5_qp::{
    Cq, Error, Qp, QpTable, RemoteAddr, SendWr, Sge, SqLimit, Srq, Wc, WcFlags, WcOpcode, WcStatus,
};

const QPN: u32 = 0x1234;

fn rts(fake: &FakeQp) -> Qp {
    // SAFETY: `fake` outlives the QP.
    let mut qp = unsafe { Qp::from_layout(&fake.layout, None) }.unwrap();
    // These tests are about the ring's mechanics: one WR per block, as the literal layouts
    // were written for (the computed WR limit is tested in wr_limit.rs).
    qp.set_max_send_wr(fake.layout.sq.wqe_cnt).unwrap();
    qp.set_state(QpState::Rts);
    qp
}

fn cq(fake: &FakeCq) -> Cq {
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
fn receive_completions_carry_imm_source_and_flags() {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut c = cq(&fcq);
    for i in 0..3 {
        qp.post_recv(
            10 + i,
            &[Sge {
                addr: 0x1000,
                length: 256,
                lkey: 1,
            }],
        )
        .unwrap();
    }
    let mut a = resp(CQE_RESP_SEND_IMM, QPN, 0, 100, 0xdead_beef);
    a.flags_rqpn = U32::new(1u32 << 28 | 0x00ab_cdef);
    a.slid = U16::new(0x0102u16);
    fcq.push(a);
    fcq.push(resp(CQE_RESP_WR_IMM, QPN, 1, 0, 7));
    fcq.push(err(CQE_RESP_ERR, QPN, 2, SYNDROME_LOCAL_LENGTH_ERR, 0));
    let mut wcs = [Wc::default(); 4];
    assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 3);
    assert_eq!(
        (wcs[0].wr_id(), wcs[0].opcode(), wcs[0].byte_len()),
        (10, WcOpcode::Recv, 100)
    );
    assert_eq!(wcs[0].imm_data(), 0xdead_beef);
    assert_eq!(wcs[0].flags(), WcFlags::WITH_IMM | WcFlags::GRH);
    assert_eq!((wcs[0].src_qp(), wcs[0].slid()), (0xab_cdef, 0x0102));
    assert_eq!(
        (wcs[1].wr_id(), wcs[1].opcode(), wcs[1].imm_data()),
        (11, WcOpcode::RecvRdmaWithImm, 7)
    );
    assert_eq!((wcs[2].wr_id(), wcs[2].status()), (12, WcStatus::LocLenErr));
    assert_eq!(qp.rq_outstanding(), 0);
}

/// Issue 18: a device that completes receives out of order is reported as such, naming the
/// CQE's WQE and the expected one; no flush is invented for the skipped WQE and the completion
/// it carries is delivered by the next poll.
#[test]
fn a_receive_completed_out_of_order_is_an_error_naming_both_and_nothing_is_lost() {
    // Room for 4 and for 1 (the one-entry poll, whose receive path keys on the queue's
    // order state).
    for room in [4, 1] {
        out_of_order_receives(room);
    }
}

fn out_of_order_receives(room: usize) {
    let fake = FakeQp::new(&QpCfg::default());
    let mut qp = rts(&fake);
    let mut fcq = FakeCq::new(16, 64, false);
    let mut c = cq(&fcq);
    for i in 0..6 {
        qp.post_recv(100 + i, &[]).unwrap();
    }
    let mut all = [Wc::default(); 4];
    let wcs = &mut all[..room];
    // WQE 1 completes before WQE 0.
    fcq.push(resp(CQE_RESP_WR_IMM, QPN, 1, 0, 5));
    assert_eq!(
        c.poll(&mut qp, wcs),
        Err(Error::RecvOutOfOrder {
            cqn: 0x77,
            qpn: QPN,
            wqe_counter: 1,
            expected: 0
        })
    );
    assert_eq!(fcq.set_ci(), 0, "the CQE stays in the CQ");
    assert_eq!(c.poll(&mut qp, wcs).unwrap(), 1, "and is delivered next");
    assert_eq!(
        (
            wcs[0].wr_id(),
            wcs[0].status(),
            wcs[0].opcode(),
            wcs[0].imm_data()
        ),
        (101, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 5)
    );
    assert_eq!(
        qp.rq_outstanding(),
        6,
        "WQE 0 is still outstanding, not flushed"
    );
    fcq.push(resp(CQE_RESP_SEND, QPN, 0, 9, 0));
    fcq.push(resp(CQE_RESP_SEND, QPN, 2, 3, 0));
    let mut got = Vec::new();
    while got.len() < 2 {
        let n = c.poll(&mut qp, wcs).unwrap();
        assert!(n > 0, "room {room}");
        got.extend_from_slice(&wcs[..n]);
    }
    assert_eq!((got[0].wr_id(), got[0].byte_len()), (100, 9));
    assert_eq!((got[1].wr_id(), got[1].byte_len()), (102, 3));
    assert_eq!(qp.rq_outstanding(), 3, "WQEs 0, 1 and 2 retired");
    // After a good completion in the same call, the violation is reported by the next call.
    fcq.push(resp(CQE_RESP_SEND, QPN, 3, 1, 0));
    fcq.push(resp(CQE_RESP_SEND, QPN, 5, 1, 0));
    assert_eq!(c.poll(&mut qp, wcs).unwrap(), 1);
    assert_eq!(wcs[0].wr_id(), 103);
    assert!(matches!(
        c.poll(&mut qp, wcs),
        Err(Error::RecvOutOfOrder {
            wqe_counter: 5,
            expected: 4,
            ..
        })
    ));
    assert_eq!(c.poll(&mut qp, wcs).unwrap(), 1);
    assert_eq!(wcs[0].wr_id(), 105);
    // A second CQE for a WQE already completed is a bad CQE.
    fcq.push(resp(CQE_RESP_SEND, QPN, 5, 1, 0));
    assert!(matches!(
        c.poll(&mut qp, wcs),
        Err(Error::BadCqe { wqe_counter: 5, .. })
    ));
    // Flushing reports WQE 4 only: 5 has its completion.
    qp.set_state(QpState::Error);
    assert_eq!(qp.flush_outstanding(wcs).unwrap(), 1);
    assert_eq!(
        (wcs[0].wr_id(), wcs[0].status()),
        (104, WcStatus::WrFlushErr)
    );
    assert_eq!(qp.rq_outstanding(), 0);
}

#[test]
fn inline_scatter_formats_copy_into_the_receive_buffer() {
    for cqe_size in [64u32, 128] {
        let fake = FakeQp::new(&QpCfg::default());
        let mut qp = rts(&fake);
        let mut fcq = FakeCq::new(4, cqe_size, false);
        let mut c = cq(&fcq);
        let mut buf_a = [0u8; 10];
        let mut buf_b = [0u8; 64];
        let sg = [
            Sge {
                addr: buf_a.as_mut_ptr() as u64,
                length: 10,
                lkey: 1,
            },
            Sge {
                addr: buf_b.as_mut_ptr() as u64,
                length: 64,
                lkey: 1,
            },
        ];
        qp.post_recv(1, &sg).unwrap();
        let data: Vec<u8> = (1..=48).collect();
        let (len, cqe, front) = if cqe_size == 64 {
            // Format 1: up to 32 bytes at the start of the 64-byte CQE.
            let mut b = *resp(CQE_RESP_SEND, QPN, 0, 20, 0).as_bytes();
            b[..20].copy_from_slice(&data[..20]);
            b[63] |= INLINE_SCATTER_32;
            (20, Cqe64::from_bytes(&b), None)
        } else {
            // Format 2: up to 64 bytes in the first half of the 128-byte CQE.
            let mut cqe = resp(CQE_RESP_SEND, QPN, 0, 48, 0);
            cqe.op_own |= INLINE_SCATTER_64;
            (48, cqe, Some(&data[..]))
        };
        fcq.push_with(cqe, front);
        let mut wcs = [Wc::default(); 1];
        assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 1);
        assert_eq!(wcs[0].byte_len(), len as u32);
        assert_eq!(&buf_a[..], &data[..10]);
        assert_eq!(&buf_b[..len - 10], &data[10..len]);
        assert!(buf_b[len - 10..].iter().all(|&x| x == 0));
    }
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
fn one_cq_serves_many_qps_and_an_srq() {
    let fakes: Vec<FakeQp> = (0..50)
        .map(|i| {
            FakeQp::new(&QpCfg {
                qpn: 0x100 + 7 * i,
                uses_srq: true,
                ..QpCfg::default()
            })
        })
        .collect();
    let fsrq = FakeSrq::new(8, 64, 0x55);
    let mut table = QpTable::new();
    for f in &fakes {
        // SAFETY: `fakes` is declared before `table`, so each fake QP's memory outlives the
        // `Qp` the table holds; one `Qp` per fake, receiving through SRQ 0x55 (`fsrq`).
        let mut qp = unsafe { Qp::from_layout(&f.layout, Some(0x55)) }.unwrap();
        qp.set_state(QpState::Rts);
        table.insert_qp(qp);
    }
    // SAFETY: `fsrq` is declared before `table`, so its memory outlives the `Srq` the table
    // holds; only that `Srq` posts to it.
    let srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    let srq_pos = table.insert_srq(srq);
    let mut fcq = FakeCq::new(64, 64, true);
    let mut c = cq(&fcq);
    // A send on QP #17, three receives on the SRQ completing out of order on QPs 3, 9, 40.
    let qpn17 = 0x100 + 7 * 17;
    table
        .qp_at(17)
        .unwrap()
        .post(&SendWr::send(1717).signaled())
        .unwrap();
    let srq = table.srq_at(srq_pos).unwrap();
    for i in 0..3 {
        srq.post_recv(
            500 + i,
            &[Sge {
                addr: 0,
                length: 8,
                lkey: 1,
            }],
        )
        .unwrap();
    }
    assert!(matches!(
        table.qp_at(3).unwrap().post_recv(0, &[]),
        Err(Error::WrongState { .. })
    ));
    fcq.push(resp(CQE_RESP_SEND, 0x100 + 7 * 40, 2, 8, 0));
    fcq.push(req(qpn17, 0, 0x0a));
    fcq.push(resp(CQE_RESP_SEND, 0x100 + 7 * 3, 0, 8, 0));
    fcq.push(resp(CQE_RESP_SEND, 0x100 + 7 * 9, 1, 8, 0));
    let mut wcs = [Wc::default(); 8];
    assert_eq!(c.poll(&mut table, &mut wcs).unwrap(), 4);
    let got: Vec<_> = wcs[..4].iter().map(|w| (w.wr_id(), w.qp_num())).collect();
    assert_eq!(
        got,
        vec![
            (502, 0x100 + 7 * 40),
            (1717, qpn17),
            (500, 0x100 + 7 * 3),
            (501, 0x100 + 7 * 9)
        ]
    );
    // Written as on any CQ (rdma-core `update_cons_index` does not test the flag either).
    assert_eq!(
        fcq.set_ci(),
        4,
        "ignore-overrun CQ: set_ci still follows the index"
    );
    assert_eq!(table.srq_at(srq_pos).unwrap().outstanding(), 0);
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
fn srq_free_list_is_maintained() {
    let fsrq = FakeSrq::new(4, 32, 9);
    // SAFETY: `fsrq` outlives the SRQ, and only `srq` posts to it.
    let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    assert_eq!(srq.capacity(), 3);
    let sg = [Sge {
        addr: 0xa0,
        length: 4,
        lkey: 2,
    }];
    for i in 0..3 {
        srq.post_recv(i, &sg).unwrap();
    }
    assert_eq!(fsrq.dbrec(), 3);
    assert_eq!(srq.post_recv(9, &sg), Err(Error::SrqFull { capacity: 3 }));
    // WQE 0 data segment at 16; stride 32 has one slot: no terminator.
    let b = fsrq.buf.bytes();
    assert_eq!(u32::from_be_bytes(b[16..20].try_into().unwrap()), 4);
    assert_eq!(u64::from_be_bytes(b[24..32].try_into().unwrap()), 0xa0);
    // Complete WQE 1 then 0 (out of order): each is appended after the tail.
    let fake = FakeQp::new(&QpCfg {
        uses_srq: true,
        ..QpCfg::default()
    });
    // SAFETY: `fake` outlives the QP, which receives through SRQ 9 (`fsrq`).
    let mut qp = unsafe { Qp::from_layout(&fake.layout, Some(9)) }.unwrap();
    qp.set_state(QpState::Rts);
    let mut fcq = FakeCq::new(8, 64, false);
    let mut c = cq(&fcq);
    fcq.push(resp(CQE_RESP_SEND, QPN, 1, 4, 0));
    fcq.push(resp(CQE_RESP_SEND, QPN, 0, 4, 0));
    let mut wcs = [Wc::default(); 4];
    let mut srqs = [srq];
    let n = c.poll(&mut (&mut qp, &mut srqs[..]), &mut wcs).unwrap();
    assert_eq!(n, 2);
    assert_eq!((wcs[0].wr_id(), wcs[1].wr_id()), (1, 0));
    assert_eq!(fsrq.next_of(3), 1, "old tail links to the first freed");
    assert_eq!(fsrq.next_of(1), 0, "then to the second");
    // A completion for a WQE that is not posted is refused.
    fcq.push(resp(CQE_RESP_SEND, QPN, 1, 4, 0));
    assert!(matches!(
        c.poll(&mut (&mut qp, &mut srqs[..]), &mut wcs),
        Err(Error::BadCqe { .. })
    ));
    // Posting continues at head = 3, then follows 3 -> 1 -> 0.
    let srq = &mut srqs[0];
    srq.post_recv(30, &sg).unwrap();
    srq.post_recv(31, &sg).unwrap();
    assert_eq!(srq.outstanding(), 3);
    assert_eq!(srq.post_recv(32, &sg), Err(Error::SrqFull { capacity: 3 }));
    assert_eq!(fsrq.dbrec(), 5);
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

/// SL, DLID path bits and P_Key index of a receive, read from the CQE bytes as libmlx5's
/// `handle_responder` reads them (`(be32toh(flags_rqpn) >> 24) & 0xf`, `ml_path & 0x7f`,
/// `be32toh(imm_inval_pkey) & 0xffff`; `struct mlx5_cqe64` offsets 24, 17 and 36, checked
/// against mlx5dv.h by the conformance crate), for 64- and 128-byte CQEs; send and error
/// completions leave them 0.
#[test]
fn receive_completions_carry_sl_path_bits_and_pkey_index() {
    for cqe_size in [64u32, 128] {
        let fake = FakeQp::new(&QpCfg::default());
        let mut qp = rts(&fake);
        let mut fcq = FakeCq::new(8, cqe_size, false);
        let mut c = cq(&fcq);
        for i in 0..3 {
            qp.post_recv(
                20 + i,
                &[Sge {
                    addr: 0x1000,
                    length: 256,
                    lkey: 1,
                }],
            )
            .unwrap();
        }
        qp.post(&SendWr::send(30).inline(b"x").signaled()).unwrap();
        // A SEND without immediate: byte 17 (ml_path) 0xff, flags_rqpn = GRH flags 2 | SL 0xb |
        // source QPN, imm_inval_pkey = 0x1234_0005 (P_Key index 5).
        let mut b = *resp(CQE_RESP_SEND, QPN, 0, 64, 0).as_bytes();
        b[17] = 0xff;
        b[24..28].copy_from_slice(&(0x2b00_0000u32 | 0x00_0abc).to_be_bytes());
        b[36..40].copy_from_slice(&0x1234_0005u32.to_be_bytes());
        fcq.push(Cqe64::from_bytes(&b));
        // With an immediate the shared field is the immediate; libmlx5 still takes its low 16
        // bits as the P_Key index.
        let mut b = *resp(CQE_RESP_SEND_IMM, QPN, 1, 8, 0xcafe_0042).as_bytes();
        b[17] = 0x03;
        b[24..28].copy_from_slice(&0x0700_0001u32.to_be_bytes());
        fcq.push(Cqe64::from_bytes(&b));
        // An error CQE has no such fields (`struct mlx5_err_cqe`): bytes there are not read.
        let mut e = *err(CQE_RESP_ERR, QPN, 2, SYNDROME_LOCAL_LENGTH_ERR, 0).as_bytes();
        e[17] = 0xff;
        e[24] = 0x2f;
        e[38..40].copy_from_slice(&[0xff, 0xff]);
        fcq.push(Cqe64::from_bytes(&e));
        fcq.push(req(QPN, 0, 0x0a));
        let mut wcs = [Wc::default(); 4];
        assert_eq!(c.poll(&mut qp, &mut wcs).unwrap(), 4, "{cqe_size}");
        let w = &wcs[0];
        assert_eq!((w.wr_id(), w.opcode()), (20, WcOpcode::Recv), "{cqe_size}");
        assert_eq!(
            (w.sl(), w.dlid_path_bits(), w.pkey_index(), w.src_qp()),
            (0xb, 0x7f, 5, 0xabc),
            "{cqe_size}"
        );
        assert_eq!(w.flags(), WcFlags::GRH, "{cqe_size}");
        let w = &wcs[1];
        assert_eq!(
            (
                w.sl(),
                w.dlid_path_bits(),
                w.pkey_index(),
                w.imm_data(),
                w.flags()
            ),
            (7, 3, 0x0042, 0xcafe_0042, WcFlags::WITH_IMM),
            "{cqe_size}"
        );
        for w in &wcs[2..] {
            assert_eq!(
                (w.sl(), w.dlid_path_bits(), w.pkey_index()),
                (0, 0, 0),
                "{w:?}"
            );
        }
        assert_eq!((wcs[2].wr_id(), wcs[2].status()), (22, WcStatus::LocLenErr));
        assert_eq!((wcs[3].wr_id(), wcs[3].opcode()), (30, WcOpcode::Send));
        // The Cqe64 accessors read the same bits.
        let cqe = Cqe64::from_bytes(&b);
        assert_eq!(
            (
                cqe.sl(),
                cqe.dlid_path_bits(),
                cqe.pkey_index(),
                cqe.grh_flags()
            ),
            (7, 3, 0x0042, 0)
        );
    }
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

/// `Srq::flush_outstanding` (a dead device's SRQ): every posted receive comes back once as a
/// flush error with its WR id, in as many calls as the output needs, and the WQEs are free
/// again (posting continues); nothing is reported twice.
#[test]
fn srq_flush_outstanding_returns_every_receive_once() {
    let fsrq = FakeSrq::new(8, 32, 9);
    // SAFETY: `fsrq` outlives the SRQ, and only `srq` posts to it.
    let mut srq = unsafe { Srq::from_layout(&fsrq.layout) }.unwrap();
    let sg = [Sge {
        addr: 0xa0,
        length: 4,
        lkey: 2,
    }];
    for i in 0..5 {
        srq.post_recv(100 + i, &sg).unwrap();
    }
    let mut got = Vec::new();
    let mut out = [Wc::default(); 2];
    for _ in 0..5 {
        let n = srq.flush_outstanding(&mut out);
        for wc in &out[..n] {
            assert_eq!(wc.status(), WcStatus::WrFlushErr);
            assert_eq!(wc.opcode(), WcOpcode::Recv);
            got.push(wc.wr_id());
        }
    }
    got.sort_unstable();
    assert_eq!(got, [100, 101, 102, 103, 104]);
    assert_eq!(srq.outstanding(), 0);
    assert_eq!(srq.flush_outstanding(&mut out), 0);
    let cap = srq.capacity();
    for i in 0..cap as u64 {
        srq.post_recv(200 + i, &sg).unwrap();
    }
    assert_eq!(
        srq.flush_outstanding(&mut [Wc::default(); 16]),
        cap as usize
    );
}
