//! CQEs: `struct mlx5_cqe64`; for opcodes REQ_ERR / RESP_ERR `struct mlx5_err_cqe`; for
//! SIG_ERR rdma-core's `struct mlx5_sigerr_cqe`; compressed (format 3) entries in the basic and
//! the enhanced layout, with their mini-CQEs (rdma-core `providers/mlx5/mlx5dv.h`, `cq.c`
//! `mlx5_parse_cqe`, `mlx5_handle_error_cqe`; Linux `include/linux/mlx5/device.h`,
//! `drivers/net/ethernet/mellanox/mlx5/core/en_rx.c`; UCX `src/uct/ib/mlx5/ib_mlx5.c`
//! `uct_ib_mlx5_iface_cqe_unzip`; `docs/wqe-layout.md` §9–§11). A 128-byte CQE keeps the
//! 64-byte CQE in its second half.

use mlx5_cq as c;

use super::bytes::{be16, be24, be32, be64, take};
use super::names::send_opcode_name;
use super::{Error, Report, Zip};

/// Mini-CQEs per 64-byte array slot in the basic layout (Linux device.h
/// `MLX5_MINI_CQE_ARRAY_SIZE`).
const MINIS_PER_ARRAY: usize = 8;
/// Mini-CQEs in one enhanced-layout block at most (UCX ib_mlx5.h
/// `UCT_IB_MLX5_MINICQE_ARR_MAX_SIZE`: 7 × 8 bytes leave bytes 56–63 for the block's own
/// signature and op_own).
const MINIS_PER_BLOCK: usize = 7;

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
    match send_opcode_name(op) {
        Some(n) => format!("{op:#04x} {n}"),
        None => format!("{op:#04x} (unknown)"),
    }
}

fn known_opcode(opcode: u8) -> bool {
    matches!(
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
    )
}

fn check_size(cqe_size: usize) -> Result<(), Error> {
    if cqe_size != 64 && cqe_size != 128 {
        return Err(Error::Usage(format!(
            "--cqe-size must be 64 or 128, not {cqe_size}"
        )));
    }
    Ok(())
}

/// Decode one CQE of `cqe_size` bytes (64 or 128); a compressed entry per `zip`.
pub(crate) fn decode(b: &[u8], cqe_size: usize, zip: Zip) -> Result<Report, Error> {
    check_size(cqe_size)?;
    if b.len() != cqe_size {
        let hint = if b.len() == 128 && cqe_size == 64 {
            "; pass --cqe-size 128 for a 128-byte CQE, or use the `cq` kind for two CQ slots"
        } else if b.len() > cqe_size && b.len().is_multiple_of(cqe_size) {
            "; use the `cq` kind for several CQ slots"
        } else {
            ""
        };
        return Err(Error::Length {
            what: "CQE",
            expected: format!("exactly {cqe_size}{hint}"),
            got: b.len(),
        });
    }
    let mut r = Report::default();
    slot(&mut r, b, 0, cqe_size, zip)?;
    Ok(r)
}

