//! Work completions: what [`crate::Cq::poll`] writes into the caller's array.
//!
//! A [`Wc`] is a typed view (in the manner of smoltcp's `wire` types): the WR id the poll
//! recovered, then the bytes of the CQE a completion is made of, copied as the device wrote
//! them — so that the poll's fast paths write a completion in a few whole-word copies and
//! the byte swaps, masks and opcode tables run only in the accessors a caller reads
//! (rdma-core's extended CQ does the same with `ibv_wc_read_*`, verbs.h). [`WcFields`] is
//! every field decoded at once, and how a completion is built ([`Wc::new`]).

use core::fmt;
use core::hash::{Hash, Hasher};

pub use mlx5_cq::WcStatus;
use mlx5_cq::{
    CQE_REQ, CQE_REQ_ERR, CQE_RESP_ERR, CQE_RESP_SEND, CQE_RESP_SEND_IMM, CQE_RESP_SEND_INV,
    CQE_RESP_WR_IMM,
};
use mlx5_wqe::opcode as op;

mod opcode;

pub(crate) use opcode::send_flags;
use opcode::SEND_WC_OPCODE;
pub use opcode::{WcFlags, WcOpcode};

/// One work completion.
///
/// Unsignaled send WRs that succeed produce none (verbs semantics); every other WR produces
/// exactly one (see [`crate::Cq::poll`] for how errors and flushes are accounted).
///
/// Read it through its accessors ([`Wc::wr_id`], [`Wc::status`], [`Wc::opcode`], ...), or
/// all at once with [`Wc::fields`]. Equality, hashing and `Debug` are those of the decoded
/// fields. A field that does not apply to a completion's kind reads 0 (the receive fields
/// of a send completion, the syndromes of a success, the byte count of a SEND or WRITE).
#[derive(Clone, Copy)]
// `repr(C)` in this order, 48 bytes: the WR id, then CQE bytes 16..32, 32..48 and 56..64 of
// `struct mlx5_cqe64` (mlx5dv.h) as the device wrote them, so that the poll writes a send
// completion in three stores (the WR id, bytes 32..48 as one 16-byte copy, the last 8 bytes
// it has in a register already) and a receive in four. The accessors take the fields apart
// as rdma-core's `handle_good_req` and `handle_responder` do (providers/mlx5/cq.c).
// An error completion (opcode REQ_ERR or RESP_ERR) holds, in place of bytes 40..48, the
// error CQE's bytes 48..56 (`hw_err_synd`, `hw_synd_type`, `vendor_err_synd`, `syndrome` in
// the last four): the poll writes a flush in three stores, its status the syndrome's.
// Completions built by software ([`Wc::new`]: errors, flushes, atomics, inline scatter) use
// the same bytes; an error among them has format 3 in `op_own` (`BUILT`) and its status
// (`enum ibv_wc_status`) in byte 32 (the error CQE's reserved byte before the SRQN).
#[repr(C, align(8))]
pub struct Wc {
    /// The WR's identifier, recovered from the CQE's `wqe_counter`.
    wr_id: u64,
    /// CQE bytes 16..32: `ml_path` (1), `slid` (6..8), `flags_rqpn` (8..12).
    rx: [u8; 16],
    /// CQE bytes 32..48: `srqn_uidx` (0..4), `imm_inval_pkey` (4..8), `app`, `app_op`,
    /// `app_info` (8..12), `byte_cnt` (12..16). An error's: its status (0), then the error
    /// CQE's bytes 48..56 (8..16: `vendor_err_synd` 14, `syndrome` 15).
    mid: [u8; 16],
    /// CQE bytes 56..64: `sop_drop_qpn` (send opcode 0, QPN 1..4), `wqe_counter`,
    /// `signature`, `op_own` (7: the CQE opcode in bits 7:4 is the completion's kind).
    tail: [u8; 8],
}

// The offsets the poll's copies write (`Wc::write_req`, `Wc::write_resp`).
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Wc>() == 48 && align_of::<Wc>() == 8);
    assert!(offset_of!(Wc, wr_id) == 0 && offset_of!(Wc, rx) == 8);
    assert!(offset_of!(Wc, mid) == 24 && offset_of!(Wc, tail) == 40);
};

