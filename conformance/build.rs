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

#[path = "src/signature.rs"]
mod signature;

use std::path::{Path, PathBuf};
use std::process::Command;

const REQUIRED_ENV: &str = "MLX5_CONFORMANCE_REQUIRED";

fn main() {
    println!("cargo:rerun-if-changed=oracle/oracle.c");
    println!("cargo:rerun-if-changed=oracle/probe.c");
    println!("cargo:rerun-if-changed=oracle/verbs_table.h");
    println!("cargo:rerun-if-changed=src/signature.rs");
    println!("cargo:rerun-if-env-changed={REQUIRED_ENV}");
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
        let missing = "<infiniband/mlx5dv.h> not found (libibverbs-dev is not installed, or \
                       there is no C compiler)";
        let install = "apt-get install libibverbs-dev gcc";
        if std::env::var_os(REQUIRED_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
            panic!("{REQUIRED_ENV} is set and {missing}: {install}");
        }
        println!(
            "cargo:warning={missing}: the conformance tests are skipped ({install} to run them)"
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

    check_signatures();
}

/// Compiles the signature check of every declaration, and a canary of three wrong ones that
/// the check must reject, and records both outcomes for the tests.
fn check_signatures() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let decls: Vec<signature::Decl<'_>> = mlx5dv_sys::RdmaCore::SYMBOLS
        .iter()
        .map(|s| (s.name, s.args, s.ret))
        .collect();
    let (ok, output) = compile_check(&out, "signatures", &decls);
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
    let (canary_ok, canary_output) = compile_check(&out, "signatures_canary", &canary);
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
fn compile_check(out: &Path, name: &str, decls: &[signature::Decl<'_>]) -> (bool, String) {
    let src = match signature::check_source(decls) {
        Ok(s) => s,
        Err(e) => return (false, e),
    };
    let file = out.join(format!("{name}.c"));
    std::fs::write(&file, src).expect("write the signature check");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let mut cmd: Command = compiler.to_command();
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
