//! The send queue's gates: the bounds a lean post's producer index is compared against, one
//! per entry sequence (`fast` for `BfPost`, `other` for `Bf`/`Db`, `batch` inside a
//! [`crate::Batch`], `dc_fast`/`dc_other` for a DCI's two-block WQE). Each folds in the QP's
//! state and type, the free WRs and blocks, a pending doorbell and the doorbell mode, so that
//! the post asks one comparison ([`SendQueue::lean_open`]); everything that changes one of
//! them refreshes the gates here.

use super::{DoorbellMode, SendQueue};

impl SendQueue {
    /// The RC gates `(fast, other, batch)` that `open`, `pending`, `inline_ok`, `sge_ok` and
    /// the doorbell call for. An open gate is `ci + min(max_post + extra, lean_cap)`: the
    /// producer index is below it exactly while a WR is free (the outstanding WRs are the
    /// outstanding blocks less `extra`) and a WQE of `wr_bbs` blocks fits the ring. It
    /// counts blocks, so every shape moves it alike: a lean retire of `k` one-block WQEs by
    /// `k` with `ci`, a lean post of a WQE of more than one block by its blocks beyond the
    /// first, as it moves `extra` ([`SendQueue::lean_extra`]), and anything else refreshes
    /// it. A shut gate is `ci`. A QP that allows no gather entry, or fewer than
    /// [`LEAN_INLINE`](super::LEAN_INLINE) inline bytes, posts everything through the
    /// generic path (rare shapes; one gate per sequence keeps the lean poll's bookkeeping to
    /// two additions). In a batch: `(shut, shut, batch)`, the batch gate open under the same
    /// conditions whatever the doorbell mode.
    ///
    /// The DC gates ([`SendQueue::dc_gates`]) bound the same two things another way: they do
    /// not follow lean retires (a DCI's WQEs are of two blocks, retired on the full path,
    /// which refreshes them), so they check once that every free WR fits and then move
    /// without the ring's bound, one addition in the DC post; the ring's bound here, in the
    /// same move, would cost that post four instructions (measured: 72 -> 76 in `BfPost`).
    #[inline]
    pub(super) fn gates(&self) -> (u64, u64, u64) {
        let lean = self.open && self.pending == 0 && self.sge_ok && self.inline_ok;
        let fast = self.db.mode == DoorbellMode::BfPost && self.db.one_bb;
        let wrs = self.max_post as u64 + self.extra as u64;
        let (open, shut) = (self.ci + wrs.min(self.lean_cap), self.ci);
        let gate = |on: bool| if on { open } else { shut };
        if self.in_batch {
            (shut, shut, gate(lean))
        } else {
            (gate(lean && fast), gate(lean && !fast), shut)
        }
    }

    /// A lean post wrote a WQE of `bbs` (more than one) blocks: `extra` rose by `bbs - 1`,
    /// and so does every open RC gate, up to `ci + lean_cap` — what [`SendQueue::gates`] would
    /// give now, without its tests (the conditions of an open gate do not change with a
    /// post). A closed gate stays closed.
    #[inline]
    pub(super) fn lean_extra(&mut self, bbs: u32) {
        let (ci, up) = (self.ci, bbs as u64 - 1);
        let cap = ci + self.lean_cap;
        for g in [&mut self.fast, &mut self.other, &mut self.batch] {
            if *g > ci {
                *g = (*g + up).min(cap);
            }
        }
    }

    /// Open or close the lean gates of the RC shapes (after anything but a lean post or a
    /// lean retire; what changes the DC gates' conditions calls [`SendQueue::refresh_gates`]),
    /// and on a DCI that takes lean DC posts its DC gates too (the full path's retires end
    /// here).
    #[inline]
    pub fn refresh_gate(&mut self) {
        (self.fast, self.other, self.batch) = self.gates();
        if self.dc_open {
            // A DCI: its retires (the full path's, which refreshes here) move the DC gates.
            self.refresh_dc_gates();
        }
    }

