//! Send WQEs: ctrl, then the transport segment of the QP type (UD address vector, XRC), the
//! remote-address segment of RDMA and atomic opcodes, the atomic operands, and finally data
//! or inline segments up to the DS count (rdma-core `providers/mlx5/qp.c` `_mlx5_post_send`;
//! `docs/wqe-layout.md` §2–§5). Opcodes whose segments this decoder does not interpret (UMR,
//! PSV, WAIT, ...) are named and their segments shown raw.

use mlx5_wqe as w;

use super::bytes::{be16, be24, be32, be64, gid, take};
use super::names::{fm_ce_se, send_opcode_name};
use super::{Error, QpType, Report};

/// Decode a send WQE given linearly (a WQE that wrapped in the ring must be unwrapped first).
pub(crate) fn decode(b: &[u8], qp_type: QpType) -> Result<Report, Error> {
    let mut r = Report::default();
    let c = take(b, 0, 16, b.len(), "ctrl segment")?;
    let opcode = c[3];
    let opmod = c[0];
    let ds = c[7];
    let name = send_opcode_name(opcode).ok_or(Error::UnknownOpcode(opcode))?;
    let ds_units = ds & w::MAX_DS as u8;
    if ds_units == 0 {
        return Err(Error::ZeroDs);
    }
    let size = ds_units as usize * w::SEND_WQE_DS;
    if size > b.len() {
        return Err(Error::DsBeyondInput {
            ds: ds_units,
            need: size,
            have: b.len(),
        });
    }
    r.summary = format!(
        "send WQE: {name} ({} QP), {ds_units} DS = {size} bytes = {} basic block(s)",
        match qp_type {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::Xrc => "XRC",
        },
        w::bbs_for_ds(ds_units as u32)
    );

    ctrl(&mut r, c, name);
    let mut off = 16;
    match qp_type {
        QpType::Ud => off = av(&mut r, b, off, size)?,
        // rdma-core posts BIND_MW and LOCAL_INV as UMR WQEs and leaves the XRC segment out of
        // them (qp.c `_mlx5_post_send`, case IBV_QPT_XRC_SEND).
        QpType::Xrc
            if matches!(
                opcode,
                w::OPCODE_UMR | w::OPCODE_BIND_MW | w::OPCODE_LOCAL_INVAL
            ) =>
        {
            r.notes.push(format!(
                "XRC QP: a {name} WQE carries no XRC segment (rdma-core qp.c `_mlx5_post_send` \
                 leaves it out of BIND_MW and LOCAL_INV)"
            ));
        }
        QpType::Xrc => {
            let s = take(b, off, 16, size, "XRC segment")?;
            r.section("XRC segment (struct mlx5_wqe_xrc_seg)", off, 16);
            r.add(
                off,
                &s[..4],
                "xrc.xrc_srqn",
                format!("XRC SRQ {:#08x}", be32(s, 0)),
            );
            r.add(off + 4, &s[4..], "xrc.reserved", "reserved");
            off += 16;
        }
        QpType::Rc | QpType::Uc => {}
    }

    let needs_raddr = matches!(
        opcode,
        w::OPCODE_RDMA_WRITE
            | w::OPCODE_RDMA_WRITE_IMM
            | w::OPCODE_RDMA_READ
            | w::OPCODE_ATOMIC_CS
            | w::OPCODE_ATOMIC_FA
            | w::OPCODE_ATOMIC_MASKED_CS
            | w::OPCODE_ATOMIC_MASKED_FA
    );
    if needs_raddr {
        let s = take(b, off, 16, size, "remote-address segment")?;
        r.section(
            "remote-address segment (struct mlx5_wqe_raddr_seg)",
            off,
            16,
        );
        r.add(
            off,
            &s[..8],
            "raddr.raddr",
            format!("remote address {:#018x}", be64(s, 0)),
        );
        r.add(
            off + 8,
            &s[8..12],
            "raddr.rkey",
            format!("rkey {:#010x}", be32(s, 8)),
        );
        r.add(off + 12, &s[12..], "raddr.reserved", "reserved");
        off += 16;
    }
    off = atomic(&mut r, b, off, size, opcode, opmod)?;

    // The opcodes whose remaining segments are data or inline segments (§4 of the layout
    // reference); every other one is shown raw after ctrl.
    let decodable = matches!(
        opcode,
        w::OPCODE_NOP
            | w::OPCODE_SEND_INVAL
            | w::OPCODE_RDMA_WRITE
            | w::OPCODE_RDMA_WRITE_IMM
            | w::OPCODE_SEND
            | w::OPCODE_SEND_IMM
            | w::OPCODE_RDMA_READ
            | w::OPCODE_ATOMIC_CS
            | w::OPCODE_ATOMIC_FA
            | w::OPCODE_ATOMIC_MASKED_CS
            | w::OPCODE_ATOMIC_MASKED_FA
    );
    if decodable {
        data_or_inline(&mut r, b, off, size)?;
    } else if off < size {
        let s = take(b, off, size - off, size, "segments")?;
        r.section(format!("{name} segments (not decoded)"), off, size - off);
        r.add(
            off,
            s,
            "raw",
            format!("{} bytes this decoder does not interpret", s.len()),
        );
    }
    if b.len() > size {
        r.notes.push(format!(
            "{} byte(s) after the WQE's {size} bytes (DS {ds_units}) are not part of it",
            b.len() - size
        ));
    }
    Ok(r)
}

