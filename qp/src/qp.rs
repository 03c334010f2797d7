//! The queue pair's data path: validate a WR, write its WQE into the send ring, ring the
//! doorbell or BlueFlame; post receives; keep the bookkeeping that completions need.

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
    inline_seg_size, AtomicSeg, DataSeg, InlineHdr, MaskedCs32Seg, MaskedCs64Seg, MaskedFa32Seg,
    MaskedFa64Seg, RaddrSeg,
};
use mlx5_wqe::{SEND_WQE_BB, SEND_WQE_DS, SEND_WQE_MAX_WQEBBS};

/// The largest send ring this data path drives: wqe_index and the CQE's wqe_counter are 16-bit,
/// and telling a live block from a stale one needs at least one spare bit.
pub const MAX_SQ_BBS: u32 = 1 << 15;

/// Atomic operands as they go into the WQE.
#[derive(Clone, Copy)]
enum AtomicOperands {
    None,
    Std(AtomicSeg),
    MaskedCs32(MaskedCs32Seg),
    MaskedCs64(MaskedCs64Seg),
    MaskedFa32(MaskedFa32Seg),
    MaskedFa64(MaskedFa64Seg),
}

/// Everything about a WQE decided before a byte is written.
struct Plan<'a> {
    opcode: u8,
    opmod: u8,
    imm_be: u32,
    remote: Option<crate::wr::RemoteAddr>,
    atomic: AtomicOperands,
    /// The atomic's local buffer (one data segment of the operand size).
    local: Option<Sge>,
    data: SendData<'a>,
    /// Total bytes, ctrl included.
    bytes: usize,
    atomic_size: u8,
}

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
pub struct Qp {
    qpn: u32,
    qp_type: QpType,
    state: QpState,
    sq: SendQueue,
    rq: Option<RecvQueue>,
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
    /// (`LeanRun::qpn_key`).
    cqe_qpn_key: u64,
    /// What the lean entry points check their data against.
    fast: FastLimits,
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

/// `fm_ce_se` for each combination of [`SendFlags`] bits (rdma-core `_mlx5_post_send`:
/// `IBV_SEND_SIGNALED` → `MLX5_WQE_CTRL_CQ_UPDATE`, `IBV_SEND_FENCE` → `MLX5_WQE_CTRL_FENCE`,
/// `IBV_SEND_SOLICITED` → `MLX5_WQE_CTRL_SOLICITED`).
const FM_CE_SE: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        let f = SendFlags::from_bits_truncate(i as u8);
        let mut v = 0;
        if f.contains(SendFlags::SIGNALED) {
            v |= op::CTRL_CQ_UPDATE;
        }
        if f.contains(SendFlags::FENCE) {
            v |= op::CTRL_FENCE;
        }
        if f.contains(SendFlags::SOLICITED) {
            v |= op::CTRL_SOLICITED;
        }
        t[i] = v;
        i += 1;
    }
    t
};
const _: () = assert!(
    SendFlags::all().bits() < 8,
    "FM_CE_SE covers three flag bits"
);

/// Bytes before the inline segment of a lean WRITE (ctrl + raddr) and of a lean SEND (ctrl).
const RDMA_HDR: usize = 2 * SEND_WQE_DS;
const SEND_HDR: usize = SEND_WQE_DS;

/// Blocks and DS count of a WQE of `hdr` bytes of fixed segments plus an inline segment of
/// `len` payload bytes (none when `len` is 0, as rdma-core does): `ceil((hdr + 4 + len) / 64)`
/// blocks (the inline segment's 16-byte padding never crosses a block boundary the payload
/// does not). Wrapping arithmetic: callers check `len` before using the result.
#[inline(always)]
fn inline_shape(hdr: usize, len: usize) -> (u32, u32) {
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
const WRITE_DS: u32 = 3;
/// The DS count in the QP's SEND template: ctrl + one data segment, or at most 12 bytes inline.
const SEND_DS: u32 = 2;

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

/// Which doorbell sequence a lean post ends with: the fast one (through the gate `fast`), or
/// whichever the QP's [`DoorbellMode`] asks for (the gate `other`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LeanRing {
    /// [`SendQueue::ring_bf_post`].
    BfPost,
    /// [`SendQueue::ring_other`]: any other mode.
    Any,
}

/// The first 8 bytes of a lean WQE's ctrl segment, in memory order: `opmod 0 | wqe_index |
/// opcode` then `qpn << 8 | ds`, both BE32 (rdma-core `mlx5dv_set_ctrl_seg`), from the QP's
/// template `opcode << 32 | qpn << 8 | tmpl_ds`: a shift, an OR, a byte swap, and an XOR
/// when `ds` differs from the template's (both constant in the common shapes).
#[inline(always)]
fn lean_w0(pi: u16, tmpl: u64, tmpl_ds: u32, ds: u32) -> u64 {
    (((pi as u64) << 40 | tmpl) ^ (tmpl_ds ^ ds) as u64).to_be()
}

