//! `mlx5dv_query_device` and `struct mlx5dv_context` (rdma-core 44 `mlx5dv.h`; filled by
//! `providers/mlx5/mlx5.c` `_mlx5dv_query_device`, which writes an optional field only when its
//! `MLX5DV_CONTEXT_MASK_*` bit was set in `comp_mask` on input).

use core::ffi::c_void;

/// `mlx5dv_context.flags`: CQE version 1 (user index in CQEs) (`MLX5DV_CONTEXT_FLAGS_CQE_V1`).
pub const MLX5DV_CONTEXT_FLAGS_CQE_V1: u64 = 1 << 0;
/// Obsolete flag bit 1 (`MLX5DV_CONTEXT_FLAGS_OBSOLETE`).
pub const MLX5DV_CONTEXT_FLAGS_OBSOLETE: u64 = 1 << 1;
/// Multi-packet WQEs allowed (`MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED`).
pub const MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED: u64 = 1 << 2;
/// Enhanced multi-packet WQEs (`MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW`).
pub const MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW: u64 = 1 << 3;
/// 128-byte CQE compression supported (`MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP`).
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP: u64 = 1 << 4;
/// 128-byte CQE padding supported (`MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD`).
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD: u64 = 1 << 5;
/// Packet-based credit mode (`MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE`).
pub const MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE: u64 = 1 << 6;
/// Real-time timestamps (`MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS`).
pub const MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS: u64 = 1 << 7;
/// BlueFlame supported (`MLX5DV_CONTEXT_FLAGS_BLUEFLAME`; rdma-core after v44 only, so a v44
/// library never sets it).
pub const MLX5DV_CONTEXT_FLAGS_BLUEFLAME: u64 = 1 << 8;

/// `comp_mask`: fill `cqe_comp_caps` (`MLX5DV_CONTEXT_MASK_CQE_COMPRESION`, sic).
pub const MLX5DV_CONTEXT_MASK_CQE_COMPRESION: u64 = 1 << 0;
/// `comp_mask`: fill `sw_parsing_caps` (`MLX5DV_CONTEXT_MASK_SWP`).
pub const MLX5DV_CONTEXT_MASK_SWP: u64 = 1 << 1;
/// `comp_mask`: fill `striding_rq_caps` (`MLX5DV_CONTEXT_MASK_STRIDING_RQ`).
pub const MLX5DV_CONTEXT_MASK_STRIDING_RQ: u64 = 1 << 2;
/// `comp_mask`: fill `tunnel_offloads_caps` (`MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS`).
pub const MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS: u64 = 1 << 3;
/// `comp_mask`: fill `max_dynamic_bfregs` (`MLX5DV_CONTEXT_MASK_DYN_BFREGS`).
pub const MLX5DV_CONTEXT_MASK_DYN_BFREGS: u64 = 1 << 4;
/// `comp_mask`: fill `max_clock_info_update_nsec` (`MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE`).
pub const MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE: u64 = 1 << 5;
/// `comp_mask`: fill `flow_action_flags` (`MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS`).
pub const MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS: u64 = 1 << 6;
/// `comp_mask`: fill `dc_odp_caps` (`MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`).
pub const MLX5DV_CONTEXT_MASK_DC_ODP_CAPS: u64 = 1 << 7;
/// `comp_mask`: fill `hca_core_clock` (`MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK`).
pub const MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK: u64 = 1 << 8;
/// `comp_mask`: fill `num_lag_ports` (`MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS`).
pub const MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS: u64 = 1 << 9;
/// `comp_mask`: fill `sig_caps` (`MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD`).
pub const MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD: u64 = 1 << 10;
/// `comp_mask`: fill `dci_streams_caps` (`MLX5DV_CONTEXT_MASK_DCI_STREAMS`).
pub const MLX5DV_CONTEXT_MASK_DCI_STREAMS: u64 = 1 << 11;
/// `comp_mask`: fill `max_wr_memcpy_length` (`MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH`).
pub const MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH: u64 = 1 << 12;
/// `comp_mask`: fill `crypto_caps` (`MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD`).
pub const MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD: u64 = 1 << 13;

/// Every `comp_mask` bit the rdma-core 44 struct has room for. Requesting a bit outside this
/// set would let a newer library write past the end of [`mlx5dv_context`].
pub const MLX5DV_CONTEXT_MASK_V44_ALL: u64 = (1 << 14) - 1;

/// `struct mlx5dv_cqe_comp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_cqe_comp_caps {
    /// Largest compression session.
    pub max_num: u32,
    /// `MLX5DV_CQE_RES_FORMAT_*` bits.
    pub supported_format: u32,
}

/// `struct mlx5dv_sw_parsing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sw_parsing_caps {
    /// `MLX5DV_SW_PARSING*` bits.
    pub sw_parsing_offloads: u32,
    /// QP types (bit per `ibv_qp_type`).
    pub supported_qpts: u32,
}

