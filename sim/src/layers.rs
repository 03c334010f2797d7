//! The module layering stated in the crate doc, checked on the sources: every `crate::x` path a
//! module uses outside its tests names a module of a lower layer.

use std::collections::BTreeMap;
use std::path::Path;

/// Bottom to top, one module a layer: a module may import only the modules before it.
const LAYERS: &[&str] = &[
    "bugs",
    "counters",
    "mem",
    "notify",
    "pcap",
    "sizing",
    "uidx",
    "wire",
    // The fault rules as data and pure decisions: the wire's frames go through them, and the
    // responder asks their RNR rules for a receive WQE (`ctx::Ctx::recv_gate`).
    "fault_rules",
    "tap_port",
    "udp_port",
    "mr",
    "srq",
    "cq",
    "cq_uar",
    "mcast",
    "wqe",
    // The QP with its doorbell state (`qp::db`, data only), then the doorbell scanners.
    "qp",
    "doorbell",
    "ctx",
    "transport",
    "engine",
    // The fabric's state: the world that holds the devices and the fault rules, the lock
    // every handle shares, and the fault controls that lock it.
    "world",
    "shared",
    "faults",
    "modify",
    "xrc",
    "dc",
    "device",
    "kernel",
    "fabric",
];

fn layer_of(m: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == m)
}

/// The code of a source file without its `#[cfg(test)]` module and comment lines.
fn code(src: &str) -> String {
    let src = match src.find("#[cfg(test)]") {
        Some(i) => &src[..i],
        None => src,
    };
    src.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules named by `crate::x` paths in `code`.
fn uses(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.push(name);
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

#[test]
fn modules_import_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    assert!(files.len() > 20, "found only {} sources", files.len());
    let mut bad = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a file name");
        if top == "lib" || top == "layers" {
            continue;
        }
        let Some(mine) = layer_of(&top) else {
            panic!(
                "module {top} ({}) is in no layer: add it to LAYERS",
                rel.display()
            );
        };
        let text = std::fs::read_to_string(f).expect("readable source");
        for used in uses(&code(&text)) {
            if used == top {
                continue;
            }
            // Items of the crate root (re-exports in lib.rs) are not modules.
            let Some(theirs) = layer_of(&used) else {
                continue;
            };
            if theirs > mine {
                bad.insert(format!("{} -> {used}", rel.display()), ());
            }
        }
    }
    assert!(bad.is_empty(), "upward imports: {:?}", bad.keys());
}

#[test]
fn every_module_is_layered() {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("lib.rs");
    for line in src.lines() {
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if let Some(m) = line.strip_prefix("mod ") {
            let m = m.trim_end_matches(';');
            assert!(
                m == "layers" || layer_of(m).is_some(),
                "module {m} is in no layer"
            );
        }
    }
}
