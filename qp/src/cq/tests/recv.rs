//! Receive completions and the responder kinds, on both paths.

use super::*;

/// Receives: plain ones in runs, one with immediate data, one while the queue is
/// empty (an error), all alike on both paths.
#[test]
fn receives_complete_the_same_on_both_paths() {
    for size in [64, 128] {
        for room in [1, 3, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let qp = t.qp_at(1).unwrap();
                for i in 0..6 {
                    qp.post_recv(40 + i, &SGE).unwrap();
                }
                for c in 0..3 {
                    dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, c, 8 + c as u32, 0x77));
                }
                dev.push(resp_cqe(CQE_RESP_SEND_IMM, QPN_B, 3, 4, 0xabcd));
                dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 4, 9, 0));
                dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 5, 9, 0));
                dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 6, 9, 0));
                drain(cq, t, room)
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let all = flat(&fast);
            let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
            assert_eq!(ids, [40, 41, 42, 43, 44, 45]);
            assert_eq!(
                (
                    all[1].byte_len(),
                    all[1].src_qp(),
                    all[1].sl(),
                    all[1].pkey_index()
                ),
                (9, 0x99, 3, 0x77)
            );
            assert_eq!(all[3].imm_data(), 0xabcd);
            assert!(fast.last().unwrap().is_err(), "the CQE of no receive");
            // Every receive through the receive fast path, the one with immediate data
            // too (a run ends at it: another `op_own`); the CQE of no receive is the full
            // path's error.
            assert_eq!(counts, [0, 6, 0, 0], "size {size} room {room}");
        }
    }
}