/// Decode the CQE slot at `b[base..base + cqe_size]` into `r` (offsets relative to `b`).
fn slot(r: &mut Report, b: &[u8], base: usize, cqe_size: usize, zip: Zip) -> Result<(), Error> {
    let o = base + cqe_size - 64;
    let q = take(b, o, 64, b.len(), "64-byte CQE")?;
    let op_own = q[63];
    let opcode = op_own >> 4;
    let format = (op_own >> 2) & 3;
    let enhanced_block = format == c::CQE_FORMAT_COMPRESSED && zip == Zip::Enhanced;
    // In an enhanced block the opcode nibble is the mini-CQE count, not an opcode.
    if !enhanced_block && !known_opcode(opcode) {
        return Err(Error::UnknownCqeOpcode(opcode));
    }
    if cqe_size == 128 {
        first_half(r, &b[base..base + 64], base, q, format);
    }
    if enhanced_block {
        let n = (opcode as usize) + 1;
        if n > MINIS_PER_BLOCK {
            return Err(Error::Compressed {
                offset: o,
                why: format!(
                    "an enhanced block holds at most {MINIS_PER_BLOCK} mini-CQEs, op_own bits 7:4 say {n}"
                ),
            });
        }
        mini_block(r, q, o, n, None);
        r.summary = format!(
            "compressed CQE block (enhanced layout): {n} mini-CQE(s), validity iteration count {:#04x}",
            q[62]
        );
        r.notes.push(
            "enhanced layout: the block's completions share the fields of the last uncompressed \
             CQE before it (the title); pass the slots from the title on to the `cq` kind to \
             see them whole"
                .into(),
        );
        return Ok(());
    }
    match opcode {
        c::CQE_REQ_ERR | c::CQE_RESP_ERR => err_cqe(r, q, o),
        c::CQE_SIG_ERR => sigerr_cqe(r, q, o),
        _ => cqe64(r, q, o, format),
    }
    if opcode == c::CQE_INVALID {
        r.notes.push(
            "opcode INVALID: hardware never wrote this entry (rdma-core fills new CQs with op_own 0xf0)"
                .into(),
        );
    }
    if format == c::CQE_FORMAT_COMPRESSED {
        // Basic layout: this is the session's title CQE.
        let n = be32(q, 44);
        r.summary = format!(
            "compressed session title (basic layout): {} on QP {:#08x}, {n} completion(s) from WQE counter {:#06x}",
            c::cqe_opcode_name(opcode),
            be24(q, 57),
            be16(q, 60)
        );
        r.notes.push(format!(
            "basic layout: this title and the {n} slot(s) from here hold {n} completions; the \
             mini-CQE arrays are the next slot and every 8th after it (Linux en_rx.c \
             `mlx5e_decompress_cqes_start`); pass the whole session to the `cq` kind"
        ));
    }
    Ok(())
}

/// The first half of a 128-byte CQE slot.
fn first_half(r: &mut Report, h: &[u8], o: usize, q: &[u8], format: u8) {
    r.section("first half of the 128-byte CQE", o, 64);
    let grh_in_cqe = be32(q, 24) & (1 << 29) != 0;
    if format == c::CQE_FORMAT_INLINE64 {
        r.add(
            o,
            h,
            "cqe128.inline_data",
            "inline-scattered data (format 2), byte_cnt bytes valid",
        );
    } else if grh_in_cqe && format != c::CQE_FORMAT_COMPRESSED {
        r.add(o, &h[..24], "cqe128.rsvd", "unused");
        r.add(
            o + 24,
            &h[24..],
            "cqe128.grh",
            "40-byte GRH (flags_rqpn bit 29): UCX reads it here, just before the 64-byte CQE \
             (`uct_ib_mlx5_gid_from_cqe`); Linux device.h `struct mlx5_cqe128` places a GRH at \
             bytes 0-39 instead",
        );
    } else {
        r.add(
            o,
            h,
            "cqe128.first_half",
            "unused (padding; 128-byte CQEs without inline data or GRH)",
        );
    }
}

/// Who produced a mini-CQE: decides how its first four bytes read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The session's title is a requester CQE: WQE counter and send opcode.
    Requester,
    /// A responder CQE: RSS hash or checksum (the CQ's `cqe_comp_res_format`).
    Responder,
    /// No title at hand.
    Unknown,
}

fn role_of(title: &[u8]) -> Role {
    if title[63] >> 4 == c::CQE_REQ {
        Role::Requester
    } else {
        Role::Responder
    }
}