fn ctrl(r: &mut Report, c: &[u8], name: &str) {
    r.section("ctrl segment (struct mlx5_wqe_ctrl_seg)", 0, 16);
    let opmod = c[0];
    let opmod_text = match (c[3], opmod) {
        (_, 0) => "0".to_string(),
        (w::OPCODE_ATOMIC_MASKED_CS | w::OPCODE_ATOMIC_MASKED_FA, 0x08) => {
            "0x08: extended atomic, 4-byte operands".to_string()
        }
        (w::OPCODE_ATOMIC_MASKED_CS | w::OPCODE_ATOMIC_MASKED_FA, 0x09) => {
            "0x09: extended atomic, 8-byte operands".to_string()
        }
        (_, m) => format!("{m:#04x}"),
    };
    r.add(
        0,
        &c[0..1],
        "ctrl.opmod",
        format!("opcode modifier {opmod_text}"),
    );
    r.add(
        1,
        &c[1..3],
        "ctrl.wqe_index",
        format!(
            "WQE index {:#06x} (producer index of the first basic block)",
            be16(c, 1)
        ),
    );
    r.add(3, &c[3..4], "ctrl.opcode", format!("{:#04x} {name}", c[3]));
    r.add(
        4,
        &c[4..7],
        "ctrl.qpn",
        format!("QP number {:#08x}", be24(c, 4)),
    );
    let ds = c[7];
    let ds_text = if ds & 0xc0 != 0 {
        format!(
            "{} DS ({} bytes); bits 7:6 set but ignored",
            ds & 0x3f,
            (ds & 0x3f) as usize * 16
        )
    } else {
        format!("{ds} DS = {} bytes", ds as usize * 16)
    };
    r.add(7, &c[7..8], "ctrl.ds", ds_text);
    let sig = if c[8] == 0 {
        "0 (no WQE signature)".to_string()
    } else {
        format!("{:#04x}", c[8])
    };
    r.add(8, &c[8..9], "ctrl.signature", sig);
    r.add(
        9,
        &c[9..11],
        "ctrl.dci_stream_channel_id",
        format!("{:#06x} (DCI streams only)", be16(c, 9)),
    );
    r.add(11, &c[11..12], "ctrl.fm_ce_se", fm_ce_se(c[11]));
    let imm = match c[3] {
        w::OPCODE_SEND_IMM | w::OPCODE_RDMA_WRITE_IMM => {
            format!(
                "immediate {:02x} {:02x} {:02x} {:02x} (network order)",
                c[12], c[13], c[14], c[15]
            )
        }
        w::OPCODE_SEND_INVAL => format!("rkey to invalidate {:#010x}", be32(c, 12)),
        w::OPCODE_UMR | w::OPCODE_LOCAL_INVAL | w::OPCODE_BIND_MW => {
            format!("mkey {:#010x}", be32(c, 12))
        }
        _ => format!("{:#010x} (unused by {name})", be32(c, 12)),
    };
    r.add(12, &c[12..16], "ctrl.imm", imm);
}

