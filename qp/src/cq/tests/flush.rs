//! Flushes and error periods: the flush run against the full path.

use super::*;

/// WQE opcode, WR id and completion opcode of the sends the flush tests post.
const FLUSHED: [(u8, u64, WcOpcode); 6] = [
    (op::OPCODE_RDMA_WRITE, 100, WcOpcode::RdmaWrite),
    (op::OPCODE_RDMA_WRITE, 101, WcOpcode::RdmaWrite),
    (op::OPCODE_SEND, 102, WcOpcode::Send),
    (op::OPCODE_RDMA_WRITE_IMM, 103, WcOpcode::RdmaWrite),
    (op::OPCODE_SEND_IMM, 104, WcOpcode::Send),
    (op::OPCODE_RDMA_WRITE, 105, WcOpcode::RdmaWrite),
];

/// Post [`FLUSHED`] (signaled) and four receives on QP A.
fn post_flushed(qp: &mut Qp) {
    for (opcode, id, _) in FLUSHED {
        let wr = match opcode {
            op::OPCODE_SEND => SendWr::send(id),
            op::OPCODE_SEND_IMM => SendWr::send_imm(id, 9),
            op::OPCODE_RDMA_WRITE_IMM => SendWr::write_imm(id, R, 9),
            _ => SendWr::write(id, R),
        };
        qp.post(&wr.inline(b"abc").signaled()).unwrap();
    }
    for i in 0..4 {
        qp.post_recv(200 + i, &SGE).unwrap();
    }
}

/// A QP moved to Error: two sends succeed, the device flushes the other four and the
/// four receives, one CQE each. The flush run takes every flush — the first one too,
/// which begins the send queue's flushing — with room for 1 (the one-entry poll), 3 and
/// 16, and the completions are those of the full path: the WR ids in order,
/// `IBV_WC_WR_FLUSH_ERR`, the syndromes, the opcodes posted; the QP follows to Error.
#[test]
fn flushes_take_the_flush_run_and_complete_the_same() {
    for size in [64, 128] {
        for room in [1, 3, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let qp = t.qp_at(0).unwrap();
                post_flushed(qp);
                for (pi, (opcode, _, _)) in FLUSHED.iter().enumerate() {
                    dev.push(if pi < 2 {
                        req_cqe(QPN, pi as u16, *opcode, 0)
                    } else {
                        req_err(QPN, pi as u16, *opcode, FLUSH)
                    });
                }
                for c in 0..4 {
                    dev.push(resp_err(QPN, c, FLUSH));
                }
                let got = drain(cq, t, room);
                assert_eq!(t.qp_at(0).unwrap().state(), QpState::Error);
                got
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let all = flat(&fast);
            let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
            assert_eq!(ids, [100, 101, 102, 103, 104, 105, 200, 201, 202, 203]);
            for (i, w) in all.iter().enumerate() {
                let want = if i < 2 {
                    WcStatus::Success
                } else {
                    WcStatus::WrFlushErr
                };
                assert_eq!(w.status(), want, "completion {i}");
                if i >= 2 {
                    assert_eq!((w.syndrome(), w.vendor_err()), (FLUSH, 0x33));
                    assert_eq!(
                        (w.qp_num(), w.byte_len(), w.flags()),
                        (QPN, 0, WcFlags::empty())
                    );
                }
                let opcode = FLUSHED.get(i).map_or(WcOpcode::Recv, |f| f.2);
                assert_eq!(w.opcode(), opcode, "completion {i}");
            }
            assert_eq!(counts, [2, 0, 8, 0], "size {size} room {room}");
        }
    }
}

