//! The send queue: the ring of 64-byte basic blocks, its producer and consumer indices, the
//! per-block bookkeeping that turns a CQE's `wqe_counter` back into WRs, and the doorbell.
//!
//! Indices are free-running 16-bit counters in basic blocks, like rdma-core's `sq.cur_post` and
//! UCX's `sw_pi` (`docs/sources.md` §4): `pi` is the next block to write, `ci` the first block
//! not yet retired. The WQE starting at block `p` carries `p` in its ctrl `wqe_index`, and a
//! requester CQE returns it as `wqe_counter` (`docs/sources.md` §4). Retiring up to a completed
//! WQE frees every block before it too, so the unsignaled WQEs a signaled one follows give
//! their blocks back without a CQE of their own (rdma-core `wqe_head`, UCX `hw_ci`).

use crate::lines::LineArray;
use crate::wc::{Wc, WcFields, WcFlags, WcOpcode, WcStatus};
use mlx5_cq::SYNDROME_WR_FLUSH_ERR;
use mlx5_hw::mmio;
use mlx5_wqe::ring::SqRing;
use mlx5_wqe::seg::DataSeg;
use mlx5_wqe::SEND_WQE_BB;

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

/// How a post reaches the device (UCX `uct_ib_mlx5_mmio_mode_t`, `docs/sources.md` §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorbellMode {
    /// BlueFlame copy without a flush after it (UCX `UCT_IB_MLX5_MMIO_MODE_BF_POST`, what
    /// UCX picks for a single-thread owner of a dedicated bfreg — a [`crate::Qp`] always is
    /// one): a whole 64-byte line written to write-combining memory drains by itself, and the
    /// next doorbell's WC start orders it before anything that follows. On x86_64 nothing
    /// follows the copy; on aarch64 a DGH hint (UCX `ucs_memory_bus_cacheline_wc_flush`).
    /// 8-byte doorbells (batches, WQEs larger than a half) are still flushed. The default
    /// when the QP has BlueFlame registers.
    BfPost,
    /// BlueFlame copy, then `mmio_flush_writes` (`sfence` / `dsb st`): rdma-core's
    /// `post_send_db` exactly, and UCX `BF_POST_MT`.
    Bf,
    /// The 8-byte doorbell of the ctrl segment only, flushed (rdma-core with
    /// `MLX5_SHUT_UP_BF`, UCX `DB`). The only mode without BlueFlame registers (`bf.size` 0).
    Db,
}

/// The BlueFlame / doorbell register of a QP.
#[derive(Debug)]
pub(crate) struct Doorbell {
    /// Base of the bfreg (`mlx5dv_qp.bf.reg`).
    reg: *mut u8,
    /// The half the next write goes to (`reg` or `reg + size`).
    cur: *mut u8,
    /// `reg ^ (reg + size)`: XORed into `cur` it moves to the other half, one instruction
    /// (UCX `uct_ib_mlx5_txwq_ring_doorbell` does `addr ^= 256`); 0 when `size` is 0.
    flip: usize,
    /// Half size (`bf.size`), 0 when only 8-byte doorbells may be used.
    pub size: u32,
    /// Whether a one-block WQE may take the straight-line 16-byte-store copy
    /// ([`mmio::bf_copy_bb`]): BlueFlame is available and the register is 16-byte aligned
    /// (a bfreg is; the constructor only demands 8, so a looser one takes [`mmio::bf_copy`]).
    one_bb: bool,
    /// How doorbells are rung.
    pub mode: DoorbellMode,
    /// Other QPs may ring this register too (`mlx5_hw::BfLayout::shared`): only
    /// [`DoorbellMode::Db`].
    pub shared: bool,
}

impl Doorbell {
    /// The register of `reg` with halves of `size` bytes, starting at the first half, in
    /// [`DoorbellMode::BfPost`] when `size` is not 0 and the register is dedicated, else
    /// [`DoorbellMode::Db`].
    pub fn new(reg: *mut u8, size: u32, shared: bool) -> Doorbell {
        let other = reg.wrapping_add(size as usize);
        Doorbell {
            reg,
            cur: reg,
            flip: reg as usize ^ other as usize,
            size,
            one_bb: size != 0 && (reg as usize).is_multiple_of(16),
            mode: if size != 0 && !shared {
                DoorbellMode::BfPost
            } else {
                DoorbellMode::Db
            },
            shared,
        }
    }

    /// Which half the next write goes to (0 or `size`).
    #[inline(always)]
    pub fn offset(&self) -> u32 {
        (self.cur as usize - self.reg as usize) as u32
    }
}

/// Inline payloads of at most this many bytes take the lean inline gate, which stands for
/// the length check: it is open only when the QP's inline limits allow them (a WRITE's ctrl,
/// raddr and inline header leave 12 bytes of the first block).
pub(crate) const LEAN_INLINE: usize = 12;

/// The BlueFlame copy of a one-block WQE of `ds` DS: the line padded from its third unit when
/// the WQE ends there ([`mmio::bf_copy_bb_48`]), else the whole block.
///
/// # Safety
/// As for [`mmio::bf_copy_bb`].
#[inline(always)]
unsafe fn copy_one_block(dst: *mut u8, ctrl: *const u8, ds: u32) {
    // SAFETY: the caller's.
    unsafe {
        if ds <= 3 {
            mmio::bf_copy_bb_48(dst, ctrl);
        } else {
            mmio::bf_copy_bb(dst, ctrl);
        }
    }
}

