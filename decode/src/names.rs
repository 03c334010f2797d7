//! Names and meanings of flag bytes (rdma-core `mlx5dv.h` spelling where rdma-core names the
//! value; Linux `include/linux/mlx5/qp.h` `MLX5_FENCE_MODE_*` otherwise).

use mlx5_wqe::{CTRL_CE_MASK, CTRL_FM_MASK, CTRL_SOLICITED};

/// `fm_ce_se` as `CQ_UPDATE|SOLICITED|FENCE` plus an explanation.
pub(crate) fn fm_ce_se(v: u8) -> String {
    let mut names: Vec<&str> = Vec::new();
    let ce = (v & CTRL_CE_MASK) >> 2;
    match ce {
        1 => names.push("CE_FIRST_ERR"),
        2 => names.push("CQ_UPDATE"),
        3 => names.push("CQ_UPDATE_AND_EQE"),
        _ => {}
    }
    if v & CTRL_SOLICITED != 0 {
        names.push("SOLICITED");
    }
    let fm = (v & CTRL_FM_MASK) >> 5;
    let fm_name = match fm {
        0 => None,
        1 => Some("INITIATOR_SMALL_FENCE"),
        2 => Some("FM_FENCE"),
        3 => Some("STRONG_ORDERING"),
        4 => Some("FENCE"),
        _ => Some("FM_RESERVED"),
    };
    names.extend(fm_name);
    if v & 0x01 != 0 {
        names.push("RSVD_BIT0");
    }
    if v & 0x10 != 0 {
        names.push("RSVD_BIT4");
    }
    let flags = if names.is_empty() {
        "0".to_string()
    } else {
        names.join("|")
    };
    let ce_text = match ce {
        0 => "CQE only on error",
        1 => "CQE on the first error only",
        2 => "CQE always",
        _ => "CQE and EQE",
    };
    let fm_text = match fm {
        0 => "no fence",
        1 => "fence mode 1 (initiator small fence)",
        2 => "fence mode 2 (fence)",
        3 => "fence mode 3 (strong ordering)",
        4 => "fence mode 4 (small and fence, IBV_SEND_FENCE)",
        _ => "reserved fence mode",
    };
    format!("{flags} ({ce_text}; {fm_text})")
}

/// Send opcodes the decoder names beyond those of `mlx5_wqe` (which holds the ones the data
/// path builds). Values: rdma-core `providers/mlx5/mlx5dv.h` `MLX5_OPCODE_*` where it has
/// them, else Linux `include/linux/mlx5/device.h`, else DPDK `drivers/common/mlx5/mlx5_prm.h`.
pub mod opcode {
    /// `MLX5_OPCODE_WAIT`: wait for a CQ / memory condition (DPDK `mlx5_prm.h`).
    pub const WAIT: u8 = 0x0f;
    /// `MLX5_OPCODE_SEND_EN`: enable WQEs of another send queue (DPDK `mlx5_prm.h`).
    pub const SEND_EN: u8 = 0x17;
    /// `MLX5_OPCODE_SET_PSV`: set a protection signature value (`mlx5dv.h`).
    pub const SET_PSV: u8 = 0x20;
    /// `MLX5_OPCODE_GET_PSV` (Linux `device.h`).
    pub const GET_PSV: u8 = 0x21;
    /// `MLX5_OPCODE_CHECK_PSV` (Linux `device.h`).
    pub const CHECK_PSV: u8 = 0x22;
    /// `MLX5_OPCODE_DUMP` (Linux `device.h`).
    pub const DUMP: u8 = 0x23;
    /// `MLX5_OPCODE_RGET_PSV` (Linux `device.h`).
    pub const RGET_PSV: u8 = 0x26;
    /// `MLX5_OPCODE_RCHECK_PSV` (Linux `device.h`).
    pub const RCHECK_PSV: u8 = 0x27;
    /// `MLX5_OPCODE_TAG_MATCHING` (`mlx5dv.h`).
    pub const TAG_MATCHING: u8 = 0x28;
    /// `MLX5_OPCODE_ENHANCED_MPSW`: enhanced multi-packet send, Ethernet (Linux `device.h`,
    /// DPDK `mlx5_prm.h`).
    pub const ENHANCED_MPSW: u8 = 0x29;
    /// `MLX5_OPCODE_FLOW_TBL_ACCESS` (`mlx5dv.h`).
    pub const FLOW_TBL_ACCESS: u8 = 0x2c;
    /// `MLX5_OPCODE_ACCESS_ASO`: advanced steering object access (Linux `device.h`, DPDK).
    pub const ACCESS_ASO: u8 = 0x2d;
    /// `MLX5_OPCODE_MMO`: memory-to-memory offload, opmod 1 = DMA (`mlx5dv.h`; DPDK).
    pub const MMO: u8 = 0x2f;
}

/// The name of any send opcode the decoder knows: `mlx5_wqe::opcode_name`, then the
/// [`opcode`] table (without the `MLX5_OPCODE_` prefix, as rdma-core and Linux spell it).
pub fn send_opcode_name(op: u8) -> Option<&'static str> {
    if let Some(n) = mlx5_wqe::opcode_name(op) {
        return Some(n);
    }
    Some(match op {
        opcode::WAIT => "WAIT",
        opcode::SEND_EN => "SEND_EN",
        opcode::SET_PSV => "SET_PSV",
        opcode::GET_PSV => "GET_PSV",
        opcode::CHECK_PSV => "CHECK_PSV",
        opcode::DUMP => "DUMP",
        opcode::RGET_PSV => "RGET_PSV",
        opcode::RCHECK_PSV => "RCHECK_PSV",
        opcode::TAG_MATCHING => "TAG_MATCHING",
        opcode::ENHANCED_MPSW => "ENHANCED_MPSW",
        opcode::FLOW_TBL_ACCESS => "FLOW_TBL_ACCESS",
        opcode::ACCESS_ASO => "ACCESS_ASO",
        opcode::MMO => "MMO",
        _ => return None,
    })
}