/// Flushes the flush run declines, all completed as the full path completes them: a
/// first error that is not a flush (the full path retires it; the flushes after it in
/// later calls take the run), a non-flush error in the middle of a run (it ends the run),
/// a flush naming a later WQE than the oldest (the device skipped an unsignaled one: the
/// full path flushes it too), a flush while an atomic is outstanding, and flushes on the
/// CQE size and room variations.
#[test]
fn flushes_the_run_declines_complete_the_same() {
    let fa = Sge {
        addr: 0x9000,
        length: 8,
        lkey: 3,
    };
    for size in [64, 128] {
        for room in [1, 2, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let a = t.qp_at(0).unwrap();
                for i in 0..4 {
                    a.post(&SendWr::write(300 + i, R).inline(b"abc").signaled())
                        .unwrap();
                }
                dev.push(req_err(QPN, 0, op::OPCODE_RDMA_WRITE, 0x13));
                dev.push(req_err(QPN, 1, op::OPCODE_RDMA_WRITE, FLUSH));
                dev.push(req_err(QPN, 2, op::OPCODE_RDMA_WRITE, 0x22));
                dev.push(req_err(QPN, 3, op::OPCODE_RDMA_WRITE, FLUSH));
                let mut got = drain(cq, t, room);
                let b = t.qp_at(1).unwrap();
                b.post(&SendWr::write(400, R).inline(b"abc").signaled())
                    .unwrap();
                b.post(&SendWr::write(401, R).inline(b"abc")).unwrap();
                b.post(&SendWr::write(402, R).inline(b"abc").signaled())
                    .unwrap();
                b.post(&SendWr::fetch_add(403, R, fa, 1).signaled())
                    .unwrap();
                b.post(&SendWr::write(404, R).inline(b"abc").signaled())
                    .unwrap();
                dev.push(req_err(QPN_B, 0, op::OPCODE_RDMA_WRITE, FLUSH));
                dev.push(req_err(QPN_B, 2, op::OPCODE_RDMA_WRITE, FLUSH));
                dev.push(req_err(QPN_B, 3, op::OPCODE_ATOMIC_FA, FLUSH));
                dev.push(req_err(QPN_B, 4, op::OPCODE_RDMA_WRITE, FLUSH));
                got.extend(drain(cq, t, room));
                got
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let all = flat(&fast);
            let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
            assert_eq!(ids, [300, 301, 302, 303, 400, 401, 402, 403, 404]);
            let st: Vec<WcStatus> = all.iter().map(|w| w.status()).collect();
            let f = WcStatus::WrFlushErr;
            assert_eq!(
                st,
                [
                    WcStatus::from_syndrome(0x13),
                    f,
                    WcStatus::from_syndrome(0x22),
                    f,
                    f,
                    f,
                    f,
                    f,
                    f
                ]
            );
            assert!(counts[3] >= 6, "size {size} room {room}: {counts:?}");
        }
    }
}

/// A UC QP's send error moves it to SQE; once the control path moves it back to RTS,
/// the WQEs posted after that complete as before the error: an unsignaled WR retired by
/// a later signaled one's CQE succeeded, and gets no completion (nor a flush); the
/// flushes of the error period still come first, one each. Every room, both CQE sizes,
/// the fast paths on and off.
#[test]
fn a_uc_qp_recovered_from_sqe_completes_as_before_the_error() {
    // `early`: the control path recovers the QP before the data path polled its error
    // (it records SQE, then RTS, as `mlx5_ctx`'s `Qp::modify` does).
    for early in [false, true] {
        for size in [64, 128] {
            for room in [1, 2, 16] {
                uc_recovery(early, size, room);
            }
        }
    }
}

