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
