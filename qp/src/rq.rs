//! The receive queue of a QP: a ring of fixed-stride WQEs made of data segments, ended by the
//! `MLX5_INVALID_LKEY` terminator when shorter than the stride (rdma-core
//! `providers/mlx5/qp.c` `mlx5_post_recv`; `docs/sources.md` §7).
//!
//! `head` counts WQEs ever posted, `tail` WQEs retired, both 16-bit. There is no MMIO doorbell:
//! after a store barrier the new `head` goes into `dbrec[0]`. The device consumes receive WQEs
//! in order (rdma-core's `handle_responder` in `providers/mlx5/cq.c` takes the WR id at
//! `wq->tail` without reading `wqe_counter`, so a device that did not would hand rdma-core's
//! users the wrong buffer), and the responder CQE's `wqe_counter` names the WQE.
//!
//! A CQE that names a later WQE than the oldest outstanding one breaks that contract: it is
//! reported, once, as [`Error::RecvOutOfOrder`] naming the CQE's `wqe_counter` and the
//! expected one, with the CQE left in the CQ, and delivered by the next poll (with the WR id
//! of the WQE it names). Nothing is invented for the WQEs it skipped: they stay outstanding
//! and complete when their own CQEs come (or are flushed).

use crate::error::{Error, Result};
use crate::lines::LineArray;
use crate::queue::{Window, WorkQueue};
use crate::scatter::scatter;
use crate::sq::Progress;
use crate::wc::{Wc, WcStatus};
use crate::wr::{RecvWr, Sge};
use mlx5_cq::SYNDROME_WR_FLUSH_ERR;
use mlx5_hw::mmio;
use mlx5_wqe::seg::DataSeg;

/// The receive side of a QP without an SRQ.
#[derive(Debug)]
pub(crate) struct RecvQueue {
    buf: *mut u8,
    wqe_cnt: u32,
    mask: u32,
    stride: usize,
    /// Data segments per WQE (`stride / 16`).
    slots: usize,
    /// Scatter entries a WR may use (`min(max_recv_sge, slots)`).
    pub max_sge: u32,
    /// `&dbrec[MLX5_RCV_DBR]`.
    dbrec: *mut u32,
    pub head: u16,
    wr_id: LineArray<u64>,
    /// WQEs after `tail` the device completed out of order (retired when `tail` reaches them).
    done: LineArray<bool>,
    /// The WQE whose out-of-order CQE was reported and is to be delivered next.
    reported: Option<u16>,
    /// How many `done` flags are set: while none is (and nothing is `reported`), the oldest
    /// outstanding WQE is the only one a CQE may name in order, and the lean poll need not
    /// look at `done` ([`WorkQueue::window`]).
    ooo: u32,
    /// The tail — WQEs retired, 16-bit ([`RecvQueue::tail`]) — in its low 16 bits, and what
    /// the one-entry poll compares a CQE's `wqe_counter` with (one compare,
    /// [`WorkQueue::names_oldest`]): above the tail 0 unless the lean paths must keep out,
    /// [`KEY_SHUT`] while `ooo` or `reported` does (or the queue is absent). A lean retire is
    /// one add; the carry when the tail wraps shuts the key too, spuriously: that CQE goes to
    /// the full path, which resyncs it (as the send queue's).
    key: u32,
}

/// Set in [`RecvQueue`]'s `key` while the lean paths may not retire a WQE: no 16-bit
/// `wqe_counter` equals it.
const KEY_SHUT: u32 = 1 << 16;

/// Check a scatter list against a queue's limit.
#[inline(always)]
pub(crate) fn check_sges(sges: &[Sge], max: u32) -> Result<()> {
    if sges.len() > max as usize {
        return Err(Error::TooManySges {
            given: sges.len(),
            max,
        });
    }
    for s in sges {
        if s.length > i32::MAX as u32 {
            return Err(Error::SgeTooLong { len: s.length });
        }
    }
    Ok(())
}

