//! The emulation's state and what the hooks ask of it.
//!
//! One state per process behind one lock ([`Emu`]): the device ([`Node`], made on first use),
//! the open command descriptors with their user contexts, the event descriptors, and which
//! context owns each CQ, QP and SRQ (for routing asynchronous events). Lock order: this lock,
//! then the fabric's (device calls); the fabric's thread takes only its own.
//!
//! [`Busy`] marks a thread that is inside the emulation: its own file, socket and memory calls
//! reach the hooks too and must go straight to the C library.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use mlx5_hw::XrcdId;

use crate::config::Config;
use crate::context::Context;
use crate::events::EventFile;
use crate::node::Node;
use crate::sys;

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// A thread inside the emulation (see the module doc); the mark goes with the guard.
pub struct Busy {
    was: bool,
}

impl Busy {
    /// Mark the current thread.
    pub fn enter() -> Busy {
        Busy {
            was: BUSY.with(|b| b.replace(true)),
        }
    }

    /// Whether the current thread is inside the emulation.
    pub fn active() -> bool {
        BUSY.try_with(|b| b.get()).unwrap_or(true)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let was = self.was;
        let _ = BUSY.try_with(|b| b.set(was));
    }
}

/// Which context owns an object: the command descriptor and the handle there.
pub type Owner = (i32, u32);

/// The process's emulation state.
#[derive(Debug, Default)]
pub struct Emu {
    /// The device, once made.
    pub node: Option<Arc<Node>>,
    /// Why the device could not be made (said once, then every device path is absent).
    pub failed: Option<String>,
    /// Open command descriptors.
    pub contexts: BTreeMap<i32, Context>,
    /// Event descriptors (completion channels, asynchronous event queues).
    pub events: BTreeMap<i32, EventFile>,
    /// CQN → owner.
    pub cq_owner: BTreeMap<u32, Owner>,
    /// QPN → owner.
    pub qp_owner: BTreeMap<u32, Owner>,
    /// SRQN → owner.
    pub srq_owner: BTreeMap<u32, Owner>,
    /// XRC domains opened by an inode, shared by every context that opens it (kernel
    /// `ib_uverbs_open_xrcd` keeps one per inode per device): (device, inode) → domain, users.
    pub xrcd_inodes: BTreeMap<(u64, u64), (XrcdId, u32)>,
}

static EMU: Mutex<Option<Emu>> = Mutex::new(None);

/// The sysfs tree's root for this process (also `SYSFS_PATH`).
pub static TREE: OnceLock<PathBuf> = OnceLock::new();

/// Lock the state (a poisoned lock is taken over: the state is only ever changed whole).
pub fn lock() -> MutexGuard<'static, Option<Emu>> {
    EMU.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `f` on the state (made empty on first use), inside [`Busy`].
pub fn with<R>(f: impl FnOnce(&mut Emu) -> R) -> R {
    let _b = Busy::enter();
    let mut g = lock();
    f(g.get_or_insert_with(Emu::default))
}

/// The root of the tree: `MLX5SIM_DIR` (or `$TMPDIR`, or `/tmp`) / `mlx5sim-PID`.
pub fn tree_root() -> &'static Path {
    TREE.get_or_init(|| {
        let dir = std::env::var_os("MLX5SIM_DIR")
            .or_else(|| std::env::var_os("TMPDIR"))
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        dir.join(format!("mlx5sim-{}", std::process::id()))
    })
}

/// What a path means.
pub enum PathKind<'a> {
    /// Nothing of the emulation's.
    Other,
    /// `/dev/infiniband/uverbs0`.
    Device,
    /// Another `/dev/infiniband/uverbsN`: no such device.
    NoDevice,
    /// Inside the tree (`SYSFS_PATH`).
    Tree,
    /// `/sys/class/infiniband...`: the part after `/sys`.
    Sys(&'a [u8]),
}

/// Classify a path (no allocation, no lock).
pub fn classify(p: &[u8]) -> PathKind<'_> {
    if let Some(rest) = p.strip_prefix(b"/dev/infiniband/uverbs") {
        return if rest == b"0" {
            PathKind::Device
        } else {
            PathKind::NoDevice
        };
    }
    if let Some(rest) = p.strip_prefix(b"/sys") {
        if let Some(after) = rest.strip_prefix(b"/class/infiniband") {
            if after.is_empty() || after[0] == b'/' || after.starts_with(b"_verbs") {
                return PathKind::Sys(rest);
            }
        }
        return PathKind::Other;
    }
    let root = tree_root().as_os_str().as_bytes();
    if p.starts_with(root) && (p.len() == root.len() || p[root.len()] == b'/') {
        return PathKind::Tree;
    }
    PathKind::Other
}

/// Make the device and its tree if not done yet; whether they exist.
pub fn ensure_tree() -> bool {
    with(|emu| ensure(emu).is_some())
}

