//! # mlx5-wqe
//!
//! Work-queue-entry formats of mlx5 (ConnectX-4 and later) and a writer that builds them in a
//! circular send ring, byte-identical to what rdma-core's `mlx5dv.h` helpers and
//! `providers/mlx5/qp.c` produce.
//!
//! - [`opcode`]: send opcodes, `fm_ce_se` flags and the other constants.
//! - [`seg`]: every segment as a `#[repr(C)]` struct with big-endian fields, laid out like
//!   rdma-core's `struct mlx5_wqe_*_seg` (checked against the header by the conformance tests).
//! - [`ring`]: DS / basic-block arithmetic and [`ring::WqeWriter`], which writes a WQE into a
//!   ring of 64-byte basic blocks, wrapping at 16-byte granularity without NOP padding.
//! - [`recv`]: receive and SRQ WQEs (data segments with the `MLX5_INVALID_LKEY` terminator).
//!
//! The crate is `no_std` and allocation-free.
//!
//! ## Typed wire views
//!
//! A segment is a struct whose fields have the wire's types, in the wire's order: single
//! bytes are `u8` or `[u8; N]`, multi-byte fields are [`U16`], [`U32`] and [`U64`] of
//! `zerocopy::byteorder::big_endian` — `#[repr(transparent)]` wrappers around `[u8; N]` that
//! hold their value big-endian, as the `__be16` / `__be32` / `__be64` fields of `mlx5dv.h` do.
//! As with smoltcp's `wire` types, the representation is network order and the interface is
//! host order:
//!
//! - constructors ([`DataSeg::new`], [`RaddrSeg::new`], ...) and the control-segment builder
//!   ([`CtrlSeg::builder`], one named setter per field) take host-order values; storing one
//!   is `x.to_be_bytes()`, the same byte swap a hand-written `to_be()` costs;
//! - getters ([`DataSeg::lkey`], [`CtrlSeg::wqe_index`], ...) return host-order values, one per
//!   bit field of a packed word;
//! - the fields stay public (the conformance tests take their offsets against the C header),
//!   but only a value of the field's type goes in: `seg.rkey.set(5)`, `seg.rkey = U32::new(5)`
//!   or `seg.rkey = 5.into()` store `00 00 00 05`; a host-order integer does not compile.
//!
//! ```
//! use mlx5_wqe::{RaddrSeg, U32};
//! use zerocopy::IntoBytes;
//!
//! let mut seg = RaddrSeg::new(0x1000, 7);
//! seg.rkey = U32::new(5);
//! assert_eq!(seg.rkey(), 5);
//! assert_eq!(&seg.as_bytes()[8..12], &[0, 0, 0, 5]);
//! ```
//!
//! ```compile_fail,E0308
//! use mlx5_wqe::RaddrSeg;
//!
//! let mut seg = RaddrSeg::new(0x1000, 7);
//! seg.rkey = 5; // a host-order `u32` in a big-endian field: a type error
//! ```
//!
//! The layouts are checked when the crate compiles, not asserted by hand: each struct
//! derives zerocopy's `FromBytes`, `IntoBytes`, `KnownLayout`, `Immutable` and `Unaligned`,
//! which refuse a struct with padding, one that is not `#[repr(C)]` or one with a field that
//! is not plain bytes, so no `unsafe impl` claims plain-old-data; constant assertions in
//! [`seg`] pin every size and field offset to rdma-core's. Every field being bytes, a segment
//! has alignment 1 and may sit at any offset of a ring or a buffer. The bytes of a segment are
//! `IntoBytes::as_bytes`; `FromBytes::read_from_prefix` copies one out of a buffer, and
//! `FromBytes::ref_from_prefix` views it in place, smoltcp-style, without a copy:
//!
//! ```
//! use mlx5_wqe::DataSeg;
//! use zerocopy::FromBytes;
//!
//! // A data segment as it sits in a WQE: byte count, lkey, address, all big-endian.
//! let wqe = [0, 0, 0x10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0xff];
//! let (seg, _rest) = DataSeg::ref_from_prefix(&wqe[..]).unwrap();
//! assert_eq!((seg.byte_count(), seg.lkey(), seg.addr()), (0x1000, 0x100, 0x2000));
//! ```
//!
//! [`Segment`] marks the structs [`WqeWriter::push`] accepts; its `SIZE` does not compile for
//! a struct that is not whole 16-byte units.
//!
//! Unlike smoltcp's `Packet<T: AsRef<[u8]>>`, which wraps a buffer and computes each field's
//! offset in its accessors, the struct here *is* the layout: a segment is built in registers
//! and stored through a cast of the ring pointer, which is what the data path's post does
//! (mlx5-qp's lean entry points write the control segment's two 64-bit words from
//! precomputed templates and the other segments through these constructors; the instruction
//! counts of `benches/count-instructions.sh` are unchanged by the typed fields).
//!
//! One trap remains, and it is zerocopy's arithmetic: `U32` implements `|=`, `&=`, `==` and
//! the like against a *host-order* `u32` (`seg.dqp_dct |= EXTENDED_UD_AV` sets bit 31 of the
//! big-endian value). Code from before the typed fields that wrote `field |= X.to_be()`
//! still compiles and is now wrong; use the setters ([`AvSeg::set_extended`]) or host-order
//! operands.
//!
//! ## Paths
//!
//! Each item is documented once, in its module; the crate root re-exports, by name, the
//! opcode constants, the segments and the writer, so `mlx5_wqe::DataSeg` and
//! `mlx5_wqe::seg::DataSeg` are the same item.
#![no_std]
#![deny(missing_docs)]

