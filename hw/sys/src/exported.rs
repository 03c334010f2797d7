//! The table of the exported rdma-core functions mlx5-direct calls, each with the library that
//! exports it and its default symbol version (rdma-core 44 `libibverbs/libibverbs.map.in`,
//! `providers/mlx5/libmlx5.map`; `objdump -T` of Debian's `libibverbs.so.1.14.44.0` and
//! `libmlx5.so.1.24.44.0` lists the same defaults). The first rdma-core release of each
//! version tag is in [`crate::load::VERSION_TAGS`].
//!
//! One macro turns the table into the [`RdmaCore`] struct of function pointers, its loader,
//! one method per function (`rdma.ibv_alloc_pd(context)`), and [`RdmaCore::SYMBOLS`], from
//! which the `mlx5-conformance` crate compiles a C check that each declaration matches the
//! installed header's prototype.
//!
//! `IBVERBS_1.1` is the default of nearly every libibverbs symbol (its `IBVERBS_1.0` twin is a
//! compatibility shim for the 1.0 ABI's structs, rdma-core `libibverbs/compat-1_0.c`);
//! `ibv_create_comp_channel` and `ibv_destroy_comp_channel` were never re-versioned and exist
//! only as `IBVERBS_1.0`. `mlx5dv_init_obj` has `MLX5_1.0` and the default `MLX5_1.2`, the one
//! declared here (`docs/sources.md` §11).

use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::create::{mlx5dv_cq_init_attr, mlx5dv_qp_init_attr};
use crate::ibv::{
    _compat_ibv_port_attr, ibv_ah, ibv_ah_attr, ibv_async_event, ibv_comp_channel, ibv_context,
    ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device, ibv_device_attr, ibv_event_type, ibv_gid,
    ibv_mr, ibv_pd, ibv_port_state, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_qp_init_attr_ex,
    ibv_srq, ibv_srq_attr, ibv_srq_init_attr, ibv_wc_status,
};
use crate::load::{Handle, Library, LoadError, Symbol};
use crate::obj::mlx5dv_obj;
use crate::query::{mlx5dv_clock_info, mlx5dv_context};

/// `"()"` for a function without a return type, else the type's text.
macro_rules! ret_text {
    () => {
        "()"
    };
    ($t:ty) => {
        stringify!($t)
    };
}

macro_rules! exported {
    ($(
        $(#[$doc:meta])*
        $lib:ident $ver:literal fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        /// rdma-core's `libibverbs.so.1` and `libmlx5.so.1`, loaded at run time: one function
        /// pointer per exported function mlx5-direct calls, each a method of the same name
        /// (the C function's contract is its man page). Get the process's with
        /// [`RdmaCore::get`]; the libraries are never unloaded.
        pub struct RdmaCore {
            /// The files loaded, libibverbs first.
            paths: [String; 2],
            $($name: unsafe extern "C" fn($($ty),*) $(-> $ret)?,)*
        }

        impl RdmaCore {
            /// Every symbol resolved, in declaration order: name, library, version tag and
            /// the declared Rust signature.
            pub const SYMBOLS: &'static [Symbol] = &[$(Symbol {
                name: stringify!($name),
                library: Library::$lib,
                version: $ver,
                args: &[$(stringify!($ty)),*],
                ret: ret_text!($($ret)?),
            }),*];

            /// Looks every symbol up in the two opened libraries; all the missing ones are
            /// reported together.
            pub(crate) fn resolve(ibv: &Handle, dv: &Handle) -> Result<RdmaCore, LoadError> {
                let mut missing = Vec::new();
                $(
                    let $name = match Library::$lib {
                        Library::Ibverbs => ibv,
                        Library::Mlx5 => dv,
                    }
                    .lookup(concat!(stringify!($name), "\0"), concat!($ver, "\0"));
                    if $name.is_null() {
                        missing.extend(Self::SYMBOLS.iter().find(|s| s.name == stringify!($name)));
                    }
                )*
                if !missing.is_empty() {
                    return Err(LoadError::Missing {
                        symbols: missing,
                        paths: [ibv.path.clone(), dv.path.clone()],
                    });
                }
                Ok(RdmaCore {
                    paths: [ibv.path.clone(), dv.path.clone()],
                    $(
                        // SAFETY: a non-NULL address of the exported function `$name` at the
                        // version whose prototype is declared here (the conformance crate
                        // compiles a check of the declaration against the installed header).
                        $name: unsafe {
                            core::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($ty),*) $(-> $ret)?,
                            >($name)
                        },
                    )*
                })
            }

            $(
                $(#[$doc])*
                #[doc = ""]
                #[doc = concat!("`", stringify!($name), "@", $ver, "`.")]
                #[doc = ""]
                #[doc = "# Safety"]
                #[doc = ""]
                #[doc = "The C function's contract (its man page): live objects, valid pointers."]
                #[inline]
                pub unsafe fn $name(&self, $($arg: $ty),*) $(-> $ret)? {
                    // SAFETY: the caller keeps the C function's contract.
                    unsafe { (self.$name)($($arg),*) }
                }
            )*
        }
    };
}

