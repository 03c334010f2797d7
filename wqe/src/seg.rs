//! Segment layouts. Each struct is `#[repr(C)]` with the field order and sizes of rdma-core's
//! `struct mlx5_wqe_*` in `providers/mlx5/mlx5dv.h` (or `wqe.h`); multi-byte fields are the
//! big-endian types [`U16`], [`U32`] and [`U64`] (`zerocopy::byteorder::big_endian`), as the
//! `__be16` / `__be32` / `__be64` fields there are, so a host-order integer cannot be stored
//! in one. Constructors take host-order values; getters return host-order values. The crate
//! docs explain the scheme.

use crate::opcode::{EXTENDED_UD_AV, INLINE_SEG, INVALID_LKEY};
use core::mem::{align_of, offset_of, size_of};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Control segment (`struct mlx5_wqe_ctrl_seg`, 16 bytes), first in every send WQE.
///
/// `[0]=opmod [1..2]=wqe_index [3]=opcode [4..6]=qpn [7]=ds [8]=signature
/// [9..10]=dci_stream_channel_id [11]=fm_ce_se [12..15]=imm` (rdma-core `mlx5dv_set_ctrl_seg`).
///
/// Built with [`CtrlSeg::builder`], each field named:
///
/// ```
/// use mlx5_wqe::{CtrlSeg, CTRL_CQ_UPDATE, OPCODE_RDMA_WRITE};
/// use zerocopy::IntoBytes;
///
/// let ctrl = CtrlSeg::builder()
///     .opcode(OPCODE_RDMA_WRITE)
///     .wqe_index(0x1234)
///     .qpn(0xabcdef)
///     .ds(3)
///     .fm_ce_se(CTRL_CQ_UPDATE)
///     .build();
/// assert_eq!(&ctrl.as_bytes()[..8], &[0, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 3]);
/// assert_eq!((ctrl.wqe_index(), ctrl.qpn(), ctrl.ds()), (0x1234, 0xabcdef, 3));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct CtrlSeg {
    /// BE32: opmod (31:24) | wqe_index (23:8) | opcode (7:0).
    pub opmod_idx_opcode: U32,
    /// BE32: qpn (31:8) | ds (7:0).
    pub qpn_ds: U32,
    /// WQE signature (0 unless the QP was created with signatures).
    pub signature: u8,
    /// BE16 DCI stream channel id (0 outside DCI streams).
    pub dci_stream_channel_id: U16,
    /// Fence mode (7:5), completion mode (3:2), solicited (1).
    pub fm_ce_se: u8,
    /// BE32 immediate data (rdma-core stores `wr->imm_data`, a `__be32`, as is: the host-order
    /// immediate travels big-endian); or the rkey/mkey for SEND_INVAL / UMR
    /// (`htobe32(wr->invalidate_rkey)`, rdma-core `send_ieth`).
    pub imm: U32,
}

/// Builder of a [`CtrlSeg`] from host-order values, one named setter per field
/// ([`CtrlSeg::builder`]); unset fields are 0, bytes 9–10 too (the DCI stream id, which
/// `mlx5dv_set_ctrl_seg` leaves alone; [`CtrlSegBuilder::dci_stream`] sets it as
/// `mlx5dv_wr_set_dc_addr_stream` does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct CtrlSegBuilder {
    opmod: u8,
    wqe_index: u16,
    opcode: u8,
    qpn: u32,
    ds: u8,
    signature: u8,
    dci_stream: u16,
    fm_ce_se: u8,
    imm: u32,
}