/// A branch hint: the path that calls this is not the one to lay out straight.
#[cold]
#[inline(always)]
fn unlikely() {}

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
    /// its blocks. An open gate is `ci + lean_blocks`; a closed one is at most `ci`, which
    /// `pi` never is below. Retiring `k` blocks adds `k` to both gates (a closed one stays at
    /// most `ci`).
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
    /// The one-entry poll's key ([`SendQueue::take_oldest`]): `ci`'s low 16 bits, plus
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
    /// Outstanding blocks below which a lean post may go ahead: `min(max_post, wqe_cnt −
    /// wr_bbs + 1)`. Below it, a WR is free (outstanding WRs ≤ outstanding blocks) and a
    /// WQE of `wr_bbs` blocks fits the ring.
    lean_blocks: u64,
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

/// What a lean poll reads of a send queue once per batch ([`SendQueue::lean_view`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeanView {
    /// The first block not retired (its `wqe_index`).
    pub ci: u16,
    /// Blocks that a run of one-block WQEs may retire: the outstanding blocks. (After an
    /// error the full path reports every retired WQE, but for a success CQE naming the oldest
    /// outstanding WQE that is exactly the one completion the lean run reports.)
    pub room: u16,
    /// `wqe_cnt - 1`.
    pub mask: u16,
    /// `wr_ids` and `meta`, indexed by `block & mask`.
    pub wr_ids: *const u64,
    pub meta: *const u8,
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
            lean_blocks: 1,
            fast: 0,
            other: 0,
            batch: 0,
            in_batch: false,
            batch_n: 0,
            inline_ok: false,
            sge_ok: false,
            open: false,
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
        self.lean_blocks = max_post.min(n - self.wr_bbs + 1) as u64;
        self.refresh_gate();
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

    /// The gates `open`, `pending`, `inline_ok`, `sge_ok` and the doorbell call for:
    /// `(fast, other)`. A QP that allows no gather entry, or fewer than [`LEAN_INLINE`] inline
    /// bytes, posts everything through the generic path (rare shapes; one gate per sequence
    /// keeps the lean poll's bookkeeping to two additions).
    /// In a batch: `(shut, shut, batch)`, the batch gate open under the same conditions
    /// whatever the doorbell mode.
    #[inline]
    fn gates(&self) -> (u64, u64, u64) {
        let lean = self.open && self.pending == 0 && self.sge_ok && self.inline_ok;
        let fast = self.db.mode == DoorbellMode::BfPost && self.db.one_bb;
        let (open, shut) = (self.ci + self.lean_blocks, self.ci);
        let gate = |on: bool| if on { open } else { shut };
        if self.in_batch {
            (shut, shut, gate(lean))
        } else {
            (gate(lean && fast), gate(lean && !fast), shut)
        }
    }

    /// Open or close the lean gates (after anything but a lean post or a lean retire).
    #[inline]
    pub fn refresh_gate(&mut self) {
        (self.fast, self.other, self.batch) = self.gates();
    }

    /// A [`crate::Batch`] begins: lean posts go through the gate `batch` and leave their
    /// doorbell to [`SendQueue::ring_doorbell`].
    #[inline]
    pub fn begin_batch(&mut self) {
        self.in_batch = true;
        self.refresh_gate();
    }

    /// [`SendQueue::commit_lean`]'s bookkeeping for the doorbell of a lean batch post: the
    /// WQE at `ctrl` of `bbs` blocks waits for [`SendQueue::ring_doorbell`].
    #[inline(always)]
    pub fn defer_lean(&mut self, ctrl: *mut u8) {
        self.last_ctrl = ctrl;
        self.batch_n += 1;
    }

    /// Open or close the lean entry points (the QP's state, type or limits changed):
    /// `inline_ok`, whether the QP's inline limits allow [`LEAN_INLINE`] bytes for both
    /// lean opcodes; `sge_ok`, whether it allows a gather entry.
    pub fn set_open(&mut self, open: bool, inline_ok: bool, sge_ok: bool) {
        self.open = open;
        self.inline_ok = inline_ok;
        self.sge_ok = sge_ok;
        self.refresh_gate();
    }

    /// Whether a lean post may go ahead: `pi` is below `gate` (`fast` or `other`).
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
        self.refresh_gate();
    }

    /// [`SendQueue::commit`] for a lean post (not an atomic) of at most `wr_bbs` blocks,
    /// which a lean gate let through; `off8` is its slot × 8 ([`SendQueue::lean_slot`]).
    /// `pi` is the producer index the caller read (the ring stores since then may alias
    /// anything as far as the compiler knows: passing it saves a reload).
    #[inline(always)]
    pub fn commit_lean(&mut self, pi: u64, off8: usize, wr_id: u64, bbs: u32) {
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
        }
    }

    /// Leave the WQE at `ctrl` for the next [`SendQueue::ring_doorbell`].
    #[inline(always)]
    pub fn defer(&mut self, ctrl: *mut u8) {
        self.last_ctrl = ctrl;
        self.pending += 1;
        self.refresh_gate();
    }

    /// Ring for the one WQE at `ctrl` of `bbs` blocks just committed, when nothing else is
    /// pending (the doorbell of [`SendQueue::ring_doorbell`] with one pending WQE).
    #[inline(always)]
    pub fn ring_one(&mut self, ctrl: *mut u8, bbs: u32) {
        debug_assert_eq!(self.pending + self.batch_n, 0);
        self.ring(ctrl, bbs);
        if self.in_batch {
            // A batch guard was forgotten (`mem::forget`) before it wrote anything.
            self.in_batch = false;
            self.refresh_gate();
        }
    }

    /// Ring the doorbell for every WQE written since the last ring (`docs/sources.md` §5,
    /// rdma-core `post_send_db`): BlueFlame when exactly one WQE of at most `bf.size` bytes
    /// is pending, else the 8-byte doorbell of the last one.
    /// Ends a batch ([`SendQueue::begin_batch`]) too, whether or not anything is pending.
    #[inline(always)]
    pub fn ring_doorbell(&mut self) {
        match self.pending + self.batch_n {
            0 => {}
            1 => self.ring(self.last_ctrl, self.blocks_from(self.last_ctrl)),
            _ => self.ring(self.last_ctrl, 0),
        }
        if self.pending + self.batch_n != 0 || self.in_batch {
            self.pending = 0;
            self.batch_n = 0;
            self.in_batch = false;
            self.refresh_gate();
        }
    }

    /// The doorbell sequence in any [`DoorbellMode`]: store barrier → `dbrec[1] = BE32(pi)`
    /// → WC start → a BlueFlame copy of the `bf_bbs` blocks at `ctrl` when the mode allows
    /// it and they fit a half (whole 64-byte blocks, the source wrapping at the ring end),
    /// else (or when `bf_bbs` is 0) the 8-byte doorbell of the ctrl at `ctrl` → the mode's
    /// flush → toggle the half.
    #[inline(always)]
    fn ring(&mut self, ctrl: *mut u8, bf_bbs: u32) {
        // SAFETY: `ctrl` is a block of the ring; its first 8 bytes are the ctrl segment's.
        let w0 = unsafe { core::ptr::read(ctrl as *const u64) };
        self.ring_with(ctrl, w0, self.pi, bf_bbs);
    }

    /// The start of every doorbell sequence (`docs/sources.md` §5): store barrier →
    /// `dbrec[1] = BE32(pi)` → WC start; returns the register half the doorbell goes to. `pi`
    /// is the producer index after the WQEs (what `self.pi` holds; passed in a register).
    #[inline(always)]
    fn ring_begin(&self, pi: u64) -> *mut u8 {
        debug_assert_eq!(pi, self.pi);
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the live SQ doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec, pi as u16 as u32) };
        mmio::wc_start();
        self.db.cur
    }

    /// The end of every doorbell sequence: the next one goes to the other half of the
    /// register (`flip` is 0 without BlueFlame: the register stays put).
    #[inline(always)]
    fn ring_end(&mut self, dst: *mut u8) {
        self.db.cur = (dst as usize ^ self.db.flip) as *mut u8;
    }

    /// [`SendQueue::ring`] for callers that hold the ctrl segment's first 8 bytes `w0` in a
    /// register: the 8-byte doorbell stores it without reading it back. `pi` is the producer
    /// index after the WQE (what `self.pi` holds; passed in a register).
    #[inline(always)]
    pub fn ring_with(&mut self, ctrl: *mut u8, w0: u64, pi: u64, bf_bbs: u32) {
        let dst = self.ring_begin(pi);
        let bf = self.db.mode != DoorbellMode::Db
            && bf_bbs != 0
            && bf_bbs as usize * SEND_WQE_BB <= self.db.size as usize;
        // SAFETY: `cur` is one half of this QP's bfreg (16-byte aligned when `one_bb`: the
        // halves are `size`, a multiple of 64, apart); a BF copy writes at most bf.size
        // bytes there; `ctrl` is a block of the ring and the WQE's blocks are inside the ring
        // (the source wraps at its end).
        unsafe {
            if bf && bf_bbs == 1 && self.db.one_bb {
                // Byte 7 of the ctrl segment: the DS count (6 bits).
                copy_one_block(dst, ctrl, (w0.to_le_bytes()[7] & 0x3f) as u32);
            } else if bf {
                mmio::bf_copy(
                    dst,
                    ctrl,
                    bf_bbs as usize,
                    self.ring.start(),
                    self.ring.end(),
                );
            } else {
                mmio::write_db64(dst, w0);
            }
        }
        // A whole-line BlueFlame copy in BF_POST mode leaves the WC buffer to drain by
        // itself; a partial line (the 8-byte doorbell) is always flushed (UCX `DB` mode).
        if bf && self.db.mode == DoorbellMode::BfPost {
            mmio::wc_line_done();
        } else {
            mmio::flush_writes();
        }
        self.ring_end(dst);
    }

    /// The lean entry points' doorbell in the other modes (the gate `other`): the 8-byte
    /// doorbell in [`DoorbellMode::Db`], a one-block BlueFlame copy and a flush in
    /// [`DoorbellMode::Bf`] (rdma-core `post_send_db`), [`SendQueue::ring_with`] for the rest
    /// (a WQE of several blocks, a register not 16-byte aligned). Arguments as for
    /// [`SendQueue::ring_bf_post`].
    #[inline(always)]
    pub fn ring_other(&mut self, ctrl: *mut u8, w0: u64, pi: u64, bbs: u32, ds: u32) {
        let db = self.db.mode == DoorbellMode::Db;
        if bbs != 1 || !(db || self.db.one_bb) {
            unlikely();
            return self.ring_with(ctrl, w0, pi, bbs);
        }
        let dst = self.ring_begin(pi);
        // SAFETY: `cur` is one half of this QP's bfreg (or its doorbell register), 16-byte
        // aligned with room for a block when `one_bb`; `ctrl` is the WQE's one block.
        unsafe {
            if db {
                mmio::write_db64(dst, w0);
            } else {
                copy_one_block(dst, ctrl, ds);
            }
        }
        mmio::flush_writes();
        self.ring_end(dst);
    }

    /// The lean entry points' doorbell, the sequence of [`DoorbellMode::BfPost`] for a WQE
    /// of `bbs` blocks at `ctrl` (which the gate let through: the mode is `BfPost` and a
    /// one-block copy may take [`mmio::bf_copy_bb`]): store barrier → `dbrec[1] = BE32(pi)`
    /// → WC start → BlueFlame copy → [`mmio::wc_line_done`] → toggle (UCX
    /// `uct_ib_mlx5_txwq_ring_doorbell` in `UCT_IB_MLX5_MMIO_MODE_BF_POST`). `w0` is the
    /// ctrl segment's first 8 bytes, for a WQE larger than a half (8-byte doorbell); `ds`
    /// its DS count (at most 3: the copy pads the line, [`mmio::bf_copy_bb_48`]).
    #[inline(always)]
    pub fn ring_bf_post(&mut self, ctrl: *mut u8, w0: u64, pi: u64, bbs: u32, ds: u32) {
        debug_assert!(self.db.mode == DoorbellMode::BfPost && self.db.one_bb);
        if bbs != 1 {
            unlikely();
            return self.ring_with(ctrl, w0, pi, bbs);
        }
        let dst = self.ring_begin(pi);
        // SAFETY: `cur` is a 16-byte aligned half of this QP's bfreg (`one_bb`, checked by
        // the gate) with room for a block; `ctrl` is the WQE's one block in the ring.
        unsafe { copy_one_block(dst, ctrl, ds) };
        mmio::wc_line_done();
        self.ring_end(dst);
    }

    /// The blocks from the block at `ctrl` up to `pi`: the size of the last WQE written when
    /// `ctrl` is its first block (1 ..= `wqe_cnt`: a WQE is never empty).
    #[inline(always)]
    fn blocks_from(&self, ctrl: *mut u8) -> u32 {
        let block = (ctrl as usize - self.ring.start() as usize) / SEND_WQE_BB;
        (self.pi.wrapping_sub(block as u64 + 1) & self.mask) as u32 + 1
    }

    /// WQEs written but not yet announced by a doorbell.
    #[inline(always)]
    pub fn pending(&self) -> u32 {
        self.pending + self.batch_n
    }

    /// The meta byte of `slot`.
    #[inline(always)]
    fn meta_at(&self, slot: usize) -> u8 {
        debug_assert!(slot < self.meta.len());
        // SAFETY: every caller passes `x & mask` < wqe_cnt, the array's length.
        unsafe { *self.meta.get_unchecked(slot) }
    }

    /// The WR id of `slot`.
    #[inline(always)]
    fn wr_id_at(&self, slot: usize) -> u64 {
        debug_assert!(slot < self.wr_ids.len());
        // SAFETY: as for `meta_at`.
        unsafe { *self.wr_ids.get_unchecked(slot) }
    }

    /// The completion opcode of the WQE whose ctrl segment is at block `slot`: byte 3 of the
    /// ctrl segment, which stays in the ring until the WQE is retired.
    #[inline(always)]
    fn opcode_at(&self, slot: usize) -> (WcOpcode, WcFlags) {
        // SAFETY: `slot` < wqe_cnt: byte 3 of a block inside the ring.
        let op = unsafe { *self.ring.start().add(slot * SEND_WQE_BB + 3) };
        (WcOpcode::from_send_opcode(op), crate::wc::send_flags(op))
    }

    #[inline(always)]
    fn wc(&self, slot: usize, info: &CqeInfo, status: WcStatus, syndrome: u8) -> Wc {
        let (opcode, flags) = self.opcode_at(slot);
        let ok = status == WcStatus::Success;
        // A READ reports the bytes read, an atomic its operand size (non-zero only for the
        // atomic opcodes, set when posting), everything else and every error 0.
        let byte_len = if !ok {
            0
        } else if opcode == WcOpcode::RdmaRead {
            info.byte_cnt
        } else {
            meta::atomic_size(self.meta_at(slot)) as u32
        };
        Wc::new(&WcFields {
            wr_id: self.wr_id_at(slot),
            status,
            opcode,
            // rdma-core's `mlx5_parse_cqe` clears the flags of an error completion.
            flags: if ok { flags } else { WcFlags::empty() },
            byte_len,
            qp_num: info.qpn,
            vendor_err: if status == info.status {
                info.vendor_err
            } else {
                0
            },
            syndrome,
            ..WcFields::default()
        })
    }

    /// Retire the WQE at block `ci` (slot `slot`, `bbs` blocks): clear its meta byte, move
    /// past it.
    #[inline(always)]
    fn retire_one(&mut self, slot: usize, bbs: u16) {
        if self.meta_at(slot) != 0 {
            self.uncommon -= 1;
            self.extra -= bbs as u32 - 1;
        }
        debug_assert!(slot < self.meta.len());
        // SAFETY: as for `meta_at`.
        unsafe { *self.meta.get_unchecked_mut(slot) = 0 };
        self.ci += bbs as u64;
        self.sync_key();
    }

    /// Retire, without completions, every WQE from `ci` up to (not including) block `c`,
    /// a WQE start ([`SendQueue::starts_wqe`]).
    fn retire_until(&mut self, c: u64) {
        if self.uncommon == 0 {
            // One block each, no byte to clear.
            self.ci = c;
            self.sync_key();
            return;
        }
        while self.ci != c {
            let slot = self.slot(self.ci);
            let bbs = meta::bbs(self.meta_at(slot));
            self.retire_one(slot, bbs);
        }
    }

    /// Whether block `c`, inside the outstanding range, is where an outstanding WQE starts:
    /// follow the WQEs from `ci`.
    fn starts_wqe(&self, c: u64) -> bool {
        if self.uncommon == 0 {
            // Every outstanding WQE is one block: every outstanding block starts one.
            return true;
        }
        let mut w = self.ci;
        while w != c {
            let bbs = meta::bbs(self.meta_at(self.slot(w)));
            if c - w < bbs as u64 {
                return false;
            }
            w += bbs as u64;
        }
        true
    }

    /// The common case of [`SendQueue::complete`], for a success CQE that names the oldest
    /// outstanding WQE, one block, not an atomic: retire it and write its
    /// completion to `out`. Returns false — having changed nothing — for anything
    /// else, which [`SendQueue::complete`] handles.
    #[inline(always)]
    pub fn complete_success(
        &mut self,
        wqe_counter: u16,
        qpn: u32,
        byte_cnt: u32,
        out: &mut Wc,
    ) -> bool {
        let ci = self.ci;
        let slot = self.slot(ci);
        // After an error the full path reports every retired WQE; for this CQE that is this
        // one completion (nothing lies before the oldest WQE), so an error period is no reason
        // to leave.
        if (wqe_counter != ci as u16) | (ci == self.pi) | (self.meta_at(slot) != 0) {
            return false;
        }
        let (opcode, flags) = self.opcode_at(slot);
        *out = Wc::new(&WcFields {
            wr_id: self.wr_id_at(slot),
            opcode,
            flags,
            byte_len: if opcode == WcOpcode::RdmaRead {
                byte_cnt
            } else {
                0
            },
            qp_num: qpn,
            ..WcFields::default()
        });
        self.lean_retired(1);
        // The full path: undo a spurious shut of `key` (a wrap of `ci`'s low bits).
        self.sync_key();
        true
    }

    /// The one-entry poll's test: whether `wqe_counter` is the oldest outstanding block (the
    /// queue not idle) and every outstanding WQE has meta byte 0 (one block, not an atomic).
    #[inline(always)]
    pub fn names_oldest(&self, wqe_counter: u16) -> bool {
        // `key` holds `ci`'s low bits and whether all are common: one compare. With
        // `wqe_counter == ci`, `pi`'s low bits equal it only when the queue is idle or holds
        // 65536 blocks: declined either way (the full path decides).
        (wqe_counter as u32 == self.key) & (wqe_counter != self.pi as u16)
    }

    /// Retire the oldest WQE, which [`SendQueue::names_oldest`] said `wqe_counter` names;
    /// returns its WR id.
    #[inline(always)]
    pub fn take_oldest(&mut self, wqe_counter: u16) -> u64 {
        debug_assert!(self.names_oldest(wqe_counter));
        // `wqe_counter` is `ci`'s low bits: its slot.
        let slot = (wqe_counter as u64 & self.mask) as usize;
        let wr_id = self.wr_id_at(slot);
        // `lean_retired(1)`, `ci` and the key added to in memory: both were just compared
        // (`ci` by a flush's test of the error period), as `bump_key` says.
        // SAFETY: a reference: valid, aligned, this thread's alone; volatile only so that the
        // load is not replaced by the value it was compared with.
        self.ci = unsafe { core::ptr::read_volatile(&self.ci) } + 1;
        self.fast += 1;
        self.other += 1;
        bump_key(&mut self.key);
        wr_id
    }

    /// Whether `pi` and the key's copy of `ci` agree in their low 16 bits ([`crate::Qp`]'s
    /// `sq_seems_idle`).
    #[inline(always)]
    pub fn seems_idle(&self) -> bool {
        self.key as u16 == self.pi as u16
    }

    /// Whether every outstanding WQE has meta byte 0.
    #[inline(always)]
    pub fn all_common(&self) -> bool {
        self.uncommon == 0
    }

    /// What the lean poll of [`crate::Cq::poll_send`] needs, read once per batch.
    #[inline(always)]
    pub fn lean_view(&self) -> LeanView {
        self.debug_check();
        LeanView {
            ci: self.ci as u16,
            room: (self.pi - self.ci) as u16,
            mask: self.mask as u16,
            wr_ids: self.wr_ids.as_ptr(),
            meta: self.meta.as_ptr(),
        }
    }

    /// The lean poll retired `k` one-block WQEs from `ci` on (each had meta byte 0, so there
    /// is no byte to clear): the gates move with `ci`. (The struct keeps `fast`, `pi`, `ci`,
    /// `mask`, `other` in that order: no two of the counters added here are adjacent, so
    /// LLVM adds each in memory rather than a pair in a vector register, four instructions.)
    #[inline(always)]
    pub fn lean_retired(&mut self, k: u16) {
        self.ci += k as u64;
        self.fast += k as u64;
        self.other += k as u64;
        self.key = self.key.wrapping_add(k as u32);
    }

    /// Account for a requester CQE (REQ or REQ_ERR) naming the WQE at `wqe_counter`.
    ///
    /// - Success: every block up to and including that WQE is retired; the unsignaled WQEs
    ///   before it succeeded and produce no completion (verbs semantics), the WQE itself
    ///   produces one (a device writes a CQE only for a signaled WQE; rdma-core reports
    ///   every CQE it polls).
    /// - The first error: the failing WQE produces an error completion. If its status is not
    ///   a flush, the WQEs before it had succeeded (completions are in order) and are retired
    ///   silently; if it is a flush (the QP was moved to Error), the WQEs before it may not
    ///   have run, so each gets a `WR_FLUSH_ERR` completion.
    /// - After the first error every retired WQE produces a completion: the named one with the
    ///   CQE's status, any the device skipped with `WR_FLUSH_ERR` — those posted before a
    ///   recovery from SQE to RTS ([`SendQueue::recovered`]); from then on WQEs complete as
    ///   before the error.
    pub fn complete(&mut self, wqe_counter: u16, info: &CqeInfo, out: &mut [Wc]) -> Progress {
        let p = self.complete_inner(wqe_counter, info, out);
        self.refresh_gate();
        p
    }

    fn complete_inner(&mut self, wqe_counter: u16, info: &CqeInfo, out: &mut [Wc]) -> Progress {
        let outstanding = self.pi - self.ci;
        let dist = (wqe_counter.wrapping_sub(self.ci as u16) as u64) & self.mask;
        if dist >= outstanding {
            return Progress::Bad("outside the outstanding range");
        }
        let c = self.ci + dist;
        if !self.starts_wqe(c) {
            return Progress::Bad("not the first block of a WQE");
        }
        let failed = info.status != WcStatus::Success;
        if failed && !self.flushing() {
            self.begin_error(self.before_recovery());
            if info.status != WcStatus::WrFlushErr {
                self.retire_until(c);
            }
        }
        let mut n = 0;
        if self.flushing() {
            // WQEs posted after a recovery (from `error_end`) and before `c` were unsignaled
            // and succeeded: `retire_until` below retires them silently.
            while self.ci != c && self.ci < self.error_end {
                let slot = self.slot(self.ci);
                let bbs = meta::bbs(self.meta_at(slot));
                if n == out.len() {
                    return Progress::Partial(n);
                }
                out[n] = self.wc(slot, info, WcStatus::WrFlushErr, SYNDROME_WR_FLUSH_ERR);
                n += 1;
                self.retire_one(slot, bbs);
            }
        }
        let cslot = self.slot(c);
        let m = self.meta_at(cslot);
        if n == out.len() {
            self.retire_until(c);
            return Progress::Partial(n);
        }
        out[n] = self.wc(cslot, info, info.status, info.syndrome);
        n += 1;
        self.retire_until(c);
        self.retire_one(cslot, meta::bbs(m));
        Progress::Done(n)
    }

    /// The first error completion of an error period: from now on every retired WQE is
    /// reported (until [`SendQueue::recovered`] ends the period).
    ///
    /// `old`: the oldest outstanding WQE was posted before the last recovery
    /// ([`SendQueue::before_recovery`], asked before the error CQE retired anything): the
    /// control path recovered the QP before its error CQE was polled, and the period ends
    /// where that recovery put it.
    pub fn begin_error(&mut self, old: bool) {
        self.error_end = if old { self.recovered_at } else { u64::MAX };
    }

    /// Whether the oldest outstanding WQE was posted before the last recovery from SQE.
    #[inline(always)]
    pub fn before_recovery(&self) -> bool {
        self.ci < self.recovered_at
    }

    /// Whether an error period is on: every retired WQE is reported (what the flush fast
    /// paths need to retire a flush as the full path would).
    #[inline(always)]
    pub fn flushing(&self) -> bool {
        self.ci < self.error_end
    }

    /// The control path moved the QP from SQE back to RTS: the WQEs outstanding now belong to
    /// the error period (the device flushed them), those posted from now on complete as
    /// before the error (IBTA Vol. 1 §10.3, the Send Queue Error state).
    pub fn recovered(&mut self) {
        self.recovered_at = self.pi;
        if self.error_end == u64::MAX {
            self.error_end = self.pi;
        }
    }

    /// Whether an error CQE naming block `wqe_counter` belongs to an error period the QP was
    /// recovered from ([`SendQueue::recovered`]): it names a WQE posted before the recovery,
    /// which the device flushed then. Such a CQE moves the QP nowhere.
    pub fn error_of_recovered_period(&self, wqe_counter: u16) -> bool {
        let dist = (wqe_counter.wrapping_sub(self.ci as u16) as u64) & self.mask;
        self.ci + dist < self.recovered_at
    }

    /// Report every outstanding WQE as flushed and retire it (the QP is in Error and the device
    /// will report nothing more). Resumable: returns `Partial` when `out` fills.
    pub fn flush_all(&mut self, qpn: u32, out: &mut [Wc]) -> Progress {
        let info = CqeInfo {
            qpn,
            status: WcStatus::WrFlushErr,
            syndrome: SYNDROME_WR_FLUSH_ERR,
            vendor_err: 0,
            byte_cnt: 0,
        };
        let mut n = 0;
        let mut p = Progress::Done(0);
        while self.ci != self.pi {
            let slot = self.slot(self.ci);
            let bbs = meta::bbs(self.meta_at(slot));
            if self.pi - self.ci < bbs as u64 {
                p = Progress::Bad("the WQE chain is broken");
                break;
            }
            if n == out.len() {
                p = Progress::Partial(n);
                break;
            }
            out[n] = self.wc(slot, &info, WcStatus::WrFlushErr, SYNDROME_WR_FLUSH_ERR);
            n += 1;
            self.retire_one(slot, bbs);
        }
        if let Progress::Done(_) = p {
            p = Progress::Done(n);
        }
        self.refresh_gate();
        p
    }

    /// The local scatter list of the READ or atomic WQE at `wqe_counter`, read back from the
    /// ring (its blocks are not reused before it is retired), for requester scatter-to-CQE.
    pub fn reply_sges(&self, wqe_counter: u16, out: &mut [DataSeg; 16]) -> usize {
        let ctrl = self.ring.bb(wqe_counter);
        // SAFETY: the ctrl segment is the first 16 bytes of a block inside the ring.
        let ctrl_bytes = unsafe { core::ptr::read(ctrl as *const [u8; 16]) };
        let ds = (ctrl_bytes[7] & 0x3f) as usize;
        let opcode = ctrl_bytes[3];
        let opmod = ctrl_bytes[0];
        // ctrl + raddr, then the atomic operands (rdma-core `_mlx5_post_send` segment order).
        let skip = match opcode {
            mlx5_wqe::OPCODE_RDMA_READ => 2,
            mlx5_wqe::OPCODE_ATOMIC_CS | mlx5_wqe::OPCODE_ATOMIC_FA => 3,
            mlx5_wqe::OPCODE_ATOMIC_MASKED_CS if opmod == mlx5_wqe::OPMOD_EXT_ATOMIC_64 => 4,
            mlx5_wqe::OPCODE_ATOMIC_MASKED_CS | mlx5_wqe::OPCODE_ATOMIC_MASKED_FA => 3,
            _ => return 0,
        };
        let mut n = 0;
        let mut unit = ctrl as usize + skip * 16;
        let ring_end = self.ring.end() as usize;
        if unit >= ring_end {
            unit -= self.ring.bytes();
        }
        for _ in skip..ds.min(skip + out.len()) {
            // SAFETY: `unit` is a 16-byte unit inside the ring (wrapped at its end).
            out[n] = unsafe { core::ptr::read(unit as *const DataSeg) };
            n += 1;
            unit += 16;
            if unit == ring_end {
                unit = self.ring.start() as usize;
            }
        }
        n
    }

    /// Forget everything (the QP went to Reset): rdma-core `mlx5_init_qp_indices` and the
    /// zeroed `db[MLX5_SND_DBR]` of `mlx5_modify_qp`.
    pub fn reset(&mut self) {
        self.pi = 0;
        self.ci = 0;
        self.pending = 0;
        self.batch_n = 0;
        self.in_batch = false;
        self.error_end = 0;
        self.recovered_at = 0;
        self.meta.fill(0);
        self.uncommon = 0;
        self.extra = 0;
        self.sync_key();
        self.refresh_gate();
        // SAFETY: `dbrec` is the live SQ doorbell record.
        unsafe { mmio::write_dbrec(self.dbrec, 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::{meta, Doorbell, SendQueue};
    use mlx5_wqe::ring::SqRing;
    use mlx5_wqe::seg::DataSeg;
    use mlx5_wqe::CtrlSeg;
    use zerocopy::IntoBytes;

    /// A ring of 16 blocks, its doorbell record and a register, in one zeroed allocation.
    #[repr(C, align(4096))]
    struct Mem([u8; 16 * 64 + 64 + 512]);

    fn queue(mem: &mut Mem) -> SendQueue {
        let base = mem.0.as_mut_ptr();
        // SAFETY: the ring is the first 16 blocks (64-byte aligned), then the record and a
        // register of two 256-byte halves, all inside `mem`, which the test keeps alive.
        unsafe {
            let ring = SqRing::new(base, 16);
            let db = Doorbell::new(base.add(16 * 64 + 64), 256, false);
            SendQueue::new(ring, base.add(16 * 64) as *mut u32, db, 16)
        }
    }

    /// Write at block `block` a ctrl segment (`opmod`, `opcode`, `ds`) and data segments
    /// `i = 0..n` at 16-byte units `skip..` (wrapping at the ring end).
    fn wqe(mem: &mut Mem, block: usize, opmod: u8, opcode: u8, skip: usize, n: usize) {
        let ring = &mut mem.0[..16 * 64];
        let c = block * 64;
        ring[c] = opmod;
        ring[c + 3] = opcode;
        ring[c + 7] = (skip + n) as u8;
        for i in 0..n {
            let u = (c + (skip + i) * 16) % ring.len();
            ring[u..u + 16].copy_from_slice(sge(i).as_bytes());
        }
    }

    fn sge(i: usize) -> DataSeg {
        DataSeg::new(0x100 + i as u32, 0x77 + i as u32, 0x1000 * (i as u64 + 1))
    }

    /// `reply_sges` reads back the local scatter list of a READ or atomic WQE after its
    /// fixed segments (ctrl + raddr, then the operands: 16 bytes, 32 for a 64-bit masked
    /// compare-and-swap), wrapping at the ring end, at most the 16 entries of `out`.
    #[test]
    fn reply_sges_reads_the_scatter_list_after_the_operands() {
        use mlx5_wqe::{
            OPCODE_ATOMIC_CS, OPCODE_ATOMIC_FA, OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA,
            OPCODE_RDMA_READ, OPCODE_SEND, OPMOD_EXT_ATOMIC_32, OPMOD_EXT_ATOMIC_64,
        };
        // (block, opmod, opcode, units before the list, entries written, entries read)
        let cases = [
            (0, 0, OPCODE_RDMA_READ, 2, 3, 3),
            // 20 entries: only the 16 that `out` holds.
            (0, 0, OPCODE_RDMA_READ, 2, 20, 16),
            // The last block: the list continues at the ring's start.
            (15, 0, OPCODE_RDMA_READ, 2, 5, 5),
            (15, 0, OPCODE_ATOMIC_CS, 3, 1, 1),
            (15, 0, OPCODE_ATOMIC_FA, 3, 1, 1),
            (15, OPMOD_EXT_ATOMIC_32, OPCODE_ATOMIC_MASKED_CS, 3, 1, 1),
            (15, OPMOD_EXT_ATOMIC_32, OPCODE_ATOMIC_MASKED_FA, 3, 1, 1),
            (15, OPMOD_EXT_ATOMIC_64, OPCODE_ATOMIC_MASKED_FA, 3, 1, 1),
            // Operands of 32 bytes: the list starts in the next block, here the ring's first.
            (15, OPMOD_EXT_ATOMIC_64, OPCODE_ATOMIC_MASKED_CS, 4, 1, 1),
            (7, OPMOD_EXT_ATOMIC_64, OPCODE_ATOMIC_MASKED_CS, 4, 2, 2),
            (3, 0, OPCODE_SEND, 1, 2, 0),
        ];
        for (block, opmod, opcode, skip, n, want) in cases {
            let mut mem = Box::new(Mem([0; 16 * 64 + 64 + 512]));
            wqe(&mut mem, block, opmod, opcode, skip, n);
            let sq = queue(&mut mem);
            let mut out = [DataSeg::default(); 16];
            let got = sq.reply_sges(block as u16, &mut out);
            let what = format!("opcode {opcode:#x} opmod {opmod:#x} at block {block}, {n} entries");
            assert_eq!(got, want, "{what}");
            for (i, d) in out[..got].iter().enumerate() {
                assert_eq!(*d, sge(i), "entry {i}: {what}");
            }
            assert!(
                out[got..].iter().all(|d| *d == DataSeg::default()),
                "{what}"
            );
        }
    }

    /// The two raw stores of `write_ctrl` lay out what the typed builder does, on seeded
    /// pseudo-random fields (xorshift64, fixed seed).
    #[test]
    fn write_ctrl_matches_the_builder() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (pi, opcode, opmod) = (x as u16, (x >> 16) as u8, (x >> 24) as u8);
            let (qpn, ds, fm, imm) = (
                (x >> 32) as u32 & 0x00ff_ffff,
                (x >> 56) as u32 & 0x3f,
                (x >> 8) as u8,
                x.rotate_left(20) as u32,
            );
            #[repr(C, align(64))]
            struct Block([u8; 64]);
            let mut b = Block([0xee; 64]);
            // SAFETY: `b` is a 64-byte aligned block.
            unsafe {
                SendQueue::write_ctrl(
                    b.0.as_mut_ptr(),
                    pi,
                    opcode,
                    opmod,
                    qpn << 8,
                    ds,
                    fm,
                    imm.to_be(),
                )
            };
            let want = CtrlSeg::builder()
                .wqe_index(pi)
                .opcode(opcode)
                .opmod(opmod)
                .qpn(qpn)
                .ds(ds as u8)
                .fm_ce_se(fm)
                .imm(imm)
                .build();
            assert_eq!(&b.0[..16], want.as_bytes());
            assert!(b.0[16..].iter().all(|&v| v == 0xee));
        }
    }

    #[test]
    fn meta_byte_round_trips_and_the_common_shape_is_zero() {
        assert_eq!(meta::encode(1, 0), 0, "one block, no atomic");
        for bbs in 1..=16u32 {
            for size in [0u8, 4, 8] {
                let m = meta::encode(bbs, size);
                assert_eq!(meta::bbs(m), bbs as u16);
                assert_eq!(meta::atomic_size(m), size);
                assert_eq!(m == 0, bbs == 1 && size == 0);
            }
        }
    }
}
