//! Polling and arming a completion queue.
//!
//! A CQ may serve many QPs and SRQs. [`Cq::poll`] reads CQEs in order and hands each to the QP
//! (or SRQ) it names, found through a [`Resolve`] table the caller passes in: a single
//! [`Qp`], a slice of them (a scan: for a few QPs), a [`QpTable`] (a table indexed by the
//! QPN's low bits: constant time for any number of QPs, no hashing and no allocation on the
//! hot path), or anything implementing the trait.

use core::borrow::BorrowMut;

mod timestamp;

use crate::error::{Error, Result};
use crate::qp::Qp;
use crate::sq::{CqeInfo, Progress};
use crate::srq::Srq;
use crate::wc::{Wc, WcFields, WcOpcode, WcStatus};
use mlx5_cq::{
    arm_value, cqe64_offset, cqe_opcode_name, sw_owned, ArmCmd, Cqe64, CQE_FORMAT_COMPRESSED,
    CQE_FORMAT_INLINE32, CQE_FORMAT_INLINE64, CQE_INVALID, CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR,
    CQE_RESP_SEND, CQE_RESP_SEND_IMM, CQE_RESP_SEND_INV, CQE_RESP_WR_IMM, CQ_ARM_DB, CQ_CI_MASK,
    CQ_DOORBELL, CQ_SET_CI, SYNDROME_WR_FLUSH_ERR,
};
use mlx5_hw::{mmio, CqLayout, QpState};
use mlx5_wqe::seg::DataSeg;

/// Finds the QP or SRQ a CQE belongs to.
pub trait Resolve {
    /// The QP with this number, if this table holds it.
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp>;
    /// The QP a CQE names, from bytes 56..60 of the CQE (`sop_drop_qpn`: the send opcode,
    /// then the QPN big-endian) as one native `u32` load: [`Resolve::qp`] of the QPN, unless
    /// the table can compare those bytes as they are (a single [`Qp`] does).
    #[inline(always)]
    fn qp_of_cqe(&mut self, sop_drop_qpn: u32) -> Option<&mut Qp> {
        let b = sop_drop_qpn.to_ne_bytes();
        self.qp(u32::from_be_bytes([0, b[1], b[2], b[3]]))
    }
    /// The SRQ with this number, if this table holds it.
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        let _ = srqn;
        None
    }
}

impl Resolve for Qp {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        (self.qpn() == qpn).then_some(self)
    }
    #[inline(always)]
    fn qp_of_cqe(&mut self, sop_drop_qpn: u32) -> Option<&mut Qp> {
        // The three QPN bytes as the CQE holds them, the opcode byte masked off.
        let qpn_bytes = u32::from_ne_bytes([0, 0xff, 0xff, 0xff]);
        (sop_drop_qpn & qpn_bytes == self.cqe_sop_key()).then_some(self)
    }
}

/// A slice of QPs: `[Qp]`, `[&mut Qp]`, or of anything that lends one (an owning QP of
/// `mlx5-ctx`).
impl<Q: BorrowMut<Qp>> Resolve for [Q] {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.iter_mut()
            .map(BorrowMut::borrow_mut)
            .find(|q| q.qpn() == qpn)
    }
}

/// QPs and the SRQs some of them receive through.
impl<A: Resolve + ?Sized, S: BorrowMut<Srq>> Resolve for (&mut A, &mut [S]) {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.0.qp(qpn)
    }
    #[inline(always)]
    fn qp_of_cqe(&mut self, sop_drop_qpn: u32) -> Option<&mut Qp> {
        self.0.qp_of_cqe(sop_drop_qpn)
    }
    #[inline(always)]
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.1
            .iter_mut()
            .map(BorrowMut::borrow_mut)
            .find(|s| s.srqn() == srqn)
    }
}

/// An owning table of QPs and SRQs for a CQ that serves many of them.
///
/// Lookup by QPN takes constant time whatever the number of QPs: a direct-indexed table by
/// the QPN's low bits (no scan, no hashing), the smallest power of two at least twice the QPs
/// in which their QPNs' low bits all differ, rebuilt when a QP is added; the entry's QP is
/// checked against the CQE's QPN. libmlx5 does the same with a two-level table indexed by the
/// QPN (rdma-core `providers/mlx5` `mlx5_find_qp`), or by the user index a CQE of version 1
/// carries in `srqn_uidx` (`find_rsc`, `mlx5_find_uidx`), which needs the QP created with
/// that index; the QPN needs nothing from the control path and works on every device. A
/// device hands out QPNs from a range (the software ConnectX counts up), so the low bits of
/// a CQ's QPs rarely collide and the table stays a few entries per QP; at worst it grows to
/// 2^24 entries (4 bytes each), where no two 24-bit QPNs collide.
///
/// An entry holds where its QP sits in the table's array (in 8-byte units, so that the
/// lookup is a load, a compare and an address: no multiply, no bounds check), and an entry
/// that holds no QP names the first element — the first QP, or in an empty table a sentinel
/// whose QPN field no 24-bit QPN equals: the compare of the element's own QPN with the
/// CQE's rejects it, so an empty entry needs no test of its own, and a QP replaced through
/// [`QpTable::qp_at`] by one of another QPN is never taken for the old one.
#[derive(Debug)]
pub struct QpTable {
    /// The QPs, never fewer than one element of capacity: in an empty table that element is
    /// the sentinel (only its QPN field written, [`QpTable::default`]).
    qps: Vec<Qp>,
    srqs: Vec<Srq>,
    /// `qpn & mask` → the byte offset of its QP in `qps` divided by 8 (the QP's index ×
    /// [`QP_UNITS`]); 0, the first element, when none.
    slots: Vec<u32>,
    /// `slots.len() - 1`.
    mask: u32,
    /// Distinct QPNs in the table.
    live: usize,
}

/// The size of a [`Qp`] in the 8-byte units of [`QpTable`]'s entries.
const QP_UNITS: usize = {
    assert!(core::mem::size_of::<Qp>().is_multiple_of(8));
    core::mem::size_of::<Qp>() / 8
};

impl Default for QpTable {
    fn default() -> QpTable {
        let mut qps = Vec::with_capacity(1);
        let spare: &mut [core::mem::MaybeUninit<Qp>] = qps.spare_capacity_mut();
        // SAFETY: the first spare element is allocated (capacity 1) and its QPN field, a
        // `u32` at `Qp::QPN_OFFSET`, aligned inside it; writing it initialises those 4 bytes,
        // the only ones the lookup reads of an element that holds no QP.
        unsafe {
            spare[0]
                .as_mut_ptr()
                .cast::<u8>()
                .add(Qp::QPN_OFFSET)
                .cast::<u32>()
                .write(u32::MAX)
        };
        QpTable {
            qps,
            srqs: Vec::new(),
            slots: vec![0],
            mask: 0,
            live: 0,
        }
    }
}

/// The largest table: every 24-bit QPN has its own entry.
const MAX_SLOTS: usize = 1 << 24;

impl QpTable {
    /// An empty table.
    pub fn new() -> QpTable {
        QpTable::default()
    }
    /// Add a QP; returns its position for [`QpTable::qp_at`]. A QP with the same QPN replaces
    /// the previous one in lookups by QPN.
    ///
    /// # Panics
    /// When the table would hold more QPs than its 32-bit entries can place (2^32 / 8 bytes
    /// of QPs, some 76 million — far more than memory or any device's QPNs allow).
    pub fn insert_qp(&mut self, qp: Qp) -> usize {
        let pos = self.qps.len();
        let at = u32::try_from((pos + 1) * QP_UNITS)
            .expect("QpTable holds at most 2^32 / 8 bytes of QPs");
        let at = at - QP_UNITS as u32;
        let qpn = qp.qpn();
        let slot = (qpn & self.mask) as usize;
        // The entry's QP, when it holds one: the element it names hashes to it.
        let held = self
            .qps
            .get(self.slots[slot] as usize / QP_UNITS)
            .filter(|q| (q.qpn() & self.mask) as usize == slot)
            .map(Qp::qpn);
        self.qps.push(qp);
        match held {
            None if self.slots.len() >= 2 * (self.live + 1) => {
                self.slots[slot] = at;
                self.live += 1;
            }
            Some(q) if q == qpn => self.slots[slot] = at,
            _ => self.rebuild(),
        }
        pos
    }
    /// Size the table for the QPs it holds: the smallest power of two of at least twice their
    /// number in which their QPNs' low bits differ.
    fn rebuild(&mut self) {
        // (qpn, position), the last inserted of each QPN.
        let mut live: Vec<(u32, u32)> = self
            .qps
            .iter()
            .enumerate()
            .map(|(pos, q)| (q.qpn(), pos as u32))
            .collect();
        live.sort_unstable_by_key(|&(qpn, i)| (qpn, core::cmp::Reverse(i)));
        live.dedup_by_key(|e| e.0);
        self.live = live.len();
        let mut len = (2 * live.len()).next_power_of_two().min(MAX_SLOTS);
        loop {
            // `None`: no QP yet (the entry stays 0, the first element).
            let mut slots: Vec<Option<u32>> = vec![None; len];
            let mask = len as u32 - 1;
            let mut ok = true;
            for &(qpn, i) in &live {
                let s = &mut slots[(qpn & mask) as usize];
                if s.is_some() {
                    ok = false;
                    break;
                }
                // At most the `insert_qp` bound.
                *s = Some(i * QP_UNITS as u32);
            }
            if ok || len == MAX_SLOTS {
                self.slots = slots.into_iter().map(|s| s.unwrap_or(0)).collect();
                self.mask = mask;
                return;
            }
            len *= 2;
        }
    }
    /// Add an SRQ; returns its position for [`QpTable::srq_at`].
    pub fn insert_srq(&mut self, srq: Srq) -> usize {
        self.srqs.push(srq);
        self.srqs.len() - 1
    }
    /// The QP at `pos`.
    pub fn qp_at(&mut self, pos: usize) -> Option<&mut Qp> {
        self.qps.get_mut(pos)
    }
    /// The SRQ at `pos`.
    pub fn srq_at(&mut self, pos: usize) -> Option<&mut Srq> {
        self.srqs.get_mut(pos)
    }
    /// All QPs.
    pub fn qps_mut(&mut self) -> &mut [Qp] {
        &mut self.qps
    }
}

impl Resolve for QpTable {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut Qp> {
        // No QP has a number above 24 bits, and the sentinel's is `u32::MAX` (free where the
        // QPN comes from a CQE's three bytes: the compiler knows its top byte is 0).
        if qpn > 0x00ff_ffff {
            return None;
        }
        debug_assert_eq!(self.slots.len(), self.mask as usize + 1);
        // SAFETY: `slots` has `mask + 1` entries (`QpTable::default`, `QpTable::rebuild` set
        // both together), so `qpn & mask` indexes one.
        let at = unsafe { *self.slots.get_unchecked((qpn & self.mask) as usize) } as usize;
        // SAFETY: every entry is `i × QP_UNITS` for an element `i` of `qps`' allocation that
        // is a QP, or is 0 (`insert_qp`, `rebuild`): element 0, a QP or, in an empty table,
        // the sentinel, whose QPN field `default` initialised (capacity is never below 1).
        // So `p` is an element and its QPN field 4 initialised, aligned bytes; the element is
        // a QP whenever that field equals `qpn`, a 24-bit QPN (the sentinel's is `u32::MAX`).
        unsafe {
            let p = self.qps.as_mut_ptr().cast::<u64>().add(at).cast::<Qp>();
            let field = p.cast::<u8>().add(Qp::QPN_OFFSET).cast::<u32>().read();
            if field != qpn {
                return None;
            }
            Some(&mut *p)
        }
    }
    #[inline]
    fn srq(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.srqs.iter_mut().find(|s| s.srqn() == srqn)
    }
}

/// Which path of [`Cq::poll`] retired each completion, and a switch that turns the fast paths
/// off: compiled into the crate's own unit tests only (`#[cfg(test)]`), nothing in a build
/// that others use.
#[cfg(test)]
pub(crate) mod paths {
    use std::cell::Cell;

    thread_local! {
        /// Completions written by: the send run, the receive fast path, the flush run, the
        /// full path.
        pub static SERVED: Cell<[u32; 4]> = const { Cell::new([0; 4]) };
        /// When set, every CQE goes to the full path.
        pub static FAST_OFF: Cell<bool> = const { Cell::new(false) };
    }

    /// Count `n` completions served by path `i`.
    pub fn served(i: usize, n: usize) {
        SERVED.with(|c| {
            let mut v = c.get();
            v[i] += n as u32;
            c.set(v);
        });
    }
}

/// What handing one CQE to its queue did.
enum Consumed {
    /// The CQE is accounted for; this many completions were written.
    Yes(usize),
    /// The output filled first; this many were written and the CQE stays for the next poll.
    NotYet(usize),
}

/// A completion queue's consumer side.
///
/// Owned by one thread (`Send`, not `Sync`). Poll it with [`Cq::poll`]; arm it with
/// [`Cq::arm`] and call [`Cq::ack_event`] for every completion event consumed from the device.
#[derive(Debug)]
// The layout rule for threads (`lines` module): the object owns whole cache lines.
#[repr(align(64))]
pub struct Cq {
    dbrec: *mut u32,
    cqe_cnt: u32,
    /// `cqe_cnt - 1`.
    mask: u32,
    /// Bytes a CQE slot (64 or 128; the one-entry poll scales by it: one multiply for both).
    cqe_size: usize,
    cqe_off: usize,
    /// `buf + cqe_off`: the 64-byte CQE of slot 0.
    cqe0: *mut u8,
    /// `log2(cqe_size)`.
    size_shift: u32,
    uar: *mut u8,
    cqn: u32,
    ci: u32,
    arm_sn: u32,
    /// The last error an out-of-line path of [`Cq::poll`] met, which the call returns (the
    /// path returns [`SLOW_ERROR`]: a count in a register, not a `Result` in memory, so
    /// that the fast path's caller keeps its arguments where they came). Read, not cleared:
    /// every path stores its error before it returns `SLOW_ERROR`.
    error: Option<Error>,
}

/// What an out-of-line path of [`Cq::poll`] returns when it left its error in [`Cq`]'s
/// `error` (no call writes that many completions).
const SLOW_ERROR: usize = usize::MAX;

// SAFETY: the raw pointers name device-shared memory owned by the CQ object, not by a thread;
// `Cq` has no interior mutability. Not `Sync`: polling needs `&mut self`.
unsafe impl Send for Cq {}

impl Cq {
    /// Build the consumer side of a CQ from what the device handed out.
    ///
    /// # Safety
    /// `layout` describes a live CQ: `buf` (`cqe_cnt × cqe_size` bytes, initialised by the
    /// device or rdma-core with `op_own = 0xF0`), `dbrec` and `cq_uar` stay mapped until this
    /// `Cq` is dropped, and nothing else consumes this CQ (no `ibv_poll_cq`, no second `Cq`).
    pub unsafe fn from_layout(layout: &CqLayout) -> Result<Cq> {
        if layout.buf.is_null() || layout.dbrec.is_null() || layout.cq_uar.is_null() {
            return Err(Error::BadLayout(
                "CQ buffer, doorbell record or UAR is null",
            ));
        }
        if !layout.cqe_cnt.is_power_of_two() || layout.cqe_cnt > 1 << 24 {
            return Err(Error::BadLayout("CQ cqe_cnt must be a power of two ≤ 2^24"));
        }
        if layout.cqe_size != 64 && layout.cqe_size != 128 {
            return Err(Error::BadLayout("CQE size must be 64 or 128"));
        }
        if !(layout.buf as usize).is_multiple_of(64) || !(layout.cq_uar as usize).is_multiple_of(8)
        {
            return Err(Error::BadLayout("CQ buffer or UAR misaligned"));
        }
        Ok(Cq {
            dbrec: layout.dbrec,
            cqe_cnt: layout.cqe_cnt,
            mask: layout.cqe_cnt - 1,
            cqe_size: layout.cqe_size as usize,
            cqe_off: cqe64_offset(layout.cqe_size),
            // SAFETY: the offset (0 or 64) is inside the first slot.
            cqe0: unsafe { layout.buf.add(cqe64_offset(layout.cqe_size)) },
            size_shift: layout.cqe_size.trailing_zeros(),
            uar: layout.cq_uar,
            cqn: layout.cqn,
            ci: 0,
            arm_sn: 0,
            error: None,
        })
    }

