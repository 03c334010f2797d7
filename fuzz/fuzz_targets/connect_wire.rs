//! cargo-fuzz target `connect_wire`: the harness `fuzz/harness/connect_wire.rs` (its documentation says what
//! it feeds and checks).
#![no_main]

#[path = "../harness/connect_wire.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
