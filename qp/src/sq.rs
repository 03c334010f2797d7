//! The send queue: the ring of 64-byte basic blocks, its producer and consumer indices, the
//! per-block bookkeeping that turns a CQE's `wqe_counter` back into WRs, and the doorbell.
//!
//! Indices are free-running 16-bit counters in basic blocks, like rdma-core's `sq.cur_post` and
//! UCX's `sw_pi` (`docs/sources.md` §4): `pi` is the next block to write, `ci` the first block
//! not yet retired. The WQE starting at block `p` carries `p` in its ctrl `wqe_index`, and a
//! requester CQE returns it as `wqe_counter` (`docs/sources.md` §4). Retiring up to a completed
//! WQE frees every block before it too, so the unsignaled WQEs a signaled one follows give
//! their blocks back without a CQE of their own (rdma-core `wqe_head`, UCX `hw_ci`).
//!
//! Here: the queue and the post side's bookkeeping. Beside it: `gates` (the bounds a lean
//! post compares its producer index with), `doorbell` (the
//! register and the modes of ringing it), `ring` (the doorbell and BlueFlame sequences),
//! `complete` (what a CQE retires, the lean polls' views,
//! the error period), `tests`.

mod complete;
mod doorbell;
mod gates;
mod ring;
#[cfg(test)]
pub(crate) use ring::rung;

pub(crate) use doorbell::Doorbell;
pub use doorbell::DoorbellMode;

use crate::lines::LineArray;
use crate::wc::WcStatus;
use mlx5_wqe::ring::SqRing;

/// What the data path remembers about the WQE that starts at a block, beyond its WR id: one
/// byte, 0 for the common shape (one block, not an atomic), so that a post of that shape
/// stores nothing but the WR id. The opcode is not kept: the WQE's ctrl segment stays in the
/// ring until the WQE is retired, and its byte 3 is the opcode (rdma-core `handle_good_req`
/// reads the same value from the CQE's `sop_drop_qpn`). Whether the WQE was signaled is not
/// kept either: a success CQE names the WQE it completes, and that WQE gets the completion
/// (the device writes one only for a signaled WQE; rdma-core reports every CQE it polls);
/// the WQEs before it are the unsignaled ones it retires silently.
///
/// Invariant: a slot's byte is non-zero only while a WQE that starts there is outstanding;
/// every path that retires a WQE clears its byte (the lean poll retires only WQEs whose byte
/// is 0), so a free slot needs no store for a common-shape post.
pub(crate) mod meta {
    /// Bits 3:0: blocks - 1.
    const BBS: u8 = 0x0f;
    /// Bits 5:4: the atomic operand size (the completion's byte_len): 1 = 4 bytes, 2 = 8.
    const ATOMIC_SHIFT: u32 = 4;

    /// The byte of a WQE of `bbs` blocks (1..=16).
    #[inline(always)]
    pub const fn encode(bbs: u32, atomic_size: u8) -> u8 {
        let a = match atomic_size {
            4 => 1,
            8 => 2,
            _ => 0,
        };
        (bbs.wrapping_sub(1) as u8 & BBS) | a << ATOMIC_SHIFT
    }
    /// Blocks the WQE occupies.
    #[inline(always)]
    pub const fn bbs(m: u8) -> u16 {
        (m & BBS) as u16 + 1
    }
    /// Operand size of an atomic, 0 otherwise.
    #[inline(always)]
    pub const fn atomic_size(m: u8) -> u8 {
        match (m >> ATOMIC_SHIFT) & 3 {
            1 => 4,
            2 => 8,
            _ => 0,
        }
    }
}

/// The fields of a CQE the queues need to build completions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqeInfo {
    pub qpn: u32,
    /// The `MLX5_OPCODE_*` of the WQE the CQE names, from its bits 31:24 of `sop_drop_qpn`
    /// (`s_wqe_opcode` in an error CQE): the completion's opcode, decoded from the CQE as the
    /// lean paths decode it (rdma-core `handle_good_req`; UCX `uct_ib_mlx5_cqe_err_opcode`
    /// reads it from error CQEs too).
    pub send_opcode: u8,
    pub status: WcStatus,
    pub syndrome: u8,
    pub vendor_err: u8,
    pub byte_cnt: u32,
}