/// Where an error completion the library built keeps its status in `mid` (the error CQE's
/// reserved byte 32).
const ERR_STATUS: usize = 0;
/// The format bits (`op_own` bits 3:2) of an error completion the library built
/// ([`Wc::new`]): 3, compressed, which no error CQE carries (a compressed CQE is a success,
/// PRM "Completion Queue Entry Compression"). Its status is explicit (`mid[ERR_STATUS]`);
/// the status of an error CQE copied as it is (format 0) is its syndrome's (rdma-core
/// `mlx5_handle_error_cqe`).
const BUILT: u8 = 0x0c;
/// Where an error completion keeps `vendor_err_synd` in `mid` (the error CQE's byte 54,
/// `struct mlx5_err_cqe` in mlx5dv.h, copied with bytes 48..56 to `mid[8..16]`).
const ERR_VENDOR: usize = 14;
/// Where an error completion keeps `syndrome` in `mid` (the error CQE's byte 55).
const ERR_SYNDROME: usize = 15;

/// Every field of a completion, decoded (`struct ibv_wc`, verbs.h, with mlx5's syndromes):
/// what [`Wc::fields`] returns and [`Wc::new`] builds a [`Wc`] from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WcFields {
    /// The WR's identifier.
    pub wr_id: u64,
    /// QPN of the local QP the WR was posted on (24 bits).
    pub qp_num: u32,
    /// Bytes received (receives), read (READ), or the operand size (atomics); 0 otherwise.
    pub byte_len: u32,
    /// Outcome.
    pub status: WcStatus,
    /// What completed. For errors this is the opcode that was posted (verbs leaves it
    /// undefined; here it is the posted one, [`WcOpcode::Recv`] for every receive).
    pub opcode: WcOpcode,
    /// Flags.
    pub flags: WcFlags,
    /// Service level the packet arrived with (`wc.sl`, 4 bits; the CQE's `flags_rqpn` bits
    /// 27:24, rdma-core `handle_responder`). Successful receives only; 0 otherwise.
    pub sl: u8,
    /// Immediate data in host order (it travels big-endian: the sender's value), or the
    /// invalidated rkey; valid when [`WcFlags::WITH_IMM`] / [`WcFlags::WITH_INV`] is set.
    pub imm_data: u32,
    /// Source QPN (UD receives; 24 bits).
    pub src_qp: u32,
    /// Source LID (InfiniBand UD receives).
    pub slid: u16,
    /// P_Key index of a receive (`wc.pkey_index`): filled as libmlx5 fills it, from the low 16
    /// bits of the CQE's `imm_inval_pkey` on every successful receive (rdma-core
    /// `handle_responder`). The CQE field is shared with the immediate and the invalidated
    /// rkey, so it is a P_Key index only when [`WcFlags::WITH_IMM`] and [`WcFlags::WITH_INV`]
    /// are clear (the P_Key index is meaningful for UD and GSI QPs); with either set it is
    /// the low 16 bits of [`WcFields::imm_data`]. 0 on send and error completions.
    pub pkey_index: u16,
    /// Destination LID path bits of a receive (`wc.dlid_path_bits`, the CQE's `ml_path` bits
    /// 6:0; InfiniBand with LMC > 0, 0 on RoCE). Successful receives only; 0 otherwise.
    pub dlid_path_bits: u8,
    /// mlx5 vendor syndrome of an error CQE (`wc.vendor_err`).
    pub vendor_err: u8,
    /// mlx5 syndrome of an error CQE (`MLX5_CQE_SYNDROME_*`; 0 on success). A completion
    /// synthesised for a WR the device retired without a CQE of its own carries
    /// [`mlx5_cq::SYNDROME_WR_FLUSH_ERR`].
    pub syndrome: u8,
}

impl Default for WcFields {
    fn default() -> Self {
        WcFields {
            wr_id: 0,
            qp_num: 0,
            byte_len: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            flags: WcFlags::empty(),
            sl: 0,
            imm_data: 0,
            src_qp: 0,
            slid: 0,
            pkey_index: 0,
            dlid_path_bits: 0,
            vendor_err: 0,
            syndrome: 0,
        }
    }
}