/// Write a scatter list at `wqe` (a WQE's first data segment with `slots` segments of room),
/// skipping zero-length entries and adding the terminator when it is shorter.
///
/// # Safety
/// `wqe` points to `slots × 16` writable bytes of a receive ring; `sges` has been checked to
/// hold at most `slots` entries.
#[inline(always)]
pub(crate) unsafe fn write_scatter(wqe: *mut u8, slots: usize, sges: &[Sge]) {
    let dst = wqe as *mut DataSeg;
    let mut n = 0;
    for s in sges {
        if s.length == 0 {
            continue;
        }
        // SAFETY: n < slots (checked by the caller), so the segment is inside the WQE.
        unsafe { core::ptr::write(dst.add(n), DataSeg::new(s.length, s.lkey, s.addr)) };
        n += 1;
    }
    if n < slots {
        // SAFETY: as above.
        unsafe { core::ptr::write(dst.add(n), DataSeg::terminator()) };
    }
}

impl RecvQueue {
    /// # Safety
    /// `buf` holds `wqe_cnt × stride` bytes of the QP's RQ, `dbrec` points at `dbrec[0]`;
    /// both stay valid while the queue is used; `wqe_cnt` is a power of two ≤ 32768 and
    /// `stride` a power of two ≥ 16.
    pub unsafe fn new(
        buf: *mut u8,
        wqe_cnt: u32,
        stride: u32,
        max_recv_sge: u32,
        dbrec: *mut u32,
    ) -> RecvQueue {
        let slots = stride as usize / 16;
        RecvQueue {
            buf,
            wqe_cnt,
            mask: wqe_cnt - 1,
            stride: stride as usize,
            slots,
            max_sge: max_recv_sge.min(slots as u32),
            dbrec,
            head: 0,
            wr_id: LineArray::zeroed(wqe_cnt as usize),
            done: LineArray::zeroed(wqe_cnt as usize),
            reported: None,
            ooo: 0,
            key: 0,
        }
    }

    /// The receive side of a QP without a receive queue of its own (it receives through an
    /// SRQ, or has none): no ring, one slot of bookkeeping, the key shut for good so that no
    /// lean path takes a CQE for it ([`RecvQueue::present`] tells it apart; `Qp` keeps one
    /// in place of an `Option` so that the lean paths test the key alone).
    pub fn absent() -> RecvQueue {
        RecvQueue {
            buf: core::ptr::null_mut(),
            wqe_cnt: 0,
            mask: 0,
            stride: 16,
            slots: 1,
            max_sge: 0,
            dbrec: core::ptr::null_mut(),
            head: 0,
            wr_id: LineArray::zeroed(1),
            done: LineArray::zeroed(1),
            reported: None,
            ooo: 0,
            key: KEY_SHUT,
        }
    }

    /// Whether this is a receive queue (not [`RecvQueue::absent`]).
    #[inline(always)]
    pub fn present(&self) -> bool {
        self.wqe_cnt != 0
    }

    /// WQEs retired (16-bit, free-running): the low half of `key`.
    #[inline(always)]
    pub fn tail(&self) -> u16 {
        self.key as u16
    }

    /// Set the tail, the key's other bits kept (the full path resyncs them after: `sync_key`).
    #[inline(always)]
    fn set_tail(&mut self, tail: u16) {
        self.key = (self.key & !0xffff) | tail as u32;
    }

