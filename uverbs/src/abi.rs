//! The uverbs command ABI and mlx5's driver data, as typed views of the bytes
//! (`<rdma/ib_user_verbs.h>` and `<rdma/mlx5-abi.h>`, the kernel's uapi headers as Debian's
//! `linux-libc-dev` installs them; ABI version 6, mlx5 provider ABI 1). Each struct has the
//! uapi name in its doc and the layout of the C struct (`#[repr(C)]`, no padding: the derives
//! refuse any), checked against the installed headers by a unit test that compiles a C
//! program with `gcc` (`layout_matches_the_uapi_headers`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `IB_USER_VERBS_ABI_VERSION`: `/sys/class/infiniband_verbs/abi_version`.
pub const UVERBS_ABI_VERSION: u32 = 6;
/// mlx5's provider ABI (`/sys/class/infiniband_verbs/uverbsN/abi_version`; rdma-core
/// `providers/mlx5/mlx5-abi.h` `MLX5_UVERBS_MIN_ABI_VERSION` = `MAX` = 1).
pub const MLX5_ABI_VERSION: u32 = 1;

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
pub const CMD_FLAG_EXTENDED: u32 = 0x8000_0000;
/// `IB_USER_VERBS_CMD_COMMAND_MASK`.
pub const CMD_COMMAND_MASK: u32 = 0xff;

/// `enum ib_uverbs_write_cmds`: the command numbers (all of them, the ABI's table; those the
/// device does not implement are answered EOPNOTSUPP).
#[allow(missing_docs, dead_code)]
pub mod cmd {
    pub const GET_CONTEXT: u32 = 0;
    pub const QUERY_DEVICE: u32 = 1;
    pub const QUERY_PORT: u32 = 2;
    pub const ALLOC_PD: u32 = 3;
    pub const DEALLOC_PD: u32 = 4;
    pub const CREATE_AH: u32 = 5;
    pub const MODIFY_AH: u32 = 6;
    pub const QUERY_AH: u32 = 7;
    pub const DESTROY_AH: u32 = 8;
    pub const REG_MR: u32 = 9;
    pub const REG_SMR: u32 = 10;
    pub const REREG_MR: u32 = 11;
    pub const QUERY_MR: u32 = 12;
    pub const DEREG_MR: u32 = 13;
    pub const ALLOC_MW: u32 = 14;
    pub const BIND_MW: u32 = 15;
    pub const DEALLOC_MW: u32 = 16;
    pub const CREATE_COMP_CHANNEL: u32 = 17;
    pub const CREATE_CQ: u32 = 18;
    pub const RESIZE_CQ: u32 = 19;
    pub const DESTROY_CQ: u32 = 20;
    pub const POLL_CQ: u32 = 21;
    pub const PEEK_CQ: u32 = 22;
    pub const REQ_NOTIFY_CQ: u32 = 23;
    pub const CREATE_QP: u32 = 24;
    pub const QUERY_QP: u32 = 25;
    pub const MODIFY_QP: u32 = 26;
    pub const DESTROY_QP: u32 = 27;
    pub const POST_SEND: u32 = 28;
    pub const POST_RECV: u32 = 29;
    pub const ATTACH_MCAST: u32 = 30;
    pub const DETACH_MCAST: u32 = 31;
    pub const CREATE_SRQ: u32 = 32;
    pub const MODIFY_SRQ: u32 = 33;
    pub const QUERY_SRQ: u32 = 34;
    pub const DESTROY_SRQ: u32 = 35;
    pub const POST_SRQ_RECV: u32 = 36;
    pub const OPEN_XRCD: u32 = 37;
    pub const CLOSE_XRCD: u32 = 38;
    pub const CREATE_XSRQ: u32 = 39;
    pub const OPEN_QP: u32 = 40;
}

/// `struct ib_uverbs_cmd_hdr`: every command starts with it; word counts in 4 bytes,
/// header included (legacy) or in 8 bytes, core part only (extended).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CmdHdr {
    pub command: u32,
    pub in_words: u16,
    pub out_words: u16,
}

/// `struct ib_uverbs_ex_cmd_hdr`: follows [`CmdHdr`] in an extended command.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExCmdHdr {
    pub response: u64,
    pub provider_in_words: u16,
    pub provider_out_words: u16,
    pub cmd_hdr_reserved: u32,
}

