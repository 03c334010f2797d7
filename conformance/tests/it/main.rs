//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod constants;
mod dc;
mod dump;
mod helpers;
mod layout;
mod verbs;
