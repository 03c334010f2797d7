//! The queue pair's data path: validate a WR, write its WQE into the send ring, ring the
//! doorbell or BlueFlame; post receives; keep the bookkeeping that completions need.
//!
//! Here: the `Qp` itself (construction, state, limits, doorbell modes), the generic post and
//! deferred posts, and what the CQ asks of a QP. Along their seams: [`lean`] (the lean entry
//! points and [`Batch`]), [`dc`] (the lean DC post), [`plan`] (the WQE planner and writer of
//! the generic path), [`raw`]
//! (caller-built WQEs), [`recv`] (receives).

use crate::error::{Error, Result, SqLimit};
use crate::rq::{check_sges, RecvQueue};
use crate::sq::{CqeInfo, Doorbell, DoorbellMode, Progress, SendQueue, LEAN_INLINE};
use crate::wc::Wc;
use crate::wr::{RecvWr, RemoteAddr, SendData, SendFlags, SendOp, SendWr, Sge};
use core::mem::MaybeUninit;
use mlx5_cq::RCV_DBR;
use mlx5_hw::{QpLayout, QpState, QpType};
use mlx5_wqe::opcode as op;
use mlx5_wqe::ring::{bbs_for_ds, ds_for_bytes, SqRing, WqeWriter};
use mlx5_wqe::seg::{
    inline_seg_size, AtomicSeg, DataSeg, MaskedCs32Seg, MaskedCs64Seg, MaskedFa32Seg,
    MaskedFa64Seg, RaddrSeg,
};
use mlx5_wqe::{SEND_WQE_BB, SEND_WQE_DS, SEND_WQE_MAX_WQEBBS};

mod completion;
mod dc;
mod lean;
mod plan;
mod raw;
mod recv;

use lean::*;
use plan::*;

/// The largest send ring this data path drives: wqe_index and the CQE's wqe_counter are 16-bit,
/// and telling a live block from a stale one needs at least one spare bit.
pub const MAX_SQ_BBS: u32 = 1 << 15;

/// The data path of one queue pair.
///
/// # What the types guarantee and what the caller promises
/// Every post is checked against the QP (state, QP type, SGE count, inline size, WQE size,
/// atomic alignment, free space) before anything is written: a bad request is an [`Error`],
/// never a corrupt ring. What the types cannot check is the memory a WR names: **the buffers
/// of every SGE must stay valid, and registered with the lkey given, until the WR's
/// completion has been polled** (or the QP has been reset). Inline data is copied during the
/// post; its buffer is free when `post` returns.
///
/// A `Qp` is owned by one thread: it is `Send` but not `Sync`, and no call takes a lock,
/// allocates or makes a system call. The control path (creating the QP, moving it through its
/// states) stays with the device; it tells the data path the state it reached with
/// [`Qp::set_state`].
#[derive(Debug)]
// The layout rule for threads (`lines` module): the object owns whole cache lines.
#[repr(align(64))]
pub struct Qp {
    qpn: u32,
    qp_type: QpType,
    state: QpState,
    sq: SendQueue,
    /// The QP's own receive queue, [`RecvQueue::absent`] when it has none (an SRQ).
    rq: RecvQueue,
    srqn: Option<u32>,
    max_inline: u32,
    max_send_sge: u32,
    max_wqe_bytes: usize,
    sig_all: bool,
    /// `qpn << 8`, the ctrl segment's `qpn_ds` before the DS count is ORed in.
    qpn_shifted: u32,
    /// `MLX5_WQE_CTRL_CQ_UPDATE` when the QP signals every WR, else 0.
    sig_all_ce: u8,
    /// The ctrl segment's first 8 bytes of a lean RDMA WRITE and SEND before the byte swap,
    /// without `wqe_index`: `opcode << 32 | qpn << 8 | ds` with the DS count of the shape most
    /// posted ([`WRITE_DS`], [`SEND_DS`]; [`lean_w0`]).
    ctrl_write: u64,
    ctrl_send: u64,
    /// What the lean poll expects in a CQE of this QP, the QPN's part
    /// ([`crate::cqe_key::qpn_key`]).
    cqe_qpn_key: u64,
    /// The QPN's bytes of a CQE's `sop_drop_qpn` as a native load of it holds them (the
    /// opcode byte 0: [`crate::Resolve::qp_of_cqe`]).
    cqe_sop_key: u32,
    /// What the lean entry points check their data against.
    fast: FastLimits,
    /// Largest inline payload of the lean DC post ([`Qp::post_dc_write_inline`]: ctrl, AV,
    /// raddr and inline within `wr_bbs` blocks and the QP's limits); its gates are the send
    /// queue's (`SendQueue::dc_fast`, `SendQueue::dc_other`).
    dc_inline: usize,
}

