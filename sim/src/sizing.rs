//! Queue geometry, computed the way rdma-core's mlx5 provider computes it, so that the rings the
//! software ConnectX hands out have the sizes a ConnectX QP created through libmlx5 would have.
//!
//! Sources (rdma-core `providers/mlx5/verbs.c`): `sq_overhead`, `mlx5_calc_send_wqe`,
//! `mlx5_calc_sq_size` (SQ in 64-byte basic blocks, `max_inline_data = wqe_size − overhead − 4`),
//! `mlx5_calc_rcv_wqe` / `mlx5_calc_rq_size` (RQ stride = roundup_pow2(max_recv_sge × 16), at
//! least one 64-byte block in total), `mlx5_calc_wq_size` (RQ at offset 0, SQ after it);
//! `providers/mlx5/srq.c` `mlx5_alloc_srq_buf` (SRQ stride = roundup_pow2(max(32, 16 + 16 ×
//! max_sge)), `max_wr + 1` entries rounded to a power of two); `providers/mlx5/cq.c`
//! (`cqe + 1` entries rounded to a power of two).

use mlx5_hw::{QpCap, QpType};

/// Size of a send basic block.
pub const SEND_WQE_BB: u32 = 64;
/// Size of a data segment (`struct mlx5_wqe_data_seg`).
const DATA_SEG: u32 = 16;
/// Size of the inline segment header (`struct mlx5_wqe_inl_data_seg`).
const INL_HDR: u32 = 4;
/// Largest send WQE the device accepts, `max_sq_desc_sz` (the kernel's ucontext response from
/// cap `max_wqe_sz_sq`). The 6-bit DS field bounds a WQE to 63 × 16 = 1008 bytes anyway.
pub const MAX_SQ_DESC_SZ: u32 = 1024;
/// Largest receive WQE the device accepts, `max_rq_desc_sz`.
pub const MAX_RQ_DESC_SZ: u32 = 512;
/// Largest SQ in basic blocks (`max_send_wqebb`).
pub const MAX_SEND_WQEBB: u32 = 1 << 15;
/// Largest number of WRs per queue.
pub const MAX_QP_WR: u32 = 1 << 14;

/// Why a QP's capabilities cannot be met (rdma-core returns EINVAL for each).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizingError {
    /// More gather entries than fit in the largest WQE.
    #[error(
        "max_send_sge = {sge} exceeds the {max} gather entries a {max_desc}-byte send WQE can hold"
    )]
    TooManySendSge {
        /// Requested.
        sge: u32,
        /// Possible.
        max: u32,
        /// Largest WQE.
        max_desc: u32,
    },
    /// The WQE needed for these capabilities is larger than the device allows.
    #[error("a send WQE for these caps needs {need} bytes; the device allows {max} (lower max_inline_data or max_send_sge)")]
    SendWqeTooLarge {
        /// Bytes needed.
        need: u32,
        /// Bytes allowed.
        max: u32,
    },
    /// A receive WQE for these caps is larger than the device allows.
    #[error("a receive WQE with max_recv_sge = {sge} needs {need} bytes; the device allows {max}")]
    RecvWqeTooLarge {
        /// Requested SGEs.
        sge: u32,
        /// Bytes needed.
        need: u32,
        /// Bytes allowed.
        max: u32,
    },
    /// Too many work requests.
    #[error("{what} = {n} exceeds the device limit of {max}")]
    TooManyWr {
        /// Which attribute.
        what: &'static str,
        /// Requested.
        n: u32,
        /// Allowed.
        max: u32,
    },
}

/// The bytes of a send WQE a QP type always spends on fixed segments (rdma-core
/// `sq_overhead`): RC ctrl + max(raddr + atomic, memory-window bind), UC ctrl + max(raddr,
/// bind), UD ctrl + datagram (AV) segment. The bind size is umr_ctrl (48) + mkey context (64) +
/// max(klm (16), 64).
pub fn sq_overhead(qp_type: QpType) -> u32 {
    let mw_bind = 48 + 64 + 64;
    match qp_type {
        QpType::Rc => 16 + (16 + 16u32).max(mw_bind),
        QpType::Uc => 16 + 16u32.max(mw_bind),
        QpType::Ud => 16 + 48,
        // RC's operations plus the XRC segment (rdma-core `_sq_overhead`, IBV_QPT_XRC_SEND).
        QpType::XrcSend | QpType::XrcRecv => 16 + (16 + 16u32).max(mw_bind) + 16,
        // RC's operations plus the datagram segment (`_sq_overhead`, a DCI falls through to
        // UD's); a DCT has no send queue, and an unknown type gets the largest.
        _ => 16 + (16 + 16u32).max(mw_bind) + 48,
    }
}

