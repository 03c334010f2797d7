//! Opcodes and flag constants of mlx5 send WQEs.
//!
//! Values: rdma-core `providers/mlx5/mlx5dv.h` (`MLX5_OPCODE_*`, `MLX5_WQE_CTRL_*`), Linux
//! `include/linux/mlx5/qp.h` (`MLX5_FENCE_MODE_*`), UCX `src/uct/ib/mlx5/ib_mlx5.h`.

/// Size of a send basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// log2 of [`SEND_WQE_BB`] (`MLX5_SEND_WQE_SHIFT`).
pub const SEND_WQE_SHIFT: u32 = 6;
/// Size of a DS unit, the granule of WQE sizes (`MLX5_SEND_WQE_DS`).
pub const SEND_WQE_DS: usize = 16;
/// Largest DS count the 6-bit ctrl field holds (`MLX5_WQE_CTRL_DS_MASK` 0x3f, Linux qp.h).
pub const MAX_DS: u32 = 0x3f;
/// Largest WQE in basic blocks (`MLX5_SEND_WQE_MAX_WQEBBS`, Linux qp.h).
pub const SEND_WQE_MAX_WQEBBS: u32 = 16;

/// `MLX5_OPCODE_NOP`
pub const OPCODE_NOP: u8 = 0x00;
/// `MLX5_OPCODE_SEND_INVAL`
pub const OPCODE_SEND_INVAL: u8 = 0x01;
/// `MLX5_OPCODE_RDMA_WRITE`
pub const OPCODE_RDMA_WRITE: u8 = 0x08;
/// `MLX5_OPCODE_RDMA_WRITE_IMM`
pub const OPCODE_RDMA_WRITE_IMM: u8 = 0x09;
/// `MLX5_OPCODE_SEND`
pub const OPCODE_SEND: u8 = 0x0a;
/// `MLX5_OPCODE_SEND_IMM`
pub const OPCODE_SEND_IMM: u8 = 0x0b;
/// `MLX5_OPCODE_TSO` (raw Ethernet only)
pub const OPCODE_TSO: u8 = 0x0e;
/// `MLX5_OPCODE_RDMA_READ`
pub const OPCODE_RDMA_READ: u8 = 0x10;
/// `MLX5_OPCODE_ATOMIC_CS`: 8-byte compare and swap.
pub const OPCODE_ATOMIC_CS: u8 = 0x11;
/// `MLX5_OPCODE_ATOMIC_FA`: 8-byte fetch and add.
pub const OPCODE_ATOMIC_FA: u8 = 0x12;
/// `MLX5_OPCODE_ATOMIC_MASKED_CS`: extended (masked) compare and swap.
pub const OPCODE_ATOMIC_MASKED_CS: u8 = 0x14;
/// `MLX5_OPCODE_ATOMIC_MASKED_FA`: extended (masked) fetch and add.
pub const OPCODE_ATOMIC_MASKED_FA: u8 = 0x15;
/// `MLX5_OPCODE_BIND_MW`
pub const OPCODE_BIND_MW: u8 = 0x18;
/// `MLX5_OPCODE_FMR`
pub const OPCODE_FMR: u8 = 0x19;
/// `MLX5_OPCODE_LOCAL_INVAL`
pub const OPCODE_LOCAL_INVAL: u8 = 0x1b;
/// `MLX5_OPCODE_CONFIG_CMD`
pub const OPCODE_CONFIG_CMD: u8 = 0x1f;
/// `MLX5_OPCODE_UMR`
pub const OPCODE_UMR: u8 = 0x25;

/// The name rdma-core gives a send opcode (`RDMA_WRITE`, `ATOMIC_MASKED_CS`, ...).
pub fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        OPCODE_NOP => "NOP",
        OPCODE_SEND_INVAL => "SEND_INVAL",
        OPCODE_RDMA_WRITE => "RDMA_WRITE",
        OPCODE_RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
        OPCODE_SEND => "SEND",
        OPCODE_SEND_IMM => "SEND_IMM",
        OPCODE_TSO => "TSO",
        OPCODE_RDMA_READ => "RDMA_READ",
        OPCODE_ATOMIC_CS => "ATOMIC_CS",
        OPCODE_ATOMIC_FA => "ATOMIC_FA",
        OPCODE_ATOMIC_MASKED_CS => "ATOMIC_MASKED_CS",
        OPCODE_ATOMIC_MASKED_FA => "ATOMIC_MASKED_FA",
        OPCODE_BIND_MW => "BIND_MW",
        OPCODE_FMR => "FMR",
        OPCODE_LOCAL_INVAL => "LOCAL_INVAL",
        OPCODE_CONFIG_CMD => "CONFIG_CMD",
        OPCODE_UMR => "UMR",
        _ => return None,
    })
}

/// opmod of an extended (masked) atomic on 4-byte operands: `8 | (log2(4) - 2)`
/// (UCX `UCT_IB_MLX5_OPMOD_EXT_ATOMIC`).
pub const OPMOD_EXT_ATOMIC_32: u8 = 0x08;
/// opmod of an extended (masked) atomic on 8-byte operands: `8 | (log2(8) - 2)`.
pub const OPMOD_EXT_ATOMIC_64: u8 = 0x09;

/// `fm_ce_se`: request a CQE for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`, CE = 2).
pub const CTRL_CQ_UPDATE: u8 = 0x08;
/// `fm_ce_se`: CQE and EQE (CE = 3; Linux qp.h `MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
pub const CTRL_CQ_UPDATE_AND_EQE: u8 = 0x0c;
/// `fm_ce_se`: solicited event (`MLX5_WQE_CTRL_SOLICITED`).
pub const CTRL_SOLICITED: u8 = 0x02;
/// `fm_ce_se`: fence mode 1, initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`).
pub const CTRL_INITIATOR_SMALL_FENCE: u8 = 0x20;
/// `fm_ce_se`: fence mode 2, fence (UCX `UCT_IB_MLX5_WQE_CTRL_FLAG_FENCE`).
pub const CTRL_FENCE_MODE_FENCE: u8 = 0x40;
/// `fm_ce_se`: fence mode 3, strong ordering (UCX `..._STRONG_ORDER`).
pub const CTRL_STRONG_ORDERING: u8 = 0x60;
/// `fm_ce_se`: fence mode 4, small and fence; rdma-core uses it for `IBV_SEND_FENCE`
/// (`MLX5_WQE_CTRL_FENCE`).
pub const CTRL_FENCE: u8 = 0x80;
/// Mask of the fence-mode bits (7:5) of `fm_ce_se`.
pub const CTRL_FM_MASK: u8 = 0xe0;
/// Mask of the completion-mode bits (3:2) of `fm_ce_se`.
pub const CTRL_CE_MASK: u8 = 0x0c;

/// Inline segment marker in `byte_count` (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Key of the receive-list terminator segment (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// `dqp_dct` bit: a full 48-byte address vector follows (`MLX5_EXTENDED_UD_AV`).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// Operand size of CAS / FAA and the data segment length they use (`MLX5_ATOMIC_SIZE`).
pub const ATOMIC_SIZE: u32 = 8;
/// Bit 30 of the AV's `grh_gid_fl`: GRH present (IB only; UCX `UCT_IB_MLX5_AV_GRH_PRESENT`).
pub const AV_GRH_PRESENT: u32 = 1 << 30;
