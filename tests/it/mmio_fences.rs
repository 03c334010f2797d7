//! The release build's post and poll functions really contain their fences: the software
//! ConnectX cannot see a missing `sfence` or `lfence` on x86_64, so this disassembles the
//! release `count_post_poll` bench program (`benches/count_post_poll.rs`, whose
//! `#[inline(never)]` `measured_*` functions hold the whole inlined post and poll paths) with
//! `objdump -d` and checks the sequence of `docs/sources.md` §5 and §12 (rdma-core
//! `post_send_db`: `mmio_wc_start` = `sfence` before the BlueFlame copy, `mmio_flush_writes`
//! = `sfence` after it in the flushed modes; `udma_from_device_barrier` = `lfence` after a
//! CQE's owner byte). It also checks that the MMIO trace (`mlx5_hw::mmio::trace`) is not
//! compiled into a normal build. Runs only on x86_64 and only where `objdump` is installed
//! (binutils); it says so when it skips.

use std::path::PathBuf;
use std::process::Command;

/// The release `count_post_poll`, built by cargo (a no-op when fresh).
fn release_bench() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-p",
            "mlx5-direct",
            "--bench",
            "count_post_poll",
        ])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building the release count_post_poll failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let path = &l[at..at + l[at..].find('"')?];
            path.contains("count_post_poll")
                .then(|| PathBuf::from(path))
        })
        .expect("cargo reported no count_post_poll executable")
}

/// The instructions (mnemonic and operands) of every function whose name ends with `name`.
fn function(disasm: &str, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in disasm.lines() {
        if line.ends_with(">:") {
            inside = line.ends_with(&format!("{name}>:"));
            continue;
        }
        if inside {
            // "  19804:\tmovaps (%rcx,%rax,8),%xmm0"
            if let Some((_, insn)) = line.split_once(":\t") {
                out.push(insn.trim().to_string());
            }
        }
    }
    assert!(!out.is_empty(), "no function {name} in the disassembly");
    out
}

/// A 16-byte store to memory: one line of a BlueFlame copy (`mmio::bf_copy_bb`).
fn is_bf_store(insn: &str) -> bool {
    let m = insn.split_whitespace().next().unwrap_or("");
    matches!(m, "movaps" | "movups" | "movdqa" | "movdqu" | "movntdq")
        && insn.rsplit(',').next().is_some_and(|dst| dst.contains('('))
}

#[test]
fn release_post_and_poll_contain_their_fences() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the fence check reads x86_64 disassembly");
        return;
    }
    if Command::new("objdump").arg("--version").output().is_err() {
        eprintln!("skipped: objdump (binutils) is not installed");
        return;
    }
    let bin = release_bench();
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-C"])
        .arg(&bin)
        .output()
        .expect("run objdump");
    assert!(out.status.success(), "objdump failed");
    let disasm = String::from_utf8_lossy(&out.stdout);

    // The BlueFlame post (`measured_post`, all three doorbell modes inlined): every
    // BlueFlame line is written after an `sfence` (WC start) of the same path, and the
    // flushed modes put one after the copy (flush).
    let post = function(&disasm, "::measured_post");
    let mut fenced = false;
    let mut copies = 0;
    let mut flushed_after_copy = false;
    for (i, insn) in post.iter().enumerate() {
        if insn == "sfence" {
            fenced = true;
            if i > 0 && is_bf_store(&post[i - 1]) {
                flushed_after_copy = true;
            }
        } else if insn.starts_with("ret") {
            fenced = false;
        } else if is_bf_store(insn) {
            copies += 1;
            assert!(
                fenced,
                "a BlueFlame store without a WC start (sfence) before it: {insn}\n{}",
                post.join("\n")
            );
        }
    }
    assert!(copies >= 4, "no BlueFlame copy found in measured_post");
    assert!(
        flushed_after_copy,
        "no flush (sfence) after a BlueFlame copy (DoorbellMode::Bf)"
    );
    // The 8-byte doorbell post: WC start and flush.
    let sge = function(&disasm, "::measured_post_sge");
    assert!(
        sge.iter().filter(|i| *i == "sfence").count() >= 2,
        "the 8-byte doorbell path lacks its WC start or flush"
    );
    // Every poll orders the CQE after its owner byte.
    for f in [
        "::measured_poll",
        "::measured_poll_one",
        "::measured_poll_wcs",
    ] {
        assert!(
            function(&disasm, f).iter().any(|i| i == "lfence"),
            "{f} has no lfence (udma_from_device_barrier)"
        );
    }
    // The compiler barriers (x86 `to_device_barrier`, `wc_line_done`) emit no instruction;
    // what shows them is a store they keep: two stores to one word around each barrier all
    // stay, where without a barrier only the last would (a dead store).
    let barriers = function(&disasm, "::measured_compiler_barriers");
    let stores = barriers
        .iter()
        .filter(|i| i.starts_with("movl") && i.ends_with("(%rdi)"))
        .count();
    assert_eq!(
        stores,
        3,
        "a compiler barrier lets the compiler drop a store before it:\n{}",
        barriers.join("\n")
    );
    // The trace is test-only: nothing of it in a normal build.
    assert!(
        !disasm.contains("mmio::trace"),
        "the MMIO trace is compiled into the release build"
    );
}

