//! The corpus of the fuzz target `cq_poll` (device-written CQE rings polled on a live QP),
//! replayed on the stable toolchain: each checked-in input (`fuzz/corpus/cq_poll/seed-*`)
//! runs through the harness the cargo-fuzz target runs (`fuzz/harness/cq_poll.rs`), so every
//! seed and every crash a fuzzer found (added as a seed) is a regression test
//! (docs/testing.md).

#[path = "../../../fuzz/harness/cq_poll.rs"]
mod cq_poll;

use mlx5_testkit::corpus::replay;

#[test]
fn cq_poll_corpus_replays() {
    replay("cq_poll", cq_poll::run);
}
