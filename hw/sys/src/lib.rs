//! Curated FFI bindings for rdma-core's mlx5 direct-verbs (`mlx5dv`) surface.
//!
//! Placeholder: the bindings are filled in by the foundation work (issue 2, point 5).
#![no_std]