/// Write the inline segment of `data` at `ctrl + offset` (`offset` < 64, a multiple of 16:
/// inside the WQE's first block): the BE32 header `len | MLX5_INLINE_SEG`, then the payload,
/// split at the ring end (rdma-core `set_data_inl_seg` / `memcpy_to_wqe`; the same bytes as
/// `WqeWriter::push_inline`). Nothing for an empty payload.
///
/// # Safety
/// `ctrl` is a block of `ring` and the WQE's blocks (`inline_shape`) are reserved.
#[inline(always)]
unsafe fn write_inline(ring: &SqRing, ctrl: *mut u8, offset: usize, data: &[u8]) {
    let len = data.len();
    if len == 0 {
        return;
    }
    // SAFETY (the block): the caller reserved the WQE's blocks; the header is in its first
    // block; the payload runs to the ring end and continues at the start.
    unsafe {
        let seg = ctrl.add(offset);
        (seg as *mut InlineHdr).write(InlineHdr::new(len as u32));
        let dst = seg.add(4);
        // A payload that fits the first block never reaches the ring end (blocks are whole);
        // with a constant length the compiler drops the test.
        if len <= SEND_WQE_BB - offset - 4 {
            copy_payload(data.as_ptr(), dst, len);
        } else {
            let room = ring.end() as usize - dst as usize;
            if len <= room {
                copy_payload(data.as_ptr(), dst, len);
            } else {
                core::ptr::copy_nonoverlapping(data.as_ptr(), dst, room);
                core::ptr::copy_nonoverlapping(data.as_ptr().add(room), ring.start(), len - room);
            }
        }
    }
}

