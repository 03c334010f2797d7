//! Reading send WQEs the way the NIC does: fetch 16-byte units from the SQ ring (wrapping at
//! the ring end, `docs/sources.md` §4, "Wrap"), or take the BlueFlame register copy, then decode
//! the segments and reject what hardware rejects.
//!
//! Segment order: ctrl, then the datagram segment (UD), the remote-address segment, the atomic
//! or masked-atomic segment, then data segments or one inline segment (rdma-core
//! `providers/mlx5/qp.c` `_mlx5_post_send`).
//!
//! Syndromes of a malformed WQE (IBTA Vol 1 §11.6.2, completion status descriptions; rdma-core
//! maps mlx5 syndromes to those statuses in `mlx5_handle_error_cqe`):
//! - LOCAL_QP_OP_ERR (0x02), "an internal QP consistency error was detected while processing
//!   this work request": an opcode the QP type does not allow, another QP's number, DS 0 or a
//!   WQE larger than the ring, an inline length that disagrees with DS, more data segments
//!   than the QP was created for, a masked atomic with an unknown opmod.
//! - LOCAL_LENGTH_ERR (0x01), "the sum of the data segment lengths exceeded the message length
//!   for the channel": a UD message above the path MTU, a message above 2^31 bytes, an atomic
//!   whose local buffer is shorter than its operand. For the UD case IBTA Vol 1 C10-93.1.1
//!   says the CI emits no packet *and reports no error* (the Linux rxe driver completes such
//!   a send successfully, `rxe_req.c`); what ConnectX does is not in any public source we
//!   found. The software ConnectX sends nothing and completes the WQE with LOCAL_LENGTH so the
//!   mistake is visible (UNCONFIRMED on hardware).

use mlx5_cq::{SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_QP_OP_ERR};
use mlx5_hw::QpType;
use mlx5_wqe::{
    CTRL_CE_MASK, CTRL_FM_MASK, CTRL_SOLICITED, EXTENDED_UD_AV, INLINE_SEG, OPCODE_ATOMIC_CS,
    OPCODE_ATOMIC_FA, OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA, OPCODE_NOP,
    OPCODE_RDMA_READ, OPCODE_RDMA_WRITE, OPCODE_RDMA_WRITE_IMM, OPCODE_SEND, OPCODE_SEND_IMM,
    OPMOD_EXT_ATOMIC_32, OPMOD_EXT_ATOMIC_64,
};

use crate::mem::DmaBuf;
use crate::srq::Sge;

/// Largest message (IBTA Vol 1 §9.4: 2^31 bytes).
pub const MAX_MSG: u64 = 1 << 31;

/// Copy `n` bytes of the SQ ring starting at the basic block of `index`, wrapping at the end.
pub fn ring_bytes(buf: &DmaBuf, sq_off: usize, wqe_cnt: u32, index: u16, n: usize) -> Vec<u8> {
    let ring = wqe_cnt as usize * 64;
    let mut out = vec![0u8; n];
    if ring == 0 {
        return out;
    }
    let mut pos = (index as usize & (wqe_cnt as usize - 1)) * 64;
    let mut done = 0;
    while done < n {
        let chunk = (ring - pos).min(n - done);
        buf.read(sq_off + pos, &mut out[done..done + chunk]);
        done += chunk;
        pos = (pos + chunk) % ring;
    }
    out
}

/// The decoded control segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctrl {
    /// opmod.
    pub opmod: u8,
    /// WQE index.
    pub index: u16,
    /// Opcode.
    pub opcode: u8,
    /// QPN.
    pub qpn: u32,
    /// DS count byte (bits 7:0 of `qpn_ds`).
    pub ds: u8,
    /// fm_ce_se.
    pub fm_ce_se: u8,
    /// Immediate bytes as in memory (network order).
    pub imm: [u8; 4],
}

impl Ctrl {
    /// Decode the first 16 bytes.
    pub fn parse(b: &[u8]) -> Ctrl {
        let mut c = [0u8; 16];
        let n = b.len().min(16);
        c[..n].copy_from_slice(&b[..n]);
        let w0 = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        let w1 = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
        Ctrl {
            opmod: (w0 >> 24) as u8,
            index: (w0 >> 8) as u16,
            opcode: w0 as u8,
            qpn: w1 >> 8,
            ds: w1 as u8,
            fm_ce_se: c[11],
            imm: [c[12], c[13], c[14], c[15]],
        }
    }

    /// Basic blocks the WQE occupies (at least one, so a garbage DS still advances).
    pub fn bbs(&self) -> u16 {
        (self.ds as u16).div_ceil(4).max(1)
    }
}