pub mod opcode;
pub mod recv;
pub mod ring;
pub mod seg;

pub use opcode::{
    opcode_name, ATOMIC_SIZE, AV_GRH_PRESENT, CTRL_CE_MASK, CTRL_CQ_UPDATE, CTRL_CQ_UPDATE_AND_EQE,
    CTRL_FENCE, CTRL_FENCE_MODE_FENCE, CTRL_FM_MASK, CTRL_INITIATOR_SMALL_FENCE, CTRL_SOLICITED,
    CTRL_STRONG_ORDERING, EXTENDED_UD_AV, INLINE_SEG, INVALID_LKEY, MAX_DS, OPCODE_ATOMIC_CS,
    OPCODE_ATOMIC_FA, OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA, OPCODE_BIND_MW,
    OPCODE_CONFIG_CMD, OPCODE_FMR, OPCODE_LOCAL_INVAL, OPCODE_NOP, OPCODE_RDMA_READ,
    OPCODE_RDMA_WRITE, OPCODE_RDMA_WRITE_IMM, OPCODE_SEND, OPCODE_SEND_IMM, OPCODE_SEND_INVAL,
    OPCODE_TSO, OPCODE_UMR, OPMOD_EXT_ATOMIC_32, OPMOD_EXT_ATOMIC_64, SEND_WQE_BB, SEND_WQE_DS,
    SEND_WQE_MAX_WQEBBS, SEND_WQE_SHIFT,
};
pub use ring::{bbs_for_ds, ds_for_bytes, SqRing, WqeError, WqeWriter};
pub use seg::{
    inline_seg_size, AtomicSeg, AvSeg, CompactAvSeg, CtrlSeg, CtrlSegBuilder, DataSeg, InlineHdr,
    MaskedCs32Seg, MaskedCs64Seg, MaskedFa32Seg, MaskedFa64Seg, RaddrSeg, Segment, SrqNextSeg,
    XrcSeg,
};
/// The big-endian field types of the segments (`zerocopy::byteorder::big_endian`), for
/// storing into a field: `seg.rkey = U32::new(rkey)`.
#[doc(no_inline)]
pub use zerocopy::byteorder::big_endian::{U16, U32, U64};
