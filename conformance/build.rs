//! Compiles the C oracle (`oracle/oracle.c`, with the verbs.h table `oracle/verbs_table.h`)
//! against the installed `<infiniband/mlx5dv.h>` (which includes `<infiniband/verbs.h>`), and
//! checks the signature of every exported function `mlx5dv-sys` loads at run time against the
//! header (`src/signature.rs`): the result goes to `$OUT_DIR/signatures.rs`, which the test
//! `signatures::` reads.
//!
//! When the header is missing (no libibverbs-dev) the build still succeeds and sets
//! `cfg(oracle_missing)`: the conformance tests are skipped, with a build warning and one
//! ignored test that says so. With `MLX5_CONFORMANCE_REQUIRED=1` in the environment (the
//! project's `tools/test.sh` sets it) a missing header fails the build instead, so a run that
//! meant to check conformance cannot pass without checking it.
//!
//! `MLX5_CONFORMANCE_INCLUDE=DIR` takes the headers from `DIR/infiniband` instead of the
//! compiler's search path (rdma-core built from source; the test of this script,
//! `tests/it/rerun.rs`, points it at a directory it fills).
//!
//! **When the script runs again.** A build made before `libibverbs-dev` was installed must not
//! keep its header-missing build after the install. A `rerun-if-changed` on the header file
//! does not do it: cargo reruns a script when a watched path is missing or newer than the
//! script's last run, and the package manager installs the header with the modification time
//! it had when the package was built (dpkg keeps it; on Debian 12 `mlx5dv.h` is dated
//! 2022-12-29), older than any build — so the build after the install finds the file present
//! and "unchanged", and does not rerun. What does change is the directory: adding, replacing
//! or removing a file in it sets the directory's modification time to that moment (dpkg
//! unpacks each file under a temporary name and renames it into place; it does not restore a
//! directory's time), and cargo's watch of a directory takes the newest time of the directory
//! and everything in it. So the script watches the header *directories*: those the compiler
//! took the headers from, or, while they are missing, the directory they will be installed in
//! (a path that does not exist makes cargo rerun the script on every build, so the first build
//! after the install finds them whether or not the directory existed before).

#[path = "src/signature.rs"]
mod signature;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory the distribution installs rdma-core's headers in.
const SYSTEM_DIR: &str = "/usr/include/infiniband";
/// The include root that overrides the compiler's search path.
const ENV_INCLUDE: &str = "MLX5_CONFORMANCE_INCLUDE";
/// Set (not `0`): a missing header fails the build instead of skipping the checks.
const REQUIRED_ENV: &str = "MLX5_CONFORMANCE_REQUIRED";

fn main() {
    println!("cargo:rerun-if-changed=oracle/oracle.c");
    println!("cargo:rerun-if-changed=oracle/probe.c");
    println!("cargo:rerun-if-changed=oracle/verbs_table.h");
    println!("cargo:rerun-if-changed=src/signature.rs");
    println!("cargo:rerun-if-env-changed={ENV_INCLUDE}");
    println!("cargo:rerun-if-env-changed={REQUIRED_ENV}");
    println!("cargo:rustc-check-cfg=cfg(oracle_missing)");

    let root = std::env::var_os(ENV_INCLUDE).map(PathBuf::from);
    let found = match &root {
        // Only the given root: its header, or none (not the system's).
        Some(r) => r
            .join("infiniband/mlx5dv.h")
            .is_file()
            .then(|| probe(Some(r)))
            .flatten(),
        None => probe(None),
    };
    let Some(header_dirs) = found else {
        let dir = root
            .as_ref()
            .map_or_else(|| PathBuf::from(SYSTEM_DIR), |r| r.join("infiniband"));
        watch(&dir);
        let missing = format!(
            "<infiniband/mlx5dv.h> not found{} (libibverbs-dev is not installed, or there is \
             no C compiler)",
            if root.is_some() {
                format!(" in {ENV_INCLUDE}")
            } else {
                String::new()
            }
        );
        let install = "apt-get install libibverbs-dev gcc";
        if std::env::var_os(REQUIRED_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
            panic!("{REQUIRED_ENV} is set and {missing}: {install}");
        }
        println!(
            "cargo:warning={missing}: the conformance tests are skipped ({install} to run them; \
             the next build after the install picks it up)"
        );
        println!("cargo:rustc-cfg=oracle_missing");
        return;
    };
    for d in &header_dirs {
        watch(d);
    }

    let mut build = cc::Build::new();
    build
        .file("oracle/oracle.c")
        .warnings(true)
        .extra_warnings(true);
    if let Some(r) = &root {
        build.include(r);
    }
    // The SSSE3 build also exposes mlx5dv_x86_set_ctrl_seg (the header guards it with
    // __SSE3__ and uses an SSSE3 shuffle).
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        build.flag_if_supported("-mssse3");
    }
    build.compile("mlx5_oracle");

    check_signatures(root.as_deref());
}

