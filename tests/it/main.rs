//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod docs_hot_path;
mod docs_paths;
mod examples_run;
mod facade_error;
mod fuzz_replay;
mod mmio_fences;
mod sim_transition_table;
mod tools_count_instructions;