/// How far handing one CQE to a queue got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The CQE is fully accounted for; this many completions were written.
    Done(usize),
    /// The output array filled up before the CQE was accounted for; this many completions were
    /// written and the CQE must be handed over again (the queue remembers where it stopped).
    Partial(usize),
    /// The CQE names no outstanding WQE.
    Bad(&'static str),
}

/// Inline payloads of at most this many bytes take the lean inline gate, which stands for
/// the length check: it is open only when the QP's inline limits allow them (a WRITE's ctrl,
/// raddr and inline header leave 12 bytes of the first block).
pub(crate) const LEAN_INLINE: usize = 12;

/// Control-segment word 0..8 in memory order: `opmod | wqe_index | opcode` (BE32) then
/// `qpn | ds` (BE32), as one native `u64` (rdma-core `mlx5dv_set_ctrl_seg`).
#[inline(always)]
fn pack_be32s(first: u32, second: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&first.to_be_bytes());
    b[4..].copy_from_slice(&second.to_be_bytes());
    u64::from_ne_bytes(b)
}

/// The send side of a QP.
#[derive(Debug)]
pub(crate) struct SendQueue {
    pub ring: SqRing,
    /// `&dbrec[MLX5_SND_DBR]`.
    dbrec: *mut u32,
    pub db: Doorbell,
    /// The lean gate of the fast doorbell sequence ([`SendQueue::ring_bf_post`]): open in
    /// [`DoorbellMode::BfPost`] with a one-block BlueFlame copy. A lean post (at most `wr_bbs`
    /// blocks) may go ahead while `pi < gate` — one unsigned comparison standing for the QP's
    /// state, type and data limits, nothing pending, the doorbell mode and room for a WR and
    /// its blocks. An open gate is `ci + min(max_post + extra, lean_cap)`
    /// ([`SendQueue::gates`]); a closed one is at most `ci`, which `pi` never is below.
    /// Retiring `k` blocks adds `k` to both gates (a closed one stays at most `ci`); a lean
    /// post of more than one block moves the open ones ([`SendQueue::lean_extra`]).
    pub fast: u64,
    /// The producer index: blocks ever posted, free-running (its low 16 bits are the next
    /// WQE's `wqe_index`; 64 bits never wrap, so the lean gate is one unsigned comparison).
    pub pi: u64,
    /// The consumer index: blocks ever retired.
    pub ci: u64,
    /// `wqe_cnt - 1`.
    mask: u64,
    /// The lean gate of any other doorbell sequence ([`SendQueue::ring_with`]).
    pub other: u64,
    /// `(wqe_cnt - 1) × 8`: ANDed with `pi × 8` it gives the byte offset of a slot's WR id,
    /// and eight times that is the offset of its block — one mask for both addresses
    /// (x86 addressing scales by 8, not by 64).
    mask8: u64,
    /// The WR id of the WQE that starts at each block.
    wr_ids: LineArray<u64>,
    /// The [`meta`] byte of the WQE that starts at each block (0 elsewhere).
    meta: LineArray<u8>,
    /// How many bytes of `meta` are not 0 (outstanding WQEs of an uncommon shape): while
    /// none is, the lean poll need not read them.
    uncommon: u32,
    /// The one-entry poll's key
    /// ([`WorkQueue::take_oldest`](crate::queue::WorkQueue::take_oldest)): `ci`'s low 16 bits, plus
    /// [`KEY_SHUT`] while `uncommon` is not 0 — equal to a CQE's `wqe_counter` exactly when
    /// that names the oldest outstanding block and every outstanding WQE is common. A lean
    /// retire adds to it like to `ci`; the carry when `ci`'s low bits wrap shuts it too (a
    /// spurious shut only sends a CQE to the full path, which resyncs it).
    key: u32,
    /// WQEs written since the last doorbell.
    pending: u32,
    /// The last written WQE's first block, for the doorbell (it ends at `pi`: its size is
    /// `SendQueue::blocks_from`).
    last_ctrl: *mut u8,
    /// Where the current error period ends: while `ci` is below it, every retired WQE is
    /// reported ([`SendQueue::flushing`]). 0 when there is none, `u64::MAX` from the first
    /// error CQE on ([`SendQueue::begin_error`]), `pi` when the control path moved the QP
    /// from SQE back to RTS ([`SendQueue::recovered`]): the WQEs posted from then on complete
    /// as before the error.
    error_end: u64,
    /// `pi` at the last recovery from SQE to RTS ([`SendQueue::recovered`]), 0 before any:
    /// the WQEs below it belong to an error period the QP was recovered from, whether or not
    /// its error CQE has been polled yet.
    recovered_at: u64,
    /// WRs outstanding at most (rdma-core `sq.max_post`, [`crate::wr_limit`]).
    max_post: u32,
    /// `wqe_cnt / max_post`, the blocks a lean WQE may take ([`crate::Qp`]'s fast limits).
    wr_bbs: u32,
    /// Blocks beyond the first of every outstanding WQE (Σ bbs − 1): the outstanding WRs are
    /// the outstanding blocks less this. Only WQEs with a non-zero [`meta`] byte add to it.
    extra: u32,
    /// Outstanding blocks below which a WQE of `wr_bbs` blocks fits the ring: `wqe_cnt −
    /// wr_bbs + 1`. An open RC gate is `ci` plus the least of this and `max_post + extra`
    /// (below which a WR is free: the outstanding WRs are the blocks less `extra`).
    lean_cap: u64,
    /// The lean gate of a post in a [`crate::Batch`] (no doorbell: any mode), open only while
    /// `in_batch`; `fast` and `other` are closed then, so that a lean post outside the batch
    /// (the batch guard forgotten) takes the generic path, which rings for the batch first.
    /// Nothing retires while a batch holds the QP, so this gate does not follow `ci`.
    pub batch: u64,
    /// A [`crate::Batch`] is open ([`SendQueue::begin_batch`]).
    in_batch: bool,
    /// WQEs written by lean batch posts since the last doorbell (`pending` counts the generic
    /// ones; `last_ctrl` names the last of either).
    batch_n: u32,
    /// Whether the QP's inline limits allow [`LEAN_INLINE`] bytes ([`crate::Qp`] decides).
    inline_ok: bool,
    /// Whether the QP allows a gather entry ([`crate::Qp`] decides).
    sge_ok: bool,
    /// Whether the QP's state and type allow lean posts ([`crate::Qp`] decides).
    open: bool,
    /// The gates of the lean DC post (`Qp::post_dc_write_inline`), as `fast` and `other` are
    /// the RC shapes': a lean DC post may go ahead while `pi` is below the gate of its
    /// doorbell sequence ([`SendQueue::dc_gates`] says when they open and to what). Shut (0)
    /// on any QP but a DCI. A retire of the full path, where a DCI's completions go (its
    /// WQEs are of more than one block but for an empty SEND), refreshes them
    /// ([`SendQueue::refresh_gate`]); a lean retire does not, which only closes them earlier:
    /// a DC post that finds its gate shut refreshes it before it takes the generic path.
    pub dc_fast: u64,
    pub dc_other: u64,
    /// Whether the QP is a DCI whose state and limits allow lean DC posts ([`crate::Qp`]
    /// decides).
    dc_open: bool,
}

