//! `struct ibv_context`, its legacy ops table and the extended `struct verbs_context`.
//!
//! A provider that supports the extended verbs allocates a `verbs_context` whose *last* field
//! is the `ibv_context` handed to applications, and sets `ibv_context.abi_compat` to
//! `__VERBS_ABI_IS_EXTENDED` (`UINTPTR_MAX`). New ops are added at the *front* of
//! `verbs_context` ("grows up"), so a provider built against an older header has a shorter
//! struct: `sz` tells how many bytes precede the `ibv_context`, and an op is only there when
//! `sz >= sizeof(struct verbs_context) - offsetof(struct verbs_context, op)` (verbs.h
//! `verbs_get_ctx_op`). [`verbs_get_ctx_op!`](crate::verbs_get_ctx_op) reads `sz` and the op
//! through addresses computed from the `ibv_context` pointer, never through a reference to a
//! whole `verbs_context` that may not exist.

use core::ffi::{c_int, c_uint, c_void};

use libc::pthread_mutex_t;

use super::types::*;

/// `struct ibv_context_ops`: the legacy per-context ops. libibverbs only calls the data-path
/// entries through it (`ibv_post_send`, `ibv_poll_cq`, ...); the `_compat_*` slots are kept
/// for the ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_context_ops {
    /// Obsolete.
    pub _compat_query_device:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int>,
    /// Obsolete.
    pub _compat_query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int>,
    /// Obsolete.
    pub _compat_alloc_pd: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_dealloc_pd: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_reg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_rereg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_dereg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Allocate a memory window.
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw>,
    /// Bind a memory window.
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    /// Free a memory window.
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    /// Obsolete.
    pub _compat_create_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// `ibv_poll_cq`.
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    /// `ibv_req_notify_cq`.
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    /// Obsolete.
    pub _compat_cq_event: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_resize_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_destroy_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_create_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_modify_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_query_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_destroy_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// `ibv_post_srq_recv`.
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    /// Obsolete.
    pub _compat_create_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_query_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_modify_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_destroy_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// `ibv_post_send`.
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    /// `ibv_post_recv`.
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    /// Obsolete.
    pub _compat_create_ah: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_destroy_ah: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_attach_mcast: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_detach_mcast: Option<unsafe extern "C" fn() -> *mut c_void>,
    /// Obsolete.
    pub _compat_async_event: Option<unsafe extern "C" fn() -> *mut c_void>,
}

/// `struct ibv_context`: an open device.
#[repr(C)]
pub struct ibv_context {
    /// The device.
    pub device: *mut ibv_device,
    /// Legacy ops (the data-path entries).
    pub ops: ibv_context_ops,
    /// uverbs command fd.
    pub cmd_fd: c_int,
    /// Async event fd.
    pub async_fd: c_int,
    /// Completion vectors.
    pub num_comp_vectors: c_int,
    /// libibverbs lock.
    pub mutex: pthread_mutex_t,
    /// [`VERBS_ABI_IS_EXTENDED`] when a [`verbs_context`] surrounds this struct.
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED` (`(void *)UINTPTR_MAX`), the `abi_compat` of an extended context.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `struct verbs_context`: the extended ops, in the header's order (newest first), then `sz`
/// and the `ibv_context` applications see.
#[repr(C)]
pub struct verbs_context {
    /// `ibv_query_port` (with the caller's struct size).
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
    /// `ibv_advise_mr`.
    pub advise_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, c_uint, u32, *mut ibv_sge, u32) -> c_int>,
    /// `ibv_alloc_null_mr`.
    pub alloc_null_mr: Option<unsafe extern "C" fn(*mut ibv_pd) -> *mut ibv_mr>,
    /// `ibv_read_counters`.
    pub read_counters: Option<unsafe extern "C" fn(*mut ibv_counters, *mut u64, u32, u32) -> c_int>,
    /// `ibv_attach_counters_point_flow`.
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(
            *mut ibv_counters,
            *mut ibv_counter_attach_attr,
            *mut ibv_flow,
        ) -> c_int,
    >,
    /// `ibv_create_counters`.
    pub create_counters: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_counters_init_attr) -> *mut ibv_counters,
    >,
    /// `ibv_destroy_counters`.
    pub destroy_counters: Option<unsafe extern "C" fn(*mut ibv_counters) -> c_int>,
    /// `ibv_reg_dm_mr`.
    pub reg_dm_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr>,
    /// `ibv_alloc_dm`.
    pub alloc_dm:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
    /// `ibv_free_dm`.
    pub free_dm: Option<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
    /// `ibv_modify_flow_action_esp`.
    pub modify_flow_action_esp:
        Option<unsafe extern "C" fn(*mut ibv_flow_action, *mut ibv_flow_action_esp_attr) -> c_int>,
    /// `ibv_destroy_flow_action`.
    pub destroy_flow_action: Option<unsafe extern "C" fn(*mut ibv_flow_action) -> c_int>,
    /// `ibv_create_flow_action_esp`.
    pub create_flow_action_esp: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *mut ibv_flow_action_esp_attr,
        ) -> *mut ibv_flow_action,
    >,
    /// `ibv_modify_qp_rate_limit`.
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int>,
    /// `ibv_alloc_parent_domain`.
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd,
    >,
    /// `ibv_dealloc_td`.
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    /// `ibv_alloc_td`.
    pub alloc_td:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    /// `ibv_modify_cq`.
    pub modify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int>,
    /// `ibv_post_srq_ops`.
    pub post_srq_ops:
        Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int>,
    /// `ibv_destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int>,
    /// `ibv_create_rwq_ind_table`.
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *mut ibv_rwq_ind_table_init_attr,
        ) -> *mut ibv_rwq_ind_table,
    >,
    /// `ibv_destroy_wq`.
    pub destroy_wq: Option<unsafe extern "C" fn(*mut ibv_wq) -> c_int>,
    /// `ibv_modify_wq`.
    pub modify_wq: Option<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int>,
    /// `ibv_create_wq`.
    pub create_wq:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq>,
    /// `ibv_query_rt_values_ex`.
    pub query_rt_values:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    /// `ibv_create_cq_ex`.
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    /// libibverbs-private data.
    pub priv_: *mut verbs_ex_private,
    /// `ibv_query_device_ex` (with the caller's struct size).
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    /// `ibv_destroy_flow`.
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
    /// ABI placeholder.
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    /// `ibv_create_flow`.
    pub ibv_create_flow:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow>,
    /// ABI placeholder.
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    /// `ibv_open_qp`.
    pub open_qp:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
    /// `ibv_create_qp_ex`.
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    /// `ibv_get_srq_num`.
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    /// `ibv_create_srq_ex`.
    pub create_srq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    /// `ibv_open_xrcd`.
    pub open_xrcd:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    /// `ibv_close_xrcd`.
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    /// ABI placeholder.
    pub _ABI_placeholder3: u64,
    /// Bytes of this struct the provider allocated before `context` (must immediately precede
    /// it).
    pub sz: usize,
    /// The context applications see (must be last).
    pub context: ibv_context,
}

