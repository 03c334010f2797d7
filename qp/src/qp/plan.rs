//! The generic post: every check of a [`SendWr`] (the plan), then its WQE written segment by
//! segment into the ring.

use super::*;

/// Test builds only: how many WRs this thread sent to the generic post, so that the unit tests
/// can say which path a post took (both write the same bytes).
#[cfg(test)]
pub(crate) mod planned {
    use std::cell::Cell;

    thread_local! {
        static PLANNED: Cell<u64> = const { Cell::new(0) };
    }

    /// One more WR planned.
    pub fn one() {
        PLANNED.with(|c| c.set(c.get() + 1));
    }

    /// WRs planned on this thread so far.
    pub fn count() -> u64 {
        PLANNED.with(Cell::get)
    }
}

/// Atomic operands as they go into the WQE.
#[derive(Clone, Copy)]
pub(super) enum AtomicOperands {
    None,
    Std(AtomicSeg),
    MaskedCs32(MaskedCs32Seg),
    MaskedCs64(MaskedCs64Seg),
    MaskedFa32(MaskedFa32Seg),
    MaskedFa64(MaskedFa64Seg),
}

/// Everything about a WQE decided before a byte is written.
pub(super) struct Plan<'a> {
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

/// `fm_ce_se` for each combination of [`SendFlags`] bits (rdma-core `_mlx5_post_send`:
/// `IBV_SEND_SIGNALED` → `MLX5_WQE_CTRL_CQ_UPDATE`, `IBV_SEND_FENCE` → `MLX5_WQE_CTRL_FENCE`,
/// `IBV_SEND_SOLICITED` → `MLX5_WQE_CTRL_SOLICITED`).
pub(super) const FM_CE_SE: [u8; 8] = {
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

/// The DCI stream of a WQE into bytes 9–10 of its ctrl segment (BE16,
/// `dci_stream_channel_id`; rdma-core `mlx5_send_wr_set_dc_addr_stream`), once [`Qp::seal`]
/// wrote the segment (it writes bytes 8–15 whole, the stream 0).
///
/// # Safety
/// `ctrl` is the first block of a WQE being written.
#[inline(always)]
unsafe fn write_dci_stream(ctrl: *mut u8, stream: u16) {
    // SAFETY: bytes 9 and 10 of the WQE's first block (the caller's contract).
    unsafe { core::ptr::copy_nonoverlapping(stream.to_be_bytes().as_ptr(), ctrl.add(9), 2) };
}

impl Qp {
    /// Sends are accepted in RTS and SQD, and in SQE and Error, where the device flushes them
    /// ([`Qp::post`], **States**); Reset, Init and RTR refuse them.
    #[inline(always)]
    pub(super) fn check_send_state(&self) -> Result<()> {
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Error => Ok(()),
            _ => Err(Error::WrongState {
                op: "post a send",
                state: self.state,
                hint: "sends may be posted from RTS on (IBTA Vol. 1 §10.3.1: Reset, Init and \
                       RTR refuse send work requests with an immediate error); move the QP to \
                       RTS first (and report it with Qp::set_state)",
            }),
        }
    }

    #[inline(always)]
    pub(super) fn plan<'a>(&self, wr: &SendWr<'a>) -> Result<Plan<'a>> {
        #[cfg(test)]
        planned::one();
        self.check_send_state()?;
        let op = &wr.op;
        let rc_only = !matches!(op, SendOp::Send | SendOp::SendImm { .. });
        match self.qp_type {
            // A DCI carries every RC operation (rdma-core `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI`).
            QpType::Rc | QpType::XrcSend | QpType::Dci => {}
            QpType::XrcRecv => return Err(crate::xrc::no_send_queue(op.name())),
            QpType::Dct => return Err(crate::dc::no_send_queue(op.name())),
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
            _ => {
                return Err(Error::OpNotSupported {
                    op: op.name(),
                    qp_type: self.qp_type,
                })
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
        } + crate::xrc::seg_bytes(self.qp_type, wr.xrc)?
            + crate::dc::seg_bytes(self.qp_type, wr.dc)?;
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
    pub(super) fn inline_bytes(&self, wr: &SendWr<'_>, len: usize) -> Result<usize> {
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
    pub(super) fn fm_ce_se(&self, flags: SendFlags) -> u8 {
        FM_CE_SE[(flags.bits() & 7) as usize] | self.sig_all_ce
    }

    /// Write the ctrl segment of the WQE at `ctrl` (the block of the producer index) and
    /// record the WQE: shared by [`Qp::post`] and the lean entry points.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn seal(
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
    pub(super) fn check_room(&self, bbs: u32) -> Result<()> {
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
    pub(super) fn write(&mut self, wr: &SendWr<'_>, plan: &Plan<'_>) -> Result<(*mut u8, u32)> {
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
        if let Some(d) = wr.dc {
            w.push(d.av()).map_err(too_large)?;
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
        if let Some(d) = wr.dc {
            // After `seal`, which writes bytes 8..16 whole; before the doorbell, which the
            // caller rings.
            // SAFETY: `ctrl` is the WQE's first block, reserved by `check_room`.
            unsafe { write_dci_stream(ctrl, d.stream_id()) };
        }
        Ok((ctrl, bbs))
    }
}
