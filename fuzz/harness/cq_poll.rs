//! Fuzz harness `cq_poll`: a CQ ring holding arbitrary device-written bytes, shared by two
//! live RC QPs with sends and receives outstanding, polled by `Cq::poll` through a `QpTable`
//! that holds both (room for 4 and for 1: the one-entry path), by `Cq::poll` on the first QP
//! alone and by `Cq::poll_send`. The rings are device memory of the software ConnectX
//! (`mlx5_sim::mem::DmaBuf`), each ending at a guard page, so a poll that reads past the CQ
//! buffer (a wrong wrap) faults at once.
//!
//! Input: byte 0 picks the CQE size (64 or 128), the CQ size (8 or 16) and how many sends and
//! receives are posted first on each QP; then per CQE one control byte (bit 0: write the owner
//! bit of the current lap; bit 1: put a QP's number in, the second's when bit 3 is set too;
//! bit 2: a requester opcode) followed by the CQE's bytes. The polls may return errors but
//! never panic, never touch memory outside the rings, and never complete a work request twice
//! (every posted WR completes exactly once). Shared by `fuzz/fuzz_targets/cq_poll.rs` and
//! `qp/tests/it/fuzz_replay.rs`.

use mlx5_hw::{BfLayout, CqLayout, QpLayout, QpState, QpType, WqLayout};
use mlx5_qp::{Cq, Qp, QpTable, RemoteAddr, SendFlags, Sge, Wc};
use mlx5_sim::mem::DmaBuf;
use std::collections::HashSet;

/// The two QPs' numbers.
const QPNS: [u32; 2] = [0x1234, 0x1235];
const SQ_BBS: u32 = 16;
const RQ_CNT: u32 = 8;

