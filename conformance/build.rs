//! Compiles the C oracle (`oracle/oracle.c`, with the verbs.h table `oracle/verbs_table.h`)
//! against the installed `<infiniband/mlx5dv.h>` (which includes `<infiniband/verbs.h>`).
//!
//! When the header is missing the build still succeeds, but sets `cfg(oracle_missing)`: every
//! conformance test then fails at run time with the install command, so a machine without
//! the header can never report a silent pass.

fn main() {
    println!("cargo:rerun-if-changed=oracle/oracle.c");
    println!("cargo:rerun-if-changed=oracle/probe.c");
    println!("cargo:rerun-if-changed=oracle/verbs_table.h");
    // The installed headers too: built before `libibverbs-dev` was installed, the crate would
    // otherwise keep its `oracle_missing` build after the install. (A path that does not exist
    // makes cargo rerun this script on every build: a probe of one small file.)
    println!("cargo:rerun-if-changed=/usr/include/infiniband/mlx5dv.h");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/verbs.h");
    println!("cargo:rustc-check-cfg=cfg(oracle_missing)");

    let header_found = cc::Build::new()
        .file("oracle/probe.c")
        .cargo_metadata(false)
        .try_expand()
        .is_ok();
    if !header_found {
        println!(
            "cargo:warning=<infiniband/mlx5dv.h> not found: the conformance tests will fail \
             until you install libibverbs-dev (apt-get install libibverbs-dev)"
        );
        println!("cargo:rustc-cfg=oracle_missing");
        return;
    }

    let mut build = cc::Build::new();
    build
        .file("oracle/oracle.c")
        .warnings(true)
        .extra_warnings(true);
    // The SSSE3 build also exposes mlx5dv_x86_set_ctrl_seg (the header guards it with
    // __SSE3__ and uses an SSSE3 shuffle).
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        build.flag_if_supported("-mssse3");
    }
    build.compile("mlx5_oracle");
}