/// Big-endian 32 bits at `b[i..i + 4]`.
#[inline(always)]
fn be32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Big-endian 16 bits at `b[i..i + 2]`.
#[inline(always)]
fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

impl Wc {
    /// A completion with these fields. Fields that do not apply to the kind the status and
    /// opcode make are dropped ([`Wc`]: they read 0); a receive's P_Key index is the low 16
    /// bits of its immediate or invalidated rkey when it carries one (they share the CQE's
    /// `imm_inval_pkey`); [`WcOpcode::RecvRdmaWithImm`] always carries
    /// [`WcFlags::WITH_IMM`]; an error completion of a receive reads [`WcOpcode::Recv`].
    pub fn new(f: &WcFields) -> Wc {
        let mut wc = Wc {
            wr_id: f.wr_id,
            rx: [0; 16],
            mid: [0; 16],
            tail: [0; 8],
        };
        let qpn = (f.qp_num & 0x00ff_ffff).to_be_bytes();
        wc.tail[1..4].copy_from_slice(&qpn[1..]);
        let recv = f.opcode.is_recv();
        let kind = if f.status != WcStatus::Success {
            wc.mid[ERR_STATUS] = f.status as u8;
            wc.mid[ERR_VENDOR] = f.vendor_err;
            wc.mid[ERR_SYNDROME] = f.syndrome;
            if recv {
                CQE_RESP_ERR
            } else {
                CQE_REQ_ERR
            }
        } else if !recv {
            if has_byte_len(f.opcode) {
                wc.mid[12..16].copy_from_slice(&f.byte_len.to_be_bytes());
            }
            CQE_REQ
        } else {
            let kind = if f.opcode == WcOpcode::RecvRdmaWithImm {
                CQE_RESP_WR_IMM
            } else if f.flags.contains(WcFlags::WITH_IMM) {
                CQE_RESP_SEND_IMM
            } else if f.flags.contains(WcFlags::WITH_INV) {
                CQE_RESP_SEND_INV
            } else {
                CQE_RESP_SEND
            };
            let shared = if kind == CQE_RESP_SEND {
                f.pkey_index as u32
            } else {
                f.imm_data
            };
            wc.mid[4..8].copy_from_slice(&shared.to_be_bytes());
            wc.mid[12..16].copy_from_slice(&f.byte_len.to_be_bytes());
            let grh = if f.flags.contains(WcFlags::GRH) {
                1 << 28
            } else {
                0
            };
            let flags_rqpn = grh | ((f.sl as u32 & 0xf) << 24) | (f.src_qp & 0x00ff_ffff);
            wc.rx[8..12].copy_from_slice(&flags_rqpn.to_be_bytes());
            wc.rx[6..8].copy_from_slice(&f.slid.to_be_bytes());
            wc.rx[1] = f.dlid_path_bits & 0x7f;
            kind
        };
        if !recv {
            // A successful send with an immediate keeps the `_IMM` opcode it was posted with.
            let imm = f.status == WcStatus::Success && f.flags.contains(WcFlags::WITH_IMM);
            wc.tail[0] = match (f.opcode, imm) {
                (WcOpcode::Send, true) => op::OPCODE_SEND_IMM,
                (WcOpcode::RdmaWrite, true) => op::OPCODE_RDMA_WRITE_IMM,
                (opcode, _) => opcode.send_opcode(),
            };
        }
        let built = if f.status != WcStatus::Success {
            BUILT
        } else {
            0
        };
        wc.tail[7] = kind << 4 | built;
        wc
    }

    /// Every field, decoded.
    pub fn fields(&self) -> WcFields {
        WcFields {
            wr_id: self.wr_id(),
            qp_num: self.qp_num(),
            byte_len: self.byte_len(),
            status: self.status(),
            opcode: self.opcode(),
            flags: self.flags(),
            sl: self.sl(),
            imm_data: self.imm_data(),
            src_qp: self.src_qp(),
            slid: self.slid(),
            pkey_index: self.pkey_index(),
            dlid_path_bits: self.dlid_path_bits(),
            vendor_err: self.vendor_err(),
            syndrome: self.syndrome(),
        }
    }

