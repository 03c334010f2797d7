//! The checked-in inputs of a fuzz target (`fuzz/corpus/TARGET/seed-*`), replayed on the
//! stable toolchain through the harness the cargo-fuzz target runs (`fuzz/harness/TARGET.rs`,
//! which each test binary includes), so every seed and every crash a fuzzer found (added as a
//! seed) is a regression test (docs/testing.md).

use std::path::{Path, PathBuf};

/// The repository's `fuzz/corpus` directory (this crate lives one level below the root).
fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("fuzz/corpus")
}

/// The checked-in inputs of fuzz target `target` (name, bytes), sorted by name; at least three.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_root().join(target);
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
        })
        .map(|p| {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, bytes)
        })
        .collect();
    v.sort();
    assert!(v.len() >= 3, "fuzz/corpus/{target} holds too few seeds");
    v
}

/// Run every input of `target` through `run`, naming the input that fails.
pub fn replay(target: &str, run: fn(&[u8])) {
    for (name, bytes) in corpus(target) {
        let r = std::panic::catch_unwind(|| run(&bytes));
        assert!(r.is_ok(), "fuzz/corpus/{target}/{name} fails its harness");
    }
}
