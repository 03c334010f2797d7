//! The verbs.h structs (rdma-core 44), `#[repr(C)]` in the header's field order.
//!
//! Unions that the header leaves anonymous are named types here; the names are the ones the
//! `rdma-sys` crate gave them (`wr_t`, `rdma_t`, ..., `imm_data_invalidated_rkey_union`), so
//! code written against that crate reads the same. `pthread_mutex_t` / `pthread_cond_t` come
//! from `libc`, whose definitions match glibc on every Linux target.

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t, timespec};

use super::context::ibv_context;
use super::enums::{
    ibv_atomic_cap, ibv_mig_state, ibv_mtu, ibv_node_type, ibv_port_state, ibv_qp_state,
    ibv_qp_type, ibv_srq_type, ibv_transport_type, ibv_wc_opcode, ibv_wc_status, ibv_wq_state,
    ibv_wq_type, ibv_wr_opcode,
};

/// Declares zero-sized `#[repr(C)]` markers for C types only ever handled by pointer (the
/// pattern the Rustonomicon recommends for opaque FFI types: not `Send`, `Sync` or `Unpin`).
macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}
pub(crate) use opaque;

opaque! {
    /// `struct _compat_ibv_port_attr`: the argument type of the exported `ibv_query_port`
    /// symbol; callers pass an [`ibv_port_attr`] (verbs.h casts it).
    _compat_ibv_port_attr;
    /// `struct ibv_mw_bind` (not used here).
    ibv_mw_bind;
    /// `struct ibv_ops_wr` (tag-matching SRQ operations; not used here).
    ibv_ops_wr;
    /// `struct ibv_flow`.
    ibv_flow;
    /// `struct ibv_flow_attr`.
    ibv_flow_attr;
    /// `struct ibv_flow_action`.
    ibv_flow_action;
    /// `struct ibv_flow_action_esp_attr`.
    ibv_flow_action_esp_attr;
    /// `struct ibv_counters`.
    ibv_counters;
    /// `struct ibv_counters_init_attr`.
    ibv_counters_init_attr;
    /// `struct ibv_counter_attach_attr`.
    ibv_counter_attach_attr;
    /// `struct ibv_alloc_dm_attr`.
    ibv_alloc_dm_attr;
    /// `struct ibv_modify_cq_attr`.
    ibv_modify_cq_attr;
    /// `struct ibv_qp_rate_limit_attr`.
    ibv_qp_rate_limit_attr;
    /// `struct ibv_rwq_ind_table`.
    ibv_rwq_ind_table;
    /// `struct ibv_rwq_ind_table_init_attr`.
    ibv_rwq_ind_table_init_attr;
    /// `struct ibv_wq_init_attr`.
    ibv_wq_init_attr;
    /// `struct ibv_wq_attr`.
    ibv_wq_attr;
    /// `struct ibv_query_device_ex_input`.
    ibv_query_device_ex_input;
    /// `struct verbs_ex_private` (libibverbs-internal).
    verbs_ex_private;
    /// `struct ibv_poll_cq_attr`.
    ibv_poll_cq_attr;
    /// `struct ibv_wc_tm_info`.
    ibv_wc_tm_info;
}