/// Run one input.
pub fn run(data: &[u8]) {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let cqe_size: u32 = if sel & 1 != 0 { 128 } else { 64 };
    let cqe_cnt: u32 = if sel & 2 != 0 { 16 } else { 8 };
    let sends = (sel >> 2) as u64 & 7;
    let recvs = (sel >> 5) as u64 & 7;

    let cq_buf = DmaBuf::new((cqe_cnt * cqe_size) as usize).expect("cq");
    let cq_dbrec = DmaBuf::new(64).expect("cq dbrec");
    let cq_uar = DmaBuf::new(4096).expect("cq uar");
    for i in 0..cqe_cnt as usize {
        // rdma-core `mlx5_alloc_cq_buf`: every op_own starts as 0xF0 (invalid, hardware-owned).
        cq_buf.write((i + 1) * cqe_size as usize - 1, &[0xf0]);
    }
    let rq_bytes = (RQ_CNT * 64) as usize;
    // Each QP's rings (RQ then SQ), doorbell record and UAR page.
    let mem: Vec<[DmaBuf; 3]> = QPNS
        .iter()
        .map(|_| {
            [
                DmaBuf::new((SQ_BBS * 64 + RQ_CNT * 64) as usize).expect("ring"),
                DmaBuf::new(64).expect("dbrec"),
                DmaBuf::new(4096).expect("uar"),
            ]
        })
        .collect();
    let mut table = QpTable::new();
    for (&qpn, [sq, dbrec, uar]) in QPNS.iter().zip(&mem) {
        let layout = QpLayout {
            qpn,
            qp_type: QpType::Rc,
            dbrec: dbrec.as_ptr() as *mut u32,
            rq: WqLayout {
                buf: sq.as_ptr(),
                wqe_cnt: RQ_CNT,
                stride: 64,
            },
            sq: WqLayout {
                // The SQ after the RQ, as rdma-core lays a QP buffer out (`mlx5_alloc_qp_buf`).
                buf: sq.as_ptr().wrapping_add(rq_bytes),
                wqe_cnt: SQ_BBS,
                stride: 64,
            },
            bf: BfLayout {
                reg: uar.as_ptr().wrapping_add(0x800),
                size: 256,
                shared: false,
            },
            max_inline_data: 64,
            max_send_sge: 2,
            max_recv_sge: 4,
            sq_sig_all: false,
            uses_srq: false,
        };
        // SAFETY: every buffer is device memory owned by this function and outlives the QPs
        // and the CQ (the table is dropped first).
        let mut qp = unsafe { Qp::from_layout(&layout, None) }.expect("qp");
        qp.set_state(QpState::Rts);
        table.insert_qp(qp);
    }
    let cq_layout = CqLayout {
        buf: cq_buf.as_ptr(),
        dbrec: cq_dbrec.as_ptr() as *mut u32,
        cqe_cnt,
        cqe_size,
        cq_uar: cq_uar.as_ptr(),
        cqn: 0x77,
        ignore_overrun: false,
    };
    // SAFETY: as above.
    let mut cq = unsafe { Cq::from_layout(&cq_layout) }.expect("cq");

    // The receive buffers: 64 bytes per receive, the last ending at the guard page (a CQE
    // with scattered data is copied there, `docs/sources.md` §8).
    let recv_buf = DmaBuf::new(RQ_CNT as usize * 64).expect("recv buffers");
    let mut posted = HashSet::new();
    for q in 0..QPNS.len() {
        let qp = table.qp_at(q).expect("qp");
        let base = q as u64 * 10_000;
        for i in 0..sends {
            let flags = if i % 2 == 0 {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            if qp
                .post_write_inline(base + i, b"fuzz", RemoteAddr::new(0x2000, 2), flags)
                .is_ok()
            {
                posted.insert(base + i);
            }
        }
        for i in 0..recvs {
            let sge = Sge {
                addr: recv_buf.as_ptr() as u64 + (q as u64 * recvs + i) % RQ_CNT as u64 * 64,
                length: 64,
                lkey: 1,
            };
            if qp.post_recv(base + 1000 + i, &[sge]).is_ok() {
                posted.insert(base + 1000 + i);
            }
        }
    }

    // The device writes the CQEs: every byte but op_own, then op_own (the ownership rule).
    let size = cqe_size as usize;
    let mut hw_pi = 0u32;
    while let Some((&ctl, tail)) = rest.split_first() {
        let n = tail.len().min(size);
        let mut cqe = vec![0u8; size];
        cqe[..n].copy_from_slice(&tail[..n]);
        rest = &tail[n..];
        let off = if size == 128 { 64 } else { 0 };
        if ctl & 2 != 0 {
            let qpn = QPNS[(ctl >> 3) as usize & 1];
            cqe[off + 57..off + 60].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        if ctl & 4 != 0 {
            cqe[off + 63] &= 0x0f;
        }
        if ctl & 1 != 0 {
            let owner = ((hw_pi / cqe_cnt) & 1) as u8;
            cqe[off + 63] = (cqe[off + 63] & 0xfe) | owner;
        }
        let slot = (hw_pi & (cqe_cnt - 1)) as usize * size;
        cq_buf.write(slot, &cqe[..size - 1]);
        cq_buf.write(slot + size - 1, &cqe[size - 1..]);
        hw_pi += 1;
        if hw_pi == 2 * cqe_cnt {
            break;
        }
    }

    let mut done = HashSet::new();
    let mut wcs = [Wc::default(); 4];
    let mut ids = [0u64; 4];
    for round in 0..16 {
        let got = if round % 2 == 0 {
            // Through the table with room for 4 and for 1, through the first QP alone.
            let r = match round % 6 {
                0 => cq.poll(&mut table, &mut wcs),
                2 => cq.poll(&mut table, &mut wcs[..1]),
                _ => cq.poll(table.qp_at(0).expect("qp"), &mut wcs),
            };
            match r {
                Ok(n) => wcs[..n].iter().map(|w| w.wr_id()).collect::<Vec<_>>(),
                Err(_) => continue,
            }
        } else {
            let mut other = Vec::new();
            let qp = table.qp_at(0).expect("qp");
            match cq.poll_send(qp, &mut ids, |w| other.push(w.wr_id())) {
                Ok(n) => {
                    other.extend_from_slice(&ids[..n]);
                    other
                }
                Err(_) => continue,
            }
        };
        for id in got {
            assert!(
                posted.contains(&id),
                "a completion for WR {id}, never posted"
            );
            assert!(done.insert(id), "WR {id} completed twice");
        }
    }
}
