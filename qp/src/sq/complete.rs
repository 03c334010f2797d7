//! Completing the send queue: what a CQE's `wqe_counter` retires (the WQE it names and the
//! unsignaled ones before it), the completions that produces, the lean polls' views and
//! retires, and the error period's flushes.

use super::{bump_key, meta, CqeInfo, Progress, SendQueue};
use crate::queue::{Window, WorkQueue};
use crate::wc::{Wc, WcFields, WcFlags, WcOpcode, WcStatus};
use mlx5_cq::SYNDROME_WR_FLUSH_ERR;
use mlx5_hw::mmio;
use mlx5_wqe::seg::DataSeg;
use mlx5_wqe::SEND_WQE_BB;

impl SendQueue {
    /// The meta byte of `slot`.
    #[inline(always)]
    pub(super) fn meta_at(&self, slot: usize) -> u8 {
        debug_assert!(slot < self.meta.len());
        // SAFETY: every caller passes `x & mask` < wqe_cnt, the array's length.
        unsafe { *self.meta.get_unchecked(slot) }
    }

    /// The WR id of `slot`.
    #[inline(always)]
    fn wr_id_at(&self, slot: usize) -> u64 {
        debug_assert!(slot < self.wr_ids.len());
        // SAFETY: as for `meta_at`.
        unsafe { *self.wr_ids.get_unchecked(slot) }
    }

    /// The `MLX5_OPCODE_*` of the WQE whose ctrl segment is at block `slot`: byte 3 of the
    /// ctrl segment, which stays in the ring until the WQE is retired. The opcode of a
    /// completion no CQE of its own names (a WQE flushed under another's CQE); a CQE's own
    /// WQE completes with the opcode the CQE names ([`CqeInfo::send_opcode`]), as on the lean
    /// paths, so that every path makes the same completion of a CQE.
    #[inline(always)]
    fn ring_opcode(&self, slot: usize) -> u8 {
        // SAFETY: `slot` < wqe_cnt: byte 3 of a block inside the ring.
        unsafe { *self.ring.start().add(slot * SEND_WQE_BB + 3) }
    }

    /// The completion of the WQE at block `slot` with `status` (and `syndrome`): opcode and
    /// flags from the `MLX5_OPCODE_*` `op`, the QPN, vendor syndrome and byte count from
    /// `info`.
    #[inline(always)]
    fn wc(&self, slot: usize, op: u8, info: &CqeInfo, status: WcStatus, syndrome: u8) -> Wc {
        let (opcode, flags) = completion_opcode(op);
        let ok = status == WcStatus::Success;
        // A READ reports the bytes read, an atomic its operand size (non-zero only for the
        // atomic opcodes, set when posting), everything else and every error 0.
        let byte_len = if !ok {
            0
        } else if opcode == WcOpcode::RdmaRead {
            info.byte_cnt
        } else {
            meta::atomic_size(self.meta_at(slot)) as u32
        };
        Wc::new(&WcFields {
            wr_id: self.wr_id_at(slot),
            status,
            opcode,
            // rdma-core's `mlx5_parse_cqe` clears the flags of an error completion.
            flags: if ok { flags } else { WcFlags::empty() },
            byte_len,
            qp_num: info.qpn,
            vendor_err: if status == info.status {
                info.vendor_err
            } else {
                0
            },
            syndrome,
            ..WcFields::default()
        })
    }

    /// Retire the WQE at block `ci` (slot `slot`, `bbs` blocks): clear its meta byte, move
    /// past it.
    #[inline(always)]
    fn retire_one(&mut self, slot: usize, bbs: u16) {
        if self.meta_at(slot) != 0 {
            self.uncommon -= 1;
            self.extra -= bbs as u32 - 1;
        }
        debug_assert!(slot < self.meta.len());
        // SAFETY: as for `meta_at`.
        unsafe { *self.meta.get_unchecked_mut(slot) = 0 };
        self.ci += bbs as u64;
        self.sync_key();
    }

    /// Retire, without completions, every WQE from `ci` up to (not including) block `c`,
    /// a WQE start ([`SendQueue::starts_wqe`]).
    fn retire_until(&mut self, c: u64) {
        if self.uncommon == 0 {
            // One block each, no byte to clear.
            self.ci = c;
            self.sync_key();
            return;
        }
        while self.ci != c {
            let slot = self.slot(self.ci);
            let bbs = meta::bbs(self.meta_at(slot));
            self.retire_one(slot, bbs);
        }
    }