/// The device, made on first use (the error is said once on standard error).
pub fn ensure(emu: &mut Emu) -> Option<Arc<Node>> {
    if let Some(n) = &emu.node {
        return Some(n.clone());
    }
    if emu.failed.is_some() {
        return None;
    }
    let made = Config::from_env().and_then(|cfg| {
        crate::log::init(cfg.log.as_deref());
        let root = tree_root().to_path_buf();
        if let Some(dir) = root.parent() {
            crate::sysfs::sweep(dir);
        }
        let node = Node::start(cfg, root.clone())?;
        crate::sysfs::write(&root, &node.facts(), &node.counters())
            .map_err(|e| format!("cannot write the sysfs tree under {}: {e}", root.display()))?;
        Ok(Arc::new(node))
    });
    match made {
        Ok(n) => {
            tracing::info!(ip = %n.ip, gid = %n.gid(), tree = %n.tree.display(), "software ConnectX mlx5_0 ready");
            emu.node = Some(n.clone());
            crate::pinned::set_node(n.clone());
            // The control file's rules apply from the start, before the program's first
            // request; the events thread then looks for changes.
            let mut control = crate::control::Control::new(n.cfg.control.clone());
            control.check(&n.fabric, &n.dev);
            crate::events::start_pump(n.clone(), control);
            Some(n)
        }
        Err(e) => {
            say(&format!("mlx5sim: no device: {e}\n"));
            emu.failed = Some(e);
            None
        }
    }
}

/// Write a line to standard error (through the C library, whatever the program's stdio).
pub fn say(text: &str) {
    sys::write_all(2, text.as_bytes());
}

/// The tree path for `/sys` + `rest`, the device made first; its counter refreshed if it is
/// one.
pub fn redirect(rest: &[u8]) -> Option<CString> {
    if !ensure_tree() {
        return None;
    }
    let mut p = tree_root().as_os_str().as_bytes().to_vec();
    p.extend_from_slice(rest);
    refresh_counter(Path::new(std::ffi::OsStr::from_bytes(&p)));
    CString::new(p).ok()
}

/// Before a counter file of the tree is read, write the device's current value into it.
pub fn refresh_counter(path: &Path) {
    let Some(name) = crate::sysfs::counter_name(path) else {
        return;
    };
    with(|emu| {
        if let Some(n) = &emu.node {
            let v = n.dev.counter(&name);
            let _ = std::fs::write(path, format!("{v}\n"));
        }
    });
}

/// A path of the tree is about to be opened: make the device, refresh a counter.
pub fn tree_path(p: &[u8]) -> bool {
    if !ensure_tree() {
        return false;
    }
    refresh_counter(Path::new(std::ffi::OsStr::from_bytes(p)));
    true
}

/// `open("/dev/infiniband/uverbs0", flags)`: a new command descriptor.
pub fn open_device(flags: i32) -> Result<i32, i32> {
    with(|emu| {
        ensure(emu).ok_or(libc::ENODEV)?;
        let fd = sys::memfd(c"uverbs0", flags & libc::O_CLOEXEC != 0);
        if fd < 0 {
            return Err(sys::errno());
        }
        if !crate::fds::set_command(fd, true) {
            sys::close(fd);
            return Err(libc::EMFILE);
        }
        emu.contexts.insert(fd, Context { fd, u: None });
        Ok(fd)
    })
}

fn char_device_fields() -> (libc::mode_t, libc::dev_t) {
    let (maj, min) = crate::sysfs::CDEV;
    (libc::S_IFCHR | 0o666, libc::makedev(maj, min))
}

/// The `stat` of the character device.
pub fn device_stat() -> libc::stat {
    // SAFETY: `struct stat` is plain data; all zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let (mode, rdev) = char_device_fields();
    st.st_mode = mode;
    st.st_rdev = rdev;
    st.st_nlink = 1;
    st.st_blksize = 4096;
    st.st_ino = 0x6d6c7835;
    st
}

/// The `stat64` of the character device.
pub fn device_stat64() -> libc::stat64 {
    // SAFETY: `struct stat64` is plain data; all zero is a valid value.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    let (mode, rdev) = char_device_fields();
    st.st_mode = mode;
    st.st_rdev = rdev;
    st.st_nlink = 1;
    st.st_blksize = 4096;
    st.st_ino = 0x6d6c7835;
    st
}

/// `write` on a command descriptor: one command.
pub fn command(fd: i32, bytes: &[u8]) -> Result<usize, i32> {
    with(|emu| crate::cmd::execute(emu, fd, bytes))
}

/// `read` on an event descriptor.
pub fn read_event(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    let _b = Busy::enter();
    crate::events::read(fd, buf)
}

/// `fcntl` on an event descriptor: `Some` when the emulation answered.
pub fn fcntl(fd: i32, cmd: i32, arg: libc::c_ulong) -> Option<i32> {
    let _b = Busy::enter();
    crate::events::fcntl(fd, cmd, arg)
}

/// `FIONBIO` on an event descriptor.
pub fn set_nonblocking(fd: i32, on: bool) {
    with(|emu| crate::events::set_nonblocking(emu, fd, on));
}

/// `close` on a descriptor of the emulation's.
pub fn close(fd: i32) -> Result<(), i32> {
    with(|emu| {
        if crate::fds::is_command(fd) {
            crate::fds::set_command(fd, false);
            if let Some(c) = emu.contexts.remove(&fd) {
                crate::objects::teardown(emu, c);
            }
            if sys::close(fd) != 0 {
                return Err(sys::errno());
            }
            return Ok(());
        }
        crate::events::close(emu, fd)
    })
}

/// `mmap` of a command descriptor: the file offset to map, or the kernel's errno.
pub fn mmap_offset(fd: i32, len: usize, off: i64) -> Result<i64, i32> {
    with(|emu| {
        let c = emu.contexts.get_mut(&fd).ok_or(libc::EBADF)?;
        // Before GET_CONTEXT the kernel has no context to map from (`ib_uverbs_mmap`).
        let u = c.u.as_mut().ok_or(libc::ENODEV)?;
        // SAFETY: `fd` is the open command descriptor (the memfd) the program is mapping, open
        // for the duration of this call.
        let memfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        u.uars.mmap_offset(memfd, len, off)
    })
}
