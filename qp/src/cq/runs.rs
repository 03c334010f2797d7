//! The runs of the fast poll: CQEs of one QP in consecutive slots, compared with what the
//! next must be in one instruction ([`copy_run`], for sends, receives and flushes), and CQEs of
//! many QPs interleaved, each CQE's QP found anew ([`distinct_loop`]).

use super::{owned_cqe, Resolve};
use crate::qp::Qp;
use crate::queue::WorkQueue;
use crate::wc::Wc;
use mlx5_cq::{
    CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND_INV, CQE_RESP_WR_IMM, SYNDROME_WR_FLUSH_ERR,
};
use mlx5_hw::{mmio, QpState};

/// The rest of a run of common send completions of `qp` after [`send_one`](super::send_one) took
/// its first: from the CQE at `cqe` (the next slot of the CQ), while each is a plain REQ CQE of
/// this lap (`op_own == own`, read volatile, then the barrier, then its bytes 56..64) naming the
/// QP's oldest outstanding WQE — QPN and `wqe_counter` in one compare ([`LeanRun::expect`]) — write
/// its completion (the WR id and the CQE's bytes: `Wc::write_req`) and retire it. Only while every
/// outstanding WQE is of the common shape (one block, not an atomic): then each CQE retires exactly
/// one block, and the WQE it must name is the next one. At most `out_room` (the entries of `out`),
/// `lap` (the CQEs left in the CQ's lap from `cqe`), the outstanding blocks and the blocks to the
/// send ring's end (the slots are then consecutive). Returns the CQEs consumed (the QP's
/// bookkeeping moved, the CQ's consumer index not).
///
/// Out of line, in a loop over locals: after the load barrier LLVM would otherwise reload
/// every field of the QP per CQE, and inline its registers would crowd the caller's loop.
///
/// # Safety
/// `out` has `out_room` entries; `cqe` is the first of `lap` CQEs of this lap, `1 << SHIFT` bytes
/// apart (when `lap` is 0 it may point past the buffer: nothing is read);
/// [`send_one`](super::send_one) just took the QP's previous CQE (so every outstanding WQE is of
/// the common shape).
#[inline(never)]
pub(super) unsafe fn send_more<const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *const u8,
    own: u8,
    out_room: usize,
    lap: usize,
    out: *mut Wc,
) -> usize {
    // `send_one` took this QP's previous CQE: every outstanding WQE is of the common shape
    // (retiring keeps it so), checked there.
    let key = qp.cqe_qpn_key();
    // SAFETY: the caller's; `lap` bounds the CQEs read.
    unsafe {
        queue_run::<_, REQ_RUN, SHIFT>(qp.send_queue(), key, cqe, own, None, out_room.min(lap), out)
    }
}

/// A run of CQEs of one queue from the slot of its oldest outstanding WR — the send queue's
/// for [`send_more`] and a send flush, the QP's own receive queue's for [`recv_run`] and a
/// receive flush: at most `room` CQEs (and the outstanding WRs, and those to the ring's end:
/// the slots are then consecutive) through [`copy_run`] of `KIND`, and what they retired
/// told to the queue ([`WorkQueue::retired`]). 0 when the queue has no window
/// ([`WorkQueue::window`]: a receive queue out of order, an SRQ's). `qpn_key` is the QP's
/// ([`Qp::cqe_qpn_key`]); `first` the first CQE's bytes 56..64 when the caller read them. A
/// send queue's outstanding WQEs are all of the common shape (the caller checked).
///
/// # Safety
/// As [`copy_run`] for `room` CQEs from `cqe` and `room` entries of `out`.
#[inline(always)]
pub(super) unsafe fn queue_run<Q: WorkQueue, const KIND: u8, const SHIFT: u32>(
    q: &mut Q,
    qpn_key: u64,
    cqe: *const u8,
    want: u8,
    first: Option<u64>,
    room: usize,
    out: *mut Wc,
) -> usize {
    let Some(v) = q.window() else {
        return 0;
    };
    let slot = (v.oldest & v.mask) as usize;
    let n = room
        .min(v.outstanding as usize)
        .min((v.mask as usize - slot) + 1);
    // Bytes 56..62 of a CQE of this QP naming WR `oldest`: the QPN's part (for a responder
    // CQE as for a REQ CQE: bits 31:24 of `sop_drop_qpn` are outside the compare), the counter
    // BE16 (for a flush one byte up, behind the syndrome).
    let expect = if KIND == FLUSH_RUN {
        flush_expect(qpn_key, v.oldest)
    } else {
        LeanRun::expect(qpn_key, v.oldest)
    };
    // SAFETY: slot < wqe_cnt: its WR id; the caller's for the CQEs and `out`.
    let i =
        unsafe { copy_run::<KIND, SHIFT>(cqe, want, expect, first, v.wr_ids.add(slot), n, out) };
    q.retired(i as u16);
    i
}

