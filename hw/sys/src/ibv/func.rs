//! Rust versions of the header's `static inline` libibverbs functions. (The exported ones are
//! methods of [`crate::RdmaCore`], loaded at run time.)
//!
//! Most of them only dispatch through the provider's ops (`context->ops`, the `verbs_context`
//! ops, the `ibv_cq_ex` ops) and are free functions: they need nothing from the loaded
//! libraries, so the data path (`ibv_post_send`, `ibv_poll_cq`, ...) costs what it did when
//! the library was linked. The four whose header version falls back to an exported function
//! (`___ibv_query_port`, `ibv_query_device_ex`, `ibv_create_srq_ex`, `ibv_create_qp_ex`) are
//! methods of [`crate::RdmaCore`].
//!
//! The inline functions follow verbs.h branch for branch. The ones that create an object
//! through an extended op return `Option`: `None` where the header sets `errno = EOPNOTSUPP`
//! and returns NULL (this function sets `errno` too), `Some(p)` with the provider's result
//! otherwise (NULL with `errno` set on failure). Where the header calls a function pointer
//! unconditionally (`ibv_post_send`, `ibv_poll_cq`, `ibv_close_xrcd`, ...), a NULL pointer is
//! answered with `EOPNOTSUPP` instead of a crash; libibverbs fills every `ops` entry
//! (`libibverbs/dummy_ops.c`), so on a real context the provider's function is always called.

use core::ffi::{c_int, c_uint};
use core::ptr;

use super::context::ibv_context;
use super::enums::{ibv_qp_init_attr_mask, ibv_srq_init_attr_mask, ibv_srq_type};
use super::types::*;
use crate::RdmaCore;

/// Sets `errno` (the header's `errno = EOPNOTSUPP`).
fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`.
///
/// # Safety
///
/// `qp` is a live QP; `wr` a valid WR list; `bad_wr` writable.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live QP, whose context outlives it.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's own post_send with the caller's arguments.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => {
            // SAFETY: `bad_wr` is writable (caller).
            unsafe { *bad_wr = wr };
            libc::EOPNOTSUPP
        }
    }
}

/// `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
///
/// # Safety
///
/// As [`ibv_post_send`].
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live QP.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's own post_recv.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => {
            // SAFETY: `bad_wr` is writable (caller).
            unsafe { *bad_wr = wr };
            libc::EOPNOTSUPP
        }
    }
}

/// `ibv_post_srq_recv`: `srq->context->ops.post_srq_recv(srq, wr, bad_wr)`.
///
/// # Safety
///
/// `srq` is a live SRQ; `wr` a valid WR list; `bad_wr` writable.
#[inline]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live SRQ.
    match unsafe { (*(*srq).context).ops.post_srq_recv } {
        // SAFETY: the provider's own post_srq_recv.
        Some(f) => unsafe { f(srq, wr, bad_wr) },
        None => {
            // SAFETY: `bad_wr` is writable (caller).
            unsafe { *bad_wr = wr };
            libc::EOPNOTSUPP
        }
    }
}

/// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, num_entries, wc)`; completions polled, or a
/// negative value on error (`-EOPNOTSUPP` for a NULL op).
///
/// # Safety
///
/// `cq` is a live CQ; `wc` has room for `num_entries` entries.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees a live CQ.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's own poll_cq.
        Some(f) => unsafe { f(cq, num_entries, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
///
/// # Safety
///
/// `cq` is a live CQ.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller guarantees a live CQ.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's own req_notify_cq.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_cq_ex_to_cq`: a cast (an `ibv_cq_ex` starts with the fields of an `ibv_cq`).
pub fn ibv_cq_ex_to_cq(cq: *mut ibv_cq_ex) -> *mut ibv_cq {
    cq.cast()
}

/// `ibv_create_cq_ex` through `verbs_get_ctx_op(context, create_cq_ex)`.
///
/// # Safety
///
/// `context` is a live context; `cq_attr` valid.
#[inline]
pub unsafe fn ibv_create_cq_ex(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> Option<*mut ibv_cq_ex> {
    // SAFETY: live context (caller).
    match unsafe { crate::verbs_get_ctx_op!(context, create_cq_ex) } {
        // SAFETY: the provider's op with the caller's arguments.
        Some(f) => Some(unsafe { f(context, cq_attr) }),
        None => {
            set_errno(libc::EOPNOTSUPP);
            None
        }
    }
}

/// `ibv_open_xrcd` through `verbs_get_ctx_op(context, open_xrcd)`.
///
/// # Safety
///
/// `context` is a live context; `xrcd_init_attr` valid.
#[inline]
pub unsafe fn ibv_open_xrcd(
    context: *mut ibv_context,
    xrcd_init_attr: *mut ibv_xrcd_init_attr,
) -> Option<*mut ibv_xrcd> {
    // SAFETY: live context (caller).
    match unsafe { crate::verbs_get_ctx_op!(context, open_xrcd) } {
        // SAFETY: the provider's op.
        Some(f) => Some(unsafe { f(context, xrcd_init_attr) }),
        None => {
            set_errno(libc::EOPNOTSUPP);
            None
        }
    }
}

/// `ibv_close_xrcd`: the context's `close_xrcd` op (verbs.h calls it without checking; a
/// context that opened the XRCD has it, and a missing one is `EOPNOTSUPP` here).
///
/// # Safety
///
/// `xrcd` is a live XRC domain.
#[inline]
pub unsafe fn ibv_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    // SAFETY: a live XRCD points to its live context (caller).
    let context = unsafe { (*xrcd).context };
    // SAFETY: as above.
    match unsafe { crate::verbs_get_ctx_op!(context, close_xrcd) } {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(xrcd) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_get_srq_num` through `verbs_get_ctx_op(srq->context, get_srq_num)` (`EOPNOTSUPP`
/// without it).
///
/// # Safety
///
/// `srq` is a live SRQ; `srq_num` writable.
#[inline]
pub unsafe fn ibv_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: a live SRQ points to its live context (caller).
    let context = unsafe { (*srq).context };
    // SAFETY: as above.
    match unsafe { crate::verbs_get_ctx_op!(context, get_srq_num) } {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(srq, srq_num) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_open_qp` through `verbs_get_ctx_op(context, open_qp)`.
///
/// # Safety
///
/// `context` is a live context; `qp_open_attr` valid.
#[inline]
pub unsafe fn ibv_open_qp(
    context: *mut ibv_context,
    qp_open_attr: *mut ibv_qp_open_attr,
) -> Option<*mut ibv_qp> {
    // SAFETY: live context (caller).
    match unsafe { crate::verbs_get_ctx_op!(context, open_qp) } {
        // SAFETY: the provider's op.
        Some(f) => Some(unsafe { f(context, qp_open_attr) }),
        None => {
            set_errno(libc::EOPNOTSUPP);
            None
        }
    }
}

/// `ibv_alloc_td` through `verbs_get_ctx_op(context, alloc_td)`.
///
/// # Safety
///
/// `context` is a live context; `init_attr` valid.
#[inline]
pub unsafe fn ibv_alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> Option<*mut ibv_td> {
    // SAFETY: live context (caller).
    match unsafe { crate::verbs_get_ctx_op!(context, alloc_td) } {
        // SAFETY: the provider's op.
        Some(f) => Some(unsafe { f(context, init_attr) }),
        None => {
            set_errno(libc::EOPNOTSUPP);
            None
        }
    }
}

/// `ibv_dealloc_td` through `verbs_get_ctx_op(td->context, dealloc_td)` (`EOPNOTSUPP`
/// without it).
///
/// # Safety
///
/// `td` is a live thread domain.
#[inline]
pub unsafe fn ibv_dealloc_td(td: *mut ibv_td) -> c_int {
    // SAFETY: a live TD points to its live context (caller).
    let context = unsafe { (*td).context };
    // SAFETY: as above.
    match unsafe { crate::verbs_get_ctx_op!(context, dealloc_td) } {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(td) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_alloc_parent_domain` through `verbs_get_ctx_op(context, alloc_parent_domain)`.
///
/// # Safety
///
/// `context` is a live context; `attr` valid.
#[inline]
pub unsafe fn ibv_alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> Option<*mut ibv_pd> {
    // SAFETY: live context (caller).
    match unsafe { crate::verbs_get_ctx_op!(context, alloc_parent_domain) } {
        // SAFETY: the provider's op.
        Some(f) => Some(unsafe { f(context, attr) }),
        None => {
            set_errno(libc::EOPNOTSUPP);
            None
        }
    }
}

/// `ibv_query_rt_values_ex` through `verbs_get_ctx_op(context, query_rt_values)`
/// (`EOPNOTSUPP` without it).
///
/// # Safety
///
/// `context` is a live context; `values` valid.
#[inline]
pub unsafe fn ibv_query_rt_values_ex(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    // SAFETY: live context (caller).
    match unsafe { crate::verbs_get_ctx_op!(context, query_rt_values) } {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(context, values) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_start_poll`: begin a batch of the extended polling interface on `cq` (0 with the first
/// completion current, `ENOENT` when the CQ is empty). The header calls the op
/// unconditionally; a CQ without one (not created with `ibv_create_cq_ex`) answers
/// `EOPNOTSUPP` here.
///
/// # Safety
///
/// `cq` is a live CQ created with `ibv_create_cq_ex`; `attr` points at a `struct
/// ibv_poll_cq_attr` (one `u32` comp_mask, 0) valid for the call.
#[inline]
pub unsafe fn ibv_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: a live extended CQ (caller).
    match unsafe { (*cq).start_poll } {
        // SAFETY: the provider's op with the caller's arguments.
        Some(f) => unsafe { f(cq, attr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_next_poll`: make the next completion current (0), or `ENOENT` when there is none.
///
/// # Safety
///
/// `cq` is a live extended CQ inside a batch [`ibv_start_poll`] began.
#[inline]
pub unsafe fn ibv_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: a live extended CQ (caller).
    match unsafe { (*cq).next_poll } {
        // SAFETY: the provider's op.
        Some(f) => unsafe { f(cq) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_end_poll`: end the batch (call it only after [`ibv_start_poll`] returned 0).
///
/// # Safety
///
/// `cq` is a live extended CQ inside a batch [`ibv_start_poll`] began.
#[inline]
pub unsafe fn ibv_end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: a live extended CQ (caller).
    if let Some(f) = unsafe { (*cq).end_poll } {
        // SAFETY: the provider's op.
        unsafe { f(cq) }
    }
}

macro_rules! wc_reader {
    ($(#[$m:meta])* $name:ident, $field:ident, $ty:ty) => {
        $(#[$m])*
        ///
        /// The header calls the reader unconditionally; a provider installs it only for the
        /// fields asked for in `wc_flags` at creation, and a missing one reads 0 here.
        ///
        /// # Safety
        ///
        /// `cq` is a live extended CQ with a current completion (inside a poll batch).
        #[inline]
        pub unsafe fn $name(cq: *mut ibv_cq_ex) -> $ty {
            // SAFETY: a live extended CQ (caller).
            match unsafe { (*cq).$field } {
                // SAFETY: the provider's reader of the current completion.
                Some(f) => unsafe { f(cq) },
                None => 0,
            }
        }
    };
}

wc_reader!(
    /// `ibv_wc_read_opcode` of the current completion (successful completions only).
    ibv_wc_read_opcode, read_opcode, super::enums::ibv_wc_opcode::Type
);
wc_reader!(
    /// `ibv_wc_read_vendor_err` of the current completion.
    ibv_wc_read_vendor_err, read_vendor_err, u32
);
wc_reader!(
    /// `ibv_wc_read_byte_len` (`IBV_WC_EX_WITH_BYTE_LEN`).
    ibv_wc_read_byte_len, read_byte_len, u32
);
wc_reader!(
    /// `ibv_wc_read_imm_data`, network order (`IBV_WC_EX_WITH_IMM`).
    ibv_wc_read_imm_data, read_imm_data, u32
);
wc_reader!(
    /// `ibv_wc_read_qp_num` (`IBV_WC_EX_WITH_QP_NUM`).
    ibv_wc_read_qp_num, read_qp_num, u32
);
wc_reader!(
    /// `ibv_wc_read_src_qp` (`IBV_WC_EX_WITH_SRC_QP`).
    ibv_wc_read_src_qp, read_src_qp, u32
);
wc_reader!(
    /// `ibv_wc_read_wc_flags` (`IBV_WC_GRH`, `IBV_WC_WITH_IMM`, ...).
    ibv_wc_read_wc_flags, read_wc_flags, c_uint
);
wc_reader!(
    /// `ibv_wc_read_completion_ts`: the raw device clock of the current completion
    /// (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
    ibv_wc_read_completion_ts, read_completion_ts, u64
);

/// The `static inline` functions of verbs.h that fall back to an exported function, which
/// they call through the loaded library.
impl RdmaCore {
    /// `___ibv_query_port` (what verbs.h's `ibv_query_port` macro expands to): the extended
    /// `query_port` op with `sizeof(struct ibv_port_attr)`, or, without it, the exported legacy
    /// [`RdmaCore::ibv_query_port`] on a zeroed `port_attr`.
    ///
    /// # Safety
    ///
    /// `context` is a live context; `port_attr` writable.
    #[inline]
    pub unsafe fn ___ibv_query_port(
        &self,
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
    ) -> c_int {
        // SAFETY: live context (caller).
        match unsafe { crate::verbs_get_ctx_op!(context, query_port) } {
            // SAFETY: the provider's op, told the size of the caller's struct.
            Some(f) => unsafe {
                f(
                    context,
                    port_num,
                    port_attr,
                    core::mem::size_of::<ibv_port_attr>(),
                )
            },
            None => {
                // SAFETY: `port_attr` is writable (caller); zero is valid for every field.
                unsafe {
                    ptr::write_bytes(port_attr, 0, 1);
                    self.ibv_query_port(context, port_num, port_attr.cast())
                }
            }
        }
    }

    /// `ibv_query_device_ex` (verbs.h `static inline`): the provider's `query_device_ex` when it has
    /// one and supports it, else the legacy [`RdmaCore::ibv_query_device`] into `orig_attr` with the rest zeroed
    /// (the header's fallback on `EOPNOTSUPP` / `ENOSYS`); `EINVAL` for an input with a comp_mask.
    ///
    /// # Safety
    ///
    /// `context` is a live context; `input` is NULL or valid; `attr` is valid for writes.
    #[inline]
    pub unsafe fn ibv_query_device_ex(
        &self,
        context: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
    ) -> c_int {
        // `struct ibv_query_device_ex_input` is one u32 comp_mask.
        // SAFETY: a non-NULL `input` is valid (caller).
        if !input.is_null() && unsafe { *(input as *const u32) } != 0 {
            return libc::EINVAL;
        }
        // SAFETY: live context (caller).
        if let Some(f) = unsafe { crate::verbs_get_ctx_op!(context, query_device_ex) } {
            // SAFETY: the provider's op with the size of the struct it may fill.
            let r = unsafe {
                f(
                    context,
                    input,
                    attr,
                    core::mem::size_of::<ibv_device_attr_ex>(),
                )
            };
            if r != libc::EOPNOTSUPP && r != libc::ENOSYS {
                return r;
            }
        }
        // SAFETY: `attr` is valid for writes (caller); all-zero is a valid value of every field.
        unsafe {
            core::ptr::write_bytes(attr, 0, 1);
            self.ibv_query_device(context, core::ptr::addr_of_mut!((*attr).orig_attr))
        }
    }

    /// `ibv_create_srq_ex`: a basic SRQ whose `comp_mask` holds nothing but `PD` (and `TYPE` =
    /// `IBV_SRQT_BASIC`) goes to [`RdmaCore::ibv_create_srq`]; anything else to the `create_srq_ex` op.
    ///
    /// # Safety
    ///
    /// `context` is a live context; `srq_init_attr_ex` valid.
    #[inline]
    pub unsafe fn ibv_create_srq_ex(
        &self,
        context: *mut ibv_context,
        srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
    ) -> Option<*mut ibv_srq> {
        // SAFETY: valid attributes (caller).
        let a = unsafe { &*srq_init_attr_ex };
        let pd = ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_PD.0;
        let ty = ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TYPE.0;
        let mask = a.comp_mask;
        if mask & !(pd | ty) == 0
            && mask & pd != 0
            && (mask & ty == 0 || a.srq_type == ibv_srq_type::IBV_SRQT_BASIC)
        {
            // SAFETY: `ibv_srq_init_attr_ex` starts with the fields of `ibv_srq_init_attr`.
            return Some(unsafe { self.ibv_create_srq(a.pd, srq_init_attr_ex.cast()) });
        }
        // SAFETY: live context (caller).
        match unsafe { crate::verbs_get_ctx_op!(context, create_srq_ex) } {
            // SAFETY: the provider's op.
            Some(f) => Some(unsafe { f(context, srq_init_attr_ex) }),
            None => {
                set_errno(libc::EOPNOTSUPP);
                None
            }
        }
    }

    /// `ibv_create_qp_ex`: `comp_mask == IBV_QP_INIT_ATTR_PD` goes to [`RdmaCore::ibv_create_qp`], anything
    /// else to the `create_qp_ex` op.
    ///
    /// # Safety
    ///
    /// `context` is a live context; `qp_init_attr_ex` valid.
    #[inline]
    pub unsafe fn ibv_create_qp_ex(
        &self,
        context: *mut ibv_context,
        qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
    ) -> Option<*mut ibv_qp> {
        // SAFETY: valid attributes (caller).
        let a = unsafe { &*qp_init_attr_ex };
        if a.comp_mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
            // SAFETY: `ibv_qp_init_attr_ex` starts with the fields of `ibv_qp_init_attr`.
            return Some(unsafe { self.ibv_create_qp(a.pd, qp_init_attr_ex.cast()) });
        }
        // SAFETY: live context (caller).
        match unsafe { crate::verbs_get_ctx_op!(context, create_qp_ex) } {
            // SAFETY: the provider's op.
            Some(f) => Some(unsafe { f(context, qp_init_attr_ex) }),
            None => {
                set_errno(libc::EOPNOTSUPP);
                None
            }
        }
    }
}