/// The data limits of the lean entry points ([`Qp::post_write_inline`] and friends), derived
/// from the QP's caps so that one comparison each replaces the generic checks; the QP's state
/// and type, a pending doorbell, the doorbell mode and the room for a WR and its blocks are
/// the send queue's lean gates, one more comparison ([`SendQueue::lean_open`]; an inline
/// payload of at most [`LEAN_INLINE`] bytes, or a gather entry of a constant length, needs
/// only that one). They are conservative:
/// whatever they let through, [`Qp::post`] would accept and write the same way; whatever they
/// stop goes to the generic post, which returns its error.
#[derive(Clone, Copy, Debug, Default)]
struct FastLimits {
    /// Largest inline payload of a WRITE: `max_inline_data`, and a WQE of ctrl + raddr +
    /// inline within `max_wqe_bytes`.
    inline_rdma: usize,
    /// Largest inline payload of a SEND (ctrl + inline).
    inline_send: usize,
}

// SAFETY: the raw pointers inside name device-shared memory (rings, doorbell record, UAR)
// that belongs to the QP object, not to a thread, and `Qp` has no interior mutability; moving
// it to another thread is sound. It is deliberately not `Sync`: every post needs `&mut self`.
unsafe impl Send for Qp {}

#[inline(always)]
fn aligned(p: *const u8, a: usize) -> bool {
    (p as usize).is_multiple_of(a)
}

