//! The mlx5dv functions (rdma-core 44 `mlx5dv.h`, exported by `libmlx5.so.1`).
//!
//! Declared unconditionally; linked only with the `link` feature (and never under `cfg(docsrs)`),
//! so the default build and docs.rs need no libmlx5. Symbol versions: a normal link binds `mlx5dv_init_obj@@MLX5_1.2`, the version that
//! returns `cq_uar` as the UAR address (`docs/sources.md` §11).

use core::ffi::c_int;

use crate::create::{mlx5dv_cq_init_attr, mlx5dv_qp_init_attr};
use crate::obj::mlx5dv_obj;
use crate::query::{mlx5dv_clock_info, mlx5dv_context};
use crate::verbs::{
    ibv_context, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device, ibv_qp, ibv_qp_init_attr_ex,
};

#[cfg_attr(
    all(feature = "link", not(docsrs)),
    link(name = "mlx5"),
    link(name = "ibverbs")
)]
extern "C" {
    /// Fill the `out` structs of every pair in `obj` whose `MLX5DV_OBJ_*` bit is in
    /// `obj_type`. Returns 0 or an errno value. Marks a CQ as DV-owned: rdma-core no longer
    /// cleans its CQEs when a QP is destroyed.
    pub fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int;

    /// Query mlx5-specific device attributes; set `attrs_out.comp_mask` first. Returns 0 or
    /// an errno value.
    pub fn mlx5dv_query_device(ctx_in: *mut ibv_context, attrs_out: *mut mlx5dv_context) -> c_int;

    /// Create a QP with mlx5-specific attributes. Returns NULL and sets errno on failure.
    pub fn mlx5dv_create_qp(
        context: *mut ibv_context,
        qp_attr: *mut ibv_qp_init_attr_ex,
        mlx5_qp_attr: *mut mlx5dv_qp_init_attr,
    ) -> *mut ibv_qp;

    /// Create a CQ with mlx5-specific attributes. Returns NULL and sets errno on failure.
    pub fn mlx5dv_create_cq(
        context: *mut ibv_context,
        cq_attr: *mut ibv_cq_init_attr_ex,
        mlx5_cq_attr: *mut mlx5dv_cq_init_attr,
    ) -> *mut ibv_cq_ex;

    /// Read the kernel's current clock-conversion parameters (needs a kernel that publishes
    /// them; `EOPNOTSUPP` otherwise). Returns 0 or an errno value.
    pub fn mlx5dv_get_clock_info(
        context: *mut ibv_context,
        clock_info: *mut mlx5dv_clock_info,
    ) -> c_int;

    /// Whether `device` is driven by the mlx5 provider (so the other functions apply).
    pub fn mlx5dv_is_supported(device: *mut ibv_device) -> bool;
}