/// `struct mlx5dv_striding_rq_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_striding_rq_caps {
    /// Smallest log2 stride size.
    pub min_single_stride_log_num_of_bytes: u32,
    /// Largest log2 stride size.
    pub max_single_stride_log_num_of_bytes: u32,
    /// Smallest log2 strides per WQE.
    pub min_single_wqe_log_num_of_strides: u32,
    /// Largest log2 strides per WQE.
    pub max_single_wqe_log_num_of_strides: u32,
    /// QP types (bit per `ibv_qp_type`).
    pub supported_qpts: u32,
}

/// `struct mlx5dv_sig_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sig_caps {
    /// `MLX5DV_BLOCK_SIZE_CAP_*` bits.
    pub block_size: u64,
    /// `MLX5DV_SIG_PROT_CAP_*` bits.
    pub block_prot: u32,
    /// `MLX5DV_SIG_T10DIF_BG_CAP_*` bits.
    pub t10dif_bg: u16,
    /// `MLX5DV_SIG_CRC_TYPE_CAP_*` bits.
    pub crc_type: u16,
}

/// `struct mlx5dv_dci_streams_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams_caps {
    /// log2 of the largest number of concurrent streams.
    pub max_log_num_concurent: u8,
    /// log2 of the largest number of errored streams.
    pub max_log_num_errored: u8,
}

/// `struct mlx5dv_crypto_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_crypto_caps {
    /// Non-zero when a crypto self test failed.
    pub failed_selftests: u16,
    /// `MLX5DV_CRYPTO_ENGINES_CAP_*` bits.
    pub crypto_engines: u8,
    /// `MLX5DV_CRYPTO_WRAPPED_IMPORT_METHOD_CAP_*` bits.
    pub wrapped_import_method: u8,
    /// log2 of the number of data-encryption keys.
    pub log_max_num_deks: u8,
    /// `MLX5DV_CRYPTO_CAPS_*` bits.
    pub flags: u32,
}

/// `struct mlx5dv_context` exactly as in rdma-core 44 (152 bytes on LP64).
///
/// Set `comp_mask` to the optional fields wanted (within [`MLX5DV_CONTEXT_MASK_V44_ALL`])
/// before calling [`crate::RdmaCore::mlx5dv_query_device`]; on return it holds the ones filled.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_context {
    /// Always 0 in current libraries.
    pub version: u8,
    /// `MLX5DV_CONTEXT_FLAGS_*`.
    pub flags: u64,
    /// In/out: `MLX5DV_CONTEXT_MASK_*`.
    pub comp_mask: u64,
    /// CQE compression capabilities.
    pub cqe_comp_caps: mlx5dv_cqe_comp_caps,
    /// Software parsing capabilities.
    pub sw_parsing_caps: mlx5dv_sw_parsing_caps,
    /// Striding RQ capabilities.
    pub striding_rq_caps: mlx5dv_striding_rq_caps,
    /// `MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_*` bits.
    pub tunnel_offloads_caps: u32,
    /// Dynamic UARs (bfregs) this context may allocate.
    pub max_dynamic_bfregs: u32,
    /// Clock-info update period.
    pub max_clock_info_update_nsec: u64,
    /// `MLX5DV_FLOW_ACTION_FLAGS_*` bits.
    pub flow_action_flags: u32,
    /// `ibv_odp_transport_cap_bits` for DC.
    pub dc_odp_caps: u32,
    /// Mapped HCA core clock register.
    pub hca_core_clock: *mut c_void,
    /// Number of LAG ports.
    pub num_lag_ports: u8,
    /// Signature offload capabilities.
    pub sig_caps: mlx5dv_sig_caps,
    /// DCI stream capabilities.
    pub dci_streams_caps: mlx5dv_dci_streams_caps,
    /// Largest memcpy WR.
    pub max_wr_memcpy_length: libc::size_t,
    /// Crypto capabilities.
    pub crypto_caps: mlx5dv_crypto_caps,
}

impl Default for mlx5dv_context {
    fn default() -> Self {
        mlx5dv_context {
            version: 0,
            flags: 0,
            comp_mask: 0,
            cqe_comp_caps: Default::default(),
            sw_parsing_caps: Default::default(),
            striding_rq_caps: Default::default(),
            tunnel_offloads_caps: 0,
            max_dynamic_bfregs: 0,
            max_clock_info_update_nsec: 0,
            flow_action_flags: 0,
            dc_odp_caps: 0,
            hca_core_clock: core::ptr::null_mut(),
            num_lag_ports: 0,
            sig_caps: Default::default(),
            dci_streams_caps: Default::default(),
            max_wr_memcpy_length: 0,
            crypto_caps: Default::default(),
        }
    }
}

/// `struct mlx5dv_clock_info` (40 bytes; `mlx5dv_get_clock_info`): the kernel's published
/// conversion from the device's free-running clock to nanoseconds (`mlx5dv_ts_to_ns`:
/// `nsec + ((((ts - last_cycles) & mask) * mult + frac) >> shift)`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_clock_info {
    /// Nanoseconds at `last_cycles`.
    pub nsec: u64,
    /// Device clock at the last update.
    pub last_cycles: u64,
    /// Fractional nanoseconds carried (scaled by `2^shift`).
    pub frac: u64,
    /// Cycle-to-ns multiplier.
    pub mult: u32,
    /// Right shift applied after `mult`.
    pub shift: u32,
    /// Width mask of the free-running counter.
    pub mask: u64,
}
