//! The lean entry points: the four common shapes (WRITE or SEND, inline or one gather
//! entry) posted with one gate comparison, singly or in a [`Batch`], and their one
//! out-of-line fallback to the generic path.

use super::*;

/// Bytes before the inline segment of a lean WRITE (ctrl + raddr) and of a lean SEND (ctrl).
pub(super) const RDMA_HDR: usize = 2 * SEND_WQE_DS;
pub(super) const SEND_HDR: usize = SEND_WQE_DS;

/// Blocks and DS count of a WQE of `hdr` bytes of fixed segments plus an inline segment of
/// `len` payload bytes (none when `len` is 0, as rdma-core does): `ceil((hdr + 4 + len) / 64)`
/// blocks (the inline segment's 16-byte padding never crosses a block boundary the payload
/// does not). Wrapping arithmetic: callers check `len` before using the result.
#[inline(always)]
pub(super) fn inline_shape(hdr: usize, len: usize) -> (u32, u32) {
    let end = len.wrapping_add(hdr + 4);
    let bbs = (end.wrapping_add(SEND_WQE_BB - 1) / SEND_WQE_BB) as u32;
    let ds = if len == 0 {
        (hdr / SEND_WQE_DS) as u32
    } else {
        (end.wrapping_add(SEND_WQE_DS - 1) / SEND_WQE_DS) as u32
    };
    (bbs, ds)
}

/// The DS count in the QP's WRITE template: ctrl + raddr + one data segment, or an inline
/// payload of at most 12 bytes.
pub(super) const WRITE_DS: u32 = 3;
/// The DS count in the QP's SEND template: ctrl + one data segment, or at most 12 bytes inline.
pub(super) const SEND_DS: u32 = 2;

/// In a lean entry point: when `$ok` (the WR's data is one the lean path writes) and a gate
/// lets the post through — the fast doorbell sequence's first, then any other mode's — run
/// `$qp.$post(args…, ring)` and return `Ok(())`; otherwise fall through to the generic path.
/// A macro, not a function taking a closure: each branch must get its own copy of the lean
/// body with `ring` a constant, which a closure called twice does not reliably get.
macro_rules! lean_post {
    ($qp:ident, $ok:expr, $post:ident($($arg:expr),*)) => {
        if $ok {
            if $qp.sq.lean_open($qp.sq.fast) {
                $qp.$post($($arg,)* LeanRing::BfPost);
                return Ok(());
            }
            if $qp.sq.lean_open($qp.sq.other) {
                $qp.$post($($arg,)* LeanRing::Any);
                return Ok(());
            }
        }
    };
}

/// In a [`Batch`] post: when `$ok` and the batch gate lets the post through, write the WQE
/// with `$qp.$post(args…, LeanRing::Defer)` (no doorbell) and return `Ok(())`; otherwise fall
/// through to the generic deferred post.
macro_rules! lean_defer {
    ($qp:ident, $ok:expr, $post:ident($($arg:expr),*), $id:expr, $shape:expr, $flags:expr) => {{
        if $ok && $qp.sq.lean_open($qp.sq.batch) {
            $qp.$post($($arg,)* LeanRing::Defer);
            return Ok(());
        }
        return $qp.lean_generic($id, $shape, $flags, true);
    }};
}

/// The WR of a lean entry point, by value, for its one out-of-line fallback
/// (`Qp::lean_slow`): gather entries as `(addr, length, lkey)`.
#[derive(Clone, Copy)]
pub(super) enum LeanShape<'a> {
    WriteInline(&'a [u8], RemoteAddr),
    Write((u64, u32, u32), RemoteAddr),
    SendInline(&'a [u8]),
    Send((u64, u32, u32)),
}

impl LeanShape<'_> {
    #[inline(always)]
    pub(super) fn write(sge: Sge, remote: RemoteAddr) -> LeanShape<'static> {
        LeanShape::Write((sge.addr, sge.length, sge.lkey), remote)
    }
    #[inline(always)]
    pub(super) fn send(sge: Sge) -> LeanShape<'static> {
        LeanShape::Send((sge.addr, sge.length, sge.lkey))
    }
}