impl CtrlSegBuilder {
    /// Opcode (`MLX5_OPCODE_*`).
    #[inline(always)]
    pub const fn opcode(mut self, opcode: u8) -> Self {
        self.opcode = opcode;
        self
    }
    /// Opcode modifier (`OPMOD_*`; 0 for most opcodes).
    #[inline(always)]
    pub const fn opmod(mut self, opmod: u8) -> Self {
        self.opmod = opmod;
        self
    }
    /// 16-bit WQE index: the producer counter of the WQE's first basic block.
    #[inline(always)]
    pub const fn wqe_index(mut self, wqe_index: u16) -> Self {
        self.wqe_index = wqe_index;
        self
    }
    /// QP number (24 bits; higher bits are shifted out, as `qp_num << 8` does in rdma-core).
    #[inline(always)]
    pub const fn qpn(mut self, qpn: u32) -> Self {
        self.qpn = qpn;
        self
    }
    /// DS count: the WQE's size in 16-byte units.
    #[inline(always)]
    pub const fn ds(mut self, ds: u8) -> Self {
        self.ds = ds;
        self
    }
    /// WQE signature.
    #[inline(always)]
    pub const fn signature(mut self, signature: u8) -> Self {
        self.signature = signature;
        self
    }
    /// DCI stream id (bytes 9–10, BE16; rdma-core `qp.c` `mlx5_send_wr_set_dc_addr_stream`).
    #[inline(always)]
    pub const fn dci_stream(mut self, stream: u16) -> Self {
        self.dci_stream = stream;
        self
    }
    /// Fence / completion / solicited flags (`CTRL_*`).
    #[inline(always)]
    pub const fn fm_ce_se(mut self, fm_ce_se: u8) -> Self {
        self.fm_ce_se = fm_ce_se;
        self
    }
    /// Immediate data or invalidated key, host order (stored big-endian).
    #[inline(always)]
    pub const fn imm(mut self, imm: u32) -> Self {
        self.imm = imm;
        self
    }
    /// The segment, laid out as `mlx5dv_set_ctrl_seg` lays it out.
    #[inline(always)]
    pub const fn build(self) -> CtrlSeg {
        CtrlSeg {
            opmod_idx_opcode: U32::new(
                (self.opmod as u32) << 24 | (self.wqe_index as u32) << 8 | self.opcode as u32,
            ),
            qpn_ds: U32::new(self.qpn << 8 | self.ds as u32),
            signature: self.signature,
            dci_stream_channel_id: U16::new(self.dci_stream),
            fm_ce_se: self.fm_ce_se,
            imm: U32::new(self.imm),
        }
    }
}

impl CtrlSeg {
    /// A builder with every field 0 ([`CtrlSegBuilder`]).
    #[inline(always)]
    pub const fn builder() -> CtrlSegBuilder {
        CtrlSegBuilder {
            opmod: 0,
            wqe_index: 0,
            opcode: 0,
            qpn: 0,
            ds: 0,
            signature: 0,
            dci_stream: 0,
            fm_ce_se: 0,
            imm: 0,
        }
    }
    /// opmod (bits 31:24 of the first word).
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode.get() >> 24) as u8
    }
    /// 16-bit WQE index (producer counter of the WQE's first basic block).
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode.get() >> 8) as u16
    }
    /// Opcode (`MLX5_OPCODE_*`).
    pub fn opcode(&self) -> u8 {
        self.opmod_idx_opcode.get() as u8
    }
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn_ds.get() >> 8
    }
    /// DS count: WQE size in 16-byte units (6 meaningful bits).
    pub fn ds(&self) -> u8 {
        self.qpn_ds.get() as u8
    }
    /// The immediate (or invalidated key), host order.
    pub fn imm(&self) -> u32 {
        self.imm.get()
    }
    /// The immediate as the 4 bytes that go on the wire.
    pub fn imm_bytes(&self) -> [u8; 4] {
        self.imm.to_bytes()
    }
}

/// Remote address segment (`struct mlx5_wqe_raddr_seg`, 16 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct RaddrSeg {
    /// BE64 remote virtual address.
    pub raddr: U64,
    /// BE32 remote key.
    pub rkey: U32,
    /// Reserved, zero.
    pub reserved: U32,
}

