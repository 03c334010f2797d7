//! A CQ shared by QPs of several owners: [`Cq::poll_own`] takes the completions of one
//! table's QPs wherever they sit and leaves every other CQE in the CQ, in its order;
//! [`Cq::discard_next`] takes out a CQE nobody can place (a destroyed QP's, on a CQ that does
//! not track destroyed QPs: [`Cq::track_destroyed`]).
//!
//! Nothing a poll cannot place is consumed ([`Error::leaves_cqe`]): a CQE of a QP missing from
//! the table stays in the CQ for a poll with a table that holds it. A QP's recovery on a
//! shared CQ must nevertheless take every CQE of that QP before its Reset (after it, the
//! QP's indices start again and a stale CQE would name a new WQE), while the CQEs of the
//! other QPs ahead of and among them stay for their owner: `poll_own` moves the table's CQEs
//! ahead of the others' in the software-owned part of the CQ, then polls them. rdma-core
//! moves CQEs the same way when a QP is reset or destroyed (`providers/mlx5/cq.c`
//! `__mlx5_cq_clean`: the other QPs' CQEs are copied over the removed ones, each keeping the
//! owner bit of the slot it lands in), but discards the QP's CQEs, SRQ receives included;
//! here they become completions, WR ids included.

use super::{read_line, Cq, Resolve};
use crate::error::{Error, Result};
use crate::wc::Wc;
use mlx5_cq::{
    sw_owned, Cqe64, CQE_FORMAT_COMPRESSED, CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND_INV,
};
use mlx5_hw::mmio;

impl Cq {
    /// Poll up to `wcs.len()` completions of the QPs and SRQs in `table` only, wherever their
    /// CQEs sit among those of other QPs on this CQ; the CQEs `table` cannot place stay in the
    /// CQ, in their order, for their owner's next poll. Returns how many were written (0 when
    /// the CQ holds none of `table`'s).
    ///
    /// A CQE is `table`'s when it names a QP of `table`, or is a receive whose SRQ
    /// [`Resolve::xrc_srq`] finds (an XRC target's). Such a CQE is completed exactly as
    /// [`Cq::poll`] completes it, with the same accounting and errors — a receive of a QP of
    /// `table` through an SRQ `table` does not hold is [`Error::UnknownSrqn`] and stays in
    /// the CQ. The other CQEs are moved, not read as completions: when the CQE at the
    /// consumer index is another QP's, the software-owned CQEs from there are reordered so
    /// that `table`'s come first (each in its order), then polled. That costs a scan of the
    /// CQEs the device has written and a copy of each (and an allocation of their size): a
    /// call for recovery (a QP's drain before its Reset, [`Qp::flush_outstanding`](crate::Qp::flush_outstanding)
    /// after it), not for the data path, which polls a shared CQ with every QP of it in one
    /// table ([`crate::QpTable`]).
    pub fn poll_own<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> Result<usize> {
        match self.poll(table, wcs) {
            Err(Error::UnknownQpn { .. }) => {}
            r => return r,
        }
        // The CQE at the consumer index is another QP's (`poll` left it in the CQ).
        if !self.gather_own(table) {
            return Ok(0);
        }
        self.poll(table, wcs)
    }

    /// Take the CQE at the consumer index out of the CQ without a completion and return it;
    /// `None` when the CQ holds none (the device still owns the slot). For a CQE no table can
    /// place — what [`Cq::poll`] reports as [`Error::UnknownQpn`] and leaves in the CQ when
    /// its QP was destroyed with CQEs still queued (rdma-core cleans them from the CQ in
    /// `mlx5_destroy_qp`, `__mlx5_cq_clean`; a data path that polls the CQ itself does it
    /// here, or lets the CQ do it: [`Cq::track_destroyed`]). Whatever WR the CQE completed
    /// gets no completion: only for a QP whose WRs are accounted for otherwise.
    pub fn discard_next(&mut self) -> Option<Cqe64> {
        let ci = self.ci;
        let cqe = self.cqe_ptr(ci);
        // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
        let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
        if !sw_owned(op_own, ci, self.cqe_cnt) {
            return None;
        }
        mmio::from_device_barrier();
        // SAFETY: a software-owned CQE of the buffer (64-byte aligned), read after the barrier.
        let bytes = unsafe { read_line(cqe) };
        let c = Cqe64::from_bytes(&bytes);
        tracing::warn!(
            cqn = self.cqn,
            qpn = c.qpn(),
            opcode = c.opcode(),
            wqe_counter = c.wqe_counter(),
            "CQE discarded without a completion"
        );
        self.ci = ci.wrapping_add(1);
        self.update_ci();
        Some(c)
    }