/// `struct ib_uverbs_async_event_desc`: one `read` of the asynchronous event descriptor.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AsyncEventDesc {
    pub element: u64,
    pub event_type: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_comp_event_desc`: one `read` of a completion channel.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CompEventDesc {
    pub cq_handle: u64,
}

/// `struct ib_uverbs_get_context_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct GetContextResp {
    pub async_fd: u32,
    pub num_comp_vectors: u32,
}

/// `struct ib_uverbs_query_device_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QueryDeviceResp {
    pub fw_ver: u64,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub reserved: [u8; 4],
}

/// `struct ib_uverbs_ex_query_device`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExQueryDevice {
    pub comp_mask: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_query_device_resp` (with its nested caps flattened in order).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExQueryDeviceResp {
    pub base: QueryDeviceResp,
    pub comp_mask: u32,
    pub response_length: u32,
    pub odp_general_caps: u64,
    pub odp_rc_caps: u32,
    pub odp_uc_caps: u32,
    pub odp_ud_caps: u32,
    pub odp_reserved: u32,
    pub timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub rss_supported_qpts: u32,
    pub rss_max_rwq_indirection_tables: u32,
    pub rss_max_rwq_indirection_table_size: u32,
    pub rss_reserved: u32,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    pub tm_max_rndv_hdr_size: u32,
    pub tm_max_num_tags: u32,
    pub tm_flags: u32,
    pub tm_max_ops: u32,
    pub tm_max_sge: u32,
    pub tm_reserved: u32,
    pub max_cq_moderation_count: u16,
    pub max_cq_moderation_period: u16,
    pub cq_moderation_reserved: u32,
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_query_port` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QueryPort {
    pub port_num: u8,
    pub reserved: [u8; 7],
}

/// `struct ib_uverbs_query_port_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QueryPortResp {
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub gid_tbl_len: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub reserved: u8,
}

/// A handle alone: `struct ib_uverbs_dealloc_pd`, `_close_xrcd`, `_dereg_mr`, `_destroy_ah`
/// (one `u32`), and `struct ib_uverbs_alloc_pd_resp` / `_open_xrcd_resp` / `_create_ah_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Handle {
    pub handle: u32,
}

/// `struct ib_uverbs_destroy_cq` / `_destroy_qp` / `_destroy_srq` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct DestroyObj {
    pub handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_open_xrcd` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct OpenXrcd {
    pub fd: u32,
    pub oflags: u32,
}

/// `struct ib_uverbs_reg_mr` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RegMr {
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

/// `struct ib_uverbs_reg_mr_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RegMrResp {
    pub mr_handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ib_uverbs_create_comp_channel_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CompChannelResp {
    pub fd: u32,
}

/// `struct ib_uverbs_create_cq` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateCq {
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_create_cq`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExCreateCq {
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub comp_mask: u32,
    pub flags: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_create_cq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateCqResp {
    pub cq_handle: u32,
    pub cqe: u32,
}

/// `struct ib_uverbs_ex_create_cq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExCreateCqResp {
    pub base: CreateCqResp,
    pub comp_mask: u32,
    pub response_length: u32,
}

/// `struct ib_uverbs_destroy_cq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct DestroyCqResp {
    pub comp_events_reported: u32,
    pub async_events_reported: u32,
}

/// `struct ib_uverbs_qp_dest`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QpDest {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub dlid: u16,
    pub reserved: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ib_uverbs_create_qp` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateQp {
    pub user_handle: u64,
    pub pd_handle: u32,
    pub send_cq_handle: u32,
    pub recv_cq_handle: u32,
    pub srq_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_sig_all: u8,
    pub qp_type: u8,
    pub is_srq: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ex_create_qp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExCreateQp {
    pub base: CreateQp,
    pub comp_mask: u32,
    pub create_flags: u32,
    pub rwq_ind_tbl_handle: u32,
    pub source_qpn: u32,
}

/// `struct ib_uverbs_create_qp_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateQpResp {
    pub qp_handle: u32,
    pub qpn: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_create_qp_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExCreateQpResp {
    pub base: CreateQpResp,
    pub comp_mask: u32,
    pub response_length: u32,
}

/// `struct ib_uverbs_open_qp` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct OpenQp {
    pub user_handle: u64,
    pub pd_handle: u32,
    pub qpn: u32,
    pub qp_type: u8,
    pub reserved: [u8; 7],
}

