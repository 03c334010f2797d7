//! Segment layouts. Each struct is `#[repr(C)]` with the field order and sizes of rdma-core's
//! `struct mlx5_wqe_*` in `providers/mlx5/mlx5dv.h` (or `wqe.h`); multi-byte fields hold
//! big-endian values, as the `__be32` / `__be64` fields there do. Constructors take host-order
//! values; getters return host-order values.

use crate::opcode::{EXTENDED_UD_AV, INLINE_SEG, INVALID_LKEY};

/// Control segment (`struct mlx5_wqe_ctrl_seg`, 16 bytes), first in every send WQE.
///
/// `[0]=opmod [1..2]=wqe_index [3]=opcode [4..6]=qpn [7]=ds [8]=signature
/// [9..10]=dci_stream_channel_id [11]=fm_ce_se [12..15]=imm` (rdma-core `mlx5dv_set_ctrl_seg`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtrlSeg {
    /// BE32: opmod (31:24) | wqe_index (23:8) | opcode (7:0).
    pub opmod_idx_opcode: u32,
    /// BE32: qpn (31:8) | ds (7:0).
    pub qpn_ds: u32,
    /// WQE signature (0 unless the QP was created with signatures).
    pub signature: u8,
    /// BE16 DCI stream channel id (0 outside DCI streams).
    pub dci_stream_channel_id: [u8; 2],
    /// Fence mode (7:5), completion mode (3:2), solicited (1).
    pub fm_ce_se: u8,
    /// Immediate data, **already in network order** (rdma-core copies `wr->imm_data` raw);
    /// or BE rkey/mkey for SEND_INVAL / UMR.
    pub imm: u32,
}

impl CtrlSeg {
    /// Build a control segment the way `mlx5dv_set_ctrl_seg` does, with bytes 9–10 zero.
    /// `imm_be` is stored as given (pass the immediate in network order).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn new(
        pi: u16,
        opcode: u8,
        opmod: u8,
        qpn: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm_be: u32,
    ) -> CtrlSeg {
        CtrlSeg {
            opmod_idx_opcode: ((opmod as u32) << 24 | (pi as u32) << 8 | opcode as u32).to_be(),
            qpn_ds: (qpn << 8 | ds as u32).to_be(),
            signature,
            dci_stream_channel_id: [0; 2],
            fm_ce_se,
            imm: imm_be,
        }
    }
    /// opmod (bits 31:24 of the first word).
    pub fn opmod(&self) -> u8 {
        (u32::from_be(self.opmod_idx_opcode) >> 24) as u8
    }
    /// 16-bit WQE index (producer counter of the WQE's first basic block).
    pub fn wqe_index(&self) -> u16 {
        (u32::from_be(self.opmod_idx_opcode) >> 8) as u16
    }
    /// Opcode (`MLX5_OPCODE_*`).
    pub fn opcode(&self) -> u8 {
        u32::from_be(self.opmod_idx_opcode) as u8
    }
    /// QP number.
    pub fn qpn(&self) -> u32 {
        u32::from_be(self.qpn_ds) >> 8
    }
    /// DS count: WQE size in 16-byte units (6 meaningful bits).
    pub fn ds(&self) -> u8 {
        u32::from_be(self.qpn_ds) as u8
    }
    /// The immediate as the 4 bytes that go on the wire.
    pub fn imm_bytes(&self) -> [u8; 4] {
        self.imm.to_ne_bytes()
    }
}

/// Remote address segment (`struct mlx5_wqe_raddr_seg`, 16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaddrSeg {
    /// BE64 remote virtual address.
    pub raddr: u64,
    /// BE32 remote key.
    pub rkey: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

impl RaddrSeg {
    /// Build from host-order values (rdma-core `set_raddr_seg`).
    #[inline(always)]
    pub fn new(raddr: u64, rkey: u32) -> RaddrSeg {
        RaddrSeg {
            raddr: raddr.to_be(),
            rkey: rkey.to_be(),
            reserved: 0,
        }
    }
    /// Remote address.
    pub fn raddr(&self) -> u64 {
        u64::from_be(self.raddr)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32::from_be(self.rkey)
    }
}

/// Data (pointer) segment (`struct mlx5_wqe_data_seg`, 16 bytes): send gather entries,
/// receive scatter entries and the local buffer of READs and atomics.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataSeg {
    /// BE32 byte count (bit 31 must be 0).
    pub byte_count: u32,
    /// BE32 local key.
    pub lkey: u32,
    /// BE64 address.
    pub addr: u64,
}