impl Qp {
    /// Build the data path of a QP from what the device handed out. The QP starts in Reset,
    /// as a freshly created one is; call [`Qp::set_state`] after each modify.
    ///
    /// `srqn` is the SRQ number when the QP receives through an SRQ (then poll with a
    /// [`crate::Resolve`] table that holds that [`crate::Srq`]).
    ///
    /// # Safety
    /// - `layout` describes a live QP: `sq.buf` (64-byte aligned, `sq.wqe_cnt × 64` bytes),
    ///   `rq.buf`, `dbrec` and `bf.reg` (two halves of `bf.size` bytes, or at least 8 bytes
    ///   when `bf.size` is 0) are mapped and stay valid until this `Qp` is dropped: destroy the
    ///   device QP after dropping it.
    /// - Nothing else posts to this QP (no second `Qp` from the same layout, no
    ///   `ibv_post_send`/`ibv_post_recv`: their indices would diverge).
    /// - The BlueFlame register is this QP's alone (a dedicated bfreg, as a thread domain and
    ///   parent domain give; `docs/sources.md` §6), or every QP sharing it is driven from this
    ///   thread *and* `bf.size` is 0: the half toggle lives in this `Qp`.
    pub unsafe fn from_layout(layout: &QpLayout, srqn: Option<u32>) -> Result<Qp> {
        let sq = &layout.sq;
        if sq.buf.is_null() || layout.dbrec.is_null() || layout.bf.reg.is_null() {
            return Err(Error::BadLayout(
                "SQ buffer, doorbell record or BF register is null",
            ));
        }
        if sq.stride != SEND_WQE_BB as u32 {
            return Err(Error::BadLayout(
                "SQ stride must be 64 (mlx5dv_qp.sq.stride)",
            ));
        }
        if !sq.wqe_cnt.is_power_of_two() || sq.wqe_cnt > MAX_SQ_BBS {
            return Err(Error::BadLayout(
                "SQ wqe_cnt must be a power of two no larger than 32768",
            ));
        }
        if !aligned(sq.buf, SEND_WQE_BB)
            || !aligned(layout.dbrec as *const u8, 8)
            || !aligned(layout.bf.reg, 8)
        {
            return Err(Error::BadLayout(
                "SQ buffer, doorbell record or BF register misaligned",
            ));
        }
        if !layout.bf.size.is_multiple_of(SEND_WQE_BB as u32) || layout.bf.size > 2048 {
            return Err(Error::BadLayout(
                "bf.size must be 0 or a multiple of 64 (256 usually)",
            ));
        }
        if layout.uses_srq != srqn.is_some() {
            return Err(Error::BadLayout(
                "pass the SRQ number exactly when the QP uses an SRQ",
            ));
        }
        let rq = if layout.uses_srq || layout.rq.wqe_cnt == 0 {
            RecvQueue::absent()
        } else {
            let r = &layout.rq;
            if r.buf.is_null() || !aligned(r.buf, 16) {
                return Err(Error::BadLayout("RQ buffer null or misaligned"));
            }
            if !r.wqe_cnt.is_power_of_two() || r.wqe_cnt > 1 << 15 {
                return Err(Error::BadLayout(
                    "RQ wqe_cnt must be a power of two ≤ 32768",
                ));
            }
            if !r.stride.is_power_of_two() || r.stride < 16 {
                return Err(Error::BadLayout("RQ stride must be a power of two ≥ 16"));
            }
            // SAFETY: validated above; validity over time is the caller's contract; the
            // doorbell record is two BE32 words, RCV_DBR is the first.
            unsafe {
                RecvQueue::new(
                    r.buf,
                    r.wqe_cnt,
                    r.stride,
                    layout.max_recv_sge,
                    layout.dbrec.add(RCV_DBR),
                )
            }
        };
        // SAFETY: buf is 64-aligned (checked) and holds wqe_cnt blocks (caller contract);
        // wqe_cnt is a power of two (checked).
        let ring = unsafe { SqRing::new(sq.buf, sq.wqe_cnt) };
        let max_wqe_bytes = ring
            .max_wqe_bytes()
            .min(SEND_WQE_MAX_WQEBBS as usize * SEND_WQE_BB);
        let db = Doorbell::new(layout.bf.reg, layout.bf.size, layout.bf.shared);
        let max_post = crate::wr_limit::max_post(
            layout.qp_type,
            sq.wqe_cnt,
            layout.max_inline_data,
            layout.max_send_sge,
        );
        // SAFETY: the ring and register are valid (caller contract); SND_DBR is the second
        // word of the two-word doorbell record; wqe_cnt ≤ 32768 (checked).
        let sq = unsafe { SendQueue::new(ring, layout.dbrec.add(mlx5_cq::SND_DBR), db, max_post) };
        Ok(Qp {
            qpn: layout.qpn & 0x00ff_ffff,
            qp_type: layout.qp_type,
            state: QpState::Reset,
            sq,
            rq,
            srqn,
            max_inline: layout.max_inline_data,
            max_send_sge: layout.max_send_sge,
            max_wqe_bytes,
            sig_all: layout.sq_sig_all,
            qpn_shifted: (layout.qpn & 0x00ff_ffff) << 8,
            ctrl_write: (op::OPCODE_RDMA_WRITE as u64) << 32
                | ((layout.qpn & 0x00ff_ffff) as u64) << 8
                | WRITE_DS as u64,
            ctrl_send: (op::OPCODE_SEND as u64) << 32
                | ((layout.qpn & 0x00ff_ffff) as u64) << 8
                | SEND_DS as u64,
            sig_all_ce: if layout.sq_sig_all {
                op::CTRL_CQ_UPDATE
            } else {
                0
            },
            cqe_qpn_key: crate::cqe_key::qpn_key(layout.qpn),
            cqe_sop_key: crate::cqe_key::sop_key(layout.qpn),
            fast: FastLimits::default(),
            dc_inline: 0,
        })
    }

    /// Recompute the lean entry points' limits and gates (after a state change).
    fn update_fast_limits(&mut self) {
        // The states `check_send_state` accepts: a WQE posted in SQE or Error is the
        // device's to flush.
        let postable = matches!(
            self.state,
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Error
        ) && matches!(self.qp_type, QpType::Rc | QpType::Uc);
        // A lean WQE must fit the blocks the lean gate guarantees (`SendQueue::wr_bbs`);
        // within the caps it always does (`wr_limit`), the clamp makes that local.
        let max_inline =
            (self.max_inline as usize).min(self.sq.wr_bbs() as usize * SEND_WQE_BB - RDMA_HDR - 4);
        self.fast = FastLimits {
            // ctrl + raddr + align16(4 + len) <= max_wqe_bytes (a multiple of 16).
            inline_rdma: max_inline.min(self.max_wqe_bytes.saturating_sub(RDMA_HDR + 4)),
            inline_send: max_inline.min(self.max_wqe_bytes.saturating_sub(SEND_HDR + 4)),
        };
        if self.qp_type == QpType::Dci {
            self.update_dc_limits();
        }
        let inline_ok = self.fast.inline_rdma.min(self.fast.inline_send) >= LEAN_INLINE;
        self.sq
            .set_open(postable, inline_ok, self.max_send_sge >= 1);
    }