    /// The CQE opcode this completion was made of (`op_own` bits 7:4).
    #[inline(always)]
    fn kind(&self) -> u8 {
        self.tail[7] >> 4
    }

    /// Whether it is a successful receive (the kinds that carry the receive fields).
    #[inline(always)]
    fn good_recv(&self) -> bool {
        matches!(
            self.kind(),
            CQE_RESP_WR_IMM | CQE_RESP_SEND | CQE_RESP_SEND_IMM | CQE_RESP_SEND_INV
        )
    }

    /// Whether it is an error completion.
    #[inline(always)]
    fn error(&self) -> bool {
        matches!(self.kind(), CQE_REQ_ERR | CQE_RESP_ERR)
    }

    /// The WR's identifier, recovered from the CQE's `wqe_counter`.
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// QPN of the local QP the WR was posted on (`sop_drop_qpn` bits 23:0).
    #[inline(always)]
    pub fn qp_num(&self) -> u32 {
        be32(&self.tail, 0) & 0x00ff_ffff
    }

    /// Outcome.
    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        if !self.error() {
            WcStatus::Success
        } else if self.tail[7] & BUILT == BUILT {
            *WcStatus::ALL
                .get(self.mid[ERR_STATUS] as usize)
                .unwrap_or(&WcStatus::GeneralErr)
        } else {
            WcStatus::from_syndrome(self.mid[ERR_SYNDROME])
        }
    }

    /// Whether the WR succeeded.
    #[inline(always)]
    pub fn is_ok(&self) -> bool {
        !self.error()
    }

    /// What completed ([`WcFields::opcode`]): a send's from the WQE opcode the CQE carries
    /// (`sop_drop_qpn` bits 31:24, rdma-core `handle_good_req`).
    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        match self.kind() {
            CQE_RESP_WR_IMM => WcOpcode::RecvRdmaWithImm,
            CQE_RESP_SEND | CQE_RESP_SEND_IMM | CQE_RESP_SEND_INV | CQE_RESP_ERR => WcOpcode::Recv,
            _ => SEND_WC_OPCODE[self.tail[0] as usize],
        }
    }

    /// Flags: the immediate or invalidation the CQE opcode says, GRH from `flags_rqpn` bits
    /// 29:28 (rdma-core `handle_responder`); for a successful send, [`WcFlags::WITH_IMM`] when
    /// the WQE carried an immediate (rdma-core `handle_good_req`); none on errors.
    #[inline(always)]
    pub fn flags(&self) -> WcFlags {
        let carried = match self.kind() {
            CQE_RESP_WR_IMM | CQE_RESP_SEND_IMM => WcFlags::WITH_IMM,
            CQE_RESP_SEND_INV => WcFlags::WITH_INV,
            CQE_RESP_SEND => WcFlags::empty(),
            CQE_REQ => return send_flags(self.tail[0]),
            _ => return WcFlags::empty(),
        };
        if (self.rx[8] >> 4) & 3 != 0 {
            carried | WcFlags::GRH
        } else {
            carried
        }
    }

    /// Bytes received (receives), read (READ), or the operand size (atomics); 0 otherwise
    /// (`byte_cnt`).
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        let counted = match self.kind() {
            CQE_REQ => has_byte_len(self.opcode()),
            _ => self.good_recv(),
        };
        if counted {
            be32(&self.mid, 12)
        } else {
            0
        }
    }

    /// Immediate data in host order, or the invalidated rkey ([`WcFields::imm_data`]); 0
    /// when [`Wc::flags`] has neither [`WcFlags::WITH_IMM`] nor [`WcFlags::WITH_INV`].
    #[inline(always)]
    pub fn imm_data(&self) -> u32 {
        match self.kind() {
            CQE_RESP_WR_IMM | CQE_RESP_SEND_IMM | CQE_RESP_SEND_INV => be32(&self.mid, 4),
            _ => 0,
        }
    }

    /// Service level of a successful receive (`flags_rqpn` bits 27:24).
    #[inline(always)]
    pub fn sl(&self) -> u8 {
        if self.good_recv() {
            self.rx[8] & 0xf
        } else {
            0
        }
    }

    /// Source QPN of a successful receive (`flags_rqpn` bits 23:0; UD).
    #[inline(always)]
    pub fn src_qp(&self) -> u32 {
        if self.good_recv() {
            be32(&self.rx, 8) & 0x00ff_ffff
        } else {
            0
        }
    }

    /// Source LID of a successful receive (InfiniBand UD).
    #[inline(always)]
    pub fn slid(&self) -> u16 {
        if self.good_recv() {
            be16(&self.rx, 6)
        } else {
            0
        }
    }

    /// P_Key index of a successful receive ([`WcFields::pkey_index`]).
    #[inline(always)]
    pub fn pkey_index(&self) -> u16 {
        if self.good_recv() {
            be16(&self.mid, 6)
        } else {
            0
        }
    }

    /// Destination LID path bits of a successful receive (`ml_path` bits 6:0).
    #[inline(always)]
    pub fn dlid_path_bits(&self) -> u8 {
        if self.good_recv() {
            self.rx[1] & 0x7f
        } else {
            0
        }
    }

    /// mlx5 vendor syndrome of an error completion (`wc.vendor_err`); 0 on success.
    #[inline(always)]
    pub fn vendor_err(&self) -> u8 {
        if self.error() {
            self.mid[ERR_VENDOR]
        } else {
            0
        }
    }

    /// mlx5 syndrome of an error completion ([`WcFields::syndrome`]); 0 on success.
    #[inline(always)]
    pub fn syndrome(&self) -> u8 {
        if self.error() {
            self.mid[ERR_SYNDROME]
        } else {
            0
        }
    }

    /// The mlx5 name of the syndrome (`REMOTE_ACCESS_ERR`, ...), `None` on success.
    pub fn syndrome_name(&self) -> Option<&'static str> {
        if self.is_ok() {
            None
        } else {
            Some(mlx5_cq::syndrome_name(self.syndrome()))
        }
    }
}