impl RaddrSeg {
    /// Build from host-order values (rdma-core `set_raddr_seg`).
    #[inline(always)]
    pub const fn new(raddr: u64, rkey: u32) -> RaddrSeg {
        RaddrSeg {
            raddr: U64::new(raddr),
            rkey: U32::new(rkey),
            reserved: U32::ZERO,
        }
    }
    /// Remote address.
    pub fn raddr(&self) -> u64 {
        self.raddr.get()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
}

/// Data (pointer) segment (`struct mlx5_wqe_data_seg`, 16 bytes): send gather entries,
/// receive scatter entries and the local buffer of READs and atomics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct DataSeg {
    /// BE32 byte count (bit 31 must be 0).
    pub byte_count: U32,
    /// BE32 local key.
    pub lkey: U32,
    /// BE64 address.
    pub addr: U64,
}

impl DataSeg {
    /// Build from host-order values (rdma-core `mlx5dv_set_data_seg`).
    #[inline(always)]
    pub const fn new(length: u32, lkey: u32, addr: u64) -> DataSeg {
        DataSeg {
            byte_count: U32::new(length),
            lkey: U32::new(lkey),
            addr: U64::new(addr),
        }
    }
    /// The receive-list terminator: `{0, MLX5_INVALID_LKEY, 0}` (rdma-core `mlx5_post_recv`).
    #[inline(always)]
    pub const fn terminator() -> DataSeg {
        DataSeg::new(0, INVALID_LKEY, 0)
    }
    /// Byte count.
    pub fn byte_count(&self) -> u32 {
        self.byte_count.get()
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey.get()
    }
    /// Address.
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }
    /// Whether this is the receive-list terminator (lkey `MLX5_INVALID_LKEY`).
    pub fn is_terminator(&self) -> bool {
        self.lkey() == INVALID_LKEY
    }
}

/// Inline data segment header (`struct mlx5_wqe_inl_data_seg`, 4 bytes); the payload follows
/// it unaligned and the segment is padded to 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct InlineHdr {
    /// BE32 `len | MLX5_INLINE_SEG`.
    pub byte_count: U32,
}

impl InlineHdr {
    /// Header for `len` payload bytes.
    #[inline(always)]
    pub const fn new(len: u32) -> InlineHdr {
        InlineHdr {
            byte_count: U32::new(len | INLINE_SEG),
        }
    }
    /// Whether the `MLX5_INLINE_SEG` bit is set.
    pub fn is_inline(&self) -> bool {
        self.byte_count.get() & INLINE_SEG != 0
    }
    /// Payload length.
    pub fn len(&self) -> u32 {
        self.byte_count.get() & !INLINE_SEG
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct AtomicSeg {
    /// BE64 swap value (CAS) or addend (FAA).
    pub swap_add: U64,
    /// BE64 compare value (CAS; unused by FAA).
    pub compare: U64,
}

impl AtomicSeg {
    /// Compare-and-swap operands (rdma-core `_set_atomic_seg`).
    #[inline(always)]
    pub const fn cas(compare: u64, swap: u64) -> AtomicSeg {
        AtomicSeg {
            swap_add: U64::new(swap),
            compare: U64::new(compare),
        }
    }
    /// Fetch-and-add operand.
    #[inline(always)]
    pub const fn faa(add: u64) -> AtomicSeg {
        AtomicSeg {
            swap_add: U64::new(add),
            compare: U64::ZERO,
        }
    }
    /// Swap value or addend.
    pub fn swap_add(&self) -> u64 {
        self.swap_add.get()
    }
    /// Compare value.
    pub fn compare(&self) -> u64 {
        self.compare.get()
    }
}

/// 64-bit masked compare-and-swap segment (`struct mlx5_wqe_masked_atomic_seg`, 32 bytes;
/// rdma-core `wqe.h`). The second 16 bytes may wrap to the ring start on their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct MaskedCs64Seg {
    /// BE64 swap value.
    pub swap_add: U64,
    /// BE64 compare value.
    pub compare: U64,
    /// BE64 mask of the bits to swap.
    pub swap_add_mask: U64,
    /// BE64 mask of the bits to compare.
    pub compare_mask: U64,
}

impl MaskedCs64Seg {
    /// Operands: `(*addr & compare_mask) == (compare & compare_mask)` → replace the
    /// `swap_mask` bits with those of `swap`.
    #[inline(always)]
    pub const fn new(compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) -> MaskedCs64Seg {
        MaskedCs64Seg {
            swap_add: U64::new(swap),
            compare: U64::new(compare),
            swap_add_mask: U64::new(swap_mask),
            compare_mask: U64::new(compare_mask),
        }
    }
}

/// 64-bit masked fetch-and-add segment (16 bytes; UCX `uct_ib_mlx5_atomic_masked_fadd64_seg_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct MaskedFa64Seg {
    /// BE64 addend.
    pub add: U64,
    /// BE64 field boundary: a set bit ends a field, so carries do not cross into the next.
    pub field_boundary: U64,
}

