//! Loading rdma-core at run time: `libibverbs.so.1` and `libmlx5.so.1` are opened with
//! `dlopen` the first time a hardware device is opened, and every function mlx5-direct calls
//! is looked up once, by name and symbol version, into a [`RdmaCore`] table of function
//! pointers. Nothing is linked at build time, so building needs no rdma-core, and a binary
//! starts (and opens the software ConnectX) on a host without it.
//!
//! - [`RdmaCore::get`]: the process's table, loaded on first use and kept (a failure is kept
//!   too: it is reported again, never retried, so a run cannot change libraries half way).
//! - [`RdmaCore::load`]: load from the given file names, uncached (tests, custom builds).
//! - [`LoadError`]: a library that cannot be opened names the packages to install; a library
//!   that lacks a symbol names it, its version tag and the rdma-core release that has it.
//! - [`RdmaCore::SYMBOLS`] (module `exported`): the table of the symbols resolved, with their
//!   version tags; [`VERSION_TAGS`]: the rdma-core release that introduced each tag.
//!
//! Only the exported functions go through this table. The `static inline` functions of
//! `verbs.h` that dispatch through the provider's ops (`ibv_post_send`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`, ...) are plain Rust functions in [`crate::ibv`] and never touch it: the
//! data path costs what it cost when the libraries were linked.
//!
//! ## Which version of a symbol
//!
//! Every lookup is `dlvsym(handle, name, version)` with the version the table names, which is
//! the *default* version of that symbol (the `@@` one, what the static linker binds when a
//! program links `-libverbs` against the rdma-core headers). Several symbols have two: the
//! compatibility `IBVERBS_1.0` versions of `ibv_create_qp`, `ibv_modify_qp`, `ibv_reg_mr`, ...
//! take the pre-1.1 structs (rdma-core `libibverbs/compat-1_0.c`), and `mlx5dv_init_obj@MLX5_1.0`
//! returns the UAR differently from `@@MLX5_1.2` (`docs/sources.md` §11). A plain `dlsym` would
//! also return the default version (glibc's lookup skips hidden, non-default versions), but
//! `dlvsym` says which one in the code, and a library whose default moved (a future
//! `IBVERBS_1.x` of a symbol) still hands back the one these declarations describe.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::sync::OnceLock;

pub use crate::exported::RdmaCore;

/// The file `dlopen` opens for libibverbs unless [`LIBIBVERBS_ENV`] names another: the soname
/// of every rdma-core release (the library's ABI has been `.so.1` since libibverbs 1.0).
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// The file `dlopen` opens for libmlx5 unless [`LIBMLX5_ENV`] names another (rdma-core builds
/// the mlx5 provider as the public `libmlx5.so.1`; its `libmlx5-rdmav34.so` in the provider
/// directory is a link to it, so libibverbs and this loader share one copy).
pub const LIBMLX5: &str = "libmlx5.so.1";
/// Environment variable: a file name or path `dlopen` takes instead of [`LIBIBVERBS`] (an
/// rdma-core built from source: `MLX5_DIRECT_LIBIBVERBS=$HOME/rdma-core/build/lib/libibverbs.so.1`).
/// Read once, at the first [`RdmaCore::get`].
pub const LIBIBVERBS_ENV: &str = "MLX5_DIRECT_LIBIBVERBS";
/// Environment variable: a file name or path `dlopen` takes instead of [`LIBMLX5`].
pub const LIBMLX5_ENV: &str = "MLX5_DIRECT_LIBMLX5";

/// One of the two rdma-core libraries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Library {
    /// `libibverbs.so.1`: devices, contexts, every verbs object.
    Ibverbs,
    /// `libmlx5.so.1`: the mlx5 provider's direct verbs (`mlx5dv_*`).
    Mlx5,
}

