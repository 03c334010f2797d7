//! Tests of the poll paths on memory standing in for the device: every fast path against the
//! full path (`paths::FAST_OFF`), CQE by CQE.

use super::paths;
use super::{Cq, QpTable};
use crate::qp::Qp;
use crate::wc::{Wc, WcFlags, WcOpcode, WcStatus};
use crate::wr::{RemoteAddr, SendWr, Sge};
use mlx5_cq::{
    Cqe64, CQE_INITIAL_OP_OWN, CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND,
    CQE_RESP_SEND_IMM, U16, U32,
};
use mlx5_hw::{BfLayout, CqLayout, QpLayout, QpState, QpType, WqLayout};
use mlx5_wqe::opcode as op;

mod flush;
mod recv;
mod table;

#[repr(C, align(4096))]
struct Page([u8; 4096]);

/// Memory for one QP (send ring, receive ring, doorbell record, UAR) and one CQ.
struct Mem {
    sq: Box<Page>,
    rq: Box<Page>,
    dbrec: Box<Page>,
    uar: Box<Page>,
    cq: Box<Page>,
    cq_dbrec: Box<Page>,
    cq_uar: Box<Page>,
}

fn page() -> Box<Page> {
    Box::new(Page([0; 4096]))
}

pub(super) const QPN: u32 = 0x42;

fn build(m: &mut Mem) -> (Qp, Cq) {
    for i in 0..64 {
        m.cq.0[i * 64 + 63] = CQE_INITIAL_OP_OWN;
    }
    let layout = QpLayout {
        qpn: QPN,
        qp_type: QpType::Rc,
        dbrec: m.dbrec.0.as_mut_ptr().cast(),
        sq: WqLayout {
            buf: m.sq.0.as_mut_ptr(),
            wqe_cnt: 64,
            stride: 64,
        },
        rq: WqLayout {
            buf: m.rq.0.as_mut_ptr(),
            wqe_cnt: 64,
            stride: 64,
        },
        bf: BfLayout {
            reg: m.uar.0.as_mut_ptr().wrapping_add(0x800),
            size: 256,
            shared: false,
        },
        max_inline_data: 32,
        max_send_sge: 2,
        max_recv_sge: 4,
        sq_sig_all: false,
        uses_srq: false,
    };
    let cq_layout = CqLayout {
        buf: m.cq.0.as_mut_ptr(),
        dbrec: m.cq_dbrec.0.as_mut_ptr().cast(),
        cqe_cnt: 64,
        cqe_size: 64,
        cq_uar: m.cq_uar.0.as_mut_ptr(),
        cqn: 7,
        ignore_overrun: false,
    };
    // SAFETY: `m` owns every page the layouts name and outlives the QP and CQ (the test
    // drops them first); nothing else uses the rings.
    let mut qp = unsafe { Qp::from_layout(&layout, None) }.unwrap();
    // SAFETY: as above.
    let cq = unsafe { Cq::from_layout(&cq_layout) }.unwrap();
    qp.set_state(QpState::Rts);
    (qp, cq)
}

fn push(m: &mut Mem, slot: usize, cqe: Cqe64, opcode: u8, se: bool) {
    let b = cqe.as_bytes();
    m.cq.0[slot * 64..slot * 64 + 63].copy_from_slice(&b[..63]);
    m.cq.0[slot * 64 + 63] = opcode << 4 | (se as u8) << 1;
}