    /// CQ number.
    #[inline(always)]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Consumer index (free-running; the device sees its low 24 bits).
    #[inline(always)]
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// The arm sequence number the next [`Cq::arm`] uses (2 bits).
    #[inline(always)]
    pub fn arm_sn(&self) -> u32 {
        self.arm_sn & 3
    }

    /// Poll up to `wcs.len()` completions; returns how many were written.
    ///
    /// Each CQE whose owner bit matches the lap and whose opcode is not INVALID is read after
    /// `from_device_barrier` and handed to the QP or SRQ it names in `table`; after the batch
    /// the consumer index goes to `dbrec[0]` (24 bits) unless the CQ ignores overrun.
    ///
    /// **Accounting** (every posted WR is retired exactly once):
    /// - a signaled send WR produces one completion; unsignaled ones that succeed produce
    ///   none and are retired by the next completion of their QP (verbs semantics); a success
    ///   CQE gives the WR it names a completion (a device writes one only for a signaled WR;
    ///   rdma-core reports every CQE it polls);
    /// - an error CQE produces an error completion for the WR it names, with the syndrome and
    ///   vendor syndrome; the unsignaled WRs before a *non-flush* error had completed in order
    ///   and are retired silently; before a *flush* error, and for every WR retired after the
    ///   first error, each WR gets a completion (`IBV_WC_WR_FLUSH_ERR` when the device did not
    ///   name it);
    /// - every receive WR produces one completion;
    /// - [`Qp::flush_outstanding`] reports what a QP in Error still holds.
    ///
    /// When `wcs` fills in the middle of such a run, the CQE stays unconsumed and the next
    /// poll continues where this one stopped. Inline-scattered data (CQE formats 1 and 2) is
    /// copied into the receive buffers (or a READ/atomic's local buffer) before the
    /// completion is returned.
    ///
    /// **Errors.** A CQE for a QPN or SRQ not in `table`, one naming no outstanding WQE, or an
    /// unsupported kind (compressed, resize, signature) is consumed and returned as an error
    /// — but only when it is the first CQE of a call: completions already written are returned
    /// first, and the bad CQE is reported by the next call. A receive CQE naming a later WQE
    /// than the oldest outstanding one (the device broke the in-order receive contract) is
    /// [`Error::RecvOutOfOrder`], reported the same way but left in the CQ: the next call
    /// delivers its completion (the WR id of the WQE it names), and the WQEs it skipped stay
    /// outstanding; nothing is flushed on their behalf.
    #[inline(always)]
    pub fn poll<R: Resolve + ?Sized>(&mut self, table: &mut R, wcs: &mut [Wc]) -> Result<usize> {
        #[cfg(test)]
        if paths::FAST_OFF.with(|f| f.get()) {
            return self.poll_from(table, wcs, 0, self.ci);
        }
        if wcs.len() == 1 {
            return self.poll_single(table, wcs);
        }
        if self.size_shift == 6 {
            self.poll_with::<R, 6>(table, wcs)
        } else {
            match self.poll_128(table, wcs) {
                SLOW_ERROR => Err(self.take_error()),
                n => Ok(n),
            }
        }
    }

    /// [`Cq::poll`] for 128-byte CQEs, out of line (one inline copy of the fast loop is
    /// enough for the callers'), its error to `error` ([`SLOW_ERROR`]).
    #[inline(never)]
    fn poll_128<R: Resolve + ?Sized>(&mut self, table: &mut R, wcs: &mut [Wc]) -> usize {
        let r = self.poll_with::<R, 7>(table, wcs);
        self.stash(r)
    }

    /// An out-of-line path's result as a count: its error to `error`, [`SLOW_ERROR`] for it.
    #[inline(always)]
    fn stash(&mut self, r: Result<usize>) -> usize {
        match r {
            Ok(n) => n,
            Err(e) => {
                self.error = Some(e);
                SLOW_ERROR
            }
        }
    }

    /// [`Cq::poll`] with CQEs `1 << SHIFT` bytes apart.
    #[inline(always)]
    fn poll_with<R: Resolve + ?Sized, const SHIFT: u32>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> Result<usize> {
        let start = self.ci;
        // The fast loop (`Cq::poll_fast`, inline) retires runs of common CQEs; the first other
        // CQE (an error, inline scatter, a QP it does not know, ...) hands the rest of the
        // call to the full path (`Cq::poll_rest`, out of line), which starts by reading that
        // CQE afresh: its owner byte, the barrier, the CQE.
        let (n, more) = self.poll_fast::<R, SHIFT>(table, wcs);
        if more {
            return self.poll_from(table, wcs, n, start);
        }
        if n != 0 {
            self.update_ci();
        }
        Ok(n)
    }

    /// [`Cq::poll`] with room for one completion (what a ping-pong loop calls), straight
    /// line and for both CQE sizes (the slot is the index times the size: one multiply):
    /// the CQE at the consumer index when it is a plain REQ CQE of this lap naming its QP's
    /// oldest outstanding WQE ([`send_one`]) or a good responder CQE of this lap naming its
    /// QP's oldest outstanding receive ([`recv_one`]), else nothing when the CQ is empty,
    /// else [`Cq::poll_single_flush`] (out of line, so that this path needs no register the
    /// caller saved).
    #[inline(always)]
    fn poll_single<R: Resolve + ?Sized>(&mut self, table: &mut R, wcs: &mut [Wc]) -> Result<usize> {
        let ci = self.ci;
        let idx = (ci & self.mask) as usize;
        // The CQE's place in the buffer (`poll_single_flush` takes it, not the pointer: a
        // pointer formed here for that call would be formed on every path).
        let off = idx * self.cqe_size;
        // SAFETY: idx < cqe_cnt, so the 64-byte CQE (at +0 or +64 of its slot) is inside the
        // buffer.
        let cqe = unsafe { self.cqe0.add(off) };
        // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
        let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
        // As in `poll_fast`.
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
        let (n, cq) = self.poll_single_flush(table, &mut wcs[0], off);
        match n {
            SLOW_ERROR => Err(cq.take_error()),
            n => Ok(n),
        }
    }

    /// The error an out-of-line path left in `error` (read, not cleared: every path that
    /// returns [`SLOW_ERROR`] stores its error first, and a store here would be one more
    /// memory access after the cold call, which keeps LLVM from confining that call's stack
    /// frame to the cold path).
    #[inline(always)]
    fn take_error(&self) -> Error {
        self.error
            .unwrap_or(Error::BadLayout("no error was stashed"))
    }