impl DataSeg {
    /// Build from host-order values (rdma-core `mlx5dv_set_data_seg`).
    #[inline(always)]
    pub fn new(length: u32, lkey: u32, addr: u64) -> DataSeg {
        DataSeg {
            byte_count: length.to_be(),
            lkey: lkey.to_be(),
            addr: addr.to_be(),
        }
    }
    /// The receive-list terminator: `{0, MLX5_INVALID_LKEY, 0}` (rdma-core `mlx5_post_recv`).
    #[inline(always)]
    pub fn terminator() -> DataSeg {
        DataSeg::new(0, INVALID_LKEY, 0)
    }
    /// Byte count.
    pub fn byte_count(&self) -> u32 {
        u32::from_be(self.byte_count)
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        u32::from_be(self.lkey)
    }
    /// Address.
    pub fn addr(&self) -> u64 {
        u64::from_be(self.addr)
    }
    /// Whether this is the receive-list terminator (lkey `MLX5_INVALID_LKEY`).
    pub fn is_terminator(&self) -> bool {
        self.lkey() == INVALID_LKEY
    }
}

/// Inline data segment header (`struct mlx5_wqe_inl_data_seg`, 4 bytes); the payload follows
/// it unaligned and the segment is padded to 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InlineHdr {
    /// BE32 `len | MLX5_INLINE_SEG`.
    pub byte_count: u32,
}

impl InlineHdr {
    /// Header for `len` payload bytes.
    #[inline(always)]
    pub fn new(len: u32) -> InlineHdr {
        InlineHdr {
            byte_count: (len | INLINE_SEG).to_be(),
        }
    }
    /// Whether the `MLX5_INLINE_SEG` bit is set.
    pub fn is_inline(&self) -> bool {
        u32::from_be(self.byte_count) & INLINE_SEG != 0
    }
    /// Payload length.
    pub fn len(&self) -> u32 {
        u32::from_be(self.byte_count) & !INLINE_SEG
    }
    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bytes a WQE spends on an inline segment of `len` payload bytes: `align16(4 + len)`.
pub const fn inline_seg_size(len: usize) -> usize {
    (4 + len + 15) & !15
}

/// Atomic segment (`struct mlx5_wqe_atomic_seg`, 16 bytes) for CAS and FAA.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicSeg {
    /// BE64 swap value (CAS) or addend (FAA).
    pub swap_add: u64,
    /// BE64 compare value (CAS; unused by FAA).
    pub compare: u64,
}

impl AtomicSeg {
    /// Compare-and-swap operands (rdma-core `_set_atomic_seg`).
    #[inline(always)]
    pub fn cas(compare: u64, swap: u64) -> AtomicSeg {
        AtomicSeg {
            swap_add: swap.to_be(),
            compare: compare.to_be(),
        }
    }
    /// Fetch-and-add operand.
    #[inline(always)]
    pub fn faa(add: u64) -> AtomicSeg {
        AtomicSeg {
            swap_add: add.to_be(),
            compare: 0,
        }
    }
    /// Swap value or addend.
    pub fn swap_add(&self) -> u64 {
        u64::from_be(self.swap_add)
    }
    /// Compare value.
    pub fn compare(&self) -> u64 {
        u64::from_be(self.compare)
    }
}

/// 64-bit masked compare-and-swap segment (`struct mlx5_wqe_masked_atomic_seg`, 32 bytes;
/// rdma-core `wqe.h`). The second 16 bytes may wrap to the ring start on their own.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedCs64Seg {
    /// BE64 swap value.
    pub swap_add: u64,
    /// BE64 compare value.
    pub compare: u64,
    /// BE64 mask of the bits to swap.
    pub swap_add_mask: u64,
    /// BE64 mask of the bits to compare.
    pub compare_mask: u64,
}

impl MaskedCs64Seg {
    /// Operands: `(*addr & compare_mask) == (compare & compare_mask)` → replace the
    /// `swap_mask` bits with those of `swap`.
    #[inline(always)]
    pub fn new(compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) -> MaskedCs64Seg {
        MaskedCs64Seg {
            swap_add: swap.to_be(),
            compare: compare.to_be(),
            swap_add_mask: swap_mask.to_be(),
            compare_mask: compare_mask.to_be(),
        }
    }
}

/// 64-bit masked fetch-and-add segment (16 bytes; UCX `uct_ib_mlx5_atomic_masked_fadd64_seg_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedFa64Seg {
    /// BE64 addend.
    pub add: u64,
    /// BE64 field boundary: a set bit ends a field, so carries do not cross into the next.
    pub field_boundary: u64,
}

