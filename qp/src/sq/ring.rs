//! Ringing the send queue: the doorbell record, then the doorbell or the BlueFlame copy, in
//! the order of the [`DoorbellMode`] (rdma-core `post_send_db`,
//! `mlx5_bf_copy`), for one WQE, a batch's pending ones, and the lean posts' sequences.

use super::{DoorbellMode, SendQueue};
use mlx5_hw::mmio;
use mlx5_wqe::SEND_WQE_BB;

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

impl SendQueue {
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
        #[cfg(test)]
        rung::general();
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

    /// Whether the doorbell is [`DoorbellMode::Bf`] with halves a block copy may take that
    /// hold two blocks: then [`SendQueue::ring_other_2bb`] copies a WQE of two.
    #[inline(always)]
    fn two_bb_copy(&self) -> bool {
        self.db.mode == DoorbellMode::Bf && self.db.one_bb && self.db.size >= 2 * SEND_WQE_BB as u32
    }

    /// The lean entry points' doorbell in the other modes (the gate `other`): the 8-byte
    /// doorbell in [`DoorbellMode::Db`], a one-block BlueFlame copy and a flush in
    /// [`DoorbellMode::Bf`] (rdma-core `post_send_db`), for a WQE of two blocks the sequence
    /// of [`SendQueue::ring_other_2bb`] where the register takes it, [`SendQueue::ring_with`]
    /// for the rest (a larger WQE, a register not 16-byte aligned). Arguments as for
    /// [`SendQueue::ring_bf_post`].
    #[inline(always)]
    pub fn ring_other(&mut self, ctrl: *mut u8, w0: u64, pi: u64, bbs: u32, ds: u32) {
        let db = self.db.mode == DoorbellMode::Db;
        if bbs != 1 || !(db || self.db.one_bb) {
            unlikely();
            if bbs == 2 && (db || self.two_bb_copy()) {
                // A WQE of two blocks: the DC post's sequence, its lines copied whole (`ds`
                // 8) as the generic post copies them.
                let second = self.ring.bb((pi - 1) as u16);
                return self.ring_other_2bb(ctrl, second, w0, pi, 8);
            }
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
    /// its DS count (at most 3: the copy pads the line, [`mmio::bf_copy_bb_48`]). A WQE of
    /// two blocks takes the two-line sequence of [`SendQueue::ring_bf_post_2bb`] when the
    /// halves hold two blocks, a larger one [`SendQueue::ring_with`].
    #[inline(always)]
    pub fn ring_bf_post(&mut self, ctrl: *mut u8, w0: u64, pi: u64, bbs: u32, ds: u32) {
        debug_assert!(self.db.mode == DoorbellMode::BfPost && self.db.one_bb);
        if bbs != 1 {
            unlikely();
            if bbs == 2 && self.db.size >= 2 * SEND_WQE_BB as u32 {
                // A WQE of two blocks: the DC post's two-line sequence, its lines copied
                // whole (`ds` 8) as the generic post copies them.
                let second = self.ring.bb((pi - 1) as u16);
                return self.ring_bf_post_2bb(ctrl, second, pi, 8);
            }
            return self.ring_with(ctrl, w0, pi, bbs);
        }
        let dst = self.ring_begin(pi);
        // SAFETY: `cur` is a 16-byte aligned half of this QP's bfreg (`one_bb`, checked by
        // the gate) with room for a block; `ctrl` is the WQE's one block in the ring.
        unsafe { copy_one_block(dst, ctrl, ds) };
        mmio::wc_line_done();
        self.ring_end(dst);
    }

    /// The doorbell of one WQE of exactly two blocks and `ds` DS, `first` and `second` (the
    /// block after it, or the ring's first when `first` is its last), in
    /// [`DoorbellMode::BfPost`] with halves of at least two blocks that a block copy may take
    /// (the DC gate `dc_fast` checked): the sequence of [`SendQueue::ring_bf_post`] with a
    /// two-block BlueFlame copy in block copies, the second line padded from its third unit
    /// when the WQE ends there (`copy_one_block()`; a DCI's lean WQE: ctrl and address
    /// vector, then the rest). `pi` is the producer index after the WQE.
    #[inline(always)]
    pub fn ring_bf_post_2bb(&mut self, first: *const u8, second: *const u8, pi: u64, ds: u32) {
        debug_assert!(
            self.db.mode == DoorbellMode::BfPost && self.db.one_bb && self.db.size >= 128
        );
        debug_assert!((5..=8).contains(&ds));
        #[cfg(test)]
        rung::two_block();
        let dst = self.ring_begin(pi);
        // SAFETY: `cur` is a 16-byte aligned half of this QP's bfreg with room for two blocks
        // (the gate); `first` and `second` are blocks of the ring.
        unsafe {
            mmio::bf_copy_bb(dst, first);
            copy_one_block(dst.add(SEND_WQE_BB), second, ds - 4);
        }
        mmio::wc_line_done();
        self.ring_end(dst);
    }

    /// The doorbell of one WQE of exactly two blocks, `first` and `second` (as for
    /// [`SendQueue::ring_bf_post_2bb`]), in the other modes a DCI's lean WQE takes (the gate
    /// `dc_other`): the 8-byte doorbell of `w0` in [`DoorbellMode::Db`]; in
    /// [`DoorbellMode::Bf`], whose halves take two blocks that a block copy may take (the
    /// gate checked), the two-block BlueFlame copy of [`SendQueue::ring_bf_post_2bb`], then a
    /// flush (rdma-core `post_send_db`). `pi` is the producer index after the WQE, `ds` its
    /// DS count.
    #[inline(always)]
    pub fn ring_other_2bb(&mut self, first: *mut u8, second: *const u8, w0: u64, pi: u64, ds: u32) {
        let db = self.db.mode == DoorbellMode::Db;
        debug_assert!(
            db || self.db.mode == DoorbellMode::Bf && self.db.one_bb && self.db.size >= 128
        );
        #[cfg(test)]
        rung::two_block();
        let dst = self.ring_begin(pi);
        // SAFETY: `cur` is this QP's doorbell register, or (not `Db`) a 16-byte aligned half
        // of its bfreg with room for two blocks (checked by the gate); `first` and `second`
        // are blocks of the ring.
        unsafe {
            if db {
                mmio::write_db64(dst, w0);
            } else {
                mmio::bf_copy_bb(dst, first);
                copy_one_block(dst.add(SEND_WQE_BB), second, ds - 4);
            }
        }
        mmio::flush_writes();
        self.ring_end(dst);
    }

    /// The blocks from the block at `ctrl` up to `pi`: the size of the last WQE written when
    /// `ctrl` is its first block (1 ..= `wqe_cnt`: a WQE is never empty).
    #[inline(always)]
    fn blocks_from(&self, ctrl: *mut u8) -> u32 {
        let block = (ctrl as usize - self.ring.start() as usize) / SEND_WQE_BB;
        (self.pi.wrapping_sub(block as u64 + 1) & self.mask) as u32 + 1
    }
}

/// Test builds only: which doorbell sequence this thread's posts took, so that the unit tests
/// can say it (the general one writes the same bytes, slower): how many WQEs were rung with a
/// two-block sequence ([`SendQueue::ring_bf_post_2bb`], [`SendQueue::ring_other_2bb`]) and
/// how many doorbells went through [`SendQueue::ring_with`].
#[cfg(test)]
pub(crate) mod rung {
    use std::cell::Cell;

    thread_local! {
        static TWO_BLOCK: Cell<u64> = const { Cell::new(0) };
        static GENERAL: Cell<u64> = const { Cell::new(0) };
    }

    /// One more WQE rung with a two-block sequence.
    pub fn two_block() {
        TWO_BLOCK.with(|c| c.set(c.get() + 1));
    }

    /// One more doorbell through the general sequence.
    pub fn general() {
        GENERAL.with(|c| c.set(c.get() + 1));
    }

    /// `(two-block WQEs, general doorbells)` so far on this thread.
    pub fn counts() -> (u64, u64) {
        (TWO_BLOCK.with(Cell::get), GENERAL.with(Cell::get))
    }
}
