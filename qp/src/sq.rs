//! The send queue: the ring of 64-byte basic blocks, its producer and consumer indices, the
//! per-block bookkeeping that turns a CQE's `wqe_counter` back into WRs, and the doorbell.
//!
//! Indices are free-running 16-bit counters in basic blocks, like rdma-core's `sq.cur_post` and
//! UCX's `sw_pi` (mlx5-facts §2): `pi` is the next block to write, `ci` the first block not yet
//! retired. The WQE starting at block `p` carries `p` in its ctrl `wqe_index`, and a requester
//! CQE returns it as `wqe_counter` (mlx5-facts §5.6). Retiring up to a completed WQE frees every
//! block before it too, so the unsignaled WQEs a signaled one follows give their blocks back
//! without a CQE of their own (rdma-core `wqe_head`, UCX `hw_ci`).

use crate::wc::{Wc, WcOpcode, WcStatus};
use mlx5_cq::SYNDROME_WR_FLUSH_ERR;
use mlx5_hw::mmio;
use mlx5_wqe::ring::SqRing;
use mlx5_wqe::seg::DataSeg;
use mlx5_wqe::SEND_WQE_BB;

/// What the data path remembers about the WQE that starts at a block.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlotMeta {
    /// Producer index of the WQE's first block (to recognise a stale slot).
    pub pi: u16,
    /// Blocks the WQE occupies (1..=16).
    pub bbs: u8,
    /// Whether a success produces a completion.
    pub signaled: bool,
    /// Operand size of an atomic (the completion's byte_len), 0 otherwise.
    pub atomic_size: u8,
    /// Completion opcode.
    pub opcode: WcOpcode,
}

/// The fields of a CQE the queues need to build completions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqeInfo {
    pub qpn: u32,
    pub status: WcStatus,
    pub syndrome: u8,
    pub vendor_err: u8,
    pub byte_cnt: u32,
}

/// How far handing one CQE to a queue got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The CQE is fully accounted for; this many completions were written.
    Done(usize),
    /// The output array filled up before the CQE was accounted for; this many completions were
    /// written and the CQE must be handed over again (the queue remembers where it stopped).
    Partial(usize),
    /// The CQE names no outstanding WQE.
    Bad(&'static str),
}

/// The BlueFlame / doorbell register of a QP.
#[derive(Debug)]
pub(crate) struct Doorbell {
    /// Base of the bfreg (`mlx5dv_qp.bf.reg`).
    reg: *mut u8,
    /// The half the next write goes to (`reg` or `reg + size`).
    cur: *mut u8,
    /// `reg ^ (reg + size)`: XORed into `cur` it moves to the other half, one instruction
    /// (UCX `uct_ib_mlx5_txwq_ring_doorbell` does `addr ^= 256`); 0 when `size` is 0.
    flip: usize,
    /// Half size (`bf.size`), 0 when only 8-byte doorbells may be used.
    pub size: u32,
    /// Whether a one-block WQE may take the straight-line 16-byte-store copy
    /// ([`mmio::bf_copy_bb`]): BlueFlame is available and the register is 16-byte aligned
    /// (a bfreg is; the constructor only demands 8, so a looser one takes [`mmio::bf_copy`]).
    one_bb: bool,
}

impl Doorbell {
    /// The register of `reg` with halves of `size` bytes, starting at the first half.
    pub fn new(reg: *mut u8, size: u32) -> Doorbell {
        let other = reg.wrapping_add(size as usize);
        Doorbell {
            reg,
            cur: reg,
            flip: reg as usize ^ other as usize,
            size,
            one_bb: size != 0 && (reg as usize).is_multiple_of(16),
        }
    }

    /// Which half the next write goes to (0 or `size`).
    #[inline(always)]
    pub fn offset(&self) -> u32 {
        (self.cur as usize - self.reg as usize) as u32
    }
}

/// One ring slot's bookkeeping: the WR id and what its completion needs, stored together so
/// a post writes one array entry.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    wr_id: u64,
    meta: SlotMeta,
}