    /// Whether block `c`, inside the outstanding range, is where an outstanding WQE starts:
    /// follow the WQEs from `ci`.
    fn starts_wqe(&self, c: u64) -> bool {
        if self.uncommon == 0 {
            // Every outstanding WQE is one block: every outstanding block starts one.
            return true;
        }
        let mut w = self.ci;
        while w != c {
            let bbs = meta::bbs(self.meta_at(self.slot(w)));
            if c - w < bbs as u64 {
                return false;
            }
            w += bbs as u64;
        }
        true
    }

    /// The common case of [`SendQueue::complete`], for a success CQE that names the oldest
    /// outstanding WQE, one block, not an atomic: retire it and write its completion to `out`,
    /// with the opcode the CQE names (`send_opcode`, [`CqeInfo::send_opcode`]). Returns false —
    /// having changed nothing — for anything else, which [`SendQueue::complete`] handles.
    #[inline(always)]
    pub fn complete_success(
        &mut self,
        wqe_counter: u16,
        send_opcode: u8,
        qpn: u32,
        byte_cnt: u32,
        out: &mut Wc,
    ) -> bool {
        let ci = self.ci;
        let slot = self.slot(ci);
        // After an error the full path reports every retired WQE; for this CQE that is this
        // one completion (nothing lies before the oldest WQE), so an error period is no reason
        // to leave.
        if (wqe_counter != ci as u16) | (ci == self.pi) | (self.meta_at(slot) != 0) {
            return false;
        }
        let (opcode, flags) = completion_opcode(send_opcode);
        *out = Wc::new(&WcFields {
            wr_id: self.wr_id_at(slot),
            opcode,
            flags,
            byte_len: if opcode == WcOpcode::RdmaRead {
                byte_cnt
            } else {
                0
            },
            qp_num: qpn,
            ..WcFields::default()
        });
        self.retired(1);
        // The full path: undo a spurious shut of `key` (a wrap of `ci`'s low bits).
        self.sync_key();
        true
    }

    /// Whether `pi` and the key's copy of `ci` agree in their low 16 bits ([`crate::Qp`]'s
    /// `sq_seems_idle`).
    #[inline(always)]
    pub fn seems_idle(&self) -> bool {
        self.key as u16 == self.pi as u16
    }

    /// Where the outstanding WQEs start: the window of a run ([`WorkQueue::window`]) and of
    /// the lean poll of [`crate::Cq::poll_send`], which reads the meta bytes too. After an
    /// error the full path reports every retired WQE, but for a success CQE naming the oldest
    /// outstanding WQE that is exactly the one completion a run reports.
    #[inline(always)]
    pub fn view(&self) -> Window {
        self.debug_check();
        Window {
            oldest: self.ci as u16,
            outstanding: (self.pi - self.ci) as u16,
            mask: self.mask as u16,
            wr_ids: self.wr_ids.as_ptr(),
            meta: self.meta.as_ptr(),
        }
    }

    /// Whether every outstanding WQE has meta byte 0.
    #[inline(always)]
    pub fn all_common(&self) -> bool {
        self.uncommon == 0
    }

    /// Account for a requester CQE (REQ or REQ_ERR) naming the WQE at `wqe_counter`.
    ///
    /// - Success: every block up to and including that WQE is retired; the unsignaled WQEs
    ///   before it succeeded and produce no completion (verbs semantics), the WQE itself
    ///   produces one (a device writes a CQE only for a signaled WQE; rdma-core reports
    ///   every CQE it polls).
    /// - The first error: the failing WQE produces an error completion. If its status is not
    ///   a flush, the WQEs before it had succeeded (completions are in order) and are retired
    ///   silently; if it is a flush (the QP was moved to Error), the WQEs before it may not
    ///   have run, so each gets a `WR_FLUSH_ERR` completion.
    /// - After the first error every retired WQE produces a completion: the named one with the
    ///   CQE's status, any the device skipped with `WR_FLUSH_ERR` — those posted before a
    ///   recovery from SQE to RTS ([`SendQueue::recovered`]); from then on WQEs complete as
    ///   before the error.
    pub fn complete(&mut self, wqe_counter: u16, info: &CqeInfo, out: &mut [Wc]) -> Progress {
        let p = self.complete_inner(wqe_counter, info, out);
        self.refresh_gate();
        p
    }

