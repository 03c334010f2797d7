//! `docs/hot-path.md` stays true: every function its walk names is defined in the file it is
//! named after.
//!
//! The walk's numbered steps name a file (a backticked repository path ending in `.rs`), then
//! functions of it: `Type::function` or `module::function` (the last part is checked),
//! `function()` and `macro!`. Each such name must be defined (`fn name`, `macro_rules! name`)
//! in the last file named before it in its step. In a table row the row's one file holds
//! every name of the row. A name with no file before it is an error too, so that a step
//! cannot name a function without saying where it lives.

use std::path::PathBuf;

/// The repository's top directory.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One name of the walk to check.
#[derive(Debug)]
enum Token {
    /// A repository path of a Rust file.
    File(String),
    /// The name a function or macro is defined under, and how the page wrote it.
    Name { name: String, written: String },
}

/// The backticked words of `text` that are files or function names, in order.
fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    for (i, word) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue; // outside backticks
        }
        if word.ends_with(".rs") && word.contains('/') && !word.contains(' ') {
            out.push(Token::File(word.to_string()));
            continue;
        }
        let ident = |s: &str| {
            !s.is_empty()
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !s.starts_with(|c: char| c.is_ascii_digit())
        };
        let bare = word
            .strip_suffix("()")
            .or_else(|| word.strip_suffix('!'))
            .filter(|s| ident(s));
        let name = match bare {
            Some(b) => Some(b),
            None => {
                let parts: Vec<&str> = word.split("::").collect();
                (parts.len() >= 2 && parts.iter().all(|p| ident(p))).then(|| *parts.last().unwrap())
            }
        };
        if let Some(name) = name {
            out.push(Token::Name {
                name: name.to_string(),
                written: word.to_string(),
            });
        }
    }
    out
}

/// Whether `source` defines a function or macro `name`.
fn defines(source: &str, name: &str) -> bool {
    let defined_after = |key: &str| {
        source.match_indices(key).any(|(i, _)| {
            let rest = &source[i + key.len()..];
            rest.starts_with(name)
                && !rest[name.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    defined_after("fn ") || defined_after("macro_rules! ")
}

/// The walk's numbered steps (with their continuation lines) and its table rows, each as
/// (first line number, text, whether it is a table row).
fn units(page: &str) -> Vec<(usize, String, bool)> {
    let mut out: Vec<(usize, String, bool)> = Vec::new();
    let mut in_step = false;
    for (n, line) in page.lines().enumerate() {
        let t = line.trim_start();
        let numbered = t
            .split_once(". ")
            .is_some_and(|(d, _)| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            out.push((n + 1, line.to_string(), false));
            in_step = true;
        } else if t.starts_with('|') && !t.starts_with("| ---") {
            out.push((n + 1, line.to_string(), true));
            in_step = false;
        } else if in_step && line.starts_with("   ") && !t.is_empty() {
            let last = out.last_mut().unwrap();
            last.1.push(' ');
            last.1.push_str(t);
        } else {
            in_step = false;
        }
    }
    out
}

#[test]
fn every_function_the_hot_path_walk_names_is_in_the_file_it_is_named_after() {
    let root = root();
    let page = std::fs::read_to_string(root.join("docs/hot-path.md")).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (line, text, row) in units(&page) {
        let toks = tokens(&text);
        let row_file = toks.iter().find_map(|t| match t {
            Token::File(f) => Some(f.clone()),
            Token::Name { .. } => None,
        });
        let mut file: Option<String> = None;
        for t in toks {
            match t {
                Token::File(f) => file = Some(f),
                Token::Name { name, written } => {
                    let at = if row { row_file.clone() } else { file.clone() };
                    let Some(at) = at else {
                        wrong.push(format!("line {line}: `{written}` has no file before it"));
                        continue;
                    };
                    let source = std::fs::read_to_string(root.join(&at))
                        .unwrap_or_else(|e| panic!("line {line}: `{at}`: {e}"));
                    checked += 1;
                    if !defines(&source, &name) {
                        wrong.push(format!("line {line}: `{written}` is not defined in `{at}`"));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/hot-path.md names:\n{}",
        wrong.join("\n")
    );
    // The walk names some 50 functions; a page that lost its steps checks nothing.
    assert!(
        checked >= 40,
        "only {checked} names checked: the walk lost its steps?"
    );
}

#[test]
fn the_check_sees_a_wrong_file_and_a_missing_file() {
    let toks = tokens("`qp/src/cq.rs` — `Cq::poll`, `send_one()`, `lean_post!`, `wqe_index`");
    let names: Vec<String> = toks
        .iter()
        .filter_map(|t| match t {
            Token::Name { name, .. } => Some(name.clone()),
            Token::File(_) => None,
        })
        .collect();
    assert_eq!(names, ["poll", "send_one", "lean_post"]);
    assert!(defines("pub fn poll<R>(", "poll"));
    assert!(!defines("pub fn poll_fast<R>(", "poll"));
    assert!(defines("macro_rules! lean_post {", "lean_post"));
}