/// [`SendQueue`]'s `key` while an outstanding WQE is of an uncommon shape: any bit above
/// the low 16 set makes it differ from every CQE's `wqe_counter`.
const KEY_SHUT: u32 = 1 << 16;

/// One more retire in a one-entry poll's key (the send queue's or a receive queue's), the
/// key read afresh: the caller has just compared it with the CQE's `wqe_counter`, and LLVM,
/// knowing the two equal, would otherwise add to the counter in a register — two
/// instructions, the counter kept alive for them past the slot's mask — where one add to
/// memory does (and the mask is then applied to the counter in place).
#[inline(always)]
pub(crate) fn bump_key(key: &mut u32) {
    // SAFETY: a reference: valid, aligned, this thread's alone. Volatile only so that the
    // load is not replaced by the value it was compared with.
    let k = unsafe { core::ptr::read_volatile(key) };
    *key = k.wrapping_add(1);
}

impl SendQueue {
    /// # Safety
    /// `ring`, `dbrec` (pointing at `dbrec[1]`) and `db.reg` are valid as [`crate::Qp`]'s
    /// constructor requires; `ring.wqe_cnt()` is a power of two no larger than 32768.
    ///
    /// `max_post` (≤ `wqe_cnt`) is the WR limit ([`crate::wr_limit::max_post`]).
    pub unsafe fn new(ring: SqRing, dbrec: *mut u32, db: Doorbell, max_post: u32) -> SendQueue {
        let n = ring.wqe_cnt() as usize;
        let max_post = max_post.clamp(1, n as u32);
        let mut sq = SendQueue {
            ring,
            dbrec,
            db,
            pi: 0,
            ci: 0,
            mask: (n - 1) as u64,
            mask8: ((n - 1) * 8) as u64,
            wr_ids: LineArray::zeroed(n),
            meta: LineArray::zeroed(n),
            uncommon: 0,
            key: 0,
            pending: 0,
            last_ctrl: ring.start(),
            error_end: 0,
            recovered_at: 0,
            max_post,
            wr_bbs: 1,
            extra: 0,
            lean_cap: 1,
            fast: 0,
            other: 0,
            batch: 0,
            in_batch: false,
            batch_n: 0,
            inline_ok: false,
            sge_ok: false,
            open: false,
            dc_fast: 0,
            dc_other: 0,
            dc_open: false,
        };
        sq.set_max_post(max_post);
        sq
    }

