//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod constants;
mod dump;
mod flush_in_error;
mod helpers;
mod layout;
mod rerun;
mod verbs;