    /// The 64-byte CQE of consumer index `ci` (at +0 or +64 of its slot).
    #[inline]
    fn cqe_ptr(&self, ci: u32) -> *mut u8 {
        let idx = (ci & self.mask) as usize;
        // SAFETY: idx < cqe_cnt, so the CQE is inside the buffer.
        unsafe { self.cqe0.add(idx << self.size_shift) }
    }

    /// The slot (`cqe_size` bytes) of consumer index `ci`.
    #[inline]
    fn slot_ptr(&self, ci: u32) -> *mut u8 {
        // SAFETY: the slot starts `cqe_off` bytes before its 64-byte CQE, inside the buffer.
        unsafe { self.cqe_ptr(ci).sub(self.cqe_off) }
    }

    /// Reorder the software-owned CQEs from the consumer index on so that those of `table`
    /// ([`places`]) come first, then the others, each group in its order; every moved CQE
    /// takes the owner bit of the slot it lands in. Returns whether `table` has any there.
    ///
    /// Only slots the device has handed over are read or written: the device writes a slot
    /// again only once the consumer index (which this does not move) has passed it.
    fn gather_own<R: Resolve + ?Sized>(&mut self, table: &mut R) -> bool {
        let ci = self.ci;
        let mut k = 0u32;
        while k < self.cqe_cnt {
            let cqe = self.cqe_ptr(ci.wrapping_add(k));
            // SAFETY: op_own of a CQE of the buffer; volatile, the device writes it.
            let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
            if !sw_owned(op_own, ci.wrapping_add(k), self.cqe_cnt) {
                break;
            }
            k += 1;
        }
        mmio::from_device_barrier();
        let (mut own, mut other) = (Vec::new(), Vec::new());
        for j in 0..k {
            // SAFETY: a software-owned CQE (tested above), read after the barrier.
            let bytes = unsafe { read_line(self.cqe_ptr(ci.wrapping_add(j))) };
            if places(table, &Cqe64::from_bytes(&bytes)) {
                own.push(j);
            } else {
                other.push(j);
            }
        }
        if own.is_empty() {
            return false;
        }
        // The first CQE out of place: those before it stay where they are.
        let Some(from) = own.iter().zip(0u32..).position(|(&j, i)| j != i) else {
            return true;
        };
        let from = from as u32;
        let order: Vec<u32> = own.into_iter().chain(other).skip(from as usize).collect();
        // Whole slots, in 8-byte words (the first half of a 128-byte slot may hold inline
        // data).
        let words = self.cqe_size / 8;
        let mut saved = vec![0u64; order.len() * words];
        for (chunk, &j) in saved.chunks_exact_mut(words).zip(&order) {
            let src = self.slot_ptr(ci.wrapping_add(j)) as *const u64;
            for (w, v) in chunk.iter_mut().enumerate() {
                // SAFETY: word `w` of a whole software-owned slot of the buffer (8-byte
                // aligned), read after the barrier.
                *v = unsafe { core::ptr::read_volatile(src.add(w)) };
            }
        }
        // `op_own`, the last byte of the slot's last word.
        let last = words - 1;
        let own_shift = if cfg!(target_endian = "little") {
            56
        } else {
            0
        };
        for (chunk, d) in saved.chunks_exact_mut(words).zip(from..) {
            let at = ci.wrapping_add(d);
            // The owner bit of the slot it lands in (the lap's parity), the rest of `op_own`
            // its own.
            let parity = ((at & self.cqe_cnt) != 0) as u64;
            chunk[last] = (chunk[last] & !(1 << own_shift)) | parity << own_shift;
            let dst = self.slot_ptr(at) as *mut u64;
            for (w, &v) in chunk.iter().enumerate() {
                // SAFETY: word `w` of a whole software-owned slot of the buffer (the CQE that
                // was there is in `saved`), 8-byte aligned; the device writes the slot again
                // only once the consumer index has passed it.
                unsafe { core::ptr::write_volatile(dst.add(w), v) };
            }
        }
        true
    }
}

/// Whether `table` takes `cqe` ([`Cq::poll_own`]): it names a QP of `table`, or it is a receive
/// whose XRC SRQ `table` holds ([`Resolve::xrc_srq`]); a CQE kind no poll completes
/// (compressed, resize, signature) counts too, so that the poll reports it.
fn places<R: Resolve + ?Sized>(table: &mut R, cqe: &Cqe64) -> bool {
    let op = cqe.opcode();
    let recv = (1..=CQE_RESP_SEND_INV).contains(&op) || op == CQE_RESP_ERR;
    if !(recv || op == CQE_REQ || op == CQE_REQ_ERR) || cqe.format() == CQE_FORMAT_COMPRESSED {
        return true;
    }
    if table.qp(cqe.qpn()).is_some() {
        return true;
    }
    // `srqn_uidx`: an SRQN, never 0, or a user index, which may be ([`crate::xrc`]).
    recv && table.xrc_srq(cqe.srqn()).is_some()
}