/// What a [`copy_run`] takes: plain REQ CQEs ([`Wc::write_req`]).
pub(super) const REQ_RUN: u8 = 0;
/// What a [`copy_run`] takes: good responder CQEs ([`Wc::write_resp`]).
pub(super) const RESP_RUN: u8 = 1;
/// What a [`copy_run`] takes: error CQEs of syndrome WR_FLUSH_ERR ([`Wc::write_err`]).
pub(super) const FLUSH_RUN: u8 = 2;

/// Plain REQ CQEs of this lap from `cqe`, each naming the oldest outstanding WQE of its QP in
/// `table`, found for each CQE — what a CQ shared by many QPs sees, their CQEs interleaved: at most
/// `n` (at most the CQEs left in this lap from `cqe`, and the entries of `out`), each as
/// [`send_one`](super::send_one) takes it, until one is not such a CQE. (The caller enters it where
/// the next CQE is not of the QP it just served; a run of one QP met here costs the lookup per CQE,
/// not [`send_more`]'s one compare.) Returns the CQEs consumed (their QPs' bookkeeping moved, the
/// CQ's consumer index not).
///
/// Out of line, in a loop of its own: the caller's loop, shaped for runs of one QP, would
/// pay its run test and its consumer-index arithmetic per CQE.
///
/// # Safety
/// The `n` CQEs from `cqe` are inside this lap, `1 << SHIFT` bytes apart; `out` has `n`
/// entries.
#[inline(never)]
pub(super) unsafe fn distinct_run<R: Resolve + ?Sized, const SHIFT: u32>(
    table: &mut R,
    cqe: *const u8,
    own: u8,
    n: usize,
    out: *mut Wc,
) -> usize {
    // SAFETY: the caller's; a plain REQ CQE's `op_own` of this lap is `own`.
    unsafe { distinct_loop::<REQ_RUN, R, SHIFT>(table, cqe, own, n, out) }
}

/// Good responder CQEs of this lap from `cqe`, each with `op_own == want` (one kind of responder
/// CQE) and naming the oldest outstanding receive of its QP in `table`, found for each CQE — what a
/// receive CQ shared by many QPs sees: at most `n` (at most the CQEs left in this lap from `cqe`,
/// and the entries of `out`), each as the one-entry `recv_one` takes it, until one is not such a
/// CQE. Returns the CQEs consumed (their QPs' receive queues moved, the CQ's consumer index not).
///
/// Out of line, in a loop of its own, as [`distinct_run`]; the caller enters it where a
/// receive run ([`recv_run`]) ended at another good responder CQE.
///
/// # Safety
/// The `n` CQEs from `cqe` are inside this lap, `1 << SHIFT` bytes apart; `want` is a good
/// responder CQE's `op_own` of this lap ([`good_resp`]); `out` has `n` entries.
#[inline(never)]
pub(super) unsafe fn distinct_recv_run<R: Resolve + ?Sized, const SHIFT: u32>(
    table: &mut R,
    cqe: *const u8,
    want: u8,
    n: usize,
    out: *mut Wc,
) -> usize {
    // SAFETY: the caller's.
    unsafe { distinct_loop::<RESP_RUN, R, SHIFT>(table, cqe, want, n, out) }
}