/// Which doorbell sequence a lean post ends with: the fast one (through the gate `fast`),
/// whichever the QP's [`DoorbellMode`] asks for (the gate `other`), or none yet (a post in a
/// [`Batch`], the gate `batch`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LeanRing {
    /// [`SendQueue::ring_bf_post`].
    BfPost,
    /// [`SendQueue::ring_other`]: any other mode.
    Any,
    /// [`SendQueue::defer_lean`]: the batch rings when it ends.
    Defer,
}

/// The first 8 bytes of a lean WQE's ctrl segment, in memory order: `opmod 0 | wqe_index |
/// opcode` then `qpn << 8 | ds`, both BE32 (rdma-core `mlx5dv_set_ctrl_seg`), from the QP's
/// template `opcode << 32 | qpn << 8 | tmpl_ds`: a shift, an OR, a byte swap, and an XOR
/// when `ds` differs from the template's (both constant in the common shapes).
#[inline(always)]
pub(super) fn lean_w0(pi: u16, tmpl: u64, tmpl_ds: u32, ds: u32) -> u64 {
    (((pi as u64) << 40 | tmpl) ^ (tmpl_ds ^ ds) as u64).to_be()
}

impl Qp {
    // The lean entry points' rare cases (an error, a WR left pending by `post_deferred`, a QP
    // type or limit the lean check does not cover) go to the generic post of the equivalent
    // WR, out of line so that the hot path keeps neither the WR nor the error on its stack.
    // The result comes back through a pointer passed last, not as the return value: a
    // `Result<()>` is returned through a hidden first argument, which would make the hot path
    // shuffle `self` and `wr_id` out of the registers they arrive in to match it.
    #[inline(always)]
    pub(super) fn lean_generic(
        &mut self,
        wr_id: u64,
        shape: LeanShape<'_>,
        flags: SendFlags,
        defer: bool,
    ) -> Result<()> {
        let mut r = MaybeUninit::uninit();
        self.lean_slow(wr_id, shape, flags, defer, &mut r);
        // SAFETY: `lean_slow` always writes `r`.
        unsafe { r.assume_init() }
    }
    /// The one out-of-line fallback of every lean entry point: rebuild the WR, post it on the
    /// generic path (deferred in a batch).
    #[cold]
    #[inline(never)]
    pub(super) fn lean_slow(
        &mut self,
        wr_id: u64,
        shape: LeanShape<'_>,
        flags: SendFlags,
        defer: bool,
        r: &mut MaybeUninit<Result<()>>,
    ) {
        let sge;
        let wr = match shape {
            LeanShape::WriteInline(data, remote) => SendWr::write(wr_id, remote).inline(data),
            LeanShape::Write((addr, length, lkey), remote) => {
                sge = [Sge { addr, length, lkey }];
                SendWr::write(wr_id, remote).sges(&sge)
            }
            LeanShape::SendInline(data) => SendWr::send(wr_id).inline(data),
            LeanShape::Send((addr, length, lkey)) => {
                sge = [Sge { addr, length, lkey }];
                SendWr::send(wr_id).sges(&sge)
            }
        };
        let wr = wr.flags(flags);
        r.write(if defer {
            self.post_deferred(&wr)
        } else {
            self.post_planned(&wr)
        });
    }

    /// Whether the lean path writes a gather entry of this length: a zero-length entry is
    /// skipped by the generic path, one over 2^31-1 is an error. (Whether the QP allows a
    /// gather entry at all is in the gates.) Constant when the length is.
    #[inline(always)]
    pub(super) fn sge_len_ok(sge: Sge) -> bool {
        sge.length.wrapping_sub(1) < i32::MAX as u32
    }

    /// Whether the lean path writes an inline payload of `len` bytes against the lean
    /// `limit`: at most [`LEAN_INLINE`] bytes always pass (the gates are open only when the
    /// limits allow them; with a constant length the compiler drops the test).
    #[inline(always)]
    pub(super) fn inline_len_ok(len: usize, limit: usize) -> bool {
        len <= LEAN_INLINE || len <= limit
    }

