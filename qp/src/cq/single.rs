//! The one-entry poll ([`Cq::poll`] with room for one completion, what a ping-pong loop
//! calls): a straight line for a send and a receive CQE, an out-of-line frame for a flush, the
//! full path for the rest.

#[cfg(test)]
use super::paths;
use super::runs::{error_of_lap, good_resp_diff};
use super::{owned_cqe, send_one, Cq, Resolve, SLOW_ERROR};
use crate::error::Result;
use crate::qp::Qp;
use crate::queue::WorkQueue;
use crate::wc::Wc;
use mlx5_cq::{CQE_INVALID, CQE_REQ_ERR, CQE_RESP_ERR, SYNDROME_WR_FLUSH_ERR};
use mlx5_hw::QpState;

impl Cq {
    /// [`Cq::poll`] with room for one completion (what a ping-pong loop calls), straight
    /// line and for both CQE sizes (the slot is the index times the size: one multiply):
    /// the CQE at the consumer index when it is a plain REQ CQE of this lap naming its QP's
    /// oldest outstanding WQE ([`send_one`]) or a good responder CQE of this lap naming its
    /// QP's oldest outstanding receive ([`recv_one`]), else nothing when the CQ is empty,
    /// else [`Cq::poll_one_flush`] (out of line, so that this path needs no register the
    /// caller saved).
    #[inline(always)]
    pub(super) fn poll_one<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> Result<usize> {
        let ci = self.ci;
        let idx = (ci & self.mask) as usize;
        // The CQE's place in the buffer (`poll_one_flush` takes it, not the pointer: a
        // pointer formed here for that call would be formed on every path).
        let off = idx * self.cqe_size;
        // SAFETY: idx < cqe_cnt, so the 64-byte CQE (at +0 or +64 of its slot) is inside the
        // buffer.
        let cqe = unsafe { self.cqe0.add(off) };
        // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
        let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
        // As in `Cq::poll_batch`.
        // What `op_own` differs in from a plain REQ CQE of this lap: nothing for one, the
        // owner bit when the device still owns the slot.
        let diff = op_own ^ ((ci & self.cqe_cnt) != 0) as u8;
        if diff == 0 {
            // SAFETY: the CQE is software-owned (its owner test passed).
            let (tail, qp) = unsafe { owned_cqe(table, cqe) };
            if let Some(qp) = qp {
                // SAFETY: a software-owned CQE, `tail` read after the barrier, room for one.
                if unsafe { send_one(qp, cqe, tail, wcs.as_mut_ptr()) } {
                    #[cfg(test)]
                    paths::served(0, 1);
                    self.ci = ci.wrapping_add(1);
                    self.update_ci();
                    return Ok(1);
                }
            }
        } else if good_resp_diff(diff) {
            // A good responder CQE of this lap, tested before the empty CQ's test: it implies
            // the CQE is software-owned, and a ping-pong receiver's poll that finds its CQE
            // is the one that counts.
            // SAFETY: the CQE is software-owned (its owner test passed).
            let (tail, qp) = unsafe { owned_cqe(table, cqe) };
            if let Some(qp) = qp {
                let o = wcs.as_mut_ptr();
                // SAFETY: a software-owned CQE, `tail` read after the barrier, room for one.
                if let Some(wr_id) = unsafe { recv_one(qp, cqe, tail, o) } {
                    #[cfg(test)]
                    paths::served(1, 1);
                    self.ci = ci.wrapping_add(1);
                    self.update_ci();
                    // The WR id after the consumer index: an order of its own, which keeps
                    // LLVM from sharing the send's last instructions behind a jump.
                    // SAFETY: room for one.
                    unsafe { Wc::write_wr_id(o, wr_id) };
                    return Ok(1);
                }
            }
        } else if (diff & 1 != 0) | (op_own >> 4 == CQE_INVALID) {
            // Not software-owned (rdma-core `get_sw_cqe`), from the owner value at hand.
            return Ok(0);
        }
        // The CQ comes back with the count, so that nothing of this frame need survive the
        // call in a register the caller saved.
        let (n, cq) = self.poll_one_flush(table, &mut wcs[0], off);
        match n {
            SLOW_ERROR => Err(cq.take_error()),
            n => Ok(n),
        }
    }