/// Post two WRITEs, a READ and a SEND, post two receives; the device completes them with
/// plain REQ CQEs, one REQ CQE with SE set (the fast test declines it), and RESP_SEND CQEs.
/// Returns the completions and the path counts.
fn run(fast_off: bool, room: usize) -> (Vec<Wc>, [u32; 4]) {
    let mut m = Mem {
        sq: page(),
        rq: page(),
        dbrec: page(),
        uar: page(),
        cq: page(),
        cq_dbrec: page(),
        cq_uar: page(),
    };
    let (mut qp, mut cq) = build(&mut m);
    let r = RemoteAddr::new(0x1000, 5);
    let sge = [Sge {
        addr: 0x9000,
        length: 16,
        lkey: 3,
    }];
    qp.post(&SendWr::write(10, r).inline(b"abc").signaled())
        .unwrap();
    qp.post(&SendWr::write(11, r).sges(&sge).signaled())
        .unwrap();
    qp.post(&SendWr::read(12, r).sges(&sge).signaled()).unwrap();
    qp.post(&SendWr::send(13).sges(&sge).signaled()).unwrap();
    qp.post_recv(20, &sge).unwrap();
    qp.post_recv(21, &sge).unwrap();
    // A requester CQE carries the WQE's opcode in `sop_drop_qpn` bits 31:24 (rdma-core
    // `handle_good_req` reads it there).
    let req = |pi: u16, byte_cnt: u32| Cqe64 {
        sop_drop_qpn: U32::new((OPCODES[pi as usize] as u32) << 24 | QPN),
        wqe_counter: U16::new(pi),
        byte_cnt: U32::new(byte_cnt),
        ..Cqe64::default()
    };
    let resp = |wc: u16| Cqe64 {
        sop_drop_qpn: U32::new(QPN),
        wqe_counter: U16::new(wc),
        byte_cnt: U32::new(7),
        flags_rqpn: U32::new(0x99),
        ..Cqe64::default()
    };
    const OPCODES: [u8; 4] = [
        op::OPCODE_RDMA_WRITE,
        op::OPCODE_RDMA_WRITE,
        op::OPCODE_RDMA_READ,
        op::OPCODE_SEND,
    ];
    push(&mut m, 0, req(0, 0), CQE_REQ, false);
    push(&mut m, 1, req(1, 0), CQE_REQ, false);
    push(&mut m, 2, req(2, 16), CQE_REQ, true);
    push(&mut m, 3, req(3, 0), CQE_REQ, false);
    push(&mut m, 4, resp(0), CQE_RESP_SEND, false);
    push(&mut m, 5, resp(1), CQE_RESP_SEND, false);
    paths::FAST_OFF.with(|f| f.set(fast_off));
    paths::SERVED.with(|c| c.set([0; 4]));
    let mut got = Vec::new();
    let mut wcs = [Wc::default(); 16];
    loop {
        let n = cq.poll(&mut qp, &mut wcs[..room]).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&wcs[..n]);
    }
    paths::FAST_OFF.with(|f| f.set(false));
    let served = paths::SERVED.with(|c| c.get());
    drop((qp, cq));
    drop(m);
    (got, served)
}

/// With the fast paths switched off the full path gives the same completions; with them
/// on, the counters show which path served each. Room for 16: the send run takes the two
/// WRITEs, the CQE with SE set hands the rest of the call to the full path. Room for 2:
/// the run takes the WRITEs, the full path the READ (SE) and the SEND in that call, the
/// receive fast path both receives in the next.
#[test]
fn the_fast_paths_give_what_the_full_path_gives() {
    for (room, want) in [(16, [2, 0, 0, 4]), (2, [2, 2, 0, 2])] {
        let (slow, slow_paths) = run(true, room);
        let (fast, fast_paths) = run(false, room);
        assert_eq!(slow.len(), 6);
        assert_eq!(fast, slow, "room {room}");
        assert_eq!(
            slow_paths,
            [0, 0, 0, 6],
            "fast paths off: the full path served all"
        );
        assert_eq!(
            fast_paths, want,
            "room {room}: [send run, receive fast path, flush run, full path]"
        );
    }
    let (fast, _) = run(false, 16);
    let ids: Vec<u64> = fast.iter().map(|w| w.wr_id()).collect();
    assert_eq!(ids, [10, 11, 12, 13, 20, 21]);
    assert_eq!(fast[2].opcode(), WcOpcode::RdmaRead);
    assert_eq!(fast[2].byte_len(), 16);
    assert_eq!(
        (fast[4].opcode(), fast[4].byte_len(), fast[4].src_qp()),
        (WcOpcode::Recv, 7, 0x99)
    );
}