    /// What [`Cq::poll_single`] declines, from the software-owned CQE at the consumer index
    /// (`off` its place in the buffer, as `poll_single` computed it; its `op_own` read again:
    /// kept for the call, it would take `poll_single` a register it must save; `wc` the one
    /// entry, not the slice: its length would take one more): an error
    /// CQE of this lap through [`flush_one`] (a flush of a queue flushing already), in a
    /// frame of its own; anything else and what that declines through
    /// [`Cq::poll_single_full`] (a tail call).
    #[inline(never)]
    fn poll_single_flush<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wc: &mut Wc,
        off: usize,
    ) -> (usize, &mut Cq) {
        let ci = self.ci;
        // SAFETY: `off` is the place of the 64-byte CQE at `ci` in the buffer (`poll_single`).
        let cqe = unsafe { self.cqe0.add(off) };
        // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
        let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
        // `poll_single` found this CQE software-owned, so its owner bit is the lap's (a CQE
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
                // SAFETY: as in `poll_single`: a software-owned error CQE of this lap.
                if unsafe { flush_one(qp, cqe, tail, send, wc) } {
                    #[cfg(test)]
                    paths::served(2, 1);
                    return self.took_one(ci);
                }
            }
        }
        self.poll_single_full(table, wc)
    }

    /// What [`Cq::poll_single_flush`] declines: a queue's first flush through [`flush_run`]
    /// (which begins the send queue's flushing or moves the QP to Error), anything else and
    /// what that declines through the full path. Reads the CQE afresh: its owner byte, the
    /// barrier, the rest.
    #[cold]
    #[inline(never)]
    fn poll_single_full<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wc: &mut Wc,
    ) -> (usize, &mut Cq) {
        let (ci, cqe, op_own, own) = self.at_ci();
        if error_of_lap(op_own, own) {
            // SAFETY: the CQE is software-owned (its owner test passed).
            let (tail, qp) = unsafe { owned_cqe(table, cqe) };
            if let Some(qp) = qp {
                // SAFETY: as in `poll_single`; a run of one CQE reads no other, so the CQE
                // size (its `SHIFT`) does not matter to it.
                if unsafe { flush_run::<6>(qp, cqe, tail, op_own, 1, wc) } == 1 {
                    #[cfg(test)]
                    paths::served(2, 1);
                    return self.took_one(ci);
                }
            }
        }
        let r = self.poll_from(table, core::slice::from_mut(wc), 0, ci);
        (self.stash(r), self)
    }

    /// The consumer index, its CQE (the 64-byte one of its slot), that CQE's `op_own` (read
    /// volatile: the device writes it) and the owner value of this lap.
    #[inline(always)]
    fn at_ci(&self) -> (u32, *mut u8, u8, u8) {
        let (ci, cqe_cnt) = (self.ci, self.cqe_cnt);
        let idx = (ci & (cqe_cnt - 1)) as usize;
        // SAFETY: idx < cqe_cnt, so the 64-byte CQE (at +0 or +64 of its slot) is inside the
        // buffer.
        let cqe = unsafe { self.cqe0.add(idx << self.size_shift) };
        // SAFETY: op_own is the last byte of the CQE.
        let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
        (ci, cqe, op_own, ((ci & cqe_cnt) != 0) as u8)
    }

    /// A one-entry path wrote the completion of the CQE at consumer index `ci`: past it, and
    /// the consumer index to the doorbell record.
    #[inline(always)]
    fn took_one(&mut self, ci: u32) -> (usize, &mut Cq) {
        self.ci = ci.wrapping_add(1);
        self.update_ci();
        (1, self)
    }

    /// The fast loop of [`Cq::poll`]: while the CQE at the consumer index is a plain REQ CQE
    /// (opcode 0, format 0, SE clear), a good responder CQE ([`good_resp`]) or a flush of
    /// this lap, retire it — and the run of CQEs of the same QP behind it — a send CQE through
    /// [`send_one`], inline, then [`send_more`] (out of line) when its QP has more outstanding
    /// and `wcs` more room; a receive CQE through [`recv_run`], a flush through [`flush_run`]
    /// (out of line). Where a send or receive run ends at a CQE of another QP, the CQEs from
    /// there go through [`distinct_run`] or [`distinct_recv_run`] (each CQE's QP found anew:
    /// a CQ shared by many QPs).
    /// Returns the completions written and whether it stopped at a CQE it declined (software
    /// owned, left for the full path) rather than at an empty CQ or a full `wcs`. Moves the
    /// consumer index, not the doorbell record.
    ///
    /// Everything it uses of the CQ is read once into locals before the loop: the load
    /// barrier after each owner test makes LLVM reload memory it cannot prove unchanged.
    ///
    /// CQEs are `1 << SHIFT` bytes apart (64 or 128: the 64-byte CQE at the end of its
    /// slot).
    #[inline(always)]
    fn poll_fast<R: Resolve + ?Sized, const SHIFT: u32>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> (usize, bool) {
        let (cqe0, cqe_cnt) = (self.cqe0, self.cqe_cnt);
        let len = wcs.len();
        // The next completion's entry and the entries left from it (counting down: fewer
        // values live across the loop).
        let mut o = wcs.as_mut_ptr();
        let mut rem = len;
        let mut ci = self.ci;
        let mut more = false;
        while rem != 0 {
            let idx = ci & (cqe_cnt - 1);
            // SAFETY: idx < cqe_cnt, so the 64-byte CQE (at +0 or +64 of its slot) is inside
            // the buffer.
            let cqe = unsafe { cqe0.add((idx as usize) << SHIFT) };
            // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
            let op_own = unsafe { core::ptr::read_volatile(cqe.add(63)) };
            // A plain REQ CQE of this lap: `op_own` is the owner bit alone (rdma-core
            // `get_sw_cqe`: owner bit against the lap's parity, opcode not INVALID).
            let own = ((ci & cqe_cnt) != 0) as u8;
            if op_own == own {
                // SAFETY: the CQE is software-owned (its owner test passed).
                let (tail, qp) = unsafe { owned_cqe(table, cqe) };
                let Some(qp) = qp else {
                    more = true;
                    break;
                };
                // SAFETY: a software-owned CQE, `tail` its bytes 56..64 read after the
                // barrier, `o` has `rem` (at least 1) entries.
                if !unsafe { send_one(qp, cqe, tail, o) } {
                    more = true;
                    break;
                }
                #[cfg(test)]
                paths::served(0, 1);
                // One CQE, one entry: constant steps (the common case with many QPs).
                rem -= 1;
                // SAFETY: one of the `rem` entries was written.
                o = unsafe { o.add(1) };
                ci = ci.wrapping_add(1);
                if rem == 0 {
                    break;
                }
                // (`wrapping_add`: past the buffer when this CQE ends the lap; then the lap
                // has 0 more and nothing is read there.)
                let next = cqe.wrapping_add(1 << SHIFT);
                let lap = (cqe_cnt - 1 - idx) as usize;
                let k = if qp.sq_seems_idle() {
                    0
                } else {
                    // More of this QP may follow.
                    // SAFETY: `next` starts the `lap` CQEs left in this lap; `o` has `rem`
                    // entries; `send_one` just took this QP's CQE.
                    unsafe { send_more::<SHIFT>(qp, next, own, rem, lap, o) }
                };
                let k = if k != 0 {
                    k
                } else {
                    // The next CQE (at `ci`, perhaps of the next lap) is not of this QP: when
                    // it is a plain REQ CQE, it and those after it are of a CQ shared by many
                    // QPs, in a loop of their own. Recomputed from `ci`, not kept across the
                    // call above.
                    let (next, own, lap) = cqe_at::<SHIFT>(cqe0, cqe_cnt, ci);
                    // SAFETY: op_own of that CQE, read volatile as above.
                    if unsafe { core::ptr::read_volatile(next.add(63)) } == own {
                        // SAFETY: `next` starts the `lap` CQEs left in its lap; `o` has `rem`
                        // entries.
                        unsafe { distinct_run::<R, SHIFT>(table, next, own, rem.min(lap), o) }
                    } else {
                        0
                    }
                };
                #[cfg(test)]
                paths::served(0, k);
                rem -= k;
                // SAFETY: k of the `rem` entries were written.
                o = unsafe { o.add(k) };
                ci = ci.wrapping_add(k as u32);
                continue;
            }
            // Room in `wcs` and in this lap of the CQ (the owner value is the lap's).
            let room = Room {
                out: rem,
                idx,
                cqe_cnt,
            };
            // An error CQE of this lap (a flush: `flush_run`), else a good responder CQE
            // (`recv_run`), else the full path's.
            let flush = error_of_lap(op_own, own);
            if !flush && !good_resp(op_own, own) {
                more = sw_owned(op_own, ci, cqe_cnt);
                break;
            }
            let lap = room.out.min(room.lap());
            // SAFETY: `cqe` is a software-owned CQE (its owner test passed) with
            // `room.lap() - 1` more of this lap after it, `tail` its bytes 56..64 read after
            // the barrier, `o` has `room.out` entries.
            let k = match unsafe { owned_cqe(table, cqe) } {
                (tail, Some(qp)) if flush => unsafe {
                    flush_run::<SHIFT>(qp, cqe, tail, op_own, lap, o)
                },
                (tail, Some(qp)) => unsafe { recv_run::<SHIFT>(qp, cqe, tail, op_own, lap, o) },
                (_, None) => 0,
            };
            if k == 0 {
                more = true;
                break;
            }
            #[cfg(test)]
            paths::served(if flush { 2 } else { 1 }, k);
            rem -= k;
            // SAFETY: k of the `rem` entries from `o` were written.
            o = unsafe { o.add(k) };
            ci = ci.wrapping_add(k as u32);
            if rem != 0 {
                // The run ended before `wcs` did: when the next CQE (at `ci`, perhaps of the
                // next lap) is a good responder CQE, it is of another QP or kind, and with
                // those after it is of a receive CQ shared by many QPs, in a loop of its own.
                // (Everything recomputed from `ci`: nothing kept across the call above.)
                let (next, own, lap) = cqe_at::<SHIFT>(cqe0, cqe_cnt, ci);
                // SAFETY: op_own of that CQE, read volatile as above.
                let want = unsafe { core::ptr::read_volatile(next.add(63)) };
                if good_resp(want, own) {
                    // SAFETY: `next` starts the `lap` CQEs left in its lap, a good responder
                    // CQE of that lap; `o` has `rem` entries.
                    let k = unsafe {
                        distinct_recv_run::<R, SHIFT>(table, next, want, rem.min(lap), o)
                    };
                    #[cfg(test)]
                    paths::served(1, k);
                    rem -= k;
                    // SAFETY: k of the `rem` entries from `o` were written.
                    o = unsafe { o.add(k) };
                    ci = ci.wrapping_add(k as u32);
                }
            }
        }
        self.ci = ci;
        (len - rem, more)
    }

    /// The rest of a [`Cq::poll`] call from its first uncommon CQE: `n` completions are in
    /// `wcs` already, `start` is the consumer index the call began at.
    /// Returns the completions written; an error (reported only as the first CQE of a call)
    /// goes to `error`.
    #[inline(never)]
    fn poll_rest<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        mut n: usize,
        start: u32,
        error: &mut Option<Error>,
    ) -> usize {
        // Read once: the stores into `wcs` and the queues would make the compiler reload them.
        let (cqe0, cqe_cnt, size_shift) = (self.cqe0, self.cqe_cnt, self.size_shift);
        let mut err = None;
        while n < wcs.len() {
            let ci = self.ci;
            let idx = (ci & (cqe_cnt - 1)) as usize;
            // SAFETY: idx < cqe_cnt, so the 64-byte CQE (at +0 or +64 of its slot) is inside
            // the buffer.
            let cqe_ptr = unsafe { cqe0.add(idx << size_shift) };
            // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
            let op_own = unsafe { core::ptr::read_volatile(cqe_ptr.add(63)) };
            // The common case in one test (UCX `uct_ib_mlx5_poll_cq` tests error, invalid
            // and compressed CQEs with one mask, `docs/sources.md` §8): opcode REQ (bits 7:4 = 0),
            // no inline scatter and not compressed (format, bits 3:2 = 0), owner bit (bit 0)
            // equal to the lap parity (rdma-core `get_sw_cqe`). SE (bit 1) is ignored.
            let parity = ((ci & cqe_cnt) != 0) as u8;
            if (op_own ^ parity) & 0xfd == 0 {
                mmio::from_device_barrier();
                // SAFETY: the CQE is software-owned; bytes 56..64 (sop_drop_qpn, wqe_counter,
                // signature, op_own) and 44..48 (byte_cnt) read after the barrier.
                // Whole-word volatile loads (8-byte aligned in a 64-byte aligned CQE), one
                // instruction each; the bytes are taken apart in registers.
                let (tail, byte_cnt) = unsafe {
                    (
                        core::ptr::read_volatile(cqe_ptr.add(56) as *const u64).to_ne_bytes(),
                        core::ptr::read_volatile(cqe_ptr.add(44) as *const u32).to_ne_bytes(),
                    )
                };
                let qpn = u32::from_be_bytes([0, tail[1], tail[2], tail[3]]);
                let wqe_counter = u16::from_be_bytes([tail[4], tail[5]]);
                if let Some(qp) = table.qp(qpn) {
                    if qp.complete_send_success(
                        wqe_counter,
                        qpn,
                        u32::from_be_bytes(byte_cnt),
                        &mut wcs[n],
                    ) {
                        #[cfg(test)]
                        paths::served(3, 1);
                        n += 1;
                        self.ci = ci.wrapping_add(1);
                        continue;
                    }
                }
            } else if !sw_owned(op_own, ci, cqe_cnt) {
                break;
            }
            match self.poll_one_slow(cqe_ptr, table, &mut wcs[n..], n == 0) {
                Ok(Consumed::Yes(k)) => {
                    #[cfg(test)]
                    paths::served(3, k);
                    n += k;
                    self.ci = self.ci.wrapping_add(1);
                }
                Ok(Consumed::NotYet(k)) => {
                    #[cfg(test)]
                    paths::served(3, k);
                    n += k;
                    break;
                }
                Err(e) => {
                    if n == 0 {
                        // A receive out of order stays in the CQ: the next call delivers it.
                        if !matches!(e, Error::RecvOutOfOrder { .. }) {
                            self.ci = self.ci.wrapping_add(1);
                        }
                        err = Some(e);
                    }
                    break;
                }
            }
        }
        if self.ci != start {
            self.update_ci();
        }
        if let Some(e) = err {
            *error = Some(self.report(e));
        }
        n
    }

    /// [`Cq::poll_rest`] as a `Result`: the error it stashed, else the completions. Inline,
    /// so that the fast paths' callers see their own `Ok` in registers, not a result the
    /// out-of-line call wrote to memory.
    #[inline(always)]
    fn poll_from<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        n: usize,
        start: u32,
    ) -> Result<usize> {
        let mut error = None;
        let n = self.poll_rest(table, wcs, n, start, &mut error);
        match error {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

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
    /// Errors are those of [`Cq::poll`] (a CQE of another QP, one naming no outstanding WQE,
    /// an unsupported format), reported by the call that meets them first. An empty
    /// `wr_ids` polls nothing.
    ///
    /// ```no_run
    /// # fn f(cq: &mut mlx5_qp::Cq, qp: &mut mlx5_qp::Qp) -> mlx5_qp::Result<()> {
    /// let mut done = [0u64; 16];
    /// let n = cq.poll_send(qp, &mut done, |wc| eprintln!("WR {} failed: {}", wc.wr_id(), wc.status()))?;
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
        let n = self.poll_send_lean(qp, wr_ids);
        if n != 0 || wr_ids.is_empty() || !self.next_ready() {
            return Ok(n);
        }
        self.poll_send_other(qp, wr_ids, other)
    }

    /// Whether the CQE at the consumer index is software-owned (any opcode but INVALID).
    #[inline(always)]
    fn next_ready(&self) -> bool {
        let idx = (self.ci & (self.cqe_cnt - 1)) as usize;
        // SAFETY: idx < cqe_cnt: op_own, the last byte of a CQE inside the buffer; volatile,
        // the device writes it.
        let op_own =
            unsafe { core::ptr::read_volatile(self.cqe0.add((idx << self.size_shift) + 63)) };
        sw_owned(op_own, self.ci, self.cqe_cnt)
    }

    /// The run of common CQEs of [`Cq::poll_send`] ([`Cq::lean_run`]), in the common loop
    /// when every outstanding WQE has the common shape and CQEs are 64 bytes.
    #[inline(always)]
    fn poll_send_lean(&mut self, qp: &mut Qp, out: &mut [u64]) -> usize {
        if !(qp.sq_all_common() & (self.size_shift == 6)) {
            return self.poll_send_lean_rare(qp, out);
        }
        let run = self.lean_run(qp, out);
        // SAFETY: `lean_run` bounded the run.
        let n = unsafe { run.run::<false, 6>() };
        self.lean_retired(qp, n);
        n
    }

    /// [`Cq::poll_send`]'s run when some outstanding WQE is of an uncommon shape (the meta
    /// bytes are read) or the CQEs are 128 bytes: out of line, to keep the common loop's
    /// registers free.
    #[inline(never)]
    fn poll_send_lean_rare(&mut self, qp: &mut Qp, out: &mut [u64]) -> usize {
        let common = qp.sq_all_common();
        let run = self.lean_run(qp, out);
        // SAFETY: `lean_run` bounded the run.
        let n = unsafe {
            match (common, self.size_shift) {
                (true, 6) => run.run::<false, 6>(),
                (true, _) => run.run::<false, 7>(),
                (false, 6) => run.run::<true, 6>(),
                (false, _) => run.run::<true, 7>(),
            }
        };
        self.lean_retired(qp, n);
        n
    }

    /// The next lean run: at most `out.len()` CQEs, not past the end of the CQ buffer's lap
    /// (the owner value is the lap's) nor of the send ring (the slots are then consecutive),
    /// and not more than the send queue has outstanding blocks — each CQE retires exactly
    /// one, so the WQE it must name is always outstanding and its slot's bookkeeping current.
    #[inline(always)]
    fn lean_run(&self, qp: &Qp, out: &mut [u64]) -> LeanRun {
        let v = qp.sq_lean_view();
        let ci = self.ci;
        let idx = ci & (self.cqe_cnt - 1);
        let slot = (v.ci & v.mask) as usize;
        let k = out
            .len()
            .min((self.cqe_cnt - idx) as usize)
            .min(v.room as usize)
            .min(v.mask as usize + 1 - slot);
        // SAFETY: idx < cqe_cnt; slot + k <= wqe_cnt and k <= out.len() (the run's bound).
        unsafe {
            LeanRun {
                cqe: self.cqe0.add((idx as usize) << self.size_shift),
                own: ((ci & self.cqe_cnt) != 0) as u8,
                expect: LeanRun::expect(qp.cqe_qpn_key(), v.ci),
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
    fn lean_retired(&mut self, qp: &mut Qp, n: usize) {
        if n != 0 {
            self.ci = self.ci.wrapping_add(n as u32);
            qp.sq_lean_retired(n as u16);
            self.update_ci();
        }
    }

    /// The rest of [`Cq::poll_send`]: [`Cq::poll`] into a small array, sorted.
    #[cold]
    #[inline(never)]
    fn poll_send_other<F: FnMut(Wc)>(
        &mut self,
        qp: &mut Qp,
        wr_ids: &mut [u64],
        mut other: F,
    ) -> Result<usize> {
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

    /// Log a CQE that was consumed without a completion (out of line: errors are rare).
    #[cold]
    #[inline(never)]
    fn report(&self, e: Error) -> Error {
        tracing::warn!(cqn = self.cqn, error = %e, "CQE ignored");
        e
    }

    /// Every CQE the fast test in [`Cq::poll`] does not finish: read it whole (after the
    /// ownership test and its barrier) and hand it to its queue. A CQE naming no outstanding
    /// WQE comes back as [`Error::BadCqe`].
    #[inline(never)]
    fn poll_one_slow<R: Resolve + ?Sized>(
        &mut self,
        cqe_ptr: *mut u8,
        table: &mut R,
        out: &mut [Wc],
        first: bool,
    ) -> Result<Consumed> {
        mmio::from_device_barrier();
        // SAFETY: the CQE is software-owned (checked by the caller); read all 64 bytes after
        // the barrier.
        let cqe = unsafe { read_line(cqe_ptr) };
        let cqe = Cqe64::from_bytes(&cqe);
        // SAFETY: the slot starts `cqe_off` bytes before its 64-byte CQE.
        let slot = unsafe { cqe_ptr.sub(self.cqe_off) };
        match self.handle(&cqe, slot, table, out, first)? {
            Progress::Done(k) => Ok(Consumed::Yes(k)),
            Progress::Partial(k) => Ok(Consumed::NotYet(k)),
            Progress::Bad(why) => Err(Error::BadCqe {
                cqn: self.cqn,
                qpn: cqe.qpn(),
                wqe_counter: cqe.wqe_counter(),
                why,
            }),
        }
    }

    /// The consumer index to the doorbell record — also when the CQ ignores overrun, where
    /// the device does not need it: rdma-core's `update_cons_index` writes it unconditionally
    /// too, and the write then needs no test.
    #[inline(always)]
    fn update_ci(&mut self) {
        // Read before the fence, which makes the compiler reload memory after it.
        let ci = self.ci & CQ_CI_MASK;
        // The CQE reads must be done before the device may reuse the slots: x86 never lets a
        // store pass an earlier load, elsewhere a load barrier orders them.
        #[cfg(target_arch = "x86_64")]
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        #[cfg(not(target_arch = "x86_64"))]
        mmio::from_device_barrier();
        // SAFETY: `dbrec` is the CQ's live doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(CQ_SET_CI), ci) };
    }

    #[inline(always)]
    fn handle<R: Resolve + ?Sized>(
        &mut self,
        cqe: &Cqe64,
        slot: *mut u8,
        table: &mut R,
        out: &mut [Wc],
        first: bool,
    ) -> Result<Progress> {
        let opcode = cqe.opcode();
        let format = cqe.format();
        let unsupported = || Error::UnsupportedCqe {
            cqn: self.cqn,
            opcode,
            name: cqe_opcode_name(opcode),
            format,
        };
        if format == CQE_FORMAT_COMPRESSED {
            return Err(unsupported());
        }
        let front: [u8; 64];
        let inline: Option<&[u8]> = match format {
            CQE_FORMAT_INLINE32 => Some(&cqe.as_bytes()[..32]),
            CQE_FORMAT_INLINE64 if self.cqe_size == 128 => {
                // SAFETY: the first half of a 128-byte slot, inside the buffer, read after the
                // ownership check and its barrier.
                front = unsafe { read_line(slot) };
                Some(&front[..])
            }
            _ => None,
        };
        let qpn = cqe.qpn();
        match opcode {
            CQE_REQ | CQE_REQ_ERR => {
                let (status, syndrome, vendor_err) = if opcode == CQE_REQ_ERR {
                    let e = cqe.as_err();
                    (
                        WcStatus::from_syndrome(e.syndrome),
                        e.syndrome,
                        e.vendor_err_synd,
                    )
                } else {
                    (WcStatus::Success, 0, 0)
                };
                let info = CqeInfo {
                    qpn,
                    status,
                    syndrome,
                    vendor_err,
                    byte_cnt: cqe.byte_cnt(),
                };
                let cqn = self.cqn;
                let qp = table.qp(qpn).ok_or(Error::UnknownQpn { cqn, qpn })?;
                // An error moves the QP out of RTS, but a late flush of an error period it
                // was recovered from does not move it back.
                if status != WcStatus::Success
                    && !qp.sq_error_of_recovered_period(cqe.wqe_counter())
                {
                    qp.follow_error_completion(true);
                }
                if let (Some(data), WcStatus::Success) = (inline, status) {
                    // Requester scatter-to-CQE: a READ or atomic reply (rdma-core `mlx5_parse_cqe`:
                    // `mlx5_copy_to_send_wqe` for a requester CQE with inline scatter).
                    let mut segs = [DataSeg::default(); 16];
                    let k = qp.reply_sges(cqe.wqe_counter(), &mut segs);
                    let len = (cqe.byte_cnt() as usize).min(data.len());
                    // SAFETY: the WQE is outstanding: its local segments are the caller's
                    // buffers, valid until this completion (post contract).
                    unsafe { crate::scatter::scatter(&data[..len], &segs[..k]) };
                }
                Ok(qp.complete_send(cqe.wqe_counter(), &info, out))
            }
            CQE_RESP_SEND | CQE_RESP_SEND_IMM | CQE_RESP_SEND_INV | CQE_RESP_WR_IMM
            | CQE_RESP_ERR => {
                let wc = if opcode == CQE_RESP_ERR {
                    let e = cqe.as_err();
                    Wc::new(&WcFields {
                        qp_num: qpn,
                        opcode: WcOpcode::Recv,
                        status: WcStatus::from_syndrome(e.syndrome),
                        syndrome: e.syndrome,
                        vendor_err: e.vendor_err_synd,
                        ..WcFields::default()
                    })
                } else {
                    Wc::responder(cqe)
                };
                let cqn = self.cqn;
                let Some(qp) = table.qp(qpn) else {
                    // An XRC target has no data path: its receives belong to the XRC SRQ.
                    return crate::xrc::complete_on_srq(table, cqe, wc, inline, out, cqn);
                };
                if !wc.is_ok() {
                    qp.follow_error_completion(false);
                }
                match qp.srqn() {
                    None => qp
                        .complete_recv(cqe.wqe_counter(), wc, inline, out, first)
                        .map_err(|expected| Error::RecvOutOfOrder {
                            cqn,
                            qpn,
                            wqe_counter: cqe.wqe_counter(),
                            expected,
                        }),
                    Some(srqn) => {
                        let srq = table.srq(srqn).ok_or(Error::UnknownSrqn { cqn, srqn })?;
                        Ok(srq.complete(cqe.wqe_counter(), wc, inline, out))
                    }
                }
            }
            _ => Err(unsupported()),
        }
    }

    /// Request a completion event for the next completion (`solicited_only = false`) or the
    /// next solicited or error completion (rdma-core `mlx5_arm_cq`): `dbrec[1] =
    /// BE32(sn << 28 | cmd | ci)`, then WC start, then the 64-bit doorbell
    /// `BE32(sn << 28 | cmd | ci) ‖ BE32(cqn)` at `cq_uar + 0x20`, then flush.
    ///
    /// The event goes to the CQ's completion channel. The arm carries the consumer index, and
    /// the device fires at once for CQEs already past it, so the race-free wait is: poll until
    /// empty, arm, poll again, and sleep on the channel only if that found nothing
    /// ([`mlx5_hw::device`] module documentation).
    #[inline]
    pub fn arm(&mut self, solicited_only: bool) {
        let cmd = if solicited_only {
            ArmCmd::Solicited
        } else {
            ArmCmd::Next
        };
        let v = arm_value(self.arm_sn, cmd, self.ci);
        // SAFETY: `dbrec` is the CQ's live doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(CQ_ARM_DB), v) };
        mmio::wc_start();
        let db = ((v as u64) << 32 | self.cqn as u64).to_be();
        // SAFETY: `uar + 0x20` is the CQ doorbell register of the live UAR page (8-byte
        // aligned, checked at construction); one 64-bit store, bytes in device order.
        unsafe { core::ptr::write_volatile(self.uar.add(CQ_DOORBELL) as *mut u64, db) };
        mmio::flush_writes();
    }

    /// Account for one completion event of this CQ taken from its channel
    /// ([`mlx5_hw::Device::get_cq_event`] / [`mlx5_hw::Device::wait_cq_event`]): advances the
    /// arm sequence number, as rdma-core's `mlx5_cq_event` does inside `ibv_get_cq_event`, so
    /// that the next arm is told apart from the last. Call it once per event taken, before
    /// the next [`Cq::arm`]; acknowledging the event to the device
    /// ([`mlx5_hw::Device::ack_cq_events`], which may be batched) is separate.
    #[inline]
    pub fn ack_event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }
}

/// The 64 bytes at `p` in eight 8-byte volatile loads (a volatile load of a byte array or of
/// `Cqe64` is a load per field or byte).
///
/// # Safety
/// `p` is 8-byte aligned and names 64 readable bytes.
#[inline(always)]
unsafe fn read_line(p: *const u8) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
        // SAFETY: the caller's: word i of the 64 bytes, 8-byte aligned.
        let w = unsafe { core::ptr::read_volatile((p as *const u64).add(i)) };
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    b
}

/// The completion of one plain REQ CQE of `qp` (its bytes 56..64 `tail`, read after the
/// barrier) when it names the QP's oldest outstanding WQE and every outstanding WQE is of
/// the common shape: written to `out`, the WQE retired. Returns whether it was.
///
/// # Safety
/// `out` is writable; `cqe` is a software-owned CQE read after the barrier.
#[inline(always)]
unsafe fn send_one(qp: &mut Qp, cqe: *const u8, tail: u64, out: *mut Wc) -> bool {
    // `wqe_counter` loaded on its own (BE16 at byte 60; a 16-bit load is zero-extended, so
    // the swap leaves the slot index ready), after the barrier like `tail`.
    // SAFETY: the caller's: a software-owned CQE.
    let counter = u16::from_be(unsafe { core::ptr::read_volatile(cqe.add(60) as *const u16) });
    if !qp.sq_names_oldest(counter) {
        return false;
    }
    // The CQE's bytes first, the WR id last: the CQE's registers are free before the send
    // queue's are needed.
    // SAFETY: the caller's.
    unsafe {
        Wc::write_req_cqe(out, cqe, tail);
        Wc::write_wr_id(out, qp.sq_take_oldest(counter));
    }
    true
}

/// The completion of one good responder CQE of `qp` ([`good_resp`]; `tail` its bytes 56..64,
/// read after the barrier) when it names the oldest outstanding receive of the QP's own
/// receive queue and nothing keeps the lean paths out
/// ([`crate::rq::RecvQueue::names_oldest`]): the CQE's bytes written to `out`
/// ([`Wc::write_resp_cqe`]), the receive retired, its WR id returned for the caller to store
/// ([`Wc::write_wr_id`]); `None` when declined.
///
/// # Safety
/// As [`send_one`].
#[inline(always)]
unsafe fn recv_one(qp: &mut Qp, cqe: *const u8, tail: u64, out: *mut Wc) -> Option<u64> {
    // SAFETY: the caller's: a software-owned CQE.
    let counter = u16::from_be(unsafe { core::ptr::read_volatile(cqe.add(60) as *const u16) });
    if !qp.rq_names_oldest(counter) {
        return None;
    }
    // The CQE's bytes first, the WR id last, as in `send_one`.
    // SAFETY: the caller's.
    unsafe { Wc::write_resp_cqe(out, cqe, tail) };
    Some(qp.rq_take_oldest(counter))
}

/// The completion of one flush CQE of `qp` (an error CQE of this lap, format 0: REQ_ERR when
/// `send`, else RESP_ERR; `tail` its bytes 56..64, read after the barrier) when its syndrome
/// is WR_FLUSH_ERR and it names the oldest outstanding WQE of a queue the lean paths may
/// retire from — a send queue that is flushing already ([`flush_run`] begins that) with
/// every outstanding WQE of the common shape, the QP's own receive queue: written to `out`
/// ([`Wc::write_err`]), the WQE retired, as [`flush_run`] does. Returns whether it was.
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
    // `flush_run`, which moves it there).
    let named = if send {
        qp.sq_flushing() & qp.sq_names_oldest(counter)
    } else {
        (qp.state() == QpState::Error) & qp.rq_names_oldest(counter)
    };
    if !named {
        return false;
    }
    let wr_id = if send {
        qp.sq_take_oldest(counter)
    } else {
        qp.rq_take_oldest(counter)
    };
    // SAFETY: the caller's; bytes 48..56 of the software-owned CQE.
    unsafe {
        let err = core::ptr::read_volatile(cqe.add(48) as *const u64);
        Wc::write_err(out, wr_id, err, tail);
    }
    true
}

/// After a CQE's owner test: the load barrier (rdma-core `udma_from_device_barrier`), the
/// CQE's bytes 56..64 and the QP in `table` they name ([`Resolve::qp_of_cqe`]).
///
/// # Safety
/// `cqe` is a 64-byte CQE of the buffer whose owner test passed (software-owned).
#[inline(always)]
unsafe fn owned_cqe<R: Resolve + ?Sized>(table: &mut R, cqe: *const u8) -> (u64, Option<&mut Qp>) {
    mmio::from_device_barrier();
    // SAFETY: the caller's; bytes 56..64 read after the barrier, volatile as every read of
    // the device-written ring.
    let tail = unsafe { core::ptr::read_volatile(cqe.add(56) as *const u64) };
    (tail, table.qp_of_cqe(sop_word(tail)))
}

/// Bytes 56..60 of a CQE (`sop_drop_qpn`) from `tail`, its bytes 56..64 as loaded: the
/// native word of those four bytes, for [`Resolve::qp_of_cqe`].
#[inline(always)]
fn sop_word(tail: u64) -> u32 {
    let b = tail.to_ne_bytes();
    u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

/// The rest of a run of common send completions of `qp` after [`send_one`] took its first:
/// from the CQE at `cqe` (the next slot of the CQ), while each is a plain REQ CQE of this lap
/// (`op_own == own`, read volatile, then the barrier, then its bytes 56..64) naming the QP's
/// oldest outstanding WQE — QPN and `wqe_counter` in one compare ([`LeanRun::expect`]) — write
/// its completion (the WR id and the CQE's bytes: `Wc::write_req`)
/// and retire it. Only while every outstanding WQE is of the common shape (one block, not an
/// atomic): then each CQE retires exactly one block, and the WQE it must name is the next
/// one. At most `out_room` (the entries of `out`), `lap` (the CQEs left in the CQ's lap from
/// `cqe`), the outstanding blocks and the blocks to the send ring's end (the slots are then
/// consecutive). Returns the CQEs consumed (the QP's bookkeeping moved, the CQ's consumer
/// index not).
///
/// Out of line, in a loop over locals: after the load barrier LLVM would otherwise reload
/// every field of the QP per CQE, and inline its registers would crowd the caller's loop.
///
/// # Safety
/// `out` has `out_room` entries; `cqe` is the first of `lap` CQEs of this lap, `1 << SHIFT`
/// bytes apart (when `lap` is 0 it may point past the buffer: nothing is read); [`send_one`]
/// just took the QP's previous CQE (so every outstanding WQE is of the common shape).
#[inline(never)]
unsafe fn send_more<const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *const u8,
    own: u8,
    out_room: usize,
    lap: usize,
    out: *mut Wc,
) -> usize {
    // `send_one` took this QP's previous CQE: every outstanding WQE is of the common shape
    // (retiring keeps it so), checked there.
    // SAFETY: the caller's; `lap` bounds the CQEs read.
    unsafe { sq_run::<REQ_RUN, SHIFT>(qp, cqe, own, None, out_room.min(lap), out) }
}

/// The send queue's part of [`send_more`] and [`flush_run`]: from the slot of its oldest
/// WQE, at most `room` CQEs (and the outstanding blocks, and the blocks to the ring's end:
/// the slots are then consecutive) through [`copy_run`] of `KIND`, what they retire retired.
/// Every outstanding WQE is of the common shape (the caller checked). Returns the CQEs taken.
///
/// # Safety
/// As [`copy_run`] for `room` CQEs from `cqe` and `room` entries of `out`.
#[inline(always)]
unsafe fn sq_run<const KIND: u8, const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *const u8,
    want: u8,
    first: Option<u64>,
    room: usize,
    out: *mut Wc,
) -> usize {
    let v = qp.sq_lean_view();
    let slot = (v.ci & v.mask) as usize;
    let n = room.min(v.room as usize).min((v.mask as usize - slot) + 1);
    let expect = if KIND == FLUSH_RUN {
        flush_expect(qp.cqe_qpn_key(), v.ci)
    } else {
        LeanRun::expect(qp.cqe_qpn_key(), v.ci)
    };
    // SAFETY: slot < wqe_cnt: its WR id; the caller's for the CQEs and `out`.
    let i =
        unsafe { copy_run::<KIND, SHIFT>(cqe, want, expect, first, v.wr_ids.add(slot), n, out) };
    qp.sq_lean_retired(i as u16);
    i
}