    /// `fm_ce_se` of a lean post; constant when `flags` is and asks for a completion.
    #[inline(always)]
    pub(super) fn lean_fm(&self, flags: SendFlags) -> u8 {
        let fm = FM_CE_SE[(flags.bits() & 7) as usize];
        if flags.contains(SendFlags::SIGNALED) {
            fm
        } else {
            fm | self.sig_all_ce
        }
    }

    /// The start of every lean post: the next WQE's slot × 8 (the byte offset of its WR id,
    /// [`SendQueue::lean_slot`]) and the writer of its blocks, which the gate reserved
    /// ([`WqeWriter::reserved`]: the general writer, specialised for a checked WQE).
    #[inline(always)]
    pub(super) fn lean_writer(&self) -> (usize, WqeWriter) {
        let (slot, ctrl) = self.sq.lean_slot();
        // SAFETY: `ctrl` is the block of the producer index; every caller writes only the
        // blocks a lean gate found free.
        (slot, unsafe {
            WqeWriter::reserved(&self.sq.ring, self.sq.pi as u16, ctrl)
        })
    }

    /// The end of every lean post of the RC shapes, once the segments after the ctrl segment
    /// are in the ring: the ctrl segment from the QP's template, then [`Qp::lean_end`].
    /// `w` is the WQE's writer and `slot` the producer index's slot × 8 ([`Qp::lean_writer`]),
    /// `tmpl` the QP's `ctrl_write` or `ctrl_send` and its DS count.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn lean_finish(
        &mut self,
        w: WqeWriter,
        slot: usize,
        wr_id: u64,
        (tmpl, tmpl_ds): (u64, u32),
        ds: u32,
        bbs: u32,
        flags: SendFlags,
        ring: LeanRing,
    ) {
        let pi = self.sq.pi;
        let w0 = lean_w0(pi as u16, tmpl, tmpl_ds, ds);
        let fm = self.lean_fm(flags);
        // Bytes 8..16: signature 0, DCI stream id 0, fm_ce_se, immediate 0.
        let w1 = ((fm as u64) << 32).to_be();
        self.lean_end(w, slot, wr_id, pi, (w0, w1), ds, bbs, None, ring);
    }

    /// The end of every lean post (the RC shapes' and the DC post's): the ctrl segment's two
    /// words `w0`, `w1` (built in registers) stored, the WR id, the doorbell. `pi` is the
    /// producer index the WQE starts at, `ds` and `bbs` its size; `second` is its second
    /// block when the WQE is a DCI's (the ring's first block when the first is the ring's
    /// last), for the fast sequence's two-block copy ([`SendQueue::ring_bf_post_2bb`], which
    /// the DC gate `dc_fast` allows), `None` for the RC shapes.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn lean_end(
        &mut self,
        w: WqeWriter,
        slot: usize,
        wr_id: u64,
        pi: u64,
        (w0, w1): (u64, u64),
        ds: u32,
        bbs: u32,
        second: Option<*const u8>,
        ring: LeanRing,
    ) {
        let ctrl = w.ctrl_ptr();
        // SAFETY: the caller made `w` with `WqeWriter::reserved` for the gate's blocks.
        unsafe { w.finish_words(w0, w1) };
        // The DC post moves its own gates (`SendQueue::dc_posted`); the RC shapes' move here.
        self.sq.commit_lean(pi, slot, wr_id, bbs, second.is_none());
        let next = pi + bbs as u64;
        match (ring, second) {
            (LeanRing::BfPost, Some(b1)) if bbs == 2 => {
                self.sq.ring_bf_post_2bb(ctrl, b1, next, ds)
            }
            (LeanRing::BfPost, _) => self.sq.ring_bf_post(ctrl, w0, next, bbs, ds),
            (LeanRing::Any, Some(b1)) if bbs == 2 => self.sq.ring_other_2bb(ctrl, b1, w0, next, ds),
            (LeanRing::Any, _) => self.sq.ring_other(ctrl, w0, next, bbs, ds),
            (LeanRing::Defer, _) => self.sq.defer_lean(ctrl),
        }
    }

    /// RDMA WRITE of `data` carried inline, doorbell rung (BlueFlame when it fits): exactly
    /// `post(&SendWr::write(wr_id, remote).inline(data).flags(flags))` — the same checks,
    /// errors, WQE, doorbell and completion — on a path specialised for it, the one a
    /// latency-bound loop wants (`docs/sources.md` §21). Falls back to [`Qp::post`] for
    /// anything its single check does not cover.
    #[inline(always)]
    pub fn post_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<()> {
        lean_post!(
            self,
            Self::inline_len_ok(data.len(), self.fast.inline_rdma),
            lean_write_inline(wr_id, data, remote, flags)
        );
        self.lean_generic(wr_id, LeanShape::WriteInline(data, remote), flags, false)
    }

    /// The lean WRITE with inline data, once a gate let it through.
    #[inline(always)]
    pub(super) fn lean_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
        ring: LeanRing,
    ) {
        let (bbs, ds) = inline_shape(RDMA_HDR, data.len());
        let (slot, mut w) = self.lean_writer();
        // SAFETY: the WQE's `bbs` blocks are free (the gate); the raddr segment is the second
        // 16 bytes of the first block, the inline segment starts in the third.
        unsafe {
            w.put(RaddrSeg::new(remote.addr, remote.rkey));
            w.put_inline(data);
        }
        let tmpl = (self.ctrl_write, WRITE_DS);
        self.lean_finish(w, slot, wr_id, tmpl, ds, bbs, flags, ring);
    }

    /// RDMA WRITE from one registered buffer, doorbell rung: exactly
    /// `post(&SendWr::write(wr_id, remote).sges(&[sge]).flags(flags))`, specialised.
    #[inline(always)]
    pub fn post_write(
        &mut self,
        wr_id: u64,
        sge: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<()> {
        lean_post!(
            self,
            Self::sge_len_ok(sge),
            lean_write(wr_id, sge, remote, flags)
        );
        self.lean_generic(wr_id, LeanShape::write(sge, remote), flags, false)
    }

    /// The lean WRITE of one gather entry, once a gate let it through.
    #[inline(always)]
    pub(super) fn lean_write(
        &mut self,
        wr_id: u64,
        sge: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
        ring: LeanRing,
    ) {
        let (slot, mut w) = self.lean_writer();
        // SAFETY: as in `lean_write_inline`; ctrl + raddr + data segment fill 48 bytes of the
        // one free block.
        unsafe {
            w.put(RaddrSeg::new(remote.addr, remote.rkey));
            w.put(DataSeg::new(sge.length, sge.lkey, sge.addr));
        }
        let tmpl = (self.ctrl_write, WRITE_DS);
        self.lean_finish(w, slot, wr_id, tmpl, 3, 1, flags, ring);
    }

    /// SEND of `data` carried inline, doorbell rung: exactly
    /// `post(&SendWr::send(wr_id).inline(data).flags(flags))`, specialised (RC and UC; a UD
    /// QP needs a destination and takes the generic path, which says so).
    #[inline(always)]
    pub fn post_send_inline(&mut self, wr_id: u64, data: &[u8], flags: SendFlags) -> Result<()> {
        lean_post!(
            self,
            Self::inline_len_ok(data.len(), self.fast.inline_send),
            lean_send_inline(wr_id, data, flags)
        );
        self.lean_generic(wr_id, LeanShape::SendInline(data), flags, false)
    }

    /// The lean SEND with inline data, once a gate let it through.
    #[inline(always)]
    pub(super) fn lean_send_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: SendFlags,
        ring: LeanRing,
    ) {
        let (bbs, ds) = inline_shape(SEND_HDR, data.len());
        let (slot, mut w) = self.lean_writer();
        // SAFETY: the WQE's blocks are free (the gate); the inline segment starts in the
        // second 16 bytes of the first block.
        unsafe { w.put_inline(data) };
        let tmpl = (self.ctrl_send, SEND_DS);
        self.lean_finish(w, slot, wr_id, tmpl, ds, bbs, flags, ring);
    }

    /// SEND from one registered buffer, doorbell rung: exactly
    /// `post(&SendWr::send(wr_id).sges(&[sge]).flags(flags))`, specialised (RC and UC).
    #[inline(always)]
    pub fn post_send(&mut self, wr_id: u64, sge: Sge, flags: SendFlags) -> Result<()> {
        lean_post!(self, Self::sge_len_ok(sge), lean_send(wr_id, sge, flags));
        self.lean_generic(wr_id, LeanShape::send(sge), flags, false)
    }

    /// The lean SEND of one gather entry, once a gate let it through.
    #[inline(always)]
    pub(super) fn lean_send(&mut self, wr_id: u64, sge: Sge, flags: SendFlags, ring: LeanRing) {
        let (slot, mut w) = self.lean_writer();
        // SAFETY: ctrl + data segment fill 32 bytes of the one free block (the gate).
        unsafe { w.put(DataSeg::new(sge.length, sge.lkey, sge.addr)) };
        let tmpl = (self.ctrl_send, SEND_DS);
        self.lean_finish(w, slot, wr_id, tmpl, 2, 1, flags, ring);
    }

    /// Post several WRs and ring once: the guard rings the doorbell when dropped.
    ///
    /// ```no_run
    /// # fn f(qp: &mut mlx5_qp::Qp, wr1: &mlx5_qp::SendWr, wr2: &mlx5_qp::SendWr)
    /// #     -> mlx5_qp::Result<()> {
    /// let mut b = qp.batch();
    /// b.post(wr1)?;
    /// b.post(wr2)?;
    /// drop(b); // one doorbell record update, one 8-byte doorbell
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn batch(&mut self) -> Batch<'_> {
        self.sq.begin_batch();
        Batch { qp: self }
    }

    /// [`Qp::post_deferred`] for a [`Batch`]: the four lean shapes (as in [`Qp::post`]) go
    /// through the batch gate and leave the doorbell to the batch's end, anything else (and
    /// anything the gate stops) to the generic deferred post.
    #[inline(always)]
    pub(super) fn post_batched(&mut self, wr: &SendWr<'_>) -> Result<()> {
        if wr.ud.is_none() && wr.xrc.is_none() && wr.dc.is_none() {
            let (id, f) = (wr.wr_id, wr.flags);
            match (wr.op, wr.data) {
                (SendOp::Write { remote }, SendData::Inline(d)) => lean_defer!(
                    self,
                    Self::inline_len_ok(d.len(), self.fast.inline_rdma),
                    lean_write_inline(id, d, remote, f),
                    id,
                    LeanShape::WriteInline(d, remote),
                    f
                ),
                (SendOp::Write { remote }, SendData::Sges([sge])) => lean_defer!(
                    self,
                    Self::sge_len_ok(*sge),
                    lean_write(id, *sge, remote, f),
                    id,
                    LeanShape::write(*sge, remote),
                    f
                ),
                (SendOp::Send, SendData::Inline(d)) => lean_defer!(
                    self,
                    Self::inline_len_ok(d.len(), self.fast.inline_send),
                    lean_send_inline(id, d, f),
                    id,
                    LeanShape::SendInline(d),
                    f
                ),
                (SendOp::Send, SendData::Sges([sge])) => lean_defer!(
                    self,
                    Self::sge_len_ok(*sge),
                    lean_send(id, *sge, f),
                    id,
                    LeanShape::send(*sge),
                    f
                ),
                _ => {}
            }
        }
        self.post_deferred_slow(wr)
    }

    /// The generic deferred post out of line (a batch's rare shapes).
    #[cold]
    #[inline(never)]
    pub(super) fn post_deferred_slow(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.post_deferred(wr)
    }
}

#[cfg(test)]
mod tests;
