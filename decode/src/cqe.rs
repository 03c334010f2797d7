//! CQEs: `struct mlx5_cqe64` and, for opcodes REQ_ERR / RESP_ERR, `struct mlx5_err_cqe`
//! (rdma-core `providers/mlx5/mlx5dv.h`, `cq.c` `mlx5_parse_cqe`, `mlx5_handle_error_cqe`;
//! mlx5-facts §5). A 128-byte CQE keeps the 64-byte CQE in its second half.

use mlx5_cq as c;
use mlx5_wqe::opcode_name;

use super::bytes::{be16, be24, be32, be64, take};
use super::{Error, Report};

fn op_own_text(v: u8) -> String {
    let fmt = match (v >> 2) & 3 {
        0 => "format 0 (no inline data)",
        1 => "format 1 (up to 32 data bytes in this CQE)",
        2 => "format 2 (up to 64 data bytes in the first half of the 128-byte CQE)",
        _ => "format 3 (compressed)",
    };
    format!(
        "opcode {} {}, {fmt}, SE {}, owner {}",
        v >> 4,
        c::cqe_opcode_name(v >> 4),
        (v >> 1) & 1,
        v & 1
    )
}

fn send_op(op: u8) -> String {
    match opcode_name(op) {
        Some(n) => format!("{op:#04x} {n}"),
        None => format!("{op:#04x} (unknown)"),
    }
}

/// Decode a CQE of `cqe_size` bytes (64 or 128).
pub(crate) fn decode(b: &[u8], cqe_size: usize) -> Result<Report, Error> {
    if cqe_size != 64 && cqe_size != 128 {
        return Err(Error::Usage(format!(
            "--cqe-size must be 64 or 128, not {cqe_size}"
        )));
    }
    if b.len() != cqe_size {
        let hint = if b.len() == 128 {
            "; pass --cqe-size 128 for 128-byte CQEs"
        } else {
            ""
        };
        return Err(Error::Length {
            what: "CQE",
            expected: format!("exactly {cqe_size}{hint}"),
            got: b.len(),
        });
    }
    let base = cqe_size - 64;
    let q = take(b, base, 64, b.len(), "64-byte CQE")?;
    let op_own = q[63];
    let opcode = op_own >> 4;
    let known = matches!(
        opcode,
        c::CQE_REQ
            | c::CQE_RESP_WR_IMM
            | c::CQE_RESP_SEND
            | c::CQE_RESP_SEND_IMM
            | c::CQE_RESP_SEND_INV
            | c::CQE_RESIZE_CQ
            | c::CQE_NO_PACKET
            | c::CQE_SIG_ERR
            | c::CQE_REQ_ERR
            | c::CQE_RESP_ERR
            | c::CQE_INVALID
    );
    if !known {
        return Err(Error::UnknownCqeOpcode(opcode));
    }
    let format = (op_own >> 2) & 3;
    let mut r = Report::default();
    if base == 64 {
        r.section("first half of the 128-byte CQE", 0, 64);
        let what = if format == 2 {
            "inline-scattered data (format 2)"
        } else {
            "unused (or the GRH of a UD receive when flags_rqpn bit 29 is set)"
        };
        r.add(0, &b[..64], "cqe128.first_half", what);
    }
    if opcode == c::CQE_REQ_ERR || opcode == c::CQE_RESP_ERR {
        err_cqe(&mut r, q, base);
    } else {
        cqe64(&mut r, q, base, format);
    }
    if opcode == c::CQE_INVALID {
        r.notes.push(
            "opcode INVALID: hardware never wrote this entry (rdma-core fills new CQs with op_own 0xf0)"
                .into(),
        );
    }
    if format == 3 {
        r.notes.push(
            "compressed CQE: the entry holds mini-CQEs, not the fields above (mlx5-facts §5.8)"
                .into(),
        );
    }
    Ok(r)
}