/// The receive queue's part of [`recv_run`] and [`flush_run`]: as [`sq_run`] for the QP's own
/// receive queue when its lean view allows ([`crate::rq::RecvQueue::lean_view`]: 0 on an
/// SRQ or with a receive completed out of order), the first CQE's bytes 56..64 `tail` read
/// already.
///
/// # Safety
/// As [`sq_run`].
#[inline(always)]
unsafe fn rq_run<const KIND: u8, const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *const u8,
    want: u8,
    tail: u64,
    room: usize,
    out: *mut Wc,
) -> usize {
    let Some(v) = qp.rq_lean_view() else {
        return 0;
    };
    let slot = (v.tail & v.mask) as usize;
    let n = room
        .min(v.outstanding as usize)
        .min((v.mask as usize - slot) + 1);
    // Bytes 56..62 of a responder CQE of this QP naming receive `c`: the QPN's part as a
    // REQ CQE's (bits 31:24 of `sop_drop_qpn` are outside the compare), the counter BE16 (for
    // a flush one byte up, behind the syndrome).
    let expect = if KIND == FLUSH_RUN {
        flush_expect(qp.cqe_qpn_key(), v.tail)
    } else {
        LeanRun::expect(qp.cqe_qpn_key(), v.tail)
    };
    // SAFETY: slot < wqe_cnt: its WR id; the caller's for the CQEs (the first read already)
    // and `out`.
    let j = unsafe {
        copy_run::<KIND, SHIFT>(cqe, want, expect, Some(tail), v.wr_ids.add(slot), n, out)
    };
    qp.rq_lean_retired(j as u16);
    j
}

/// What a [`copy_run`] takes: plain REQ CQEs ([`Wc::write_req`]).
const REQ_RUN: u8 = 0;
/// What a [`copy_run`] takes: good responder CQEs ([`Wc::write_resp`]).
const RESP_RUN: u8 = 1;
/// What a [`copy_run`] takes: error CQEs of syndrome WR_FLUSH_ERR ([`Wc::write_err`]).
const FLUSH_RUN: u8 = 2;