impl Library {
    /// The default file name ([`LIBIBVERBS`], [`LIBMLX5`]).
    pub const fn soname(self) -> &'static str {
        match self {
            Library::Ibverbs => LIBIBVERBS,
            Library::Mlx5 => LIBMLX5,
        }
    }

    /// The environment variable that overrides [`Library::soname`].
    pub const fn env(self) -> &'static str {
        match self {
            Library::Ibverbs => LIBIBVERBS_ENV,
            Library::Mlx5 => LIBMLX5_ENV,
        }
    }

    /// The Debian/Ubuntu packages that install it (rdma-core's `debian/control`:
    /// `libibverbs1` ships `libibverbs.so.1`, `ibverbs-providers` ships `libmlx5.so.1` and the
    /// provider plugins `libibverbs` loads; a device needs both).
    pub const fn debian_packages(self) -> &'static str {
        match self {
            Library::Ibverbs => "libibverbs1 ibverbs-providers",
            Library::Mlx5 => "ibverbs-providers",
        }
    }
}

/// One exported function [`RdmaCore`] resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// The C name (`ibv_alloc_pd`).
    pub name: &'static str,
    /// The library that exports it.
    pub library: Library,
    /// The symbol version looked up (`IBVERBS_1.1`, `MLX5_1.2`): the default version, from
    /// rdma-core's `libibverbs/libibverbs.map.in` and `providers/mlx5/libmlx5.map`.
    pub version: &'static str,
    /// The Rust types of the arguments, as declared (`*mut ibv_context`).
    pub args: &'static [&'static str],
    /// The Rust return type, as declared (`()` for none).
    pub ret: &'static str,
}

impl Symbol {
    /// The first rdma-core release whose library has this symbol version ([`VERSION_TAGS`]).
    pub fn since(&self) -> u16 {
        release_of(self.version)
    }
}

/// The symbol version tags [`RdmaCore`] uses and the first rdma-core release that exports each:
/// the `TAG@TAG release` lines of rdma-core's `debian/libibverbs1.symbols` and
/// `debian/ibverbs-providers.symbols` (checked against the release tags: `git tag --contains`
/// of the commit that added the tag to `providers/mlx5/libmlx5.map` gives the same release).
/// `IBVERBS_1.0` and `IBVERBS_1.1` predate rdma-core (libibverbs 1.0 and 1.1); 12 is
/// rdma-core's first release.
pub const VERSION_TAGS: &[(&str, u16)] = &[
    ("IBVERBS_1.0", 12),
    ("IBVERBS_1.1", 12),
    ("MLX5_1.0", 13),
    ("MLX5_1.1", 14),
    ("MLX5_1.2", 15),
    ("MLX5_1.3", 16),
    ("MLX5_1.4", 17),
    ("MLX5_1.8", 22),
];

/// The release of `tag` in [`VERSION_TAGS`] (`u16::MAX` for a tag the table lacks, which
/// `load_tests` forbids).
fn release_of(tag: &str) -> u16 {
    VERSION_TAGS
        .iter()
        .find(|(t, _)| *t == tag)
        .map_or(u16::MAX, |&(_, r)| r)
}

/// The oldest rdma-core release that has every symbol of [`RdmaCore::SYMBOLS`].
pub fn min_rdma_core() -> u16 {
    RdmaCore::SYMBOLS
        .iter()
        .map(Symbol::since)
        .max()
        .unwrap_or(12)
}

/// "rdma-core N and later", or for the oldest tags "every rdma-core release".
fn release_text(r: u16) -> String {
    if r <= 12 {
        "every rdma-core release".to_string()
    } else {
        format!("rdma-core {r} and later")
    }
}

