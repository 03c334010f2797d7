//! The verbs.h enums the backend uses (values from rdma-core 44 `verbs.h`).

/// A flag enum: a `c_uint` newtype whose associated constants are the header's bits.
macro_rules! flag_enum {
    ($(#[$m:meta])* $name:ident { $($c:ident = $v:expr,)* }) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub core::ffi::c_uint);

        impl $name {
            $(
                #[doc = concat!("`", stringify!($c), "` (verbs.h).")]
                pub const $c: $name = $name($v);
            )*
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }

        impl core::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name {
                $name(self.0 & rhs.0)
            }
        }
    };
}

/// A value enum: a module with the C integer type and one constant per enumerator.
macro_rules! value_enum {
    ($(#[$m:meta])* $name:ident : $ty:ty { $($c:ident = $v:expr,)* }) => {
        $(#[$m])*
        pub mod $name {
            /// The integer type of the C enum (what a struct field of this enum holds).
            pub type Type = $ty;
            $(
                #[doc = concat!("`", stringify!($c), "` (verbs.h).")]
                pub const $c: Type = $v;
            )*

            /// The verbs.h name of the enumerator with value `v`, if there is one.
            #[allow(unreachable_patterns)]
            pub fn name(v: Type) -> Option<&'static str> {
                match v {
                    $($c => Some(stringify!($c)),)*
                    _ => None,
                }
            }
        }
    };
}

value_enum! {
    /// `enum ibv_node_type`.
    ibv_node_type: core::ffi::c_int {
        IBV_NODE_UNKNOWN = -1, IBV_NODE_CA = 1, IBV_NODE_SWITCH = 2, IBV_NODE_ROUTER = 3,
        IBV_NODE_RNIC = 4, IBV_NODE_USNIC = 5, IBV_NODE_USNIC_UDP = 6, IBV_NODE_UNSPECIFIED = 7,
    }
}

value_enum! {
    /// `enum ibv_transport_type`.
    ibv_transport_type: core::ffi::c_int {
        IBV_TRANSPORT_UNKNOWN = -1, IBV_TRANSPORT_IB = 0, IBV_TRANSPORT_IWARP = 1,
        IBV_TRANSPORT_USNIC = 2, IBV_TRANSPORT_USNIC_UDP = 3, IBV_TRANSPORT_UNSPECIFIED = 4,
    }
}

value_enum! {
    /// `enum ibv_atomic_cap` (`ibv_device_attr.atomic_cap`).
    ibv_atomic_cap: core::ffi::c_uint {
        IBV_ATOMIC_NONE = 0, IBV_ATOMIC_HCA = 1, IBV_ATOMIC_GLOB = 2,
    }
}

flag_enum! {
    /// `enum ibv_device_cap_flags` (`ibv_device_attr.device_cap_flags`; the bits the backend
    /// reads).
    ibv_device_cap_flags {
        IBV_DEVICE_XRC = 1 << 20,
    }
}

value_enum! {
    /// `enum ibv_mtu`.
    ibv_mtu: core::ffi::c_uint {
        IBV_MTU_256 = 1, IBV_MTU_512 = 2, IBV_MTU_1024 = 3, IBV_MTU_2048 = 4, IBV_MTU_4096 = 5,
    }
}

value_enum! {
    /// `enum ibv_port_state`.
    ibv_port_state: core::ffi::c_uint {
        IBV_PORT_NOP = 0, IBV_PORT_DOWN = 1, IBV_PORT_INIT = 2, IBV_PORT_ARMED = 3,
        IBV_PORT_ACTIVE = 4, IBV_PORT_ACTIVE_DEFER = 5,
    }
}

/// `IBV_LINK_LAYER_UNSPECIFIED` (`ibv_port_attr.link_layer`).
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

value_enum! {
    /// `enum ibv_event_type` (`ibv_async_event.event_type`).
    ibv_event_type: core::ffi::c_uint {
        IBV_EVENT_CQ_ERR = 0, IBV_EVENT_QP_FATAL = 1, IBV_EVENT_QP_REQ_ERR = 2,
        IBV_EVENT_QP_ACCESS_ERR = 3, IBV_EVENT_COMM_EST = 4, IBV_EVENT_SQ_DRAINED = 5,
        IBV_EVENT_PATH_MIG = 6, IBV_EVENT_PATH_MIG_ERR = 7, IBV_EVENT_DEVICE_FATAL = 8,
        IBV_EVENT_PORT_ACTIVE = 9, IBV_EVENT_PORT_ERR = 10, IBV_EVENT_LID_CHANGE = 11,
        IBV_EVENT_PKEY_CHANGE = 12, IBV_EVENT_SM_CHANGE = 13, IBV_EVENT_SRQ_ERR = 14,
        IBV_EVENT_SRQ_LIMIT_REACHED = 15, IBV_EVENT_QP_LAST_WQE_REACHED = 16,
        IBV_EVENT_CLIENT_REREGISTER = 17, IBV_EVENT_GID_CHANGE = 18, IBV_EVENT_WQ_FATAL = 19,
    }
}

value_enum! {
    /// `enum ibv_wc_status` (`ibv_wc.status`).
    ibv_wc_status: core::ffi::c_uint {
        IBV_WC_SUCCESS = 0, IBV_WC_LOC_LEN_ERR = 1, IBV_WC_LOC_QP_OP_ERR = 2,
        IBV_WC_LOC_EEC_OP_ERR = 3, IBV_WC_LOC_PROT_ERR = 4, IBV_WC_WR_FLUSH_ERR = 5,
        IBV_WC_MW_BIND_ERR = 6, IBV_WC_BAD_RESP_ERR = 7, IBV_WC_LOC_ACCESS_ERR = 8,
        IBV_WC_REM_INV_REQ_ERR = 9, IBV_WC_REM_ACCESS_ERR = 10, IBV_WC_REM_OP_ERR = 11,
        IBV_WC_RETRY_EXC_ERR = 12, IBV_WC_RNR_RETRY_EXC_ERR = 13, IBV_WC_LOC_RDD_VIOL_ERR = 14,
        IBV_WC_REM_INV_RD_REQ_ERR = 15, IBV_WC_REM_ABORT_ERR = 16, IBV_WC_INV_EECN_ERR = 17,
        IBV_WC_INV_EEC_STATE_ERR = 18, IBV_WC_FATAL_ERR = 19, IBV_WC_RESP_TIMEOUT_ERR = 20,
        IBV_WC_GENERAL_ERR = 21, IBV_WC_TM_ERR = 22, IBV_WC_TM_RNDV_INCOMPLETE = 23,
    }
}

value_enum! {
    /// `enum ibv_wc_opcode` (`ibv_wc.opcode`; receive opcodes have bit 7 set).
    ibv_wc_opcode: core::ffi::c_uint {
        IBV_WC_SEND = 0, IBV_WC_RDMA_WRITE = 1, IBV_WC_RDMA_READ = 2, IBV_WC_COMP_SWAP = 3,
        IBV_WC_FETCH_ADD = 4, IBV_WC_BIND_MW = 5, IBV_WC_LOCAL_INV = 6, IBV_WC_TSO = 7,
        IBV_WC_ATOMIC_WRITE = 9, IBV_WC_RECV = 1 << 7, IBV_WC_RECV_RDMA_WITH_IMM = (1 << 7) + 1,
        IBV_WC_TM_ADD = (1 << 7) + 2, IBV_WC_TM_DEL = (1 << 7) + 3,
        IBV_WC_TM_SYNC = (1 << 7) + 4, IBV_WC_TM_RECV = (1 << 7) + 5,
        IBV_WC_TM_NO_TAG = (1 << 7) + 6, IBV_WC_DRIVER1 = (1 << 7) + 7,
        IBV_WC_DRIVER2 = (1 << 7) + 8, IBV_WC_DRIVER3 = (1 << 7) + 9,
    }
}

flag_enum! {
    /// `enum ibv_create_cq_wc_flags` (`ibv_cq_init_attr_ex.wc_flags`).
    ibv_create_cq_wc_flags {
        IBV_WC_EX_WITH_BYTE_LEN = 1 << 0, IBV_WC_EX_WITH_IMM = 1 << 1,
        IBV_WC_EX_WITH_QP_NUM = 1 << 2, IBV_WC_EX_WITH_SRC_QP = 1 << 3,
        IBV_WC_EX_WITH_SLID = 1 << 4, IBV_WC_EX_WITH_SL = 1 << 5,
        IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7,
        IBV_WC_EX_WITH_CVLAN = 1 << 8, IBV_WC_EX_WITH_FLOW_TAG = 1 << 9,
        IBV_WC_EX_WITH_TM_INFO = 1 << 10,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11,
    }
}

flag_enum! {
    /// `enum ibv_wc_flags` (`ibv_wc.wc_flags`).
    ibv_wc_flags {
        IBV_WC_GRH = 1 << 0, IBV_WC_WITH_IMM = 1 << 1, IBV_WC_IP_CSUM_OK = 1 << 2,
        IBV_WC_WITH_INV = 1 << 3, IBV_WC_TM_SYNC_REQ = 1 << 4, IBV_WC_TM_MATCH = 1 << 5,
        IBV_WC_TM_DATA_VALID = 1 << 6,
    }
}

flag_enum! {
    /// `enum ibv_access_flags` (MR and QP access).
    ibv_access_flags {
        IBV_ACCESS_LOCAL_WRITE = 1, IBV_ACCESS_REMOTE_WRITE = 1 << 1,
        IBV_ACCESS_REMOTE_READ = 1 << 2, IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
        IBV_ACCESS_MW_BIND = 1 << 4, IBV_ACCESS_ZERO_BASED = 1 << 5,
        IBV_ACCESS_ON_DEMAND = 1 << 6, IBV_ACCESS_HUGETLB = 1 << 7,
        IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
    }
}

/// `IBV_ACCESS_OPTIONAL_FIRST` (`verbs_api.h`, from `rdma/ib_user_ioctl_verbs.h`): the first
/// access bit an older kernel may ignore.
pub const IBV_ACCESS_OPTIONAL_FIRST: u32 = 1 << 20;
/// `IBV_ACCESS_OPTIONAL_RANGE` (same headers): bits 20..=29.
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 = ((1 << 29) << 1) - IBV_ACCESS_OPTIONAL_FIRST;

flag_enum! {
    /// `enum ibv_xrcd_init_attr_mask`.
    ibv_xrcd_init_attr_mask {
        IBV_XRCD_INIT_ATTR_FD = 1 << 0, IBV_XRCD_INIT_ATTR_OFLAGS = 1 << 1,
        IBV_XRCD_INIT_ATTR_RESERVED = 1 << 2,
    }
}

flag_enum! {
    /// `enum ibv_srq_attr_mask` (the mask argument of `ibv_modify_srq`).
    ibv_srq_attr_mask {
        IBV_SRQ_MAX_WR = 1 << 0, IBV_SRQ_LIMIT = 1 << 1,
    }
}

value_enum! {
    /// `enum ibv_srq_type`.
    ibv_srq_type: core::ffi::c_uint {
        IBV_SRQT_BASIC = 0, IBV_SRQT_XRC = 1, IBV_SRQT_TM = 2,
    }
}

flag_enum! {
    /// `enum ibv_srq_init_attr_mask` (`ibv_srq_init_attr_ex.comp_mask`).
    ibv_srq_init_attr_mask {
        IBV_SRQ_INIT_ATTR_TYPE = 1 << 0, IBV_SRQ_INIT_ATTR_PD = 1 << 1,
        IBV_SRQ_INIT_ATTR_XRCD = 1 << 2, IBV_SRQ_INIT_ATTR_CQ = 1 << 3,
        IBV_SRQ_INIT_ATTR_TM = 1 << 4, IBV_SRQ_INIT_ATTR_RESERVED = 1 << 5,
    }
}

value_enum! {
    /// `enum ibv_wq_state`.
    ibv_wq_state: core::ffi::c_uint {
        IBV_WQS_RESET = 0, IBV_WQS_RDY = 1, IBV_WQS_ERR = 2, IBV_WQS_UNKNOWN = 3,
    }
}

value_enum! {
    /// `enum ibv_wq_type`.
    ibv_wq_type: core::ffi::c_uint {
        IBV_WQT_RQ = 0,
    }
}

value_enum! {
    /// `enum ibv_qp_type`.
    ibv_qp_type: core::ffi::c_uint {
        IBV_QPT_RC = 2, IBV_QPT_UC = 3, IBV_QPT_UD = 4, IBV_QPT_RAW_PACKET = 8,
        IBV_QPT_XRC_SEND = 9, IBV_QPT_XRC_RECV = 10, IBV_QPT_DRIVER = 0xff,
    }
}

flag_enum! {
    /// `enum ibv_qp_init_attr_mask` (`ibv_qp_init_attr_ex.comp_mask`).
    ibv_qp_init_attr_mask {
        IBV_QP_INIT_ATTR_PD = 1 << 0, IBV_QP_INIT_ATTR_XRCD = 1 << 1,
        IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2, IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3,
        IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4, IBV_QP_INIT_ATTR_RX_HASH = 1 << 5,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
    }
}

flag_enum! {
    /// `enum ibv_qp_create_send_ops_flags` (`ibv_qp_init_attr_ex.send_ops_flags`).
    ibv_qp_create_send_ops_flags {
        IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1,
        IBV_QP_EX_WITH_SEND = 1 << 2, IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3,
        IBV_QP_EX_WITH_RDMA_READ = 1 << 4, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6, IBV_QP_EX_WITH_LOCAL_INV = 1 << 7,
        IBV_QP_EX_WITH_BIND_MW = 1 << 8, IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9,
        IBV_QP_EX_WITH_TSO = 1 << 10, IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12,
    }
}

flag_enum! {
    /// `enum ibv_qp_open_attr_mask` (`ibv_qp_open_attr.comp_mask`).
    ibv_qp_open_attr_mask {
        IBV_QP_OPEN_ATTR_NUM = 1 << 0, IBV_QP_OPEN_ATTR_XRCD = 1 << 1,
        IBV_QP_OPEN_ATTR_CONTEXT = 1 << 2, IBV_QP_OPEN_ATTR_TYPE = 1 << 3,
        IBV_QP_OPEN_ATTR_RESERVED = 1 << 4,
    }
}

flag_enum! {
    /// `enum ibv_qp_attr_mask` (the mask argument of `ibv_modify_qp` / `ibv_query_qp`).
    ibv_qp_attr_mask {
        IBV_QP_STATE = 1 << 0, IBV_QP_CUR_STATE = 1 << 1, IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
        IBV_QP_ACCESS_FLAGS = 1 << 3, IBV_QP_PKEY_INDEX = 1 << 4, IBV_QP_PORT = 1 << 5,
        IBV_QP_QKEY = 1 << 6, IBV_QP_AV = 1 << 7, IBV_QP_PATH_MTU = 1 << 8,
        IBV_QP_TIMEOUT = 1 << 9, IBV_QP_RETRY_CNT = 1 << 10, IBV_QP_RNR_RETRY = 1 << 11,
        IBV_QP_RQ_PSN = 1 << 12, IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13, IBV_QP_ALT_PATH = 1 << 14,
        IBV_QP_MIN_RNR_TIMER = 1 << 15, IBV_QP_SQ_PSN = 1 << 16,
        IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17, IBV_QP_PATH_MIG_STATE = 1 << 18,
        IBV_QP_CAP = 1 << 19, IBV_QP_DEST_QPN = 1 << 20, IBV_QP_RATE_LIMIT = 1 << 25,
    }
}

value_enum! {
    /// `enum ibv_qp_state`.
    ibv_qp_state: core::ffi::c_uint {
        IBV_QPS_RESET = 0, IBV_QPS_INIT = 1, IBV_QPS_RTR = 2, IBV_QPS_RTS = 3, IBV_QPS_SQD = 4,
        IBV_QPS_SQE = 5, IBV_QPS_ERR = 6, IBV_QPS_UNKNOWN = 7,
    }
}

value_enum! {
    /// `enum ibv_mig_state`.
    ibv_mig_state: core::ffi::c_uint {
        IBV_MIG_MIGRATED = 0, IBV_MIG_REARM = 1, IBV_MIG_ARMED = 2,
    }
}

value_enum! {
    /// `enum ibv_wr_opcode` (`ibv_send_wr.opcode`).
    ibv_wr_opcode: core::ffi::c_uint {
        IBV_WR_RDMA_WRITE = 0, IBV_WR_RDMA_WRITE_WITH_IMM = 1, IBV_WR_SEND = 2,
        IBV_WR_SEND_WITH_IMM = 3, IBV_WR_RDMA_READ = 4, IBV_WR_ATOMIC_CMP_AND_SWP = 5,
        IBV_WR_ATOMIC_FETCH_AND_ADD = 6, IBV_WR_LOCAL_INV = 7, IBV_WR_BIND_MW = 8,
        IBV_WR_SEND_WITH_INV = 9, IBV_WR_TSO = 10, IBV_WR_DRIVER1 = 11,
        IBV_WR_ATOMIC_WRITE = 15,
    }
}

flag_enum! {
    /// `enum ibv_send_flags` (`ibv_send_wr.send_flags`).
    ibv_send_flags {
        IBV_SEND_FENCE = 1 << 0, IBV_SEND_SIGNALED = 1 << 1, IBV_SEND_SOLICITED = 1 << 2,
        IBV_SEND_INLINE = 1 << 3, IBV_SEND_IP_CSUM = 1 << 4,
    }
}

flag_enum! {
    /// `enum ibv_cq_init_attr_mask` (`ibv_cq_init_attr_ex.comp_mask`).
    ibv_cq_init_attr_mask {
        IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0, IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1,
    }
}

flag_enum! {
    /// `enum ibv_create_cq_attr_flags` (`ibv_cq_init_attr_ex.flags`).
    ibv_create_cq_attr_flags {
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,
    }
}

flag_enum! {
    /// `enum ibv_parent_domain_init_attr_mask`.
    ibv_parent_domain_init_attr_mask {
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1 << 0,
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 1 << 1,
    }
}

flag_enum! {
    /// `enum ibv_values_mask` (`ibv_values_ex.comp_mask`).
    ibv_values_mask {
        IBV_VALUES_MASK_RAW_CLOCK = 1 << 0, IBV_VALUES_MASK_RESERVED = 1 << 1,
    }
}