impl MaskedFa64Seg {
    /// Operands.
    #[inline(always)]
    pub const fn new(add: u64, field_boundary: u64) -> MaskedFa64Seg {
        MaskedFa64Seg {
            add: U64::new(add),
            field_boundary: U64::new(field_boundary),
        }
    }
}

/// 32-bit masked compare-and-swap segment (16 bytes; UCX `..._masked_cswap32_seg_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct MaskedCs32Seg {
    /// BE32 swap value.
    pub swap: U32,
    /// BE32 compare value.
    pub compare: U32,
    /// BE32 swap mask.
    pub swap_mask: U32,
    /// BE32 compare mask.
    pub compare_mask: U32,
}

impl MaskedCs32Seg {
    /// Operands.
    #[inline(always)]
    pub const fn new(compare: u32, compare_mask: u32, swap: u32, swap_mask: u32) -> MaskedCs32Seg {
        MaskedCs32Seg {
            swap: U32::new(swap),
            compare: U32::new(compare),
            swap_mask: U32::new(swap_mask),
            compare_mask: U32::new(compare_mask),
        }
    }
}

/// 32-bit masked fetch-and-add segment (16 bytes; UCX `..._masked_fadd32_seg_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct MaskedFa32Seg {
    /// BE32 addend.
    pub add: U32,
    /// BE32 field boundary.
    pub field_boundary: U32,
    /// Reserved, zero.
    pub reserved: [U32; 2],
}

impl MaskedFa32Seg {
    /// Operands.
    #[inline(always)]
    pub const fn new(add: u32, field_boundary: u32) -> MaskedFa32Seg {
        MaskedFa32Seg {
            add: U32::new(add),
            field_boundary: U32::new(field_boundary),
            reserved: [U32::ZERO; 2],
        }
    }
}