exported! {
    /// NULL-terminated array of the RDMA devices; `num_devices` (optional) gets the count.
    /// Free with [`RdmaCore::ibv_free_device_list`].
    Ibverbs "IBVERBS_1.1" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    /// Free a list from [`RdmaCore::ibv_get_device_list`].
    Ibverbs "IBVERBS_1.1" fn ibv_free_device_list(list: *mut *mut ibv_device);
    /// Kernel device name (`mlx5_0`).
    Ibverbs "IBVERBS_1.1" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
    /// Node GUID, big-endian.
    Ibverbs "IBVERBS_1.1" fn ibv_get_device_guid(device: *mut ibv_device) -> u64;
    /// Open a device; NULL and `errno` on failure.
    Ibverbs "IBVERBS_1.1" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    /// Close a device.
    Ibverbs "IBVERBS_1.1" fn ibv_close_device(context: *mut ibv_context) -> c_int;
    /// Next async event (blocks unless the async fd is non-blocking); ack it with
    /// [`RdmaCore::ibv_ack_async_event`].
    Ibverbs "IBVERBS_1.1" fn ibv_get_async_event(
        context: *mut ibv_context,
        event: *mut ibv_async_event,
    ) -> c_int;
    /// Acknowledge an async event.
    Ibverbs "IBVERBS_1.1" fn ibv_ack_async_event(event: *mut ibv_async_event);
    /// Device attributes.
    Ibverbs "IBVERBS_1.1" fn ibv_query_device(
        context: *mut ibv_context,
        device_attr: *mut ibv_device_attr,
    ) -> c_int;
    /// The exported legacy port query (what verbs.h's `___ibv_query_port`,
    /// [`RdmaCore::___ibv_query_port`], falls back to).
    Ibverbs "IBVERBS_1.1" fn ibv_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut _compat_ibv_port_attr,
    ) -> c_int;
    /// One GID table entry.
    Ibverbs "IBVERBS_1.1" fn ibv_query_gid(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int;
    /// One P_Key table entry (big-endian).
    Ibverbs "IBVERBS_1.1" fn ibv_query_pkey(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        pkey: *mut u16,
    ) -> c_int;
    /// Allocate a protection domain.
    Ibverbs "IBVERBS_1.1" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    /// Free a protection domain (also frees a parent domain).
    Ibverbs "IBVERBS_1.1" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    /// Register memory. The exported symbol forwards to `ibv_reg_mr_iova2` with
    /// `iova = addr` (rdma-core `libibverbs/verbs.c`), which is also where verbs.h's
    /// `ibv_reg_mr` macro sends a non-constant `access`.
    Ibverbs "IBVERBS_1.1" fn ibv_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut ibv_mr;
    /// Deregister memory.
    Ibverbs "IBVERBS_1.1" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    /// Create a completion channel (only ever versioned `IBVERBS_1.0`).
    Ibverbs "IBVERBS_1.0" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    /// Destroy a completion channel (EBUSY while CQs use it; only ever versioned
    /// `IBVERBS_1.0`).
    Ibverbs "IBVERBS_1.0" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    /// Create a CQ.
    Ibverbs "IBVERBS_1.1" fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    /// Resize a CQ.
    Ibverbs "IBVERBS_1.1" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int;
    /// Destroy a CQ (waits for every completion event to be acknowledged).
    Ibverbs "IBVERBS_1.1" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// Next completion event of a channel.
    Ibverbs "IBVERBS_1.1" fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    /// Acknowledge `nevents` completion events of `cq`.
    Ibverbs "IBVERBS_1.1" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint);
    /// Create an SRQ.
    Ibverbs "IBVERBS_1.1" fn ibv_create_srq(
        pd: *mut ibv_pd,
        srq_init_attr: *mut ibv_srq_init_attr,
    ) -> *mut ibv_srq;
    /// Modify an SRQ (`IBV_SRQ_*` mask).
    Ibverbs "IBVERBS_1.1" fn ibv_modify_srq(
        srq: *mut ibv_srq,
        srq_attr: *mut ibv_srq_attr,
        srq_attr_mask: c_int,
    ) -> c_int;
    /// Query an SRQ.
    Ibverbs "IBVERBS_1.1" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int;
    /// Destroy an SRQ.
    Ibverbs "IBVERBS_1.1" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    /// Create a QP.
    Ibverbs "IBVERBS_1.1" fn ibv_create_qp(
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> *mut ibv_qp;
    /// Modify a QP (`IBV_QP_*` mask); returns 0 or an errno value.
    Ibverbs "IBVERBS_1.1" fn ibv_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
    ) -> c_int;
    /// Query a QP.
    Ibverbs "IBVERBS_1.1" fn ibv_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    /// Destroy a QP.
    Ibverbs "IBVERBS_1.1" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    /// Create an address handle.
    Ibverbs "IBVERBS_1.1" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    /// Destroy an address handle.
    Ibverbs "IBVERBS_1.1" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
    /// Attach a UD QP to a multicast group (`lid` in host order).
    Ibverbs "IBVERBS_1.1" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    /// Detach a UD QP from a multicast group.
    Ibverbs "IBVERBS_1.1" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    /// Static description of a work-completion status.
    Ibverbs "IBVERBS_1.1" fn ibv_wc_status_str(status: ibv_wc_status::Type) -> *const c_char;
    /// Static description of an async event type.
    Ibverbs "IBVERBS_1.1" fn ibv_event_type_str(event: ibv_event_type::Type) -> *const c_char;
    /// Static description of a port state.
    Ibverbs "IBVERBS_1.1" fn ibv_port_state_str(port_state: ibv_port_state::Type) -> *const c_char;
    /// Make libibverbs' memory fork-safe.
    Ibverbs "IBVERBS_1.1" fn ibv_fork_init() -> c_int;

    /// Fill the `out` structs of every pair in `obj` whose `MLX5DV_OBJ_*` bit is in
    /// `obj_type`. Returns 0 or an errno value. Marks a CQ as DV-owned: rdma-core no longer
    /// cleans its CQEs when a QP is destroyed. The `MLX5_1.2` version returns `cq_uar` as the
    /// UAR address (`docs/sources.md` §11).
    Mlx5 "MLX5_1.2" fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int;
    /// Query mlx5-specific device attributes; set `attrs_out.comp_mask` first. Returns 0 or
    /// an errno value.
    Mlx5 "MLX5_1.0" fn mlx5dv_query_device(
        ctx_in: *mut ibv_context,
        attrs_out: *mut mlx5dv_context,
    ) -> c_int;
    /// Create a QP with mlx5-specific attributes. Returns NULL and sets errno on failure.
    Mlx5 "MLX5_1.3" fn mlx5dv_create_qp(
        context: *mut ibv_context,
        qp_attr: *mut ibv_qp_init_attr_ex,
        mlx5_qp_attr: *mut mlx5dv_qp_init_attr,
    ) -> *mut ibv_qp;
    /// Create a CQ with mlx5-specific attributes. Returns NULL and sets errno on failure.
    Mlx5 "MLX5_1.1" fn mlx5dv_create_cq(
        context: *mut ibv_context,
        cq_attr: *mut ibv_cq_init_attr_ex,
        mlx5_cq_attr: *mut mlx5dv_cq_init_attr,
    ) -> *mut ibv_cq_ex;
    /// Read the kernel's current clock-conversion parameters (needs a kernel that publishes
    /// them; `EOPNOTSUPP` otherwise). Returns 0 or an errno value.
    Mlx5 "MLX5_1.4" fn mlx5dv_get_clock_info(
        context: *mut ibv_context,
        clock_info: *mut mlx5dv_clock_info,
    ) -> c_int;
    /// Whether `device` is driven by the mlx5 provider (so the other functions apply).
    Mlx5 "MLX5_1.8" fn mlx5dv_is_supported(device: *mut ibv_device) -> bool;
}

impl RdmaCore {
    /// The file libibverbs was loaded from (the path the dynamic loader found).
    pub fn libibverbs_path(&self) -> &str {
        &self.paths[0]
    }

    /// The file libmlx5 was loaded from.
    pub fn libmlx5_path(&self) -> &str {
        &self.paths[1]
    }
}

impl core::fmt::Debug for RdmaCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RdmaCore")
            .field("libibverbs", &self.paths[0])
            .field("libmlx5", &self.paths[1])
            .finish_non_exhaustive()
    }
}
