//! The build script of this crate reruns when rdma-core's headers are installed after a build
//! made without them, although the package manager gives the headers modification times older
//! than that build (`build.rs`, "When the script runs again").
//!
//! This builds the crate in a scratch target directory of its own (kept between runs, so only
//! the first run compiles the dependencies) with `MLX5_CONFORMANCE_INCLUDE` pointing at an
//! include root without the headers, checks that the build script reported them missing, then
//! "installs" them as dpkg does — the directory created now, each header copied with an old
//! modification time — and builds again: the script must have run again and found them.
//! (`conformance/check-rerun-after-install.sh` does the same with the real package, by hand.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// The target directory the running test binary was built in (`.../target`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/it-HASH
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// `cargo build -p mlx5-conformance --lib` with the include root `root`; returns the cfgs the
/// build script set, from cargo's `build-script-executed` message for this crate.
fn build(root: &Path, scratch: &Path) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--offline",
            "-p",
            "mlx5-conformance",
            "--lib",
            "--message-format=json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", scratch)
        .env("MLX5_CONFORMANCE_INCLUDE", root)
        // A build without the headers must skip, not fail (tools/test.sh requires them).
        .env_remove("MLX5_CONFORMANCE_REQUIRED")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nested build failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let msg = stdout
        .lines()
        .find(|l| {
            l.contains("\"reason\":\"build-script-executed\"") && l.contains("mlx5-conformance")
        })
        .unwrap_or_else(|| panic!("no build-script-executed message for the crate:\n{stdout}"));
    // "cfgs":["oracle_missing"] or "cfgs":[]
    let cfgs = msg.split("\"cfgs\":[").nth(1).unwrap();
    let cfgs = &cfgs[..cfgs.find(']').unwrap()];
    cfgs.split(',')
        .map(|c| c.trim_matches('"').to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn headers_installed_after_a_build_with_old_mtimes_are_found_by_the_next_build() {
    let system = Path::new("/usr/include/infiniband");
    assert!(
        system.join("mlx5dv.h").is_file(),
        "rdma-core's headers are missing: apt-get install libibverbs-dev"
    );
    let scratch = target_dir().join("conformance-rerun");
    let root = scratch.join(format!("include-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();

    // 1. Built before the install: the script reports the header missing.
    assert_eq!(build(&root, &scratch), ["oracle_missing"]);

    // 2. The install: the directory appears now; every header keeps an old time, as dpkg
    // gives it the one it had in the package.
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_672_300_000); // 2022-12-29
    let dir = root.join("infiniband");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(system).unwrap() {
        let e = e.unwrap();
        if !e.file_type().unwrap().is_file() {
            continue;
        }
        let to = dir.join(e.file_name());
        std::fs::copy(e.path(), &to).unwrap();
        let f = std::fs::File::options().write(true).open(&to).unwrap();
        f.set_modified(old).unwrap();
    }
    assert!(dir.join("mlx5dv.h").is_file());

    // 3. The next build reran the script, which found the header and built the oracle.
    assert_eq!(build(&root, &scratch), Vec::<String>::new());
    std::fs::remove_dir_all(&root).unwrap();
}