/// Control-segment word 0..8 in memory order: `opmod | wqe_index | opcode` (BE32) then
/// `qpn | ds` (BE32), as one native `u64` (rdma-core `mlx5dv_set_ctrl_seg`).
#[inline(always)]
fn pack_be32s(first: u32, second: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&first.to_be_bytes());
    b[4..].copy_from_slice(&second.to_be_bytes());
    u64::from_ne_bytes(b)
}

/// The send side of a QP.
#[derive(Debug)]
pub(crate) struct SendQueue {
    pub ring: SqRing,
    /// `&dbrec[MLX5_SND_DBR]`.
    dbrec: *mut u32,
    pub db: Doorbell,
    pub pi: u16,
    pub ci: u16,
    mask: u16,
    slots: Box<[Slot]>,
    /// WQEs written since the last doorbell.
    pending: u32,
    /// The last written WQE's first block and size, for the doorbell.
    last_ctrl: *mut u8,
    last_bbs: u32,
    /// Set by the first error CQE: from then on every retired WQE is reported.
    pub error_mode: bool,
}

impl SendQueue {
    /// # Safety
    /// `ring`, `dbrec` (pointing at `dbrec[1]`) and `db.reg` are valid as [`crate::Qp`]'s
    /// constructor requires; `ring.wqe_cnt()` is a power of two no larger than 32768.
    pub unsafe fn new(ring: SqRing, dbrec: *mut u32, db: Doorbell) -> SendQueue {
        let n = ring.wqe_cnt() as usize;
        SendQueue {
            ring,
            dbrec,
            db,
            pi: 0,
            ci: 0,
            mask: (n - 1) as u16,
            slots: vec![Slot::default(); n].into_boxed_slice(),
            pending: 0,
            last_ctrl: ring.start(),
            last_bbs: 0,
            error_mode: false,
        }
    }