/// The loop of [`distinct_run`] (`KIND` [`REQ_RUN`]: [`send_one`](super::send_one)) and
/// [`distinct_recv_run`] ([`RESP_RUN`]: the one-entry `recv_one`): while the CQE has
/// `op_own == want` (read volatile), the barrier, its bytes 56..64, its QP in `table`, and the
/// one-entry path's take of it. Returns the CQEs taken.
///
/// # Safety
/// As [`distinct_recv_run`], `want` an `op_own` of this lap of the kind `KIND` takes.
#[inline(always)]
pub(super) unsafe fn distinct_loop<const KIND: u8, R: Resolve + ?Sized, const SHIFT: u32>(
    table: &mut R,
    cqe: *const u8,
    want: u8,
    n: usize,
    out: *mut Wc,
) -> usize {
    // The CQE and the entry move on together; the count is the entry's distance from `out`.
    let (mut c, mut o) = (cqe, out);
    // SAFETY: `out` has `n` entries: one past the last.
    let end = unsafe { out.add(n) };
    while o != end {
        // SAFETY: o < end: `c` is a CQE of this lap and `o` one of the entries; the CQE's
        // op_own read volatile (the device writes it), the rest after the ownership test and
        // the barrier.
        unsafe {
            if core::ptr::read_volatile(c.add(63)) != want {
                break;
            }
            let (tail, qp) = owned_cqe(table, c);
            let Some(qp) = qp else {
                break;
            };
            // `send_one` and `recv_one` spelled out: through them, with a `bool` to test,
            // LLVM keeps the counter in one more register and adds to the key in two
            // instructions (two more per CQE).
            let counter = u16::from_be(core::ptr::read_volatile(c.add(60) as *const u16));
            if KIND == REQ_RUN {
                if !qp.send_queue().names_oldest(counter) {
                    break;
                }
                Wc::write_req_cqe(o, c, tail);
                Wc::write_wr_id(o, qp.send_queue().take_oldest(counter));
            } else {
                if !qp.recv_queue().names_oldest(counter) {
                    break;
                }
                Wc::write_resp_cqe(o, c, tail);
                Wc::write_wr_id(o, qp.recv_queue().take_oldest(counter));
            }
            o = o.add(1);
            // Past the lap's end after its last CQE (then `o` is `end`: nothing is read).
            c = c.wrapping_add(1 << SHIFT);
        }
    }
    // SAFETY: `o` is `out` plus the entries written.
    unsafe { o.offset_from(out) as usize }
}

/// The loop of [`send_more`], [`recv_run`] and [`flush_run`]: from `cqe`, at most `n` CQEs
/// `1 << SHIFT` bytes apart, while each has `op_own == want` (read volatile, then the barrier, then
/// its bytes 56..64: rdma-core `get_sw_cqe`, then `udma_from_device_barrier`) and holds the QPN and
/// `wqe_counter` of `expect` (one compare, [`LeanRun::expect`]; one more counter each) — and for
/// [`FLUSH_RUN`] the syndrome WR_FLUSH_ERR — write its completion as `KIND` says with the WR id of
/// the next slot from `wr0`. `first`: the first CQE's bytes 56..64 when the caller read them
/// already after its owner test and barrier (`None`: that CQE is tested too). Returns the CQEs
/// taken.
///
/// # Safety
/// The `n` CQEs from `cqe` are inside the CQ's lap; `wr0` and `out` have `n` entries.
#[inline(always)]
pub(super) unsafe fn copy_run<const KIND: u8, const SHIFT: u32>(
    cqe: *const u8,
    want: u8,
    mut expect: u64,
    first: Option<u64>,
    wr0: *const u64,
    n: usize,
    out: *mut Wc,
) -> usize {
    let mut tail = first.unwrap_or(0);
    // One byte offset for the slot's WR id (8 bytes a slot), scaled for its CQE (64 bytes:
    // by 8; 128 bytes a CQE: by 16), and the completion's pointer.
    let end = n * 8;
    let mut j = 0;
    let mut o = out;
    while j != end {
        // SAFETY: j < 8 n: `o` is one of the entries, `wr0 + j / 8` the WR id of one slot,
        // `cqe + j << (SHIFT - 3)` inside this lap; its op_own read volatile (the device
        // writes it), the rest of it after the ownership test and the barrier.
        unsafe {
            let c = cqe.add(j << (SHIFT - 3));
            if j != 0 || first.is_none() {
                if core::ptr::read_volatile(c.add(63)) != want {
                    break;
                }
                mmio::from_device_barrier();
                tail = core::ptr::read_volatile(c.add(56) as *const u64);
            }
            let named = if KIND == FLUSH_RUN {
                // Bytes 55..63 (syndrome, `s_wqe_opcode_qpn`, `wqe_counter`, signature), one
                // unaligned load: the syndrome, QPN and counter in one compare. A plain load
                // (a volatile one of this alignment is eight): after the barrier the CQE is
                // the software's until the doorbell record passes it, and the barrier keeps
                // the compiler from moving the load before it.
                let w = core::ptr::read_unaligned(c.add(55) as *const u64);
                same_flush(u64::from_le(w), expect)
            } else {
                same_qpn_counter(u64::from_le(tail), expect)
            };
            if !named {
                break;
            }
            let wr_id = *(wr0 as *const u8).add(j).cast::<u64>();
            match KIND {
                RESP_RUN => Wc::write_resp(o, wr_id, c, tail),
                FLUSH_RUN => {
                    // Bytes 48..56 whole: the syndromes.
                    let err = core::ptr::read_volatile(c.add(48) as *const u64);
                    Wc::write_err(o, wr_id, err, tail);
                }
                _ => Wc::write_req(o, wr_id, c, tail),
            }
            o = o.add(1);
        }
        expect = expect.wrapping_add(if KIND == FLUSH_RUN {
            FLUSH_COUNTER_ONE
        } else {
            COUNTER_ONE
        });
        j += 8;
    }
    j / 8
}