fn uc_recovery(early: bool, size: u32, room: usize) {
    let what = format!("early {early} size {size} room {room}");
    let mut results = Vec::new();
    for off in [true, false] {
        let (mut dev, mut t, mut cq) = Dev::typed(size, QpType::Uc);
        paths::FAST_OFF.with(|f| f.set(off));
        let b = t.qp_at(1).unwrap();
        for id in [500, 501, 502] {
            b.post(&SendWr::write(id, R).inline(b"abc").signaled())
                .unwrap();
        }
        dev.push(req_err(QPN_B, 0, op::OPCODE_RDMA_WRITE, 0x13));
        dev.push(req_err(QPN_B, 1, op::OPCODE_RDMA_WRITE, FLUSH));
        let mut got = Vec::new();
        if !early {
            got = drain(&mut cq, &mut t, room);
            assert_eq!(t.qp_at(1).unwrap().state(), QpState::Sqe);
        }
        // Recovered with WQE 2's flush (and with `early` every CQE of the error) still in
        // the CQ.
        let b = t.qp_at(1).unwrap();
        b.set_state(QpState::Sqe);
        b.set_state(QpState::Rts);
        dev.push(req_err(QPN_B, 2, op::OPCODE_RDMA_WRITE, FLUSH));
        b.post(&SendWr::write(503, R).inline(b"abc")).unwrap();
        b.post(&SendWr::write(504, R).inline(b"abc").signaled())
            .unwrap();
        b.post(&SendWr::write(505, R).inline(b"abc").signaled())
            .unwrap();
        dev.push(req_cqe(QPN_B, 4, op::OPCODE_RDMA_WRITE, 0));
        dev.push(req_cqe(QPN_B, 5, op::OPCODE_RDMA_WRITE, 0));
        got.extend(drain(&mut cq, &mut t, room));
        paths::FAST_OFF.with(|f| f.set(false));
        let b = t.qp_at(1).unwrap();
        assert_eq!(b.sq_outstanding_bbs(), 0, "{what}");
        assert_eq!(
            b.state(),
            QpState::Rts,
            "{what}: the error period's CQEs polled after the recovery leave the QP in RTS"
        );
        results.push(flat(&got));
        drop((t, cq));
        drop(dev);
    }
    assert_eq!(results[0], results[1], "{what}");
    let got: Vec<(u64, WcStatus)> = results[1].iter().map(|w| (w.wr_id(), w.status())).collect();
    let f = WcStatus::WrFlushErr;
    assert_eq!(
        got,
        [
            (500, WcStatus::from_syndrome(0x13)),
            (501, f),
            (502, f),
            (504, WcStatus::Success),
            (505, WcStatus::Success)
        ],
        "{what}"
    );
}

/// A flush run across a carry out of the `wqe_counter`'s low byte (counter 255 to 256,
/// which the run's expected value does not follow: the run ends there and the next
/// call starts afresh from the send queue's index): every flush still takes the run.
#[test]
fn flush_runs_cross_the_counter_low_byte() {
    for size in [64, 128] {
        let (slow, fast, counts) = both(size, &|dev, t, cq| {
            let mut got = Vec::new();
            let max = t.qp_at(0).unwrap().max_send_wr() as u16;
            assert!(max >= 8, "room for runs");
            // Successes up to half a queue before 256, then a queue of flushes.
            let start = 256 - max / 2;
            for pi in 0..start {
                let qp = t.qp_at(0).unwrap();
                qp.post(&SendWr::write(pi as u64, R).inline(b"abc").signaled())
                    .unwrap();
                dev.push(req_cqe(QPN, pi, op::OPCODE_RDMA_WRITE, 0));
                if pi % max == max - 1 || pi == start - 1 {
                    got.extend(drain(cq, t, 16));
                }
            }
            let qp = t.qp_at(0).unwrap();
            for pi in start..start + max {
                let r = qp.post(&SendWr::write(pi as u64, R).inline(b"abc").signaled());
                r.unwrap_or_else(|e| panic!("WR {pi}: {e}"));
                dev.push(req_err(QPN, pi, op::OPCODE_RDMA_WRITE, FLUSH));
            }
            got.extend(drain(cq, t, 16));
            got
        });
        assert_eq!(fast, slow, "size {size}");
        let all = flat(&fast);
        let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
        let n = all.len();
        assert!(n > 256 + 3, "{n} completions: the flushes cross 256");
        assert_eq!(ids, (0..n as u64).collect::<Vec<u64>>());
        let flushed = all
            .iter()
            .filter(|w| w.status() == WcStatus::WrFlushErr)
            .count();
        assert!(all[n - flushed..]
            .iter()
            .all(|w| w.status() == WcStatus::WrFlushErr));
        assert!(
            n - flushed < 256,
            "the flushes are those past {}",
            n - flushed
        );
        assert_eq!(counts[2..], [flushed as u32, 0], "size {size}");
    }
}