/// One 8-byte mini-CQE (Linux device.h `struct mlx5_mini_cqe8`; UCX ib_mlx5.h
/// `uct_ib_mlx5_mini_cqe8_t`).
fn mini(r: &mut Report, m: &[u8], o: usize, role: Role) {
    match role {
        Role::Requester => {
            r.add(
                o,
                &m[0..2],
                "mini.wqe_counter",
                format!("WQE counter {:#06x}", be16(m, 0)),
            );
            r.add(
                o + 2,
                &m[2..3],
                "mini.s_wqe_opcode",
                format!(
                    "send opcode {} (byte 2 in Linux and UCX; DPDK mlx5_prm.h puts it at byte 3)",
                    send_op(m[2])
                ),
            );
            r.add(o + 3, &m[3..4], "mini.rsvd", format!("{:#04x}", m[3]));
        }
        Role::Responder => r.add(
            o,
            &m[0..4],
            "mini.rx_hash_result",
            format!(
                "RSS hash {:#010x} (HASH format), or checksum {:#06x} and stride index {} (CSUM formats)",
                be32(m, 0),
                be16(m, 0),
                be16(m, 2)
            ),
        ),
        Role::Unknown => r.add(
            o,
            &m[0..4],
            "mini.info",
            format!(
                "requester: WQE counter {:#06x}, send opcode {}; responder: RSS hash {:#010x}",
                be16(m, 0),
                send_op(m[2]),
                be32(m, 0)
            ),
        ),
    }
    r.add(
        o + 4,
        &m[4..8],
        "mini.byte_cnt",
        format!("{} bytes", be32(m, 4)),
    );
}

