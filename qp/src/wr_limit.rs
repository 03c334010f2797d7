//! How many send WRs a QP may have outstanding: rdma-core's `sq.max_post`, recomputed from the
//! layout the way the provider computes it when it creates the QP, so that a CQ sized for
//! `max_send_wr + max_recv_wr` completions (the usual verbs sizing) can never overrun.
//!
//! rdma-core (`providers/mlx5/verbs.c`): `mlx5_calc_send_wqe` sizes the largest WQE the caps
//! need — `sq_overhead(qp_type)`, plus `max_send_sge` data segments of 16 bytes or
//! `align16(4 + max_inline_data)` of inline segment (whichever is larger), rounded up to a
//! 64-byte basic block — and `mlx5_calc_sq_size` sets `wq_size = roundup_pow2(max_send_wr ×
//! wqe_size)`, `sq.wqe_cnt = wq_size / 64` and `sq.max_post = wq_size / wqe_size`, which it
//! also reports back as `cap.max_send_wr`. `mlx5_wq_overflow` (`providers/mlx5/qp.c`) then
//! refuses a post when `head − tail + nreq ≥ max_post` (`docs/sources.md` §4, "Flow control"). The
//! ring is therefore never the limit for WRs within the caps: `max_post` WQEs of the largest
//! size fill it at most.

use mlx5_hw::QpType;
use mlx5_wqe::SEND_WQE_BB;

/// `sizeof(struct mlx5_wqe_data_seg)`.
const DATA_SEG: u32 = 16;
/// `sizeof(struct mlx5_wqe_inl_data_seg)`, the inline segment's header.
const INL_HDR: u32 = 4;

/// Bytes of a send WQE a QP type always reserves for fixed segments (rdma-core `verbs.c`
/// `sq_overhead`): RC: ctrl + max(raddr + atomic, memory-window bind); UC: ctrl + max(raddr,
/// bind); UD: ctrl + datagram segment; a DCI: RC's and the datagram segment. A bind is `mlx5_wqe_umr_ctrl_seg` (48) + `mlx5_wqe_mkey_context_seg`
/// (64) + max(`mlx5_wqe_umr_klm_seg` (16), 64).
pub(crate) fn sq_overhead(qp_type: QpType) -> u32 {
    let mw_bind = 48 + 64 + 64;
    match qp_type {
        QpType::Rc => 16 + (16 + 16u32).max(mw_bind),
        QpType::Uc => 16 + 16u32.max(mw_bind),
        QpType::Ud => 16 + 48,
        // RC's operations plus the XRC segment (`_sq_overhead`, case IBV_QPT_XRC_SEND).
        QpType::XrcSend | QpType::XrcRecv => 16 + (16 + 16u32).max(mw_bind) + 16,
        // RC's operations plus the datagram segment (`_sq_overhead`, case IBV_QPT_DRIVER for
        // a DCI, which falls through to UD's `sizeof(struct mlx5_wqe_datagram_seg)`). A DCT
        // has no send queue; a type this crate does not know gets the largest overhead, so
        // that `max_post` never overstates.
        _ => 16 + (16 + 16u32).max(mw_bind) + 48,
    }
}

/// Bytes of the largest send WQE the caps need, a multiple of 64 (rdma-core `verbs.c`
/// `mlx5_calc_send_wqe`; no TSO header, which this data path does not post).
pub(crate) fn send_wqe_size(qp_type: QpType, max_inline_data: u32, max_send_sge: u32) -> u64 {
    let overhead = sq_overhead(qp_type) as u64;
    let inl = if max_inline_data > 0 {
        overhead + (INL_HDR as u64 + max_inline_data as u64).next_multiple_of(16)
    } else {
        0
    };
    let sge = overhead + max_send_sge as u64 * DATA_SEG as u64;
    sge.max(inl).next_multiple_of(SEND_WQE_BB as u64)
}

/// The send WRs a QP whose ring holds `wqe_cnt` basic blocks may have outstanding: the ring's
/// bytes over the largest WQE's (rdma-core `mlx5_calc_sq_size`: `max_post = wq_size /
/// wqe_size`). A layout whose ring is smaller than one such WQE (rdma-core never creates one)
/// gets 1. 0 only for an empty ring.
pub(crate) fn max_post(
    qp_type: QpType,
    wqe_cnt: u32,
    max_inline_data: u32,
    max_send_sge: u32,
) -> u32 {
    let ring = wqe_cnt as u64 * SEND_WQE_BB as u64;
    if ring == 0 {
        return 0;
    }
    let wqe = send_wqe_size(qp_type, max_inline_data, max_send_sge).min(ring);
    (ring / wqe) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rdma_core_arithmetic() {
        // RC, 1 SGE, no inline: 192 + 16 = 208 -> 256 bytes; 128 WRs -> 512 blocks.
        assert_eq!(send_wqe_size(QpType::Rc, 0, 1), 256);
        assert_eq!(max_post(QpType::Rc, 512, 60, 1), 128);
        // Inline 220 drives the size: 192 + align16(224) = 416 -> 448; 1024 blocks -> 146.
        assert_eq!(send_wqe_size(QpType::Rc, 220, 4), 448);
        assert_eq!(max_post(QpType::Rc, 1024, 220, 4), 146);
        // UD: ctrl + datagram = 64, + 1 SGE -> 128 bytes.
        assert_eq!(send_wqe_size(QpType::Ud, 0, 1), 128);
        assert_eq!(max_post(QpType::Ud, 64, 0, 1), 32);
        // UC: 16 + 176 = 192 + 2 SGEs = 224 -> 256.
        assert_eq!(send_wqe_size(QpType::Uc, 0, 2), 256);
        // A ring smaller than one WQE still takes one WR; an empty one none.
        assert_eq!(max_post(QpType::Rc, 1, 0, 1), 1);
        assert_eq!(max_post(QpType::Rc, 0, 0, 1), 0);
        // Absurd caps do not overflow.
        assert_eq!(max_post(QpType::Rc, 4, u32::MAX, u32::MAX), 1);
    }
}
