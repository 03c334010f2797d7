//! The shared receive queue, linked-list topology (a verbs-created SRQ; rdma-core
//! `providers/mlx5/srq.c` `mlx5_post_srq_recv`, `mlx5_free_srq_wqe`; `docs/sources.md` §7).
//!
//! Each WQE is a 16-byte next segment followed by data segments. Free WQEs form a list through
//! `next_wqe_index` from `head` to `tail`; posting takes `head` and follows its link, and the
//! list is full when `head == tail` (one WQE is always held back so the device never walks
//! onto one software is rewriting). A completion names the WQE by index (`wqe_counter`, not
//! masked) and the WQE is appended after `tail`. The doorbell record holds the 16-bit count of
//! WQEs ever posted, written after a store barrier; there is no MMIO doorbell.

use crate::error::{Error, Result};
use crate::lines::LineArray;
use crate::rq::{check_sges, write_scatter};
use crate::scatter::scatter;
use crate::sq::Progress;
use crate::wc::Wc;
use crate::wr::{RecvWr, Sge};
use mlx5_hw::mmio;
use mlx5_hw::SrqLayout;
use mlx5_wqe::seg::{DataSeg, SrqNextSeg};

/// A shared receive queue's data path: posting receives and retiring them on completion.
///
/// Owned by one thread (`Send`, not `Sync`); poll its completions through a
/// [`crate::Resolve`] table that contains it.
#[derive(Debug)]
// The layout rule for threads (`lines` module): the object owns whole cache lines.
#[repr(align(64))]
pub struct Srq {
    buf: *mut u8,
    stride: usize,
    wqe_cnt: u32,
    slots: usize,
    max_sge: u32,
    dbrec: *mut u32,
    srqn: u32,
    cqe_index: u32,
    head: u32,
    tail: u32,
    counter: u16,
    wr_id: LineArray<u64>,
    posted: LineArray<bool>,
    outstanding: u32,
}

// SAFETY: the raw pointers name device-shared memory owned by the SRQ object, not by a
// thread; `Srq` has no interior mutability, so moving it to another thread is sound. It is
// deliberately not `Sync`: posting and freeing need `&mut self`.
unsafe impl Send for Srq {}

impl Srq {
    /// Build the data path of an SRQ from what the device handed out.
    ///
    /// # Safety
    /// - `layout` describes a live SRQ: `buf` holds `wqe_cnt × stride` bytes whose WQEs are
    ///   linked from `head` to `tail` as the device created them, `dbrec` is its doorbell
    ///   record; both stay valid until this `Srq` is dropped (destroy the device object after).
    /// - Nothing else posts to this SRQ (no second `Srq` from the same layout, no
    ///   `ibv_post_srq_recv`).
    pub unsafe fn from_layout(layout: &SrqLayout) -> Result<Srq> {
        if layout.buf.is_null() || layout.dbrec.is_null() {
            return Err(Error::BadLayout("SRQ buffer or doorbell record is null"));
        }
        if !layout.stride.is_power_of_two() || layout.stride < 32 {
            return Err(Error::BadLayout(
                "SRQ stride must be a power of two of at least 32",
            ));
        }
        if layout.wqe_cnt < 2 || layout.wqe_cnt > 1 << 16 {
            return Err(Error::BadLayout("SRQ must hold 2..=65536 WQEs"));
        }
        if layout.head >= layout.wqe_cnt || layout.tail >= layout.wqe_cnt {
            return Err(Error::BadLayout("SRQ head or tail outside the buffer"));
        }
        let slots = (layout.stride as usize - 16) / 16;
        let n = layout.wqe_cnt as usize;
        Ok(Srq {
            buf: layout.buf,
            stride: layout.stride as usize,
            wqe_cnt: layout.wqe_cnt,
            slots,
            max_sge: layout.max_sge.min(slots as u32),
            dbrec: layout.dbrec,
            srqn: layout.srqn,
            cqe_index: layout.cqe_index,
            head: layout.head,
            tail: layout.tail,
            counter: 0,
            wr_id: LineArray::zeroed(n),
            posted: LineArray::zeroed(n),
            outstanding: 0,
        })
    }

    /// SRQ number.
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// What an XRC target's receive CQE carries for this SRQ in `srqn_uidx`
    /// ([`SrqLayout::cqe_index`]: the SRQN, or the user index with CQE version 1).
    #[inline(always)]
    pub fn cqe_index(&self) -> u32 {
        self.cqe_index
    }

    /// Receive WRs posted and not yet completed.
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Receive WRs that can be posted at once (`wqe_cnt - 1`).
    #[inline(always)]
    pub fn capacity(&self) -> u32 {
        self.wqe_cnt - 1
    }

    /// Scatter entries per WR.
    #[inline(always)]
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    #[inline(always)]
    fn wqe(&self, idx: u32) -> *mut u8 {
        debug_assert!(idx < self.wqe_cnt);
        // SAFETY: idx < wqe_cnt (every index stored is checked), so the WQE is in the buffer.
        unsafe { self.buf.add(idx as usize * self.stride) }
    }

    #[inline(always)]
    fn next_of(&self, idx: u32) -> u32 {
        // SAFETY: the next segment is the first 16 bytes of a WQE inside the buffer.
        let next = unsafe { core::ptr::read_volatile(self.wqe(idx) as *const SrqNextSeg) };
        next.next() as u32
    }

