//! `mlx5dv_init_obj` and the structs it fills (rdma-core `providers/mlx5/mlx5dv.h`, filled by
//! `providers/mlx5/mlx5.c` `mlx5dv_get_qp` / `_cq` / `_srq` / `_rwq` / `_dm` / `_av` / `_pd`).

use core::ffi::c_void;

use crate::verbs::{ibv_ah, ibv_cq, ibv_dm, ibv_pd, ibv_qp, ibv_srq, ibv_wq, mlx5_wqe_av};

/// `mlx5dv_init_obj` type bit: fill `mlx5dv_obj.qp` (`MLX5DV_OBJ_QP`).
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// Type bit: fill `mlx5dv_obj.cq` (`MLX5DV_OBJ_CQ`).
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
/// Type bit: fill `mlx5dv_obj.srq` (`MLX5DV_OBJ_SRQ`).
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
/// Type bit: fill `mlx5dv_obj.rwq` (`MLX5DV_OBJ_RWQ`).
pub const MLX5DV_OBJ_RWQ: u64 = 1 << 3;
/// Type bit: fill `mlx5dv_obj.dm` (`MLX5DV_OBJ_DM`).
pub const MLX5DV_OBJ_DM: u64 = 1 << 4;
/// Type bit: fill `mlx5dv_obj.ah` (`MLX5DV_OBJ_AH`).
pub const MLX5DV_OBJ_AH: u64 = 1 << 5;
/// Type bit: fill `mlx5dv_obj.pd` (`MLX5DV_OBJ_PD`).
pub const MLX5DV_OBJ_PD: u64 = 1 << 6;
/// Type bit: fill `mlx5dv_obj.devx` (`MLX5DV_OBJ_DEVX`; rdma-core after v44 only).
pub const MLX5DV_OBJ_DEVX: u64 = 1 << 7;

/// `mlx5dv_qp.comp_mask` (in/out): also report `uar_mmap_offset` (`MLX5DV_QP_MASK_UAR_MMAP_OFFSET`).
pub const MLX5DV_QP_MASK_UAR_MMAP_OFFSET: u64 = 1 << 0;
/// `mlx5dv_qp.comp_mask`: report `tirn`/`tisn`/`rqn`/`sqn` of a raw packet QP
/// (`MLX5DV_QP_MASK_RAW_QP_HANDLES`).
pub const MLX5DV_QP_MASK_RAW_QP_HANDLES: u64 = 1 << 1;
/// `mlx5dv_qp.comp_mask`: report `tir_icm_addr` (`MLX5DV_QP_MASK_RAW_QP_TIR_ADDR`).
pub const MLX5DV_QP_MASK_RAW_QP_TIR_ADDR: u64 = 1 << 2;
/// `mlx5dv_srq.comp_mask` (in/out): report `srqn` (`MLX5DV_SRQ_MASK_SRQN`).
pub const MLX5DV_SRQ_MASK_SRQN: u64 = 1 << 0;

/// One work queue of [`mlx5dv_qp`] (the anonymous `sq` / `rq` structs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp_wq {
    /// Ring base.
    pub buf: *mut c_void,
    /// Entries: 64-byte basic blocks (SQ) or WQEs (RQ); a power of two.
    pub wqe_cnt: u32,
    /// Bytes per entry (64 for the SQ).
    pub stride: u32,
}

/// The BlueFlame register of [`mlx5dv_qp`] (the anonymous `bf` struct).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp_bf {
    /// This QP's bfreg inside a UAR page.
    pub reg: *mut c_void,
    /// Half size (256) or 0 when the register has no BlueFlame (8-byte doorbell only).
    pub size: u32,
}