    /// Blocks in flight (posted and not retired).
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.pi.wrapping_sub(self.ci) as u32
    }

    /// Blocks free for new WQEs.
    #[inline(always)]
    pub fn free(&self) -> u32 {
        self.ring.wqe_cnt() - self.outstanding()
    }

    /// The first block of the next WQE.
    #[inline(always)]
    pub fn next_ctrl(&self) -> *mut u8 {
        let slot = (self.pi & self.mask) as usize;
        // SAFETY: slot < wqe_cnt, so the block is inside the ring.
        unsafe { self.ring.start().add(slot * SEND_WQE_BB) }
    }

    /// Write the control segment of the WQE at `ctrl` (which starts at block `pi`) as two
    /// 64-bit stores, byte for byte what `mlx5_wqe::seg::CtrlSeg::new` lays out with
    /// signature 0 (rdma-core `mlx5dv_set_ctrl_seg`): `qpn_shifted` is `qpn << 8`.
    ///
    /// # Safety
    /// `ctrl` is the 64-byte block of producer index `pi` inside the ring.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn write_ctrl(
        ctrl: *mut u8,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qpn_shifted: u32,
        ds: u32,
        fm_ce_se: u8,
        imm_be: u32,
    ) {
        let w0 = pack_be32s(
            (opmod as u32) << 24 | (pi as u32) << 8 | opcode as u32,
            qpn_shifted | ds,
        );
        // Bytes 8..16: signature 0, DCI stream id 0, fm_ce_se, then the immediate as given.
        let w1 = pack_be32s(fm_ce_se as u32, u32::from_be(imm_be));
        let p = ctrl as *mut u64;
        // SAFETY: the caller guarantees the block; it is 64-byte aligned.
        unsafe {
            p.write(w0);
            p.add(1).write(w1);
        }
    }

    /// Record the WQE of `bbs` blocks just written at `pi` (its ctrl segment, with this
    /// `fm_ce_se`, included) and advance past it.
    #[inline(always)]
    pub fn commit(
        &mut self,
        wr_id: u64,
        bbs: u32,
        fm_ce_se: u8,
        atomic_size: u8,
        opcode: WcOpcode,
    ) {
        let pi = self.pi;
        let meta = SlotMeta {
            pi,
            bbs: bbs as u8,
            signaled: fm_ce_se & mlx5_wqe::opcode::CTRL_CE_MASK != 0,
            atomic_size,
            opcode,
        };
        // Slots are < wqe_cnt = the array's length.
        self.slots[(pi & self.mask) as usize] = Slot { wr_id, meta };
        self.pi = pi.wrapping_add(bbs as u16);
    }

    /// Leave the WQE at `ctrl` for the next [`SendQueue::ring_doorbell`].
    #[inline(always)]
    pub fn defer(&mut self, ctrl: *mut u8, bbs: u32) {
        self.last_ctrl = ctrl;
        self.last_bbs = bbs;
        self.pending += 1;
    }

    /// Ring for the one WQE at `ctrl` of `bbs` blocks just committed, when nothing else is
    /// pending (the doorbell of [`SendQueue::ring_doorbell`] with one pending WQE).
    #[inline(always)]
    pub fn ring_one(&mut self, ctrl: *mut u8, bbs: u32) {
        debug_assert_eq!(self.pending, 0);
        self.ring(ctrl, bbs);
    }

    /// Ring the doorbell for every WQE written since the last ring (mlx5-facts §3.3,
    /// rdma-core `post_send_db`): BlueFlame when exactly one WQE of at most `bf.size` bytes
    /// is pending, else the 8-byte doorbell of the last one.
    #[inline(always)]
    pub fn ring_doorbell(&mut self) {
        match self.pending {
            0 => return,
            1 => self.ring(self.last_ctrl, self.last_bbs),
            _ => self.ring(self.last_ctrl, 0),
        }
        self.pending = 0;
    }

    /// The doorbell sequence: store barrier → `dbrec[1] = BE32(pi)` → WC start → a BlueFlame
    /// copy of the `bf_bbs` blocks at `ctrl` when they fit a half (whole 64-byte blocks, the
    /// source wrapping at the ring end; one straight-line block for a one-block WQE), else
    /// (or when `bf_bbs` is 0) the 8-byte doorbell of the ctrl at `ctrl` → flush → toggle
    /// the half.
    #[inline(always)]
    fn ring(&mut self, ctrl: *mut u8, bf_bbs: u32) {
        let pi = self.pi;
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the live SQ doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec, pi as u32) };
        mmio::wc_start();
        let dst = self.db.cur;
        // SAFETY: `cur` is one half of this QP's bfreg (16-byte aligned when `one_bb`: the
        // halves are `size`, a multiple of 64, apart); a BF copy writes at most bf.size
        // bytes there; `ctrl` is a block of the ring and the WQE's blocks are inside the ring
        // (the source wraps at its end).
        unsafe {
            if bf_bbs == 1 && self.db.one_bb {
                mmio::bf_copy_bb(dst, ctrl);
            } else if bf_bbs != 0 && bf_bbs as usize * SEND_WQE_BB <= self.db.size as usize {
                mmio::bf_copy(
                    dst,
                    ctrl,
                    bf_bbs as usize,
                    self.ring.start(),
                    self.ring.end(),
                );
            } else {
                mmio::ring_db64(dst, ctrl);
            }
        }
        mmio::flush_writes();
        self.db.cur = (dst as usize ^ self.db.flip) as *mut u8;
    }

    /// WQEs written but not yet announced by a doorbell.
    #[inline(always)]
    pub fn pending(&self) -> u32 {
        self.pending
    }

    #[inline(always)]
    fn wc(&self, slot: usize, info: &CqeInfo, status: WcStatus, syndrome: u8) -> Wc {
        let Slot { wr_id, meta: m } = self.slots[slot];
        let ok = status == WcStatus::Success;
        // A READ reports the bytes read, an atomic its operand size (non-zero only for the
        // atomic opcodes, set when posting), everything else and every error 0.
        let byte_len = if !ok {
            0
        } else if m.opcode == WcOpcode::RdmaRead {
            info.byte_cnt
        } else {
            m.atomic_size as u32
        };
        Wc {
            wr_id,
            status,
            opcode: m.opcode,
            byte_len,
            qp_num: info.qpn,
            vendor_err: if status == info.status {
                info.vendor_err
            } else {
                0
            },
            syndrome,
            ..Wc::default()
        }
    }

    /// The common case of [`SendQueue::complete`], for a success CQE before any error: retire
    /// every block up to and including the WQE at `wqe_counter` and, when it was signaled,
    /// write its completion to `out`. Returns how many completions were written, or `None`
    /// — having changed nothing — when the CQE needs [`SendQueue::complete`] (the queue is
    /// reporting errors, or the counter names no outstanding WQE).
    #[inline(always)]
    pub fn complete_success(
        &mut self,
        wqe_counter: u16,
        qpn: u32,
        byte_cnt: u32,
        out: &mut Wc,
    ) -> Option<usize> {
        // Unmasked: with `m.pi == wqe_counter` below, a counter this test lets through names
        // the same WQE `complete` would find; any other goes to `complete`.
        let dist = wqe_counter.wrapping_sub(self.ci);
        let slot = (wqe_counter & self.mask) as usize;
        let m = self.slots[slot].meta;
        // No error seen, inside the outstanding range, first block of a WQE.
        if self.error_mode | (dist >= self.pi.wrapping_sub(self.ci)) | (m.pi != wqe_counter) {
            return None;
        }
        let info = CqeInfo {
            qpn,
            status: WcStatus::Success,
            syndrome: 0,
            vendor_err: 0,
            byte_cnt,
        };
        self.ci = wqe_counter.wrapping_add(m.bbs as u16);
        if m.signaled {
            *out = self.wc(slot, &info, WcStatus::Success, 0);
            Some(1)
        } else {
            Some(0)
        }
    }

    /// Account for a requester CQE (REQ or REQ_ERR) naming the WQE at `wqe_counter`.
    ///
    /// - Success: every block up to and including that WQE is retired; the unsignaled WQEs
    ///   before it succeeded and produce no completion (verbs semantics), the WQE itself
    ///   produces one if it was signaled.
    /// - The first error: the failing WQE produces an error completion. If its status is not
    ///   a flush, the WQEs before it had succeeded (completions are in order) and are retired
    ///   silently; if it is a flush (the QP was moved to Error), the WQEs before it may not
    ///   have run, so each gets a `WR_FLUSH_ERR` completion.
    /// - After the first error every retired WQE produces a completion: the named one with the
    ///   CQE's status, any the device skipped with `WR_FLUSH_ERR`.
    pub fn complete(&mut self, wqe_counter: u16, info: &CqeInfo, out: &mut [Wc]) -> Progress {
        let outstanding = self.pi.wrapping_sub(self.ci);
        let dist = wqe_counter.wrapping_sub(self.ci) & self.mask;
        if dist >= outstanding {
            return Progress::Bad("outside the outstanding range");
        }
        let c = self.ci.wrapping_add(dist);
        let cslot = (c & self.mask) as usize;
        if self.slots[cslot].meta.pi != c {
            return Progress::Bad("not the first block of a WQE");
        }
        let failed = info.status != WcStatus::Success;
        if failed && !self.error_mode {
            self.error_mode = true;
            if info.status != WcStatus::WrFlushErr {
                self.ci = c;
            }
        }
        let mut n = 0;
        if self.error_mode {
            while self.ci != c {
                let slot = (self.ci & self.mask) as usize;
                let m = self.slots[slot].meta;
                if m.pi != self.ci || m.bbs == 0 || c.wrapping_sub(self.ci) < m.bbs as u16 {
                    return Progress::Bad("the WQE chain before it is broken");
                }
                if n == out.len() {
                    return Progress::Partial(n);
                }
                out[n] = self.wc(slot, info, WcStatus::WrFlushErr, SYNDROME_WR_FLUSH_ERR);
                n += 1;
                self.ci = self.ci.wrapping_add(m.bbs as u16);
            }
        }
        let m = self.slots[cslot].meta;
        if m.signaled || failed || self.error_mode {
            if n == out.len() {
                self.ci = c;
                return Progress::Partial(n);
            }
            out[n] = self.wc(cslot, info, info.status, info.syndrome);
            n += 1;
        }
        self.ci = c.wrapping_add(m.bbs as u16);
        Progress::Done(n)
    }

    /// Report every outstanding WQE as flushed and retire it (the QP is in Error and the device
    /// will report nothing more). Resumable: returns `Partial` when `out` fills.
    pub fn flush_all(&mut self, qpn: u32, out: &mut [Wc]) -> Progress {
        let info = CqeInfo {
            qpn,
            status: WcStatus::WrFlushErr,
            syndrome: SYNDROME_WR_FLUSH_ERR,
            vendor_err: 0,
            byte_cnt: 0,
        };
        let mut n = 0;
        while self.ci != self.pi {
            let slot = (self.ci & self.mask) as usize;
            let m = self.slots[slot].meta;
            if m.pi != self.ci || m.bbs == 0 {
                return Progress::Bad("the WQE chain is broken");
            }
            if n == out.len() {
                return Progress::Partial(n);
            }
            out[n] = self.wc(slot, &info, WcStatus::WrFlushErr, SYNDROME_WR_FLUSH_ERR);
            n += 1;
            self.ci = self.ci.wrapping_add(m.bbs as u16);
        }
        Progress::Done(n)
    }

    /// The local scatter list of the READ or atomic WQE at `wqe_counter`, read back from the
    /// ring (its blocks are not reused before it is retired), for requester scatter-to-CQE.
    pub fn reply_sges(&self, wqe_counter: u16, out: &mut [DataSeg; 16]) -> usize {
        let ctrl = self.ring.bb(wqe_counter);
        // SAFETY: the ctrl segment is the first 16 bytes of a block inside the ring.
        let ctrl_bytes = unsafe { core::ptr::read(ctrl as *const [u8; 16]) };
        let ds = (ctrl_bytes[7] & 0x3f) as usize;
        let opcode = ctrl_bytes[3];
        let opmod = ctrl_bytes[0];
        // ctrl + raddr, then the atomic operands (rdma-core `_mlx5_post_send` segment order).
        let skip = match opcode {
            mlx5_wqe::OPCODE_RDMA_READ => 2,
            mlx5_wqe::OPCODE_ATOMIC_CS | mlx5_wqe::OPCODE_ATOMIC_FA => 3,
            mlx5_wqe::OPCODE_ATOMIC_MASKED_CS if opmod == mlx5_wqe::OPMOD_EXT_ATOMIC_64 => 4,
            mlx5_wqe::OPCODE_ATOMIC_MASKED_CS | mlx5_wqe::OPCODE_ATOMIC_MASKED_FA => 3,
            _ => return 0,
        };
        let mut n = 0;
        let mut unit = ctrl as usize + skip * 16;
        let ring_end = self.ring.end() as usize;
        if unit >= ring_end {
            unit -= self.ring.bytes();
        }
        for _ in skip..ds.min(skip + out.len()) {
            // SAFETY: `unit` is a 16-byte unit inside the ring (wrapped at its end).
            out[n] = unsafe { core::ptr::read(unit as *const DataSeg) };
            n += 1;
            unit += 16;
            if unit == ring_end {
                unit = self.ring.start() as usize;
            }
        }
        n
    }

    /// Forget everything (the QP went to Reset): rdma-core `mlx5_init_qp_indices` and the
    /// zeroed `db[MLX5_SND_DBR]` of `mlx5_modify_qp`.
    pub fn reset(&mut self) {
        self.pi = 0;
        self.ci = 0;
        self.pending = 0;
        self.last_bbs = 0;
        self.error_mode = false;
        // SAFETY: `dbrec` is the live SQ doorbell record.
        unsafe { mmio::write_dbrec(self.dbrec, 0) };
    }
}