    /// WQEs posted and not yet completed.
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail()) as u32
    }

    #[inline(always)]
    fn wqe(&self, idx: u16) -> *mut u8 {
        // SAFETY: the slot is < wqe_cnt, so the WQE is inside the ring.
        unsafe {
            self.buf
                .add((idx as u32 & self.mask) as usize * self.stride)
        }
    }

    /// Post a list of receive WRs: all are checked first (all or nothing), then written, then
    /// one store barrier and one doorbell-record update.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if wrs.len() as u32 > self.wqe_cnt - self.outstanding() {
            return Err(Error::RqFull {
                capacity: self.wqe_cnt,
            });
        }
        for wr in wrs {
            check_sges(wr.sges, self.max_sge)?;
        }
        for wr in wrs {
            // SAFETY: the WQE is a free slot of the ring (room checked above) with `slots`
            // segments; the list was checked against max_sge ≤ slots.
            unsafe { write_scatter(self.wqe(self.head), self.slots, wr.sges) };
            self.wr_id[(self.head as u32 & self.mask) as usize] = wr.wr_id;
            self.head = self.head.wrapping_add(1);
        }
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the QP's live doorbell record.
        unsafe { mmio::write_dbrec(self.dbrec, self.head as u32) };
        Ok(())
    }

    /// Account for a responder CQE naming the WQE at `wqe_counter`; `inline` is
    /// scatter-to-CQE data to copy into the WQE's buffers. `first`: the CQE is the first of
    /// this poll call, so an error may be returned for it.
    ///
    /// A counter past `tail` breaks the receive-order contract (module docs): the first time
    /// (as the first CQE of a call; otherwise `Partial(0)`, to be met first by the next call)
    /// it is `Err(expected)`, the CQE staying in the CQ; the next time it is delivered with the
    /// WR id of the WQE it names, which is then retired when `tail` reaches it.
    pub fn complete(
        &mut self,
        wqe_counter: u16,
        wc: Wc,
        inline: Option<&[u8]>,
        out: &mut [Wc],
        first: bool,
    ) -> core::result::Result<Progress, u16> {
        let r = self.complete_inner(wqe_counter, wc, inline, out, first);
        self.sync_key();
        r
    }

    fn complete_inner(
        &mut self,
        wqe_counter: u16,
        mut wc: Wc,
        inline: Option<&[u8]>,
        out: &mut [Wc],
        first: bool,
    ) -> core::result::Result<Progress, u16> {
        let dist = wqe_counter.wrapping_sub(self.tail()) & self.mask as u16;
        if dist as u32 >= self.outstanding() {
            return Ok(Progress::Bad("outside the outstanding receive range"));
        }
        let c = self.tail().wrapping_add(dist);
        let slot = (c as u32 & self.mask) as usize;
        if self.done[slot] {
            return Ok(Progress::Bad("the receive WQE it names completed already"));
        }
        if out.is_empty() {
            return Ok(Progress::Partial(0));
        }
        if dist != 0 && self.reported != Some(c) {
            if !first {
                return Ok(Progress::Partial(0));
            }
            self.reported = Some(c);
            return Err(self.tail());
        }
        if let (Some(data), true) = (inline, wc.is_ok()) {
            let len = (wc.byte_len() as usize).min(data.len());
            // SAFETY: the WQE at `c` is outstanding: its segments are the caller's buffers,
            // valid until this completion (post contract).
            unsafe {
                let segs = core::slice::from_raw_parts(self.wqe(c) as *const DataSeg, self.slots);
                scatter(&data[..len], segs);
            }
        }
        wc.set_wr_id(self.wr_id[slot]);
        out[0] = wc;
        if dist != 0 {
            self.reported = None;
            self.done[slot] = true;
            self.ooo += 1;
        } else {
            self.set_tail(c.wrapping_add(1));
            while self.tail() != self.head && self.done[(self.tail() as u32 & self.mask) as usize] {
                let slot = (self.tail() as u32 & self.mask) as usize;
                self.done[slot] = false;
                self.ooo -= 1;
                self.set_tail(self.tail().wrapping_add(1));
            }
        }
        Ok(Progress::Done(1))
    }

    /// `key` as `tail`, `ooo` and `reported` make it.
    fn sync_key(&mut self) {
        let shut = (self.ooo != 0) | self.reported.is_some() | !self.present();
        self.key = self.tail() as u32 | if shut { KEY_SHUT } else { 0 };
    }

    fn flushed(&mut self, qpn: u32) -> Wc {
        Wc::new(&crate::wc::WcFields {
            wr_id: self.wr_id[(self.tail() as u32 & self.mask) as usize],
            status: WcStatus::WrFlushErr,
            opcode: crate::wc::WcOpcode::Recv,
            qp_num: qpn,
            syndrome: SYNDROME_WR_FLUSH_ERR,
            ..crate::wc::WcFields::default()
        })
    }

    /// Report every outstanding WQE as flushed (resumable like [`Self::complete`]).
    pub fn flush_all(&mut self, qpn: u32, out: &mut [Wc]) -> Progress {
        let p = self.flush_all_inner(qpn, out);
        self.sync_key();
        p
    }

    fn flush_all_inner(&mut self, qpn: u32, out: &mut [Wc]) -> Progress {
        let mut n = 0;
        while self.tail() != self.head {
            let slot = (self.tail() as u32 & self.mask) as usize;
            if self.done[slot] {
                // Completed out of order already.
                self.done[slot] = false;
                self.ooo -= 1;
                self.set_tail(self.tail().wrapping_add(1));
                continue;
            }
            if n == out.len() {
                return Progress::Partial(n);
            }
            out[n] = self.flushed(qpn);
            n += 1;
            self.set_tail(self.tail().wrapping_add(1));
        }
        self.reported = None;
        Progress::Done(n)
    }

    /// Forget everything (the QP went to Reset).
    pub fn reset(&mut self) {
        self.head = 0;
        self.set_tail(0);
        self.done.fill(false);
        self.ooo = 0;
        self.reported = None;
        self.sync_key();
        // SAFETY: `dbrec` is the live doorbell record.
        unsafe { mmio::write_dbrec(self.dbrec, 0) };
    }
}

