//! Polling and arming a completion queue.
//!
//! A CQ may serve many QPs and SRQs. [`Cq::poll`] reads CQEs in order and hands each to the QP
//! (or SRQ) it names, found through a [`Resolve`] table the caller passes in: a single
//! [`Qp`], a slice of them (a scan: for a few QPs), a [`QpTable`] (a table indexed by the
//! QPN's low bits: constant time for any number of QPs, no hashing and no allocation on the
//! hot path), or anything implementing the trait.
//!
//! A CQE the table cannot place stays in the CQ ([`Cq::poll`], **Errors**): nothing is
//! consumed that no completion accounts for.
//!
//! Here: the [`Cq`] and its loop. Beside it: `table` (the [`Resolve`] tables), `single`
//! (the one-entry poll), `runs` (the runs of one QP and the loops over CQEs of many), `full`
//! (the full path), `send` ([`Cq::poll_send`]), `own` (one owner's CQEs of a shared CQ:
//! [`Cq::poll_own`], [`Cq::discard_next`]), `destroyed` (the QPs destroyed with CQEs still
//! queued, [`DestroyedQps`]), `dc_targets` (the DC targets whose receives complete here,
//! [`DcTargets`]), `timestamp` ([`Cq::poll_timestamped`]), `tests`.
//!
//! The poll functions, named for when they run:
//! - [`Cq::poll`]: every call; picks by the room the call has, once.
//! - `Cq::poll_batch`: room for more than one completion — **the loop**: the decision for
//!   each CQE (a send, a flush, a receive, or anything else) on its `op_own` byte, in one
//!   place; the runs it hands CQEs to are in `runs`.
//! - `Cq::poll_one`: room for one (a ping-pong loop), a straight line for a send and a
//!   receive CQE; `Cq::poll_one_flush` its error case, out of line.
//! - `Cq::poll_uncommon`: the rare path, out of line — from the first CQE the others decline
//!   (an error, inline scatter, an uncommon WQE, a QP the table does not know, a compressed
//!   CQE) to the end of the call, each CQE read whole and handed to its queue by `Cq::handle`.
//! - [`Cq::poll_send`] (one QP's sends, WR ids only; `Cq::poll_send_rest` the rest of it, out
//!   of line), [`Cq::poll_own`] and [`Cq::poll_timestamped`]: thin public entry points over
//!   the above.
//!
//! What a CQE does to its queue is asked of the QP (`crate::qp::completion`), never done on
//! its fields. `docs/hot-path.md` walks one CQE through them.

mod dc_targets;
mod destroyed;
mod full;
mod own;
mod runs;
mod send;
mod single;
mod table;
mod timestamp;

pub use dc_targets::DcTargets;
pub use destroyed::{DestroyedQp, DestroyedQps};
pub use table::{QpTable, Resolve};

use crate::queue::WorkQueue;
use runs::{
    cqe_at, distinct_recv_run, distinct_run, error_of_lap, flush_run, good_resp, recv_run,
    send_more, Room,
};