/// `struct _ibv_device_ops`: obsolete, never used (two function pointers kept for the ABI).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct _ibv_device_ops {
    /// Unused.
    pub _dummy1: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut ibv_context>,
    /// Unused.
    pub _dummy2: Option<unsafe extern "C" fn(*mut ibv_context)>,
}

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`: an entry of `ibv_get_device_list`.
#[repr(C)]
pub struct ibv_device {
    /// Obsolete.
    pub _ops: _ibv_device_ops,
    /// `ibv_node_type`.
    pub node_type: ibv_node_type::Type,
    /// `ibv_transport_type`.
    pub transport_type: ibv_transport_type::Type,
    /// Kernel IB device name (`mlx5_0`, `rxe0`), NUL-terminated.
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name (`uverbs0`).
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the infiniband_verbs class device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the infiniband class device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The 16 bytes, network order.
    pub raw: [u8; 16],
    /// Subnet prefix and interface id.
    pub global: ibv_gid_global_t,
}

/// The `global` member of [`ibv_gid`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_global_t {
    /// Big-endian subnet prefix.
    pub subnet_prefix: u64,
    /// Big-endian interface id.
    pub interface_id: u64,
}

/// `struct ibv_device_attr_ex` (`ibv_query_device_ex`): the fields this crate reads, the rest
/// kept as bytes so the struct has the header's size (400 bytes on 64-bit Linux, rdma-core 44;
/// checked by the conformance oracle).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    /// The legacy attributes.
    pub orig_attr: ibv_device_attr,
    /// Which extended fields are valid.
    pub comp_mask: u32,
    _pad0: u32,
    /// `struct ibv_odp_caps` (not read here).
    pub odp_caps: [u64; 3],
    /// Bits of a CQE timestamp the device fills.
    pub completion_timestamp_mask: u64,
    /// The free-running clock's frequency in kHz.
    pub hca_core_clock: u64,
    /// `IBV_DEVICE_*` extended capability flags.
    pub device_cap_flags_ex: u64,
    _rest: [u64; 14],
}

/// `struct ibv_device_attr` (`ibv_query_device`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version string.
    pub fw_ver: [c_char; 64],
    /// Node GUID, big-endian.
    pub node_guid: u64,
    /// System image GUID, big-endian.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// IEEE vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Max QPs.
    pub max_qp: c_int,
    /// Max WRs per queue.
    pub max_qp_wr: c_int,
    /// `IBV_DEVICE_*`.
    pub device_cap_flags: c_uint,
    /// Max SGEs per send/receive WR.
    pub max_sge: c_int,
    /// Max SGEs per RDMA read.
    pub max_sge_rd: c_int,
    /// Max CQs.
    pub max_cq: c_int,
    /// Max CQEs per CQ.
    pub max_cqe: c_int,
    /// Max MRs.
    pub max_mr: c_int,
    /// Max PDs.
    pub max_pd: c_int,
    /// Max outstanding RDMA read/atomic as target, per QP.
    pub max_qp_rd_atom: c_int,
    /// Same, per EE context.
    pub max_ee_rd_atom: c_int,
    /// Max resources for RDMA read/atomic as target.
    pub max_res_rd_atom: c_int,
    /// Max outstanding RDMA read/atomic as initiator, per QP.
    pub max_qp_init_rd_atom: c_int,
    /// Same, per EE context.
    pub max_ee_init_rd_atom: c_int,
    /// Atomic guarantee.
    pub atomic_cap: ibv_atomic_cap::Type,
    /// Max EE contexts.
    pub max_ee: c_int,
    /// Max RDDs.
    pub max_rdd: c_int,
    /// Max MWs.
    pub max_mw: c_int,
    /// Max raw IPv6 QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Max raw Ethertype QPs.
    pub max_raw_ethy_qp: c_int,
    /// Max multicast groups.
    pub max_mcast_grp: c_int,
    /// Max QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Max QP attachments over all groups.
    pub max_total_mcast_qp_attach: c_int,
    /// Max AHs.
    pub max_ah: c_int,
    /// Max FMRs.
    pub max_fmr: c_int,
    /// Max remaps per FMR.
    pub max_map_per_fmr: c_int,
    /// Max SRQs.
    pub max_srq: c_int,
    /// Max WRs per SRQ.
    pub max_srq_wr: c_int,
    /// Max SGEs per SRQ WR.
    pub max_srq_sge: c_int,
    /// P_Key table size.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (`ibv_query_port`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_port_attr {
    /// Logical port state.
    pub state: ibv_port_state::Type,
    /// Max MTU.
    pub max_mtu: ibv_mtu::Type,
    /// Active MTU.
    pub active_mtu: ibv_mtu::Type,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// `IBV_PORT_*` capabilities.
    pub port_cap_flags: u32,
    /// Max message size.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Base LID.
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Max VLs.
    pub max_vl_num: u8,
    /// SM service level.
    pub sm_sl: u8,
    /// Subnet propagation delay.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active link width.
    pub active_width: u8,
    /// Active link speed.
    pub active_speed: u8,
    /// Physical port state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// `IBV_QPF_*` flags.
    pub flags: u8,
    /// `IBV_PORT_*` capabilities, second set.
    pub port_cap_flags2: u16,
}

/// The `element` union of [`ibv_async_event`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element_t {
    /// CQ events.
    pub cq: *mut ibv_cq,
    /// QP events.
    pub qp: *mut ibv_qp,
    /// SRQ events.
    pub srq: *mut ibv_srq,
    /// WQ events.
    pub wq: *mut ibv_wq,
    /// Port events.
    pub port_num: c_int,
}

/// `struct ibv_async_event` (`ibv_get_async_event`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// The affected object.
    pub element: ibv_async_event_element_t,
    /// `ibv_event_type` (a number: a newer kernel may report a type this list lacks).
    pub event_type: super::enums::ibv_event_type::Type,
}

/// The anonymous `imm_data` / `invalidated_rkey` union of [`ibv_wc`] and [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union imm_data_invalidated_rkey_union_t {
    /// Immediate data, network order (`*_WITH_IMM`).
    pub imm_data: u32,
    /// The rkey to invalidate / invalidated (`*_INV`).
    pub invalidated_rkey: u32,
}

/// `struct ibv_wc` (48 bytes; `ibv_poll_cq`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    /// The WR id of the completed WR.
    pub wr_id: u64,
    /// Completion status.
    pub status: ibv_wc_status::Type,
    /// Completed operation.
    pub opcode: ibv_wc_opcode::Type,
    /// Vendor syndrome.
    pub vendor_err: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// Immediate or invalidated rkey (per `wc_flags`).
    pub imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD).
    pub src_qp: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: c_uint,
    /// P_Key index (GSI).
    pub pkey_index: u16,
    /// Source LID (UD).
    pub slid: u16,
    /// Service level (UD).
    pub sl: u8,
    /// Destination LID path bits (UD).
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_td_init_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_td` (a thread domain).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_td {
    /// Owning context.
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd_init_attr` (`ibv_open_xrcd`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_xrcd_init_attr {
    /// `IBV_XRCD_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// File whose inode names the XRC domain, or -1.
    pub fd: c_int,
    /// `O_CREAT` / `O_EXCL`.
    pub oflags: c_int,
}