    /// Post one receive WR.
    ///
    /// The buffers it names must stay valid and registered until its completion is polled.
    #[inline]
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<()> {
        self.post_recv_list(&[RecvWr { wr_id, sges }])
    }

    /// Post several receive WRs with one doorbell-record update; all are checked before any is
    /// written (all or nothing).
    #[inline]
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if wrs.len() as u32 > self.capacity() - self.outstanding {
            return Err(Error::SrqFull {
                capacity: self.capacity(),
            });
        }
        for wr in wrs {
            check_sges(wr.sges, self.max_sge)?;
        }
        for wr in wrs {
            if self.head == self.tail {
                // Unreachable while the outstanding count is right; refuse rather than corrupt.
                return Err(Error::SrqFull {
                    capacity: self.capacity(),
                });
            }
            let idx = self.head;
            let next = self.next_of(idx);
            if next >= self.wqe_cnt {
                return Err(Error::BadLayout("SRQ free list links outside the buffer"));
            }
            // SAFETY: WQE `idx` is free (taken from the list head); its data segments follow
            // the 16-byte next segment, `slots` of them; the list was checked against max_sge.
            unsafe { write_scatter(self.wqe(idx).add(16), self.slots, wr.sges) };
            self.wr_id[idx as usize] = wr.wr_id;
            self.posted[idx as usize] = true;
            self.outstanding += 1;
            self.head = next;
            self.counter = self.counter.wrapping_add(1);
        }
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the SRQ's live doorbell record.
        unsafe { mmio::write_dbrec(self.dbrec, self.counter as u32) };
        Ok(())
    }

    /// Account for a responder CQE naming WQE `wqe_counter`: produce its completion and append
    /// the WQE to the free list (`wqe[tail].next = idx; tail = idx`).
    pub(crate) fn complete(
        &mut self,
        wqe_counter: u16,
        mut wc: Wc,
        inline: Option<&[u8]>,
        out: &mut [Wc],
    ) -> Progress {
        let idx = wqe_counter as u32;
        if idx >= self.wqe_cnt {
            return Progress::Bad("SRQ WQE index outside the buffer");
        }
        if !self.posted[idx as usize] {
            return Progress::Bad("SRQ WQE is not posted");
        }
        if out.is_empty() {
            return Progress::Partial(0);
        }
        if let (Some(data), true) = (inline, wc.is_ok()) {
            let len = (wc.byte_len() as usize).min(data.len());
            // SAFETY: WQE `idx` is posted: its segments name the caller's buffers, valid until
            // this completion (post contract).
            unsafe {
                let segs = core::slice::from_raw_parts(
                    self.wqe(idx).add(16) as *const DataSeg,
                    self.slots,
                );
                scatter(&data[..len], segs);
            }
        }
        wc.set_wr_id(self.wr_id[idx as usize]);
        out[0] = wc;
        self.free(idx);
        Progress::Done(1)
    }

    /// WQE `idx`, posted, is done with: append it to the free list
    /// (`wqe[tail].next = idx; tail = idx`, rdma-core `mlx5_free_srq_wqe`).
    fn free(&mut self, idx: u32) {
        self.posted[idx as usize] = false;
        self.outstanding -= 1;
        // SAFETY: `tail` is a WQE of the buffer that software owns (the held-back one).
        unsafe {
            let tail = self.wqe(self.tail) as *mut SrqNextSeg;
            let mut seg = core::ptr::read_volatile(tail);
            seg.set_next(idx as u16);
            core::ptr::write_volatile(tail, seg);
        }
        self.tail = idx;
    }

    /// Report up to `out.len()` receives still posted to this SRQ as flushed
    /// (`IBV_WC_WR_FLUSH_ERR`, opcode `Recv`, QP number 0: no QP took them) and free their
    /// WQEs; returns how many were written (call again while it fills `out`).
    ///
    /// Only for an SRQ whose device will never consume them again: a dead device (a ConnectX in
    /// internal error writes no CQE, `drivers/infiniband/hw/mlx5/cq.c` `mlx5_ib_poll_cq`). On
    /// a live device an SRQ's receives belong to no QP and stay posted when a QP fails (a QP
    /// in Error flushes its own queues only; even the kernel's software flush of a dead device,
    /// `mlx5_ib_poll_sw_comp`, walks the QPs' queues and leaves SRQs alone). A receive the
    /// device consumed after this call would be reported as naming no posted WQE
    /// ([`Error::BadCqe`]), never completed twice.
    pub fn flush_outstanding(&mut self, out: &mut [Wc]) -> usize {
        let mut n = 0;
        let mut idx = 0;
        while n < out.len() && self.outstanding > 0 && idx < self.wqe_cnt {
            if self.posted[idx as usize] {
                out[n] = Wc::new(&crate::wc::WcFields {
                    wr_id: self.wr_id[idx as usize],
                    status: crate::wc::WcStatus::WrFlushErr,
                    opcode: crate::wc::WcOpcode::Recv,
                    syndrome: mlx5_cq::SYNDROME_WR_FLUSH_ERR,
                    ..crate::wc::WcFields::default()
                });
                self.free(idx);
                n += 1;
            }
            idx += 1;
        }
        n
    }
}
