//! DS / basic-block arithmetic and the WQE writer over a circular send ring.
//!
//! A send ring is `wqe_cnt` 64-byte basic blocks (BBs). A WQE starts on a BB boundary and is a
//! sequence of 16-byte units (DS). rdma-core and UCX do not pad the ring end with NOPs: when a
//! WQE's segments run past the end, the next 16 bytes continue at the ring start, and an inline
//! payload (or the second half of a 32-byte masked atomic) is split across the end
//! (rdma-core `providers/mlx5/qp.c` `_mlx5_post_send`, `memcpy_to_wqe`; UCX `ib_mlx5.inl`
//! `uct_ib_mlx5_txwq_wrap_*`, `uct_ib_mlx5_inline_copy`).

use crate::opcode::{MAX_DS, SEND_WQE_BB, SEND_WQE_DS};
use crate::seg::{CtrlSegBuilder, InlineHdr, Segment};
use zerocopy::IntoBytes;

/// DS units for a WQE of `bytes` bytes: `ceil(bytes / 16)`.
#[inline(always)]
pub const fn ds_for_bytes(bytes: usize) -> u32 {
    bytes.div_ceil(SEND_WQE_DS) as u32
}

/// Basic blocks a WQE of `ds` DS units occupies: `ceil(ds / 4)` (rdma-core
/// `DIV_ROUND_UP(size * 16, 64)`).
#[inline(always)]
pub const fn bbs_for_ds(ds: u32) -> u32 {
    ds.div_ceil(4)
}

/// Why a WQE could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WqeError {
    /// The WQE would need `needed` bytes but at most `max` are allowed (ring size, the 6-bit DS
    /// field, or the QP's limit).
    TooLarge {
        /// Bytes the WQE needs.
        needed: usize,
        /// Bytes allowed.
        max: usize,
    },
}

impl core::fmt::Display for WqeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WqeError::TooLarge { needed, max } => {
                write!(
                    f,
                    "WQE of {needed} bytes exceeds the {max}-byte limit of this queue"
                )
            }
        }
    }
}

/// A send ring: `wqe_cnt` basic blocks of 64 bytes starting at `buf`.
#[derive(Clone, Copy, Debug)]
pub struct SqRing {
    start: *mut u8,
    end: *mut u8,
    wqe_cnt: u32,
}

impl SqRing {
    /// Describe a ring.
    ///
    /// # Safety
    /// `buf` must be 64-byte aligned and valid for reads and writes of `wqe_cnt × 64` bytes for
    /// as long as the ring and every writer made from it are used. `wqe_cnt` must be a power of
    /// two (as `mlx5dv_qp.sq.wqe_cnt` is).
    pub unsafe fn new(buf: *mut u8, wqe_cnt: u32) -> SqRing {
        debug_assert!(wqe_cnt.is_power_of_two());
        SqRing {
            start: buf,
            end: buf.add(wqe_cnt as usize * SEND_WQE_BB),
            wqe_cnt,
        }
    }
    /// Number of basic blocks.
    #[inline(always)]
    pub fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }
    /// Ring start.
    #[inline(always)]
    pub fn start(&self) -> *mut u8 {
        self.start
    }
    /// One past the ring end.
    #[inline(always)]
    pub fn end(&self) -> *mut u8 {
        self.end
    }
    /// Ring size in bytes.
    #[inline(always)]
    pub fn bytes(&self) -> usize {
        self.wqe_cnt as usize * SEND_WQE_BB
    }
    /// The basic block of producer index `pi` (`pi & (wqe_cnt - 1)`; rdma-core
    /// `mlx5_get_send_wqe`).
    #[inline(always)]
    pub fn bb(&self, pi: u16) -> *mut u8 {
        let slot = (pi as usize) & (self.wqe_cnt as usize - 1);
        // SAFETY: slot < wqe_cnt, so the result is inside the ring.
        unsafe { self.start.add(slot * SEND_WQE_BB) }
    }
    /// The largest WQE this ring can hold, in bytes: the ring itself, the 6-bit DS field and
    /// `MLX5_SEND_WQE_MAX_WQEBBS`, whichever is least.
    #[inline(always)]
    pub fn max_wqe_bytes(&self) -> usize {
        let ds_max = MAX_DS as usize * SEND_WQE_DS;
        let ring = self.bytes();
        if ring < ds_max {
            ring
        } else {
            ds_max
        }
    }
}

