//! CQE layouts (rdma-core `providers/mlx5/mlx5dv.h` `struct mlx5_cqe64`, `struct mlx5_err_cqe`;
//! Linux `include/linux/mlx5/device.h`).
//!
//! Multi-byte fields are the big-endian types `U16` / `U32` / `U64` of
//! `zerocopy::byteorder::big_endian` (the `__be16` / `__be32` / `__be64` of the header), so a
//! host-order integer cannot be stored in one; getters return host-order values. The structs
//! derive zerocopy's layout traits, which refuse padding at compile time, and the constant
//! assertions at the end pin every size and offset (the conformance tests check them against
//! `mlx5dv.h`).

use core::mem::{align_of, offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// CQE opcode (`op_own` bits 7:4): requester success (`MLX5_CQE_REQ`).
pub const CQE_REQ: u8 = 0;
/// Responder: RDMA WRITE with immediate (`MLX5_CQE_RESP_WR_IMM`).
pub const CQE_RESP_WR_IMM: u8 = 1;
/// Responder: SEND (`MLX5_CQE_RESP_SEND`).
pub const CQE_RESP_SEND: u8 = 2;
/// Responder: SEND with immediate (`MLX5_CQE_RESP_SEND_IMM`).
pub const CQE_RESP_SEND_IMM: u8 = 3;
/// Responder: SEND with invalidate (`MLX5_CQE_RESP_SEND_INV`).
pub const CQE_RESP_SEND_INV: u8 = 4;
/// CQ resize (`MLX5_CQE_RESIZE_CQ`).
pub const CQE_RESIZE_CQ: u8 = 5;
/// Tag matching: no packet (`MLX5_CQE_NO_PACKET`).
pub const CQE_NO_PACKET: u8 = 6;
/// Signature error (`MLX5_CQE_SIG_ERR`).
pub const CQE_SIG_ERR: u8 = 12;
/// Requester error (`MLX5_CQE_REQ_ERR`).
pub const CQE_REQ_ERR: u8 = 13;
/// Responder error (`MLX5_CQE_RESP_ERR`).
pub const CQE_RESP_ERR: u8 = 14;
/// Invalid / never written (`MLX5_CQE_INVALID`).
pub const CQE_INVALID: u8 = 15;

/// Name of a CQE opcode as rdma-core spells it.
pub fn cqe_opcode_name(op: u8) -> &'static str {
    match op {
        CQE_REQ => "REQ",
        CQE_RESP_WR_IMM => "RESP_WR_IMM",
        CQE_RESP_SEND => "RESP_SEND",
        CQE_RESP_SEND_IMM => "RESP_SEND_IMM",
        CQE_RESP_SEND_INV => "RESP_SEND_INV",
        CQE_RESIZE_CQ => "RESIZE_CQ",
        CQE_NO_PACKET => "NO_PACKET",
        CQE_SIG_ERR => "SIG_ERR",
        CQE_REQ_ERR => "REQ_ERR",
        CQE_RESP_ERR => "RESP_ERR",
        CQE_INVALID => "INVALID",
        _ => "RESERVED",
    }
}

/// `op_own` format field (bits 3:2): no inline data (`MLX5_NO_INLINE_DATA`).
pub const CQE_FORMAT_NONE: u8 = 0;
/// Up to 32 bytes of data scattered into the 64-byte CQE itself (`MLX5_INLINE_DATA32_SEG`).
pub const CQE_FORMAT_INLINE32: u8 = 1;
/// Up to 64 bytes scattered into the first half of a 128-byte CQE (`MLX5_INLINE_DATA64_SEG`).
pub const CQE_FORMAT_INLINE64: u8 = 2;
/// Compressed CQE (`MLX5_COMPRESSED`).
pub const CQE_FORMAT_COMPRESSED: u8 = 3;

/// `op_own` bit set by `MLX5_INLINE_SCATTER_32` (format 1).
pub const INLINE_SCATTER_32: u8 = 0x04;
/// `op_own` bit set by `MLX5_INLINE_SCATTER_64` (format 2).
pub const INLINE_SCATTER_64: u8 = 0x08;

