//! Opaque libibverbs types.
//!
//! mlx5dv functions take and return pointers to verbs objects. This crate never looks inside
//! them: they are zero-sized `#[repr(C)]` markers (the pattern the Rustonomicon recommends for
//! opaque FFI types), and callers cast the `rdma-sys` pointers they hold to these.

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

opaque! {
    /// `struct ibv_context` (an open device).
    ibv_context;
    /// `struct ibv_device` (an entry of `ibv_get_device_list`).
    ibv_device;
    /// `struct ibv_pd`.
    ibv_pd;
    /// `struct ibv_qp`.
    ibv_qp;
    /// `struct ibv_cq`.
    ibv_cq;
    /// `struct ibv_cq_ex`.
    ibv_cq_ex;
    /// `struct ibv_srq`.
    ibv_srq;
    /// `struct ibv_wq`.
    ibv_wq;
    /// `struct ibv_dm`.
    ibv_dm;
    /// `struct ibv_ah`.
    ibv_ah;
    /// `struct ibv_qp_init_attr_ex`.
    ibv_qp_init_attr_ex;
    /// `struct ibv_cq_init_attr_ex`.
    ibv_cq_init_attr_ex;
    /// `struct mlx5_wqe_av`, the 48-byte address vector an AH carries (`mlx5dv_ah.av`); its
    /// layout is `mlx5_wqe::AvSeg`.
    mlx5_wqe_av;
}
