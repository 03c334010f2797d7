//! cargo-fuzz target `tools_hello`: the harness `fuzz/harness/tools_hello.rs` (its documentation says what
//! it feeds and checks).
#![no_main]

#[path = "../harness/tools_hello.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