/// Writes one WQE into a [`SqRing`], segment by segment, wrapping at 16-byte granularity.
///
/// The control segment is written last, by [`WqeWriter::finish`], once the DS count is known.
/// Nothing is checked against the ring's free space: the caller has reserved the blocks.
#[derive(Debug)]
pub struct WqeWriter {
    pi: u16,
    start: *mut u8,
    end: *mut u8,
    ctrl: *mut u8,
    cur: *mut u8,
    size: usize,
    max: usize,
}

impl WqeWriter {
    /// Start a WQE at producer index `pi`; at most `max_bytes` (clamped to
    /// [`SqRing::max_wqe_bytes`]) may be written.
    #[inline(always)]
    pub fn new(ring: &SqRing, pi: u16, max_bytes: usize) -> WqeWriter {
        let ctrl = ring.bb(pi);
        let ring_max = ring.max_wqe_bytes();
        WqeWriter {
            pi,
            start: ring.start,
            end: ring.end,
            ctrl,
            // SAFETY: a BB is 64 bytes, so ctrl + 16 is inside the ring.
            cur: unsafe { ctrl.add(SEND_WQE_DS) },
            size: SEND_WQE_DS,
            max: if max_bytes < ring_max {
                max_bytes
            } else {
                ring_max
            },
        }
    }

    /// Bytes written so far, control segment included.
    #[inline(always)]
    pub fn size(&self) -> usize {
        self.size
    }

    /// Where the next segment goes.
    #[inline(always)]
    pub fn cursor(&self) -> *mut u8 {
        self.cur
    }

    /// Pointer to the control segment (the WQE's first block).
    #[inline(always)]
    pub fn ctrl_ptr(&self) -> *mut u8 {
        self.ctrl
    }

    #[inline(always)]
    fn reserve(&self, n: usize) -> Result<(), WqeError> {
        if self.size + n > self.max {
            return Err(WqeError::TooLarge {
                needed: self.size + n,
                max: self.max,
            });
        }
        Ok(())
    }

    #[inline(always)]
    fn advance16(&mut self) {
        // SAFETY: cur is 16-aligned inside [start, end); end is 64-aligned.
        self.cur = unsafe { self.cur.add(SEND_WQE_DS) };
        if self.cur == self.end {
            self.cur = self.start;
        }
    }

    /// Append a fixed-size segment (a multiple of 16 bytes, checked when this is compiled:
    /// [`Segment::SIZE`]), each 16-byte unit wrapping on its own.
    #[inline(always)]
    pub fn push<S: Segment>(&mut self, seg: &S) -> Result<(), WqeError> {
        self.reserve(S::SIZE)?;
        let src = seg.as_bytes().as_ptr();
        let mut off = 0;
        while off < S::SIZE {
            // SAFETY: `cur` has 16 writable bytes (inside the ring); the source has `S::SIZE`.
            unsafe { core::ptr::copy_nonoverlapping(src.add(off), self.cur, SEND_WQE_DS) };
            self.advance16();
            off += SEND_WQE_DS;
        }
        self.size += S::SIZE;
        Ok(())
    }

    /// Append one inline segment holding the concatenation of `parts` (rdma-core
    /// `set_data_inl_seg`: all SGEs go into a single segment), the payload split across the ring
    /// end when it gets there. An empty payload adds no segment (rdma-core sets `sz = 0`).
    /// Returns the payload length.
    #[inline(always)]
    pub fn push_inline(&mut self, parts: &[&[u8]]) -> Result<u32, WqeError> {
        let mut len = 0usize;
        for p in parts {
            len += p.len();
        }
        if len == 0 {
            return Ok(0);
        }
        let seg = crate::seg::inline_seg_size(len);
        self.reserve(seg)?;
        let hdr = InlineHdr::new(len as u32);
        // SAFETY: cur has 16 writable bytes; the 4-byte header fits before any wrap point.
        unsafe { core::ptr::copy_nonoverlapping(hdr.as_bytes().as_ptr(), self.cur, 4) };
        // SAFETY: cur + 4 is inside the same 16-byte unit.
        let mut dst = unsafe { self.cur.add(4) };
        for p in parts {
            let mut src: &[u8] = p;
            while !src.is_empty() {
                let room = self.end as usize - dst as usize;
                let n = if src.len() < room { src.len() } else { room };
                // SAFETY: `n` bytes fit before the ring end; `reserve` bounded the total.
                unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
                src = &src[n..];
                // SAFETY: dst + n <= end.
                dst = unsafe { dst.add(n) };
                if dst == self.end {
                    dst = self.start;
                }
            }
        }
        let ring = self.end as usize - self.start as usize;
        let mut next = self.cur as usize + seg;
        if next >= self.end as usize {
            next -= ring;
        }
        self.cur = next as *mut u8;
        self.size += seg;
        Ok(len as u32)
    }

