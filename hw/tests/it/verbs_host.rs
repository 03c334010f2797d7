//! Host-side tests of the verbs backend that need no RDMA device: they run in every build
//! (the backend is always compiled in; rdma-core is loaded at run time), on machines whose
//! kernel has no RDMA support, and on machines without rdma-core, where opening a device must
//! say what to install.
//!
//! The loader reads its environment once per process, so the tests of `MLX5_DIRECT_LIBIBVERBS`
//! and `MLX5_DIRECT_LIBMLX5` run an `#[ignore]`d test of this binary in a child process with
//! the variable set (`child`).

use std::path::{Path, PathBuf};
use std::process::Command;

use mlx5_hw::verbs::{list_devices, VerbsDevice};
use mlx5_hw::Error;
use mlx5dv_sys::load::{Library, LIBIBVERBS, LIBIBVERBS_ENV, LIBMLX5, LIBMLX5_ENV};
use mlx5dv_sys::{LoadError, RdmaCore};

/// Whether this host has rdma-core's libraries (the tests below check either outcome).
fn host_has_rdma_core() -> bool {
    RdmaCore::load(LIBIBVERBS, LIBMLX5).is_ok()
}

#[test]
fn listing_devices_works_without_rdma_support() {
    // On a machine without RDMA in the kernel libibverbs fails with ENOSYS; that is an empty
    // list, not an error and not a crash. Without rdma-core it is the error naming it.
    match list_devices() {
        Ok(devs) => {
            assert!(host_has_rdma_core());
            for d in &devs {
                assert!(!d.name.is_empty());
            }
        }
        Err(e @ Error::RdmaCore { device: None, .. }) => {
            assert!(!host_has_rdma_core());
            assert!(e.to_string().contains("apt-get install"), "{e}");
        }
        Err(e) => panic!("listing devices failed: {e}"),
    }
}

#[test]
fn opening_a_missing_device_is_a_clear_no_device_error() {
    let name = "mlx5_no_such_device_7";
    match VerbsDevice::open(name) {
        Ok(_) => panic!("{name} opened"),
        Err(Error::NoDevice { name: n, why }) => {
            assert_eq!(n, name);
            let found = list_devices().unwrap();
            if found.is_empty() {
                assert!(why.contains("no RDMA device"), "{why}");
                assert!(why.contains("/dev/infiniband"), "hint missing: {why}");
            } else {
                for d in &found {
                    assert!(why.contains(&d.name), "{why} does not list {}", d.name);
                }
            }
        }
        Err(e @ Error::RdmaCore { .. }) if !host_has_rdma_core() => {
            assert!(
                e.to_string().starts_with(&format!("device {name}: ")),
                "{e}"
            );
        }
        Err(e) => panic!("expected NoDevice, got {e}"),
    }
}

#[test]
fn opening_mlx5_0_fails_clearly_unless_it_exists() {
    if !host_has_rdma_core() {
        let e = VerbsDevice::open("mlx5_0").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("device mlx5_0: cannot load rdma-core's libibverbs.so.1"),
            "{msg}"
        );
        assert_eq!(e.errno(), libc::ELIBACC);
        return;
    }
    let present = list_devices()
        .unwrap()
        .into_iter()
        .find(|d| d.name == "mlx5_0");
    match (VerbsDevice::open("mlx5_0"), present) {
        (Ok(dev), Some(info)) => assert_eq!(dev.is_mlx5(), info.mlx5),
        (Err(e @ Error::NoDevice { .. }), None) => {
            let msg = e.to_string();
            assert!(msg.starts_with("device mlx5_0: "), "{msg}");
            assert_eq!(e.errno(), libc::ENODEV);
        }
        (Ok(_), None) => panic!("mlx5_0 opened but is not listed"),
        (Err(e), _) => panic!("unexpected error opening mlx5_0: {e}"),
    }
}

/// Set in the environment of a child test run by [`run_child`].
const CHILD_ENV: &str = "MLX5_HW_TEST_CHILD";
/// What a child test prints once it has checked everything.
const CHILD_DONE: &str = "child checks done";

/// Whether this process is a child of [`run_child`]; a child test run any other way (a whole
/// `--include-ignored` run) has nothing to check and says so.
fn is_child(test: &str) -> bool {
    let child = std::env::var_os(CHILD_ENV).is_some();
    if !child {
        eprintln!("{test}: runs only as the child of its parent test; nothing to check here");
    }
    child
}

/// Runs the `#[ignore]`d test `verbs_host::{test}` of this binary in a child process with
/// `env` set, and fails with its output unless it passed and did its checks.
fn run_child(test: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            format!("verbs_host::{test}").as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed") && text.contains(CHILD_DONE),
        "child {test}: {text}"
    );
}

