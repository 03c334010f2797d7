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
    pub reg: *mut u8,
    /// Half size (`bf.size`), 0 when only 8-byte doorbells may be used.
    pub size: u32,
    /// Which half the next write goes to (0 or `size`).
    pub offset: u32,
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
    wr_id: Box<[u64]>,
    meta: Box<[SlotMeta]>,
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
            wr_id: vec![0; n].into_boxed_slice(),
            meta: vec![SlotMeta::default(); n].into_boxed_slice(),
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

    /// Record a WQE just written at `pi` and advance past it.
    #[inline(always)]
    pub fn commit(&mut self, wr_id: u64, meta: SlotMeta) {
        let slot = (self.pi & self.mask) as usize;
        self.last_ctrl = self.ring.bb(self.pi);
        self.last_bbs = meta.bbs as u32;
        // Slots are < wqe_cnt = the arrays' length.
        self.wr_id[slot] = wr_id;
        self.meta[slot] = meta;
        self.pi = self.pi.wrapping_add(meta.bbs as u16);
        self.pending += 1;
    }

    /// Ring the doorbell for every WQE written since the last ring (mlx5-facts §3.3,
    /// rdma-core `post_send_db`): store barrier → `dbrec[1] = BE32(pi)` → WC start → one
    /// BlueFlame copy of the WQE when it is the only one and fits a half (whole 64-byte blocks,
    /// source wrapping at the ring end), else the 8-byte doorbell of the last WQE's ctrl →
    /// flush → toggle the half.
    #[inline(always)]
    pub fn ring_doorbell(&mut self) {
        if self.pending == 0 {
            return;
        }
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the live SQ doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec, self.pi as u32) };
        mmio::wc_start();
        // SAFETY: `reg + offset` is inside this QP's bfreg (offset is 0 or bf.size); the BF
        // copy writes at most bf.size bytes there; `last_ctrl` is a block of the ring and the
        // WQE's blocks are inside the ring (the source wraps at its end).
        unsafe {
            let dst = self.db.reg.add(self.db.offset as usize);
            if self.pending == 1 && self.last_bbs as usize * SEND_WQE_BB <= self.db.size as usize {
                mmio::bf_copy(
                    dst,
                    self.last_ctrl,
                    self.last_bbs as usize,
                    self.ring.start(),
                    self.ring.end(),
                );
            } else {
                mmio::ring_db64(dst, self.last_ctrl);
            }
        }
        mmio::flush_writes();
        self.db.offset ^= self.db.size;
        self.pending = 0;
    }

    /// WQEs written but not yet announced by a doorbell.
    #[inline(always)]
    pub fn pending(&self) -> u32 {
        self.pending
    }

    fn wc(&self, slot: usize, info: &CqeInfo, status: WcStatus, syndrome: u8) -> Wc {
        let m = self.meta[slot];
        let ok = status == WcStatus::Success;
        let byte_len = match m.opcode {
            WcOpcode::RdmaRead if ok => info.byte_cnt,
            WcOpcode::CompSwap
            | WcOpcode::FetchAdd
            | WcOpcode::MaskedCompSwap
            | WcOpcode::MaskedFetchAdd
                if ok =>
            {
                m.atomic_size as u32
            }
            _ => 0,
        };
        Wc {
            wr_id: self.wr_id[slot],
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
        if self.meta[cslot].pi != c {
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
                let m = self.meta[slot];
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
        let m = self.meta[cslot];
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
            let m = self.meta[slot];
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