    /// Blocks in flight (posted and not retired).
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        (self.pi - self.ci) as u32
    }

    /// Blocks free for new WQEs.
    #[inline(always)]
    pub fn free(&self) -> u32 {
        self.ring.wqe_cnt() - self.outstanding()
    }

    /// WRs that may still be posted (`max_post` less the outstanding WRs).
    #[inline(always)]
    pub fn free_wrs(&self) -> u32 {
        self.max_post - self.outstanding_wrs()
    }

    /// WRs posted and not retired: one per outstanding WQE.
    #[inline(always)]
    pub fn outstanding_wrs(&self) -> u32 {
        self.outstanding() - self.extra
    }

    /// The blocks a lean WQE may take (`wqe_cnt / max_post`).
    #[inline(always)]
    pub fn wr_bbs(&self) -> u32 {
        self.wr_bbs
    }

    /// The `wqe_index` of the next WQE.
    #[inline(always)]
    pub fn pi16(&self) -> u16 {
        self.pi as u16
    }

    /// Replace the WR limit (1..=`wqe_cnt`; the caller checked, and that nothing is
    /// outstanding).
    pub fn set_max_post(&mut self, max_post: u32) {
        let n = self.ring.wqe_cnt();
        debug_assert!(self.pi == self.ci && (1..=n).contains(&max_post));
        self.max_post = max_post;
        self.wr_bbs = n / max_post;
        self.lean_cap = (n - self.wr_bbs + 1) as u64;
        self.refresh_gates();
    }

    /// The WR limit (rdma-core `sq.max_post`).
    #[inline(always)]
    pub fn max_post(&self) -> u32 {
        self.max_post
    }

    /// The bookkeeping slot (and ring block) of producer index `pi`.
    #[inline(always)]
    pub fn slot(&self, pi: u64) -> usize {
        (pi & self.mask) as usize
    }

    /// The next WQE's slot as `slot × 8` (the byte offset of its WR id) and its block's
    /// address (`ring + slot × 64`), for a lean post.
    #[inline(always)]
    pub fn lean_slot(&self) -> (usize, *mut u8) {
        let off8 = ((self.pi << 3) & self.mask8) as usize;
        // SAFETY: off8 / 8 < wqe_cnt: the block is inside the ring.
        (off8, unsafe { self.ring.start().add(off8 * 8) })
    }

    /// The block after the one of slot × 8 `off8` ([`SendQueue::lean_slot`]): the next in
    /// the ring, or its first after its last.
    #[inline(always)]
    pub fn lean_next_block(&self, off8: usize) -> *mut u8 {
        let next8 = (off8 as u64 + 8) & self.mask8;
        // SAFETY: next8 / 8 < wqe_cnt: the block is inside the ring.
        unsafe { self.ring.start().add(next8 as usize * 8) }
    }

    /// Write the control segment of the WQE at `ctrl` (which starts at block `pi`) as two
    /// 64-bit stores, byte for byte what `mlx5_wqe::CtrlSeg::builder()` builds with
    /// signature 0 (rdma-core `mlx5dv_set_ctrl_seg`): `qpn_shifted` is `qpn << 8`.
    ///
    /// # Safety
    /// `ctrl` is the 64-byte block of producer index `pi` inside the ring.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn write_ctrl(
        ctrl: *mut u8,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qpn_shifted: u32,
        ds: u32,
        fm_ce_se: u8,
        imm_be: u32,
    ) {
        let w0 = pack_be32s(
            (opmod as u32) << 24 | (pi as u32) << 8 | opcode as u32,
            qpn_shifted | ds,
        );
        // Bytes 8..16: signature 0, DCI stream id 0, fm_ce_se, then the immediate as given.
        let w1 = pack_be32s(fm_ce_se as u32, u32::from_be(imm_be));
        let p = ctrl as *mut u64;
        // SAFETY: the caller guarantees the block; it is 64-byte aligned.
        unsafe {
            p.write(w0);
            p.add(1).write(w1);
        }
    }

    /// Whether a lean post may go ahead: `pi` is below `gate` (`fast`, `other`, `batch`,
    /// `dc_fast` or `dc_other`).
    #[inline(always)]
    pub fn lean_open(&self, gate: u64) -> bool {
        self.debug_check();
        self.pi < gate
    }

    /// In debug builds, check the counters the hot paths keep incrementally against their
    /// definitions (the meta bytes only on small rings: the count is a scan).
    #[inline(always)]
    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        {
            let (fast, other, batch) = self.gates();
            // The batch gate does not follow retires (none happen while a batch holds the
            // QP; after a forgotten guard it may lag, which only closes it earlier).
            debug_assert!(self.batch <= batch.max(self.ci), "the batch gate");
            // The DC gates do not follow lean retires: never above the free WRs, and
            // open only where their conditions hold.
            let wr_bound = self.ci + self.max_post as u64 + self.extra as u64;
            for (gate, fast) in [(self.dc_fast, true), (self.dc_other, false)] {
                debug_assert!(gate <= wr_bound, "a DC gate above the WRs");
                if gate > self.pi {
                    debug_assert!(
                        self.dc_open && self.pending == 0 && !self.in_batch,
                        "a DC gate open"
                    );
                    debug_assert_eq!(self.dc_mode_gate(), Some(fast), "the DC gate of the mode");
                }
            }
            for (have, want) in [(self.fast, fast), (self.other, other)] {
                if want > self.ci {
                    debug_assert_eq!(have, want, "an open gate");
                } else {
                    debug_assert!(have <= self.ci, "a closed gate");
                }
            }
            debug_assert!(self.pi - self.ci <= self.ring.wqe_cnt() as u64);
            // Exact, or shut by a wrap of `ci`'s low bits (resynced by the full path).
            debug_assert!(
                self.key == self.key_of()
                    || self.key as u16 == self.ci as u16 && self.key >= KEY_SHUT,
                "the one-entry poll's key"
            );
            debug_assert!(self.outstanding_wrs() <= self.max_post);
            if self.meta.len() <= 256 {
                let n = self.meta.iter().filter(|&&m| m != 0).count() as u32;
                debug_assert_eq!(self.uncommon, n, "uncommon WQEs counted");
                let (mut w, mut wrs) = (self.ci, 0);
                while w < self.pi {
                    let bbs = meta::bbs(self.meta_at(self.slot(w)));
                    wrs += 1;
                    w += bbs as u64;
                }
                debug_assert_eq!(w, self.pi, "the WQE chain ends at pi");
                debug_assert_eq!(self.outstanding_wrs(), wrs, "outstanding WRs");
            }
        }
    }

    /// Remember the WQE starting at `slot`: its WR id, and its meta byte when it is not 0
    /// (the slot's byte is 0 while it is free, [`meta`]'s invariant).
    #[inline(always)]
    fn record(&mut self, slot: usize, wr_id: u64, m: u8) {
        debug_assert!(slot < self.wr_ids.len() && slot < self.meta.len());
        debug_assert_eq!(self.meta[slot], 0, "a free slot's meta byte is 0");
        // SAFETY: `slot` is `pi & mask` < wqe_cnt, the length of both arrays.
        unsafe { *self.wr_ids.get_unchecked_mut(slot) = wr_id };
        if m != 0 {
            self.mark_uncommon(slot, m);
        }
    }

    /// Give the WQE starting at free slot `slot` its non-zero [`meta`] byte `m` and count it.
    #[inline(always)]
    fn mark_uncommon(&mut self, slot: usize, m: u8) {
        debug_assert!(m != 0 && slot < self.meta.len());
        debug_assert_eq!(self.meta[slot], 0, "a free slot's meta byte is 0");
        // SAFETY: every caller passes `x & mask` < wqe_cnt, the array's length.
        unsafe { *self.meta.get_unchecked_mut(slot) = m };
        self.uncommon += 1;
        self.key |= KEY_SHUT;
        self.extra += meta::bbs(m) as u32 - 1;
    }

    /// `key` as `ci` and `uncommon` make it.
    #[inline(always)]
    fn key_of(&self) -> u32 {
        self.ci as u16 as u32 | if self.uncommon != 0 { KEY_SHUT } else { 0 }
    }

    /// Recompute `key` (after any change to `ci` or `uncommon` but a lean retire).
    #[inline(always)]
    fn sync_key(&mut self) {
        self.key = self.key_of();
    }

    /// Record the WQE of `bbs` blocks just written at `pi` and advance past it.
    #[inline(always)]
    pub fn commit(&mut self, wr_id: u64, bbs: u32, atomic_size: u8) {
        let pi = self.pi;
        self.record(self.slot(pi), wr_id, meta::encode(bbs, atomic_size));
        self.pi = pi + bbs as u64;
        self.refresh_gates();
    }

    /// [`SendQueue::commit`] for a lean post (not an atomic) of at most `wr_bbs` blocks,
    /// which a lean gate let through; `off8` is its slot × 8 ([`SendQueue::lean_slot`]).
    /// `pi` is the producer index the caller read (the ring stores since then may alias
    /// anything as far as the compiler knows: passing it saves a reload). `rc_gates`: the
    /// post went through an RC gate, which a WQE of more than one block moves
    /// ([`SendQueue::lean_extra`]; the DC post moves its own, `SendQueue::dc_posted`).
    #[inline(always)]
    pub fn commit_lean(&mut self, pi: u64, off8: usize, wr_id: u64, bbs: u32, rc_gates: bool) {
        debug_assert!(bbs <= self.wr_bbs, "a lean WQE is never larger than wr_bbs");
        debug_assert!(off8.is_multiple_of(8) && off8 / 8 < self.wr_ids.len());
        self.pi = pi + bbs as u64;
        // SAFETY: `off8` is `slot × 8` with slot < wqe_cnt: a WR id inside the array.
        unsafe {
            ((self.wr_ids.as_mut_ptr() as *mut u8).add(off8) as *mut u64).write(wr_id);
        }
        let m = meta::encode(bbs, 0);
        if m != 0 {
            self.mark_uncommon(off8 / 8, m);
            if rc_gates {
                self.lean_extra(bbs);
            }
        }
    }

    /// [`SendQueue::commit_lean`]'s bookkeeping for the doorbell of a lean batch post: the
    /// WQE at `ctrl` of `bbs` blocks waits for [`SendQueue::ring_doorbell`].
    #[inline(always)]
    pub fn defer_lean(&mut self, ctrl: *mut u8) {
        self.last_ctrl = ctrl;
        self.batch_n += 1;
    }

    /// Leave the WQE at `ctrl` for the next [`SendQueue::ring_doorbell`].
    #[inline(always)]
    pub fn defer(&mut self, ctrl: *mut u8) {
        self.last_ctrl = ctrl;
        self.pending += 1;
        self.refresh_gates();
    }

    /// WQEs written but not yet announced by a doorbell.
    #[inline(always)]
    pub fn pending(&self) -> u32 {
        self.pending + self.batch_n
    }
}

#[cfg(test)]
mod tests;
