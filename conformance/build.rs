//! Compiles the C oracle (`oracle/oracle.c`, with the verbs.h table `oracle/verbs_table.h`)
//! against the installed `<infiniband/mlx5dv.h>` (which includes `<infiniband/verbs.h>`).
//!
//! When the header is missing the build still succeeds, but sets `cfg(oracle_missing)`: every
//! conformance test then fails at run time with the install command, so a machine without
//! the header can never report a silent pass.
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

use std::path::{Path, PathBuf};

/// The directory the distribution installs rdma-core's headers in.
const SYSTEM_DIR: &str = "/usr/include/infiniband";
/// The include root that overrides the compiler's search path.
const ENV_INCLUDE: &str = "MLX5_CONFORMANCE_INCLUDE";

fn main() {
    println!("cargo:rerun-if-changed=oracle/oracle.c");
    println!("cargo:rerun-if-changed=oracle/probe.c");
    println!("cargo:rerun-if-changed=oracle/verbs_table.h");
    println!("cargo:rerun-if-env-changed={ENV_INCLUDE}");
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
        let dir = root.map_or_else(|| PathBuf::from(SYSTEM_DIR), |r| r.join("infiniband"));
        watch(&dir);
        println!(
            "cargo:warning=<infiniband/mlx5dv.h> not found{}: the conformance tests will fail \
             until you install libibverbs-dev (apt-get install libibverbs-dev); the next build \
             after the install picks it up",
            if std::env::var_os(ENV_INCLUDE).is_some() {
                format!(" in {ENV_INCLUDE}")
            } else {
                String::new()
            }
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
