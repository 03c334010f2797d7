//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod connect_doc;
mod connect_sim;
mod connect_support;
mod connect_two_process;
mod control_fd;
mod fuzz_replay;
mod owned;
mod recover_tcp;
mod recovery_destroyed_peer;
mod recovery_shared;
mod recovery_sim;
mod two_process_support;