impl MaskedFa64Seg {
    /// Operands.
    #[inline(always)]
    pub fn new(add: u64, field_boundary: u64) -> MaskedFa64Seg {
        MaskedFa64Seg {
            add: add.to_be(),
            field_boundary: field_boundary.to_be(),
        }
    }
}

/// 32-bit masked compare-and-swap segment (16 bytes; UCX `..._masked_cswap32_seg_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedCs32Seg {
    /// BE32 swap value.
    pub swap: u32,
    /// BE32 compare value.
    pub compare: u32,
    /// BE32 swap mask.
    pub swap_mask: u32,
    /// BE32 compare mask.
    pub compare_mask: u32,
}

impl MaskedCs32Seg {
    /// Operands.
    #[inline(always)]
    pub fn new(compare: u32, compare_mask: u32, swap: u32, swap_mask: u32) -> MaskedCs32Seg {
        MaskedCs32Seg {
            swap: swap.to_be(),
            compare: compare.to_be(),
            swap_mask: swap_mask.to_be(),
            compare_mask: compare_mask.to_be(),
        }
    }
}

/// 32-bit masked fetch-and-add segment (16 bytes; UCX `..._masked_fadd32_seg_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedFa32Seg {
    /// BE32 addend.
    pub add: u32,
    /// BE32 field boundary.
    pub field_boundary: u32,
    /// Reserved, zero.
    pub reserved: [u32; 2],
}

impl MaskedFa32Seg {
    /// Operands.
    #[inline(always)]
    pub fn new(add: u32, field_boundary: u32) -> MaskedFa32Seg {
        MaskedFa32Seg {
            add: add.to_be(),
            field_boundary: field_boundary.to_be(),
            reserved: [0; 2],
        }
    }
}

/// Datagram segment / address vector (`struct mlx5_wqe_datagram_seg` = `struct mlx5_wqe_av`,
/// 48 bytes). The first 16 bytes alone are the compact AV (bit 31 of `dqp_dct` clear).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvSeg {
    /// BE64 key: UD Q_Key in bits 63:32 (i.e. BE32 qkey at byte 0), DC key for DC.
    pub key: u64,
    /// BE32: `MLX5_EXTENDED_UD_AV` (bit 31) | destination QPN (23:0).
    pub dqp_dct: u32,
    /// Static rate (7:4) | SL (IB 3:0; RoCE `(sl & 7) << 1`).
    pub stat_rate_sl: u8,
    /// Force loopback / source path bits.
    pub fl_mlid: u8,
    /// BE16 destination LID (IB) or UDP source port (RoCE v2).
    pub rlid: u16,
    /// Reserved (left untouched by `mlx5dv_set_dgram_seg`).
    pub reserved0: [u8; 4],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// BE32: GRH present (30, IB only) | SGID index (27:20) | flow label (19:0).
    pub grh_gid_fl: u32,
    /// Destination GID.
    pub rgid: [u8; 16],
}

impl AvSeg {
    /// Size of the compact (base) AV.
    pub const COMPACT_SIZE: usize = 16;

    /// Build the way `mlx5dv_set_dgram_seg` does (reserved bytes zero).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: u64,
        dqp_dct: u32,
        ext: bool,
        stat_rate_sl: u8,
        fl_mlid: u8,
        rlid: u16,
        rmac: [u8; 6],
        tclass: u8,
        hop_limit: u8,
        grh_gid_fl: u32,
        rgid: [u8; 16],
    ) -> AvSeg {
        AvSeg {
            key: key.to_be(),
            dqp_dct: (dqp_dct | if ext { EXTENDED_UD_AV } else { 0 }).to_be(),
            stat_rate_sl,
            fl_mlid,
            rlid: rlid.to_be(),
            reserved0: [0; 4],
            rmac,
            tclass,
            hop_limit,
            grh_gid_fl: grh_gid_fl.to_be(),
            rgid,
        }
    }
    /// Set the UD destination QPN and Q_Key, keeping the rest of the AV (rdma-core
    /// `_set_datagram_seg` copies the AH's AV and overwrites these two).
    #[inline(always)]
    pub fn set_ud_dest(&mut self, dqpn: u32, qkey: u32) {
        let ext = u32::from_be(self.dqp_dct) & EXTENDED_UD_AV;
        self.dqp_dct = (ext | (dqpn & 0x00ff_ffff)).to_be();
        self.key = ((qkey as u64) << 32).to_be();
    }
    /// UD Q_Key.
    pub fn qkey(&self) -> u32 {
        (u64::from_be(self.key) >> 32) as u32
    }
    /// Destination QPN (or DCT number).
    pub fn dqpn(&self) -> u32 {
        u32::from_be(self.dqp_dct) & 0x00ff_ffff
    }
    /// Whether the full 48-byte AV is used.
    pub fn is_extended(&self) -> bool {
        u32::from_be(self.dqp_dct) & EXTENDED_UD_AV != 0
    }
    /// Destination LID / UDP source port.
    pub fn rlid(&self) -> u16 {
        u16::from_be(self.rlid)
    }
    /// SGID index (bits 27:20 of `grh_gid_fl`).
    pub fn sgid_index(&self) -> u8 {
        (u32::from_be(self.grh_gid_fl) >> 20) as u8
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        u32::from_be(self.grh_gid_fl) & 0xf_ffff
    }
}