/// Remote address and key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raddr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
}

/// UD destination (from the datagram segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Q_Key from the WQE.
    pub qkey: u32,
    /// Destination QPN.
    pub dqpn: u32,
    /// Extended (48-byte) AV.
    pub extended: bool,
    /// Destination LID / UDP source port.
    pub rlid: u16,
    /// Destination MAC.
    pub rmac: [u8; 6],
    /// Destination GID.
    pub rgid: [u8; 16],
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub tclass: u8,
}

/// Local data of a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gather {
    /// Inline payload.
    Inline(Vec<u8>),
    /// Gather list.
    Sges(Vec<Sge>),
}

impl Gather {
    /// Total bytes.
    pub fn len(&self) -> u64 {
        match self {
            Gather::Inline(v) => v.len() as u64,
            Gather::Sges(s) => s.iter().map(|s| s.len as u64).sum(),
        }
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// 8-byte compare and swap.
    Cas {
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch and add.
    Faa {
        /// Addend.
        add: u64,
    },
    /// Masked compare and swap on 4 or 8 bytes.
    MaskedCs {
        /// Operand size (4 or 8).
        size: u8,
        /// Compare value.
        compare: u64,
        /// Compare mask.
        compare_mask: u64,
        /// Swap value.
        swap: u64,
        /// Swap mask.
        swap_mask: u64,
    },
    /// Masked fetch and add on 4 or 8 bytes.
    MaskedFa {
        /// Operand size (4 or 8).
        size: u8,
        /// Addend.
        add: u64,
        /// Field boundary bits.
        boundary: u64,
    },
}

impl AtomicOp {
    /// Operand size in bytes.
    pub fn size(&self) -> u8 {
        match self {
            AtomicOp::Cas { .. } | AtomicOp::Faa { .. } => 8,
            AtomicOp::MaskedCs { size, .. } | AtomicOp::MaskedFa { size, .. } => *size,
        }
    }

    /// Whether this is a masked (extended) atomic.
    pub fn is_masked(&self) -> bool {
        matches!(self, AtomicOp::MaskedCs { .. } | AtomicOp::MaskedFa { .. })
    }

    /// Apply the operation to `old`, returning the new value (operands of `size` bytes).
    pub fn apply(&self, old: u64) -> u64 {
        let mask = if self.size() == 4 {
            0xffff_ffff
        } else {
            u64::MAX
        };
        let new = match *self {
            AtomicOp::Cas { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::Faa { add } => old.wrapping_add(add),
            AtomicOp::MaskedCs {
                compare,
                compare_mask,
                swap,
                swap_mask,
                ..
            } => {
                if (old & compare_mask) == (compare & compare_mask) {
                    (old & !swap_mask) | (swap & swap_mask)
                } else {
                    old
                }
            }
            AtomicOp::MaskedFa {
                size,
                add,
                boundary,
            } => field_add(old, add, boundary, size),
        };
        new & mask
    }
}

/// Add `a + b` bit by bit, dropping the carry out of every bit set in `boundary` (each set bit
/// ends a field; UCX `uct_ib_mlx5_atomic_masked_fadd*`, mlx5 extended atomics).
fn field_add(a: u64, b: u64, boundary: u64, size: u8) -> u64 {
    let bits = size as u32 * 8;
    let mut r = 0u64;
    let mut carry = 0u64;
    for i in 0..bits {
        let s = ((a >> i) & 1) + ((b >> i) & 1) + carry;
        r |= (s & 1) << i;
        carry = s >> 1;
        if (boundary >> i) & 1 == 1 {
            carry = 0;
        }
    }
    r
}

/// What a send WQE asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WqeKind {
    /// NOP.
    Nop,
    /// SEND / SEND_IMM.
    Send {
        /// Data.
        data: Gather,
        /// Immediate.
        imm: Option<[u8; 4]>,
        /// UD destination.
        ud: Option<UdDest>,
    },
    /// RDMA WRITE / WRITE_IMM.
    Write {
        /// Remote buffer.
        remote: Raddr,
        /// Data.
        data: Gather,
        /// Immediate.
        imm: Option<[u8; 4]>,
    },
    /// RDMA READ.
    Read {
        /// Remote buffer.
        remote: Raddr,
        /// Local scatter list.
        local: Vec<Sge>,
    },
    /// Atomic.
    Atomic {
        /// Remote word.
        remote: Raddr,
        /// Operation.
        op: AtomicOp,
        /// Local buffer for the original value.
        local: Sge,
    },
}

/// A decoded send WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWqe {
    /// The control segment.
    pub ctrl: Ctrl,
    /// What to do.
    pub kind: WqeKind,
    /// XRC initiator: the remote XRC SRQ of the XRC segment after ctrl.
    pub xrc_srqn: Option<u32>,
}

impl SendWqe {
    /// CE bits request a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub fn signaled(&self) -> bool {
        self.ctrl.fm_ce_se & CTRL_CE_MASK & 0x08 != 0
    }
    /// Solicited event requested.
    pub fn solicited(&self) -> bool {
        self.ctrl.fm_ce_se & CTRL_SOLICITED != 0
    }
    /// Any fence mode set.
    pub fn fenced(&self) -> bool {
        self.ctrl.fm_ce_se & CTRL_FM_MASK != 0
    }
}

