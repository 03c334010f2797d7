//! The corpus of the fuzz target `connect_wire` (the connection-setup control messages),
//! replayed on the stable toolchain: each checked-in input (`fuzz/corpus/connect_wire/seed-*`)
//! runs through the harness the cargo-fuzz target runs (`fuzz/harness/connect_wire.rs`), so
//! every seed and every crash a fuzzer found (added as a seed) is a regression test
//! (docs/testing.md).

#[path = "../../../fuzz/harness/connect_wire.rs"]
mod connect_wire;

use mlx5_testkit::corpus::replay;

#[test]
fn connect_wire_corpus_replays() {
    replay("connect_wire", connect_wire::run);
}