fn cqe64(r: &mut Report, q: &[u8], o: usize, format: u8) {
    let opcode = q[63] >> 4;
    r.summary = format!(
        "CQE: {} on QP {:#08x}, WQE counter {:#06x}, {} bytes",
        c::cqe_opcode_name(opcode),
        be24(q, 57),
        be16(q, 60),
        be32(q, 44)
    );
    r.section("CQE (struct mlx5_cqe64)", o, 64);
    if format == 1 {
        r.add(
            o,
            &q[0..32],
            "cqe.inline_data",
            "inline-scattered data (format 1), byte_cnt bytes valid",
        );
    } else {
        r.add(o, &q[0..2], "cqe.rsvd0", "reserved");
        r.add(
            o + 2,
            &q[2..4],
            "cqe.wqe_id",
            format!("{:#06x} (striding RQ only)", be16(q, 2)),
        );
        r.add(
            o + 4,
            &q[4..17],
            "cqe.rsvd4",
            "Ethernet: LRO / RSS hash; unused by RC/UC/UD",
        );
        r.add(
            o + 17,
            &q[17..18],
            "cqe.ml_path",
            format!("DLID path bits {:#04x}", q[17] & 0x7f),
        );
        r.add(o + 18, &q[18..22], "cqe.rsvd20", "reserved");
        r.add(
            o + 22,
            &q[22..24],
            "cqe.slid",
            format!("source LID {:#06x}", be16(q, 22)),
        );
        let f = be32(q, 24);
        r.add(
            o + 24,
            &q[24..28],
            "cqe.flags_rqpn",
            format!(
                "source QP {:#08x}, SL / packet type {:#x}, GRH flags {}",
                f & 0x00ff_ffff,
                (f >> 24) & 0xf,
                (f >> 28) & 3
            ),
        );
        r.add(
            o + 28,
            &q[28..29],
            "cqe.hds_ip_ext",
            format!("{:#04x} (L2/L3/L4 OK bits)", q[28]),
        );
        r.add(
            o + 29,
            &q[29..30],
            "cqe.l4_hdr_type_etc",
            format!("{:#04x}", q[29]),
        );
        r.add(
            o + 30,
            &q[30..32],
            "cqe.vlan_info",
            format!("{:#06x}", be16(q, 30)),
        );
    }
    r.add(
        o + 32,
        &q[32..36],
        "cqe.srqn_uidx",
        format!("SRQN / user index {:#08x}", be32(q, 32) & 0x00ff_ffff),
    );
    let imm = match opcode {
        c::CQE_RESP_WR_IMM | c::CQE_RESP_SEND_IMM => {
            format!(
                "immediate {:02x} {:02x} {:02x} {:02x} (network order)",
                q[36], q[37], q[38], q[39]
            )
        }
        c::CQE_RESP_SEND_INV => format!("invalidated rkey {:#010x}", be32(q, 36)),
        _ => format!("{:#010x}", be32(q, 36)),
    };
    r.add(o + 36, &q[36..40], "cqe.imm_inval_pkey", imm);
    r.add(
        o + 40,
        &q[40..41],
        "cqe.app",
        format!("{:#04x} (tag matching)", q[40]),
    );
    r.add(o + 41, &q[41..42], "cqe.app_op", format!("{:#04x}", q[41]));
    r.add(
        o + 42,
        &q[42..44],
        "cqe.app_info",
        format!("{:#06x}", be16(q, 42)),
    );
    r.add(
        o + 44,
        &q[44..48],
        "cqe.byte_cnt",
        format!("{} bytes", be32(q, 44)),
    );
    r.add(
        o + 48,
        &q[48..56],
        "cqe.timestamp",
        format!("{:#018x}", be64(q, 48)),
    );
    let sop = be32(q, 56);
    let sop_text = if opcode == c::CQE_REQ {
        format!(
            "send opcode {}, QP {:#08x}",
            send_op((sop >> 24) as u8),
            sop & 0x00ff_ffff
        )
    } else {
        format!("QP {:#08x}", sop & 0x00ff_ffff)
    };
    r.add(o + 56, &q[56..60], "cqe.sop_drop_qpn", sop_text);
    r.add(
        o + 60,
        &q[60..62],
        "cqe.wqe_counter",
        format!("WQE counter {:#06x}", be16(q, 60)),
    );
    r.add(
        o + 62,
        &q[62..63],
        "cqe.signature",
        format!("{:#04x}", q[62]),
    );
    r.add(o + 63, &q[63..64], "cqe.op_own", op_own_text(q[63]));
}

fn err_cqe(r: &mut Report, q: &[u8], o: usize) {
    let opcode = q[63] >> 4;
    let synd = q[55];
    let status = c::WcStatus::from_syndrome(synd);
    r.summary = format!(
        "error CQE: {} on QP {:#08x}, WQE counter {:#06x}: syndrome {:#04x} {} -> {} ({})",
        c::cqe_opcode_name(opcode),
        be24(q, 57),
        be16(q, 60),
        synd,
        c::syndrome_name(synd),
        status.name(),
        status as u8
    );
    r.section("error CQE (struct mlx5_err_cqe)", o, 64);
    r.add(o, &q[0..32], "err.rsvd0", "reserved");
    r.add(
        o + 32,
        &q[32..36],
        "err.srqn",
        format!("SRQN / user index {:#08x}", be32(q, 32) & 0x00ff_ffff),
    );
    r.add(o + 36, &q[36..52], "err.rsvd1", "reserved");
    r.add(
        o + 52,
        &q[52..53],
        "err.hw_err_synd",
        format!("hardware syndrome {:#04x}", q[52]),
    );
    r.add(
        o + 53,
        &q[53..54],
        "err.hw_synd_type",
        format!("hardware syndrome type {:#04x}", q[53]),
    );
    let vendor = match q[54] {
        c::VENDOR_SYNDROME_ODP_PFAULT => "0x93 (ODP page fault)".to_string(),
        c::VENDOR_SYNDROME_PSN => "0x99 (PSN error)".to_string(),
        v => format!("{v:#04x}"),
    };
    r.add(
        o + 54,
        &q[54..55],
        "err.vendor_err_synd",
        format!("vendor syndrome {vendor} (wc.vendor_err)"),
    );
    r.add(
        o + 55,
        &q[55..56],
        "err.syndrome",
        format!(
            "{synd:#04x} {} -> {} = {}: {}",
            c::syndrome_name(synd),
            status.name(),
            status as u8,
            status.causes()
        ),
    );
    let s = be32(q, 56);
    let op_text = if opcode == c::CQE_REQ_ERR {
        format!(
            "send opcode {}, QP {:#08x}",
            send_op((s >> 24) as u8),
            s & 0x00ff_ffff
        )
    } else {
        format!("QP {:#08x}", s & 0x00ff_ffff)
    };
    r.add(o + 56, &q[56..60], "err.s_wqe_opcode_qpn", op_text);
    r.add(
        o + 60,
        &q[60..62],
        "err.wqe_counter",
        format!("failing WQE counter {:#06x}", be16(q, 60)),
    );
    r.add(
        o + 62,
        &q[62..63],
        "err.signature",
        format!("{:#04x}", q[62]),
    );
    r.add(o + 63, &q[63..64], "err.op_own", op_own_text(q[63]));
}
