//! The corpora of the fuzz targets `decode` (the WQE/CQE decoder of `wqe-dump`) and
//! `tools_hello` (the hello of `lat` and `bw`), replayed on the stable toolchain: each
//! checked-in input (`fuzz/corpus/TARGET/seed-*`) runs through the harness the cargo-fuzz
//! target runs (`fuzz/harness/TARGET.rs`), so every seed and every crash a fuzzer found
//! (added as a seed) is a regression test (docs/testing.md).

#[path = "../../../fuzz/harness/decode.rs"]
mod decode;
#[path = "../../../fuzz/harness/tools_hello.rs"]
mod tools_hello;

const REPO_ROOT: &str = "..";

/// The checked-in inputs of fuzz target `target`, sorted by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(REPO_ROOT)
        .join("fuzz/corpus")
        .join(target);
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
        })
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    assert!(v.len() >= 3, "fuzz/corpus/{target} holds too few seeds");
    v
}

/// Run every input of `target` through `run`, naming the input that fails.
fn replay(target: &str, run: fn(&[u8])) {
    for (name, bytes) in corpus(target) {
        let r = std::panic::catch_unwind(|| run(&bytes));
        assert!(r.is_ok(), "fuzz/corpus/{target}/{name} fails its harness");
    }
}

#[test]
fn decode_corpus_replays() {
    replay("decode", decode::run);
}

#[test]
fn tools_hello_corpus_replays() {
    replay("tools_hello", tools_hello::run);
}