/// `struct ib_uverbs_query_qp` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QueryQp {
    pub qp_handle: u32,
    pub attr_mask: u32,
}

/// `struct ib_uverbs_query_qp_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QueryQpResp {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub sq_sig_all: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_uverbs_modify_qp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ModifyQp {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub qp_handle: u32,
    pub attr_mask: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 2],
}

/// `struct ib_uverbs_ex_modify_qp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExModifyQp {
    pub base: ModifyQp,
    pub rate_limit: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_modify_qp_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ExModifyQpResp {
    pub comp_mask: u32,
    pub response_length: u32,
}

/// `struct ib_uverbs_destroy_qp_resp` / `_destroy_srq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct EventsReported {
    pub events_reported: u32,
}

/// `struct ib_uverbs_ah_attr`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub grh_reserved: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_create_ah` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateAh {
    pub user_handle: u64,
    pub pd_handle: u32,
    pub reserved: u32,
    pub attr: AhAttr,
}

/// `struct ib_uverbs_attach_mcast` / `_detach_mcast`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mcast {
    pub gid: [u8; 16],
    pub qp_handle: u32,
    pub mlid: u16,
    pub reserved: u16,
}

/// `struct ib_uverbs_create_srq` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateSrq {
    pub user_handle: u64,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ib_uverbs_create_xsrq` (after `response`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateXsrq {
    pub user_handle: u64,
    pub srq_type: u32,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub max_num_tags: u32,
    pub xrcd_handle: u32,
    pub cq_handle: u32,
}

/// `struct ib_uverbs_create_srq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct CreateSrqResp {
    pub srq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srqn: u32,
}

/// `struct ib_uverbs_modify_srq`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ModifySrq {
    pub srq_handle: u32,
    pub attr_mask: u32,
    pub max_wr: u32,
    pub srq_limit: u32,
}

/// `struct ib_uverbs_query_srq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct QuerySrqResp {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub reserved: u32,
}

/// `struct mlx5_ib_alloc_ucontext_req_v2`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5AllocUcontextReq {
    pub total_num_bfregs: u32,
    pub num_low_latency_bfregs: u32,
    pub flags: u32,
    pub comp_mask: u32,
    pub max_cqe_version: u8,
    pub reserved0: u8,
    pub reserved1: u16,
    pub reserved2: u32,
    pub lib_caps: u64,
}

/// `struct mlx5_ib_alloc_ucontext_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5AllocUcontextResp {
    pub qp_tab_size: u32,
    pub bf_reg_size: u32,
    pub tot_bfregs: u32,
    pub cache_line_size: u32,
    pub max_sq_desc_sz: u16,
    pub max_rq_desc_sz: u16,
    pub max_send_wqebb: u32,
    pub max_recv_wr: u32,
    pub max_srq_recv_wr: u32,
    pub num_ports: u16,
    pub flow_action_flags: u16,
    pub comp_mask: u32,
    pub response_length: u32,
    pub cqe_version: u8,
    pub cmds_supp_uhw: u8,
    pub eth_min_inline: u8,
    pub clock_info_versions: u8,
    pub hca_core_clock_offset: u64,
    pub log_uar_size: u32,
    pub num_uars_per_page: u32,
    pub num_dyn_bfregs: u32,
    pub dump_fill_mkey: u32,
}

/// `struct mlx5_ib_alloc_pd_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5AllocPdResp {
    pub pdn: u32,
}

/// `struct mlx5_ib_create_cq`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateCq {
    pub buf_addr: u64,
    pub db_addr: u64,
    pub cqe_size: u32,
    pub cqe_comp_en: u8,
    pub cqe_comp_res_format: u8,
    pub flags: u16,
    pub uar_page_index: u16,
    pub reserved0: u16,
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_cq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateCqResp {
    pub cqn: u32,
    pub reserved: u32,
}