/// An enhanced-layout block: `n` mini-CQEs in bytes 0..8n, the validity iteration count in
/// byte 62, `(n - 1) << 4 | format 3 << 2 | owner` in byte 63.
fn mini_block(r: &mut Report, q: &[u8], o: usize, n: usize, title: Option<&[u8]>) {
    let role = title.map_or(Role::Unknown, role_of);
    r.section(
        "compressed CQE block, enhanced layout (mini-CQE array)",
        o,
        64,
    );
    for k in 0..n {
        r.section(format!("mini-CQE {k}"), o + 8 * k, 8);
        mini(r, &q[8 * k..8 * k + 8], o + 8 * k, role);
    }
    r.section("block trailer", o + 8 * n, 64 - 8 * n);
    if n < MINIS_PER_BLOCK {
        r.add(
            o + 8 * n,
            &q[8 * n..56],
            "block.unused",
            "unused mini-CQE slots",
        );
    }
    r.add(o + 56, &q[56..62], "block.rsvd", "reserved");
    r.add(
        o + 62,
        &q[62..63],
        "block.validity_iteration_count",
        format!(
            "{:#04x}: the slot is software-owned when it equals (ci >> log2(cqe_cnt)) & 0xff (UCX `uct_ib_mlx5_cqe_is_hw_owned`)",
            q[62]
        ),
    );
    r.add(
        o + 63,
        &q[63..64],
        "block.op_own",
        format!(
            "{} mini-CQE(s) (bits 7:4 = count - 1, DPDK `MLX5_CQE_NUM_MINIS`), format 3 (compressed), owner {}",
            n,
            q[63] & 1
        ),
    );
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
    let title = if format == c::CQE_FORMAT_COMPRESSED {
        "compressed session title (struct mlx5_cqe64, basic layout)"
    } else {
        "CQE (struct mlx5_cqe64)"
    };
    r.section(title, o, 64);
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
    let count = if format == c::CQE_FORMAT_COMPRESSED {
        format!(
            "{} completions in this compression session (basic layout)",
            be32(q, 44)
        )
    } else {
        format!("{} bytes", be32(q, 44))
    };
    r.add(o + 44, &q[44..48], "cqe.byte_cnt", count);
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
        format!(
            "{:#04x} (the validity iteration count when the CQ uses enhanced compression)",
            q[62]
        ),
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

/// `syndrome` bits of a signature-error CQE (rdma-core verbs.c `MLX5_SIGERR_CQE_SYNDROME_*`).
fn sig_syndrome_text(s: u16) -> String {
    let mut names = Vec::new();
    for (bit, name) in [(11, "REFTAG"), (12, "APPTAG"), (13, "GUARD")] {
        if s & (1 << bit) != 0 {
            names.push(name);
        }
    }
    if s & !(0b111 << 11) != 0 || names.is_empty() {
        names.push("unknown bits");
    }
    format!("{s:#06x} ({})", names.join("|"))
}

/// The signature-error CQE, opcode 12 (rdma-core cq.c `struct mlx5_sigerr_cqe`; Linux
/// device.h `struct mlx5_sig_err_cqe`).
fn sigerr_cqe(r: &mut Report, q: &[u8], o: usize) {
    let synd = be16(q, 32);
    let mkey = be32(q, 36);
    r.summary = format!(
        "signature-error CQE: mkey {mkey:#010x}, syndrome {}, offset {:#x}: completes no work request",
        sig_syndrome_text(synd),
        be64(q, 40)
    );
    r.section("signature-error CQE (struct mlx5_sigerr_cqe)", o, 64);
    r.add(o, &q[0..16], "sigerr.rsvd0", "reserved");
    r.add(
        o + 16,
        &q[16..20],
        "sigerr.expected_trans_sig",
        format!("expected transaction signature {:#010x}", be32(q, 16)),
    );
    r.add(
        o + 20,
        &q[20..24],
        "sigerr.actual_trans_sig",
        format!("actual transaction signature {:#010x}", be32(q, 20)),
    );
    r.add(
        o + 24,
        &q[24..28],
        "sigerr.expected_ref_tag",
        format!("expected reference tag {:#010x}", be32(q, 24)),
    );
    r.add(
        o + 28,
        &q[28..32],
        "sigerr.actual_ref_tag",
        format!("actual reference tag {:#010x}", be32(q, 28)),
    );
    r.add(
        o + 32,
        &q[32..34],
        "sigerr.syndrome",
        sig_syndrome_text(synd),
    );
    let sig_type = match q[34] {
        0 => "0 (block signature)".to_string(),
        1 => "1 (transaction signature)".to_string(),
        v => format!("{v:#04x} (unknown)"),
    };
    r.add(
        o + 34,
        &q[34..35],
        "sigerr.sig_type",
        format!("{sig_type} (reserved in Linux struct mlx5_sig_err_cqe)"),
    );
    let domain = match q[35] {
        0 => "0 (wire domain)".to_string(),
        1 => "1 (memory domain)".to_string(),
        v => format!("{v:#04x} (unknown)"),
    };
    r.add(
        o + 35,
        &q[35..36],
        "sigerr.domain",
        format!("{domain} (reserved in Linux struct mlx5_sig_err_cqe)"),
    );
    r.add(
        o + 36,
        &q[36..40],
        "sigerr.mkey",
        format!(
            "mkey {mkey:#010x} (index {:#08x}: rdma-core looks the mkey up by mkey >> 8)",
            mkey >> 8
        ),
    );
    r.add(
        o + 40,
        &q[40..48],
        "sigerr.sig_err_offset",
        format!("offset of the bad block {:#x}", be64(q, 40)),
    );
    r.add(o + 48, &q[48..56], "sigerr.rsvd30", "reserved");
    r.add(
        o + 56,
        &q[56..60],
        "sigerr.qpn",
        format!(
            "{:#010x} (reserved in rdma-core; Linux device.h reads a QPN here: {:#08x})",
            be32(q, 56),
            be32(q, 56) & 0x00ff_ffff
        ),
    );
    r.add(o + 60, &q[60..62], "sigerr.rsvd38", "reserved");
    r.add(
        o + 62,
        &q[62..63],
        "sigerr.signature",
        format!("{:#04x}", q[62]),
    );
    r.add(o + 63, &q[63..64], "sigerr.op_own", op_own_text(q[63]));
    r.notes.push(
        "a signature-error CQE reports a T10-DIF/CRC failure on a signature mkey and completes \
         no work request: rdma-core records it on the mkey (read with mlx5dv_mkey_check) and \
         goes on to the next CQE (cq.c `mlx5_parse_cqe`); a direct poller must consume it \
         (ci + 1) and not match it to a WQE"
            .into(),
    );
}

/// One completion found in a run of CQ slots.
struct Completion {
    /// The slot it occupies.
    slot: usize,
    /// Where its own bytes are: a CQE's bytes 56..64, or its mini-CQE.
    raw: usize,
    /// Length of those bytes.
    len: usize,
    /// What it completes.
    text: String,
}

/// Decode consecutive CQ slots (`b.len()` a multiple of `cqe_size`), expanding compressed
/// sessions (basic layout) or blocks (enhanced layout) into the completions they stand for.
pub(crate) fn decode_ring(b: &[u8], cqe_size: usize, zip: Zip) -> Result<Report, Error> {
    check_size(cqe_size)?;
    if !b.len().is_multiple_of(cqe_size) {
        return Err(Error::Length {
            what: "CQ slots",
            expected: format!("a multiple of {cqe_size}"),
            got: b.len(),
        });
    }
    let slots = b.len() / cqe_size;
    let q_of = |i: usize| &b[i * cqe_size + cqe_size - 64..(i + 1) * cqe_size];
    let mut r = Report::default();
    let mut done: Vec<Completion> = Vec::new();
    // Enhanced layout: the last uncompressed CQE and the responder WQE counter its blocks
    // continue from (UCX `uct_ib_mlx5_iface_cqe_unzip_init`).
    let mut title: Option<(usize, u16)> = None;
    let mut i = 0;
    while i < slots {
        let q = q_of(i);
        let format = (q[63] >> 2) & 3;
        if format != c::CQE_FORMAT_COMPRESSED {
            let mut s = Report::default();
            slot(&mut s, b, i * cqe_size, cqe_size, zip)?;
            absorb(&mut r, s, i);
            let opcode = q[63] >> 4;
            match opcode {
                c::CQE_SIG_ERR | c::CQE_RESIZE_CQ | c::CQE_INVALID => {}
                _ => done.push(Completion {
                    slot: i,
                    raw: (i + 1) * cqe_size - 8,
                    len: 8,
                    text: full_text(q),
                }),
            }
            title = match opcode {
                c::CQE_REQ
                | c::CQE_RESP_WR_IMM
                | c::CQE_RESP_SEND
                | c::CQE_RESP_SEND_IMM
                | c::CQE_RESP_SEND_INV => Some((i, be16(q, 60))),
                _ => None,
            };
            i += 1;
            continue;
        }
        match zip {
            Zip::Basic => i = basic_session(&mut r, &mut done, b, cqe_size, i, slots)?,
            Zip::Enhanced => {
                i = enhanced_block(&mut r, &mut done, b, cqe_size, i, slots, &mut title)?
            }
        }
    }
    r.section("completions", 0, b.len());
    for (k, d) in done.iter().enumerate() {
        r.add(
            d.raw,
            &b[d.raw..d.raw + d.len],
            format!("completion[{k}]"),
            format!("slot {}: {}", d.slot, d.text),
        );
    }
    r.summary = format!(
        "CQ: {slots} slot(s) of {cqe_size} bytes, {} completion(s) ({} layout for compressed entries)",
        done.len(),
        match zip {
            Zip::Basic => "basic",
            Zip::Enhanced => "enhanced",
        }
    );
    Ok(r)
}

/// Move a one-slot report into `r`, its titles and notes marked with the slot number.
fn absorb(r: &mut Report, s: Report, i: usize) {
    for mut sec in s.sections {
        sec.title = format!("slot {i}: {}", sec.title);
        r.sections.push(sec);
    }
    for n in s.notes {
        r.notes.push(format!("slot {i}: {n}"));
    }
}

/// What an uncompressed CQE completes, in one line.
fn full_text(q: &[u8]) -> String {
    let opcode = q[63] >> 4;
    match opcode {
        c::CQE_REQ_ERR | c::CQE_RESP_ERR => {
            let st = c::WcStatus::from_syndrome(q[55]);
            format!(
                "{} on QP {:#08x}, WQE counter {:#06x}, {}",
                c::cqe_opcode_name(opcode),
                be24(q, 57),
                be16(q, 60),
                st.name()
            )
        }
        _ => format!(
            "{} on QP {:#08x}, WQE counter {:#06x}, {} bytes",
            c::cqe_opcode_name(opcode),
            be24(q, 57),
            be16(q, 60),
            be32(q, 44)
        ),
    }
}

/// What a mini-CQE completes, given its title.
fn mini_text(title: &[u8], m: &[u8], responder_counter: u16) -> String {
    let opcode = title[63] >> 4;
    let qpn = be24(title, 57);
    if role_of(title) == Role::Requester {
        format!(
            "REQ {} on QP {qpn:#08x}, WQE counter {:#06x}, {} bytes (mini-CQE)",
            send_op(m[2]),
            be16(m, 0),
            be32(m, 4)
        )
    } else {
        format!(
            "{} on QP {qpn:#08x}, WQE counter {responder_counter:#06x}, {} bytes (mini-CQE)",
            c::cqe_opcode_name(opcode),
            be32(m, 4)
        )
    }
}

/// A basic-layout session at slot `i`: the title, then mini-CQE arrays at slots i+1, i+8,
/// i+16, ...; N completions take N slots (Linux en_rx.c `mlx5e_decompress_cqes_start` /
/// `_cont`; DPDK mlx5_rx.c `mlx5_rx_poll_len`). Returns the slot after the session.
fn basic_session(
    r: &mut Report,
    done: &mut Vec<Completion>,
    b: &[u8],
    cqe_size: usize,
    i: usize,
    slots: usize,
) -> Result<usize, Error> {
    let q_of = |j: usize| &b[j * cqe_size + cqe_size - 64..(j + 1) * cqe_size];
    let t = q_of(i);
    let n = be32(t, 44) as usize;
    if n < 2 {
        return Err(Error::Compressed {
            offset: i * cqe_size,
            why: format!(
                "a basic-layout title's byte_cnt counts the session's completions, at least 2, not {n}"
            ),
        });
    }
    let mut s = Report::default();
    slot(&mut s, b, i * cqe_size, cqe_size, Zip::Basic)?;
    s.notes.clear();
    absorb(r, s, i);
    let role = role_of(t);
    // The array holding completion k: slot i+1 for the first 8, then slot i+8m for 8m..8m+7.
    let array_slot = |k: usize| {
        if k < MINIS_PER_ARRAY {
            i + 1
        } else {
            i + k / MINIS_PER_ARRAY * MINIS_PER_ARRAY
        }
    };
    // Only the part of the session that is in the input (n comes from the device's bytes).
    let end = i.saturating_add(n).min(slots);
    for j in i + 1..end {
        let o = j * cqe_size + cqe_size - 64;
        let q = q_of(j);
        let d = j - i;
        let first = if d == 1 {
            Some(0)
        } else if d.is_multiple_of(MINIS_PER_ARRAY) {
            Some(d)
        } else {
            None
        };
        match first {
            Some(k0) => {
                let count = (n - k0).min(MINIS_PER_ARRAY);
                r.section(
                    format!(
                        "slot {j}: mini-CQE array (basic layout), completions {k0}..={}",
                        k0 + count - 1
                    ),
                    o,
                    64,
                );
                for e in 0..count {
                    r.section(
                        format!("slot {j}: mini-CQE {e} = completion {}", k0 + e),
                        o + 8 * e,
                        8,
                    );
                    mini(r, &q[8 * e..8 * e + 8], o + 8 * e, role);
                }
                if count < MINIS_PER_ARRAY {
                    r.section(
                        format!("slot {j}: rest of the array"),
                        o + 8 * count,
                        64 - 8 * count,
                    );
                    r.add(
                        o + 8 * count,
                        &q[8 * count..],
                        "array.unused",
                        "mini-CQE entries past the session's last completion",
                    );
                }
            }
            None => {
                r.section(
                    format!("slot {j}: inside the compressed session"),
                    j * cqe_size,
                    cqe_size,
                );
                r.add(
                    j * cqe_size,
                    &b[j * cqe_size..(j + 1) * cqe_size],
                    "session.hole",
                    "not written by the device for this session: the consumer re-marks it (Linux \
                     en_rx.c `mlx5e_cqes_update_owner`, DPDK writes MLX5_CQE_INVALIDATE)",
                );
            }
        }
    }
    for k in 0..end - i {
        let a = array_slot(k);
        if a >= slots {
            break;
        }
        let q = q_of(a);
        let e = k % MINIS_PER_ARRAY;
        let m = &q[8 * e..8 * e + 8];
        // Responder: the title's WQE counter is the first completion's, then +1 each
        // (Linux en_rx.c `mlx5e_decompress_cqe` on a cyclic RQ).
        done.push(Completion {
            slot: i + k,
            raw: a * cqe_size + cqe_size - 64 + 8 * e,
            len: 8,
            text: mini_text(t, m, be16(t, 60).wrapping_add(k as u16)),
        });
    }
    if i.saturating_add(n) > slots {
        r.notes.push(format!(
            "slot {i}: the session has {n} completions, {} of them past the end of the input",
            i.saturating_add(n) - slots
        ));
    }
    Ok(end.max(i + 1))
}

/// An enhanced-layout block at slot `i`: one slot of up to 7 mini-CQEs standing for as many
/// completions, which take that many slots; their shared fields are the last uncompressed
/// CQE's (UCX ib_mlx5.c `uct_ib_mlx5_iface_cqe_unzip`; DPDK mlx5_rx.c). Returns the slot
/// after the block.
fn enhanced_block(
    r: &mut Report,
    done: &mut Vec<Completion>,
    b: &[u8],
    cqe_size: usize,
    i: usize,
    slots: usize,
    title: &mut Option<(usize, u16)>,
) -> Result<usize, Error> {
    let q_of = |j: usize| &b[j * cqe_size + cqe_size - 64..(j + 1) * cqe_size];
    let q = q_of(i);
    let n = (q[63] >> 4) as usize + 1;
    let o = i * cqe_size + cqe_size - 64;
    if n > MINIS_PER_BLOCK {
        return Err(Error::Compressed {
            offset: o,
            why: format!(
                "an enhanced block holds at most {MINIS_PER_BLOCK} mini-CQEs, op_own bits 7:4 say {n}"
            ),
        });
    }
    if cqe_size == 128 {
        let mut s = Report::default();
        first_half(
            &mut s,
            &b[i * cqe_size..i * cqe_size + 64],
            i * cqe_size,
            q,
            3,
        );
        absorb(r, s, i);
    }
    let t = title.map(|(ti, _)| q_of(ti));
    let mut s = Report::default();
    mini_block(&mut s, q, o, n, t);
    absorb(r, s, i);
    for j in i + 1..(i + n).min(slots) {
        r.section(
            format!("slot {j}: inside the compressed block"),
            j * cqe_size,
            cqe_size,
        );
        r.add(
            j * cqe_size,
            &b[j * cqe_size..(j + 1) * cqe_size],
            "block.hole",
            "stands for one of the block's completions; not written by the device (UCX rewrites \
             its op_own and signature while unzipping)",
        );
    }
    match (t, title.as_mut()) {
        (Some(t), Some((_, counter))) => {
            for k in 0..n {
                let m = &q[8 * k..8 * k + 8];
                // Responder: one past the title (or the previous block), then +1 each.
                *counter = counter.wrapping_add(1);
                done.push(Completion {
                    slot: i + k,
                    raw: o + 8 * k,
                    len: 8,
                    text: mini_text(t, m, *counter),
                });
            }
        }
        _ => r.notes.push(format!(
            "slot {i}: no uncompressed CQE precedes this block in the input: its {n} completion(s) \
             share the fields of that title CQE, so they are not listed"
        )),
    }
    Ok((i + n).min(slots))
}
