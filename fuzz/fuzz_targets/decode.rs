//! cargo-fuzz target `decode`: the harness `fuzz/harness/decode.rs` (its documentation says what
//! it feeds and checks).
#![no_main]

#[path = "../harness/decode.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