/// The room a run has: `out` entries of the caller's array, and the CQ's lap from slot `idx`
/// of `cqe_cnt` (computed only by a run that goes past its first CQE).
#[derive(Clone, Copy)]
pub(super) struct Room {
    pub(super) out: usize,
    pub(super) idx: u32,
    pub(super) cqe_cnt: u32,
}

impl Room {
    /// CQEs left in this lap from slot `idx` (at least 1; the owner value is the lap's).
    #[inline(always)]
    pub(super) fn lap(self) -> usize {
        ((self.cqe_cnt - 1) - self.idx) as usize + 1
    }
}

/// The CQE at consumer index `ci` of a CQ of `cqe_cnt` CQEs `1 << SHIFT` bytes apart from
/// `cqe0` (the 64-byte CQE of its slot), its lap's owner value and the CQEs left in that lap
/// from it (at least 1).
#[inline(always)]
pub(super) fn cqe_at<const SHIFT: u32>(
    cqe0: *mut u8,
    cqe_cnt: u32,
    ci: u32,
) -> (*mut u8, u8, usize) {
    let idx = ci & (cqe_cnt - 1);
    // `wrapping_add`: the address only; idx < cqe_cnt, so it is a CQE of the buffer.
    let cqe = cqe0.wrapping_add((idx as usize) << SHIFT);
    (cqe, ((ci & cqe_cnt) != 0) as u8, (cqe_cnt - idx) as usize)
}

/// Whether `op_own` is a good responder CQE of this lap (owner value `own`) without inline
/// data: RESP_WR_IMM, RESP_SEND, RESP_SEND_IMM or RESP_SEND_INV, format 0, the solicited bit
/// either way (a completion does not report it; rdma-core's poll ignores it too).
#[inline(always)]
pub(super) fn good_resp(op_own: u8, own: u8) -> bool {
    good_resp_diff(op_own ^ own)
}

/// [`good_resp`] from `op_own ^ own` in one test: less 0x10, the opcodes 1..=4 are 0..=3 —
/// bits 7:6 clear; opcode 0 and those above 4 set one — and the format and owner bits stay:
/// bits 3:2 and 0 clear; SE, bit 1, either way.
#[inline(always)]
pub(super) fn good_resp_diff(diff: u8) -> bool {
    const { assert!(CQE_RESP_WR_IMM == 1 && CQE_RESP_SEND_INV == 4) };
    diff.wrapping_sub(CQE_RESP_WR_IMM << 4) & 0xcd == 0
}

/// A run of common receive completions of `qp` from the good responder CQE at `cqe`
/// ([`good_resp`], its `op_own` byte `want`, `tail` its bytes 56..64 read after the
/// barrier): while each CQE has that same `op_own` (the same kind, of this lap) and names the
/// QP's oldest outstanding receive on its own receive queue
/// ([`WorkQueue::window`]), write its completion — the CQE's bytes the
/// accessors of `Wc` take apart as rdma-core's `handle_responder` does, read after the
/// barrier — and retire it. At most `room` CQEs and the outstanding receives. Returns the CQEs
/// consumed, 0 when the first is not one of these (an SRQ, out of order: the full path).
///
/// Out of line: inline, its registers would crowd the send path's in the caller's loop.
///
/// # Safety
/// `room` (at least 1) is the entries of `out` and at most the CQEs left in the CQ's lap
/// from `cqe`; `cqe` is a software-owned CQE, `tail` its bytes 56..64 read after the
/// barrier, CQEs `1 << SHIFT` bytes apart.
#[inline(never)]
pub(super) unsafe fn recv_run<const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *mut u8,
    tail: u64,
    want: u8,
    room: usize,
    out: *mut Wc,
) -> usize {
    let key = qp.cqe_qpn_key();
    // SAFETY: the caller's.
    unsafe {
        queue_run::<_, RESP_RUN, SHIFT>(qp.recv_queue(), key, cqe, want, Some(tail), room, out)
    }
}

