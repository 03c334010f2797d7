//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod bad_input;
mod examples_support;
mod perftest_tests;
mod tools_lat_bw;