/// The aarch64 barriers, read from the compiler's assembly: this machine runs no arm64 code,
/// so `benches/rings/examples/fence_probe.rs` is compiled for `aarch64-unknown-linux-gnu` to
/// assembly only (a library example: no linker needed) and each path is checked for its
/// instructions (rdma-core `util/udma_barrier.h` and `mmio_wc_start`/`mmio_flush_writes` for
/// arm64, UCX's DGH after a BlueFlame line): `dmb oshst` before the doorbell record, `dsb st`
/// before the BlueFlame copy and around the 8-byte doorbell, `dgh` after a whole line, and
/// `dmb oshld` after a CQE's owner byte. Skipped, saying so, where the aarch64 standard library
/// is not installed (`rustup target add aarch64-unknown-linux-gnu`; `tools/test.sh` adds it).
#[test]
fn aarch64_post_and_poll_contain_their_barriers() {
    const TARGET: &str = "aarch64-unknown-linux-gnu";
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == TARGET)
        })
        .unwrap_or(false);
    if !installed {
        eprintln!("skipped: the {TARGET} target is not installed (rustup target add {TARGET})");
        return;
    }
    let out = Command::new(env!("CARGO"))
        .args(["rustc", "--release", "-p", "mlx5-ram-rings"])
        .args(["--example", "fence_probe", "--target", TARGET])
        .args(["--", "--emit", "asm"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "compiling fence_probe for {TARGET} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The newest assembly file cargo left for the example.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(TARGET)
        .join("release/examples");
    let asm = std::fs::read_dir(&dir)
        .expect("the example's output directory")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("fence_probe") && n.ends_with(".s")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| std::fs::read_to_string(e.path()).expect("read the assembly"))
        .expect("no fence_probe assembly");
    // The instructions of function `name` (its label to its `.Lfunc_end`), one per line.
    let body = |name: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut inside = false;
        for l in asm.lines() {
            if l == format!("{name}:") {
                inside = true;
            } else if inside && l.starts_with(".Lfunc_end") {
                break;
            } else if inside {
                let t = l.trim();
                if !t.is_empty() && !t.starts_with('.') && !t.starts_with("//") {
                    out.push(t.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
        }
        assert!(
            !out.is_empty(),
            "no function {name} in the aarch64 assembly"
        );
        out
    };
    let has = |f: &[String], insn: &str| f.iter().any(|i| i == insn);
    // The BlueFlame post: the record's barrier, then WC start, then the copy ended by DGH
    // (the first of each in that order; the code's blocks are not laid out path by path).
    let post = body("fence_probe_post");
    let first = |insn: &str| post.iter().position(|i| i == insn);
    match (first("dmb oshst"), first("dsb st"), first("dgh")) {
        (Some(a), Some(b), Some(c)) => assert!(
            a < b && b < c,
            "dmb oshst, dsb st and dgh out of order:\n{}",
            post.join("\n")
        ),
        got => panic!(
            "the BlueFlame post lacks a barrier (dmb oshst, dsb st, dgh at {got:?}):\n{}",
            post.join("\n")
        ),
    }
    // The 8-byte doorbell: the record's barrier, then WC start and flush around the store.
    let sge = body("fence_probe_post_sge");
    assert!(has(&sge, "dmb oshst"), "no dmb oshst:\n{}", sge.join("\n"));
    assert!(
        sge.iter().filter(|i| *i == "dsb st").count() >= 2,
        "the 8-byte doorbell lacks its WC start or flush:\n{}",
        sge.join("\n")
    );
    for f in ["fence_probe_poll", "fence_probe_poll_send"] {
        let b = body(f);
        assert!(
            has(&b, "dmb oshld"),
            "{f} has no dmb oshld:\n{}",
            b.join("\n")
        );
    }
}