/// A run of flush completions of `qp` from the error CQE at `cqe` — REQ_ERR for its send
/// queue, RESP_ERR for its own receive queue (`want`, its `op_own` byte: format 0, this lap;
/// `tail` its bytes 56..64 read after the barrier): while each CQE has that same `op_own`,
/// syndrome WR_FLUSH_ERR and names the queue's oldest outstanding WQE, write its
/// `IBV_WC_WR_FLUSH_ERR` completion ([`Wc::write_err`]: the CQE's bytes, the status its
/// syndrome's) and retire it. That is what the full path does for such a CQE
/// ([`crate::sq::SendQueue::complete`], [`crate::rq::RecvQueue::complete`]: one completion,
/// nothing skipped before it), and as it does, the QP follows the device to Error (or SQE)
/// and a send queue's first error begins its flushing (`Qp::sq_begin_flush`). The opcode a
/// send's flush reports is the CQE's (`s_wqe_opcode`: the WQE's opcode as posted).
///
/// A send queue only while every outstanding WQE is of the common shape (one block, not an
/// atomic: then each CQE retires one block); a receive queue only when its lean view allows
/// ([`WorkQueue::window`]: not an SRQ, nothing out of order). At most `room`
/// CQEs, the outstanding WQEs and those to the ring's end. Returns the CQEs consumed, 0
/// when the first is not one of these.
///
/// Out of line, as [`recv_run`].
///
/// # Safety
/// As [`recv_run`].
#[inline(never)]
pub(super) unsafe fn flush_run<const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *mut u8,
    tail: u64,
    want: u8,
    room: usize,
    out: *mut Wc,
) -> usize {
    if want >> 4 == CQE_REQ_ERR {
        let key = qp.cqe_qpn_key();
        let sq = qp.send_queue();
        if !sq.all_common() {
            return 0;
        }
        // Before the run: the retires may end an error period (`SendQueue::recovered`).
        let (flushing, old) = (sq.flushing(), sq.before_recovery());
        // SAFETY: the caller's (the first CQE read already).
        let i =
            unsafe { queue_run::<_, FLUSH_RUN, SHIFT>(sq, key, cqe, want, Some(tail), room, out) };
        if (i != 0) & !flushing {
            qp.sq_begin_flush(old);
        }
        i
    } else {
        let (key, rq) = (qp.cqe_qpn_key(), qp.recv_queue());
        // SAFETY: the caller's (the first CQE read already).
        let i =
            unsafe { queue_run::<_, FLUSH_RUN, SHIFT>(rq, key, cqe, want, Some(tail), room, out) };
        if (i != 0) & (qp.state() != QpState::Error) {
            qp.follow_error_completion(false);
        }
        i
    }
}

/// Whether `op_own` is an error CQE of this lap (owner value `own`), REQ_ERR or RESP_ERR,
/// format 0 ([`flush_run`] takes it when it is a flush).
#[inline(always)]
pub(super) fn error_of_lap(op_own: u8, own: u8) -> bool {
    const { assert!(CQE_RESP_ERR == CQE_REQ_ERR + 1 && CQE_REQ_ERR == 0xd) };
    // `op_own ^ own` is 0xd0 or 0xe0 exactly when that difference from 0xd0 is 0 or 0x10.
    (op_own ^ own).wrapping_sub(CQE_REQ_ERR << 4) & 0xef == 0
}

/// One run of the lean poll ([`Cq::poll_send`](super::Cq::poll_send)): `k` CQEs at most from `cqe`,
/// the WQEs' slots consecutive from `meta` / `wr_ids`, the WR ids to `out`.
pub(crate) struct LeanRun {
    pub(super) cqe: *const u8,
    /// The owner bit of this lap: a plain REQ CQE's whole `op_own`.
    pub(super) own: u8,
    /// QPN and `wqe_counter` the first CQE must carry ([`LeanRun::expect`]).
    pub(super) expect: u64,
    pub(super) meta: *const u8,
    pub(super) wr_ids: *const u64,
    pub(super) out: *mut u64,
    pub(super) k: usize,
}