/// The one-entry poll's send-queue key ([`crate::queue::WorkQueue::take_oldest`]) follows
/// `ci` past the wrap of its low 16 bits: the completion at the wrap goes to the full
/// path, which resyncs the key, and every later one takes the fast path again.
#[test]
fn the_one_entry_poll_stays_fast_across_the_wqe_counter_wrap() {
    for size in [64, 128] {
        let (mut dev, mut table, mut cq) = Dev::new(size);
        let qp = table.qp_at(0).unwrap();
        let r = RemoteAddr::new(0x1000, 5);
        paths::SERVED.with(|c| c.set([0; 4]));
        let mut wcs = [Wc::default(); 1];
        let n = 70_000u64;
        for id in 0..n {
            qp.post(&SendWr::write(id, r).inline(b"abcd").signaled())
                .unwrap();
            dev.push(req_cqe(QPN, id as u16, op::OPCODE_RDMA_WRITE, 0));
            assert_eq!(cq.poll(qp, &mut wcs).unwrap(), 1, "WR {id}");
            assert_eq!(
                (wcs[0].wr_id(), wcs[0].opcode(), wcs[0].is_ok()),
                (id, WcOpcode::RdmaWrite, true)
            );
        }
        assert_eq!(cq.poll(qp, &mut wcs).unwrap(), 0);
        let [fast, _, _, full] = paths::SERVED.with(|c| c.get());
        assert_eq!(fast as u64 + full as u64, n);
        assert!(full <= 2, "{size}-byte CQEs: {full} went to the full path");
    }
}

/// The flush syndrome (`MLX5_CQE_SYNDROME_WR_FLUSH_ERR`).
pub(super) const FLUSH: u8 = mlx5_cq::SYNDROME_WR_FLUSH_ERR;

/// The device of the path tests: two QPs on one CQ of `cnt` CQEs of `size` bytes, the
/// CQEs written as the device writes them (every byte, then `op_own` with the owner bit
/// of the lap).
pub(super) struct Dev {
    _pages: Vec<Box<Page>>,
    _cq: Box<CqBuf>,
    cq_buf: *mut u8,
    size: usize,
    cnt: u32,
    pub(super) hw_pi: u32,
}

pub(super) const QPN_B: u32 = 0x1_0042;

/// 64 CQEs of 128 bytes at most.
#[repr(C, align(4096))]
struct CqBuf([u8; 8192]);

impl Dev {
    pub(super) fn new(size: u32) -> (Dev, QpTable, Cq) {
        Dev::typed(size, QpType::Rc)
    }

    /// As [`Dev::new`], QP B of type `b`.
    pub(super) fn typed(size: u32, b: QpType) -> (Dev, QpTable, Cq) {
        let cnt = 64u32;
        let mut pages: Vec<Box<Page>> = (0..12).map(|_| page()).collect();
        let mut cq_mem = Box::new(CqBuf([0; 8192]));
        let cq_buf = cq_mem.0.as_mut_ptr();
        let mut ptr = |i: usize| pages[i].0.as_mut_ptr();
        let (cq_dbrec, cq_uar) = (ptr(2), ptr(3));
        let mut table = QpTable::new();
        for (q, qpn, qp_type) in [(0usize, QPN, QpType::Rc), (1, QPN_B, b)] {
            let base = 4 + q * 4;
            let layout = QpLayout {
                qpn,
                qp_type,
                dbrec: ptr(base).cast(),
                sq: WqLayout {
                    buf: ptr(base + 1),
                    wqe_cnt: 64,
                    stride: 64,
                },
                rq: WqLayout {
                    buf: ptr(base + 2),
                    wqe_cnt: 64,
                    stride: 64,
                },
                bf: BfLayout {
                    reg: ptr(base + 3).wrapping_add(0x800),
                    size: 256,
                    shared: false,
                },
                max_inline_data: 32,
                max_send_sge: 2,
                max_recv_sge: 4,
                sq_sig_all: false,
                uses_srq: false,
            };
            // SAFETY: the pages outlive the QP (the test drops the table first).
            let mut qp = unsafe { Qp::from_layout(&layout, None) }.unwrap();
            qp.set_state(QpState::Rts);
            table.insert_qp(qp);
        }
        // SAFETY: the CQ buffer holds 64 × 128 bytes.
        unsafe {
            for i in 0..cnt as usize {
                *cq_buf.add(i * size as usize + size as usize - 1) = CQE_INITIAL_OP_OWN;
            }
        }
        let cq_layout = CqLayout {
            buf: cq_buf,
            dbrec: cq_dbrec.cast(),
            cqe_cnt: cnt,
            cqe_size: size,
            cq_uar,
            cqn: 7,
            ignore_overrun: false,
        };
        // SAFETY: as above.
        let cq = unsafe { Cq::from_layout(&cq_layout) }.unwrap();
        let dev = Dev {
            _pages: pages,
            _cq: cq_mem,
            cq_buf,
            size: size as usize,
            cnt,
            hw_pi: 0,
        };
        (dev, table, cq)
    }