    fn complete_inner(&mut self, wqe_counter: u16, info: &CqeInfo, out: &mut [Wc]) -> Progress {
        let outstanding = self.pi - self.ci;
        let dist = (wqe_counter.wrapping_sub(self.ci as u16) as u64) & self.mask;
        if dist >= outstanding {
            return Progress::Bad("outside the outstanding range");
        }
        let c = self.ci + dist;
        if !self.starts_wqe(c) {
            return Progress::Bad("not the first block of a WQE");
        }
        let failed = info.status != WcStatus::Success;
        if failed && !self.flushing() {
            self.begin_error(self.before_recovery());
            if info.status != WcStatus::WrFlushErr {
                self.retire_until(c);
            }
        }
        let mut n = 0;
        if self.flushing() {
            // WQEs posted after a recovery (from `error_end`) and before `c` were unsignaled
            // and succeeded: `retire_until` below retires them silently.
            while self.ci != c && self.ci < self.error_end {
                let slot = self.slot(self.ci);
                let bbs = meta::bbs(self.meta_at(slot));
                if n == out.len() {
                    return Progress::Partial(n);
                }
                let op = self.ring_opcode(slot);
                out[n] = self.wc(slot, op, info, WcStatus::WrFlushErr, SYNDROME_WR_FLUSH_ERR);
                n += 1;
                self.retire_one(slot, bbs);
            }
        }
        let cslot = self.slot(c);
        let m = self.meta_at(cslot);
        if n == out.len() {
            self.retire_until(c);
            return Progress::Partial(n);
        }
        out[n] = self.wc(cslot, info.send_opcode, info, info.status, info.syndrome);
        n += 1;
        self.retire_until(c);
        self.retire_one(cslot, meta::bbs(m));
        Progress::Done(n)
    }

    /// The first error completion of an error period: from now on every retired WQE is
    /// reported (until [`SendQueue::recovered`] ends the period).
    ///
    /// `old`: the oldest outstanding WQE was posted before the last recovery
    /// ([`SendQueue::before_recovery`], asked before the error CQE retired anything): the
    /// control path recovered the QP before its error CQE was polled, and the period ends
    /// where that recovery put it.
    pub fn begin_error(&mut self, old: bool) {
        self.error_end = if old { self.recovered_at } else { u64::MAX };
    }

    /// Whether the oldest outstanding WQE was posted before the last recovery from SQE.
    #[inline(always)]
    pub fn before_recovery(&self) -> bool {
        self.ci < self.recovered_at
    }

    /// Whether an error period is on: every retired WQE is reported (what the flush fast
    /// paths need to retire a flush as the full path would).
    #[inline(always)]
    pub fn flushing(&self) -> bool {
        self.ci < self.error_end
    }

    /// The control path moved the QP from SQE back to RTS: the WQEs outstanding now belong to
    /// the error period (the device flushed them), those posted from now on complete as
    /// before the error (IBTA Vol. 1 §10.3, the Send Queue Error state).
    pub fn recovered(&mut self) {
        self.recovered_at = self.pi;
        if self.error_end == u64::MAX {
            self.error_end = self.pi;
        }
    }

    /// Whether an error CQE naming block `wqe_counter` belongs to an error period the QP was
    /// recovered from ([`SendQueue::recovered`]): it names a WQE posted before the recovery,
    /// which the device flushed then. Such a CQE moves the QP nowhere.
    pub fn error_of_recovered_period(&self, wqe_counter: u16) -> bool {
        let dist = (wqe_counter.wrapping_sub(self.ci as u16) as u64) & self.mask;
        self.ci + dist < self.recovered_at
    }

