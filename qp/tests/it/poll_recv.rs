//! Polling hand-written receive CQEs: immediate data, source and flags, SL, path bits and
//! P_Key index; receives completed out of order; inline scatter; an SRQ shared by QPs on one
//! CQ, its free list, and its flush.

use crate::common;
use crate::poll::{cq, rts, QPN};

use common::{err, req, resp, FakeCq, FakeQp, FakeSrq, QpCfg};
use mlx5_cq::*;
use mlx5_hw::QpState;
use mlx5_qp::{Error, Qp, QpTable, SendWr, Sge, Srq, Wc, WcFlags, WcOpcode, WcStatus};

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