/// `verbs_get_ctx`: the [`verbs_context`] around `ctx`, or NULL when the context is not
/// extended.
///
/// The pointer may lie before the provider's allocation when the provider's struct is
/// shorter than this one (older header): only fields that [`verbs_get_ctx_op!`](crate::verbs_get_ctx_op) admits may be
/// read through it, so prefer the macro.
///
/// # Safety
///
/// `ctx` must point to a live `ibv_context`.
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: the caller guarantees `ctx` is a live context.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return core::ptr::null_mut();
    }
    ctx.cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(verbs_context, context))
        .cast()
}

/// Reads the `verbs_context` field at byte offset `off` of the struct surrounding `ctx`,
/// after checking the context is extended and `sz` covers the field (verbs.h
/// `verbs_get_ctx_op`). `_field` only names the field's type.
///
/// # Safety
///
/// `ctx` must point to a live `ibv_context`; `off` must be the offset of a field of type `T`.
#[doc(hidden)]
pub unsafe fn __ctx_field<T: Copy>(
    ctx: *mut ibv_context,
    off: usize,
    _field: fn(&verbs_context) -> &T,
) -> Option<T> {
    use core::mem::{offset_of, size_of};
    // SAFETY: the caller guarantees `ctx` is a live context.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    let base = ctx.cast::<u8>();
    let to_ctx = offset_of!(verbs_context, context);
    // SAFETY: an extended context always has `sz` immediately before it (verbs.h: "Must be
    // immediately before struct ibv_context").
    let sz = unsafe {
        base.wrapping_sub(to_ctx - offset_of!(verbs_context, sz))
            .cast::<usize>()
            .read()
    };
    if sz < size_of::<verbs_context>() - off {
        return None;
    }
    // SAFETY: `sz` says the provider's struct reaches back to this field, which is therefore
    // inside its allocation and initialised.
    Some(unsafe { base.wrapping_sub(to_ctx - off).cast::<T>().read() })
}

/// `verbs_get_ctx_op(ctx, op)`: the extended op `op` of `ctx` (an `Option` of its function
/// pointer), `None` when the context is not extended, the provider's `verbs_context` is too
/// short to hold it, or the provider left it NULL. Must be used inside `unsafe`; `ctx` must be
/// a live `*mut ibv_context`.
#[macro_export]
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {
        $crate::ibv::__ctx_field(
            $ctx,
            ::core::mem::offset_of!($crate::ibv::verbs_context, $op),
            |v: &$crate::ibv::verbs_context| &v.$op,
        )
        .flatten()
    };
}
