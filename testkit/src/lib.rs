//! Test support shared by the integration-test binaries of the mlx5-direct crates (each crate
//! has one, `tests/it/main.rs`), so no helper is kept in two copies:
//!
//! - [`buf`]: a buffer registered with a software ConnectX (the data path's and the connection
//!   crate's end-to-end tests);
//! - [`process`]: an example or tool run as a process whose output is watched, and a server
//!   and its client as two processes (the facade's examples, the tools' `lat` and `bw`);
//! - [`corpus`]: the checked-in inputs of a fuzz target replayed through its harness on the
//!   stable toolchain (docs/testing.md).
//!
//! Not published (`publish = false`): the crates that use it name it as a path-only
//! dev-dependency. Test code: a helper that cannot do its job panics with what went wrong.
#![deny(missing_docs)]

pub mod buf;
pub mod corpus;
pub mod process;