/// Geometry of a QP's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpGeometry {
    /// SQ basic blocks (0 if `max_send_wr` is 0).
    pub sq_wqe_cnt: u32,
    /// Bytes of the largest WQE the caps need, a multiple of 64 (`mlx5_calc_send_wqe`).
    pub sq_wqe_size: u32,
    /// RQ entries (0 with an SRQ or `max_recv_wr` 0).
    pub rq_wqe_cnt: u32,
    /// RQ stride.
    pub rq_stride: u32,
    /// Offset of the SQ in the buffer (= RQ bytes).
    pub sq_offset: u32,
    /// Total buffer bytes.
    pub buf_size: u32,
    /// Granted capabilities (what `ibv_create_qp` writes back).
    pub cap: QpCap,
}

fn round_pow2(v: u32) -> u32 {
    v.max(1).next_power_of_two()
}

/// Compute a QP's geometry like `mlx5_calc_wq_size`.
pub fn qp_geometry(qp_type: QpType, cap: &QpCap, srq: bool) -> Result<QpGeometry, SizingError> {
    let mut granted = *cap;
    // SQ: mlx5_calc_send_wqe + mlx5_calc_sq_size.
    let overhead = sq_overhead(qp_type);
    let (sq_wqe_cnt, sq_wqe_size, sq_bytes) = if cap.max_send_wr == 0 {
        granted.max_inline_data = 0;
        (0, 0, 0)
    } else {
        if cap.max_send_wr > MAX_QP_WR {
            return Err(SizingError::TooManyWr {
                what: "max_send_wr",
                n: cap.max_send_wr,
                max: MAX_QP_WR,
            });
        }
        let inl = if cap.max_inline_data > 0 {
            // Saturating: a huge request must end in `SendWqeTooLarge` below, not overflow.
            INL_HDR
                .saturating_add(cap.max_inline_data)
                .div_ceil(16)
                .saturating_mul(16)
                .saturating_add(overhead)
        } else {
            0
        };
        let max_gather = (MAX_SQ_DESC_SZ - overhead) / DATA_SEG;
        if cap.max_send_sge > max_gather {
            return Err(SizingError::TooManySendSge {
                sge: cap.max_send_sge,
                max: max_gather,
                max_desc: MAX_SQ_DESC_SZ,
            });
        }
        let tot = (overhead + cap.max_send_sge * DATA_SEG).max(inl);
        if tot > MAX_SQ_DESC_SZ {
            return Err(SizingError::SendWqeTooLarge {
                need: tot,
                max: MAX_SQ_DESC_SZ,
            });
        }
        let wqe_size = tot.div_ceil(SEND_WQE_BB) * SEND_WQE_BB;
        granted.max_inline_data = wqe_size - overhead - INL_HDR;
        let wq = round_pow2(cap.max_send_wr * wqe_size);
        let cnt = wq / SEND_WQE_BB;
        if cnt > MAX_SEND_WQEBB {
            return Err(SizingError::TooManyWr {
                what: "max_send_wr",
                n: cap.max_send_wr,
                max: MAX_SEND_WQEBB * SEND_WQE_BB / wqe_size,
            });
        }
        granted.max_send_wr = wq / wqe_size;
        (cnt, wqe_size, wq)
    };
    // RQ: mlx5_calc_rcv_wqe + mlx5_calc_rq_size.
    let (rq_wqe_cnt, rq_stride, rq_bytes) = if srq || cap.max_recv_wr == 0 {
        granted.max_recv_wr = 0;
        granted.max_recv_sge = 0;
        (0, 0, 0)
    } else {
        if cap.max_recv_wr > MAX_QP_WR {
            return Err(SizingError::TooManyWr {
                what: "max_recv_wr",
                n: cap.max_recv_wr,
                max: MAX_QP_WR,
            });
        }
        let need = cap.max_recv_sge.max(1).saturating_mul(DATA_SEG);
        if need > MAX_RQ_DESC_SZ {
            return Err(SizingError::RecvWqeTooLarge {
                sge: cap.max_recv_sge,
                need,
                max: MAX_RQ_DESC_SZ,
            });
        }
        let stride = round_pow2(need);
        let wq = (round_pow2(cap.max_recv_wr) * stride).max(SEND_WQE_BB);
        let cnt = wq / stride;
        granted.max_recv_wr = cnt;
        granted.max_recv_sge = stride / DATA_SEG;
        (cnt, stride, wq)
    };
    Ok(QpGeometry {
        sq_wqe_cnt,
        sq_wqe_size,
        rq_wqe_cnt,
        rq_stride,
        sq_offset: rq_bytes,
        buf_size: rq_bytes + sq_bytes,
        cap: granted,
    })
}