/// Plain REQ CQEs of this lap from `cqe`, each naming the oldest outstanding WQE of its QP
/// in `table`, found for each CQE — what a CQ shared by many QPs sees, their CQEs
/// interleaved: at most `n` (at most the CQEs left in this lap from `cqe`, and the entries
/// of `out`), each as [`send_one`] takes it, until one is not such a CQE. (The caller
/// enters it where the next CQE is not of the QP it just served; a run of one QP met here
/// costs the lookup per CQE, not [`send_more`]'s one compare.) Returns the CQEs consumed
/// (their QPs' bookkeeping moved, the CQ's consumer index not).
///
/// Out of line, in a loop of its own: the caller's loop, shaped for runs of one QP, would
/// pay its run test and its consumer-index arithmetic per CQE.
///
/// # Safety
/// The `n` CQEs from `cqe` are inside this lap, `1 << SHIFT` bytes apart; `out` has `n`
/// entries.
#[inline(never)]
unsafe fn distinct_run<R: Resolve + ?Sized, const SHIFT: u32>(
    table: &mut R,
    cqe: *const u8,
    own: u8,
    n: usize,
    out: *mut Wc,
) -> usize {
    // SAFETY: the caller's; a plain REQ CQE's `op_own` of this lap is `own`.
    unsafe { distinct_loop::<REQ_RUN, R, SHIFT>(table, cqe, own, n, out) }
}

/// Good responder CQEs of this lap from `cqe`, each with `op_own == want` (one kind of
/// responder CQE) and naming the oldest outstanding receive of its QP in `table`, found for
/// each CQE — what a receive CQ shared by many QPs sees: at most `n` (at most the CQEs left
/// in this lap from `cqe`, and the entries of `out`), each as [`recv_one`] takes it, until
/// one is not such a CQE. Returns the CQEs consumed (their QPs' receive queues moved, the
/// CQ's consumer index not).
///
/// Out of line, in a loop of its own, as [`distinct_run`]; the caller enters it where a
/// receive run ([`recv_run`]) ended at another good responder CQE.
///
/// # Safety
/// The `n` CQEs from `cqe` are inside this lap, `1 << SHIFT` bytes apart; `want` is a good
/// responder CQE's `op_own` of this lap ([`good_resp`]); `out` has `n` entries.
#[inline(never)]
unsafe fn distinct_recv_run<R: Resolve + ?Sized, const SHIFT: u32>(
    table: &mut R,
    cqe: *const u8,
    want: u8,
    n: usize,
    out: *mut Wc,
) -> usize {
    // SAFETY: the caller's.
    unsafe { distinct_loop::<RESP_RUN, R, SHIFT>(table, cqe, want, n, out) }
}