    /// How doorbells are rung ([`DoorbellMode::BfPost`] by default when the QP has a
    /// dedicated BlueFlame register, else [`DoorbellMode::Db`]: a register shared with other
    /// QPs, `mlx5_hw::BfLayout::shared`, gets only the 8-byte doorbell).
    #[inline(always)]
    pub fn doorbell_mode(&self) -> DoorbellMode {
        self.sq.db.mode
    }

    /// Choose how doorbells are rung: [`DoorbellMode::Bf`] for rdma-core's exact sequence (a
    /// flush after every copy), [`DoorbellMode::Db`] for 8-byte doorbells only. The BlueFlame
    /// modes need BlueFlame registers (`bf.size` > 0). WQEs waiting for a doorbell
    /// ([`Qp::post_deferred`]) are announced first, in the old mode. The lean entry points are
    /// fastest in [`DoorbellMode::BfPost`]; in the other modes they take an out-of-line path.
    pub fn set_doorbell_mode(&mut self, mode: DoorbellMode) -> Result<()> {
        if mode != DoorbellMode::Db && self.sq.db.size == 0 {
            return Err(Error::BadLayout(
                "this QP has no BlueFlame registers (bf.size 0): only DoorbellMode::Db",
            ));
        }
        if mode != DoorbellMode::Db && self.sq.db.shared {
            // Two threads' BlueFlame copies into one register interleave (BfLayout::shared).
            return Err(Error::BadLayout(
                "this QP's BlueFlame register is shared with other QPs (bf.shared): only \
                 DoorbellMode::Db, which needs no lock",
            ));
        }
        self.sq.ring_doorbell();
        self.sq.db.mode = mode;
        self.sq.refresh_gates();
        Ok(())
    }

    /// Where a `Qp` keeps its QPN (a `u32`): `QpTable` reads it of an element before it
    /// knows the element is a QP.
    pub(crate) const QPN_OFFSET: usize = core::mem::offset_of!(Qp, qpn);

