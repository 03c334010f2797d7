//! cargo-fuzz target `sim_wqe`: the harness `fuzz/harness/sim_wqe.rs` (its documentation says what
//! it feeds and checks).
#![no_main]

#[path = "../harness/sim_world.rs"]
mod sim_world;

#[path = "../harness/sim_wqe.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
