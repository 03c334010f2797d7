//! Hand-written bindings of the libibverbs surface mlx5-direct uses (rdma-core 44
//! `<infiniband/verbs.h>`, Debian `libibverbs-dev 44.0-2`, LP64 Linux).
//!
//! - [`enums`]: the C enums. Flag enums (OR-ed together) are `#[repr(transparent)]` newtypes
//!   over `c_uint` with associated constants (`ibv_send_flags::IBV_SEND_SIGNALED.0`); value
//!   enums are modules holding `type Type` and the constants (`ibv_qp_state::IBV_QPS_RTS`), so a
//!   value a newer kernel adds is a number, never an invalid Rust enum.
//! - [`types`]: the structs, `#[repr(C)]` with the header's field order. Objects the library
//!   allocates (`ibv_qp`, `ibv_cq`, ...) are mirrored in full because the backend reads their
//!   public fields (`qp_num`, `lkey`, `fd`, ...); structs only passed by pointer and never read
//!   are opaque.
//! - [`context`]: `struct ibv_context`, its legacy `struct ibv_context_ops` table and the
//!   extended `struct verbs_context` that a provider allocates *in front of* the
//!   `ibv_context` (`verbs_get_ctx`).
//! - [`func`]: the functions `libibverbs.so.1` exports, and Rust versions of the header's
//!   `static inline` functions, which dispatch exactly as verbs.h does: `ibv_post_send`,
//!   `ibv_poll_cq`, ... through `context->ops`; `ibv_create_cq_ex`, `ibv_alloc_td`,
//!   `ibv_open_xrcd`, ... through `verbs_get_ctx_op`, which checks that the context is
//!   extended (`abi_compat == __VERBS_ABI_IS_EXTENDED`), that the provider's `sz` covers the
//!   field, and that the op is set.
//!
//! Every size, offset and constant here is checked against the installed header by the
//! `mlx5-conformance` crate (`tests/it/verbs.rs`).

pub mod context;
pub mod enums;
pub mod func;
pub mod types;

pub use context::*;
pub use enums::*;
pub use func::*;
pub use types::*;

#[cfg(test)]
mod dispatch_tests;
