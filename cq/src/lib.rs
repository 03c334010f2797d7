//! # mlx5-cq
//!
//! Completion-queue formats of mlx5, byte-identical to rdma-core's `mlx5dv.h`:
//!
//! - [`cqe`]: the 64-byte CQE (`struct mlx5_cqe64`) and error CQE (`struct mlx5_err_cqe`),
//!   `op_own` decoding, CQE opcodes, where the 64-byte part sits in a 128-byte CQE, inline
//!   scatter formats 1 and 2;
//! - [`owner`]: the ownership rule (owner bit against the lap parity, plus the INVALID-opcode
//!   check rdma-core needs because it fills new CQs with `op_own = 0xF0`);
//! - [`status`]: every error syndrome mapped to its `ibv_wc_status`, with names and causes;
//! - [`doorbell`]: the CQ doorbell-record encodings (set_ci, arm) and the UAR arm value.
//!
//! `no_std`, no allocation. Multi-byte CQE fields are big-endian typed fields, as in
//! `mlx5-wqe` (whose crate docs describe the scheme): a host-order store does not compile.
//!
//! Each item is documented once, in its module; the crate root re-exports them by name.
#![no_std]
#![deny(missing_docs)]

pub mod cqe;
pub mod doorbell;
pub mod owner;
pub mod status;

pub use cqe::{
    cqe64_offset, cqe_opcode_name, Cqe64, ErrCqe, CQE_FORMAT_COMPRESSED, CQE_FORMAT_INLINE32,
    CQE_FORMAT_INLINE64, CQE_FORMAT_NONE, CQE_INVALID, CQE_NO_PACKET, CQE_REQ, CQE_REQ_ERR,
    CQE_RESIZE_CQ, CQE_RESP_ERR, CQE_RESP_SEND, CQE_RESP_SEND_IMM, CQE_RESP_SEND_INV,
    CQE_RESP_WR_IMM, CQE_SIG_ERR, INLINE_SCATTER_32, INLINE_SCATTER_64,
};
pub use doorbell::{
    arm_uar_value, arm_value, decode_arm, set_ci_value, ArmCmd, CQ_ARM_DB, CQ_CI_MASK,
    CQ_DB_REQ_NOT, CQ_DB_REQ_NOT_SOL, CQ_DOORBELL, CQ_SET_CI, CQ_SN_SHIFT, RCV_DBR, SND_DBR,
};
pub use owner::{expected_owner, sw_owned, CQE_INITIAL_OP_OWN};
pub use status::{
    syndrome_name, WcStatus, ALL_SYNDROMES, SYNDROME_BAD_RESP_ERR, SYNDROME_LOCAL_ACCESS_ERR,
    SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_PROT_ERR, SYNDROME_LOCAL_QP_OP_ERR,
    SYNDROME_MW_BIND_ERR, SYNDROME_REMOTE_ABORTED_ERR, SYNDROME_REMOTE_ACCESS_ERR,
    SYNDROME_REMOTE_INVAL_REQ_ERR, SYNDROME_REMOTE_OP_ERR, SYNDROME_RNR_RETRY_EXC_ERR,
    SYNDROME_TRANSPORT_RETRY_EXC_ERR, SYNDROME_WR_FLUSH_ERR, VENDOR_SYNDROME_ODP_PFAULT,
    VENDOR_SYNDROME_PSN,
};
/// The big-endian field types of the CQE structs (`zerocopy::byteorder::big_endian`).
#[doc(no_inline)]
pub use zerocopy::byteorder::big_endian::{U16, U32, U64};