    pub(super) fn push(&mut self, cqe: Cqe64) {
        let slot = (self.hw_pi & (self.cnt - 1)) as usize * self.size + self.size - 64;
        let owner = ((self.hw_pi / self.cnt) & 1) as u8;
        let b = cqe.as_bytes();
        // SAFETY: a slot of the CQ buffer the consumer has given back (the scripts keep
        // fewer than `cnt` CQEs outstanding).
        unsafe {
            core::ptr::copy_nonoverlapping(b.as_ptr(), self.cq_buf.add(slot), 63);
            *self.cq_buf.add(slot + 63) = (b[63] & 0xfe) | owner;
        }
        self.hw_pi += 1;
    }
}

pub(super) fn req_cqe(qpn: u32, pi: u16, send_opcode: u8, byte_cnt: u32) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: U32::new((send_opcode as u32) << 24 | qpn),
        wqe_counter: U16::new(pi),
        byte_cnt: U32::new(byte_cnt),
        op_own: CQE_REQ << 4,
        ..Cqe64::default()
    }
}

pub(super) fn resp_cqe(opcode: u8, qpn: u32, counter: u16, byte_cnt: u32, imm: u32) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: U32::new(qpn),
        wqe_counter: U16::new(counter),
        byte_cnt: U32::new(byte_cnt),
        imm_inval_pkey: U32::new(imm),
        flags_rqpn: U32::new(0x0300_0099),
        op_own: opcode << 4,
        ..Cqe64::default()
    }
}

/// An error CQE as a device writes it (`struct mlx5_err_cqe`): the syndromes, the WQE
/// opcode (`send_opcode`, a requester's) and the QPN, the counter, the CQE opcode.
fn err_cqe(opcode: u8, send_opcode: u8, qpn: u32, counter: u16, syndrome: u8) -> Cqe64 {
    let mut b = [0u8; 64];
    b[52] = 0x11;
    b[54] = 0x33;
    b[55] = syndrome;
    b[56..60].copy_from_slice(&((send_opcode as u32) << 24 | qpn).to_be_bytes());
    b[60..62].copy_from_slice(&counter.to_be_bytes());
    b[62] = 0x5a;
    b[63] = opcode << 4;
    Cqe64::from_bytes(&b)
}

pub(super) fn req_err(qpn: u32, counter: u16, send_opcode: u8, syndrome: u8) -> Cqe64 {
    err_cqe(CQE_REQ_ERR, send_opcode, qpn, counter, syndrome)
}

pub(super) fn resp_err(qpn: u32, counter: u16, syndrome: u8) -> Cqe64 {
    err_cqe(CQE_RESP_ERR, 0, qpn, counter, syndrome)
}

/// Every poll call's result: its completions or its error.
pub(super) type Calls = Vec<Result<Vec<Wc>, String>>;

/// Poll until empty with room for `room`.
pub(super) fn drain(cq: &mut Cq, table: &mut QpTable, room: usize) -> Calls {
    let mut got = Vec::new();
    let mut wcs = [Wc::default(); 16];
    for _ in 0..10_000 {
        match cq.poll(table, &mut wcs[..room]) {
            Ok(0) => break,
            Ok(n) => got.push(Ok(wcs[..n].to_vec())),
            Err(e) => {
                // A CQE of a QP the table does not hold stays in the CQ; these scripts'
                // are garbage, taken out.
                if let crate::error::Error::UnknownQpn { .. } = e {
                    assert!(cq.discard_next().is_some());
                }
                got.push(Err(e.to_string()))
            }
        }
    }
    got
}

