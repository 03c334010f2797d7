//! Reading send WQEs the way the NIC does: fetch 16-byte units from the SQ ring (wrapping at
//! the ring end, `docs/sources.md` §4, "Wrap"), or take the BlueFlame register copy, then decode
//! the segments and reject what hardware rejects.
//!
//! Segment order: ctrl, then the datagram segment (UD, DCI), the remote-address segment, the atomic
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
//!
//! Here: fetching and [`parse`]; the ctrl segment in `ctrl.rs`, the segments after it in
//! `segments.rs`, atomics in `atomic.rs`.

mod atomic;
mod ctrl;
mod segments;

pub use atomic::{AtomicEndianness, AtomicOp};
pub use ctrl::Ctrl;
pub use segments::{DcAddr, Gather, Piece, Raddr, UdDest};

use mlx5_cq::{SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_QP_OP_ERR};
use mlx5_hw::QpType;
use mlx5_wqe::{
    CTRL_CE_MASK, CTRL_FM_MASK, CTRL_SOLICITED, OPCODE_ATOMIC_CS, OPCODE_ATOMIC_FA,
    OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA, OPCODE_NOP, OPCODE_RDMA_READ,
    OPCODE_RDMA_WRITE, OPCODE_RDMA_WRITE_IMM, OPCODE_SEND, OPCODE_SEND_IMM,
};

use crate::mem::DmaBuf;
use crate::srq::Sge;
use segments::Reader;

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
    /// DC initiator: the target of the datagram segment after ctrl.
    pub dc: Option<DcAddr>,
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

pub(super) fn op_err(why: String) -> WqeFault {
    WqeFault {
        syndrome: SYNDROME_LOCAL_QP_OP_ERR,
        why,
    }
}

pub(super) fn len_err(why: String) -> WqeFault {
    WqeFault {
        syndrome: SYNDROME_LOCAL_LENGTH_ERR,
        why,
    }
}

pub(super) fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

pub(super) fn be64(b: &[u8], o: usize) -> u64 {
    (be32(b, o) as u64) << 32 | be32(b, o + 4) as u64
}

/// Whether `opcode` is a send opcode `qp_type` accepts (IBTA Vol 1 §9.8: UC has SEND and
/// WRITE, UD only SEND; the sim implements NOP, SEND(_IMM), WRITE(_IMM), READ and the
/// plain and masked atomics).
pub fn opcode_allowed(qp_type: QpType, opcode: u8) -> bool {
    match opcode {
        OPCODE_NOP | OPCODE_SEND | OPCODE_SEND_IMM => true,
        _ if matches!(qp_type, QpType::XrcRecv | QpType::Dct) => false,
        OPCODE_RDMA_WRITE | OPCODE_RDMA_WRITE_IMM => qp_type != QpType::Ud,
        OPCODE_RDMA_READ
        | OPCODE_ATOMIC_CS
        | OPCODE_ATOMIC_FA
        | OPCODE_ATOMIC_MASKED_CS
        | OPCODE_ATOMIC_MASKED_FA => matches!(qp_type, QpType::Rc | QpType::XrcSend | QpType::Dci),
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
    let mut r = Reader::new(&b[..ds * 16]);
    if ctrl.opcode == OPCODE_NOP {
        return Ok(SendWqe {
            ctrl,
            kind: WqeKind::Nop,
            xrc_srqn: None,
            dc: None,
        });
    }
    let xrc_srqn = match lim.qp_type {
        QpType::XrcSend => Some(r.xrc()?),
        _ => None,
    };
    let ud = match lim.qp_type {
        QpType::Ud => Some(r.datagram()?),
        _ => None,
    };
    let dc = match lim.qp_type {
        QpType::Dci => Some(r.dc()?),
        _ => None,
    };
    let remote = match ctrl.opcode {
        OPCODE_RDMA_WRITE
        | OPCODE_RDMA_WRITE_IMM
        | OPCODE_RDMA_READ
        | OPCODE_ATOMIC_CS
        | OPCODE_ATOMIC_FA
        | OPCODE_ATOMIC_MASKED_CS
        | OPCODE_ATOMIC_MASKED_FA => Some(r.raddr()?),
        _ => None,
    };
    let atomic = atomic::segment(&mut r, &ctrl)?;
    let data = r.data(
        atomic.is_some() || ctrl.opcode == OPCODE_RDMA_READ,
        lim.max_send_sge,
    )?;
    if data.len() > MAX_MSG {
        return Err(len_err(format!(
            "message of {} bytes exceeds 2^31",
            data.len()
        )));
    }
    let kind = kind(&ctrl, lim, data, ud, remote, atomic)?;
    Ok(SendWqe {
        ctrl,
        kind,
        xrc_srqn,
        dc,
    })
}

/// What the WQE asks for, from its decoded segments, with the checks that need them all.
fn kind(
    ctrl: &Ctrl,
    lim: &ParseLimits,
    data: Gather,
    ud: Option<UdDest>,
    remote: Option<Raddr>,
    atomic: Option<AtomicOp>,
) -> Result<WqeKind, WqeFault> {
    let imm = match ctrl.opcode {
        OPCODE_SEND_IMM | OPCODE_RDMA_WRITE_IMM => Some(ctrl.imm),
        _ => None,
    };
    Ok(match ctrl.opcode {
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
    })
}