/// Datagram segment / address vector (`struct mlx5_wqe_datagram_seg` = `struct mlx5_wqe_av`,
/// 48 bytes). The first 16 bytes alone are the compact AV (bit 31 of `dqp_dct` clear).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct AvSeg {
    /// BE64 key: UD Q_Key in bits 63:32 (i.e. BE32 qkey at byte 0), DC key for DC.
    pub key: U64,
    /// BE32: `MLX5_EXTENDED_UD_AV` (bit 31) | destination QPN (23:0).
    pub dqp_dct: U32,
    /// Static rate (7:4) | SL (IB 3:0; RoCE `(sl & 7) << 1`).
    pub stat_rate_sl: u8,
    /// Force loopback / source path bits.
    pub fl_mlid: u8,
    /// BE16 destination LID (IB) or UDP source port (RoCE v2).
    pub rlid: U16,
    /// Reserved (left untouched by `mlx5dv_set_dgram_seg`).
    pub reserved0: [u8; 4],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// BE32: GRH present (30, IB only) | SGID index (27:20) | flow label (19:0).
    pub grh_gid_fl: U32,
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
            key: U64::new(key),
            dqp_dct: U32::new(dqp_dct | if ext { EXTENDED_UD_AV } else { 0 }),
            stat_rate_sl,
            fl_mlid,
            rlid: U16::new(rlid),
            reserved0: [0; 4],
            rmac,
            tclass,
            hop_limit,
            grh_gid_fl: U32::new(grh_gid_fl),
            rgid,
        }
    }
    /// Set the UD destination QPN and Q_Key, keeping the rest of the AV (rdma-core
    /// `_set_datagram_seg` copies the AH's AV and overwrites these two).
    #[inline(always)]
    pub fn set_ud_dest(&mut self, dqpn: u32, qkey: u32) {
        let ext = self.dqp_dct.get() & EXTENDED_UD_AV;
        self.dqp_dct = U32::new(ext | (dqpn & 0x00ff_ffff));
        self.key = U64::new((qkey as u64) << 32);
    }
    /// Make the AV name DC target `dctn` with access key `dc_key`, keeping the rest of it, as
    /// rdma-core `qp.c` `mlx5_send_wr_set_dc_addr` does after copying the AH's AV: `dqp_dct
    /// |= BE32(dctn | MLX5_EXTENDED_UD_AV)` (ORed into what the AV holds there, not
    /// assigned) and `key = BE64(dc_key)`.
    #[inline(always)]
    pub fn set_dc_dest(&mut self, dctn: u32, dc_key: u64) {
        self.dqp_dct = U32::new(self.dqp_dct.get() | dctn | EXTENDED_UD_AV);
        self.key = U64::new(dc_key);
    }
    /// The DC access key (the whole 64-bit key field, as a DCI WQE carries it).
    pub fn dc_key(&self) -> u64 {
        self.key.get()
    }
    /// Set or clear `MLX5_EXTENDED_UD_AV` (bit 31 of `dqp_dct`): whether the full 48-byte AV
    /// travels, or only its first 16 bytes ([`AvSeg::compact`]).
    #[inline(always)]
    pub fn set_extended(&mut self, ext: bool) {
        let dqp = self.dqp_dct.get() & !EXTENDED_UD_AV;
        self.dqp_dct = U32::new(dqp | if ext { EXTENDED_UD_AV } else { 0 });
    }
    /// The first 16 bytes, the compact AV (UCX `uct_ib_mlx5_get_compact_av`).
    #[inline(always)]
    pub const fn compact(&self) -> CompactAvSeg {
        CompactAvSeg {
            key: self.key,
            dqp_dct: self.dqp_dct,
            stat_rate_sl: self.stat_rate_sl,
            fl_mlid: self.fl_mlid,
            rlid: self.rlid,
        }
    }
    /// UD Q_Key.
    pub fn qkey(&self) -> u32 {
        (self.key.get() >> 32) as u32
    }
    /// Destination QPN (or DCT number).
    pub fn dqpn(&self) -> u32 {
        self.dqp_dct.get() & 0x00ff_ffff
    }
    /// Whether the full 48-byte AV is used.
    pub fn is_extended(&self) -> bool {
        self.dqp_dct.get() & EXTENDED_UD_AV != 0
    }
    /// Destination LID / UDP source port.
    pub fn rlid(&self) -> u16 {
        self.rlid.get()
    }
    /// SGID index (bits 27:20 of `grh_gid_fl`).
    pub fn sgid_index(&self) -> u8 {
        (self.grh_gid_fl.get() >> 20) as u8
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        self.grh_gid_fl.get() & 0xf_ffff
    }
}

/// The compact address vector: the first 16 bytes of an [`AvSeg`], sent alone when bit 31 of
/// `dqp_dct` is clear (UCX `uct_ib_mlx5_get_compact_av`; the device resolves the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct CompactAvSeg {
    /// BE64 key, as in [`AvSeg::key`].
    pub key: U64,
    /// BE32 destination QPN, `MLX5_EXTENDED_UD_AV` clear.
    pub dqp_dct: U32,
    /// Static rate | SL.
    pub stat_rate_sl: u8,
    /// Force loopback / source path bits.
    pub fl_mlid: u8,
    /// BE16 destination LID.
    pub rlid: U16,
}

/// XRC segment (`struct mlx5_wqe_xrc_seg`, 16 bytes), after ctrl on XRC send QPs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct XrcSeg {
    /// BE32 XRC SRQ number.
    pub xrc_srqn: U32,
    /// Reserved, zero.
    pub reserved: [U32; 3],
}