/// Run `script` (which posts, pushes CQEs and drains through the closure it is given)
/// with the fast paths on and off; returns both results and the path counts of the fast
/// run.
pub(super) fn both(
    size: u32,
    script: &dyn Fn(&mut Dev, &mut QpTable, &mut Cq) -> Calls,
) -> (Calls, Calls, [u32; 4]) {
    both_typed(size, QpType::Rc, script)
}

/// [`both`] with QP B of type `b`.
pub(super) fn both_typed(
    size: u32,
    b: QpType,
    script: &dyn Fn(&mut Dev, &mut QpTable, &mut Cq) -> Calls,
) -> (Calls, Calls, [u32; 4]) {
    let mut out = Vec::new();
    let mut counts = [0; 4];
    for off in [true, false] {
        let (mut dev, mut table, mut cq) = Dev::typed(size, b);
        paths::FAST_OFF.with(|f| f.set(off));
        paths::SERVED.with(|c| c.set([0; 4]));
        out.push(script(&mut dev, &mut table, &mut cq));
        paths::FAST_OFF.with(|f| f.set(false));
        counts = paths::SERVED.with(|c| c.get());
        if off {
            assert_eq!(counts[..3], [0, 0, 0], "fast paths off");
        }
        drop((table, cq));
        drop(dev);
    }
    let fast = out.pop().unwrap();
    let slow = out.pop().unwrap();
    (slow, fast, counts)
}

fn flat(r: &[Result<Vec<Wc>, String>]) -> Vec<Wc> {
    r.iter()
        .flat_map(|c| c.clone().unwrap_or_default())
        .collect()
}

pub(super) const R: RemoteAddr = RemoteAddr::new(0x1000, 5);
pub(super) const SGE: [Sge; 1] = [Sge {
    addr: 0x9000,
    length: 16,
    lkey: 3,
}];