/// `struct mlx5_ib_create_srq`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateSrq {
    pub buf_addr: u64,
    pub db_addr: u64,
    pub flags: u32,
    pub reserved0: u32,
    pub uidx: u32,
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_srq_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateSrqResp {
    pub srqn: u32,
    pub reserved: u32,
}

/// `struct mlx5_ib_create_qp` (with `dci_streams` as its two bytes).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateQp {
    pub buf_addr: u64,
    pub db_addr: u64,
    pub sq_wqe_count: u32,
    pub rq_wqe_count: u32,
    pub rq_wqe_shift: u32,
    pub flags: u32,
    pub uidx: u32,
    pub bfreg_index: u32,
    pub sq_buf_addr: u64,
    pub ece_options: u32,
    pub dci_log_num_concurent: u8,
    pub dci_log_num_errored: u8,
    pub reserved: u16,
}

/// `struct mlx5_ib_create_qp_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateQpResp {
    pub bfreg_index: u32,
    pub ece_options: u32,
    pub comp_mask: u32,
    pub tirn: u32,
    pub tisn: u32,
    pub rqn: u32,
    pub sqn: u32,
    pub reserved1: u32,
    pub tir_icm_addr: u64,
}

/// `struct mlx5_ib_create_ah_resp`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5CreateAhResp {
    pub response_length: u32,
    pub dmac: [u8; 6],
    pub reserved: [u8; 6],
}

/// `struct mlx5_ib_query_device_resp` (its nested caps as one block of bytes: the software
/// ConnectX offers none of TSO, RSS, CQE compression, packet pacing, multi-packet WQEs,
/// software parsing, striding RQ, tunnel offloads or DCI streams, so they stay zero).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct Mlx5QueryDeviceResp {
    pub comp_mask: u32,
    pub response_length: u32,
    pub caps: [u8; MLX5_QUERY_DEVICE_CAPS],
}

/// Bytes of `struct mlx5_ib_query_device_resp` after `response_length`.
pub const MLX5_QUERY_DEVICE_CAPS: usize = 96;

impl Default for Mlx5QueryDeviceResp {
    fn default() -> Self {
        Mlx5QueryDeviceResp {
            comp_mask: 0,
            response_length: 0,
            caps: [0; MLX5_QUERY_DEVICE_CAPS],
        }
    }
}

/// Flags of `struct mlx5_ib_alloc_ucontext_req_v2` and of the create commands (the ABI's, the
/// refused ones included).
#[allow(missing_docs, dead_code)]
pub mod mlx5 {
    pub const ALLOC_UCTX_DEVX: u32 = 1 << 0;
    pub const LIB_CAP_4K_UAR: u64 = 1 << 0;
    pub const LIB_CAP_DYN_UAR: u64 = 1 << 1;
    pub const CMDS_SUPP_UHW_QUERY_DEVICE: u8 = 1 << 0;
    pub const CMDS_SUPP_UHW_CREATE_AH: u8 = 1 << 1;
    pub const QP_FLAG_SIGNATURE: u32 = 1 << 0;
    pub const QP_FLAG_SCATTER_CQE: u32 = 1 << 1;
    pub const QP_FLAG_TUNNEL_OFFLOADS: u32 = 1 << 2;
    pub const QP_FLAG_BFREG_INDEX: u32 = 1 << 3;
    pub const QP_FLAG_TYPE_DCT: u32 = 1 << 4;
    pub const QP_FLAG_TYPE_DCI: u32 = 1 << 5;
    pub const QP_FLAG_ALLOW_SCATTER_CQE: u32 = 1 << 8;
    pub const QP_FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
    /// `MLX5_IB_INVALID_BFREG` (kernel `mlx5_ib.h`, `BIT(31)`): the `bfreg_index` a QP on a
    /// register the program named gets back.
    pub const INVALID_BFREG: u32 = 1 << 31;
    pub const SRQ_FLAG_SIGNATURE: u32 = 1 << 0;
    pub const CREATE_CQ_FLAGS_CQE_128B_PAD: u16 = 1 << 0;
    pub const CREATE_CQ_FLAGS_UAR_PAGE_INDEX: u16 = 1 << 1;
    pub const CREATE_CQ_FLAGS_REAL_TIME_TS: u16 = 1 << 2;
    /// `MLX5_IB_DEFAULT_UIDX`: "no user index" (CQE version 0).
    pub const DEFAULT_UIDX: u32 = 0x00ff_ffff;
}

