//! Every repository path the documentation names exists: `docs/*.md`, the top-level
//! `README.md` and each crate's `README.md`.
//!
//! A path is a word of the form `a/b...` (in backticks, a link, a code block or prose) whose
//! first part is an entry of the repository's top directory (`qp/src/cq.rs`, `tests/it/`,
//! `docs/samples/...`) — or, in a crate's README, of that crate's directory — and that names
//! no placeholder or pattern (`<dev>`, `*`, `{a,b}`). It must exist relative to the file's
//! directory, its crate's, or the repository's top. Paths of other projects (rdma-core's
//! `providers/mlx5/qp.c`, the kernel's `drivers/...`, `/sys/...`) start with no such entry and
//! are not checked; a markdown link's `#anchor` and a `:line` suffix are dropped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's top directory.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names of `dir`'s entries, but build output and hidden ones.
fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && !n.starts_with('.'))
        .collect()
}

/// The documents checked, each with the crate directory its relative paths may start from.
fn documents() -> Vec<(PathBuf, PathBuf)> {
    let root = root();
    let mut docs = vec![(root.join("README.md"), root.clone())];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push((p, root.clone()));
        }
    }
    // Each crate's README (a directory with a Cargo.toml, one level down or in hw/sys).
    for dir in entries(&root)
        .into_iter()
        .map(|n| root.join(n))
        .chain([root.join("hw/sys"), root.join("benches/rings")])
    {
        if dir.join("Cargo.toml").is_file() && dir.join("README.md").is_file() && dir != root {
            docs.push((dir.join("README.md"), dir));
        }
    }
    docs
}

/// The candidate paths of `text`: runs of path characters with at least one `/`.
fn candidates(text: &str) -> Vec<String> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || "_-./:#*<>{},".contains(c);
    text.split(|c: char| !is_path(c))
        .filter(|w| w.contains('/'))
        .map(|w| w.trim_end_matches(['.', ',', ':']).to_string())
        .collect()
}

/// Paths of other projects that begin with a name this repository has at its top (cited as
/// "UCX `src/uct/...`"): not checked.
const OTHER_PROJECTS: &[&str] = &[
    // UCX (openucx/ucx).
    "src/uct/",
    "src/ucs/",
    // perftest (linux-rdma/perftest).
    "src/perftest_",
];

/// `word` as a path to check (anchor, line number and trailing punctuation dropped), or `None`
/// when it is a pattern, a placeholder, a URL, another project's path or not a path at all.
fn as_path(word: &str) -> Option<&str> {
    if OTHER_PROJECTS.iter().any(|p| word.starts_with(p)) {
        return None;
    }
    if word.contains("://") || word.contains(['*', '<', '>', '{', '}', ',']) || word.contains("..")
    {
        return None;
    }
    let word = word.split('#').next()?;
    // `file.rs:123`
    let word = match word.split_once(':') {
        Some((p, line)) if line.chars().all(|c| c.is_ascii_digit()) => p,
        Some(_) => return None,
        None => word,
    };
    (!word.is_empty() && !word.starts_with('/')).then_some(word)
}

#[test]
fn every_repository_path_in_the_docs_exists() {
    let root = root();
    let top = entries(&root);
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, crate_dir) in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let here = doc.parent().unwrap().to_path_buf();
        let local = entries(&crate_dir);
        for word in candidates(&text) {
            let Some(path) = as_path(&word) else { continue };
            let first = path.split('/').next().unwrap_or("");
            let first = first.trim_start_matches("./");
            if !top.contains(first) && !local.contains(first) && !entries(&here).contains(first) {
                continue;
            }
            checked += 1;
            let found = [&here, &crate_dir, &root]
                .iter()
                .any(|base| base.join(path).exists());
            if !found {
                let name = doc
                    .strip_prefix(&root)
                    .unwrap_or(&doc)
                    .display()
                    .to_string();
                missing.push(format!("{name}: {path}"));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found: is the extraction right?"
    );
    assert!(
        missing.is_empty(),
        "{} path(s) named in the docs do not exist:\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

/// The extraction itself: what counts as a path, what does not.
#[test]
fn paths_are_told_from_patterns_urls_and_other_projects() {
    let words = candidates(
        "see `qp/src/cq.rs:811`, [s](sources.md#21-x) and providers/mlx5/qp.c; \
         `/sys/class/infiniband/<dev>/ports`, https://docs.rs/x/y, `fuzz/corpus/*/`, UCX \
         `src/uct/ib/mlx5/ib_mlx5.h`, a/b.",
    );
    let paths: Vec<&str> = words.iter().filter_map(|w| as_path(w)).collect();
    assert_eq!(paths, ["qp/src/cq.rs", "providers/mlx5/qp.c", "a/b"]);
}