/// The child of [`a_missing_library_named_by_the_environment_is_reported`].
#[test]
#[ignore = "run by a_missing_library_named_by_the_environment_is_reported, with MLX5_DIRECT_LIBIBVERBS set"]
fn child_open_with_a_missing_libibverbs() {
    if !is_child("child_open_with_a_missing_libibverbs") {
        return;
    }
    let e = VerbsDevice::open("mlx5_0").unwrap_err();
    let Error::RdmaCore {
        device: Some(d),
        source:
            LoadError::Open {
                library: Library::Ibverbs,
                from_env: true,
                ..
            },
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(d, "mlx5_0");
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "device mlx5_0: cannot load /nonexistent/libibverbs.so.1, which \
             MLX5_DIRECT_LIBIBVERBS=/nonexistent/libibverbs.so.1 names instead of libibverbs.so.1"
        ),
        "{msg}"
    );
    // Listing fails the same way, again (a failed load is kept, not retried).
    assert!(matches!(
        list_devices(),
        Err(Error::RdmaCore { device: None, .. })
    ));
    println!("{CHILD_DONE}");
}

#[test]
fn a_missing_library_named_by_the_environment_is_reported() {
    run_child(
        "child_open_with_a_missing_libibverbs",
        &[(LIBIBVERBS_ENV, "/nonexistent/libibverbs.so.1")],
    );
}

/// A stub libmlx5 of rdma-core 21: every function of the table but `mlx5dv_is_supported`
/// (`MLX5_1.8`, rdma-core 22), with its symbol versions; `None` without a C compiler.
fn old_libmlx5_stub(dir: &Path) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let syms: Vec<_> = RdmaCore::SYMBOLS
        .iter()
        .filter(|s| s.library == Library::Mlx5 && s.name != "mlx5dv_is_supported")
        .collect();
    let c: String = syms
        .iter()
        .map(|s| format!("void {}(void) {{}}\n", s.name))
        .collect();
    // One version node per tag, the first one hiding everything else.
    let mut tags: Vec<&str> = syms.iter().map(|s| s.version).collect();
    tags.sort_unstable();
    tags.dedup();
    let mut map = String::new();
    for (i, tag) in tags.iter().enumerate() {
        let names: String = syms
            .iter()
            .filter(|s| s.version == *tag)
            .map(|s| format!("{}; ", s.name))
            .collect();
        let local = if i == 0 { "local: *;" } else { "" };
        map.push_str(&format!("{tag} {{ global: {names}{local} }};\n"));
    }
    std::fs::write(dir.join("stub.c"), c).unwrap();
    std::fs::write(dir.join("stub.map"), map).unwrap();
    let out = dir.join("libmlx5-rdma-core-21.so");
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(dir.join("stub.c"))
        .arg(format!(
            "-Wl,--version-script={}",
            dir.join("stub.map").display()
        ))
        .status()
        .ok()?;
    assert!(status.success(), "{cc} failed to build the stub libmlx5");
    Some(out)
}

/// The child of [`an_old_rdma_core_is_reported_with_the_symbol_and_release`].
#[test]
#[ignore = "run by an_old_rdma_core_is_reported_with_the_symbol_and_release, with MLX5_DIRECT_LIBMLX5 set"]
fn child_open_with_an_old_libmlx5() {
    if !is_child("child_open_with_an_old_libmlx5") {
        return;
    }
    let stub = std::env::var(LIBMLX5_ENV).unwrap();
    let e = VerbsDevice::open("mlx5_0").unwrap_err();
    let Error::RdmaCore {
        source: LoadError::Missing { symbols, .. },
        ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(symbols.len(), 1, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "{stub} has no mlx5dv_is_supported@MLX5_1.8 (rdma-core 22 and later)"
        )) && msg.contains("upgrade to rdma-core 22 or later"),
        "{msg}"
    );
    assert_eq!(e.errno(), libc::ENOSYS);
    println!("{CHILD_DONE}");
}

#[test]
fn an_old_rdma_core_is_reported_with_the_symbol_and_release() {
    if !host_has_rdma_core() {
        eprintln!("SKIPPED: no rdma-core on this host to pair the stub libmlx5 with");
        return;
    }
    let dir = std::env::temp_dir().join(format!("mlx5-hw-old-mlx5-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(stub) = old_libmlx5_stub(&dir) else {
        eprintln!("SKIPPED: no C compiler (set CC or install gcc) to build the stub libmlx5");
        return;
    };
    run_child(
        "child_open_with_an_old_libmlx5",
        &[(LIBMLX5_ENV, stub.to_str().unwrap())],
    );
    std::fs::remove_dir_all(&dir).ok();
}