    /// Report every outstanding WQE as flushed and retire it (the QP is in Error and the device
    /// will report nothing more). Resumable: returns `Partial` when `out` fills.
    pub fn flush_all(&mut self, qpn: u32, out: &mut [Wc]) -> Progress {
        let info = CqeInfo {
            qpn,
            // No CQE: every completion takes its WQE's opcode from the ring.
            send_opcode: 0,
            status: WcStatus::WrFlushErr,
            syndrome: SYNDROME_WR_FLUSH_ERR,
            vendor_err: 0,
            byte_cnt: 0,
        };
        let mut n = 0;
        let mut p = Progress::Done(0);
        while self.ci != self.pi {
            let slot = self.slot(self.ci);
            let bbs = meta::bbs(self.meta_at(slot));
            if self.pi - self.ci < bbs as u64 {
                p = Progress::Bad("the WQE chain is broken");
                break;
            }
            if n == out.len() {
                p = Progress::Partial(n);
                break;
            }
            let op = self.ring_opcode(slot);
            out[n] = self.wc(slot, op, &info, WcStatus::WrFlushErr, SYNDROME_WR_FLUSH_ERR);
            n += 1;
            self.retire_one(slot, bbs);
        }
        if let Progress::Done(_) = p {
            p = Progress::Done(n);
        }
        self.refresh_gate();
        p
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
        self.batch_n = 0;
        self.in_batch = false;
        self.error_end = 0;
        self.recovered_at = 0;
        self.meta.fill(0);
        self.uncommon = 0;
        self.extra = 0;
        self.sync_key();
        self.refresh_gate();
        // SAFETY: `dbrec` is the live SQ doorbell record.
        unsafe { mmio::write_dbrec(self.dbrec, 0) };
    }
}

/// A send completion's opcode and flags (the immediate an `_IMM` opcode carries) from the
/// `MLX5_OPCODE_*` `op` of its WQE.
#[inline(always)]
fn completion_opcode(op: u8) -> (WcOpcode, WcFlags) {
    (WcOpcode::from_send_opcode(op), crate::wc::send_flags(op))
}

/// What a CQE asks of the send queue (`crate::queue`): its counter is the `wqe_index` of the
/// WQE's first block; the oldest outstanding WQE retires alone when every outstanding WQE is of
/// the common shape (`key` says so in the same compare as `ci`'s low bits).
impl WorkQueue for SendQueue {
    /// The one-entry poll's test: whether `wqe_counter` is the oldest outstanding block (the
    /// queue not idle) and every outstanding WQE has meta byte 0 (one block, not an atomic).
    #[inline(always)]
    fn names_oldest(&self, wqe_counter: u16) -> bool {
        // `key` holds `ci`'s low bits and whether all are common: one compare. With
        // `wqe_counter == ci`, `pi`'s low bits equal it only when the queue is idle or holds
        // 65536 blocks: declined either way (the full path decides).
        (wqe_counter as u32 == self.key) & (wqe_counter != self.pi as u16)
    }

    /// Retire the oldest WQE, which [`WorkQueue::names_oldest`] said `wqe_counter` names;
    /// returns its WR id.
    #[inline(always)]
    fn take_oldest(&mut self, wqe_counter: u16) -> u64 {
        debug_assert!(self.names_oldest(wqe_counter));
        // `wqe_counter` is `ci`'s low bits: its slot.
        let slot = (wqe_counter as u64 & self.mask) as usize;
        let wr_id = self.wr_id_at(slot);
        // `retired(1)`, `ci` and the key added to in memory: both were just compared
        // (`ci` by a flush's test of the error period), as `bump_key` says.
        // SAFETY: a reference: valid, aligned, this thread's alone; volatile only so that the
        // load is not replaced by the value it was compared with.
        self.ci = unsafe { core::ptr::read_volatile(&self.ci) } + 1;
        self.fast += 1;
        self.other += 1;
        bump_key(&mut self.key);
        wr_id
    }

    /// [`SendQueue::view`]: the send queue always has a window.
    #[inline(always)]
    fn window(&self) -> Option<Window> {
        Some(self.view())
    }

    /// The lean poll retired `k` one-block WQEs from `ci` on (each had meta byte 0, so there
    /// is no byte to clear): the gates move with `ci`. (The struct keeps `fast`, `pi`, `ci`,
    /// `mask`, `other` in that order: no two of the counters added here are adjacent, so
    /// LLVM adds each in memory rather than a pair in a vector register, four instructions.)
    #[inline(always)]
    fn retired(&mut self, k: u16) {
        self.ci += k as u64;
        self.fast += k as u64;
        self.other += k as u64;
        self.key = self.key.wrapping_add(k as u32);
    }
}