/// The loop of [`distinct_run`] (`KIND` [`REQ_RUN`]: [`send_one`]) and
/// [`distinct_recv_run`] ([`RESP_RUN`]: [`recv_one`]): while the CQE has `op_own == want`
/// (read volatile), the barrier, its bytes 56..64, its QP in `table`, and the one-entry
/// path's take of it. Returns the CQEs taken.
///
/// # Safety
/// As [`distinct_recv_run`], `want` an `op_own` of this lap of the kind `KIND` takes.
#[inline(always)]
unsafe fn distinct_loop<const KIND: u8, R: Resolve + ?Sized, const SHIFT: u32>(
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
                if !qp.sq_names_oldest(counter) {
                    break;
                }
                Wc::write_req_cqe(o, c, tail);
                Wc::write_wr_id(o, qp.sq_take_oldest(counter));
            } else {
                if !qp.rq_names_oldest(counter) {
                    break;
                }
                Wc::write_resp_cqe(o, c, tail);
                Wc::write_wr_id(o, qp.rq_take_oldest(counter));
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
/// `1 << SHIFT` bytes apart, while each has `op_own == want` (read volatile, then the
/// barrier, then its bytes 56..64: rdma-core `get_sw_cqe`, then `udma_from_device_barrier`)
/// and holds the QPN and `wqe_counter` of `expect` (one compare, [`LeanRun::expect`]; one
/// more counter each) — and for [`FLUSH_RUN`] the syndrome WR_FLUSH_ERR — write its
/// completion as `KIND` says with the WR id of the next slot from `wr0`. `first`: the first CQE's bytes 56..64 when the caller
/// read them already after its owner test and barrier (`None`: that CQE is tested too).
/// Returns the CQEs taken.
///
/// # Safety
/// The `n` CQEs from `cqe` are inside the CQ's lap; `wr0` and `out` have `n` entries.
#[inline(always)]
unsafe fn copy_run<const KIND: u8, const SHIFT: u32>(
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
struct Room {
    out: usize,
    idx: u32,
    cqe_cnt: u32,
}

impl Room {
    /// CQEs left in this lap from slot `idx` (at least 1; the owner value is the lap's).
    #[inline(always)]
    fn lap(self) -> usize {
        ((self.cqe_cnt - 1) - self.idx) as usize + 1
    }
}

/// The CQE at consumer index `ci` of a CQ of `cqe_cnt` CQEs `1 << SHIFT` bytes apart from
/// `cqe0` (the 64-byte CQE of its slot), its lap's owner value and the CQEs left in that lap
/// from it (at least 1).
#[inline(always)]
fn cqe_at<const SHIFT: u32>(cqe0: *mut u8, cqe_cnt: u32, ci: u32) -> (*mut u8, u8, usize) {
    let idx = ci & (cqe_cnt - 1);
    // `wrapping_add`: the address only; idx < cqe_cnt, so it is a CQE of the buffer.
    let cqe = cqe0.wrapping_add((idx as usize) << SHIFT);
    (cqe, ((ci & cqe_cnt) != 0) as u8, (cqe_cnt - idx) as usize)
}

/// Whether `op_own` is a good responder CQE of this lap (owner value `own`) without inline
/// data: RESP_WR_IMM, RESP_SEND, RESP_SEND_IMM or RESP_SEND_INV, format 0, the solicited bit
/// either way (a completion does not report it; rdma-core's poll ignores it too).
#[inline(always)]
fn good_resp(op_own: u8, own: u8) -> bool {
    good_resp_diff(op_own ^ own)
}

/// [`good_resp`] from `op_own ^ own` in one test: less 0x10, the opcodes 1..=4 are 0..=3 —
/// bits 7:6 clear; opcode 0 and those above 4 set one — and the format and owner bits stay:
/// bits 3:2 and 0 clear; SE, bit 1, either way.
#[inline(always)]
fn good_resp_diff(diff: u8) -> bool {
    const { assert!(CQE_RESP_WR_IMM == 1 && CQE_RESP_SEND_INV == 4) };
    diff.wrapping_sub(CQE_RESP_WR_IMM << 4) & 0xcd == 0
}

/// A run of common receive completions of `qp` from the good responder CQE at `cqe`
/// ([`good_resp`], its `op_own` byte `want`, `tail` its bytes 56..64 read after the
/// barrier): while each CQE has that same `op_own` (the same kind, of this lap) and names the
/// QP's oldest outstanding receive on its own receive queue
/// ([`crate::rq::RecvQueue::lean_view`]), write its completion — the CQE's bytes the
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
unsafe fn recv_run<const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *mut u8,
    tail: u64,
    want: u8,
    room: usize,
    out: *mut Wc,
) -> usize {
    // SAFETY: the caller's.
    unsafe { rq_run::<RESP_RUN, SHIFT>(qp, cqe, want, tail, room, out) }
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
/// ([`crate::rq::RecvQueue::lean_view`]: not an SRQ, nothing out of order). At most `room`
/// CQEs, the outstanding WQEs and those to the ring's end. Returns the CQEs consumed, 0
/// when the first is not one of these.
///
/// Out of line, as [`recv_run`].
///
/// # Safety
/// As [`recv_run`].
#[inline(never)]
unsafe fn flush_run<const SHIFT: u32>(
    qp: &mut Qp,
    cqe: *mut u8,
    tail: u64,
    want: u8,
    room: usize,
    out: *mut Wc,
) -> usize {
    if want >> 4 == CQE_REQ_ERR {
        if !qp.sq_all_common() {
            return 0;
        }
        // Before the run: the retires may end an error period (`SendQueue::recovered`).
        let (flushing, old) = (qp.sq_flushing(), qp.sq_before_recovery());
        // SAFETY: the caller's (the first CQE read already).
        let i = unsafe { sq_run::<FLUSH_RUN, SHIFT>(qp, cqe, want, Some(tail), room, out) };
        if (i != 0) & !flushing {
            qp.sq_begin_flush(old);
        }
        i
    } else {
        // SAFETY: the caller's (the first CQE read already).
        let i = unsafe { rq_run::<FLUSH_RUN, SHIFT>(qp, cqe, want, tail, room, out) };
        if (i != 0) & (qp.state() != QpState::Error) {
            qp.follow_error_completion(false);
        }
        i
    }
}

/// Whether `op_own` is an error CQE of this lap (owner value `own`), REQ_ERR or RESP_ERR,
/// format 0 ([`flush_run`] takes it when it is a flush).
#[inline(always)]
fn error_of_lap(op_own: u8, own: u8) -> bool {
    const { assert!(CQE_RESP_ERR == CQE_REQ_ERR + 1 && CQE_REQ_ERR == 0xd) };
    // `op_own ^ own` is 0xd0 or 0xe0 exactly when that difference from 0xd0 is 0 or 0x10.
    (op_own ^ own).wrapping_sub(CQE_REQ_ERR << 4) & 0xef == 0
}

/// One run of the lean poll ([`Cq::poll_send`]): `k` CQEs at most from `cqe`, the WQEs' slots
/// consecutive from `meta` / `wr_ids`, the WR ids to `out`.
pub(crate) struct LeanRun {
    cqe: *const u8,
    /// The owner bit of this lap: a plain REQ CQE's whole `op_own`.
    own: u8,
    /// QPN and `wqe_counter` the first CQE must carry ([`LeanRun::expect`]).
    expect: u64,
    meta: *const u8,
    wr_ids: *const u64,
    out: *mut u64,
    k: usize,
}

/// Bytes 1..=5 of a CQE's last 8 (bytes 57..62: QPN, `wqe_counter`) in a little-endian load.
const QPN_COUNTER: u64 = 0x0000_ffff_ffff_ff00;
/// Whether `tail` (bytes 56..64 of a CQE, a little-endian load) holds the QPN and
/// `wqe_counter` of `expect` ([`LeanRun::expect`]): `tail & QPN_COUNTER == expect`, in shifts
/// that need no 64-bit constant in a register (`copy_run` has none to spare).
#[inline(always)]
fn same_qpn_counter(tail: u64, expect: u64) -> bool {
    // Drop bytes 62, 63 (shift left 16), then byte 56 (shift right 24).
    ((tail ^ expect) << 16) >> 24 == 0
}

/// Bytes 55, 57..62 of a CQE (syndrome, QPN, `wqe_counter`) in a little-endian load of its
/// bytes 55..63.
const FLUSH_MASK: u64 = QPN_COUNTER << 8 | 0xff;
/// Whether `w` (bytes 55..63 of an error CQE, a little-endian load) holds the syndrome, QPN
/// and `wqe_counter` of `expect` ([`flush_expect`]).
#[inline(always)]
fn same_flush(w: u64, expect: u64) -> bool {
    (w ^ expect) & FLUSH_MASK == 0
}

/// What a little-endian load of bytes 55..63 of a flush CQE of the QP whose
/// [`LeanRun::qpn_key`] is `qpn_key` naming block `ci` holds under [`FLUSH_MASK`]: the
/// syndrome WR_FLUSH_ERR (byte 55 of `struct mlx5_err_cqe`), then [`LeanRun::expect`]'s
/// bytes one place up.
#[inline(always)]
fn flush_expect(qpn_key: u64, ci: u16) -> u64 {
    LeanRun::expect(qpn_key, ci) << 8 | SYNDROME_WR_FLUSH_ERR as u64
}

/// [`COUNTER_ONE`] in [`flush_expect`]'s load (one byte up).
const FLUSH_COUNTER_ONE: u64 = COUNTER_ONE << 8;

/// One more `wqe_counter` in that load: +1 to its low byte (byte 61). A carry out of that byte
/// lands in the signature byte, outside the mask: the CQE then does not match and ends the
/// run; the next call starts afresh from the send queue's index.
const COUNTER_ONE: u64 = 1 << 40;

impl LeanRun {
    /// What a little-endian load of bytes 56..64 of a REQ CQE of `qpn` naming block `pi`
    /// holds under [`QPN_COUNTER`]: `sop_drop_qpn` (BE32: opcode 31:24, QPN 23:0) then
    /// `wqe_counter` (BE16), `struct mlx5_cqe64` in mlx5dv.h. `qpn_key` is the QPN's part,
    /// `LeanRun::qpn_key(qpn)`, which the QP keeps.
    #[inline(always)]
    fn expect(qpn_key: u64, pi: u16) -> u64 {
        qpn_key | (u16::from_le_bytes(pi.to_be_bytes()) as u64) << 32
    }

    /// The QPN's part of [`LeanRun::expect`].
    pub(crate) const fn qpn_key(qpn: u32) -> u64 {
        let b = (qpn & 0x00ff_ffff).to_be_bytes();
        u64::from_le_bytes([b[0], b[1], b[2], b[3], 0, 0, 0, 0])
    }

    /// Consume CQEs while each is a successful REQ CQE naming the next WQE (and, with
    /// `CHECK_META`, that WQE's meta byte is 0; without, the caller knows all are); returns
    /// how many. CQEs are `1 << SHIFT` bytes apart.
    ///
    /// # Safety
    /// `cqe` is a CQE of the buffer with `k - 1` more after it; `meta`, `wr_ids` and `out`
    /// hold `k` entries.
    #[inline(always)]
    unsafe fn run<const CHECK_META: bool, const SHIFT: u32>(self) -> usize {
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

#[cfg(test)]
mod tests {
    use super::paths;
    use crate::{Cq, Qp, QpTable, RemoteAddr, SendWr, Sge, Wc, WcFlags, WcOpcode, WcStatus};
    use mlx5_cq::{
        Cqe64, CQE_INITIAL_OP_OWN, CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND,
        CQE_RESP_SEND_IMM, U16, U32,
    };
    use mlx5_hw::{BfLayout, CqLayout, QpLayout, QpState, QpType, WqLayout};
    use mlx5_wqe::opcode as op;

    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    /// Memory for one QP (send ring, receive ring, doorbell record, UAR) and one CQ.
    struct Mem {
        sq: Box<Page>,
        rq: Box<Page>,
        dbrec: Box<Page>,
        uar: Box<Page>,
        cq: Box<Page>,
        cq_dbrec: Box<Page>,
        cq_uar: Box<Page>,
    }

    fn page() -> Box<Page> {
        Box::new(Page([0; 4096]))
    }

    const QPN: u32 = 0x42;

    fn build(m: &mut Mem) -> (Qp, Cq) {
        for i in 0..64 {
            m.cq.0[i * 64 + 63] = CQE_INITIAL_OP_OWN;
        }
        let layout = QpLayout {
            qpn: QPN,
            qp_type: QpType::Rc,
            dbrec: m.dbrec.0.as_mut_ptr().cast(),
            sq: WqLayout {
                buf: m.sq.0.as_mut_ptr(),
                wqe_cnt: 64,
                stride: 64,
            },
            rq: WqLayout {
                buf: m.rq.0.as_mut_ptr(),
                wqe_cnt: 64,
                stride: 64,
            },
            bf: BfLayout {
                reg: m.uar.0.as_mut_ptr().wrapping_add(0x800),
                size: 256,
                shared: false,
            },
            max_inline_data: 32,
            max_send_sge: 2,
            max_recv_sge: 4,
            sq_sig_all: false,
            uses_srq: false,
        };
        let cq_layout = CqLayout {
            buf: m.cq.0.as_mut_ptr(),
            dbrec: m.cq_dbrec.0.as_mut_ptr().cast(),
            cqe_cnt: 64,
            cqe_size: 64,
            cq_uar: m.cq_uar.0.as_mut_ptr(),
            cqn: 7,
            ignore_overrun: false,
        };
        // SAFETY: `m` owns every page the layouts name and outlives the QP and CQ (the test
        // drops them first); nothing else uses the rings.
        let mut qp = unsafe { Qp::from_layout(&layout, None) }.unwrap();
        // SAFETY: as above.
        let cq = unsafe { Cq::from_layout(&cq_layout) }.unwrap();
        qp.set_state(QpState::Rts);
        (qp, cq)
    }

    fn push(m: &mut Mem, slot: usize, cqe: Cqe64, opcode: u8, se: bool) {
        let b = cqe.as_bytes();
        m.cq.0[slot * 64..slot * 64 + 63].copy_from_slice(&b[..63]);
        m.cq.0[slot * 64 + 63] = opcode << 4 | (se as u8) << 1;
    }

    /// Post two WRITEs, a READ and a SEND, post two receives; the device completes them with
    /// plain REQ CQEs, one REQ CQE with SE set (the fast test declines it), and RESP_SEND CQEs.
    /// Returns the completions and the path counts.
    fn run(fast_off: bool, room: usize) -> (Vec<Wc>, [u32; 4]) {
        let mut m = Mem {
            sq: page(),
            rq: page(),
            dbrec: page(),
            uar: page(),
            cq: page(),
            cq_dbrec: page(),
            cq_uar: page(),
        };
        let (mut qp, mut cq) = build(&mut m);
        let r = RemoteAddr::new(0x1000, 5);
        let sge = [Sge {
            addr: 0x9000,
            length: 16,
            lkey: 3,
        }];
        qp.post(&SendWr::write(10, r).inline(b"abc").signaled())
            .unwrap();
        qp.post(&SendWr::write(11, r).sges(&sge).signaled())
            .unwrap();
        qp.post(&SendWr::read(12, r).sges(&sge).signaled()).unwrap();
        qp.post(&SendWr::send(13).sges(&sge).signaled()).unwrap();
        qp.post_recv(20, &sge).unwrap();
        qp.post_recv(21, &sge).unwrap();
        // A requester CQE carries the WQE's opcode in `sop_drop_qpn` bits 31:24 (rdma-core
        // `handle_good_req` reads it there).
        let req = |pi: u16, byte_cnt: u32| Cqe64 {
            sop_drop_qpn: U32::new((OPCODES[pi as usize] as u32) << 24 | QPN),
            wqe_counter: U16::new(pi),
            byte_cnt: U32::new(byte_cnt),
            ..Cqe64::default()
        };
        let resp = |wc: u16| Cqe64 {
            sop_drop_qpn: U32::new(QPN),
            wqe_counter: U16::new(wc),
            byte_cnt: U32::new(7),
            flags_rqpn: U32::new(0x99),
            ..Cqe64::default()
        };
        const OPCODES: [u8; 4] = [
            op::OPCODE_RDMA_WRITE,
            op::OPCODE_RDMA_WRITE,
            op::OPCODE_RDMA_READ,
            op::OPCODE_SEND,
        ];
        push(&mut m, 0, req(0, 0), CQE_REQ, false);
        push(&mut m, 1, req(1, 0), CQE_REQ, false);
        push(&mut m, 2, req(2, 16), CQE_REQ, true);
        push(&mut m, 3, req(3, 0), CQE_REQ, false);
        push(&mut m, 4, resp(0), CQE_RESP_SEND, false);
        push(&mut m, 5, resp(1), CQE_RESP_SEND, false);
        paths::FAST_OFF.with(|f| f.set(fast_off));
        paths::SERVED.with(|c| c.set([0; 4]));
        let mut got = Vec::new();
        let mut wcs = [Wc::default(); 16];
        loop {
            let n = cq.poll(&mut qp, &mut wcs[..room]).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&wcs[..n]);
        }
        paths::FAST_OFF.with(|f| f.set(false));
        let served = paths::SERVED.with(|c| c.get());
        drop((qp, cq));
        drop(m);
        (got, served)
    }

    /// With the fast paths switched off the full path gives the same completions; with them
    /// on, the counters show which path served each. Room for 16: the send run takes the two
    /// WRITEs, the CQE with SE set hands the rest of the call to the full path. Room for 2:
    /// the run takes the WRITEs, the full path the READ (SE) and the SEND in that call, the
    /// receive fast path both receives in the next.
    #[test]
    fn the_fast_paths_give_what_the_full_path_gives() {
        for (room, want) in [(16, [2, 0, 0, 4]), (2, [2, 2, 0, 2])] {
            let (slow, slow_paths) = run(true, room);
            let (fast, fast_paths) = run(false, room);
            assert_eq!(slow.len(), 6);
            assert_eq!(fast, slow, "room {room}");
            assert_eq!(
                slow_paths,
                [0, 0, 0, 6],
                "fast paths off: the full path served all"
            );
            assert_eq!(
                fast_paths, want,
                "room {room}: [send run, receive fast path, flush run, full path]"
            );
        }
        let (fast, _) = run(false, 16);
        let ids: Vec<u64> = fast.iter().map(|w| w.wr_id()).collect();
        assert_eq!(ids, [10, 11, 12, 13, 20, 21]);
        assert_eq!(fast[2].opcode(), WcOpcode::RdmaRead);
        assert_eq!(fast[2].byte_len(), 16);
        assert_eq!(
            (fast[4].opcode(), fast[4].byte_len(), fast[4].src_qp()),
            (WcOpcode::Recv, 7, 0x99)
        );
    }

    /// The one-entry poll's send-queue key ([`crate::sq::SendQueue::take_oldest`]) follows
    /// `ci` past the wrap of its low 16 bits: the completion at the wrap goes to the full
    /// path, which resyncs the key, and every later one takes the fast path again.
    #[test]
    fn the_one_entry_poll_stays_fast_across_the_wqe_counter_wrap() {
        for size in [64, 128] {
            let (mut dev, mut table, mut cq) = Dev::new(size);
            let qp = table.qp_at(0).unwrap();
            let r = RemoteAddr::new(0x1000, 5);
            paths::SERVED.with(|c| c.set([0; 4]));
            let mut wcs = [Wc::default(); 1];
            let n = 70_000u64;
            for id in 0..n {
                qp.post(&SendWr::write(id, r).inline(b"abcd").signaled())
                    .unwrap();
                dev.push(req_cqe(QPN, id as u16, op::OPCODE_RDMA_WRITE, 0));
                assert_eq!(cq.poll(qp, &mut wcs).unwrap(), 1, "WR {id}");
                assert_eq!(
                    (wcs[0].wr_id(), wcs[0].opcode(), wcs[0].is_ok()),
                    (id, WcOpcode::RdmaWrite, true)
                );
            }
            assert_eq!(cq.poll(qp, &mut wcs).unwrap(), 0);
            let [fast, _, _, full] = paths::SERVED.with(|c| c.get());
            assert_eq!(fast as u64 + full as u64, n);
            assert!(full <= 2, "{size}-byte CQEs: {full} went to the full path");
        }
    }

    /// The device of the path tests: two QPs on one CQ of `cnt` CQEs of `size` bytes, the
    /// CQEs written as the device writes them (every byte, then `op_own` with the owner bit
    /// of the lap).
    struct Dev {
        _pages: Vec<Box<Page>>,
        _cq: Box<CqBuf>,
        cq_buf: *mut u8,
        size: usize,
        cnt: u32,
        hw_pi: u32,
    }

    const QPN_B: u32 = 0x1_0042;

    /// 64 CQEs of 128 bytes at most.
    #[repr(C, align(4096))]
    struct CqBuf([u8; 8192]);

    impl Dev {
        fn new(size: u32) -> (Dev, QpTable, Cq) {
            Dev::typed(size, QpType::Rc)
        }

        /// As [`Dev::new`], QP B of type `b`.
        fn typed(size: u32, b: QpType) -> (Dev, QpTable, Cq) {
            let cnt = 64u32;
            let mut pages: Vec<Box<Page>> = (0..12).map(|_| page()).collect();
            let mut cq_mem = Box::new(CqBuf([0; 8192]));
            let cq_buf = cq_mem.0.as_mut_ptr();
            let mut ptr = |i: usize| pages[i].0.as_mut_ptr();
            let (cq_dbrec, cq_uar) = (ptr(2), ptr(3));
            let mut table = QpTable::new();
            for (q, qpn, qp_type) in [(0usize, QPN, QpType::Rc), (1, QPN_B, b)] {
                let base = 4 + q * 4;
                let layout = QpLayout {
                    qpn,
                    qp_type,
                    dbrec: ptr(base).cast(),
                    sq: WqLayout {
                        buf: ptr(base + 1),
                        wqe_cnt: 64,
                        stride: 64,
                    },
                    rq: WqLayout {
                        buf: ptr(base + 2),
                        wqe_cnt: 64,
                        stride: 64,
                    },
                    bf: BfLayout {
                        reg: ptr(base + 3).wrapping_add(0x800),
                        size: 256,
                        shared: false,
                    },
                    max_inline_data: 32,
                    max_send_sge: 2,
                    max_recv_sge: 4,
                    sq_sig_all: false,
                    uses_srq: false,
                };
                // SAFETY: the pages outlive the QP (the test drops the table first).
                let mut qp = unsafe { Qp::from_layout(&layout, None) }.unwrap();
                qp.set_state(QpState::Rts);
                table.insert_qp(qp);
            }
            // SAFETY: the CQ buffer holds 64 × 128 bytes.
            unsafe {
                for i in 0..cnt as usize {
                    *cq_buf.add(i * size as usize + size as usize - 1) = CQE_INITIAL_OP_OWN;
                }
            }
            let cq_layout = CqLayout {
                buf: cq_buf,
                dbrec: cq_dbrec.cast(),
                cqe_cnt: cnt,
                cqe_size: size,
                cq_uar,
                cqn: 7,
                ignore_overrun: false,
            };
            // SAFETY: as above.
            let cq = unsafe { Cq::from_layout(&cq_layout) }.unwrap();
            let dev = Dev {
                _pages: pages,
                _cq: cq_mem,
                cq_buf,
                size: size as usize,
                cnt,
                hw_pi: 0,
            };
            (dev, table, cq)
        }

        fn push(&mut self, cqe: Cqe64) {
            let slot = (self.hw_pi & (self.cnt - 1)) as usize * self.size + self.size - 64;
            let owner = ((self.hw_pi / self.cnt) & 1) as u8;
            let b = cqe.as_bytes();
            // SAFETY: a slot of the CQ buffer the consumer has given back (the scripts keep
            // fewer than `cnt` CQEs outstanding).
            unsafe {
                core::ptr::copy_nonoverlapping(b.as_ptr(), self.cq_buf.add(slot), 63);
                *self.cq_buf.add(slot + 63) = (b[63] & 0xfe) | owner;
            }
            self.hw_pi += 1;
        }
    }

    fn req_cqe(qpn: u32, pi: u16, send_opcode: u8, byte_cnt: u32) -> Cqe64 {
        Cqe64 {
            sop_drop_qpn: U32::new((send_opcode as u32) << 24 | qpn),
            wqe_counter: U16::new(pi),
            byte_cnt: U32::new(byte_cnt),
            op_own: CQE_REQ << 4,
            ..Cqe64::default()
        }
    }

    fn resp_cqe(opcode: u8, qpn: u32, counter: u16, byte_cnt: u32, imm: u32) -> Cqe64 {
        Cqe64 {
            sop_drop_qpn: U32::new(qpn),
            wqe_counter: U16::new(counter),
            byte_cnt: U32::new(byte_cnt),
            imm_inval_pkey: U32::new(imm),
            flags_rqpn: U32::new(0x0300_0099),
            op_own: opcode << 4,
            ..Cqe64::default()
        }
    }

    /// An error CQE as a device writes it (`struct mlx5_err_cqe`): the syndromes, the WQE
    /// opcode (`send_opcode`, a requester's) and the QPN, the counter, the CQE opcode.
    fn err_cqe(opcode: u8, send_opcode: u8, qpn: u32, counter: u16, syndrome: u8) -> Cqe64 {
        let mut b = [0u8; 64];
        b[52] = 0x11;
        b[54] = 0x33;
        b[55] = syndrome;
        b[56..60].copy_from_slice(&((send_opcode as u32) << 24 | qpn).to_be_bytes());
        b[60..62].copy_from_slice(&counter.to_be_bytes());
        b[62] = 0x5a;
        b[63] = opcode << 4;
        Cqe64::from_bytes(&b)
    }

    fn req_err(qpn: u32, counter: u16, send_opcode: u8, syndrome: u8) -> Cqe64 {
        err_cqe(CQE_REQ_ERR, send_opcode, qpn, counter, syndrome)
    }

    fn resp_err(qpn: u32, counter: u16, syndrome: u8) -> Cqe64 {
        err_cqe(CQE_RESP_ERR, 0, qpn, counter, syndrome)
    }

    /// Every poll call's result: its completions or its error.
    type Calls = Vec<Result<Vec<Wc>, String>>;

    /// Poll until empty with room for `room`.
    fn drain(cq: &mut Cq, table: &mut QpTable, room: usize) -> Calls {
        let mut got = Vec::new();
        let mut wcs = [Wc::default(); 16];
        for _ in 0..10_000 {
            match cq.poll(table, &mut wcs[..room]) {
                Ok(0) => break,
                Ok(n) => got.push(Ok(wcs[..n].to_vec())),
                Err(e) => got.push(Err(e.to_string())),
            }
        }
        got
    }

    /// Run `script` (which posts, pushes CQEs and drains through the closure it is given)
    /// with the fast paths on and off; returns both results and the path counts of the fast
    /// run.
    fn both(
        size: u32,
        script: &dyn Fn(&mut Dev, &mut QpTable, &mut Cq) -> Calls,
    ) -> (Calls, Calls, [u32; 4]) {
        let mut out = Vec::new();
        let mut counts = [0; 4];
        for off in [true, false] {
            let (mut dev, mut table, mut cq) = Dev::new(size);
            paths::FAST_OFF.with(|f| f.set(off));
            paths::SERVED.with(|c| c.set([0; 4]));
            out.push(script(&mut dev, &mut table, &mut cq));
            paths::FAST_OFF.with(|f| f.set(false));
            counts = paths::SERVED.with(|c| c.get());
            if off {
                assert_eq!(counts[..3], [0, 0, 0], "fast paths off");
            }
            drop((table, cq));
            drop(dev);
        }
        let fast = out.pop().unwrap();
        let slow = out.pop().unwrap();
        (slow, fast, counts)
    }

    fn flat(r: &[Result<Vec<Wc>, String>]) -> Vec<Wc> {
        r.iter()
            .flat_map(|c| c.clone().unwrap_or_default())
            .collect()
    }

    const R: RemoteAddr = RemoteAddr::new(0x1000, 5);
    const SGE: [Sge; 1] = [Sge {
        addr: 0x9000,
        length: 16,
        lkey: 3,
    }];

    /// Errors: successes, a READ, a remote access error and the flush after it, then a
    /// receive error; the fast paths take the successes before the error, the full path the
    /// rest, and the completions are the same.
    #[test]
    fn errors_take_the_full_path_and_complete_the_same() {
        for size in [64, 128] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let qp = t.qp_at(0).unwrap();
                for i in 0..3 {
                    qp.post(&SendWr::write(10 + i, R).inline(b"abc").signaled())
                        .unwrap();
                }
                qp.post(&SendWr::read(13, R).sges(&SGE).signaled()).unwrap();
                qp.post(&SendWr::write(14, R).inline(b"abc").signaled())
                    .unwrap();
                qp.post(&SendWr::write(15, R).inline(b"abc").signaled())
                    .unwrap();
                qp.post_recv(30, &SGE).unwrap();
                qp.post_recv(31, &SGE).unwrap();
                for pi in 0..3 {
                    dev.push(req_cqe(QPN, pi, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                }
                dev.push(req_cqe(QPN, 3, mlx5_wqe::OPCODE_RDMA_READ, 16));
                dev.push(req_err(QPN, 4, op::OPCODE_RDMA_WRITE, 0x13));
                dev.push(req_err(QPN, 5, op::OPCODE_RDMA_WRITE, FLUSH));
                dev.push(resp_cqe(CQE_RESP_SEND, QPN, 0, 7, 0));
                dev.push(resp_err(QPN, 1, FLUSH));
                drain(cq, t, 16)
            });
            assert_eq!(fast, slow, "size {size}");
            let all = flat(&fast);
            let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
            assert_eq!(ids, [10, 11, 12, 13, 14, 15, 30, 31]);
            assert_eq!(
                (all[3].opcode(), all[3].byte_len()),
                (WcOpcode::RdmaRead, 16)
            );
            assert!(!all[4].is_ok() && !all[5].is_ok() && all[6].is_ok() && !all[7].is_ok());
            assert_eq!(
                counts[0], 4,
                "size {size}: the send run took the four successes"
            );
            assert_eq!(counts[3], 4, "size {size}: the full path the rest");
        }
    }

    /// Two QPs with one WQE outstanding each, their CQEs alternating (what a CQ shared by
    /// many QPs sees; the distinct-QP loop takes them), across the CQ's wrap, with a CQE of
    /// a QP that has two outstanding (its run follows), an unknown QPN and a receive among
    /// them: the completions are the full path's.
    #[test]
    fn alternating_qps_complete_the_same_on_both_paths() {
        for size in [64, 128] {
            for room in [1, 2, 3, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    let mut got = Vec::new();
                    let mut id = 0u64;
                    let mut pi = [0u16; 2];
                    for round in 0..60 {
                        // Two on A in round 7 (a run of two), one each otherwise.
                        let on_a = if round == 7 { 2 } else { 1 };
                        for (pos, qpn, k) in [(0usize, QPN, on_a), (1, QPN_B, 1)] {
                            for _ in 0..k {
                                let qp = t.qp_at(pos).unwrap();
                                qp.post(&SendWr::write(id, R).inline(b"ab").signaled())
                                    .unwrap();
                                dev.push(req_cqe(qpn, pi[pos], op::OPCODE_RDMA_WRITE, 0));
                                pi[pos] += 1;
                                id += 1;
                            }
                        }
                        if round == 20 {
                            dev.push(req_cqe(0x77, 0, op::OPCODE_RDMA_WRITE, 0));
                        }
                        if round == 30 {
                            t.qp_at(1).unwrap().post_recv(1000, &SGE).unwrap();
                            dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 0, 5, 0));
                        }
                        if round % 10 == 9 {
                            got.extend(drain(cq, t, room));
                        }
                    }
                    got
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let mut ids: Vec<u64> = flat(&fast).iter().map(|w| w.wr_id()).collect();
                assert_eq!(ids.iter().filter(|&&i| i == 1000).count(), 1);
                ids.retain(|&i| i != 1000);
                assert_eq!(
                    ids,
                    (0..121).collect::<Vec<u64>>(),
                    "size {size} room {room}"
                );
                assert!(fast.iter().any(|r| r.is_err()), "the unknown QPN");
                assert!(counts[0] >= 100, "size {size} room {room}: {counts:?}");
            }
        }
    }

    /// The flush syndrome (`MLX5_CQE_SYNDROME_WR_FLUSH_ERR`).
    const FLUSH: u8 = mlx5_cq::SYNDROME_WR_FLUSH_ERR;

    /// WQE opcode, WR id and completion opcode of the sends the flush tests post.
    const FLUSHED: [(u8, u64, WcOpcode); 6] = [
        (op::OPCODE_RDMA_WRITE, 100, WcOpcode::RdmaWrite),
        (op::OPCODE_RDMA_WRITE, 101, WcOpcode::RdmaWrite),
        (op::OPCODE_SEND, 102, WcOpcode::Send),
        (op::OPCODE_RDMA_WRITE_IMM, 103, WcOpcode::RdmaWrite),
        (op::OPCODE_SEND_IMM, 104, WcOpcode::Send),
        (op::OPCODE_RDMA_WRITE, 105, WcOpcode::RdmaWrite),
    ];

    /// Post [`FLUSHED`] (signaled) and four receives on QP A.
    fn post_flushed(qp: &mut Qp) {
        for (opcode, id, _) in FLUSHED {
            let wr = match opcode {
                op::OPCODE_SEND => SendWr::send(id),
                op::OPCODE_SEND_IMM => SendWr::send_imm(id, 9),
                op::OPCODE_RDMA_WRITE_IMM => SendWr::write_imm(id, R, 9),
                _ => SendWr::write(id, R),
            };
            qp.post(&wr.inline(b"abc").signaled()).unwrap();
        }
        for i in 0..4 {
            qp.post_recv(200 + i, &SGE).unwrap();
        }
    }

    /// A QP moved to Error: two sends succeed, the device flushes the other four and the
    /// four receives, one CQE each. The flush run takes every flush — the first one too,
    /// which begins the send queue's flushing — with room for 1 (the one-entry poll), 3 and
    /// 16, and the completions are those of the full path: the WR ids in order,
    /// `IBV_WC_WR_FLUSH_ERR`, the syndromes, the opcodes posted; the QP follows to Error.
    #[test]
    fn flushes_take_the_flush_run_and_complete_the_same() {
        for size in [64, 128] {
            for room in [1, 3, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    let qp = t.qp_at(0).unwrap();
                    post_flushed(qp);
                    for (pi, (opcode, _, _)) in FLUSHED.iter().enumerate() {
                        dev.push(if pi < 2 {
                            req_cqe(QPN, pi as u16, *opcode, 0)
                        } else {
                            req_err(QPN, pi as u16, *opcode, FLUSH)
                        });
                    }
                    for c in 0..4 {
                        dev.push(resp_err(QPN, c, FLUSH));
                    }
                    let got = drain(cq, t, room);
                    assert_eq!(t.qp_at(0).unwrap().state(), QpState::Error);
                    got
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let all = flat(&fast);
                let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
                assert_eq!(ids, [100, 101, 102, 103, 104, 105, 200, 201, 202, 203]);
                for (i, w) in all.iter().enumerate() {
                    let want = if i < 2 {
                        WcStatus::Success
                    } else {
                        WcStatus::WrFlushErr
                    };
                    assert_eq!(w.status(), want, "completion {i}");
                    if i >= 2 {
                        assert_eq!((w.syndrome(), w.vendor_err()), (FLUSH, 0x33));
                        assert_eq!(
                            (w.qp_num(), w.byte_len(), w.flags()),
                            (QPN, 0, WcFlags::empty())
                        );
                    }
                    let opcode = FLUSHED.get(i).map_or(WcOpcode::Recv, |f| f.2);
                    assert_eq!(w.opcode(), opcode, "completion {i}");
                }
                assert_eq!(counts, [2, 0, 8, 0], "size {size} room {room}");
            }
        }
    }

    /// Flushes the flush run declines, all completed as the full path completes them: a
    /// first error that is not a flush (the full path retires it; the flushes after it in
    /// later calls take the run), a non-flush error in the middle of a run (it ends the run),
    /// a flush naming a later WQE than the oldest (the device skipped an unsignaled one: the
    /// full path flushes it too), a flush while an atomic is outstanding, and flushes on the
    /// CQE size and room variations.
    #[test]
    fn flushes_the_run_declines_complete_the_same() {
        let fa = Sge {
            addr: 0x9000,
            length: 8,
            lkey: 3,
        };
        for size in [64, 128] {
            for room in [1, 2, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    let a = t.qp_at(0).unwrap();
                    for i in 0..4 {
                        a.post(&SendWr::write(300 + i, R).inline(b"abc").signaled())
                            .unwrap();
                    }
                    dev.push(req_err(QPN, 0, op::OPCODE_RDMA_WRITE, 0x13));
                    dev.push(req_err(QPN, 1, op::OPCODE_RDMA_WRITE, FLUSH));
                    dev.push(req_err(QPN, 2, op::OPCODE_RDMA_WRITE, 0x22));
                    dev.push(req_err(QPN, 3, op::OPCODE_RDMA_WRITE, FLUSH));
                    let mut got = drain(cq, t, room);
                    let b = t.qp_at(1).unwrap();
                    b.post(&SendWr::write(400, R).inline(b"abc").signaled())
                        .unwrap();
                    b.post(&SendWr::write(401, R).inline(b"abc")).unwrap();
                    b.post(&SendWr::write(402, R).inline(b"abc").signaled())
                        .unwrap();
                    b.post(&SendWr::fetch_add(403, R, fa, 1).signaled())
                        .unwrap();
                    b.post(&SendWr::write(404, R).inline(b"abc").signaled())
                        .unwrap();
                    dev.push(req_err(QPN_B, 0, op::OPCODE_RDMA_WRITE, FLUSH));
                    dev.push(req_err(QPN_B, 2, op::OPCODE_RDMA_WRITE, FLUSH));
                    dev.push(req_err(QPN_B, 3, op::OPCODE_ATOMIC_FA, FLUSH));
                    dev.push(req_err(QPN_B, 4, op::OPCODE_RDMA_WRITE, FLUSH));
                    got.extend(drain(cq, t, room));
                    got
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let all = flat(&fast);
                let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
                assert_eq!(ids, [300, 301, 302, 303, 400, 401, 402, 403, 404]);
                let st: Vec<WcStatus> = all.iter().map(|w| w.status()).collect();
                let f = WcStatus::WrFlushErr;
                assert_eq!(
                    st,
                    [
                        WcStatus::from_syndrome(0x13),
                        f,
                        WcStatus::from_syndrome(0x22),
                        f,
                        f,
                        f,
                        f,
                        f,
                        f
                    ]
                );
                assert!(counts[3] >= 6, "size {size} room {room}: {counts:?}");
            }
        }
    }

    /// A UC QP's send error moves it to SQE; once the control path moves it back to RTS,
    /// the WQEs posted after that complete as before the error: an unsignaled WR retired by
    /// a later signaled one's CQE succeeded, and gets no completion (nor a flush); the
    /// flushes of the error period still come first, one each. Every room, both CQE sizes,
    /// the fast paths on and off.
    #[test]
    fn a_uc_qp_recovered_from_sqe_completes_as_before_the_error() {
        // `early`: the control path recovers the QP before the data path polled its error
        // (it records SQE, then RTS, as `mlx5_ctx`'s `Qp::modify` does).
        for early in [false, true] {
            for size in [64, 128] {
                for room in [1, 2, 16] {
                    uc_recovery(early, size, room);
                }
            }
        }
    }

    fn uc_recovery(early: bool, size: u32, room: usize) {
        let what = format!("early {early} size {size} room {room}");
        let mut results = Vec::new();
        for off in [true, false] {
            let (mut dev, mut t, mut cq) = Dev::typed(size, QpType::Uc);
            paths::FAST_OFF.with(|f| f.set(off));
            let b = t.qp_at(1).unwrap();
            for id in [500, 501, 502] {
                b.post(&SendWr::write(id, R).inline(b"abc").signaled())
                    .unwrap();
            }
            dev.push(req_err(QPN_B, 0, op::OPCODE_RDMA_WRITE, 0x13));
            dev.push(req_err(QPN_B, 1, op::OPCODE_RDMA_WRITE, FLUSH));
            let mut got = Vec::new();
            if !early {
                got = drain(&mut cq, &mut t, room);
                assert_eq!(t.qp_at(1).unwrap().state(), QpState::Sqe);
            }
            // Recovered with WQE 2's flush (and with `early` every CQE of the error) still in
            // the CQ.
            let b = t.qp_at(1).unwrap();
            b.set_state(QpState::Sqe);
            b.set_state(QpState::Rts);
            dev.push(req_err(QPN_B, 2, op::OPCODE_RDMA_WRITE, FLUSH));
            b.post(&SendWr::write(503, R).inline(b"abc")).unwrap();
            b.post(&SendWr::write(504, R).inline(b"abc").signaled())
                .unwrap();
            b.post(&SendWr::write(505, R).inline(b"abc").signaled())
                .unwrap();
            dev.push(req_cqe(QPN_B, 4, op::OPCODE_RDMA_WRITE, 0));
            dev.push(req_cqe(QPN_B, 5, op::OPCODE_RDMA_WRITE, 0));
            got.extend(drain(&mut cq, &mut t, room));
            paths::FAST_OFF.with(|f| f.set(false));
            let b = t.qp_at(1).unwrap();
            assert_eq!(b.sq_outstanding_bbs(), 0, "{what}");
            assert_eq!(
                b.state(),
                QpState::Rts,
                "{what}: the error period's CQEs polled after the recovery leave the QP in RTS"
            );
            results.push(flat(&got));
            drop((t, cq));
            drop(dev);
        }
        assert_eq!(results[0], results[1], "{what}");
        let got: Vec<(u64, WcStatus)> =
            results[1].iter().map(|w| (w.wr_id(), w.status())).collect();
        let f = WcStatus::WrFlushErr;
        assert_eq!(
            got,
            [
                (500, WcStatus::from_syndrome(0x13)),
                (501, f),
                (502, f),
                (504, WcStatus::Success),
                (505, WcStatus::Success)
            ],
            "{what}"
        );
    }

    /// A flush run across a carry out of the `wqe_counter`'s low byte (counter 255 to 256,
    /// which the run's expected value does not follow: the run ends there and the next
    /// call starts afresh from the send queue's index): every flush still takes the run.
    #[test]
    fn flush_runs_cross_the_counter_low_byte() {
        for size in [64, 128] {
            let (slow, fast, counts) = both(size, &|dev, t, cq| {
                let mut got = Vec::new();
                let max = t.qp_at(0).unwrap().max_send_wr() as u16;
                assert!(max >= 8, "room for runs");
                // Successes up to half a queue before 256, then a queue of flushes.
                let start = 256 - max / 2;
                for pi in 0..start {
                    let qp = t.qp_at(0).unwrap();
                    qp.post(&SendWr::write(pi as u64, R).inline(b"abc").signaled())
                        .unwrap();
                    dev.push(req_cqe(QPN, pi, op::OPCODE_RDMA_WRITE, 0));
                    if pi % max == max - 1 || pi == start - 1 {
                        got.extend(drain(cq, t, 16));
                    }
                }
                let qp = t.qp_at(0).unwrap();
                for pi in start..start + max {
                    let r = qp.post(&SendWr::write(pi as u64, R).inline(b"abc").signaled());
                    r.unwrap_or_else(|e| panic!("WR {pi}: {e}"));
                    dev.push(req_err(QPN, pi, op::OPCODE_RDMA_WRITE, FLUSH));
                }
                got.extend(drain(cq, t, 16));
                got
            });
            assert_eq!(fast, slow, "size {size}");
            let all = flat(&fast);
            let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
            let n = all.len();
            assert!(n > 256 + 3, "{n} completions: the flushes cross 256");
            assert_eq!(ids, (0..n as u64).collect::<Vec<u64>>());
            let flushed = all
                .iter()
                .filter(|w| w.status() == WcStatus::WrFlushErr)
                .count();
            assert!(all[n - flushed..]
                .iter()
                .all(|w| w.status() == WcStatus::WrFlushErr));
            assert!(
                n - flushed < 256,
                "the flushes are those past {}",
                n - flushed
            );
            assert_eq!(counts[2..], [flushed as u32, 0], "size {size}");
        }
    }

    /// Receives: plain ones in runs, one with immediate data, one while the queue is
    /// empty (an error), all alike on both paths.
    #[test]
    fn receives_complete_the_same_on_both_paths() {
        for size in [64, 128] {
            for room in [1, 3, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    let qp = t.qp_at(1).unwrap();
                    for i in 0..6 {
                        qp.post_recv(40 + i, &SGE).unwrap();
                    }
                    for c in 0..3 {
                        dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, c, 8 + c as u32, 0x77));
                    }
                    dev.push(resp_cqe(CQE_RESP_SEND_IMM, QPN_B, 3, 4, 0xabcd));
                    dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 4, 9, 0));
                    dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 5, 9, 0));
                    dev.push(resp_cqe(CQE_RESP_SEND, QPN_B, 6, 9, 0));
                    drain(cq, t, room)
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let all = flat(&fast);
                let ids: Vec<u64> = all.iter().map(|w| w.wr_id()).collect();
                assert_eq!(ids, [40, 41, 42, 43, 44, 45]);
                assert_eq!(
                    (
                        all[1].byte_len(),
                        all[1].src_qp(),
                        all[1].sl(),
                        all[1].pkey_index()
                    ),
                    (9, 0x99, 3, 0x77)
                );
                assert_eq!(all[3].imm_data(), 0xabcd);
                assert!(fast.last().unwrap().is_err(), "the CQE of no receive");
                // Every receive through the receive fast path, the one with immediate data
                // too (a run ends at it: another `op_own`); the CQE of no receive is the full
                // path's error.
                assert_eq!(counts, [0, 6, 0, 0], "size {size} room {room}");
            }
        }
    }

    /// A WRITE and a SEND with immediate complete with `IBV_WC_WITH_IMM` (rdma-core
    /// `handle_good_req`) on the fast paths and the full path alike; the plain ones without.
    #[test]
    fn sends_with_immediate_complete_with_imm_on_both_paths() {
        let posts = [
            (op::OPCODE_RDMA_WRITE_IMM, WcOpcode::RdmaWrite, true),
            (op::OPCODE_SEND_IMM, WcOpcode::Send, true),
            (op::OPCODE_RDMA_WRITE, WcOpcode::RdmaWrite, false),
            (op::OPCODE_SEND, WcOpcode::Send, false),
        ];
        for size in [64, 128] {
            for room in [1, 16] {
                let (slow, fast, _) = both(size, &|dev, t, cq| {
                    let qp = t.qp_at(0).unwrap();
                    let r = RemoteAddr::new(0x1000, 5);
                    for (i, &(opcode, _, _)) in posts.iter().enumerate() {
                        let id = 70 + i as u64;
                        let wr = match opcode {
                            op::OPCODE_RDMA_WRITE_IMM => SendWr::write_imm(id, r, 0xfeed),
                            op::OPCODE_SEND_IMM => SendWr::send_imm(id, 0xfeed),
                            op::OPCODE_RDMA_WRITE => SendWr::write(id, r),
                            _ => SendWr::send(id),
                        };
                        qp.post(&wr.sges(&SGE).signaled()).unwrap();
                        dev.push(req_cqe(QPN, i as u16, opcode, 0));
                    }
                    drain(cq, t, room)
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let got: Vec<_> = flat(&fast)
                    .iter()
                    .map(|w| (w.opcode(), w.flags().contains(WcFlags::WITH_IMM)))
                    .collect();
                let want: Vec<_> = posts.iter().map(|&(_, o, imm)| (o, imm)).collect();
                assert_eq!(got, want, "size {size} room {room}");
            }
        }
    }

    /// Every good responder kind (WRITE with immediate, SEND with invalidate, SEND with
    /// immediate, SEND), with and without the solicited bit, through the receive fast path:
    /// the same completions as the full path.
    #[test]
    fn every_responder_kind_completes_the_same_on_both_paths() {
        use mlx5_cq::{CQE_RESP_SEND_INV, CQE_RESP_WR_IMM};
        let kinds = [
            (CQE_RESP_WR_IMM, false),
            (CQE_RESP_SEND_INV, false),
            (CQE_RESP_SEND_IMM, true),
            (CQE_RESP_SEND, true),
            (CQE_RESP_WR_IMM, true),
            (CQE_RESP_SEND, false),
        ];
        for size in [64, 128] {
            for room in [1, 2, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    let qp = t.qp_at(1).unwrap();
                    for i in 0..kinds.len() as u64 {
                        qp.post_recv(60 + i, &SGE).unwrap();
                    }
                    for (c, &(kind, se)) in kinds.iter().enumerate() {
                        let mut cqe = resp_cqe(kind, QPN_B, c as u16, 5, 0x1234_5678);
                        cqe.op_own |= (se as u8) << 1;
                        dev.push(cqe);
                    }
                    drain(cq, t, room)
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                assert_eq!(counts, [0, 6, 0, 0], "size {size} room {room}");
                let all = flat(&fast);
                let got: Vec<_> = all
                    .iter()
                    .map(|w| (w.opcode(), w.flags(), w.imm_data()))
                    .collect();
                // `resp_cqe`'s `flags_rqpn` has no GRH bits.
                let (imm, inv) = (WcFlags::WITH_IMM, WcFlags::WITH_INV);
                assert_eq!(
                    got,
                    [
                        (WcOpcode::RecvRdmaWithImm, imm, 0x1234_5678),
                        (WcOpcode::Recv, inv, 0x1234_5678),
                        (WcOpcode::Recv, imm, 0x1234_5678),
                        (WcOpcode::Recv, WcFlags::empty(), 0),
                        (WcOpcode::RecvRdmaWithImm, imm, 0x1234_5678),
                        (WcOpcode::Recv, WcFlags::empty(), 0),
                    ],
                    "size {size} room {room}"
                );
            }
        }
    }

    /// Two QPs on one CQ: runs of one QPN, alternating QPNs, an unsignaled WR retired by a
    /// later CQE, a CQE of a QPN the table does not hold.
    #[test]
    fn mixed_qpns_complete_the_same_on_both_paths() {
        for size in [64, 128] {
            for room in [1, 2, 5, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    for pos in [0usize, 1] {
                        let qp = t.qp_at(pos).unwrap();
                        for i in 0..8u64 {
                            let wr = SendWr::write(pos as u64 * 100 + i, R).inline(b"xy");
                            let wr = if i == 5 { wr } else { wr.signaled() };
                            qp.post(&wr).unwrap();
                        }
                    }
                    for pi in [0u16, 1, 2] {
                        dev.push(req_cqe(QPN, pi, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    }
                    for pi in 0..4u16 {
                        dev.push(req_cqe(QPN_B, pi, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                        dev.push(req_cqe(QPN, pi + 3, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    }
                    // WR 5 unsignaled: the CQE of 6 retires it.
                    dev.push(req_cqe(QPN_B, 4, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    dev.push(req_cqe(QPN_B, 6, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    dev.push(req_cqe(QPN_B, 7, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    dev.push(req_cqe(0x77, 0, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    dev.push(req_cqe(QPN, 7, mlx5_wqe::OPCODE_RDMA_WRITE, 0));
                    drain(cq, t, room)
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let ids: Vec<u64> = flat(&fast).iter().map(|w| w.wr_id()).collect();
                assert_eq!(
                    ids,
                    [0, 1, 2, 100, 3, 101, 4, 102, 5, 103, 6, 104, 106, 107, 7],
                    "size {size} room {room}"
                );
                assert!(fast.iter().any(|r| r.is_err()), "the unknown QPN");
                assert!(counts[0] >= 10, "size {size} room {room}: {counts:?}");
            }
        }
    }

    /// Receives of two QPs interleaved on one CQ (the distinct-QP receive loop), a run of
    /// three of one QP among them, a change of kind (SEND with immediate) inside the
    /// interleaving, polled with several room sizes: the completions are the full path's and
    /// every receive is a fast path's.
    #[test]
    fn interleaved_receives_complete_the_same_on_both_paths() {
        for size in [64, 128] {
            for room in [1, 2, 3, 5, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    for pos in [0usize, 1] {
                        for i in 0..12 {
                            t.qp_at(pos)
                                .unwrap()
                                .post_recv(100 * pos as u64 + i, &SGE)
                                .unwrap();
                        }
                    }
                    let mut c = [0u16; 2];
                    let mut cqe = |dev: &mut Dev, pos: usize, kind: u8| {
                        let qpn = [QPN, QPN_B][pos];
                        dev.push(resp_cqe(kind, qpn, c[pos], 4 + c[pos] as u32, 0x5));
                        c[pos] += 1;
                    };
                    for i in 0..6 {
                        let kind = if i == 3 {
                            CQE_RESP_SEND_IMM
                        } else {
                            CQE_RESP_SEND
                        };
                        cqe(dev, 0, CQE_RESP_SEND);
                        cqe(dev, 1, kind);
                    }
                    for _ in 0..3 {
                        cqe(dev, 0, CQE_RESP_SEND);
                    }
                    for _ in 0..3 {
                        cqe(dev, 1, CQE_RESP_SEND);
                        cqe(dev, 0, CQE_RESP_SEND);
                    }
                    drain(cq, t, room)
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let ids: Vec<u64> = flat(&fast).iter().map(|w| w.wr_id()).collect();
                let mut want = Vec::new();
                for i in 0..6 {
                    want.extend([i, 100 + i]);
                }
                want.extend([6, 7, 8]);
                for i in 0..3 {
                    want.extend([106 + i, 9 + i]);
                }
                assert_eq!(ids, want, "size {size} room {room}");
                assert_eq!(counts, [0, 21, 0, 0], "size {size} room {room}");
            }
        }
    }

    /// Receives across the 16-bit wrap of the receive queue's WQE counter, one and two a
    /// call, interleaved with another QP's receives (the distinct-QP receive loop) in the
    /// two-a-call case: every completion is its receive's, in order; the lean retire's carry
    /// out of the key's low bits sends exactly one CQE per QP and wrap to the full path,
    /// which resyncs the key (without the resync every later receive would go there; with
    /// the runs going on past the carry, none would and the key would stay shut).
    #[test]
    fn receives_stay_fast_across_the_wqe_counter_wrap() {
        for room in [1, 2] {
            let (mut dev, mut t, mut cq) = Dev::new(64);
            paths::SERVED.with(|c| c.set([0; 4]));
            let mut wcs = [Wc::default(); 2];
            let n = 70_000u32;
            for i in 0..n {
                let mut want = Vec::new();
                for (pos, qpn) in [(0usize, QPN), (1, QPN_B)] {
                    if pos == 1 && room == 1 {
                        continue;
                    }
                    let id = u64::from(i) * 2 + pos as u64;
                    t.qp_at(pos).unwrap().post_recv(id, &SGE).unwrap();
                    dev.push(resp_cqe(CQE_RESP_SEND, qpn, i as u16, 8, 0));
                    want.push(id);
                }
                assert_eq!(cq.poll(&mut t, &mut wcs[..room]).unwrap(), want.len());
                let got: Vec<u64> = wcs[..want.len()].iter().map(|w| w.wr_id()).collect();
                assert_eq!(got, want, "receive {i}");
                assert!(wcs[..want.len()]
                    .iter()
                    .all(|w| w.is_ok() && w.byte_len() == 8));
            }
            assert_eq!(cq.poll(&mut t, &mut wcs).unwrap(), 0);
            let [_, fast, _, full] = paths::SERVED.with(|c| c.get());
            let total = if room == 1 { n } else { 2 * n };
            assert_eq!(fast + full, total);
            // Exactly one per QP: the CQE after its tail's wrap, which resyncs the key (a
            // run that went on past the carry would leave the key shut for good).
            assert_eq!(
                full, room as u32,
                "room {room}: {full} went to the full path"
            );
            drop((t, cq));
            drop(dev);
        }
    }

    /// A `QpTable` finds a QP by the QP's own QPN, never by where it used to be: an empty
    /// table finds nothing (its sentinel's QPN is no 24-bit QPN), and after the two QPs swap
    /// places through `qps_mut` neither is found, neither for its QPN nor for the other's, so
    /// a CQE of one never retires a WQE of the other; the CQE is reported as unknown.
    #[test]
    fn a_qp_table_finds_a_qp_only_by_its_own_qpn() {
        use crate::Resolve;
        let mut empty = QpTable::new();
        for qpn in [0, 1, QPN, 0xff_ffff, 0x100_0000, u32::MAX] {
            assert!(empty.qp(qpn).is_none(), "{qpn:#x} in an empty table");
        }
        let (mut dev, mut t, mut cq) = Dev::new(64);
        assert_eq!(t.qp(QPN).map(|q| q.qpn()), Some(QPN));
        assert_eq!(t.qp(QPN_B).map(|q| q.qpn()), Some(QPN_B));
        assert!(t.qp(QPN + 1).is_none() && t.qp(0x77).is_none() && t.qp(u32::MAX).is_none());
        t.qps_mut().swap(0, 1);
        assert!(t.qp(QPN).is_none() && t.qp(QPN_B).is_none());
        let qp = t.qp_at(0).unwrap();
        qp.post(&SendWr::write(9, R).inline(b"ab").signaled())
            .unwrap();
        dev.push(req_cqe(QPN_B, 0, op::OPCODE_RDMA_WRITE, 0));
        let calls = drain(&mut cq, &mut t, 1);
        assert!(
            matches!(calls.as_slice(), [Err(e)] if e.contains("QPN")),
            "{calls:?}"
        );
        assert_eq!(t.qp_at(0).unwrap().sq_outstanding_bbs(), 1);
        drop((t, cq));
        drop(dev);
    }

    /// Many laps of the CQ and of the send ring, READs among the WRITEs, polled with
    /// several room sizes: both paths alike, the fast one serving all.
    #[test]
    fn the_cq_and_the_ring_wrap_alike_on_both_paths() {
        for size in [64, 128] {
            for room in [1, 7, 16] {
                let (slow, fast, counts) = both(size, &|dev, t, cq| {
                    let mut got = Vec::new();
                    let mut id = 0u64;
                    for _ in 0..13 {
                        let qp = t.qp_at(0).unwrap();
                        let first = qp.sq_pi();
                        for i in 0..15u16 {
                            let wr = if i % 4 == 3 {
                                SendWr::read(id, R).sges(&SGE).signaled()
                            } else {
                                SendWr::write(id, R).inline(b"abc").signaled()
                            };
                            qp.post(&wr).unwrap();
                            let (op, n) = if i % 4 == 3 {
                                (mlx5_wqe::OPCODE_RDMA_READ, 16)
                            } else {
                                (mlx5_wqe::OPCODE_RDMA_WRITE, 0)
                            };
                            dev.push(req_cqe(QPN, first.wrapping_add(i), op, n));
                            id += 1;
                        }
                        got.extend(drain(cq, t, room));
                    }
                    got
                });
                assert_eq!(fast, slow, "size {size} room {room}");
                let all = flat(&fast);
                assert_eq!(all.len(), 13 * 15);
                assert!(all.iter().enumerate().all(|(i, w)| w.wr_id() == i as u64));
                assert_eq!(counts, [195, 0, 0, 0], "size {size} room {room}");
            }
        }
    }
}