    /// Which DC gate the doorbell mode opens: `Some(true)` for `dc_fast`
    /// ([`SendQueue::ring_bf_post_2bb`]), `Some(false)` for `dc_other`
    /// ([`SendQueue::ring_other_2bb`]), `None` when neither sequence serves: a BlueFlame mode
    /// whose halves are smaller than the DC WQE's two blocks or whose register a block copy
    /// may not take (`one_bb`) leaves the DC post to the generic path.
    #[inline]
    pub(super) fn dc_mode_gate(&self) -> Option<bool> {
        let copy2 = self.db.one_bb && self.db.size >= 2 * mlx5_wqe::SEND_WQE_BB as u32;
        match self.db.mode {
            DoorbellMode::Db => Some(false),
            DoorbellMode::Bf if copy2 => Some(false),
            DoorbellMode::BfPost if copy2 => Some(true),
            _ => None,
        }
    }

    /// The DC gates `(dc_fast, dc_other)` for the queue as it is now: shut (0) unless
    /// `dc_open`, nothing pending, no batch and a mode with a DC sequence
    /// ([`SendQueue::dc_mode_gate`]); else, in the gate of the doorbell mode,
    /// `ci + max_post + extra` — the producer index is below it exactly while a WR is free,
    /// and each lean DC post moves it by its blocks beyond the first, as it moves `extra`
    /// ([`SendQueue::dc_posted`]) — provided the blocks stay enough: the outstanding blocks
    /// plus `wr_bbs` for each WR still free (each lean DC WQE is at most `wr_bbs` blocks) fit
    /// the ring. (A WQE of the generic path larger than `wr_bbs` blocks can make them not;
    /// the gate then opens again once it is retired.)
    #[inline]
    fn dc_gates(&self) -> (u64, u64) {
        // 0, not `ci` as for the RC gates: nothing moves a shut DC gate, and a reset, which
        // moves `ci` back to 0, leaves it shut.
        let shut = 0;
        if !self.dc_open || self.pending != 0 || self.in_batch {
            return (shut, shut);
        }
        let blocks = self.pi - self.ci;
        let wrs = blocks - self.extra as u64;
        let free_wrs = (self.max_post as u64).saturating_sub(wrs);
        let fits = blocks + free_wrs * self.wr_bbs as u64 <= self.ring.wqe_cnt() as u64;
        let gate = if fits && free_wrs != 0 {
            self.ci + self.max_post as u64 + self.extra as u64
        } else {
            shut
        };
        match self.dc_mode_gate() {
            Some(true) => (gate, shut),
            Some(false) => (shut, gate),
            None => (shut, shut),
        }
    }

    /// Open or close the DC gates for the queue as it is now (after anything that may shut
    /// them, after a retire of the full path, and when a DC post finds its gate shut).
    #[inline]
    pub fn refresh_dc_gates(&mut self) {
        (self.dc_fast, self.dc_other) = self.dc_gates();
    }

    /// [`SendQueue::refresh_gate`] and [`SendQueue::refresh_dc_gates`].
    #[inline]
    pub fn refresh_gates(&mut self) {
        self.refresh_gate();
        self.refresh_dc_gates();
    }

    /// A [`crate::Batch`] begins: lean posts go through the gate `batch` and leave their
    /// doorbell to [`SendQueue::ring_doorbell`].
    #[inline]
    pub fn begin_batch(&mut self) {
        self.in_batch = true;
        self.refresh_gates();
    }

    /// Open or close the lean entry points (the QP's state, type or limits changed):
    /// `inline_ok`, whether the QP's inline limits allow [`LEAN_INLINE`](super::LEAN_INLINE) bytes for both
    /// lean opcodes; `sge_ok`, whether it allows a gather entry.
    pub fn set_open(&mut self, open: bool, inline_ok: bool, sge_ok: bool) {
        self.open = open;
        self.inline_ok = inline_ok;
        self.sge_ok = sge_ok;
        self.refresh_gate();
    }

    /// Open or close the lean DC post (a DCI's state or limits changed): `open`, whether
    /// they allow it.
    pub fn set_dc_open(&mut self, open: bool) {
        self.dc_open = open;
        self.refresh_dc_gates();
    }

    /// A lean DC post of `bbs` blocks went through the gate `dc_fast` (`fast`) or `dc_other`:
    /// it moves by the blocks beyond the first, as `extra` does ([`SendQueue::dc_gates`]).
    #[inline(always)]
    pub fn dc_posted(&mut self, fast: bool, bbs: u32) {
        if fast {
            self.dc_fast += bbs as u64 - 1;
        } else {
            self.dc_other += bbs as u64 - 1;
        }
    }
}
