//! The exported functions `mlx5dv-sys` resolves at run time (`RdmaCore::SYMBOLS`) against the
//! installed headers' prototypes: `build.rs` compiled a C check of every declaration
//! (`mlx5_conformance::signature`) and a canary of wrong ones; this reads both outcomes.

use mlx5_conformance::signature::{c_types, check_source, fn_pointer_types};
use mlx5dv_sys::RdmaCore;

mod built {
    include!(concat!(env!("OUT_DIR"), "/signatures.rs"));
}

#[test]
fn every_declared_signature_matches_the_header() {
    assert!(
        built::CHECK_OK,
        "a declaration in mlx5dv-sys (hw/sys/src/exported.rs) does not match the installed \
         header:\n{}",
        built::CHECK_OUTPUT
    );
    assert_eq!(built::CHECKED, RdmaCore::SYMBOLS.len());
    assert!(built::CHECKED >= 40, "{}", built::CHECKED);
}

#[test]
fn the_check_rejects_wrong_declarations() {
    // A pointer to the wrong struct, an integer of the wrong width, one of the wrong
    // signedness: each its own failed assertion.
    assert!(
        !built::CANARY_OK,
        "the canary compiled:\n{}",
        built::CANARY_OUTPUT
    );
    for name in ["ibv_alloc_pd", "mlx5dv_init_obj", "ibv_reg_mr"] {
        let needle = format!("{name}: the Rust declaration");
        assert!(
            built::CANARY_OUTPUT.contains(&needle),
            "{needle:?} not in:\n{}",
            built::CANARY_OUTPUT
        );
    }
}

#[test]
fn rust_types_translate_to_c() {
    let one = |r: &str| c_types(r).unwrap();
    assert_eq!(one("*mut *mut ibv_device"), ["struct ibv_device * *"]);
    assert_eq!(one("*const c_char"), ["char const *"]);
    assert_eq!(one("*const ibv_gid"), ["union ibv_gid const *"]);
    assert_eq!(one("ibv_wc_status::Type"), ["enum ibv_wc_status"]);
    assert_eq!(one("u64"), ["unsigned long", "unsigned long long"]);
    assert_eq!(one("()"), ["void"]);
    assert!(c_types("String").is_err());
    assert_eq!(
        fn_pointer_types(&["*mut ibv_device"], "u64").unwrap(),
        [
            "unsigned long (*)(struct ibv_device *)",
            "unsigned long long (*)(struct ibv_device *)"
        ]
    );
    assert_eq!(fn_pointer_types(&[], "c_int").unwrap(), ["int (*)(void)"]);
    let src = check_source(&[("ibv_fork_init", &[], "c_int")]).unwrap();
    assert!(
        src.contains("_Generic(&ibv_fork_init, int (*)(void): 1, default: 0)"),
        "{src}"
    );
}
