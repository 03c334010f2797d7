//! cargo-fuzz target `cq_poll`: the harness `fuzz/harness/cq_poll.rs` (its documentation says what
//! it feeds and checks).
#![no_main]

#[path = "../harness/cq_poll.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
