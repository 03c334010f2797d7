//! cargo-fuzz target `roce_frames`: the harness `fuzz/harness/roce_frames.rs` (its documentation says what
//! it feeds and checks).
#![no_main]

#[path = "../harness/sim_world.rs"]
mod sim_world;

#[path = "../harness/roce_frames.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
