//! [`Cq::poll_send`]: the lean poll of one QP's send completions — the WR ids of its
//! successes into a `&mut [u64]`, every other completion to a callback. Runs of common REQ
//! CQEs go through [`LeanRun`]; anything else through [`Cq::poll`] into a small array.

use super::runs::LeanRun;
use super::Cq;
use crate::error::Result;
use crate::qp::Qp;
use crate::queue::WorkQueue;
use crate::wc::Wc;
use mlx5_cq::sw_owned;

impl Cq {
    /// Poll the send completions of one QP, lean: the WR ids of its successful send WRs go
    /// to `wr_ids` (returns how many), every other completion — an error or flush, a
    /// receive — to `other`, in CQE order, so that every completion is still delivered
    /// exactly once (the accounting of [`Cq::poll`]).
    ///
    /// The common CQE — a successful requester CQE of `qp` (opcode REQ, no inline data, SE
    /// clear) naming its oldest outstanding WQE, a one-block WQE that is not an
    /// atomic — costs one owner-byte test, the load barrier, one 8-byte load and a compare
    /// for QPN and `wqe_counter` together, one meta byte and one WR id, each copied straight
    /// to `wr_ids`; the consumer index goes to the doorbell record once per call. Anything
    /// else ends that run; when it is the first CQE of a call, the call hands it to
    /// [`Cq::poll`] (out of line) and sorts what it returns: successful send completions
    /// (a READ, an atomic, a WR retiring unsignaled ones before it) to `wr_ids`, the rest to
    /// `other`.
    ///
    /// Errors are those of [`Cq::poll`] (a CQE of another QP, left in the CQ; one naming no
    /// outstanding WQE, an unsupported format), reported by the call that meets them first.
    /// An empty `wr_ids` polls nothing.
    ///
    /// ```no_run
    /// # fn f(cq: &mut mlx5_qp::Cq, qp: &mut mlx5_qp::Qp) -> mlx5_qp::Result<()> {
    /// let mut done = [0u64; 16];
    /// let n = cq.poll_send(qp, &mut done, |wc| {
    ///     eprintln!("WR {} failed: {}", wc.wr_id(), wc.status())
    /// })?;
    /// for id in &done[..n] { /* WR `id` succeeded */ }
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn poll_send<F: FnMut(Wc)>(
        &mut self,
        qp: &mut Qp,
        wr_ids: &mut [u64],
        other: F,
    ) -> Result<usize> {
        // The common loop, inline: every outstanding WQE has the common shape (no meta byte
        // to read) and CQEs are 64 bytes.
        if qp.send_queue().all_common() & (self.size_shift == 6) {
            let run = self.lean_run(qp, wr_ids);
            // SAFETY: `lean_run` bounded the run.
            let n = unsafe { run.run::<false, 6>() };
            self.lean_retired(qp, n);
            if n != 0 || wr_ids.is_empty() || !self.next_ready() {
                return Ok(n);
            }
        }
        self.poll_send_rest(qp, wr_ids, other)
    }

    /// Whether the CQE at the consumer index is software-owned (any opcode but INVALID).
    #[inline(always)]
    pub(super) fn next_ready(&self) -> bool {
        let idx = (self.ci & (self.cqe_cnt - 1)) as usize;
        // SAFETY: idx < cqe_cnt: op_own, the last byte of a CQE inside the buffer; volatile,
        // the device writes it.
        let op_own =
            unsafe { core::ptr::read_volatile(self.cqe0.add((idx << self.size_shift) + 63)) };
        sw_owned(op_own, self.ci, self.cqe_cnt)
    }

    /// The next lean run: at most `out.len()` CQEs, not past the end of the CQ buffer's lap
    /// (the owner value is the lap's) nor of the send ring (the slots are then consecutive),
    /// and not more than the send queue has outstanding blocks — each CQE retires exactly
    /// one, so the WQE it must name is always outstanding and its slot's bookkeeping current.
    #[inline(always)]
    pub(super) fn lean_run(&self, qp: &mut Qp, out: &mut [u64]) -> LeanRun {
        let key = qp.cqe_qpn_key();
        let v = qp.send_queue().view();
        let ci = self.ci;
        let idx = ci & (self.cqe_cnt - 1);
        let slot = (v.oldest & v.mask) as usize;
        let k = out
            .len()
            .min((self.cqe_cnt - idx) as usize)
            .min(v.outstanding as usize)
            .min(v.mask as usize + 1 - slot);
        // SAFETY: idx < cqe_cnt; slot + k <= wqe_cnt and k <= out.len() (the run's bound).
        unsafe {
            LeanRun {
                cqe: self.cqe0.add((idx as usize) << self.size_shift),
                own: ((ci & self.cqe_cnt) != 0) as u8,
                expect: LeanRun::expect(key, v.oldest),
                meta: v.meta.add(slot),
                wr_ids: v.wr_ids.add(slot),
                out: out.as_mut_ptr(),
                k,
            }
        }
    }

    /// Account for `n` CQEs consumed by a lean run: the consumer indices, the credits, the
    /// doorbell record (once per call).
    #[inline(always)]
    pub(super) fn lean_retired(&mut self, qp: &mut Qp, n: usize) {
        if n != 0 {
            self.ci = self.ci.wrapping_add(n as u32);
            qp.send_queue().retired(n as u16);
            self.update_ci();
        }
    }

    /// What [`Cq::poll_send`]'s common loop does not take, out of line: the same run with
    /// each WQE's meta byte read (an uncommon WQE is outstanding) or CQEs 128 bytes apart;
    /// when that takes nothing either and a CQE is ready, [`Cq::poll`] into a small array,
    /// its completions sorted (successful sends to `wr_ids`, the rest to `other`).
    #[cold]
    #[inline(never)]
    fn poll_send_rest<F: FnMut(Wc)>(
        &mut self,
        qp: &mut Qp,
        wr_ids: &mut [u64],
        mut other: F,
    ) -> Result<usize> {
        let common = qp.send_queue().all_common();
        if !(common & (self.size_shift == 6)) {
            let run = self.lean_run(qp, wr_ids);
            // SAFETY: `lean_run` bounded the run.
            let n = unsafe {
                match (common, self.size_shift) {
                    (true, _) => run.run::<false, 7>(),
                    (false, 6) => run.run::<true, 6>(),
                    (false, _) => run.run::<true, 7>(),
                }
            };
            self.lean_retired(qp, n);
            if n != 0 || wr_ids.is_empty() || !self.next_ready() {
                return Ok(n);
            }
        }
        let mut wcs = [Wc::default(); 16];
        let room = wr_ids.len().min(wcs.len());
        let k = self.poll(qp, &mut wcs[..room])?;
        let mut n = 0;
        for wc in &wcs[..k] {
            if wc.is_ok() && !wc.opcode().is_recv() {
                wr_ids[n] = wc.wr_id();
                n += 1;
            } else {
                other(*wc);
            }
        }
        Ok(n)
    }
}
