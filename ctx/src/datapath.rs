//! The one step from device layouts to the data path: the audited `unsafe` of this crate
//! (besides the memory accessors of `mem.rs`).
//!
//! [`mlx5_qp::Qp::from_layout`], [`mlx5_qp::Cq::from_layout`] and
//! [`mlx5_qp::Srq::from_layout`] are `unsafe` because the data path trusts the layout's raw
//! pointers for as long as it lives. Their contracts, and why this crate meets each:
//!
//! 1. **The memory the layout names stays mapped while the data-path object lives.** The
//!    layout comes from `create_qp` / `create_cq` / `create_srq` of the context's device a
//!    moment before, for a device object this crate owns in an `Arc` (`QpObj`, `CqObj`,
//!    `SrqObj`) whose `Drop` is the only place that destroys it. The owning wrapper
//!    ([`crate::Qp`], [`crate::Cq`], [`crate::Srq`]) declares the data-path object before that
//!    `Arc`, so the data path is dropped first; and no other holder of the `Arc` (a QP holds its
//!    CQs and SRQ) can use the layout, since only the wrapper holds the data-path object. The
//!    device keeps the rings, doorbell records and UAR mapped until the object is destroyed
//!    (rdma-core frees them in `mlx5_destroy_qp` / `mlx5_destroy_cq` / `mlx5_destroy_srq`; the
//!    software ConnectX in `destroy_*`).
//! 2. **Nothing else posts to or consumes the object.** Each device object gets exactly one
//!    data-path object, made here right after creation and never cloned (the wrappers are not
//!    `Clone`); this crate never calls `ibv_post_*` or `ibv_poll_cq` on them.
//! 3. **The BlueFlame register is the QP's alone.** The verbs backend creates every QP in its own
//!    thread domain, which gives it a dedicated bfreg (`mlx5_hw::verbs`, rdma-core
//!    `mlx5_alloc_td`); the software ConnectX gives every QP its own UAR page.
//! 4. **No inline scatter into freed memory.** A CQE in an inline-scatter format makes the data
//!    path copy received bytes to the receive WQE's addresses with the CPU. The verbs backend
//!    creates QPs with scatter-to-CQE disabled (`MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`) and
//!    the software ConnectX never writes those formats, so the CPU never writes memory on the
//!    device's behalf; every device access is checked against live registrations
//!    ([`crate::mr`]).

use mlx5_hw::{CqLayout, QpLayout, SrqLayout};

use crate::error::Result;

/// The data path of a QP the caller has just created and owns.
pub(crate) fn qp(layout: &QpLayout, srqn: Option<u32>) -> Result<mlx5_qp::Qp> {
    // SAFETY: points 1–4 of the module docs: the layout is of a QP just created on this
    // context's device, owned by the `QpObj` that the returned data path is dropped before, and
    // this is the only data path made for it.
    Ok(unsafe { mlx5_qp::Qp::from_layout(layout, srqn) }?)
}

/// The data path of a CQ the caller has just created and owns.
pub(crate) fn cq(layout: &CqLayout) -> Result<mlx5_qp::Cq> {
    // SAFETY: points 1 and 2 of the module docs, for the `CqObj` the returned consumer is dropped
    // before.
    Ok(unsafe { mlx5_qp::Cq::from_layout(layout) }?)
}

/// The data path of an SRQ the caller has just created and owns.
pub(crate) fn srq(layout: &SrqLayout) -> Result<mlx5_qp::Srq> {
    // SAFETY: points 1 and 2 of the module docs, for the `SrqObj` the returned data path is
    // dropped before.
    Ok(unsafe { mlx5_qp::Srq::from_layout(layout) }?)
}