/// `struct ibv_xrcd` (an XRC domain).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_xrcd {
    /// Owning context.
    pub context: *mut ibv_context,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Start address.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
    /// Kernel handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mw {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Remote key.
    pub rkey: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: c_uint,
}

/// `struct ibv_dm` (device memory).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_dm {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Copy host memory into the DM.
    pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int>,
    /// Copy the DM into host memory.
    pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int>,
    /// Which optional fields are valid.
    pub comp_mask: u32,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_global_route` (the GRH part of an address vector).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    /// Global route (with `is_global`).
    pub grh: ibv_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// `enum ibv_rate`.
    pub static_rate: u8,
    /// Whether `grh` is valid.
    pub is_global: u8,
    /// Local port.
    pub port_num: u8,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    /// Max outstanding WRs.
    pub max_wr: u32,
    /// Max SGEs per WR.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (`ibv_create_srq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    /// User context.
    pub srq_context: *mut c_void,
    /// Requested sizes.
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_cap {
    /// Max tags.
    pub max_num_tags: u32,
    /// Max outstanding list operations.
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex` (`ibv_create_srq_ex`; starts like [`ibv_srq_init_attr`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr_ex {
    /// User context.
    pub srq_context: *mut c_void,
    /// Requested sizes.
    pub attr: ibv_srq_attr,
    /// `IBV_SRQ_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// `ibv_srq_type`.
    pub srq_type: ibv_srq_type::Type,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// XRC domain (XRC SRQ).
    pub xrcd: *mut ibv_xrcd,
    /// Completion queue (XRC SRQ).
    pub cq: *mut ibv_cq,
    /// Tag matching (TM SRQ).
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    /// Owning context.
    pub context: *mut ibv_context,
    /// User context.
    pub srq_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
    /// libibverbs event lock.
    pub mutex: pthread_mutex_t,
    /// libibverbs event condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_wq`.
#[repr(C)]
pub struct ibv_wq {
    /// Owning context.
    pub context: *mut ibv_context,
    /// User context.
    pub wq_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Completion queue.
    pub cq: *mut ibv_cq,
    /// WQ number.
    pub wq_num: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `ibv_wq_state`.
    pub state: ibv_wq_state::Type,
    /// `ibv_wq_type`.
    pub wq_type: ibv_wq_type::Type,
    /// Provider's post-receive.
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    /// libibverbs event lock.
    pub mutex: pthread_mutex_t,
    /// libibverbs event condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged.
    pub events_completed: u32,
    /// Which optional fields are valid.
    pub comp_mask: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (`ibv_create_qp`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or NULL.
    pub srq: *mut ibv_srq,
    /// Requested capabilities (updated with the actual ones).
    pub cap: ibv_qp_cap,
    /// `ibv_qp_type`.
    pub qp_type: ibv_qp_type::Type,
    /// Signal every send WR.
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf` (RSS QPs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rx_hash_conf {
    /// `IBV_RX_HASH_FUNC_*`.
    pub rx_hash_function: u8,
    /// Key length.
    pub rx_hash_key_len: u8,
    /// Key.
    pub rx_hash_key: *mut u8,
    /// `IBV_RX_HASH_*` fields.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` (`ibv_create_qp_ex`, `mlx5dv_create_qp`; starts like
/// [`ibv_qp_init_attr`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr_ex {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or NULL.
    pub srq: *mut ibv_srq,
    /// Requested capabilities.
    pub cap: ibv_qp_cap,
    /// `ibv_qp_type`.
    pub qp_type: ibv_qp_type::Type,
    /// Signal every send WR.
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*`: which of the fields below are valid.
    pub comp_mask: u32,
    /// Protection domain (or parent domain).
    pub pd: *mut ibv_pd,
    /// XRC domain (XRC target QPs).
    pub xrcd: *mut ibv_xrcd,
    /// `IBV_QP_CREATE_*`.
    pub create_flags: u32,
    /// Max TSO header.
    pub max_tso_header: u16,
    /// RSS indirection table.
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    /// RSS hash.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// Source QPN (`IBV_QP_CREATE_SOURCE_QPN`).
    pub source_qpn: u32,
    /// `IBV_QP_EX_WITH_*`.
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_open_attr` (`ibv_open_qp`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_open_attr {
    /// `IBV_QP_OPEN_ATTR_*`.
    pub comp_mask: u32,
    /// QP number to open.
    pub qp_num: u32,
    /// XRC domain it belongs to.
    pub xrcd: *mut ibv_xrcd,
    /// User context.
    pub qp_context: *mut c_void,
    /// `ibv_qp_type` (`IBV_QPT_XRC_RECV`).
    pub qp_type: ibv_qp_type::Type,
}

/// `struct ibv_qp_attr` (`ibv_modify_qp` / `ibv_query_qp`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    /// Target state.
    pub qp_state: ibv_qp_state::Type,
    /// Assumed current state.
    pub cur_qp_state: ibv_qp_state::Type,
    /// Path MTU.
    pub path_mtu: ibv_mtu::Type,
    /// Path migration state.
    pub path_mig_state: ibv_mig_state::Type,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_*` remote access.
    pub qp_access_flags: c_uint,
    /// Capabilities.
    pub cap: ibv_qp_cap,
    /// Primary path.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Ask for the SQ-drained event.
    pub en_sqd_async_notify: u8,
    /// SQ draining (query).
    pub sq_draining: u8,
    /// Initiator depth.
    pub max_rd_atomic: u8,
    /// Responder resources.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit, kbps.
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// The `rdma` member of [`wr_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdma_t {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The `atomic` member of [`wr_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct atomic_t {
    /// Remote address.
    pub remote_addr: u64,
    /// Compare (CAS) or add (FA) operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The `ud` member of [`wr_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ud_t {
    /// Address handle.
    pub ah: *mut ibv_ah,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union wr_t {
    /// RDMA read/write.
    pub rdma: rdma_t,
    /// Atomics.
    pub atomic: atomic_t,
    /// UD send.
    pub ud: ud_t,
}

/// The `xrc` member of [`qp_type_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct xrc_t {
    /// Remote XRC SRQ number.
    pub remote_srqn: u32,
}

/// The `qp_type` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union qp_type_t {
    /// XRC.
    pub xrc: xrc_t,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind_info {
    /// MR to bind to.
    pub mr: *mut ibv_mr,
    /// Start.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// `IBV_ACCESS_*`.
    pub mw_access_flags: c_uint,
}

/// The `bind_mw` member of [`bind_mw_tso_union_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct bind_mw_t {
    /// Memory window.
    pub mw: *mut ibv_mw,
    /// New rkey.
    pub rkey: u32,
    /// Binding.
    pub bind_info: ibv_mw_bind_info,
}

/// The `tso` member of [`bind_mw_tso_union_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tso_t {
    /// Header.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// MSS.
    pub mss: u16,
}

/// The last (anonymous) union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union bind_mw_tso_union_t {
    /// Bind MW.
    pub bind_mw: bind_mw_t,
    /// TSO.
    pub tso: tso_t,
}

/// `struct ibv_send_wr` (`ibv_post_send`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// User WR id.
    pub wr_id: u64,
    /// Next WR of the list, or NULL.
    pub next: *mut ibv_send_wr,
    /// Scatter/gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries of `sg_list`.
    pub num_sge: c_int,
    /// `ibv_wr_opcode`.
    pub opcode: ibv_wr_opcode::Type,
    /// `IBV_SEND_*`.
    pub send_flags: c_uint,
    /// Immediate (network order) or rkey to invalidate.
    pub imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t,
    /// Per-opcode attributes.
    pub wr: wr_t,
    /// Per-transport attributes.
    pub qp_type: qp_type_t,
    /// Bind-MW or TSO attributes.
    pub bind_mw_tso_union: bind_mw_tso_union_t,
}

/// `struct ibv_recv_wr` (`ibv_post_recv`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_recv_wr {
    /// User WR id.
    pub wr_id: u64,
    /// Next WR of the list, or NULL.
    pub next: *mut ibv_recv_wr,
    /// Scatter list.
    pub sg_list: *mut ibv_sge,
    /// Entries of `sg_list`.
    pub num_sge: c_int,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    /// Owning context.
    pub context: *mut ibv_context,
    /// User context.
    pub qp_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ, or NULL.
    pub srq: *mut ibv_srq,
    /// Kernel handle.
    pub handle: u32,
    /// QP number.
    pub qp_num: u32,
    /// `ibv_qp_state` as last set through libibverbs.
    pub state: ibv_qp_state::Type,
    /// `ibv_qp_type`.
    pub qp_type: ibv_qp_type::Type,
    /// libibverbs event lock.
    pub mutex: pthread_mutex_t,
    /// libibverbs event condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    /// Owning context.
    pub context: *mut ibv_context,
    /// The fd to poll for completion events.
    pub fd: c_int,
    /// CQs using this channel.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Completion channel, or NULL.
    pub channel: *mut ibv_comp_channel,
    /// User context.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Actual CQEs.
    pub cqe: c_int,
    /// libibverbs event lock.
    pub mutex: pthread_mutex_t,
    /// libibverbs event condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_cq_ex`: an [`ibv_cq`] followed by the extended polling interface
/// (`ibv_cq_ex_to_cq` is a cast).
#[repr(C)]
pub struct ibv_cq_ex {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Completion channel, or NULL.
    pub channel: *mut ibv_comp_channel,
    /// User context.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Actual CQEs.
    pub cqe: c_int,
    /// libibverbs event lock.
    pub mutex: pthread_mutex_t,
    /// libibverbs event condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
    /// Which optional fields are valid.
    pub comp_mask: u32,
    /// Status of the current completion.
    pub status: ibv_wc_status::Type,
    /// WR id of the current completion.
    pub wr_id: u64,
    /// Start a poll batch.
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    /// Advance.
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    /// End the batch.
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    /// Opcode reader.
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> ibv_wc_opcode::Type>,
    /// Vendor syndrome reader.
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// Byte count reader.
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// Immediate reader (network order).
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// QP number reader.
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// Source QP reader.
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// Flags reader.
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
    /// SLID reader.
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// SL reader.
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    /// DLID path bits reader.
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    /// Timestamp reader.
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    /// CVLAN reader.
    pub read_cvlan: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u16>,
    /// Flow tag reader.
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// Tag-matching info reader.
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    /// Wall-clock timestamp reader.
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_cq_init_attr_ex` (`ibv_create_cq_ex`, `mlx5dv_create_cq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_cq_init_attr_ex {
    /// Minimum CQEs.
    pub cqe: u32,
    /// User context.
    pub cq_context: *mut c_void,
    /// Completion channel, or NULL.
    pub channel: *mut ibv_comp_channel,
    /// Completion vector.
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*`.
    pub wc_flags: u64,
    /// `IBV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*`.
    pub flags: u32,
    /// Parent domain (`IBV_CQ_INIT_ATTR_MASK_PD`).
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_parent_domain_init_attr` (`ibv_alloc_parent_domain`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_parent_domain_init_attr {
    /// Protection domain (not NULL).
    pub pd: *mut ibv_pd,
    /// Thread domain, or NULL.
    pub td: *mut ibv_td,
    /// `IBV_PARENT_DOMAIN_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// Custom allocator.
    pub alloc:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void>,
    /// Custom free.
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    /// Allocator context.
    pub pd_context: *mut c_void,
}

/// `struct ibv_values_ex` (`ibv_query_rt_values_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_values_ex {
    /// In: `IBV_VALUES_MASK_*` wanted; out: the ones filled.
    pub comp_mask: u32,
    /// The device's free-running clock (`IBV_VALUES_MASK_RAW_CLOCK`).
    pub raw_clock: timespec,
}