/// Compiles the signature check of every declaration, and a canary of three wrong ones that
/// the check must reject, and records both outcomes for the tests.
fn check_signatures(root: Option<&Path>) {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let decls: Vec<signature::Decl<'_>> = mlx5dv_sys::RdmaCore::SYMBOLS
        .iter()
        .map(|s| (s.name, s.args, s.ret))
        .collect();
    let (ok, output) = compile_check(&out, root, "signatures", &decls);
    // Wrong on purpose: a pointer to the wrong struct, an integer of the wrong width, one of
    // the wrong signedness.
    let canary: [signature::Decl<'_>; 3] = [
        ("ibv_alloc_pd", &["*mut ibv_pd"], "*mut ibv_pd"),
        ("mlx5dv_init_obj", &["*mut mlx5dv_obj", "u32"], "c_int"),
        (
            "ibv_reg_mr",
            &["*mut ibv_pd", "*mut c_void", "usize", "c_uint"],
            "*mut ibv_mr",
        ),
    ];
    let (canary_ok, canary_output) = compile_check(&out, root, "signatures_canary", &canary);
    let rs = format!(
        "/// The check of every declaration compiled without error.\n\
         pub static CHECK_OK: bool = {ok};\n\
         /// The compiler's output for it (empty when it passed).\n\
         pub static CHECK_OUTPUT: &str = {output:?};\n\
         /// How many declarations it checked.\n\
         pub static CHECKED: usize = {};\n\
         /// The canary of three wrong declarations compiled (it must not).\n\
         pub static CANARY_OK: bool = {canary_ok};\n\
         /// The compiler's output for the canary.\n\
         pub static CANARY_OUTPUT: &str = {canary_output:?};\n",
        decls.len()
    );
    std::fs::write(out.join("signatures.rs"), rs).expect("write signatures.rs");
}

/// Writes the check of `decls` to `OUT_DIR/name.c` and compiles it (syntax only, warnings are
/// errors): whether it compiled, and the compiler's output.
fn compile_check(
    out: &Path,
    root: Option<&Path>,
    name: &str,
    decls: &[signature::Decl<'_>],
) -> (bool, String) {
    let src = match signature::check_source(decls) {
        Ok(s) => s,
        Err(e) => return (false, e),
    };
    let file = out.join(format!("{name}.c"));
    std::fs::write(&file, src).expect("write the signature check");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let mut cmd: Command = compiler.to_command();
    if let Some(r) = root {
        cmd.arg("-I").arg(r);
    }
    cmd.args(["-std=gnu11", "-fsyntax-only", "-Werror"])
        .arg(&file);
    match cmd.output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("could not run the C compiler: {e}")),
    }
}

/// Preprocess `oracle/probe.c` (it includes `<infiniband/mlx5dv.h>`), with `root` first on
/// the include path when given. `None` when the header is not found; else the directories
/// the compiler took rdma-core's headers from (`.../infiniband`, `.../rdma`), read from the
/// preprocessor's line markers (`# 1 "/usr/include/infiniband/mlx5dv.h"`).
fn probe(root: Option<&PathBuf>) -> Option<Vec<PathBuf>> {
    let mut b = cc::Build::new();
    b.file("oracle/probe.c").cargo_metadata(false);
    if let Some(r) = root {
        b.include(r);
    }
    let out = b.try_expand().ok()?;
    let text = String::from_utf8_lossy(&out);
    let mut dirs: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter_map(|l| l.split('"').nth(1))
        .map(Path::new)
        .filter_map(Path::parent)
        .filter(|d| d.ends_with("infiniband") || d.ends_with("rdma"))
        .map(Path::to_path_buf)
        .collect();
    dirs.sort();
    dirs.dedup();
    if dirs.is_empty() {
        // Found, but the markers named no such directory (an unusual layout): the system one.
        dirs.push(PathBuf::from(SYSTEM_DIR));
    }
    Some(dirs)
}

/// Rerun this script when `dir`, or anything in it, changes (see the module docs).
fn watch(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
}