/// Why a WQE is rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WqeFault {
    /// mlx5 syndrome.
    pub syndrome: u8,
    /// What was wrong.
    pub why: String,
}

fn op_err(why: String) -> WqeFault {
    WqeFault {
        syndrome: SYNDROME_LOCAL_QP_OP_ERR,
        why,
    }
}

fn len_err(why: String) -> WqeFault {
    WqeFault {
        syndrome: SYNDROME_LOCAL_LENGTH_ERR,
        why,
    }
}

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn be64(b: &[u8], o: usize) -> u64 {
    (be32(b, o) as u64) << 32 | be32(b, o + 4) as u64
}

/// Whether `opcode` is a send opcode `qp_type` accepts (IBTA Vol 1 §9.8: UC has SEND and
/// WRITE, UD only SEND; the sim implements NOP, SEND(_IMM), WRITE(_IMM), READ and the
/// plain and masked atomics).
pub fn opcode_allowed(qp_type: QpType, opcode: u8) -> bool {
    match opcode {
        OPCODE_NOP | OPCODE_SEND | OPCODE_SEND_IMM => true,
        _ if qp_type == QpType::XrcRecv => false,
        OPCODE_RDMA_WRITE | OPCODE_RDMA_WRITE_IMM => qp_type != QpType::Ud,
        OPCODE_RDMA_READ
        | OPCODE_ATOMIC_CS
        | OPCODE_ATOMIC_FA
        | OPCODE_ATOMIC_MASKED_CS
        | OPCODE_ATOMIC_MASKED_FA => matches!(qp_type, QpType::Rc | QpType::XrcSend),
        _ => false,
    }
}

/// Limits the parser checks against.
#[derive(Clone, Copy, Debug)]
pub struct ParseLimits {
    /// QP type.
    pub qp_type: QpType,
    /// QP number.
    pub qpn: u32,
    /// Data segments a WQE may carry (the QP's max_send_sge).
    pub max_send_sge: u32,
    /// UD: the largest message (path MTU).
    pub ud_mtu: u32,
}