/// Whether a successful send completion of this opcode carries a byte count (rdma-core
/// `handle_good_req`: READ the bytes read, atomics their operand size).
#[inline(always)]
fn has_byte_len(opcode: WcOpcode) -> bool {
    matches!(
        opcode,
        WcOpcode::RdmaRead
            | WcOpcode::CompSwap
            | WcOpcode::FetchAdd
            | WcOpcode::MaskedCompSwap
            | WcOpcode::MaskedFetchAdd
    )
}

impl Default for Wc {
    /// A successful SEND completion of WR 0 on QP 0 (as [`WcFields::default`]).
    fn default() -> Self {
        Wc::new(&WcFields::default())
    }
}

impl From<WcFields> for Wc {
    fn from(f: WcFields) -> Wc {
        Wc::new(&f)
    }
}

impl From<Wc> for WcFields {
    fn from(wc: Wc) -> WcFields {
        wc.fields()
    }
}

impl PartialEq for Wc {
    fn eq(&self, other: &Wc) -> bool {
        self.fields() == other.fields()
    }
}

impl Eq for Wc {}

impl Hash for Wc {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fields().hash(state);
    }
}

impl fmt::Debug for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.fields();
        f.debug_struct("Wc")
            .field("wr_id", &w.wr_id)
            .field("qp_num", &w.qp_num)
            .field("byte_len", &w.byte_len)
            .field("status", &w.status)
            .field("opcode", &w.opcode)
            .field("flags", &w.flags)
            .field("sl", &w.sl)
            .field("imm_data", &w.imm_data)
            .field("src_qp", &w.src_qp)
            .field("slid", &w.slid)
            .field("pkey_index", &w.pkey_index)
            .field("dlid_path_bits", &w.dlid_path_bits)
            .field("vendor_err", &w.vendor_err)
            .field("syndrome", &w.syndrome)
            .finish()
    }
}

mod write;

#[cfg(test)]
mod tests;
