//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod examples_support;
mod fuzz_replay;
mod tools_lat_bw;