/// `struct mlx5dv_qp` (96 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp {
    /// Doorbell record: `dbrec[0]` RQ, `dbrec[1]` SQ, both BE32.
    pub dbrec: *mut u32,
    /// Send queue.
    pub sq: mlx5dv_qp_wq,
    /// Receive queue.
    pub rq: mlx5dv_qp_wq,
    /// BlueFlame / doorbell register.
    pub bf: mlx5dv_qp_bf,
    /// In/out: the `MLX5DV_QP_MASK_*` fields wanted, then the ones filled. Zero it before
    /// the call (rdma-core `mlx5dv_get_qp` reads it).
    pub comp_mask: u64,
    /// mmap offset of the UAR page (`MLX5DV_QP_MASK_UAR_MMAP_OFFSET`).
    pub uar_mmap_offset: libc::off_t,
    /// TIR number (raw packet QP).
    pub tirn: u32,
    /// TIS number (raw packet QP).
    pub tisn: u32,
    /// RQ number (raw packet QP).
    pub rqn: u32,
    /// SQ number (raw packet QP).
    pub sqn: u32,
    /// ICM address of the TIR (`MLX5DV_QP_MASK_RAW_QP_TIR_ADDR`).
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_cq {
    /// CQE ring.
    pub buf: *mut c_void,
    /// Doorbell record: `dbrec[0]` set_ci, `dbrec[1]` arm, both BE32.
    pub dbrec: *mut u32,
    /// Entries; a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// UAR page base (arm doorbell at +0x20).
    pub cq_uar: *mut c_void,
    /// CQ number.
    pub cqn: u32,
    /// Output only.
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_srq {
    /// WQE ring.
    pub buf: *mut c_void,
    /// Doorbell record (one BE32 counter).
    pub dbrec: *mut u32,
    /// Bytes per WQE.
    pub stride: u32,
    /// First free WQE of the linked list.
    pub head: u32,
    /// Last free WQE of the linked list.
    pub tail: u32,
    /// In/out: `MLX5DV_SRQ_MASK_SRQN` to get `srqn`.
    pub comp_mask: u64,
    /// SRQ number.
    pub srqn: u32,
}

/// `struct mlx5dv_rwq` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_rwq {
    /// WQE ring.
    pub buf: *mut c_void,
    /// Doorbell record.
    pub dbrec: *mut u32,
    /// Entries.
    pub wqe_cnt: u32,
    /// Bytes per WQE.
    pub stride: u32,
    /// Output only.
    pub comp_mask: u64,
}

/// `struct mlx5dv_dm` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_dm {
    /// Mapped device memory.
    pub buf: *mut c_void,
    /// Length in bytes.
    pub length: u64,
    /// In/out.
    pub comp_mask: u64,
    /// Remote VA (`MLX5DV_DM_MASK_REMOTE_VA`).
    pub remote_va: u64,
}

/// `struct mlx5dv_ah` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_ah {
    /// The 48-byte address vector to copy into UD WQEs.
    pub av: *mut mlx5_wqe_av,
    /// Output only.
    pub comp_mask: u64,
}

/// `struct mlx5dv_pd` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_pd {
    /// Protection domain number.
    pub pdn: u32,
    /// Output only.
    pub comp_mask: u64,
}

/// One `{in, out}` pair of [`mlx5dv_obj`].
#[repr(C)]
pub struct mlx5dv_obj_pair<I, O> {
    /// The verbs object.
    pub in_: *mut I,
    /// Where to write its mlx5 description.
    pub out: *mut O,
}

impl<I, O> Clone for mlx5dv_obj_pair<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I, O> Copy for mlx5dv_obj_pair<I, O> {}

impl<I, O> core::fmt::Debug for mlx5dv_obj_pair<I, O> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("mlx5dv_obj_pair")
            .field("in", &self.in_)
            .field("out", &self.out)
            .finish()
    }
}

impl<I, O> Default for mlx5dv_obj_pair<I, O> {
    fn default() -> Self {
        mlx5dv_obj_pair {
            in_: core::ptr::null_mut(),
            out: core::ptr::null_mut(),
        }
    }
}

/// `struct mlx5dv_obj`: the argument of [`crate::RdmaCore::mlx5dv_init_obj`].
///
/// Defined with the `devx` pair that rdma-core added after v44, so it is 128 bytes; the v44
/// header's struct is 112 bytes. Both are safe to pass: the library touches only the pairs whose
/// `MLX5DV_OBJ_*` bit is requested, and the first seven pairs sit at the same offsets
/// (`docs/sources.md` §11; rdma-core `mlx5.c` `mlx5dv_init_obj`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_obj {
    /// `MLX5DV_OBJ_QP`.
    pub qp: mlx5dv_obj_pair<ibv_qp, mlx5dv_qp>,
    /// `MLX5DV_OBJ_CQ`.
    pub cq: mlx5dv_obj_pair<ibv_cq, mlx5dv_cq>,
    /// `MLX5DV_OBJ_SRQ`.
    pub srq: mlx5dv_obj_pair<ibv_srq, mlx5dv_srq>,
    /// `MLX5DV_OBJ_RWQ`.
    pub rwq: mlx5dv_obj_pair<ibv_wq, mlx5dv_rwq>,
    /// `MLX5DV_OBJ_DM`.
    pub dm: mlx5dv_obj_pair<ibv_dm, mlx5dv_dm>,
    /// `MLX5DV_OBJ_AH`.
    pub ah: mlx5dv_obj_pair<ibv_ah, mlx5dv_ah>,
    /// `MLX5DV_OBJ_PD`.
    pub pd: mlx5dv_obj_pair<ibv_pd, mlx5dv_pd>,
    /// `MLX5DV_OBJ_DEVX` (newer rdma-core; never requested by this project).
    pub devx: mlx5dv_obj_pair<c_void, c_void>,
}

/// Size of `struct mlx5dv_obj` in the rdma-core 44 header (seven pairs, no `devx`).
pub const MLX5DV_OBJ_SIZE_V44: usize = 112;