/// Errors: successes, a READ, a remote access error and the flush after it, then a
/// receive flush; the fast paths take the successes before the error, the full path the
/// rest (the flushes in it as runs of one), and the completions are the same.
#[test]
fn errors_take_the_full_path_and_complete_the_same() {
    for size in [64, 128] {
        let (slow, fast, counts) = both(size, &|dev, t, cq| {
            let qp = t.qp_at(0).unwrap();
            for i in 0..3 {
                qp.post(&SendWr::write(10 + i, R).inline(b"abc").signaled())
                    .unwrap();
            }
            qp.post(&SendWr::read(13, R).sges(&SGE).signaled()).unwrap();
            qp.post(&SendWr::write(14, R).inline(b"abc").signaled())
                .unwrap();
            qp.post(&SendWr::write(15, R).inline(b"abc").signaled())
                .unwrap();
            qp.post_recv(30, &SGE).unwrap();
            qp.post_recv(31, &SGE).unwrap();
            for pi in 0..3 {
                dev.push(req_cqe(QPN, pi, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
            }
            dev.push(req_cqe(QPN, 3, mlx5_wqe::OPCODE_RDMA_READ, 16));
            dev.push(req_err(QPN, 4, op::OPCODE_RDMA_WRITE, 0x13));
            dev.push(req_err(QPN, 5, op::OPCODE_RDMA_WRITE, FLUSH));
            dev.push(resp_cqe(CQE_RESP_SEND, QPN, 0, 7, 0));
            dev.push(resp_err(QPN, 1, FLUSH));
            drain(cq, t, 16)
        });
        assert_eq!(fast, slow, "size {size}");
        let all = flat(&fast);
        let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
        assert_eq!(ids, [10, 11, 12, 13, 14, 15, 30, 31]);
        assert_eq!(
            (all[3].opcode(), all[3].byte_len()),
            (WcOpcode::RdmaRead, 16)
        );
        assert!(!all[4].is_ok() && !all[5].is_ok() && all[6].is_ok() && !all[7].is_ok());
        assert_eq!(
            counts[0], 4,
            "size {size}: the send run took the four successes"
        );
        assert_eq!(
            counts[2..],
            [2, 2],
            "size {size}: the full path the error and the receive, its flush runs the flushes"
        );
    }
}

/// Two QPs with one WQE outstanding each, their CQEs alternating (what a CQ shared by
/// many QPs sees; the distinct-QP loop takes them), across the CQ's wrap, with a CQE of
/// a QP that has two outstanding (its run follows), an unknown QPN and a receive among
/// them: the completions are the full path's.
#[test]
fn alternating_qps_complete_the_same_on_both_paths() {
    for size in [64, 128] {
        for room in [1, 2, 3, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let mut got = Vec::new();
                let mut id = 0u64;
                let mut pi = [0u16; 2];
                for round in 0..60 {
                    // Two on A in round 7 (a run of two), one each otherwise.
                    let on_a = if round == 7 { 2 } else { 1 };
                    for (pos, qpn, k) in [(0usize, QPN, on_a), (1, QPN_B, 1)] {
                        for _ in 0..k {
                            let qp = t.qp_at(pos).unwrap();
                            qp.post(&SendWr::write(id, R).inline(b"ab").signaled())
                                .unwrap();
                            dev.push(req_cqe(qpn, pi[pos], op::OPCODE_RDMA_WRITE, 0));
                            pi[pos] += 1;
                            id += 1;
                        }
                    }
                    if round == 20 {
                        dev.push(req_cqe(0x77, 0, op::OPCODE_RDMA_WRITE, 0));
                    }
                    if round == 30 {
                        t.qp_at(1).unwrap().post_recv(1000, &SGE).unwrap();
                        dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 0, 5, 0));
                    }
                    if round % 10 == 9 {
                        got.extend(drain(cq, t, room));
                    }
                }
                got
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let mut ids: Vec<u64> = flat(&fast).iter().map(|w| w.wr_id()).collect();
            assert_eq!(ids.iter().filter(|&&i| i == 1000).count(), 1);
            ids.retain(|&i| i != 1000);
            assert_eq!(
                ids,
                (0..121).collect::<Vec<u64>>(),
                "size {size} room {room}"
            );
            assert!(fast.iter().any(|r| r.is_err()), "the unknown QPN");
            assert!(counts[0] >= 100, "size {size} room {room}: {counts:?}");
        }
    }
}

/// Many laps of the CQ and of the send ring, READs among the WRITEs, polled with
/// several room sizes: both paths alike, the fast one serving all.
#[test]
fn the_cq_and_the_ring_wrap_alike_on_both_paths() {
    for size in [64, 128] {
        for room in [1, 7, 16] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let mut got = Vec::new();
                let mut id = 0u64;
                for _ in 0..13 {
                    let qp = t.qp_at(0).unwrap();
                    let first = qp.sq_pi();
                    for i in 0..15u16 {
                        let wr = if i % 4 == 3 {
                            SendWr::read(id, R).sges(&SGE).signaled()
                        } else {
                            SendWr::write(id, R).inline(b"abc").signaled()
                        };
                        qp.post(&wr).unwrap();
                        let (op, n) = if i % 4 == 3 {
                            (mlx5_wqe::OPCODE_RDMA_READ, 16)
                        } else {
                            (mlx5_wqe::OPCODE_RDMA_WRITE, 0)
                        };
                        dev.push(req_cqe(QPN, first.wrapping_add(i), op, n));
                        id += 1;
                    }
                    got.extend(drain(cq, t, room));
                }
                got
            });
            assert_eq!(fast, slow, "size {size} room {room}");
            let all = flat(&fast);
            assert_eq!(all.len(), 13 * 15);
            assert!(all.iter().enumerate().all(|(i, w)| w.wr_id() == i as u64));
            assert_eq!(counts, [195, 0, 0, 0], "size {size} room {room}");
        }
    }
}