/// Geometry of an SRQ (`mlx5_alloc_srq_buf`, classic linked list without the v48 wait queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqGeometry {
    /// WQEs in the buffer (a power of two); the free list holds `wqe_cnt − 1` postable entries.
    pub wqe_cnt: u32,
    /// Bytes per WQE.
    pub stride: u32,
    /// Scatter entries per WQE.
    pub max_sge: u32,
}

/// Compute an SRQ's geometry.
pub fn srq_geometry(max_wr: u32, max_sge: u32) -> Result<SrqGeometry, SizingError> {
    if max_wr > MAX_QP_WR {
        return Err(SizingError::TooManyWr {
            what: "max_wr",
            n: max_wr,
            max: MAX_QP_WR,
        });
    }
    let need = 16 + 16 * max_sge.max(1);
    if need > MAX_RQ_DESC_SZ {
        return Err(SizingError::RecvWqeTooLarge {
            sge: max_sge,
            need,
            max: MAX_RQ_DESC_SZ,
        });
    }
    let stride = round_pow2(need.max(32));
    Ok(SrqGeometry {
        wqe_cnt: round_pow2(max_wr + 1),
        stride,
        max_sge: (stride - 16) / 16,
    })
}

/// CQ entries for a requested `cqe` (rdma-core `align_queue_size(cqe + 1)`).
pub fn cq_entries(cqe: u32) -> u32 {
    round_pow2(cqe.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32, inl: u32) -> QpCap {
        QpCap {
            max_send_wr: send_wr,
            max_recv_wr: recv_wr,
            max_send_sge: send_sge,
            max_recv_sge: recv_sge,
            max_inline_data: inl,
        }
    }

    #[test]
    fn rc_geometry_matches_rdma_core_arithmetic() {
        // overhead 192; 192 + 16 = 208 -> 256-byte WQE; inline = 256 - 192 - 4 = 60.
        let g = qp_geometry(QpType::Rc, &cap(64, 32, 1, 1, 0), false).unwrap();
        assert_eq!(g.sq_wqe_size, 256);
        assert_eq!(g.cap.max_inline_data, 60);
        assert_eq!(g.sq_wqe_cnt, 64 * 256 / 64);
        assert_eq!(g.rq_stride, 16);
        assert_eq!(g.rq_wqe_cnt, 32);
        assert_eq!(g.sq_offset, 512);
        // Inline request larger than the SGE need drives the size.
        let g = qp_geometry(QpType::Rc, &cap(8, 0, 1, 0, 200), false).unwrap();
        assert_eq!(g.sq_wqe_size, 448);
        assert_eq!(g.cap.max_inline_data, 448 - 192 - 4);
        assert_eq!(g.rq_wqe_cnt, 0);
    }

    #[test]
    fn ud_and_rq_minimum() {
        let g = qp_geometry(QpType::Ud, &cap(1, 1, 1, 3, 0), false).unwrap();
        assert_eq!(sq_overhead(QpType::Ud), 64);
        assert_eq!(g.sq_wqe_size, 128);
        assert_eq!(g.rq_stride, 64);
        assert_eq!(g.rq_wqe_cnt, 1);
        assert_eq!(g.cap.max_recv_sge, 4);
        let g = qp_geometry(QpType::Ud, &cap(1, 1, 1, 1, 0), true).unwrap();
        assert_eq!(g.rq_wqe_cnt, 0);
        assert!(qp_geometry(QpType::Rc, &cap(1, 1, 100, 1, 0), false).is_err());
    }

    #[test]
    fn absurd_caps_are_errors_not_overflows() {
        assert!(matches!(
            qp_geometry(QpType::Rc, &cap(1, 1, 1, 1, u32::MAX), false),
            Err(SizingError::SendWqeTooLarge { .. })
        ));
        assert!(qp_geometry(QpType::Rc, &cap(1, 1, 1, u32::MAX, 0), false).is_err());
    }

    #[test]
    fn srq_and_cq() {
        let g = srq_geometry(15, 1).unwrap();
        assert_eq!((g.wqe_cnt, g.stride, g.max_sge), (16, 32, 1));
        let g = srq_geometry(16, 3).unwrap();
        assert_eq!((g.wqe_cnt, g.stride, g.max_sge), (32, 64, 3));
        assert_eq!(cq_entries(255), 256);
        assert_eq!(cq_entries(256), 512);
    }
}