/// XRC segment (`struct mlx5_wqe_xrc_seg`, 16 bytes), after ctrl on XRC send QPs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XrcSeg {
    /// BE32 XRC SRQ number.
    pub xrc_srqn: u32,
    /// Reserved, zero.
    pub reserved: [u32; 3],
}

impl XrcSeg {
    /// Segment for the given XRC SRQ.
    pub fn new(xrc_srqn: u32) -> XrcSeg {
        XrcSeg {
            xrc_srqn: xrc_srqn.to_be(),
            reserved: [0; 3],
        }
    }
}

/// SRQ next segment (`struct mlx5_wqe_srq_next_seg`, 16 bytes), first in every SRQ WQE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// BE16 index of the next WQE in the free list.
    pub next_wqe_index: u16,
    /// Signature.
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}

impl SrqNextSeg {
    /// Next WQE index.
    pub fn next(&self) -> u16 {
        u16::from_be(self.next_wqe_index)
    }
    /// Set the next WQE index.
    pub fn set_next(&mut self, idx: u16) {
        self.next_wqe_index = idx.to_be();
    }
}

/// A segment whose bytes can be read from and written to a ring.
///
/// # Safety
/// Implementors are `#[repr(C)]` plain-old-data of a multiple of 16 bytes (or 4 for the
/// inline header) with no padding, so any byte pattern is a valid value.
pub unsafe trait Segment: Copy {
    /// The segment's size in bytes.
    const SIZE: usize = core::mem::size_of::<Self>();
    /// The raw bytes.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: POD without padding per the trait contract.
        unsafe { core::slice::from_raw_parts(self as *const Self as *const u8, Self::SIZE) }
    }
    /// Read from bytes (at least `SIZE` long).
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < Self::SIZE {
            return None;
        }
        // SAFETY: length checked; POD per the trait contract; unaligned read.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr() as *const Self) })
    }
}

// SAFETY: all are repr(C) PODs without padding (sizes asserted below).
unsafe impl Segment for CtrlSeg {}
unsafe impl Segment for RaddrSeg {}
unsafe impl Segment for DataSeg {}
unsafe impl Segment for InlineHdr {}
unsafe impl Segment for AtomicSeg {}
unsafe impl Segment for MaskedCs64Seg {}
unsafe impl Segment for MaskedFa64Seg {}
unsafe impl Segment for MaskedCs32Seg {}
unsafe impl Segment for MaskedFa32Seg {}
unsafe impl Segment for AvSeg {}
unsafe impl Segment for XrcSeg {}
unsafe impl Segment for SrqNextSeg {}

const _: () = {
    assert!(core::mem::size_of::<CtrlSeg>() == 16);
    assert!(core::mem::size_of::<RaddrSeg>() == 16);
    assert!(core::mem::size_of::<DataSeg>() == 16);
    assert!(core::mem::size_of::<InlineHdr>() == 4);
    assert!(core::mem::size_of::<AtomicSeg>() == 16);
    assert!(core::mem::size_of::<MaskedCs64Seg>() == 32);
    assert!(core::mem::size_of::<MaskedFa64Seg>() == 16);
    assert!(core::mem::size_of::<MaskedCs32Seg>() == 16);
    assert!(core::mem::size_of::<MaskedFa32Seg>() == 16);
    assert!(core::mem::size_of::<AvSeg>() == 48);
    assert!(core::mem::size_of::<XrcSeg>() == 16);
    assert!(core::mem::size_of::<SrqNextSeg>() == 16);
};