use crate::error::{Error, Result};
use crate::qp::Qp;
use crate::sq::{CqeInfo, Progress};
use crate::wc::{Wc, WcFields, WcOpcode, WcStatus};
use mlx5_cq::{
    arm_value, cqe64_offset, cqe_opcode_name, sw_owned, ArmCmd, Cqe64, CQE_FORMAT_COMPRESSED,
    CQE_FORMAT_INLINE32, CQE_FORMAT_INLINE64, CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND,
    CQE_RESP_SEND_IMM, CQE_RESP_SEND_INV, CQE_RESP_WR_IMM, CQ_ARM_DB, CQ_CI_MASK, CQ_DOORBELL,
    CQ_SET_CI,
};
use mlx5_hw::{mmio, CqLayout};
use mlx5_wqe::seg::DataSeg;
use std::sync::Arc;

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
    /// The destroyed QPs whose CQEs the full path settles ([`Cq::track_destroyed`]).
    destroyed: Option<Arc<DestroyedQps>>,
    /// The DC targets whose receives the full path completes ([`Cq::track_dc_targets`]).
    dc_targets: Option<Arc<DcTargets>>,
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
            destroyed: None,
            dc_targets: None,
        })
    }

    /// Settle the CQEs of the QPs in `destroyed` when a poll meets them ([`DestroyedQps`]):
    /// a receive through an SRQ completes on that SRQ if the table holds it (else it is
    /// [`Error::UnknownSrqn`] and stays), anything else is consumed without a completion —
    /// where an untracked CQ reports [`Error::UnknownQpn`] and leaves the CQE. Only for QPs
    /// missing from the table: one the table holds is polled as a live QP.
    pub fn track_destroyed(&mut self, destroyed: Arc<DestroyedQps>) {
        self.destroyed = Some(destroyed);
    }

    /// The destroyed QP numbered `qpn`, when this CQ tracks destroyed QPs (the full path,
    /// for a QP missing from the table).
    #[cold]
    fn destroyed_qp(&self, qpn: u32) -> Option<DestroyedQp> {
        self.destroyed.as_ref()?.get(qpn)
    }

    /// Complete the receives of the DC targets in `targets` on their SRQs ([`DcTargets`]): a
    /// receive CQE naming one of them completes on its SRQ when the table holds it (else it
    /// is [`Error::UnknownSrqn`] and stays), whatever its `srqn_uidx` carries — with CQE
    /// version 1 the DCT's user index, which no SRQ fallback can find.
    pub fn track_dc_targets(&mut self, targets: Arc<DcTargets>) {
        self.dc_targets = Some(targets);
    }

    /// The SRQ of DC target `qpn`, when this CQ tracks DC targets and it is one (the full
    /// path, for a receive of a QP missing from the table).
    #[cold]
    fn dc_target_srq(&self, qpn: u32) -> Option<u32> {
        self.dc_targets.as_ref()?.srq_of(qpn)
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
    /// **Errors**, each reported only when it is the first CQE of a call (completions already
    /// written are returned first, and the next call reports it):
    /// - a CQE `table` cannot place — of a QP not in `table` ([`Error::UnknownQpn`]), or a
    ///   receive through an SRQ not in it ([`Error::UnknownSrqn`]) — is **left in the CQ**,
    ///   untouched: a poll with a table that holds its QP (and SRQ) completes it. A CQ shared
    ///   by several owners is polled with every QP of it in one table, or each owner takes
    ///   its own with [`Cq::poll_own`]; a destroyed QP's stale CQE is settled by a CQ that
    ///   tracks destroyed QPs ([`Cq::track_destroyed`], as `mlx5-ctx`'s CQs do), or taken
    ///   out with [`Cq::discard_next`];
    /// - a receive CQE naming a later WQE than the oldest outstanding one (the device broke
    ///   the in-order receive contract) is [`Error::RecvOutOfOrder`], also left in the CQ:
    ///   the next call delivers its completion (the WR id of the WQE it names), and the WQEs
    ///   it skipped stay outstanding; nothing is flushed on their behalf;
    /// - a CQE naming no outstanding WQE of its QP ([`Error::BadCqe`]) or of a kind the data
    ///   path does not handle (compressed, resize, signature: [`Error::UnsupportedCqe`]) is
    ///   consumed: it completes nothing.
    ///
    /// [`Error::leaves_cqe`] tells the two apart.
    #[inline(always)]
    pub fn poll<R: Resolve + ?Sized>(&mut self, table: &mut R, wcs: &mut [Wc]) -> Result<usize> {
        #[cfg(test)]
        if paths::FAST_OFF.with(|f| f.get()) {
            let n = self.poll_uncommon(table, wcs, 0, self.ci, None);
            return self.result(n);
        }
        if wcs.len() == 1 {
            return self.poll_one(table, wcs);
        }
        if self.size_shift == 6 {
            self.poll_batch::<R, 6>(table, wcs)
        } else {
            self.poll_batch::<R, 7>(table, wcs)
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

    /// The loop of [`Cq::poll`] (room for more than one completion; CQEs `1 << SHIFT` bytes
    /// apart: 64 or 128, the 64-byte CQE at the end of its slot). The decision for each CQE
    /// is here, on its `op_own` byte alone:
    ///
    /// - a plain REQ CQE of this lap (`op_own` is the owner bit alone): [`send_one`], inline,
    ///   then the CQEs of the same QP behind it through [`send_more`] (out of line) when its
    ///   QP has more outstanding and `wcs` more room, or through [`distinct_run`] when the
    ///   next is a plain REQ CQE of another QP (a CQ shared by many QPs);
    /// - an error CQE of this lap ([`error_of_lap`]): a run of flushes through [`flush_run`];
    /// - a good responder CQE ([`good_resp`]): a run of receives through [`recv_run`], and the
    ///   good responder CQEs of other QPs behind it through [`distinct_recv_run`];
    /// - anything else — and whatever those decline (another error, inline scatter, an
    ///   uncommon WQE, an SRQ, a QP `table` does not know) — hands the rest of the call to
    ///   the full path, [`Cq::poll_uncommon`] (out of line), which reads that CQE afresh.
    ///
    /// The consumer index goes to the doorbell record once, after the batch.
    ///
    /// Everything it uses of the CQ is read once into locals before the loop: the load
    /// barrier after each owner test makes LLVM reload memory it cannot prove unchanged.
    #[inline(always)]
    fn poll_batch<R: Resolve + ?Sized, const SHIFT: u32>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
    ) -> Result<usize> {
        let start = self.ci;
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
                let k = if qp.send_queue().seems_idle() {
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
                // SAFETY: as above; `cqe` is an error CQE of this lap (`flush`), and `lap`
                // (at least 1) is at most `room.out` entries of `o` and the CQEs left in the lap.
                (tail, Some(qp)) if flush => unsafe {
                    flush_run::<SHIFT>(qp, cqe, tail, op_own, lap, o)
                },
                // SAFETY: as above; `cqe` is a good responder CQE of this lap, and `lap` (at
                // least 1) is at most `room.out` entries of `o` and the CQEs left in the lap.
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
        let n = len - rem;
        if more {
            // The first CQE it declined, and the rest of the call.
            let n = self.poll_uncommon(table, wcs, n, start, None);
            return self.result(n);
        }
        if n != 0 {
            self.update_ci();
        }
        Ok(n)
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
    if !qp.send_queue().names_oldest(counter) {
        return false;
    }
    // The CQE's bytes first, the WR id last: the CQE's registers are free before the send
    // queue's are needed.
    // SAFETY: the caller's.
    unsafe {
        Wc::write_req_cqe(out, cqe, tail);
        Wc::write_wr_id(out, qp.send_queue().take_oldest(counter));
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

#[cfg(test)]
mod prop;
#[cfg(test)]
mod tests;
