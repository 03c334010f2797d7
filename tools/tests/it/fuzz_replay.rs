//! The corpora of the fuzz targets `decode` (the WQE/CQE decoder of `wqe-dump`) and
//! `tools_hello` (the hello of `lat` and `bw`), replayed on the stable toolchain: each
//! checked-in input (`fuzz/corpus/TARGET/seed-*`) runs through the harness the cargo-fuzz
//! target runs (`fuzz/harness/TARGET.rs`), so every seed and every crash a fuzzer found
//! (added as a seed) is a regression test (docs/testing.md).

#[path = "../../../fuzz/harness/decode.rs"]
mod decode;
#[path = "../../../fuzz/harness/tools_hello.rs"]
mod tools_hello;

use mlx5_testkit::corpus::replay;

#[test]
fn decode_corpus_replays() {
    replay("decode", decode::run);
}

#[test]
fn tools_hello_corpus_replays() {
    replay("tools_hello", tools_hello::run);
}