impl XrcSeg {
    /// Segment for the given XRC SRQ.
    pub const fn new(xrc_srqn: u32) -> XrcSeg {
        XrcSeg {
            xrc_srqn: U32::new(xrc_srqn),
            reserved: [U32::ZERO; 3],
        }
    }
}

/// SRQ next segment (`struct mlx5_wqe_srq_next_seg`, 16 bytes), first in every SRQ WQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct SrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// BE16 index of the next WQE in the free list.
    pub next_wqe_index: U16,
    /// Signature.
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}

impl SrqNextSeg {
    /// Next WQE index.
    pub fn next(&self) -> u16 {
        self.next_wqe_index.get()
    }
    /// Set the next WQE index.
    pub fn set_next(&mut self, idx: u16) {
        self.next_wqe_index.set(idx);
    }
}

/// A fixed-size WQE segment, whole 16-byte units, that [`crate::WqeWriter::push`] copies
/// into a ring.
///
/// Plain-old-data is not asserted by hand: the supertraits are zerocopy's derives, which
/// check at compile time that the struct is `#[repr(C)]`, has no padding and accepts every
/// byte pattern; [`Segment::SIZE`] fails to compile for a size that is not whole DS units.
/// The bytes are [`IntoBytes::as_bytes`]; a segment is read back with
/// [`FromBytes::read_from_prefix`] or [`FromBytes::read_from_bytes`].
pub trait Segment: FromBytes + IntoBytes + KnownLayout + Immutable + Copy {
    /// The segment's size in bytes, a non-zero multiple of 16 (`MLX5_SEND_WQE_DS`).
    const SIZE: usize = {
        let n = size_of::<Self>();
        assert!(
            n != 0 && n & 15 == 0,
            "a WQE segment is whole 16-byte units"
        );
        n
    };
}

impl Segment for CtrlSeg {}
impl Segment for RaddrSeg {}
impl Segment for DataSeg {}
impl Segment for AtomicSeg {}
impl Segment for MaskedCs64Seg {}
impl Segment for MaskedFa64Seg {}
impl Segment for MaskedCs32Seg {}
impl Segment for MaskedFa32Seg {}
impl Segment for AvSeg {}
impl Segment for CompactAvSeg {}
impl Segment for XrcSeg {}
impl Segment for SrqNextSeg {}

