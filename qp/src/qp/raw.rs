//! Caller-built WQEs (rdma-core `mlx5dv_wr_raw_wqe`).

use super::*;

impl Qp {
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
        self.sq.defer(ctrl);
        Ok(())
    }
}