/// A WRITE and a SEND with immediate complete with `IBV_WC_WITH_IMM` (rdma-core
/// `handle_good_req`) on the fast paths and the full path alike; the plain ones without.
#[test]
fn sends_with_immediate_complete_with_imm_on_both_paths() {
    let posts = [
        (op::OPCODE_RDMA_WRITE_IMM, WcOpcode::RdmaWrite, true),
        (op::OPCODE_SEND_IMM, WcOpcode::Send, true),
        (op::OPCODE_RDMA_WRITE, WcOpcode::RdmaWrite, false),
        (op::OPCODE_SEND, WcOpcode::Send, false),
    ];
    for size in [64, 128] {
        for room in [1, 16] {
            let (slow, fast, _) = both(size, &|dev, t, cq| {
                let qp = t.qp_at(0).unwrap();
                let r = RemoteAddr::new(0x1000, 5);
                for (i, &(opcode, _, _)) in posts.iter().enumerate() {
                    let id = 70 + i as u64;
                    let wr = match opcode {
                        op::OPCODE_RDMA_WRITE_IMM => SendWr::write_imm(id, r, 0xfeed),
                        op::OPCODE_SEND_IMM => SendWr::send_imm(id, 0xfeed),
                        op::OPCODE_RDMA_WRITE => SendWr::write(id, r),
                        _ => SendWr::send(id),
                    };
                    qp.post(&wr.sges(&SGE).signaled()).unwrap();
                    dev.push(req_cqe(QPN, i as u16, opcode, 0));
                }
                drain(cq, t, room)
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let got: Vec<_> = flat(&fast)
                .iter()
                .map(|w| (w.opcode(), w.flags().contains(WcFlags::WITH_IMM)))
                .collect();
            let want: Vec<_> = posts.iter().map(|&(_, o, imm)| (o, imm)).collect();
            assert_eq!(got, want, "size {size} room {room}");
        }
    }
}

/// Every good responder kind (WRITE with immediate, SEND with invalidate, SEND with
/// immediate, SEND), with and without the solicited bit, through the receive fast path:
/// the same completions as the full path.
#[test]
fn every_responder_kind_completes_the_same_on_both_paths() {
    use mlx5_cq::{CQE_RESP_SEND_INV, CQE_RESP_WR_IMM};
    let kinds = [
        (CQE_RESP_WR_IMM, false),
        (CQE_RESP_SEND_INV, false),
        (CQE_RESP_SEND_IMM, true),
        (CQE_RESP_SEND, true),
        (CQE_RESP_WR_IMM, true),
        (CQE_RESP_SEND, false),
    ];
    for size in [64, 128] {
        for room in [1, 2, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let qp = t.qp_at(1).unwrap();
                for i in 0..kinds.len() as u64 {
                    qp.post_recv(60 + i, &SGE).unwrap();
                }
                for (c, &(kind, se)) in kinds.iter().enumerate() {
                    let mut cqe = resp_cqe(kind, QPN_B, c as u16, 5, 0x1234_5678);
                    cqe.op_own |= (se as u8) << 1;
                    dev.push(cqe);
                }
                drain(cq, t, room)
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            assert_eq!(counts, [0, 6, 0, 0], "size {size} room {room}");
            let all = flat(&fast);
            let got: Vec<_> = all
                .iter()
                .map(|w| (w.opcode(), w.flags(), w.imm_data()))
                .collect();
            // `resp_cqe`'s `flags_rqpn` has no GRH bits.
            let (imm, inv) = (WcFlags::WITH_IMM, WcFlags::WITH_INV);
            assert_eq!(
                got,
                [
                    (WcOpcode::RecvRdmaWithImm, imm, 0x1234_5678),
                    (WcOpcode::Recv, inv, 0x1234_5678),
                    (WcOpcode::Recv, imm, 0x1234_5678),
                    (WcOpcode::Recv, WcFlags::empty(), 0),
                    (WcOpcode::RecvRdmaWithImm, imm, 0x1234_5678),
                    (WcOpcode::Recv, WcFlags::empty(), 0),
                ],
                "size {size} room {room}"
            );
        }
    }
}

/// Two QPs on one CQ: runs of one QPN, alternating QPNs, an unsignaled WR retired by a
/// later CQE, a CQE of a QPN the table does not hold.
#[test]
fn mixed_qpns_complete_the_same_on_both_paths() {
    for size in [64, 128] {
        for room in [1, 2, 5, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                for pos in [0usize, 1] {
                    let qp = t.qp_at(pos).unwrap();
                    for i in 0..8u64 {
                        let wr = SendWr::write(pos as u64 * 100 + i, R).inline(b"xy");
                        let wr = if i == 5 { wr } else { wr.signaled() };
                        qp.post(&wr).unwrap();
                    }
                }
                for pi in [0u16, 1, 2] {
                    dev.push(req_cqe(QPN, pi, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                }
                for pi in 0..4u16 {
                    dev.push(req_cqe(QPN_B, pi, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    dev.push(req_cqe(QPN, pi + 3, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                }
                // WR 5 unsignaled: the CQE of 6 retires it.
                dev.push(req_cqe(QPN_B, 4, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                dev.push(req_cqe(QPN_B, 6, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                dev.push(req_cqe(QPN_B, 7, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                dev.push(req_cqe(0x77, 0, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                dev.push(req_cqe(QPN, 7, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                drain(cq, t, room)
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let ids: Vec<u64> = flat(&fast).iter().map(|w| w.wr_id()).collect();
            assert_eq!(
                ids,
                [0, 1, 2, 100, 3, 101, 4, 102, 5, 103, 6, 104, 106, 107, 7],
                "size {size} room {room}"
            );
            assert!(fast.iter().any(|r| r.is_err()), "the unknown QPN");
            assert!(counts[0] >= 10, "size {size} room {room}: {counts:?}");
        }
    }
}

/// Receives of two QPs interleaved on one CQ (the distinct-QP receive loop), a run of
/// three of one QP among them, a change of kind (SEND with immediate) inside the
/// interleaving, polled with several room sizes: the completions are the full path's and
/// every receive is a fast path's.
#[test]
fn interleaved_receives_complete_the_same_on_both_paths() {
    for size in [64, 128] {
        for room in [1, 2, 3, 5, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                for pos in [0usize, 1] {
                    for i in 0..12 {
                        t.qp_at(pos)
                            .unwrap()
                            .post_recv(100 * pos as u64 + i, &SGE)
                            .unwrap();
                    }
                }
                let mut c = [0u16; 2];
                let mut cqe = |dev: &mut Dev, pos: usize, kind: u8| {
                    let qpn = [QPN, QPN_B][pos];
                    dev.push(resp_cqe(kind, qpn, c[pos], 4 + c[pos] as u32, 0x5));
                    c[pos] += 1;
                };
                for i in 0..6 {
                    let kind = if i == 3 {
                        CQE_RESP_SEND_IMM
                    } else {
                        CQE_RESP_SEND
                    };
                    cqe(dev, 0, CQE_RESP_SEND);
                    cqe(dev, 1, kind);
                }
                for _ in 0..3 {
                    cqe(dev, 0, CQE_RESP_SEND);
                }
                for _ in 0..3 {
                    cqe(dev, 1, CQE_RESP_SEND);
                    cqe(dev, 0, CQE_RESP_SEND);
                }
                drain(cq, t, room)
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let ids: Vec<u64> = flat(&fast).iter().map(|w| w.wr_id()).collect();
            let mut want = Vec::new();
            for i in 0..6 {
                want.extend([i, 100 + i]);
            }
            want.extend([6, 7, 8]);
            for i in 0..3 {
                want.extend([106 + i, 9 + i]);
            }
            assert_eq!(ids, want, "size {size} room {room}");
            assert_eq!(counts, [0, 21, 0, 0], "size {size} room {room}");
        }
    }
}

/// Receives across the 16-bit wrap of the receive queue's WQE counter, one and two a
/// call, interleaved with another QP's receives (the distinct-QP receive loop) in the
/// two-a-call case: every completion is its receive's, in order; the lean retire's carry
/// out of the key's low bits sends exactly one CQE per QP and wrap to the full path,
/// which resyncs the key (without the resync every later receive would go there; with
/// the runs going on past the carry, none would and the key would stay shut).
#[test]
fn receives_stay_fast_across_the_wqe_counter_wrap() {
    for room in [1, 2] {
        let (mut dev, mut t, mut cq) = Dev::new(64);
        paths::SERVED.with(|c| c.set([0; 4]));
        let mut wcs = [Wc::default(); 2];
        let n = 70_000u32;
        for i in 0..n {
            let mut want = Vec::new();
            for (pos, qpn) in [(0usize, QPN), (1, QPN_B)] {
                if pos == 1 && room == 1 {
                    continue;
                }
                let id = u64::from(i) * 2 + pos as u64;
                t.qp_at(pos).unwrap().post_recv(id, &SGE).unwrap();
                dev.push(resp_cqe(CQE_RESP_SEND, qpn, i as u16, 8, 0));
                want.push(id);
            }
            assert_eq!(cq.poll(&mut t, &mut wcs[..room]).unwrap(), want.len());
            let got: Vec<u64> = wcs[..want.len()].iter().map(|w| w.wr_id()).collect();
            assert_eq!(got, want, "receive {i}");
            assert!(wcs[..want.len()]
                .iter()
                .all(|w| w.is_ok() && w.byte_len() == 8));
        }
        assert_eq!(cq.poll(&mut t, &mut wcs).unwrap(), 0);
        let [_, fast, _, full] = paths::SERVED.with(|c| c.get());
        let total = if room == 1 { n } else { 2 * n };
        assert_eq!(fast + full, total);
        // Exactly one per QP: the CQE after its tail's wrap, which resyncs the key (a
        // run that went on past the carry would leave the key shut for good).
        assert_eq!(
            full, room as u32,
            "room {room}: {full} went to the full path"
        );
        drop((t, cq));
        drop(dev);
    }
}

/// Receives completed out of order (each first reported as `RecvOutOfOrder`, then delivered)
/// keep the receive queue's one-compare test shut until the tail has passed them — also in
/// the state where one is delivered and the next reported — and every receive completes
/// once, in the order of its CQE.
#[test]
fn out_of_order_receives_keep_the_lean_test_shut() {
    use crate::queue::WorkQueue;
    let (mut dev, mut t, mut cq) = Dev::new(64);
    for i in 0..4 {
        t.qp_at(1).unwrap().post_recv(40 + i, &SGE).unwrap();
    }
    for c in [2u16, 3, 0, 1] {
        dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, c, 8, 0));
    }
    let mut wcs = [Wc::default(); 1];
    let (mut ids, mut reported) = (Vec::new(), 0);
    for _ in 0..6 {
        match cq.poll(&mut t, &mut wcs) {
            Ok(1) => ids.push(wcs[0].wr_id()),
            Err(crate::error::Error::RecvOutOfOrder { .. }) => reported += 1,
            other => panic!("unexpected poll result {other:?}"),
        }
        let rq = t.qp_at(1).unwrap().recv_queue();
        if ids.len() < 4 {
            let tail = rq.tail();
            assert!(
                !rq.names_oldest(tail),
                "open after {ids:?}, {reported} reported"
            );
        }
    }
    assert_eq!(ids, [42, 43, 40, 41]);
    assert_eq!(reported, 2);
    assert_eq!(cq.poll(&mut t, &mut wcs).unwrap(), 0);
}