/// Why rdma-core could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// `dlopen` failed: the library is not installed (or cannot be loaded).
    Open {
        /// Which library.
        library: Library,
        /// The name passed to `dlopen`.
        name: String,
        /// The name came from [`Library::env`], not the default.
        from_env: bool,
        /// `dlerror()`'s text.
        reason: String,
    },
    /// The libraries opened but lack functions mlx5-direct calls (an rdma-core older than
    /// [`min_rdma_core`], or not rdma-core at all).
    Missing {
        /// Every symbol not found, in table order.
        symbols: Vec<Symbol>,
        /// The file each library was loaded from (`dlinfo`), libibverbs first.
        paths: [String; 2],
    },
}

impl LoadError {
    /// The errno a caller that must answer with one reports: `ELIBACC` ("can not access a
    /// needed shared library") for [`LoadError::Open`], `ENOSYS` for [`LoadError::Missing`].
    pub fn errno(&self) -> c_int {
        match self {
            LoadError::Open { .. } => libc::ELIBACC,
            LoadError::Missing { .. } => libc::ENOSYS,
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Open {
                library,
                name,
                from_env: true,
                reason,
            } => write!(
                f,
                "cannot load {name}, which {}={name} names instead of {}: {reason}",
                library.env(),
                library.soname()
            ),
            LoadError::Open {
                library, reason, ..
            } => write!(
                f,
                "cannot load rdma-core's {} ({reason}): a hardware RDMA device needs rdma-core's \
                 user-space libraries. Install them: on Debian or Ubuntu `apt-get install {}`, on \
                 other distributions the rdma-core package (the software ConnectX, -d sim, needs \
                 none of this)",
                library.soname(),
                library.debian_packages()
            ),
            LoadError::Missing { symbols, paths } => {
                let need = symbols.iter().map(Symbol::since).max().unwrap_or(12);
                write!(f, "the installed rdma-core is too old for mlx5-direct:")?;
                for s in symbols {
                    let path = match s.library {
                        Library::Ibverbs => &paths[0],
                        Library::Mlx5 => &paths[1],
                    };
                    write!(
                        f,
                        " {path} has no {}@{} ({});",
                        s.name,
                        s.version,
                        release_text(s.since())
                    )?;
                }
                write!(
                    f,
                    " upgrade to rdma-core {} or later (mlx5-direct needs rdma-core {}; Debian \
                     and Ubuntu: `apt-get install {}`)",
                    need.max(min_rdma_core()),
                    min_rdma_core(),
                    Library::Ibverbs.debian_packages()
                )
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// The process's libraries: loaded once ([`RdmaCore::get`]).
static LOADED: OnceLock<Result<RdmaCore, LoadError>> = OnceLock::new();

impl RdmaCore {
    /// The process's rdma-core, loaded at the first call from [`LIBIBVERBS`] and [`LIBMLX5`]
    /// (or what [`LIBIBVERBS_ENV`] and [`LIBMLX5_ENV`] name), and kept for the life of the
    /// process: libraries are never unloaded (a provider holds on to libibverbs, and objects
    /// made through them may outlive any handle). A failure is kept too and returned again.
    pub fn get() -> Result<&'static RdmaCore, LoadError> {
        LOADED
            .get_or_init(|| {
                let name = |l: Library| {
                    std::env::var(l.env())
                        .ok()
                        .filter(|v| !v.is_empty())
                        .map_or((l.soname().to_string(), false), |v| (v, true))
                };
                RdmaCore::load_named(name(Library::Ibverbs), name(Library::Mlx5))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The process's rdma-core if [`RdmaCore::get`] loaded it already (never loads).
    pub fn loaded() -> Option<&'static RdmaCore> {
        LOADED.get().and_then(|r| r.as_ref().ok())
    }

    /// Opens `libibverbs` and `libmlx5` (file names or paths, as `dlopen` takes them) and
    /// resolves every symbol of [`RdmaCore::SYMBOLS`]; not cached (each call opens the files
    /// again, which the dynamic loader counts; nothing is unloaded). For the process's own
    /// libraries use [`RdmaCore::get`].
    pub fn load(libibverbs: &str, libmlx5: &str) -> Result<RdmaCore, LoadError> {
        Self::load_named(
            (libibverbs.to_string(), false),
            (libmlx5.to_string(), false),
        )
    }

    fn load_named(ibverbs: (String, bool), mlx5: (String, bool)) -> Result<RdmaCore, LoadError> {
        // libibverbs first: libmlx5 needs it (DT_NEEDED), and a libibverbs named by the
        // environment is then the one libmlx5 binds to (same soname).
        let ibv = Handle::open(Library::Ibverbs, ibverbs)?;
        let dv = Handle::open(Library::Mlx5, mlx5)?;
        RdmaCore::resolve(&ibv, &dv)
    }
}

/// A library opened with `dlopen` (never closed).
pub(crate) struct Handle {
    ptr: *mut c_void,
    /// The file the loader found (`dlinfo`), or the name asked for.
    pub(crate) path: String,
}

impl Handle {
    fn open(library: Library, (name, from_env): (String, bool)) -> Result<Handle, LoadError> {
        let open_error = |reason: String| LoadError::Open {
            library,
            name: name.clone(),
            from_env,
            reason,
        };
        let c = CString::new(name.as_str())
            .map_err(|_| open_error("the name contains a NUL byte".to_string()))?;
        // SAFETY: `c` is a NUL-terminated string that outlives the call. RTLD_NOW resolves
        // every reference of the library now (a broken install fails here, not at a later
        // call); RTLD_LOCAL keeps its symbols out of the global scope of this process.
        let ptr = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if ptr.is_null() {
            return Err(open_error(dl_error()));
        }
        let path = loaded_path(ptr).unwrap_or(name);
        Ok(Handle { ptr, path })
    }

    /// The address of `name` at `version` (both NUL-terminated), or NULL.
    pub(crate) fn lookup(&self, name: &'static str, version: &'static str) -> *mut c_void {
        debug_assert!(name.ends_with('\0') && version.ends_with('\0'));
        #[cfg(target_env = "gnu")]
        // SAFETY: a live handle (never closed) and two NUL-terminated static strings.
        let p = unsafe {
            libc::dlvsym(
                self.ptr,
                name.as_ptr().cast::<c_char>(),
                version.as_ptr().cast::<c_char>(),
            )
        };
        // Without glibc's dlvsym (musl has no symbol versioning): the default version.
        #[cfg(not(target_env = "gnu"))]
        // SAFETY: a live handle and a NUL-terminated static string.
        let p = unsafe {
            let _ = version;
            libc::dlsym(self.ptr, name.as_ptr().cast::<c_char>())
        };
        p
    }
}

/// The text of the last `dl*` failure of this thread.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call of
    // this thread; it is copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// The head of glibc's `struct link_map` (<link.h>): the fields before `l_name` are all this
/// reads.
#[repr(C)]
struct LinkMapHead {
    _l_addr: usize,
    l_name: *const c_char,
}

/// The path the dynamic loader opened for `handle` (`dlinfo(RTLD_DI_LINKMAP)`).
fn loaded_path(handle: *mut c_void) -> Option<String> {
    #[cfg(target_env = "gnu")]
    {
        let mut map: *const LinkMapHead = std::ptr::null();
        // SAFETY: a live handle; RTLD_DI_LINKMAP stores a `struct link_map *` through the
        // pointer, which points at a pointer-sized local.
        let r = unsafe {
            libc::dlinfo(
                handle,
                libc::RTLD_DI_LINKMAP,
                (&mut map as *mut *const LinkMapHead).cast(),
            )
        };
        if r != 0 || map.is_null() {
            return None;
        }
        // SAFETY: the loader's link map of a loaded object: `l_name` is NULL or a
        // NUL-terminated path that lives as long as the object (never unloaded).
        let name = unsafe { (*map).l_name };
        if name.is_null() {
            return None;
        }
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        (!s.is_empty()).then_some(s)
    }
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = handle;
        None
    }
}