/// The UD address vector: 48 bytes when bit 31 of `dqp_dct` is set, else the 16-byte compact AV.
fn av(r: &mut Report, b: &[u8], off: usize, size: usize) -> Result<usize, Error> {
    let base = take(b, off, 16, size, "address vector")?;
    let ext = base[8] & 0x80 != 0;
    let len = if ext { 48 } else { 16 };
    let s = take(b, off, len, size, "extended address vector")?;
    let kind = if ext { "full" } else { "compact" };
    r.section(
        format!("datagram segment, {kind} address vector (struct mlx5_wqe_av)"),
        off,
        len,
    );
    r.add(
        off,
        &s[0..4],
        "av.qkey",
        format!("Q_Key {:#010x}", be32(s, 0)),
    );
    r.add(
        off + 4,
        &s[4..8],
        "av.key_reserved",
        "reserved (low half of the DC key)",
    );
    let dqp = be32(s, 8);
    let ext_text = if ext { "EXTENDED_UD_AV | " } else { "" };
    r.add(
        off + 8,
        &s[8..12],
        "av.dqp_dct",
        format!("{ext_text}destination QP {:#08x}", dqp & 0x00ff_ffff),
    );
    r.add(
        off + 12,
        &s[12..13],
        "av.stat_rate_sl",
        format!(
            "static rate code {}, SL bits {:#x}",
            s[12] >> 4,
            s[12] & 0xf
        ),
    );
    r.add(
        off + 13,
        &s[13..14],
        "av.fl_mlid",
        format!("{:#04x} (force loopback / path bits)", s[13]),
    );
    r.add(
        off + 14,
        &s[14..16],
        "av.rlid",
        format!("{:#06x} (IB: DLID; RoCE v2: UDP source port)", be16(s, 14)),
    );
    if ext {
        r.add(off + 16, &s[16..20], "av.reserved0", "reserved");
        let m = &s[20..26];
        r.add(
            off + 20,
            m,
            "av.rmac",
            format!(
                "MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
        );
        r.add(
            off + 26,
            &s[26..27],
            "av.tclass",
            format!("traffic class {:#04x}", s[26]),
        );
        r.add(
            off + 27,
            &s[27..28],
            "av.hop_limit",
            format!("hop limit {}", s[27]),
        );
        let g = be32(s, 28);
        let grh = if g & w::AV_GRH_PRESENT != 0 {
            "GRH | "
        } else {
            ""
        };
        r.add(
            off + 28,
            &s[28..32],
            "av.grh_gid_fl",
            format!(
                "{grh}SGID index {}, flow label {:#07x}",
                (g >> 20) & 0xff,
                g & 0xf_ffff
            ),
        );
        r.add(
            off + 32,
            &s[32..48],
            "av.rgid",
            format!("GID {}", gid(&s[32..48])),
        );
    }
    Ok(off + len)
}

fn atomic(
    r: &mut Report,
    b: &[u8],
    off: usize,
    size: usize,
    opcode: u8,
    opmod: u8,
) -> Result<usize, Error> {
    match opcode {
        w::OPCODE_ATOMIC_CS | w::OPCODE_ATOMIC_FA => {
            let s = take(b, off, 16, size, "atomic segment")?;
            r.section("atomic segment (struct mlx5_wqe_atomic_seg)", off, 16);
            let (a, c) = if opcode == w::OPCODE_ATOMIC_CS {
                ("swap value", "compare value")
            } else {
                ("add value", "unused by fetch-and-add")
            };
            r.add(
                off,
                &s[..8],
                "atomic.swap_add",
                format!("{a} {:#018x}", be64(s, 0)),
            );
            r.add(
                off + 8,
                &s[8..],
                "atomic.compare",
                format!("{c} {:#018x}", be64(s, 8)),
            );
            Ok(off + 16)
        }
        w::OPCODE_ATOMIC_MASKED_CS | w::OPCODE_ATOMIC_MASKED_FA => {
            let cs = opcode == w::OPCODE_ATOMIC_MASKED_CS;
            match opmod {
                w::OPMOD_EXT_ATOMIC_32 => {
                    let s = take(b, off, 16, size, "masked atomic segment")?;
                    if cs {
                        r.section("masked compare-and-swap segment, 4-byte operands", off, 16);
                        r.add(
                            off,
                            &s[0..4],
                            "matomic.swap",
                            format!("swap {:#010x}", be32(s, 0)),
                        );
                        r.add(
                            off + 4,
                            &s[4..8],
                            "matomic.compare",
                            format!("compare {:#010x}", be32(s, 4)),
                        );
                        r.add(
                            off + 8,
                            &s[8..12],
                            "matomic.swap_mask",
                            format!("swap mask {:#010x}", be32(s, 8)),
                        );
                        r.add(
                            off + 12,
                            &s[12..16],
                            "matomic.compare_mask",
                            format!("compare mask {:#010x}", be32(s, 12)),
                        );
                    } else {
                        r.section("masked fetch-and-add segment, 4-byte operands", off, 16);
                        r.add(
                            off,
                            &s[0..4],
                            "matomic.add",
                            format!("add {:#010x}", be32(s, 0)),
                        );
                        r.add(
                            off + 4,
                            &s[4..8],
                            "matomic.field_boundary",
                            format!("field boundary {:#010x}", be32(s, 4)),
                        );
                        r.add(off + 8, &s[8..16], "matomic.reserved", "reserved");
                    }
                    Ok(off + 16)
                }
                w::OPMOD_EXT_ATOMIC_64 if cs => {
                    let s = take(b, off, 32, size, "masked compare-and-swap segment")?;
                    r.section("masked compare-and-swap segment, 8-byte operands (struct mlx5_wqe_masked_atomic_seg)", off, 32);
                    r.add(
                        off,
                        &s[0..8],
                        "matomic.swap_add",
                        format!("swap {:#018x}", be64(s, 0)),
                    );
                    r.add(
                        off + 8,
                        &s[8..16],
                        "matomic.compare",
                        format!("compare {:#018x}", be64(s, 8)),
                    );
                    r.add(
                        off + 16,
                        &s[16..24],
                        "matomic.swap_add_mask",
                        format!("swap mask {:#018x}", be64(s, 16)),
                    );
                    r.add(
                        off + 24,
                        &s[24..32],
                        "matomic.compare_mask",
                        format!("compare mask {:#018x}", be64(s, 24)),
                    );
                    Ok(off + 32)
                }
                w::OPMOD_EXT_ATOMIC_64 => {
                    let s = take(b, off, 16, size, "masked fetch-and-add segment")?;
                    r.section("masked fetch-and-add segment, 8-byte operands", off, 16);
                    r.add(
                        off,
                        &s[0..8],
                        "matomic.add",
                        format!("add {:#018x}", be64(s, 0)),
                    );
                    r.add(
                        off + 8,
                        &s[8..16],
                        "matomic.field_boundary",
                        format!("field boundary {:#018x}", be64(s, 8)),
                    );
                    Ok(off + 16)
                }
                m => Err(Error::UnknownAtomicOpmod(m)),
            }
        }
        _ => Ok(off),
    }
}

/// Data segments, or an inline segment, until the DS count is used up.
fn data_or_inline(r: &mut Report, b: &[u8], mut off: usize, size: usize) -> Result<(), Error> {
    let mut n = 0;
    while off < size {
        let head = take(b, off, 4, size, "data segment")?;
        let bc = be32(head, 0);
        if bc & w::INLINE_SEG != 0 {
            let len = (bc & !w::INLINE_SEG) as usize;
            let seg = w::inline_seg_size(len);
            let s = take(b, off, 4 + len, size, "inline data")?;
            r.section(
                "inline data segment (struct mlx5_wqe_inl_data_seg + payload)",
                off,
                seg,
            );
            r.add(
                off,
                &s[..4],
                "inline.byte_count",
                format!("INLINE_SEG | {len} bytes"),
            );
            if len > 0 {
                r.add(
                    off + 4,
                    &s[4..],
                    "inline.data",
                    format!("{len} payload bytes"),
                );
            }
            let pad = seg.min(size - off) - 4 - len;
            if pad > 0 {
                r.add(
                    off + 4 + len,
                    &b[off + 4 + len..off + 4 + len + pad],
                    "inline.pad",
                    "padding to 16 bytes",
                );
            }
            off += seg;
        } else {
            let s = take(b, off, 16, size, "data segment")?;
            r.section(
                format!("data segment {n} (struct mlx5_wqe_data_seg)"),
                off,
                16,
            );
            let bc_text = if bc & 0x8000_0000 != 0 {
                format!("{bc} bytes (bit 31 set: invalid for a pointer segment)")
            } else {
                format!("{bc} bytes")
            };
            r.add(off, &s[0..4], "data.byte_count", bc_text);
            let lkey = be32(s, 4);
            let lkey_text = if lkey == w::INVALID_LKEY {
                "MLX5_INVALID_LKEY (list terminator)".to_string()
            } else {
                format!("lkey {lkey:#010x}")
            };
            r.add(off + 4, &s[4..8], "data.lkey", lkey_text);
            r.add(
                off + 8,
                &s[8..16],
                "data.addr",
                format!("address {:#018x}", be64(s, 8)),
            );
            off += 16;
            n += 1;
        }
    }
    Ok(())
}
