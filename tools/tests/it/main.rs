//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod bad_input;
mod control_net;
mod dc;
mod fuzz_replay;
mod lat_timestamps;
mod mixed_pairs;
mod perftest_tests;
mod pingpong;
mod runs_that_failed;
mod tools_lat_bw;
mod use_srq;
mod verbs_srq;
mod xrc;

/// Held by the tests that load both cores for a while, and by those that a loaded machine
/// could make fail (frames over UDP between processes): they do not run at the same time.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}