    /// What [`Cq::poll_one`] declines, from the software-owned CQE at the consumer index
    /// (`off` its place in the buffer, as `poll_one` computed it; its `op_own` read again:
    /// kept for the call, it would take `poll_one` a register it must save; `wc` the one
    /// entry, not the slice: its length would take one more): an error CQE of this lap
    /// through [`flush_one`] (a flush of a queue flushing already), in a frame of its own;
    /// anything else — a queue's first flush among it — through the full path,
    /// [`Cq::poll_uncommon`] (a tail call).
    #[inline(never)]
    fn poll_one_flush<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wc: &mut Wc,
        off: usize,
    ) -> (usize, &mut Cq) {
        let ci = self.ci;
        // SAFETY: `off` is the place of the 64-byte CQE at `ci` in the buffer (`poll_one`).
        let cqe = unsafe { self.cqe0.add(off) };
        // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
        let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
        // `poll_one` found this CQE software-owned, so its owner bit is the lap's (a CQE
        // the device handed over stays as it is until the consumer index passes it).
        if error_of_lap(op_own, op_own & 1) {
            // SAFETY: the CQE is software-owned (its owner test passed).
            let (tail, qp) = unsafe { owned_cqe(table, cqe) };
            if let Some(qp) = qp {
                // REQ_ERR (0xd) or RESP_ERR (0xe): the opcode's low bit, `op_own` bit 4, is
                // bit 60 of `tail` (bytes 56..64 as loaded), one bit test — so `op_own` need
                // not survive the lookup in a register this frame would have to save.
                const { assert!(CQE_REQ_ERR & 1 == 1 && CQE_RESP_ERR & 1 == 0) };
                let send = u64::from_le(tail) & (1 << 60) != 0;
                // SAFETY: as in `poll_one`: a software-owned error CQE of this lap.
                if unsafe { flush_one(qp, cqe, tail, send, wc) } {
                    #[cfg(test)]
                    paths::served(2, 1);
                    return self.took_one(ci);
                }
            }
        }
        self.full_path_one(table, wc)
    }

    /// The full path ([`Cq::poll_uncommon`]) for the one entry: a tail call of
    /// [`Cq::poll_one_flush`] with nothing but what it was given, so that no value of that
    /// frame need survive a call (its few registers are what the one-entry flush costs).
    #[cold]
    #[inline(never)]
    fn full_path_one<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wc: &mut Wc,
    ) -> (usize, &mut Cq) {
        let n = self.poll_uncommon(table, core::slice::from_mut(wc), 0, self.ci, None);
        (n, self)
    }

    /// A one-entry path wrote the completion of the CQE at consumer index `ci`: past it, and
    /// the consumer index to the doorbell record.
    #[inline(always)]
    fn took_one(&mut self, ci: u32) -> (usize, &mut Cq) {
        self.ci = ci.wrapping_add(1);
        self.update_ci();
        (1, self)
    }
}

/// The completion of one good responder CQE of `qp` ([`good_resp`](super::runs::good_resp); `tail`
/// its bytes 56..64, read after the barrier) when it names the oldest outstanding receive of the
/// QP's own receive queue and nothing keeps the lean paths out
/// ([`WorkQueue::names_oldest`]): the CQE's bytes written to `out`
/// ([`Wc::write_resp_cqe`]), the receive retired, its WR id returned for the caller to store
/// ([`Wc::write_wr_id`]); `None` when declined.
///
/// # Safety
/// As [`send_one`].
#[inline(always)]
unsafe fn recv_one(qp: &mut Qp, cqe: *const u8, tail: u64, out: *mut Wc) -> Option<u64> {
    // SAFETY: the caller's: a software-owned CQE.
    let counter = u16::from_be(unsafe { core::ptr::read_volatile(cqe.add(60) as *const u16) });
    if !qp.recv_queue().names_oldest(counter) {
        return None;
    }
    // The CQE's bytes first, the WR id last, as in `send_one`.
    // SAFETY: the caller's.
    unsafe { Wc::write_resp_cqe(out, cqe, tail) };
    Some(qp.recv_queue().take_oldest(counter))
}

/// The completion of one flush CQE of `qp` (an error CQE of this lap, format 0: REQ_ERR when
/// `send`, else RESP_ERR; `tail` its bytes 56..64, read after the barrier) when its syndrome
/// is WR_FLUSH_ERR and it names the oldest outstanding WQE of a queue the lean paths may
/// retire from — a send queue that is flushing already (`flush_run` or the full path begins that) with
/// every outstanding WQE of the common shape, the QP's own receive queue: written to `out`
/// ([`Wc::write_err`]), the WQE retired, as `flush_run` does. Returns whether it was.
///
/// # Safety
/// As [`send_one`].
#[inline(always)]
unsafe fn flush_one(qp: &mut Qp, cqe: *const u8, tail: u64, send: bool, out: *mut Wc) -> bool {
    // SAFETY: the caller's: a software-owned CQE (bytes 60..62 `wqe_counter`, 55 the
    // syndrome, `struct mlx5_err_cqe`). The syndrome in a plain load, as `copy_run` reads it
    // (after the barrier the CQE is the software's until the doorbell record passes it), so
    // that the test reads it in place.
    let (counter, syndrome) = unsafe {
        (
            u16::from_be(core::ptr::read_volatile(cqe.add(60) as *const u16)),
            *cqe.add(55),
        )
    };
    // The syndrome first, one test for both queues (tested after the queue's, the byte is
    // loaded into a register for the two branches).
    if syndrome != SYNDROME_WR_FLUSH_ERR {
        return false;
    }
    // A receive queue only once the QP is in Error (the first receive flush goes through
    // `flush_run` or the full path, which moves it there).
    let named = if send {
        qp.send_queue().flushing() & qp.send_queue().names_oldest(counter)
    } else {
        (qp.state() == QpState::Error) & qp.recv_queue().names_oldest(counter)
    };
    if !named {
        return false;
    }
    let wr_id = if send {
        qp.send_queue().take_oldest(counter)
    } else {
        qp.recv_queue().take_oldest(counter)
    };
    // SAFETY: the caller's; bytes 48..56 of the software-owned CQE.
    unsafe {
        let err = core::ptr::read_volatile(cqe.add(48) as *const u64);
        Wc::write_err(out, wr_id, err, tail);
    }
    true
}
