//! The verbs types the mlx5dv functions take, re-exported from [`crate::ibv`] (so a pointer
//! the verbs side returns is passed to mlx5dv as is), and the one mlx5 type this crate keeps
//! opaque.

pub use crate::ibv::{
    ibv_ah, ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device, ibv_dm, ibv_pd,
    ibv_qp, ibv_qp_init_attr_ex, ibv_srq, ibv_wq,
};

crate::ibv::types::opaque! {
    /// `struct mlx5_wqe_av`, the 48-byte address vector an AH carries (`mlx5dv_ah.av`); its
    /// layout is `mlx5_wqe::AvSeg`.
    mlx5_wqe_av;
}