/// What a CQE asks of a QP's own receive queue (`crate::queue`): its counter is the WQE's index;
/// the oldest outstanding receive retires alone while nothing completed out of order and no
/// completion is pending (`key` shut otherwise, and on an absent queue).
impl WorkQueue for RecvQueue {
    /// The one-entry poll's test: whether `wqe_counter` names the oldest outstanding WQE and
    /// the lean paths may retire it (nothing completed out of order, nothing reported).
    #[inline(always)]
    fn names_oldest(&self, wqe_counter: u16) -> bool {
        (wqe_counter as u32 == self.key) & (wqe_counter != self.head)
    }

    /// Retire the oldest WQE, which [`WorkQueue::names_oldest`] said `wqe_counter` names;
    /// returns its WR id.
    #[inline(always)]
    fn take_oldest(&mut self, wqe_counter: u16) -> u64 {
        debug_assert!(self.names_oldest(wqe_counter));
        let slot = (wqe_counter as u32 & self.mask) as usize;
        debug_assert!(slot < self.wr_id.len());
        // SAFETY: `slot` is masked below `wqe_cnt`, the array's length.
        let wr_id = unsafe { *self.wr_id.as_ptr().add(slot) };
        // `retired(1)`, the key added to in memory.
        crate::sq::bump_key(&mut self.key);
        wr_id
    }

    /// What the lean receive poll needs, when it may run: the key open — nothing completed
    /// out of order, nothing reported, a queue present (then a CQE in order names exactly the
    /// oldest WQE, and retiring it is `tail += 1`).
    #[inline(always)]
    fn window(&self) -> Option<Window> {
        debug_assert!(
            (self.ooo == 0) & self.reported.is_none() & self.present() | (self.key >= KEY_SHUT),
            "the one-entry poll's key"
        );
        // The key's shut state stands for all of it, and for the carry of a lean retire at
        // the 16-bit wrap: declined then, the CQE goes to the full path, which resyncs the key
        // (were the runs to go on, the one-compare paths would decline this queue for good).
        if self.key >= KEY_SHUT {
            return None;
        }
        Some(Window {
            oldest: self.tail(),
            outstanding: self.head.wrapping_sub(self.tail()),
            mask: self.mask as u16,
            wr_ids: self.wr_id.as_ptr(),
            meta: core::ptr::null(),
        })
    }

    /// The lean receive poll retired the `k` oldest WQEs (none completed out of order after
    /// them, nothing reported: [`WorkQueue::window`]): the tail in the key moves on.
    #[inline(always)]
    fn retired(&mut self, k: u16) {
        self.key = self.key.wrapping_add(k as u32);
    }
}