/// Bytes 1..=5 of a CQE's last 8 (bytes 57..62: QPN, `wqe_counter`) in a little-endian load.
pub(super) const QPN_COUNTER: u64 = 0x0000_ffff_ffff_ff00;
/// Whether `tail` (bytes 56..64 of a CQE, a little-endian load) holds the QPN and
/// `wqe_counter` of `expect` ([`LeanRun::expect`]): `tail & QPN_COUNTER == expect`, in shifts
/// that need no 64-bit constant in a register (`copy_run` has none to spare).
#[inline(always)]
pub(super) fn same_qpn_counter(tail: u64, expect: u64) -> bool {
    // Drop bytes 62, 63 (shift left 16), then byte 56 (shift right 24).
    ((tail ^ expect) << 16) >> 24 == 0
}

/// Bytes 55, 57..62 of a CQE (syndrome, QPN, `wqe_counter`) in a little-endian load of its
/// bytes 55..63.
pub(super) const FLUSH_MASK: u64 = QPN_COUNTER << 8 | 0xff;
/// Whether `w` (bytes 55..63 of an error CQE, a little-endian load) holds the syndrome, QPN
/// and `wqe_counter` of `expect` ([`flush_expect`]).
#[inline(always)]
pub(super) fn same_flush(w: u64, expect: u64) -> bool {
    (w ^ expect) & FLUSH_MASK == 0
}

/// What a little-endian load of bytes 55..63 of a flush CQE of the QP whose
/// [`crate::cqe_key::qpn_key`] is `qpn_key` naming block `ci` holds under [`FLUSH_MASK`]: the
/// syndrome WR_FLUSH_ERR (byte 55 of `struct mlx5_err_cqe`), then [`LeanRun::expect`]'s
/// bytes one place up.
#[inline(always)]
pub(super) fn flush_expect(qpn_key: u64, ci: u16) -> u64 {
    LeanRun::expect(qpn_key, ci) << 8 | SYNDROME_WR_FLUSH_ERR as u64
}

/// [`COUNTER_ONE`] in [`flush_expect`]'s load (one byte up).
pub(super) const FLUSH_COUNTER_ONE: u64 = COUNTER_ONE << 8;

/// One more `wqe_counter` in that load: +1 to its low byte (byte 61). A carry out of that byte
/// lands in the signature byte, outside the mask: the CQE then does not match and ends the
/// run; the next call starts afresh from the send queue's index.
pub(super) const COUNTER_ONE: u64 = 1 << 40;

impl LeanRun {
    /// What a little-endian load of bytes 56..64 of a REQ CQE naming block `pi` of the QP
    /// whose key is `qpn_key` holds under [`QPN_COUNTER`] ([`crate::cqe_key::expect`]).
    #[inline(always)]
    pub(super) fn expect(qpn_key: u64, pi: u16) -> u64 {
        crate::cqe_key::expect(qpn_key, pi)
    }

    /// Consume CQEs while each is a successful REQ CQE naming the next WQE (and, with
    /// `CHECK_META`, that WQE's meta byte is 0; without, the caller knows all are); returns
    /// how many. CQEs are `1 << SHIFT` bytes apart.
    ///
    /// # Safety
    /// `cqe` is a CQE of the buffer with `k - 1` more after it; `meta`, `wr_ids` and `out`
    /// hold `k` entries.
    #[inline(always)]
    pub(super) unsafe fn run<const CHECK_META: bool, const SHIFT: u32>(self) -> usize {
        let LeanRun {
            mut cqe,
            own,
            mut expect,
            meta,
            wr_ids,
            out,
            k,
        } = self;
        // Index from -k up to 0 against the ends of the arrays: the loop's count is its index.
        // SAFETY: k entries each.
        let (meta_end, wr_end, out_end) = unsafe { (meta.add(k), wr_ids.add(k), out.add(k)) };
        let mut j = -(k as isize);
        while j != 0 {
            // SAFETY: the CQE is inside the buffer (fewer than k so far); op_own volatile (the
            // device writes it); the other bytes read after the ownership test and its
            // barrier (rdma-core `get_sw_cqe`, then `udma_from_device_barrier`); `end + j`
            // (-k <= j < 0) is one of the k entries.
            unsafe {
                if core::ptr::read_volatile(cqe.add(63)) != own {
                    break;
                }
                mmio::from_device_barrier();
                let tail = u64::from_le(core::ptr::read_volatile(cqe.add(56) as *const u64));
                if tail & QPN_COUNTER != expect || (CHECK_META && *meta_end.offset(j) != 0) {
                    break;
                }
                *out_end.offset(j) = *wr_end.offset(j);
                cqe = cqe.add(1 << SHIFT);
            }
            expect = expect.wrapping_add(COUNTER_ONE);
            j += 1;
        }
        (k as isize + j) as usize
    }
}