/// Copy `len` bytes, short payloads with two overlapping unaligned loads and stores instead
/// of a call to `memcpy` (the bytes written are the same).
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes; they do not overlap.
#[inline(always)]
unsafe fn copy_payload(src: *const u8, dst: *mut u8, len: usize) {
    use core::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: every access below is inside the first `len` bytes of `src` / `dst`.
    unsafe {
        if (8..=16).contains(&len) {
            let (a, b) = (rd(src as *const u64), rd(src.add(len - 8) as *const u64));
            wr(dst as *mut u64, a);
            wr(dst.add(len - 8) as *mut u64, b);
        } else if (4..8).contains(&len) {
            let (a, b) = (rd(src as *const u32), rd(src.add(len - 4) as *const u32));
            wr(dst as *mut u32, a);
            wr(dst.add(len - 4) as *mut u32, b);
        } else {
            core::ptr::copy_nonoverlapping(src, dst, len);
        }
    }
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
            None
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
            Some(unsafe {
                RecvQueue::new(
                    r.buf,
                    r.wqe_cnt,
                    r.stride,
                    layout.max_recv_sge,
                    layout.dbrec.add(RCV_DBR),
                )
            })
        };
        // SAFETY: buf is 64-aligned (checked) and holds wqe_cnt blocks (caller contract);
        // wqe_cnt is a power of two (checked).
        let ring = unsafe { SqRing::new(sq.buf, sq.wqe_cnt) };
        let max_wqe_bytes = ring
            .max_wqe_bytes()
            .min(SEND_WQE_MAX_WQEBBS as usize * SEND_WQE_BB);
        let db = Doorbell::new(layout.bf.reg, layout.bf.size);
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
            cqe_qpn_key: crate::cq::LeanRun::qpn_key(layout.qpn),
            fast: FastLimits::default(),
        })
    }

    /// Recompute the lean entry points' limits and gates (after a state change).
    fn update_fast_limits(&mut self) {
        let postable = matches!(self.state, QpState::Rts | QpState::Sqd)
            && matches!(self.qp_type, QpType::Rc | QpType::Uc);
        // A lean WQE must fit the blocks the lean gate guarantees (`SendQueue::wr_bbs`);
        // within the caps it always does (`wr_limit`), the clamp makes that local.
        let max_inline =
            (self.max_inline as usize).min(self.sq.wr_bbs() as usize * SEND_WQE_BB - RDMA_HDR - 4);
        self.fast = FastLimits {
            // ctrl + raddr + align16(4 + len) <= max_wqe_bytes (a multiple of 16).
            inline_rdma: max_inline.min(self.max_wqe_bytes.saturating_sub(RDMA_HDR + 4)),
            inline_send: max_inline.min(self.max_wqe_bytes.saturating_sub(SEND_HDR + 4)),
        };
        let inline_ok = self.fast.inline_rdma.min(self.fast.inline_send) >= LEAN_INLINE;
        self.sq
            .set_open(postable, inline_ok, self.max_send_sge >= 1);
    }

    /// How doorbells are rung ([`DoorbellMode::BfPost`] by default when the QP has
    /// BlueFlame registers, else [`DoorbellMode::Db`]).
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
        self.sq.ring_doorbell();
        self.sq.db.mode = mode;
        self.sq.refresh_gate();
        Ok(())
    }

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
        self.rq.as_ref().map_or(0, |r| r.outstanding())
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
    /// completion for each).
    pub fn set_state(&mut self, state: QpState) {
        tracing::debug!(qpn = self.qpn, old = %self.state, new = %state, "data path QP state");
        if state == QpState::Reset {
            self.sq.reset();
            if let Some(rq) = self.rq.as_mut() {
                rq.reset();
            }
        }
        self.state = state;
        self.update_fast_limits();
    }

    /// An error or flush completion of this QP was polled: the device has moved the QP out of
    /// RTS, so the data path follows it without the caller's help. A failed send of a UC or UD
    /// QP leaves it in SQE (its receive queue keeps working), anything else in Error (IBTA
    /// Vol. 1 §10.3, QP states: the Send Queue Error state is for UC/UD requester errors;
    /// the software ConnectX's `engine::enter_sqe` / `fail_qp`). Never moves a QP back out of
    /// Error, nor out of Reset.
    #[cold]
    pub(crate) fn follow_error_completion(&mut self, send: bool) {
        let next = if send && self.qp_type != QpType::Rc {
            QpState::Sqe
        } else {
            QpState::Error
        };
        match (self.state, next) {
            (QpState::Error | QpState::Reset, _) | (QpState::Sqe, QpState::Sqe) => {}
            _ => self.set_state(next),
        }
    }

    /// Post one send WR and ring the doorbell (BlueFlame when it fits).
    ///
    /// The four most common shapes — WRITE or SEND, inline or one gather entry, no UD
    /// destination — go to their lean entry points ([`Qp::post_write_inline`],
    /// [`Qp::post_write`], [`Qp::post_send_inline`], [`Qp::post_send`]), which do exactly what
    /// the generic path does in fewer instructions; when the WR is built at the call site the
    /// compiler resolves this choice and only the lean path remains.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        if wr.ud.is_none() && wr.xrc.is_none() {
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
            self.sq.defer(ctrl, bbs);
            self.sq.ring_doorbell();
        }
        Ok(())
    }

    // The lean entry points' rare cases (an error, a WR left pending by `post_deferred`, a QP
    // type or limit the lean check does not cover) go to the generic post of the equivalent
    // WR, out of line so that the hot path keeps neither the WR nor the error on its stack.
    // The result comes back through a pointer passed last, not as the return value: a
    // `Result<()>` is returned through a hidden first argument, which would make the hot path
    // shuffle `self` and `wr_id` out of the registers they arrive in to match it.
    #[inline(always)]
    fn post_write_inline_generic(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<()> {
        let mut r = MaybeUninit::uninit();
        self.post_write_inline_slow(wr_id, data, remote, flags, &mut r);
        // SAFETY: `post_write_inline_slow` always writes `r`.
        unsafe { r.assume_init() }
    }
    #[cold]
    #[inline(never)]
    fn post_write_inline_slow(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
        r: &mut MaybeUninit<Result<()>>,
    ) {
        r.write(self.post_planned(&SendWr::write(wr_id, remote).inline(data).flags(flags)));
    }
    #[inline(always)]
    fn post_write_generic(
        &mut self,
        wr_id: u64,
        sge: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<()> {
        let mut r = MaybeUninit::uninit();
        let Sge { addr, length, lkey } = sge;
        self.post_write_slow(wr_id, (addr, length, lkey), remote, flags, &mut r);
        // SAFETY: `post_write_slow` always writes `r`.
        unsafe { r.assume_init() }
    }
    #[cold]
    #[inline(never)]
    fn post_write_slow(
        &mut self,
        wr_id: u64,
        (addr, length, lkey): (u64, u32, u32),
        remote: RemoteAddr,
        flags: SendFlags,
        r: &mut MaybeUninit<Result<()>>,
    ) {
        let sge = Sge { addr, length, lkey };
        r.write(self.post_planned(&SendWr::write(wr_id, remote).sges(&[sge]).flags(flags)));
    }
    #[inline(always)]
    fn post_send_inline_generic(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: SendFlags,
    ) -> Result<()> {
        let mut r = MaybeUninit::uninit();
        self.post_send_inline_slow(wr_id, data, flags, &mut r);
        // SAFETY: `post_send_inline_slow` always writes `r`.
        unsafe { r.assume_init() }
    }
    #[cold]
    #[inline(never)]
    fn post_send_inline_slow(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: SendFlags,
        r: &mut MaybeUninit<Result<()>>,
    ) {
        r.write(self.post_planned(&SendWr::send(wr_id).inline(data).flags(flags)));
    }
    #[inline(always)]
    fn post_send_generic(&mut self, wr_id: u64, sge: Sge, flags: SendFlags) -> Result<()> {
        let mut r = MaybeUninit::uninit();
        let Sge { addr, length, lkey } = sge;
        self.post_send_slow(wr_id, (addr, length, lkey), flags, &mut r);
        // SAFETY: `post_send_slow` always writes `r`.
        unsafe { r.assume_init() }
    }
    #[cold]
    #[inline(never)]
    fn post_send_slow(
        &mut self,
        wr_id: u64,
        (addr, length, lkey): (u64, u32, u32),
        flags: SendFlags,
        r: &mut MaybeUninit<Result<()>>,
    ) {
        let sge = Sge { addr, length, lkey };
        r.write(self.post_planned(&SendWr::send(wr_id).sges(&[sge]).flags(flags)));
    }

    /// Whether the lean path writes a gather entry of this length: a zero-length entry is
    /// skipped by the generic path, one over 2^31-1 is an error. (Whether the QP allows a
    /// gather entry at all is in the gates.) Constant when the length is.
    #[inline(always)]
    fn sge_len_ok(sge: Sge) -> bool {
        sge.length.wrapping_sub(1) < i32::MAX as u32
    }

    /// Whether the lean path writes an inline payload of `len` bytes against the lean
    /// `limit`: at most [`LEAN_INLINE`] bytes always pass (the gates are open only when the
    /// limits allow them; with a constant length the compiler drops the test).
    #[inline(always)]
    fn inline_len_ok(len: usize, limit: usize) -> bool {
        len <= LEAN_INLINE || len <= limit
    }

    /// `fm_ce_se` of a lean post; constant when `flags` is and asks for a completion.
    #[inline(always)]
    fn lean_fm(&self, flags: SendFlags) -> u8 {
        let fm = FM_CE_SE[(flags.bits() & 7) as usize];
        if flags.contains(SendFlags::SIGNALED) {
            fm
        } else {
            fm | self.sig_all_ce
        }
    }

    /// The end of every lean post, once the segments after the ctrl segment are in the ring:
    /// the ctrl segment (two stores of values built in registers), the WR id, the doorbell.
    /// `slot` is the producer index's slot × 8 ([`SendQueue::lean_slot`]), `ctrl` its block, `tmpl` the QP's
    /// `ctrl_write` or `ctrl_send` and its DS count.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn lean_finish(
        &mut self,
        ctrl: *mut u8,
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
        // SAFETY: `ctrl` is the WQE's first block, 64-byte aligned, reserved by the caller.
        unsafe {
            (ctrl as *mut u64).write(w0);
            (ctrl as *mut u64).add(1).write(w1);
        }
        self.sq.commit_lean(pi, slot, wr_id, bbs);
        let next = pi + bbs as u64;
        match ring {
            LeanRing::BfPost => self.sq.ring_bf_post(ctrl, w0, next, bbs, ds),
            LeanRing::Any => self.sq.ring_other(ctrl, w0, next, bbs, ds),
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
        self.post_write_inline_generic(wr_id, data, remote, flags)
    }

    /// The lean WRITE with inline data, once a gate let it through.
    #[inline(always)]
    fn lean_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
        ring: LeanRing,
    ) {
        let (bbs, ds) = inline_shape(RDMA_HDR, data.len());
        let (slot, ctrl) = self.sq.lean_slot();
        // SAFETY: `ctrl` is the next block and the WQE's `bbs` blocks are free (the gate);
        // the raddr segment is the second 16 bytes of the first block, the inline segment
        // the third.
        unsafe {
            (ctrl.add(SEND_WQE_DS) as *mut RaddrSeg).write(RaddrSeg::new(remote.addr, remote.rkey));
            write_inline(&self.sq.ring, ctrl, RDMA_HDR, data);
        }
        let tmpl = (self.ctrl_write, WRITE_DS);
        self.lean_finish(ctrl, slot, wr_id, tmpl, ds, bbs, flags, ring);
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
        self.post_write_generic(wr_id, sge, remote, flags)
    }

    /// The lean WRITE of one gather entry, once a gate let it through.
    #[inline(always)]
    fn lean_write(
        &mut self,
        wr_id: u64,
        sge: Sge,
        remote: RemoteAddr,
        flags: SendFlags,
        ring: LeanRing,
    ) {
        let (slot, ctrl) = self.sq.lean_slot();
        // SAFETY: as in `lean_write_inline`; ctrl + raddr + data segment fill 48 bytes of the
        // one free block.
        unsafe {
            (ctrl.add(SEND_WQE_DS) as *mut RaddrSeg).write(RaddrSeg::new(remote.addr, remote.rkey));
            (ctrl.add(RDMA_HDR) as *mut DataSeg)
                .write(DataSeg::new(sge.length, sge.lkey, sge.addr));
        }
        let tmpl = (self.ctrl_write, WRITE_DS);
        self.lean_finish(ctrl, slot, wr_id, tmpl, 3, 1, flags, ring);
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
        self.post_send_inline_generic(wr_id, data, flags)
    }

    /// The lean SEND with inline data, once a gate let it through.
    #[inline(always)]
    fn lean_send_inline(&mut self, wr_id: u64, data: &[u8], flags: SendFlags, ring: LeanRing) {
        let (bbs, ds) = inline_shape(SEND_HDR, data.len());
        let (slot, ctrl) = self.sq.lean_slot();
        // SAFETY: `ctrl` is the next block and the WQE's blocks are free (the gate); the
        // inline segment is the second 16 bytes of the first block.
        unsafe { write_inline(&self.sq.ring, ctrl, SEND_HDR, data) };
        let tmpl = (self.ctrl_send, SEND_DS);
        self.lean_finish(ctrl, slot, wr_id, tmpl, ds, bbs, flags, ring);
    }

    /// SEND from one registered buffer, doorbell rung: exactly
    /// `post(&SendWr::send(wr_id).sges(&[sge]).flags(flags))`, specialised (RC and UC).
    #[inline(always)]
    pub fn post_send(&mut self, wr_id: u64, sge: Sge, flags: SendFlags) -> Result<()> {
        lean_post!(self, Self::sge_len_ok(sge), lean_send(wr_id, sge, flags));
        self.post_send_generic(wr_id, sge, flags)
    }

    /// The lean SEND of one gather entry, once a gate let it through.
    #[inline(always)]
    fn lean_send(&mut self, wr_id: u64, sge: Sge, flags: SendFlags, ring: LeanRing) {
        let (slot, ctrl) = self.sq.lean_slot();
        // SAFETY: ctrl + data segment fill 32 bytes of the one free block (the gate).
        unsafe {
            (ctrl.add(SEND_HDR) as *mut DataSeg)
                .write(DataSeg::new(sge.length, sge.lkey, sge.addr));
        }
        let tmpl = (self.ctrl_send, SEND_DS);
        self.lean_finish(ctrl, slot, wr_id, tmpl, 2, 1, flags, ring);
    }

    /// Write a send WR into the ring without ringing the doorbell; the device sees it after
    /// the next [`Qp::ring_doorbell`] (or a post that rings). See also [`Qp::batch`].
    #[inline]
    pub fn post_deferred(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let plan = self.plan(wr)?;
        let (ctrl, bbs) = self.write(wr, &plan)?;
        self.sq.defer(ctrl, bbs);
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
        Batch { qp: self }
    }

    #[inline(always)]
    fn check_send_state(&self) -> Result<()> {
        match self.state {
            QpState::Rts | QpState::Sqd => Ok(()),
            QpState::Sqe | QpState::Error => Err(Error::WrongState {
                op: "post a send",
                state: self.state,
                hint: "poll the CQ for the error completions, then recover the QP \
                       (Error -> Reset -> Init -> RTR -> RTS)",
            }),
            _ => Err(Error::WrongState {
                op: "post a send",
                state: self.state,
                hint: "move the QP to RTS first (and report it with Qp::set_state)",
            }),
        }
    }

    #[inline(always)]
    fn plan<'a>(&self, wr: &SendWr<'a>) -> Result<Plan<'a>> {
        self.check_send_state()?;
        let op = &wr.op;
        let rc_only = !matches!(op, SendOp::Send | SendOp::SendImm { .. });
        match self.qp_type {
            QpType::Rc | QpType::XrcSend => {}
            QpType::XrcRecv => return Err(crate::xrc::no_send_queue(op.name())),
            QpType::Uc => {
                if !matches!(
                    op,
                    SendOp::Send
                        | SendOp::SendImm { .. }
                        | SendOp::Write { .. }
                        | SendOp::WriteImm { .. }
                ) {
                    return Err(Error::OpNotSupported {
                        op: op.name(),
                        qp_type: self.qp_type,
                    });
                }
            }
            QpType::Ud => {
                if rc_only {
                    return Err(Error::OpNotSupported {
                        op: op.name(),
                        qp_type: self.qp_type,
                    });
                }
            }
        }
        let av_bytes = match (self.qp_type, wr.ud) {
            (QpType::Ud, Some(d)) => d.wqe_bytes(),
            (QpType::Ud, None) => return Err(Error::MissingAddress),
            (_, Some(_)) => {
                return Err(Error::UnexpectedAddress {
                    qp_type: self.qp_type,
                })
            }
            (_, None) => 0,
        } + crate::xrc::seg_bytes(self.qp_type, wr.xrc)?;
        let none = AtomicOperands::None;
        #[rustfmt::skip]
        let (opcode, opmod, imm, remote, atomic, local, atomic_size) = match *op {
            SendOp::Send => (op::OPCODE_SEND, 0, 0, None, none, None, 0),
            SendOp::SendImm { imm } => (op::OPCODE_SEND_IMM, 0, imm, None, none, None, 0),
            SendOp::Write { remote } => (op::OPCODE_RDMA_WRITE, 0, 0, Some(remote), none, None, 0),
            SendOp::WriteImm { remote, imm } => (op::OPCODE_RDMA_WRITE_IMM, 0, imm, Some(remote), none, None, 0),
            SendOp::Read { remote } => (op::OPCODE_RDMA_READ, 0, 0, Some(remote), none, None, 0),
            SendOp::CompSwap { remote, local, compare, swap } =>
                (op::OPCODE_ATOMIC_CS, 0, 0, Some(remote), AtomicOperands::Std(AtomicSeg::cas(compare, swap)), Some(local), 8),
            SendOp::FetchAdd { remote, local, add } =>
                (op::OPCODE_ATOMIC_FA, 0, 0, Some(remote), AtomicOperands::Std(AtomicSeg::faa(add)), Some(local), 8),
            SendOp::MaskedCompSwap32 { remote, local, compare, compare_mask, swap, swap_mask } =>
                (op::OPCODE_ATOMIC_MASKED_CS, op::OPMOD_EXT_ATOMIC_32, 0, Some(remote),
                 AtomicOperands::MaskedCs32(MaskedCs32Seg::new(compare, compare_mask, swap, swap_mask)), Some(local), 4),
            SendOp::MaskedCompSwap64 { remote, local, compare, compare_mask, swap, swap_mask } =>
                (op::OPCODE_ATOMIC_MASKED_CS, op::OPMOD_EXT_ATOMIC_64, 0, Some(remote),
                 AtomicOperands::MaskedCs64(MaskedCs64Seg::new(compare, compare_mask, swap, swap_mask)), Some(local), 8),
            SendOp::MaskedFetchAdd32 { remote, local, add, field_boundary } =>
                (op::OPCODE_ATOMIC_MASKED_FA, op::OPMOD_EXT_ATOMIC_32, 0, Some(remote),
                 AtomicOperands::MaskedFa32(MaskedFa32Seg::new(add, field_boundary)), Some(local), 4),
            SendOp::MaskedFetchAdd64 { remote, local, add, field_boundary } =>
                (op::OPCODE_ATOMIC_MASKED_FA, op::OPMOD_EXT_ATOMIC_64, 0, Some(remote),
                 AtomicOperands::MaskedFa64(MaskedFa64Seg::new(add, field_boundary)), Some(local), 8),
        };
        let atomic_bytes = match atomic {
            AtomicOperands::None => 0,
            AtomicOperands::MaskedCs64(_) => 32,
            _ => 16,
        };
        let data_bytes = if let Some(l) = local {
            // Atomics: the operands are in the constructor; the local buffer is one data
            // segment of the operand size (rdma-core `set_data_ptr_seg_atomic`).
            match wr.data {
                SendData::Sges([]) => {}
                _ => return Err(Error::UnexpectedData { op: op.name() }),
            }
            let size = atomic_size as u32;
            if l.length < size {
                return Err(Error::AtomicBufferTooShort {
                    len: l.length,
                    size,
                });
            }
            if let Some(r) = remote {
                if !r.addr.is_multiple_of(size as u64) {
                    return Err(Error::UnalignedAtomic {
                        addr: r.addr,
                        align: size,
                    });
                }
            }
            SEND_WQE_DS
        } else {
            match wr.data {
                SendData::Sges(sges) => {
                    check_sges(sges, self.max_send_sge)?;
                    // rdma-core skips zero-length gather entries.
                    sges.iter().filter(|s| s.length != 0).count() * SEND_WQE_DS
                }
                SendData::Inline(b) => self.inline_bytes(wr, b.len())?,
                SendData::InlineParts(parts) => {
                    let len = parts.iter().map(|p| p.len()).sum();
                    self.inline_bytes(wr, len)?
                }
            }
        };
        let bytes = SEND_WQE_DS
            + av_bytes
            + if remote.is_some() { SEND_WQE_DS } else { 0 }
            + atomic_bytes
            + data_bytes;
        if bytes > self.max_wqe_bytes {
            return Err(Error::WqeTooLarge {
                bytes,
                max: self.max_wqe_bytes,
            });
        }
        Ok(Plan {
            opcode,
            opmod,
            imm_be: imm.to_be(),
            remote,
            atomic,
            local,
            data: wr.data,
            bytes,
            atomic_size,
        })
    }

    #[inline(always)]
    fn inline_bytes(&self, wr: &SendWr<'_>, len: usize) -> Result<usize> {
        if matches!(wr.op, SendOp::Read { .. }) {
            return Err(Error::InlineRead);
        }
        if len > self.max_inline as usize {
            return Err(Error::InlineTooLarge {
                len,
                max: self.max_inline,
            });
        }
        Ok(if len == 0 { 0 } else { inline_seg_size(len) })
    }

    #[inline(always)]
    fn fm_ce_se(&self, flags: SendFlags) -> u8 {
        FM_CE_SE[(flags.bits() & 7) as usize] | self.sig_all_ce
    }

    /// Write the ctrl segment of the WQE at `ctrl` (the block of the producer index) and
    /// record the WQE: shared by [`Qp::post`] and the lean entry points.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn seal(
        &mut self,
        ctrl: *mut u8,
        wr_id: u64,
        opcode: u8,
        opmod: u8,
        ds: u32,
        bbs: u32,
        flags: SendFlags,
        imm_be: u32,
        atomic_size: u8,
    ) {
        let pi = self.sq.pi16();
        let fm_ce_se = self.fm_ce_se(flags);
        // SAFETY: `ctrl` is the block of `pi` (callers take it from `next_ctrl`).
        unsafe {
            SendQueue::write_ctrl(
                ctrl,
                pi,
                opcode,
                opmod,
                self.qpn_shifted,
                ds,
                fm_ce_se,
                imm_be,
            )
        };
        self.sq.commit(wr_id, bbs, atomic_size);
    }

    /// Whether a WQE of `bbs` blocks may be posted: a free WR first (rdma-core
    /// `mlx5_wq_overflow`), then its blocks.
    #[inline(always)]
    fn check_room(&self, bbs: u32) -> Result<()> {
        if self.sq.free_wrs() == 0 {
            return Err(Error::SqFull {
                limit: SqLimit::WorkRequests,
                needed: 1,
                free: 0,
            });
        }
        let free = self.sq.free();
        if bbs > free {
            return Err(Error::SqFull {
                limit: SqLimit::Blocks,
                needed: bbs,
                free,
            });
        }
        Ok(())
    }

    #[inline(always)]
    fn write(&mut self, wr: &SendWr<'_>, plan: &Plan<'_>) -> Result<(*mut u8, u32)> {
        let bbs = bbs_for_ds(ds_for_bytes(plan.bytes));
        self.check_room(bbs)?;
        let pi = self.sq.pi16();
        let mut w = WqeWriter::new(&self.sq.ring, pi, plan.bytes);
        let too_large = |_| Error::WqeTooLarge {
            bytes: plan.bytes,
            max: self.max_wqe_bytes,
        };
        if let Some(n) = wr.xrc {
            w.push(&mlx5_wqe::seg::XrcSeg::new(n)).map_err(too_large)?;
        }
        if let Some(d) = wr.ud {
            if d.is_compact() {
                w.push(&d.av().compact()).map_err(too_large)?;
            } else {
                w.push(d.av()).map_err(too_large)?;
            }
        }
        if let Some(r) = plan.remote {
            w.push(&RaddrSeg::new(r.addr, r.rkey)).map_err(too_large)?;
        }
        match plan.atomic {
            AtomicOperands::None => {}
            AtomicOperands::Std(s) => w.push(&s).map_err(too_large)?,
            AtomicOperands::MaskedCs32(s) => w.push(&s).map_err(too_large)?,
            AtomicOperands::MaskedCs64(s) => w.push(&s).map_err(too_large)?,
            AtomicOperands::MaskedFa32(s) => w.push(&s).map_err(too_large)?,
            AtomicOperands::MaskedFa64(s) => w.push(&s).map_err(too_large)?,
        }
        if let Some(l) = plan.local {
            w.push(&DataSeg::new(plan.atomic_size as u32, l.lkey, l.addr))
                .map_err(too_large)?;
        } else {
            match plan.data {
                SendData::Sges(sges) => {
                    for s in sges.iter().filter(|s| s.length != 0) {
                        w.push(&DataSeg::new(s.length, s.lkey, s.addr))
                            .map_err(too_large)?;
                    }
                }
                SendData::Inline(b) => {
                    w.push_inline(&[b]).map_err(too_large)?;
                }
                SendData::InlineParts(parts) => {
                    w.push_inline(parts).map_err(too_large)?;
                }
            }
        }
        let ds = ds_for_bytes(w.size());
        debug_assert_eq!(bbs_for_ds(ds), bbs);
        let ctrl = w.ctrl_ptr();
        self.seal(
            ctrl,
            wr.wr_id,
            plan.opcode,
            plan.opmod,
            ds,
            bbs,
            wr.flags,
            plan.imm_be,
            plan.atomic_size,
        );
        Ok((ctrl, bbs))
    }

    /// Post a caller-built WQE (rdma-core `mlx5dv_wr_raw_wqe`) and ring the doorbell.
    ///
    /// `wqe` is the whole WQE, ctrl segment first, a multiple of 16 bytes. The library copies
    /// it into the ring (wrapping at the ring end), then overwrites exactly two ctrl fields:
    /// `wqe_index` (bytes 1–2, the producer index) and the QPN (bytes 4–6). It ORs
    /// `MLX5_WQE_CTRL_CQ_UPDATE` into `fm_ce_se` when the QP signals every WR. Everything else
    /// (opmod, opcode, DS count, signature, fence/completion/solicited bits, immediate,
    /// segments) is the caller's; the DS count must equal `wqe.len() / 16`. A completion is
    /// expected when `fm_ce_se` asks for one (CE ≠ 0). The caller vouches for what the
    /// segments name, as for any post.
    #[inline]
    pub fn post_raw(&mut self, wr_id: u64, wqe: &[u8]) -> Result<()> {
        self.post_raw_deferred(wr_id, wqe)?;
        self.sq.ring_doorbell();
        Ok(())
    }

    /// [`Qp::post_raw`] without the doorbell.
    pub fn post_raw_deferred(&mut self, wr_id: u64, wqe: &[u8]) -> Result<()> {
        self.check_send_state()?;
        if wqe.len() < SEND_WQE_DS || !wqe.len().is_multiple_of(SEND_WQE_DS) {
            return Err(Error::BadRawWqe(
                "length must be a non-zero multiple of 16 bytes",
            ));
        }
        if wqe.len() > self.max_wqe_bytes {
            return Err(Error::WqeTooLarge {
                bytes: wqe.len(),
                max: self.max_wqe_bytes,
            });
        }
        // The whole byte, as the device reads it (`qpn_ds` bits 7:0, `struct mlx5_wqe_ctrl_seg`).
        if wqe[7] as usize != wqe.len() / SEND_WQE_DS {
            return Err(Error::BadRawWqe(
                "ctrl DS count (byte 7) must equal the length / 16",
            ));
        }
        let bbs = bbs_for_ds(ds_for_bytes(wqe.len()));
        self.check_room(bbs)?;
        let pi = self.sq.pi16();
        let ring = self.sq.ring;
        let mut dst = ring.bb(pi);
        for chunk in wqe.chunks_exact(SEND_WQE_DS) {
            // SAFETY: `dst` is a 16-byte unit of a free block inside the ring (room checked).
            unsafe {
                core::ptr::copy_nonoverlapping(chunk.as_ptr(), dst, SEND_WQE_DS);
                dst = dst.add(SEND_WQE_DS);
            }
            if dst == ring.end() {
                dst = ring.start();
            }
        }
        let ctrl = ring.bb(pi);
        let mut fm_ce_se = wqe[11];
        if self.sig_all {
            fm_ce_se |= op::CTRL_CQ_UPDATE;
        }
        let idx = pi.to_be_bytes();
        let qpn = self.qpn.to_be_bytes();
        // SAFETY: ctrl is the WQE's first block; bytes 1..=2, 4..=6 and 11 are inside it.
        unsafe {
            *ctrl.add(1) = idx[0];
            *ctrl.add(2) = idx[1];
            *ctrl.add(4) = qpn[1];
            *ctrl.add(5) = qpn[2];
            *ctrl.add(6) = qpn[3];
            *ctrl.add(11) = fm_ce_se;
        }
        let opcode = wqe[3];
        let atomic_size = match (opcode, wqe[0]) {
            (op::OPCODE_ATOMIC_CS | op::OPCODE_ATOMIC_FA, _) => 8,
            (
                op::OPCODE_ATOMIC_MASKED_CS | op::OPCODE_ATOMIC_MASKED_FA,
                op::OPMOD_EXT_ATOMIC_32,
            ) => 4,
            (op::OPCODE_ATOMIC_MASKED_CS | op::OPCODE_ATOMIC_MASKED_FA, _) => 8,
            _ => 0,
        };
        self.sq.commit(wr_id, bbs, atomic_size);
        self.sq.defer(ctrl, bbs);
        Ok(())
    }

    /// Post one receive WR. Its buffers must stay valid and registered until its completion
    /// is polled. Not available when the QP receives through an SRQ (post there).
    #[inline]
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<()> {
        self.post_recv_list(&[RecvWr { wr_id, sges }])
    }

    /// Post several receive WRs with one doorbell-record update; all are checked before any is
    /// written (all or nothing).
    #[inline]
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        match self.state {
            QpState::Reset | QpState::Error => {
                return Err(Error::WrongState {
                    op: "post a receive",
                    state: self.state,
                    hint: "receives may be posted from Init on, and not in Error",
                })
            }
            _ => {}
        }
        match self.rq.as_mut() {
            Some(rq) => rq.post(wrs),
            None if self.srqn.is_some() => Err(Error::WrongState {
                op: "post a receive on a QP that uses an SRQ",
                state: self.state,
                hint: "post to the Srq instead",
            }),
            None => Err(Error::RqFull { capacity: 0 }),
        }
    }

    /// Report every WR still outstanding on this QP (send and receive) as flushed
    /// (`IBV_WC_WR_FLUSH_ERR`) and retire it. For a QP in Error whose device will report
    /// nothing more (before [`Qp::set_state`] to Reset): with it every posted WR is accounted
    /// for exactly once. Returns the completions written; call again while it fills `out`.
    pub fn flush_outstanding(&mut self, out: &mut [Wc]) -> Result<usize> {
        if self.state != QpState::Error {
            return Err(Error::WrongState {
                op: "flush outstanding WRs",
                state: self.state,
                hint: "only a QP in Error has its WRs flushed",
            });
        }
        let n = match self.sq.flush_all(self.qpn, out) {
            Progress::Done(n) => n,
            Progress::Partial(n) => return Ok(n),
            Progress::Bad(_) => 0,
        };
        let m = match self.rq.as_mut() {
            Some(rq) => match rq.flush_all(self.qpn, &mut out[n..]) {
                Progress::Done(m) | Progress::Partial(m) => m,
                Progress::Bad(_) => 0,
            },
            None => 0,
        };
        Ok(n + m)
    }

    pub(crate) fn complete_send(
        &mut self,
        wqe_counter: u16,
        info: &CqeInfo,
        out: &mut [Wc],
    ) -> Progress {
        self.sq.complete(wqe_counter, info, out)
    }

    #[inline(always)]
    pub(crate) fn complete_send_success(
        &mut self,
        wqe_counter: u16,
        qpn: u32,
        byte_cnt: u32,
        out: &mut Wc,
    ) -> bool {
        self.sq.complete_success(wqe_counter, qpn, byte_cnt, out)
    }

    /// What the lean poll reads of the send queue once per batch.
    #[inline(always)]
    pub(crate) fn sq_lean_view(&self) -> crate::sq::LeanView {
        self.sq.lean_view()
    }

    /// The QPN's part of what the lean poll expects in this QP's CQEs.
    #[inline(always)]
    pub(crate) fn cqe_qpn_key(&self) -> u64 {
        self.cqe_qpn_key
    }

    /// Whether every outstanding send WQE has meta byte 0 (the lean poll need not read them).
    #[inline(always)]
    pub(crate) fn sq_all_common(&self) -> bool {
        self.sq.all_common()
    }

    /// The lean poll retired `k` one-block WQEs.
    #[inline(always)]
    pub(crate) fn sq_lean_retired(&mut self, k: u16) {
        self.sq.lean_retired(k)
    }

    /// A receive CQE for this QP's RQ; `Err(expected)` when it breaks the receive order
    /// (`rq` module docs).
    pub(crate) fn complete_recv(
        &mut self,
        wqe_counter: u16,
        wc: Wc,
        inline: Option<&[u8]>,
        out: &mut [Wc],
        first: bool,
    ) -> core::result::Result<Progress, u16> {
        match self.rq.as_mut() {
            Some(rq) => rq.complete(wqe_counter, wc, inline, out, first),
            None => Ok(Progress::Bad(
                "receive completion on a QP without a receive queue",
            )),
        }
    }

    pub(crate) fn reply_sges(&self, wqe_counter: u16, out: &mut [DataSeg; 16]) -> usize {
        self.sq.reply_sges(wqe_counter, out)
    }
}

/// Several posts, one doorbell: the guard returned by [`Qp::batch`] rings when dropped.
#[derive(Debug)]
pub struct Batch<'a> {
    qp: &'a mut Qp,
}

impl Batch<'_> {
    /// Write a send WR; the doorbell rings when the batch ends.
    #[inline]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.qp.post_deferred(wr)
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
