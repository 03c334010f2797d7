//! CQ doorbell encodings (rdma-core `providers/mlx5/cq.c` `update_cons_index`, `mlx5_arm_cq`;
//! Linux `include/linux/mlx5/cq.h`).
//!
//! The CQ doorbell record is two BE32 words: `dbrec[0]` = set_ci (`MLX5_CQ_SET_CI`), the 24-bit
//! consumer index; `dbrec[1]` = arm (`MLX5_CQ_ARM_DB`). Arming also writes a 64-bit value to
//! the UAR page at `MLX5_CQ_DOORBELL` (0x20).

/// Index of the set_ci word in the CQ doorbell record (`MLX5_CQ_SET_CI`).
pub const CQ_SET_CI: usize = 0;
/// Index of the arm word in the CQ doorbell record (`MLX5_CQ_ARM_DB`).
pub const CQ_ARM_DB: usize = 1;
/// Offset of the CQ arm doorbell in the UAR page (`MLX5_CQ_DOORBELL`).
pub const CQ_DOORBELL: usize = 0x20;
/// Arm command: notify on the next completion (`MLX5_CQ_DB_REQ_NOT`).
pub const CQ_DB_REQ_NOT: u32 = 0;
/// Arm command: notify on the next solicited completion (`MLX5_CQ_DB_REQ_NOT_SOL`).
pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// Shift of the 2-bit arm sequence number (`MLX5_CQ_SQN_OFFSET` in DPDK).
pub const CQ_SN_SHIFT: u32 = 28;
/// Width mask of the consumer index (`MLX5_CQ_INDEX_WIDTH` 24).
pub const CQ_CI_MASK: u32 = 0x00ff_ffff;
/// Index of the RQ counter in a QP doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index of the SQ counter in a QP doorbell record (`MLX5_SND_DBR`).
pub const SND_DBR: usize = 1;

/// The host-order value of `dbrec[0]` for consumer index `ci` (written as BE32).
#[inline(always)]
pub const fn set_ci_value(ci: u32) -> u32 {
    ci & CQ_CI_MASK
}

/// Whether an arm asks for solicited completions only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmCmd {
    /// The next completion of any kind (`MLX5_CQ_DB_REQ_NOT`).
    Next,
    /// The next solicited (or error) completion (`MLX5_CQ_DB_REQ_NOT_SOL`).
    Solicited,
}

impl ArmCmd {
    /// The command bits.
    pub const fn bits(self) -> u32 {
        match self {
            ArmCmd::Next => CQ_DB_REQ_NOT,
            ArmCmd::Solicited => CQ_DB_REQ_NOT_SOL,
        }
    }
}

/// The host-order value of `dbrec[1]`: `sn << 28 | cmd | (ci & 0xffffff)`.
#[inline(always)]
pub const fn arm_value(sn: u32, cmd: ArmCmd, ci: u32) -> u32 {
    ((sn & 3) << CQ_SN_SHIFT) | cmd.bits() | (ci & CQ_CI_MASK)
}

/// The 64-bit host-order value written (as BE64) to `cq_uar + 0x20`:
/// `arm_value << 32 | cqn`. In memory: BE32(arm_value) then BE32(cqn).
#[inline(always)]
pub const fn arm_uar_value(sn: u32, cmd: ArmCmd, ci: u32, cqn: u32) -> u64 {
    (arm_value(sn, cmd, ci) as u64) << 32 | (cqn as u64)
}

/// Decode an arm word: `(sn, cmd, ci)`.
pub const fn decode_arm(v: u32) -> (u32, ArmCmd, u32) {
    let cmd = if v & CQ_DB_REQ_NOT_SOL != 0 {
        ArmCmd::Solicited
    } else {
        ArmCmd::Next
    };
    ((v >> CQ_SN_SHIFT) & 3, cmd, v & CQ_CI_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_encoding() {
        assert_eq!(arm_value(1, ArmCmd::Solicited, 0x123456), 0x1112_3456);
        assert_eq!(
            arm_uar_value(5, ArmCmd::Next, 0x1_000_001, 7),
            0x1000_0001_0000_0007
        );
        assert_eq!(decode_arm(0x2100_0005), (2, ArmCmd::Solicited, 5));
    }
}