    /// Write the control segment and return `(ds, basic blocks)`. `ctrl` names the opcode,
    /// QPN, flags and the rest ([`crate::CtrlSeg::builder`]); the writer fills in the two
    /// fields it knows, replacing whatever `ctrl` had for them: `wqe_index`, the producer
    /// index the writer was made for, and `ds`, the WQE's final DS count.
    #[inline(always)]
    pub fn finish(self, ctrl: CtrlSegBuilder) -> (u32, u32) {
        let ds = ds_for_bytes(self.size);
        let seg = ctrl.wqe_index(self.pi).ds(ds as u8).build();
        // SAFETY: ctrl points at the WQE's first block, inside the ring (`CtrlSeg` has
        // alignment 1).
        unsafe { core::ptr::write(self.ctrl as *mut crate::seg::CtrlSeg, seg) };
        (ds, bbs_for_ds(ds))
    }
}

/// The same writer, specialised for a WQE the caller has already sized and checked: the
/// lean posts of `mlx5-qp` (an RDMA WRITE or SEND, inline or one gather entry, the DC WRITE)
/// build their WQEs with these, in the order [`WqeWriter::new`], [`WqeWriter::push`],
/// [`WqeWriter::push_inline`], [`WqeWriter::finish`] build any other — start, segments,
/// ctrl last. What they leave out is what the caller has proved once for the whole WQE: the
/// size check against `max` (the caller's gate compared the WQE's blocks and data with the
/// QP's limits) and, for a segment that does not reach its block's end, the wrap test per 16
/// bytes. Inlined into the post, the cursor and the size fold into constants offsets from the
/// WQE's first block.
impl WqeWriter {
    /// [`WqeWriter::new`] for a WQE at producer index `pi`, whose first block `ctrl`
    /// (`ring.bb(pi)`, which the caller has at hand) and the blocks after it the caller has
    /// reserved, and whose size it has checked against the QP's limits.
    ///
    /// # Safety
    /// `ctrl` is `ring.bb(pi)`; the WQE's blocks from it are free to write, and everything
    /// written through this writer stays within them.
    #[inline(always)]
    pub unsafe fn reserved(ring: &SqRing, pi: u16, ctrl: *mut u8) -> WqeWriter {
        debug_assert!(ctrl == ring.bb(pi));
        WqeWriter {
            pi,
            start: ring.start,
            end: ring.end,
            ctrl,
            // SAFETY: a BB is 64 bytes, so ctrl + 16 is inside the ring.
            cur: unsafe { ctrl.add(SEND_WQE_DS) },
            size: SEND_WQE_DS,
            max: ring.max_wqe_bytes(),
        }
    }

    /// [`WqeWriter::push`] of a segment that ends at or before the end of the block the
    /// cursor is in: one store, no wrap test (call [`WqeWriter::wrap`] after a segment that
    /// ends a block, before the next one).
    ///
    /// # Safety
    /// The writer was made by [`WqeWriter::reserved`] and the segment does not cross the
    /// cursor's block.
    #[inline(always)]
    pub unsafe fn put<S: Segment>(&mut self, seg: S) {
        // SAFETY: the caller's: the segment's bytes are inside the cursor's block of the ring
        // (segments are `Unaligned`).
        unsafe {
            (self.cur as *mut S).write(seg);
            self.cur = self.cur.add(S::SIZE);
        }
        self.size += S::SIZE;
    }

    /// After a segment that ended a block: the cursor to the ring's start when that block
    /// was the ring's last (what [`WqeWriter::push`] does after every 16 bytes).
    #[inline(always)]
    pub fn wrap(&mut self) {
        if self.cur == self.end {
            self.cur = self.start;
        }
    }