/// The 64-byte CQE (`struct mlx5_cqe64`). Multi-byte fields hold big-endian values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Cqe64 {
    /// Ethernet / striding-RQ fields (bytes 0–15) and ml_path etc. (16–23); unused by RC/UC/UD
    /// except `slid` at 22 and `ml_path` at 17.
    pub rsvd0: [u8; 17],
    /// DLID path bits (6:0).
    pub ml_path: u8,
    /// Reserved.
    pub rsvd20: [u8; 4],
    /// BE16 source LID.
    pub slid: U16,
    /// BE32: SL / packet type (27:24), GRH flags (29:28), source QPN (23:0).
    pub flags_rqpn: U32,
    /// L3/L4 status bits.
    pub hds_ip_ext: u8,
    /// L4 header type etc.
    pub l4_hdr_type_etc: u8,
    /// BE16 VLAN info.
    pub vlan_info: U16,
    /// BE32: SRQN or user index (23:0).
    pub srqn_uidx: U32,
    /// BE32 immediate, invalidated rkey, or P_Key index.
    pub imm_inval_pkey: U32,
    /// Tag matching: app.
    pub app: u8,
    /// Tag matching: app_op.
    pub app_op: u8,
    /// BE16 tag matching: app_info.
    pub app_info: U16,
    /// BE32 bytes transferred.
    pub byte_cnt: U32,
    /// BE64 timestamp.
    pub timestamp: U64,
    /// BE32: requester send opcode (31:24) | QPN (23:0).
    pub sop_drop_qpn: U32,
    /// BE16 WQE counter.
    pub wqe_counter: U16,
    /// Signature / validity iteration count.
    pub signature: u8,
    /// Opcode (7:4), format (3:2), solicited (1), owner (0).
    pub op_own: u8,
}

impl Cqe64 {
    /// Owner bit (`mlx5dv_get_cqe_owner`).
    #[inline(always)]
    pub fn owner(&self) -> u8 {
        self.op_own & 1
    }
    /// Solicited-event bit (`mlx5dv_get_cqe_se`).
    #[inline(always)]
    pub fn se(&self) -> u8 {
        (self.op_own >> 1) & 1
    }
    /// Inline-scatter / compression format (`mlx5dv_get_cqe_format`).
    #[inline(always)]
    pub fn format(&self) -> u8 {
        (self.op_own >> 2) & 3
    }
    /// CQE opcode (`mlx5dv_get_cqe_opcode`).
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }
    /// Replace the owner bit (`mlx5dv_set_cqe_owner`).
    #[inline(always)]
    pub fn set_owner(&mut self, v: u8) {
        self.op_own = (self.op_own & 0xfe) | (v & 1);
    }
    /// QPN (bits 23:0 of `sop_drop_qpn`).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn.get() & 0x00ff_ffff
    }
    /// Requester CQE: the `MLX5_OPCODE_*` of the completed send WQE.
    #[inline(always)]
    pub fn send_opcode(&self) -> u8 {
        (self.sop_drop_qpn.get() >> 24) as u8
    }
    /// WQE counter.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter.get()
    }
    /// Byte count.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.byte_cnt.get()
    }
    /// Source QPN (UD responder).
    #[inline(always)]
    pub fn src_qpn(&self) -> u32 {
        self.flags_rqpn.get() & 0x00ff_ffff
    }
    /// Service level of a responder CQE: bits 27:24 of `flags_rqpn` (rdma-core
    /// `handle_responder`: `(be32toh(cqe->flags_rqpn) >> 24) & 0xf`).
    #[inline(always)]
    pub fn sl(&self) -> u8 {
        ((self.flags_rqpn.get() >> 24) & 0xf) as u8
    }
    /// GRH flags of a responder CQE: bits 29:28 of `flags_rqpn`, non-zero when a GRH preceded
    /// the data (rdma-core `handle_responder`: `g = (be32toh(cqe->flags_rqpn) >> 28) & 3`).
    #[inline(always)]
    pub fn grh_flags(&self) -> u8 {
        ((self.flags_rqpn.get() >> 28) & 3) as u8
    }
    /// DLID path bits of a responder CQE: bits 6:0 of `ml_path` (rdma-core
    /// `handle_responder`: `cqe->ml_path & 0x7f`).
    #[inline(always)]
    pub fn dlid_path_bits(&self) -> u8 {
        self.ml_path & 0x7f
    }
    /// P_Key index of a responder CQE: the low 16 bits of `imm_inval_pkey` (rdma-core
    /// `handle_responder`: `be32toh(cqe->imm_inval_pkey) & 0xffff`). The field is shared with
    /// the immediate and the invalidated rkey: meaningful when the CQE carries neither.
    #[inline(always)]
    pub fn pkey_index(&self) -> u16 {
        (self.imm_inval_pkey.get() & 0xffff) as u16
    }
    /// Source LID of a responder CQE (InfiniBand).
    #[inline(always)]
    pub fn slid(&self) -> u16 {
        self.slid.get()
    }
    /// SRQN / user index.
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.srqn_uidx.get() & 0x00ff_ffff
    }
    /// The immediate (or invalidated rkey), host order.
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.imm_inval_pkey.get()
    }
    /// The immediate as the 4 bytes received (network order).
    #[inline(always)]
    pub fn imm_bytes(&self) -> [u8; 4] {
        self.imm_inval_pkey.to_bytes()
    }
    /// Whether this is an error CQE (REQ_ERR or RESP_ERR).
    #[inline(always)]
    pub fn is_error(&self) -> bool {
        matches!(self.opcode(), CQE_REQ_ERR | CQE_RESP_ERR)
    }
    /// View as an error CQE.
    #[inline(always)]
    pub fn as_err(&self) -> &ErrCqe {
        // Both 64 bytes, alignment 1, every byte pattern valid (checked by the macro).
        zerocopy::transmute_ref!(self)
    }
    /// The raw bytes (as an array; `IntoBytes::as_bytes` gives the same bytes as a slice).
    pub fn as_bytes(&self) -> &[u8; 64] {
        zerocopy::transmute_ref!(self)
    }
    /// Read a CQE from bytes.
    pub fn from_bytes(b: &[u8; 64]) -> Cqe64 {
        zerocopy::transmute!(*b)
    }
}