/// Read a `T` from the front of `bytes` (shorter input is zero-extended, as the kernel's
/// `uverbs_request` does); the rest after it.
pub fn take<T: FromBytes + IntoBytes + KnownLayout + Immutable>(bytes: &[u8]) -> (T, &[u8]) {
    let n = std::mem::size_of::<T>();
    let mut v = T::new_zeroed();
    let k = n.min(bytes.len());
    v.as_mut_bytes()[..k].copy_from_slice(&bytes[..k]);
    (v, &bytes[k..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// The sizes and a few offsets of every struct, as gcc sees the installed uapi headers.
    #[test]
    fn layout_matches_the_uapi_headers() {
        let rust: &[(&str, usize)] = &[
            ("ib_uverbs_cmd_hdr", size_of::<CmdHdr>()),
            ("ib_uverbs_ex_cmd_hdr", size_of::<ExCmdHdr>()),
            ("ib_uverbs_async_event_desc", size_of::<AsyncEventDesc>()),
            ("ib_uverbs_comp_event_desc", size_of::<CompEventDesc>()),
            ("ib_uverbs_get_context_resp", size_of::<GetContextResp>()),
            ("ib_uverbs_query_device_resp", size_of::<QueryDeviceResp>()),
            ("ib_uverbs_ex_query_device", size_of::<ExQueryDevice>()),
            (
                "ib_uverbs_ex_query_device_resp",
                size_of::<ExQueryDeviceResp>(),
            ),
            ("ib_uverbs_query_port_resp", size_of::<QueryPortResp>()),
            ("ib_uverbs_reg_mr_resp", size_of::<RegMrResp>()),
            ("ib_uverbs_create_cq_resp", size_of::<CreateCqResp>()),
            ("ib_uverbs_ex_create_cq", size_of::<ExCreateCq>()),
            ("ib_uverbs_ex_create_cq_resp", size_of::<ExCreateCqResp>()),
            ("ib_uverbs_destroy_cq_resp", size_of::<DestroyCqResp>()),
            ("ib_uverbs_qp_dest", size_of::<QpDest>()),
            ("ib_uverbs_ex_create_qp", size_of::<ExCreateQp>()),
            ("ib_uverbs_create_qp_resp", size_of::<CreateQpResp>()),
            ("ib_uverbs_ex_create_qp_resp", size_of::<ExCreateQpResp>()),
            ("ib_uverbs_query_qp_resp", size_of::<QueryQpResp>()),
            ("ib_uverbs_modify_qp", size_of::<ModifyQp>()),
            ("ib_uverbs_ex_modify_qp", size_of::<ExModifyQp>()),
            ("ib_uverbs_ex_modify_qp_resp", size_of::<ExModifyQpResp>()),
            ("ib_uverbs_destroy_qp_resp", size_of::<EventsReported>()),
            ("ib_uverbs_ah_attr", size_of::<AhAttr>()),
            ("ib_uverbs_attach_mcast", size_of::<Mcast>()),
            ("ib_uverbs_create_srq_resp", size_of::<CreateSrqResp>()),
            ("ib_uverbs_modify_srq", size_of::<ModifySrq>()),
            ("ib_uverbs_query_srq_resp", size_of::<QuerySrqResp>()),
            (
                "mlx5_ib_alloc_ucontext_req_v2",
                size_of::<Mlx5AllocUcontextReq>(),
            ),
            (
                "mlx5_ib_alloc_ucontext_resp",
                size_of::<Mlx5AllocUcontextResp>(),
            ),
            ("mlx5_ib_alloc_pd_resp", size_of::<Mlx5AllocPdResp>()),
            ("mlx5_ib_create_cq", size_of::<Mlx5CreateCq>()),
            ("mlx5_ib_create_cq_resp", size_of::<Mlx5CreateCqResp>()),
            ("mlx5_ib_create_srq", size_of::<Mlx5CreateSrq>()),
            ("mlx5_ib_create_srq_resp", size_of::<Mlx5CreateSrqResp>()),
            ("mlx5_ib_create_qp", size_of::<Mlx5CreateQp>()),
            ("mlx5_ib_create_qp_resp", size_of::<Mlx5CreateQpResp>()),
            ("mlx5_ib_create_ah_resp", size_of::<Mlx5CreateAhResp>()),
            (
                "mlx5_ib_query_device_resp",
                size_of::<Mlx5QueryDeviceResp>(),
            ),
        ];
        // Core requests after their `u64 response` (the C struct minus 8 bytes).
        let after_response: &[(&str, usize)] = &[
            ("ib_uverbs_query_port", size_of::<QueryPort>()),
            ("ib_uverbs_open_xrcd", size_of::<OpenXrcd>()),
            ("ib_uverbs_reg_mr", size_of::<RegMr>()),
            ("ib_uverbs_create_cq", size_of::<CreateCq>()),
            ("ib_uverbs_destroy_cq", size_of::<DestroyObj>()),
            ("ib_uverbs_create_qp", size_of::<CreateQp>()),
            ("ib_uverbs_open_qp", size_of::<OpenQp>()),
            ("ib_uverbs_query_qp", size_of::<QueryQp>()),
            ("ib_uverbs_create_ah", size_of::<CreateAh>()),
            ("ib_uverbs_create_srq", size_of::<CreateSrq>()),
            ("ib_uverbs_create_xsrq", size_of::<CreateXsrq>()),
        ];
        let dir = std::env::temp_dir().join(format!("mlx5sim-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/ib_user_verbs.h>\n\
             #include <rdma/mlx5-abi.h>\nint main(void) {\n",
        );
        for (n, _) in rust.iter().chain(after_response) {
            c += &format!("printf(\"{n} %zu\\n\", sizeof(struct {n}));\n");
        }
        c += "printf(\"off_qp_resp_sq_sig_all %zu\\n\", offsetof(struct ib_uverbs_query_qp_resp, sq_sig_all));\n";
        c += "printf(\"off_ctx_resp_cqe_version %zu\\n\", offsetof(struct mlx5_ib_alloc_ucontext_resp, cqe_version));\n";
        c += "printf(\"off_create_qp_uidx %zu\\n\", offsetof(struct mlx5_ib_create_qp, uidx));\n";
        c += "return 0; }\n";
        std::fs::write(dir.join("abi.c"), c).unwrap();
        let exe = dir.join("abi");
        let st = std::process::Command::new("gcc")
            .arg("-o")
            .arg(&exe)
            .arg(dir.join("abi.c"))
            .status()
            .expect("gcc (Debian: build-essential) to compile the uapi layout check");
        assert!(
            st.success(),
            "gcc failed on the uapi headers (Debian: linux-libc-dev)"
        );
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let c_size = |name: &str| -> usize {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("{name} not printed"))
        };
        for (n, s) in rust {
            assert_eq!(*s, c_size(n), "size of struct {n}");
        }
        for (n, s) in after_response {
            assert_eq!(
                *s + 8,
                c_size(n),
                "size of struct {n} after its response field"
            );
        }
        assert_eq!(
            std::mem::offset_of!(QueryQpResp, sq_sig_all),
            c_size("off_qp_resp_sq_sig_all")
        );
        assert_eq!(
            std::mem::offset_of!(Mlx5AllocUcontextResp, cqe_version),
            c_size("off_ctx_resp_cqe_version")
        );
        assert_eq!(
            std::mem::offset_of!(Mlx5CreateQp, uidx),
            c_size("off_create_qp_uidx")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn short_input_is_zero_extended() {
        let (h, rest) = take::<CmdHdr>(&[1, 0, 0, 0, 2]);
        assert_eq!((h.command, h.in_words, h.out_words), (1, 2, 0));
        assert!(rest.is_empty());
        let (h, rest) = take::<CmdHdr>(&[1, 0, 0, 0, 2, 0, 3, 0, 9]);
        assert_eq!((h.command, h.in_words, h.out_words), (1, 2, 3));
        assert_eq!(rest, &[9]);
    }
}