    /// [`WqeWriter::wrap`] with the block that follows already at hand: after a segment that
    /// ended a block, the cursor to `next`, the ring's next block (its first after its last).
    ///
    /// # Safety
    /// The writer was made by [`WqeWriter::reserved`]; its cursor is at the end of a block
    /// and `next` is the ring's block after that one (what [`WqeWriter::wrap`] would find).
    #[inline(always)]
    pub unsafe fn wrap_to(&mut self, next: *mut u8) {
        debug_assert!((self.cur as usize).is_multiple_of(SEND_WQE_BB));
        debug_assert!(
            next == if self.cur == self.end {
                self.start
            } else {
                self.cur
            }
        );
        self.cur = next;
    }

    /// [`WqeWriter::push_inline`] of one payload: the same segment (the BE32 header
    /// `len | MLX5_INLINE_SEG`, the payload, split at the ring end; nothing for an empty
    /// payload; rdma-core `set_data_inl_seg` / `memcpy_to_wqe`), without the size check. A
    /// payload that fits the cursor's block — always, for a short constant length — is one
    /// copy with no test of the ring end.
    ///
    /// # Safety
    /// The writer was made by [`WqeWriter::reserved`] and the segment fits the WQE's blocks.
    #[inline(always)]
    pub unsafe fn put_inline(&mut self, data: &[u8]) {
        let len = data.len();
        if len == 0 {
            return;
        }
        // Where the cursor is in its block: the WQE starts at a block, so the bytes written.
        let in_block = self.size % SEND_WQE_BB;
        // SAFETY: (the whole block) the caller's: the segment's blocks are reserved; the
        // header is in the cursor's block; the payload runs to the ring end and continues
        // at the start.
        unsafe {
            (self.cur as *mut InlineHdr).write(InlineHdr::new(len as u32));
            let dst = self.cur.add(4);
            // A payload that fits the block never reaches the ring end (blocks are whole);
            // with a constant length the compiler drops the test.
            if len <= SEND_WQE_BB - in_block - 4 {
                copy_payload(data.as_ptr(), dst, len);
            } else {
                let room = self.end as usize - dst as usize;
                if len <= room {
                    copy_payload(data.as_ptr(), dst, len);
                } else {
                    core::ptr::copy_nonoverlapping(data.as_ptr(), dst, room);
                    core::ptr::copy_nonoverlapping(data.as_ptr().add(room), self.start, len - room);
                }
            }
        }
        let seg = crate::seg::inline_seg_size(len);
        let mut next = self.cur as usize + seg;
        if next >= self.end as usize {
            next -= self.end as usize - self.start as usize;
        }
        self.cur = next as *mut u8;
        self.size += seg;
    }

    /// [`WqeWriter::finish`] with the ctrl segment's two words already built (from a QP's
    /// template: `opmod | wqe_index | opcode`, `qpn | ds`, then signature, DCI stream,
    /// `fm_ce_se`, immediate; rdma-core `mlx5dv_set_ctrl_seg`), in memory order.
    ///
    /// # Safety
    /// The writer was made by [`WqeWriter::reserved`].
    #[inline(always)]
    pub unsafe fn finish_words(self, w0: u64, w1: u64) {
        // SAFETY: the caller's: `ctrl` is the WQE's first block, 64-byte aligned.
        unsafe {
            (self.ctrl as *mut u64).write(w0);
            (self.ctrl as *mut u64).add(1).write(w1);
        }
    }
}

/// Copy `len` bytes, short payloads with two overlapping unaligned loads and stores instead
/// of a call to `memcpy` (the bytes written are the same).
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes; they do not overlap.
#[inline(always)]
unsafe fn copy_payload(src: *const u8, dst: *mut u8, len: usize) {
    use core::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: every access below is inside the first `len` bytes of `src` / `dst`.
    unsafe {
        if (8..=16).contains(&len) {
            let (a, b) = (rd(src as *const u64), rd(src.add(len - 8) as *const u64));
            wr(dst as *mut u64, a);
            wr(dst.add(len - 8) as *mut u64, b);
        } else if (4..8).contains(&len) {
            let (a, b) = (rd(src as *const u32), rd(src.add(len - 4) as *const u32));
            wr(dst as *mut u32, a);
            wr(dst.add(len - 4) as *mut u32, b);
        } else {
            core::ptr::copy_nonoverlapping(src, dst, len);
        }
    }
}

#[cfg(test)]
mod tests;
