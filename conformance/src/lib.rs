//! # mlx5-conformance
//!
//! Test-only crate that holds the Rust layouts of mlx5-direct against rdma-core's own
//! `<infiniband/mlx5dv.h>`. `build.rs` compiles a small C oracle (`oracle/oracle.c`) that calls
//! the header's static-inline helpers (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`,
//! `mlx5dv_set_dgram_seg`, `mlx5dv_get_cqe_*`, `mlx5dv_set_cqe_owner`) on buffers owned by the
//! Rust tests, and reports `sizeof` / `offsetof` / constant values by name, for the mlx5dv.h
//! mirrors and for every struct and enum of the hand-written libibverbs bindings
//! (`mlx5dv_sys::ibv`, table `oracle/verbs_table.h`). The tests in `tests/` compare bytes,
//! sizes, offsets and constants.
//!
//! `build.rs` also checks the signature of every exported function `mlx5dv-sys` loads at run
//! time (`mlx5dv_sys::RdmaCore::SYMBOLS`) against the header's prototype, with a C
//! translation unit from [`signature`]; the test `signatures::` reports the result.
//!
//! If the header is not installed (no libibverbs-dev), the crate still builds
//! (`cfg(oracle_missing)`): the tests are skipped, which the build warns about and one ignored
//! test names; every function of [`oracle`] would panic with [`INSTALL_HINT`]. With
//! `MLX5_CONFORMANCE_REQUIRED=1` the build fails instead.
#![deny(missing_docs)]

pub mod oracle;
pub mod signature;

/// The message every test fails with when the header is not installed.
pub const INSTALL_HINT: &str =
    "<infiniband/mlx5dv.h> was not found when this crate was built: install libibverbs-dev \
     (apt-get install libibverbs-dev) and rebuild";