/// Sizes and field offsets of rdma-core's structs (the conformance crate checks the same
/// against the installed `mlx5dv.h`), and alignment 1: a segment may sit at any 16-byte unit of
/// a ring, or at any byte of a buffer being decoded.
const _: () = {
    assert!(size_of::<CtrlSeg>() == 16);
    assert!(offset_of!(CtrlSeg, opmod_idx_opcode) == 0);
    assert!(offset_of!(CtrlSeg, qpn_ds) == 4);
    assert!(offset_of!(CtrlSeg, signature) == 8);
    assert!(offset_of!(CtrlSeg, dci_stream_channel_id) == 9);
    assert!(offset_of!(CtrlSeg, fm_ce_se) == 11);
    assert!(offset_of!(CtrlSeg, imm) == 12);

    assert!(size_of::<RaddrSeg>() == 16);
    assert!(offset_of!(RaddrSeg, raddr) == 0);
    assert!(offset_of!(RaddrSeg, rkey) == 8);
    assert!(offset_of!(RaddrSeg, reserved) == 12);

    assert!(size_of::<DataSeg>() == 16);
    assert!(offset_of!(DataSeg, byte_count) == 0);
    assert!(offset_of!(DataSeg, lkey) == 4);
    assert!(offset_of!(DataSeg, addr) == 8);

    assert!(size_of::<InlineHdr>() == 4);

    assert!(size_of::<AtomicSeg>() == 16);
    assert!(offset_of!(AtomicSeg, swap_add) == 0);
    assert!(offset_of!(AtomicSeg, compare) == 8);

    assert!(size_of::<MaskedCs64Seg>() == 32);
    assert!(offset_of!(MaskedCs64Seg, swap_add) == 0);
    assert!(offset_of!(MaskedCs64Seg, compare) == 8);
    assert!(offset_of!(MaskedCs64Seg, swap_add_mask) == 16);
    assert!(offset_of!(MaskedCs64Seg, compare_mask) == 24);

    assert!(size_of::<MaskedFa64Seg>() == 16);
    assert!(offset_of!(MaskedFa64Seg, field_boundary) == 8);

    assert!(size_of::<MaskedCs32Seg>() == 16);
    assert!(offset_of!(MaskedCs32Seg, compare) == 4);
    assert!(offset_of!(MaskedCs32Seg, swap_mask) == 8);
    assert!(offset_of!(MaskedCs32Seg, compare_mask) == 12);

    assert!(size_of::<MaskedFa32Seg>() == 16);
    assert!(offset_of!(MaskedFa32Seg, field_boundary) == 4);
    assert!(offset_of!(MaskedFa32Seg, reserved) == 8);

    assert!(size_of::<AvSeg>() == 48);
    assert!(offset_of!(AvSeg, key) == 0);
    assert!(offset_of!(AvSeg, dqp_dct) == 8);
    assert!(offset_of!(AvSeg, stat_rate_sl) == 12);
    assert!(offset_of!(AvSeg, fl_mlid) == 13);
    assert!(offset_of!(AvSeg, rlid) == 14);
    assert!(offset_of!(AvSeg, reserved0) == 16);
    assert!(offset_of!(AvSeg, rmac) == 20);
    assert!(offset_of!(AvSeg, tclass) == 26);
    assert!(offset_of!(AvSeg, hop_limit) == 27);
    assert!(offset_of!(AvSeg, grh_gid_fl) == 28);
    assert!(offset_of!(AvSeg, rgid) == 32);

    assert!(size_of::<CompactAvSeg>() == AvSeg::COMPACT_SIZE);
    assert!(offset_of!(CompactAvSeg, rlid) == offset_of!(AvSeg, rlid));

    assert!(size_of::<XrcSeg>() == 16);
    assert!(offset_of!(XrcSeg, reserved) == 4);

    assert!(size_of::<SrqNextSeg>() == 16);
    assert!(offset_of!(SrqNextSeg, next_wqe_index) == 2);
    assert!(offset_of!(SrqNextSeg, signature) == 4);
    assert!(offset_of!(SrqNextSeg, rsvd1) == 5);

    assert!(align_of::<CtrlSeg>() == 1);
    assert!(align_of::<RaddrSeg>() == 1);
    assert!(align_of::<DataSeg>() == 1);
    assert!(align_of::<InlineHdr>() == 1);
    assert!(align_of::<AtomicSeg>() == 1);
    assert!(align_of::<MaskedCs64Seg>() == 1);
    assert!(align_of::<MaskedFa64Seg>() == 1);
    assert!(align_of::<MaskedCs32Seg>() == 1);
    assert!(align_of::<MaskedFa32Seg>() == 1);
    assert!(align_of::<AvSeg>() == 1);
    assert!(align_of::<CompactAvSeg>() == 1);
    assert!(align_of::<XrcSeg>() == 1);
    assert!(align_of::<SrqNextSeg>() == 1);

    // Every segment is whole DS units (evaluates each impl's `SIZE` assertion).
    let _ = <CtrlSeg as Segment>::SIZE;
    let _ = <RaddrSeg as Segment>::SIZE;
    let _ = <DataSeg as Segment>::SIZE;
    let _ = <AtomicSeg as Segment>::SIZE;
    let _ = <MaskedCs64Seg as Segment>::SIZE;
    let _ = <MaskedFa64Seg as Segment>::SIZE;
    let _ = <MaskedCs32Seg as Segment>::SIZE;
    let _ = <MaskedFa32Seg as Segment>::SIZE;
    let _ = <AvSeg as Segment>::SIZE;
    let _ = <CompactAvSeg as Segment>::SIZE;
    let _ = <XrcSeg as Segment>::SIZE;
    let _ = <SrqNextSeg as Segment>::SIZE;
};