/// Decode a WQE from its `ds × 16` bytes.
pub fn parse(b: &[u8], lim: &ParseLimits) -> Result<SendWqe, WqeFault> {
    let ctrl = Ctrl::parse(b);
    if ctrl.qpn != lim.qpn {
        return Err(op_err(format!(
            "ctrl names QPN {:#x} but the WQE is in QP {:#x}'s ring",
            ctrl.qpn, lim.qpn
        )));
    }
    if !opcode_allowed(lim.qp_type, ctrl.opcode) {
        return Err(op_err(format!(
            "opcode {:#04x} ({}) is not allowed on a {} QP",
            ctrl.opcode,
            mlx5_wqe::opcode_name(ctrl.opcode).unwrap_or("unknown"),
            lim.qp_type
        )));
    }
    let ds = ctrl.ds as usize;
    if b.len() < ds * 16 || ds == 0 {
        return Err(op_err(format!("DS {ds} does not describe the WQE")));
    }
    let b = &b[..ds * 16];
    let mut off = 16;
    let need = |off: usize, n: usize, what: &str| -> Result<(), WqeFault> {
        if off + n > b.len() {
            Err(op_err(format!("DS {ds} ends before the {what} segment")))
        } else {
            Ok(())
        }
    };
    let imm = match ctrl.opcode {
        OPCODE_SEND_IMM | OPCODE_RDMA_WRITE_IMM => Some(ctrl.imm),
        _ => None,
    };
    if ctrl.opcode == OPCODE_NOP {
        return Ok(SendWqe {
            ctrl,
            kind: WqeKind::Nop,
            xrc_srqn: None,
        });
    }
    // XRC segment (rdma-core `_mlx5_post_send`, IBV_QPT_XRC_SEND: right after ctrl).
    let xrc_srqn = if lim.qp_type == QpType::XrcSend {
        need(off, 16, "XRC")?;
        let n = be32(b, off) & 0x00ff_ffff;
        off += 16;
        Some(n)
    } else {
        None
    };
    // Datagram segment.
    let ud = if lim.qp_type == QpType::Ud {
        need(off, 16, "datagram")?;
        let dqp_dct = be32(b, off + 8);
        let extended = dqp_dct & EXTENDED_UD_AV != 0;
        let mut d = UdDest {
            qkey: be32(b, off),
            dqpn: dqp_dct & 0x00ff_ffff,
            extended,
            rlid: u16::from_be_bytes([b[off + 14], b[off + 15]]),
            rmac: [0; 6],
            rgid: [0; 16],
            hop_limit: 0,
            tclass: 0,
        };
        if extended {
            need(off, 48, "extended datagram")?;
            d.rmac.copy_from_slice(&b[off + 20..off + 26]);
            d.tclass = b[off + 26];
            d.hop_limit = b[off + 27];
            d.rgid.copy_from_slice(&b[off + 32..off + 48]);
            off += 48;
        } else {
            off += 16;
        }
        Some(d)
    } else {
        None
    };
    let remote = match ctrl.opcode {
        OPCODE_RDMA_WRITE
        | OPCODE_RDMA_WRITE_IMM
        | OPCODE_RDMA_READ
        | OPCODE_ATOMIC_CS
        | OPCODE_ATOMIC_FA
        | OPCODE_ATOMIC_MASKED_CS
        | OPCODE_ATOMIC_MASKED_FA => {
            need(off, 16, "remote address")?;
            let r = Raddr {
                va: be64(b, off),
                rkey: be32(b, off + 8),
            };
            off += 16;
            Some(r)
        }
        _ => None,
    };
    let atomic = match ctrl.opcode {
        OPCODE_ATOMIC_CS => {
            need(off, 16, "atomic")?;
            let op = AtomicOp::Cas {
                swap: be64(b, off),
                compare: be64(b, off + 8),
            };
            off += 16;
            Some(op)
        }
        OPCODE_ATOMIC_FA => {
            need(off, 16, "atomic")?;
            let op = AtomicOp::Faa { add: be64(b, off) };
            off += 16;
            Some(op)
        }
        OPCODE_ATOMIC_MASKED_CS | OPCODE_ATOMIC_MASKED_FA => {
            let cs = ctrl.opcode == OPCODE_ATOMIC_MASKED_CS;
            let op = match (ctrl.opmod, cs) {
                (OPMOD_EXT_ATOMIC_64, true) => {
                    need(off, 32, "masked atomic")?;
                    AtomicOp::MaskedCs {
                        size: 8,
                        swap: be64(b, off),
                        compare: be64(b, off + 8),
                        swap_mask: be64(b, off + 16),
                        compare_mask: be64(b, off + 24),
                    }
                }
                (OPMOD_EXT_ATOMIC_64, false) => {
                    need(off, 16, "masked atomic")?;
                    AtomicOp::MaskedFa {
                        size: 8,
                        add: be64(b, off),
                        boundary: be64(b, off + 8),
                    }
                }
                (OPMOD_EXT_ATOMIC_32, true) => {
                    need(off, 16, "masked atomic")?;
                    AtomicOp::MaskedCs {
                        size: 4,
                        swap: be32(b, off) as u64,
                        compare: be32(b, off + 4) as u64,
                        swap_mask: be32(b, off + 8) as u64,
                        compare_mask: be32(b, off + 12) as u64,
                    }
                }
                (OPMOD_EXT_ATOMIC_32, false) => {
                    need(off, 16, "masked atomic")?;
                    AtomicOp::MaskedFa {
                        size: 4,
                        add: be32(b, off) as u64,
                        boundary: be32(b, off + 4) as u64,
                    }
                }
                (m, _) => {
                    return Err(op_err(format!(
                        "masked atomic opmod {m:#04x} is neither 0x08 (4-byte) nor 0x09 (8-byte)"
                    )))
                }
            };
            off += if matches!(op, AtomicOp::MaskedCs { size: 8, .. }) {
                32
            } else {
                16
            };
            Some(op)
        }
        _ => None,
    };
    // Data: one inline segment or data segments filling the rest.
    let rest = &b[off..];
    let data = if !rest.is_empty() && be32(rest, 0) & INLINE_SEG != 0 {
        if atomic.is_some() || ctrl.opcode == OPCODE_RDMA_READ {
            return Err(op_err("inline data on a READ or atomic WQE".into()));
        }
        let len = (be32(rest, 0) & !INLINE_SEG) as usize;
        let seg = (4 + len).div_ceil(16) * 16;
        if seg != rest.len() {
            return Err(op_err(format!(
                "inline segment of {len} bytes needs {} DS but the WQE leaves {} DS for it",
                seg / 16,
                rest.len() / 16
            )));
        }
        Gather::Inline(rest[4..4 + len].to_vec())
    } else {
        let n = rest.len() / 16;
        if n as u32 > lim.max_send_sge.max(1) {
            return Err(op_err(format!(
                "{n} data segments but the QP was created with max_send_sge = {}",
                lim.max_send_sge
            )));
        }
        let mut sges = Vec::with_capacity(n);
        for i in 0..n {
            let d = &rest[i * 16..i * 16 + 16];
            let len = be32(d, 0);
            if len & INLINE_SEG != 0 {
                return Err(op_err(format!("data segment {i} has the inline bit set")));
            }
            sges.push(Sge {
                len,
                lkey: be32(d, 4),
                addr: be64(d, 8),
            });
        }
        Gather::Sges(sges)
    };
    if data.len() > MAX_MSG {
        return Err(len_err(format!(
            "message of {} bytes exceeds 2^31",
            data.len()
        )));
    }
    let kind = match ctrl.opcode {
        OPCODE_SEND | OPCODE_SEND_IMM => {
            if ud.is_some() && data.len() > lim.ud_mtu as u64 {
                return Err(len_err(format!(
                    "UD message of {} bytes exceeds the path MTU of {} bytes",
                    data.len(),
                    lim.ud_mtu
                )));
            }
            WqeKind::Send { data, imm, ud }
        }
        OPCODE_RDMA_WRITE | OPCODE_RDMA_WRITE_IMM => WqeKind::Write {
            remote: remote.ok_or_else(|| op_err("no raddr".into()))?,
            data,
            imm,
        },
        OPCODE_RDMA_READ => {
            let Gather::Sges(local) = data else {
                return Err(op_err("READ without data segments".into()));
            };
            WqeKind::Read {
                remote: remote.ok_or_else(|| op_err("no raddr".into()))?,
                local,
            }
        }
        _ => {
            let op = atomic.ok_or_else(|| op_err("no atomic segment".into()))?;
            let Gather::Sges(local) = data else {
                return Err(op_err("atomic without a data segment".into()));
            };
            if local.len() != 1 {
                return Err(op_err(format!(
                    "atomic with {} data segments (needs exactly 1)",
                    local.len()
                )));
            }
            if local[0].len < op.size() as u32 {
                return Err(len_err(format!(
                    "atomic result buffer of {} bytes is smaller than the {}-byte operand",
                    local[0].len,
                    op.size()
                )));
            }
            WqeKind::Atomic {
                remote: remote.ok_or_else(|| op_err("no raddr".into()))?,
                op,
                local: local[0],
            }
        }
    };
    Ok(SendWqe {
        ctrl,
        kind,
        xrc_srqn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_fetch_add_respects_field_boundaries() {
        // Two 8-bit fields in the low 16 bits: boundary bits at 7 and 15.
        let op = AtomicOp::MaskedFa {
            size: 4,
            add: 0x0101,
            boundary: 0x8080,
        };
        assert_eq!(op.apply(0x01ff), 0x0200);
        let plain = AtomicOp::MaskedFa {
            size: 4,
            add: 1,
            boundary: 0,
        };
        assert_eq!(plain.apply(0xffff_ffff), 0);
        let cs = AtomicOp::MaskedCs {
            size: 8,
            compare: 0xab00,
            compare_mask: 0xff00,
            swap: 0x12,
            swap_mask: 0xff,
        };
        assert_eq!(cs.apply(0xab34), 0xab12);
        assert_eq!(cs.apply(0xac34), 0xac34);
    }

    #[test]
    fn ctrl_decode() {
        let b = [
            0x09, 0x12, 0x34, 0x14, 0xab, 0xcd, 0xef, 0x05, 0, 0, 0, 0x08, 1, 2, 3, 4,
        ];
        let c = Ctrl::parse(&b);
        assert_eq!(
            (c.opmod, c.index, c.opcode, c.qpn, c.ds),
            (9, 0x1234, 0x14, 0xabcdef, 5)
        );
        assert_eq!(c.bbs(), 2);
        assert_eq!(c.imm, [1, 2, 3, 4]);
    }
}