    /// QP number.
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// Transport type.
    #[inline(always)]
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// The state the control path last reported.
    #[inline(always)]
    pub fn state(&self) -> QpState {
        self.state
    }
    /// The SRQ the QP receives through, if any.
    #[inline(always)]
    pub fn srqn(&self) -> Option<u32> {
        self.srqn
    }
    /// Largest inline payload.
    #[inline(always)]
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline
    }
    /// Largest WQE in bytes.
    #[inline(always)]
    pub fn max_wqe_bytes(&self) -> usize {
        self.max_wqe_bytes
    }
    /// Free send-queue blocks (64 bytes each).
    #[inline(always)]
    pub fn sq_free_bbs(&self) -> u32 {
        self.sq.free()
    }
    /// Send-queue blocks posted and not retired.
    #[inline(always)]
    pub fn sq_outstanding_bbs(&self) -> u32 {
        self.sq.outstanding()
    }
    /// The send WRs this QP may have outstanding at once: rdma-core's `sq.max_post` (what
    /// `ibv_create_qp` reports as `cap.max_send_wr`), recomputed from the layout's ring size,
    /// QP type, `max_inline_data` and `max_send_sge` (rdma-core `verbs.c`
    /// `mlx5_calc_send_wqe`, `mlx5_calc_sq_size`). A post beyond it is
    /// [`Error::SqFull`] with [`SqLimit::WorkRequests`], however few blocks the WRs take, so a
    /// send CQ of `max_send_wr` entries cannot overrun.
    #[inline(always)]
    pub fn max_send_wr(&self) -> u32 {
        self.sq.max_post()
    }
    /// Replace the WR limit [`Qp::max_send_wr`] computed from the layout, for a QP sized by
    /// other means than rdma-core's formula (one created through DEVX, say): at most `max`
    /// send WRs outstanding, 1 ≤ `max` ≤ the ring's blocks. A limit above the computed one
    /// lets more small WRs in flight than `ibv_create_qp` promised (size the send CQ for it);
    /// the ring is still never overrun (blocks are checked too). Only while no send WR is
    /// outstanding.
    pub fn set_max_send_wr(&mut self, max: u32) -> Result<()> {
        if max == 0 || max > self.sq.ring.wqe_cnt() {
            return Err(Error::BadLayout(
                "max_send_wr must be at least 1 and at most the send ring's blocks",
            ));
        }
        if self.sq.outstanding_wrs() != 0 {
            return Err(Error::WrongState {
                op: "change max_send_wr",
                state: self.state,
                hint: "only while no send WR is outstanding (poll or flush them first)",
            });
        }
        self.sq.set_max_post(max);
        self.update_fast_limits();
        Ok(())
    }
    /// Send WRs posted and not retired (a completion retires its WR and the unsignaled ones
    /// before it).
    #[inline(always)]
    pub fn sq_outstanding_wrs(&self) -> u32 {
        self.sq.outstanding_wrs()
    }
    /// Send WRs that may still be posted: [`Qp::max_send_wr`] less [`Qp::sq_outstanding_wrs`]
    /// (each also needs its blocks, [`Qp::sq_free_bbs`]).
    #[inline(always)]
    pub fn sq_free_wrs(&self) -> u32 {
        self.sq.free_wrs()
    }
    /// Receive WRs posted and not completed (0 with an SRQ).
    #[inline(always)]
    pub fn rq_outstanding(&self) -> u32 {
        self.rq_ref().map_or(0, |r| r.outstanding())
    }
    /// The next send producer index (`wqe_index` of the next WQE).
    #[inline(always)]
    pub fn sq_pi(&self) -> u16 {
        self.sq.pi16()
    }
    /// The BlueFlame half the next doorbell goes to (0 or `bf.size`).
    #[inline(always)]
    pub fn bf_offset(&self) -> u32 {
        self.sq.db.offset()
    }

    /// Record the state the control path moved the QP to. Moving to Reset clears the rings'
    /// indices and doorbell records as rdma-core's `mlx5_modify_qp` does: every WR still
    /// outstanding is forgotten (call [`Qp::flush_outstanding`] in Error first to get a
    /// completion for each). Moving from SQE to RTS ends the send queue's error period: the
    /// WRs outstanding then were flushed by the device, those posted from then on complete as
    /// before the error — record SQE first when the device was in SQE and the data path had
    /// not polled the error yet (`mlx5_ctx`'s `Qp::modify` does).
    pub fn set_state(&mut self, state: QpState) {
        tracing::debug!(qpn = self.qpn, old = %self.state, new = %state, "data path QP state");
        if state == QpState::Reset {
            self.sq.reset();
            if let Some(rq) = self.rq_mut() {
                rq.reset();
            }
        }
        if (self.state, state) == (QpState::Sqe, QpState::Rts) {
            self.sq.recovered();
        }
        self.state = state;
        self.update_fast_limits();
    }

    /// Post one send WR and ring the doorbell (BlueFlame when it fits).
    ///
    /// The four most common shapes — WRITE or SEND, inline or one gather entry, no UD
    /// destination — go to their lean entry points ([`Qp::post_write_inline`],
    /// [`Qp::post_write`], [`Qp::post_send_inline`], [`Qp::post_send`]), which do exactly what
    /// the generic path does in fewer instructions; when the WR is built at the call site the
    /// compiler resolves this choice and only the lean path remains.
    ///
    /// **States.** A send is accepted in RTS and SQD, and also in SQE and Error: the device
    /// completes work posted to a queue in error with `IBV_WC_WR_FLUSH_ERR`, one completion per
    /// WR, signaled or not (IBTA Vol. 1 §10.3.1, the SQE and Error states; release 1.2
    /// compliance statement C10-96, which the Linux kernel's software devices follow:
    /// `drivers/infiniband/sw/rdmavt/qp.c` `ib_rvt_state_ops` accepts sends in SQE and Error
    /// and receives in Error, and flushes them). libmlx5 checks no state at all
    /// (rdma-core v44 `providers/mlx5/qp.c` `_mlx5_post_send`, `mlx5_post_recv`), and the
    /// kernel's `ib_drain_sq` / `ib_drain_rq` (`drivers/infiniband/core/verbs.c`) rely on the
    /// device flushing a WR posted after the move to Error. So the poll accepts the flush CQE
    /// of such a WR like any other. Reset, Init and RTR refuse a send with
    /// [`Error::WrongState`], as the spec's immediate error (the kernel's rxe,
    /// `drivers/infiniband/sw/rxe/rxe_verbs.c` `rxe_post_send`, and rdmavt return `EINVAL`
    /// there); receives ([`Qp::post_recv`]) are refused in Reset only.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        if let (Some(d), SendOp::Write { remote }, SendData::Inline(data)) = (wr.dc, wr.op, wr.data)
        {
            if wr.ud.is_none() && wr.xrc.is_none() {
                return self.post_dc_write_inline(wr.wr_id, data, remote, d, wr.flags);
            }
        }
        if wr.ud.is_none() && wr.xrc.is_none() && wr.dc.is_none() {
            match (wr.op, wr.data) {
                (SendOp::Write { remote }, SendData::Inline(d)) => {
                    return self.post_write_inline(wr.wr_id, d, remote, wr.flags)
                }
                (SendOp::Write { remote }, SendData::Sges([sge])) => {
                    return self.post_write(wr.wr_id, *sge, remote, wr.flags)
                }
                (SendOp::Send, SendData::Inline(d)) => {
                    return self.post_send_inline(wr.wr_id, d, wr.flags)
                }
                (SendOp::Send, SendData::Sges([sge])) => {
                    return self.post_send(wr.wr_id, *sge, wr.flags)
                }
                _ => {}
            }
        }
        self.post_planned(wr)
    }

    /// The generic post: plan (every check), write, ring.
    #[inline]
    fn post_planned(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let plan = self.plan(wr)?;
        let (ctrl, bbs) = self.write(wr, &plan)?;
        if self.sq.pending() == 0 {
            self.sq.ring_one(ctrl, bbs);
        } else {
            self.sq.defer(ctrl);
            self.sq.ring_doorbell();
        }
        Ok(())
    }

    /// Write a send WR into the ring without ringing the doorbell; the device sees it after
    /// the next [`Qp::ring_doorbell`] (or a post that rings). See also [`Qp::batch`].
    #[inline]
    pub fn post_deferred(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let plan = self.plan(wr)?;
        let (ctrl, _) = self.write(wr, &plan)?;
        self.sq.defer(ctrl);
        Ok(())
    }

    /// Announce every WQE written since the last doorbell: one doorbell-record update, then a
    /// BlueFlame copy when exactly one WQE of at most `bf.size` bytes is pending, else the
    /// 8-byte doorbell of the last WQE.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        self.sq.ring_doorbell();
    }

    /// WQEs written but not yet announced.
    #[inline(always)]
    pub fn pending_doorbell(&self) -> u32 {
        self.sq.pending()
    }
}

/// Several posts, one doorbell: the guard returned by [`Qp::batch`] rings when dropped.
#[derive(Debug)]
pub struct Batch<'a> {
    qp: &'a mut Qp,
}

impl Batch<'_> {
    /// Write a send WR; the doorbell rings when the batch ends. The shapes [`Qp::post`] posts
    /// on its lean path (WRITE or SEND, inline or one gather entry) take the same lean path
    /// here, without the doorbell: a batch of them costs less per WR than single posts.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.qp.post_batched(wr)
    }
    /// Write a caller-built WQE ([`Qp::post_raw`]); the doorbell rings when the batch ends.
    #[inline]
    pub fn post_raw(&mut self, wr_id: u64, wqe: &[u8]) -> Result<()> {
        self.qp.post_raw_deferred(wr_id, wqe)
    }
    /// The QP (for its limits and free space).
    #[inline]
    pub fn qp(&self) -> &Qp {
        self.qp
    }
    /// End the batch now and ring.
    #[inline]
    pub fn ring(self) {}
}

impl Drop for Batch<'_> {
    #[inline]
    fn drop(&mut self) {
        self.qp.sq.ring_doorbell();
    }
}
