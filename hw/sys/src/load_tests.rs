//! The run-time loader: the symbol table, the errors of a missing library and of missing
//! symbols (against stub libraries built here with the C compiler, from the table itself), and
//! the host's own rdma-core when it has one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::load::{min_rdma_core, Library, LoadError, LIBIBVERBS, LIBMLX5, VERSION_TAGS};
use crate::RdmaCore;

#[test]
fn every_symbol_has_a_known_version_and_one_entry() {
    for s in RdmaCore::SYMBOLS {
        assert!(
            VERSION_TAGS.iter().any(|(t, _)| *t == s.version),
            "{}@{}: version tag missing from VERSION_TAGS",
            s.name,
            s.version
        );
        let prefix = match s.library {
            Library::Ibverbs => "IBVERBS_",
            Library::Mlx5 => "MLX5_",
        };
        assert!(s.version.starts_with(prefix), "{}@{}", s.name, s.version);
        assert_eq!(
            RdmaCore::SYMBOLS
                .iter()
                .filter(|t| t.name == s.name)
                .count(),
            1,
            "{}",
            s.name
        );
    }
    // mlx5dv_is_supported@MLX5_1.8 is the newest: rdma-core 22 (debian/ibverbs-providers.symbols).
    assert_eq!(min_rdma_core(), 22);
    let newest = RdmaCore::SYMBOLS.iter().max_by_key(|s| s.since()).unwrap();
    assert_eq!(
        (newest.name, newest.version),
        ("mlx5dv_is_supported", "MLX5_1.8")
    );
}

#[test]
fn a_missing_library_names_the_packages() {
    let e = RdmaCore::load("libibverbs-mlx5-direct-test-absent.so.1", LIBMLX5).unwrap_err();
    let LoadError::Open {
        library, from_env, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!((*library, *from_env), (Library::Ibverbs, false));
    let m = e.to_string();
    for want in [
        "libibverbs.so.1",
        "libibverbs-mlx5-direct-test-absent.so.1",
        "apt-get install libibverbs1 ibverbs-providers",
        "rdma-core package",
    ] {
        assert!(m.contains(want), "{want:?} not in {m}");
    }
    assert_eq!(e.errno(), libc::ELIBACC);
}

/// The host's rdma-core, when installed: every symbol of the table resolves. (Without it the
/// load fails as a missing library, which the test checks instead.)
#[test]
fn the_hosts_rdma_core_resolves_every_symbol() {
    match RdmaCore::load(LIBIBVERBS, LIBMLX5) {
        Ok(r) => {
            assert!(Path::new(r.libibverbs_path()).exists(), "{r:?}");
            assert!(r.libmlx5_path().contains("libmlx5"), "{r:?}");
        }
        Err(e @ LoadError::Open { .. }) => {
            eprintln!("no rdma-core on this host: {e}");
            assert!(e.to_string().contains("apt-get install"), "{e}");
        }
        Err(e) => panic!("the installed rdma-core lacks symbols: {e}"),
    }
}

/// A C compiler to build stub libraries with, or `None` (the test then says it skipped).
fn cc() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    Command::new(&cc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cc)
}

/// Builds a stub shared library exporting `symbols` (name, version) with a version script,
/// each function empty (never called: the loader only looks addresses up).
fn stub(cc: &str, dir: &Path, file: &str, symbols: &[(&str, &str)]) -> PathBuf {
    let mut c = String::new();
    let mut versions: Vec<&str> = Vec::new();
    for (name, version) in symbols {
        c.push_str(&format!("void {name}(void) {{}}\n"));
        if !versions.contains(version) {
            versions.push(version);
        }
    }
    let mut map = String::new();
    for (i, v) in versions.iter().enumerate() {
        let names: String = symbols
            .iter()
            .filter(|(_, sv)| sv == v)
            .map(|(n, _)| format!("{n}; "))
            .collect();
        let local = if i == 0 { "local: *;" } else { "" };
        map.push_str(&format!("{v} {{ global: {names}{local} }};\n"));
    }
    let src = dir.join(format!("{file}.c"));
    let script = dir.join(format!("{file}.map"));
    let out = dir.join(file);
    std::fs::write(&src, c).unwrap();
    std::fs::write(&script, map).unwrap();
    let o = Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(format!("-Wl,--version-script={}", script.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{cc} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The symbols of one library as the table declares them, but for `drop` (left out) and
/// `demote` (exported at `IBVERBS_1.0` only, as the compatibility versions are).
fn table(library: Library, drop: &str, demote: &str) -> Vec<(&'static str, &'static str)> {
    RdmaCore::SYMBOLS
        .iter()
        .filter(|s| s.library == library && s.name != drop)
        .map(|s| {
            if s.name == demote {
                (s.name, "IBVERBS_1.0")
            } else {
                (s.name, s.version)
            }
        })
        .collect()
}

#[test]
fn missing_symbols_name_the_symbol_version_and_release() {
    let Some(cc) = cc() else {
        eprintln!("SKIPPED: no C compiler (set CC or install gcc) to build the stub libraries");
        return;
    };
    let dir = std::env::temp_dir().join(format!("mlx5dv-sys-stubs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // Complete stubs load.
    let ibv_ok = stub(&cc, &dir, "ibv-ok.so", &table(Library::Ibverbs, "", ""));
    let dv_ok = stub(&cc, &dir, "mlx5-ok.so", &table(Library::Mlx5, "", ""));
    let r = RdmaCore::load(ibv_ok.to_str().unwrap(), dv_ok.to_str().unwrap()).unwrap();
    assert_eq!(r.libibverbs_path(), ibv_ok.to_str().unwrap());

    // A libmlx5 from before rdma-core 22 (no mlx5dv_is_supported), and a libibverbs whose
    // ibv_create_qp exists only at the compatibility version (dlvsym asks for IBVERBS_1.1).
    let dv_old = stub(
        &cc,
        &dir,
        "mlx5-21.so",
        &table(Library::Mlx5, "mlx5dv_is_supported", ""),
    );
    let ibv_compat = stub(
        &cc,
        &dir,
        "ibv-compat.so",
        &table(Library::Ibverbs, "ibv_fork_init", "ibv_create_qp"),
    );
    let e = RdmaCore::load(ibv_compat.to_str().unwrap(), dv_old.to_str().unwrap()).unwrap_err();
    let LoadError::Missing { symbols, paths } = &e else {
        panic!("{e:?}")
    };
    let names: Vec<&str> = symbols.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["ibv_create_qp", "ibv_fork_init", "mlx5dv_is_supported"]
    );
    assert_eq!(paths[1], dv_old.to_str().unwrap());
    let m = e.to_string();
    let old = format!(
        "{} has no mlx5dv_is_supported@MLX5_1.8 (rdma-core 22 and later)",
        dv_old.display()
    );
    for want in [
        old.as_str(),
        "has no ibv_create_qp@IBVERBS_1.1 (every rdma-core release)",
        "ibv_fork_init@IBVERBS_1.1",
        "upgrade to rdma-core 22 or later",
    ] {
        assert!(m.contains(want), "{want:?} not in {m}");
    }
    assert_eq!(e.errno(), libc::ENOSYS);
    std::fs::remove_dir_all(&dir).ok();
}
