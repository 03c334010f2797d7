//! The CQE ownership rule (rdma-core `providers/mlx5/cq.c` `get_sw_cqe`; UCX `ib_mlx5.inl`
//! `uct_ib_mlx5_cqe_is_hw_owned`).
//!
//! The consumer index `ci` is a free-running counter; hardware writes the owner bit as the
//! parity of the lap (0 on the first pass through the ring, 1 on the second, ...). The CQE at
//! `ci` belongs to software iff its owner bit equals `(ci >> log2(cqe_cnt)) & 1` **and** its
//! opcode is not INVALID (rdma-core initialises every CQE with `op_own = 0xF0`).

use crate::cqe::CQE_INVALID;

/// The owner bit software expects at consumer index `ci` for a ring of `cqe_cnt` entries
/// (a power of two): `!!(ci & cqe_cnt)`.
#[inline(always)]
pub const fn expected_owner(ci: u32, cqe_cnt: u32) -> u8 {
    ((ci & cqe_cnt) != 0) as u8
}

/// Whether a CQE with this `op_own` at consumer index `ci` is ready for software.
#[inline(always)]
pub const fn sw_owned(op_own: u8, ci: u32, cqe_cnt: u32) -> bool {
    (op_own >> 4) != CQE_INVALID && (op_own & 1) == expected_owner(ci, cqe_cnt)
}

/// `op_own` of a freshly created CQ entry (rdma-core `mlx5_alloc_cq_buf`: opcode INVALID,
/// owner 0).
pub const CQE_INITIAL_OP_OWN: u8 = 0xf0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lap_parity() {
        assert!(!sw_owned(CQE_INITIAL_OP_OWN, 0, 8));
        assert!(sw_owned(0x00, 0, 8));
        assert!(!sw_owned(0x00, 8, 8));
        assert!(sw_owned(0x01, 8, 8));
        assert!(sw_owned(0x00, 16, 8));
        assert!(sw_owned(0xd1, 9, 8));
    }
}