/// The error CQE (`struct mlx5_err_cqe`, 64 bytes), opcode REQ_ERR (13) or RESP_ERR (14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct ErrCqe {
    /// Reserved.
    pub rsvd0: [u8; 32],
    /// BE32 SRQN (23:0).
    pub srqn: U32,
    /// Reserved.
    pub rsvd1: [u8; 16],
    /// Hardware error syndrome (UCX `hw_err_synd`).
    pub hw_err_synd: u8,
    /// Hardware syndrome type (UCX `hw_synd_type`).
    pub hw_synd_type: u8,
    /// Vendor error syndrome (`wc.vendor_err`).
    pub vendor_err_synd: u8,
    /// Syndrome (`MLX5_CQE_SYNDROME_*`).
    pub syndrome: u8,
    /// BE32: send opcode (31:24) | QPN (23:0).
    pub s_wqe_opcode_qpn: U32,
    /// BE16 WQE counter of the failing WQE.
    pub wqe_counter: U16,
    /// Signature.
    pub signature: u8,
    /// Opcode / owner.
    pub op_own: u8,
}

impl ErrCqe {
    /// QPN.
    pub fn qpn(&self) -> u32 {
        self.s_wqe_opcode_qpn.get() & 0x00ff_ffff
    }
    /// Send opcode of the failing WQE.
    pub fn send_opcode(&self) -> u8 {
        (self.s_wqe_opcode_qpn.get() >> 24) as u8
    }
    /// WQE counter.
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter.get()
    }
}

/// Offset of the 64-byte CQE inside a CQ slot of `cqe_size` bytes: 0 for 64-byte CQEs, 64 for
/// 128-byte CQEs (the first half holds inline-scattered data or a GRH; rdma-core cq.c
/// `get_sw_cqe`; `docs/wqe-layout.md` §9).
#[inline(always)]
pub const fn cqe64_offset(cqe_size: u32) -> usize {
    if cqe_size == 128 {
        64
    } else {
        0
    }
}

/// Sizes and field offsets of `struct mlx5_cqe64` and `struct mlx5_err_cqe` (mlx5dv.h), and
/// alignment 1 (a CQE may be read at any offset of a buffer).
const _: () = {
    assert!(size_of::<Cqe64>() == 64);
    assert!(offset_of!(Cqe64, ml_path) == 17);
    assert!(offset_of!(Cqe64, slid) == 22);
    assert!(offset_of!(Cqe64, flags_rqpn) == 24);
    assert!(offset_of!(Cqe64, hds_ip_ext) == 28);
    assert!(offset_of!(Cqe64, l4_hdr_type_etc) == 29);
    assert!(offset_of!(Cqe64, vlan_info) == 30);
    assert!(offset_of!(Cqe64, srqn_uidx) == 32);
    assert!(offset_of!(Cqe64, imm_inval_pkey) == 36);
    assert!(offset_of!(Cqe64, app) == 40);
    assert!(offset_of!(Cqe64, app_op) == 41);
    assert!(offset_of!(Cqe64, app_info) == 42);
    assert!(offset_of!(Cqe64, byte_cnt) == 44);
    assert!(offset_of!(Cqe64, timestamp) == 48);
    assert!(offset_of!(Cqe64, sop_drop_qpn) == 56);
    assert!(offset_of!(Cqe64, wqe_counter) == 60);
    assert!(offset_of!(Cqe64, signature) == 62);
    assert!(offset_of!(Cqe64, op_own) == 63);

    assert!(size_of::<ErrCqe>() == 64);
    assert!(offset_of!(ErrCqe, srqn) == 32);
    assert!(offset_of!(ErrCqe, hw_err_synd) == 52);
    assert!(offset_of!(ErrCqe, hw_synd_type) == 53);
    assert!(offset_of!(ErrCqe, vendor_err_synd) == 54);
    assert!(offset_of!(ErrCqe, syndrome) == 55);
    assert!(offset_of!(ErrCqe, s_wqe_opcode_qpn) == 56);
    assert!(offset_of!(ErrCqe, wqe_counter) == 60);
    assert!(offset_of!(ErrCqe, signature) == 62);
    assert!(offset_of!(ErrCqe, op_own) == 63);

    assert!(align_of::<Cqe64>() == 1);
    assert!(align_of::<ErrCqe>() == 1);
};
