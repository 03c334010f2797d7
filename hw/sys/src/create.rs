//! Attributes of `mlx5dv_create_qp` and `mlx5dv_create_cq` (rdma-core 44 `mlx5dv.h`; handled in
//! `providers/mlx5/verbs.c` `create_qp` / `create_cq`; man pages `mlx5dv_create_qp.3`,
//! `mlx5dv_create_cq.3`).

/// `mlx5dv_qp_init_attr.comp_mask`: `create_flags` is valid
/// (`MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`).
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
/// `comp_mask`: `dc_init_attr` is valid (`MLX5DV_QP_INIT_ATTR_MASK_DC`).
pub const MLX5DV_QP_INIT_ATTR_MASK_DC: u64 = 1 << 1;
/// `comp_mask`: `send_ops_flags` is valid (`MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS`).
pub const MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS: u64 = 1 << 2;
/// `comp_mask`: DCI streams in `dc_init_attr` (`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`).
pub const MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS: u64 = 1 << 3;

/// `create_flags`: tunnel offloads (`MLX5DV_QP_CREATE_TUNNEL_OFFLOADS`).
pub const MLX5DV_QP_CREATE_TUNNEL_OFFLOADS: u32 = 1 << 0;
/// `create_flags`: TIR self loopback, unicast (`MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC`).
pub const MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC: u32 = 1 << 1;
/// `create_flags`: TIR self loopback, multicast (`MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC`).
pub const MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC: u32 = 1 << 2;
/// `create_flags`: never scatter received data into CQEs
/// (`MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`). mlx5-direct sets it so that data always lands
/// in the posted buffers (`docs/sources.md` §8).
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;
/// `create_flags`: allow requester scatter to CQE (`MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`);
/// together with the previous flag `mlx5dv_create_qp` fails with EINVAL.
pub const MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE: u32 = 1 << 4;
/// `create_flags`: packet-based credit mode (`MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE`).
pub const MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE: u32 = 1 << 5;
/// `create_flags`: signature pipelining (`MLX5DV_QP_CREATE_SIG_PIPELINING`).
pub const MLX5DV_QP_CREATE_SIG_PIPELINING: u32 = 1 << 6;
/// `create_flags`: out-of-order data placement (`MLX5DV_QP_CREATE_OOO_DP`; rdma-core after
/// v44 only).
pub const MLX5DV_QP_CREATE_OOO_DP: u32 = 1 << 7;

/// `mlx5dv_dc_init_attr.dc_type`: DC target (`MLX5DV_DCTYPE_DCT`).
pub const MLX5DV_DCTYPE_DCT: u32 = 1;
/// `mlx5dv_dc_init_attr.dc_type`: DC initiator (`MLX5DV_DCTYPE_DCI`).
pub const MLX5DV_DCTYPE_DCI: u32 = 2;

/// `struct mlx5dv_dci_streams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams {
    /// log2 of the concurrent streams.
    pub log_num_concurent: u8,
    /// log2 of the errored streams.
    pub log_num_errored: u8,
}

/// The anonymous union of `struct mlx5dv_dc_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union mlx5dv_dc_init_attr_u {
    /// DCT access key.
    pub dct_access_key: u64,
    /// DCI streams.
    pub dci_streams: mlx5dv_dci_streams,
}

impl Default for mlx5dv_dc_init_attr_u {
    fn default() -> Self {
        mlx5dv_dc_init_attr_u { dct_access_key: 0 }
    }
}

impl core::fmt::Debug for mlx5dv_dc_init_attr_u {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: every bit pattern is a valid u64 and the union is 8 bytes, fully initialised
        // by every constructor in this crate.
        let raw = unsafe { self.dct_access_key };
        write!(f, "mlx5dv_dc_init_attr_u({raw:#x})")
    }
}

/// `struct mlx5dv_dc_init_attr` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dc_init_attr {
    /// `enum mlx5dv_dc_type` ([`MLX5DV_DCTYPE_DCT`] or [`MLX5DV_DCTYPE_DCI`]).
    pub dc_type: u32,
    /// Access key or DCI streams.
    pub u: mlx5dv_dc_init_attr_u,
}

/// `struct mlx5dv_qp_init_attr` (40 bytes), the mlx5 part of [`crate::RdmaCore::mlx5dv_create_qp`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_qp_init_attr {
    /// `MLX5DV_QP_INIT_ATTR_MASK_*`: which of the fields below are valid.
    pub comp_mask: u64,
    /// `MLX5DV_QP_CREATE_*`.
    pub create_flags: u32,
    /// DC attributes.
    pub dc_init_attr: mlx5dv_dc_init_attr,
    /// `MLX5DV_QP_EX_WITH_*`.
    pub send_ops_flags: u64,
}

/// `mlx5dv_cq_init_attr.comp_mask`: `cqe_comp_res_format` is valid
/// (`MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`).
pub const MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;
/// `comp_mask`: `flags` is valid (`MLX5DV_CQ_INIT_ATTR_MASK_FLAGS`).
pub const MLX5DV_CQ_INIT_ATTR_MASK_FLAGS: u64 = 1 << 1;
/// `comp_mask`: `cqe_size` is valid (`MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`).
pub const MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE: u64 = 1 << 2;

/// `mlx5dv_cq_init_attr.flags`: pad 128-byte CQEs (`MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD`).
pub const MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD: u32 = 1 << 0;
/// `flags`: reserved (`MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED`).
pub const MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED: u32 = 1 << 1;

/// `cqe_comp_res_format`: RX hash in mini-CQEs (`MLX5DV_CQE_RES_FORMAT_HASH`).
pub const MLX5DV_CQE_RES_FORMAT_HASH: u8 = 1 << 0;
/// `cqe_comp_res_format`: checksum in mini-CQEs (`MLX5DV_CQE_RES_FORMAT_CSUM`).
pub const MLX5DV_CQE_RES_FORMAT_CSUM: u8 = 1 << 1;
/// `cqe_comp_res_format`: checksum and stride index (`MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`).
pub const MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX: u8 = 1 << 2;

/// `struct mlx5dv_cq_init_attr` (24 bytes), the mlx5 part of [`crate::RdmaCore::mlx5dv_create_cq`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_cq_init_attr {
    /// `MLX5DV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u64,
    /// `MLX5DV_CQE_RES_FORMAT_*` (with `..._MASK_COMPRESSED_CQE`).
    pub cqe_comp_res_format: u8,
    /// `MLX5DV_CQ_INIT_ATTR_FLAGS_*` (with `..._MASK_FLAGS`).
    pub flags: u32,
    /// 64 or 128 (with `..._MASK_CQE_SIZE`).
    pub cqe_size: u16,
}
