//! The interposition boundary: the C library functions this library defines, so that a program
//! started with it in `LD_PRELOAD` calls them instead of the C library's.
//!
//! Each hook first asks whether the call is about the emulation at all: a descriptor in the
//! set of [`crate::fds`] (one atomic load), a path starting with `/dev/infiniband/uverbs` or
//! `/sys/class/infiniband` or the emulated sysfs tree (a byte comparison), a `NETLINK_RDMA`
//! socket. Anything else is forwarded unchanged to the C library ([`crate::sys`]) with no
//! allocation and no lock, so the program and this library's own I/O run as without it. A
//! thread already inside the emulation (which itself writes files, maps pages and logs) is
//! forwarded too ([`crate::emu::Busy`]).
//!
//! What the hooks serve, and rdma-core's side of it (rdma-core v44, `libibverbs/` and
//! `util/`; the full table is in `docs/rdma-core-on-the-software-connectx.md`):
//!
//! | hook | for |
//! |---|---|
//! | `open`, `open64`, `openat`, `openat64` | `/dev/infiniband/uverbs0` (`util/open_cdev.c` `open_cdev_internal`); `/sys/class/infiniband*` read by UCX with a fixed `/sys` |
//! | `stat`, `lstat`, `fstat` (+ `64`), `access` | the character-device checks (`open_cdev_internal`: `S_ISCHR`, `st_rdev`; `init.c` `try_access_device`; UCX `uct_ib_device_is_accessible`) |
//! | `opendir` | building the sysfs tree on first use (`init.c` `find_sysfs_devs`) |
//! | `socket` | `NETLINK_RDMA` refused, so discovery reads sysfs (`ibdev_nl.c`, `util/rdma_nl.c`) |
//! | `write` | the uverbs commands (`cmd_fallback.c` `_execute_cmd_write`) |
//! | `ioctl` | ENOTTY: no ioctl framework (`cmd_fallback.c` `_execute_ioctl_fallback`) |
//! | `read`, `fcntl`, `fcntl64`, `close` | the event descriptors and the end of a context |
//! | `mmap`, `mmap64` | UAR pages at libmlx5's offsets (`mlx5.c` `mlx5_mmap`); with `MAP_FIXED`, as `munmap` first |
//! | `munmap` | registered memory the program unmaps stays the device's ([`crate::pinned`]; the kernel pins it, `ib_umem_get`) |
//!
//! `open`, `openat`, `fcntl` and `ioctl` are variadic in C. Stable Rust cannot define a
//! variadic function, so each is defined with its optional argument as a fixed one: on x86-64
//! (System V) and AArch64 (AAPCS64, where glibc's callers pass variadic integer arguments in
//! the same registers) the argument arrives where a fixed one would, and a call that passed
//! none leaves an unspecified register value that is only read when the flags say it exists.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

use crate::emu::{self, Busy};
use crate::fds;
use crate::sys;

/// `open(2)`.
///
/// # Safety
/// As the C function: `path` is a NUL-terminated string.
#[export_name = "open"]
pub unsafe extern "C" fn hook_open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's string, as `open` requires.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::open(path, flags, mode),
        PathAction::Device => emu::open_device(flags).unwrap_or_else(fail),
        PathAction::Redirect(p) => sys::open(p.as_ptr(), flags, mode),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `open64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "open64"]
pub unsafe extern "C" fn hook_open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: as in `hook_open`.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::open64(path, flags, mode),
        PathAction::Device => emu::open_device(flags).unwrap_or_else(fail),
        PathAction::Redirect(p) => sys::open64(p.as_ptr(), flags, mode),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `openat(2)`: an absolute path is looked at as by `open`.
///
/// # Safety
/// As the C function.
#[export_name = "openat"]
pub unsafe extern "C" fn hook_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: as in `hook_open`.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::openat(dirfd, path, flags, mode),
        PathAction::Device => emu::open_device(flags).unwrap_or_else(fail),
        PathAction::Redirect(p) => sys::openat(dirfd, p.as_ptr(), flags, mode),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `openat64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "openat64"]
pub unsafe extern "C" fn hook_openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: as in `hook_open`.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::openat64(dirfd, path, flags, mode),
        PathAction::Device => emu::open_device(flags).unwrap_or_else(fail),
        PathAction::Redirect(p) => sys::openat64(dirfd, p.as_ptr(), flags, mode),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `stat(2)`.
///
/// # Safety
/// As the C function: `buf` points to a `struct stat`.
#[export_name = "stat"]
pub unsafe extern "C" fn hook_stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's string.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::stat(path, buf),
        PathAction::Device => {
            // SAFETY: the caller's buffer for one `struct stat`.
            unsafe { *buf = emu::device_stat() };
            0
        }
        PathAction::Redirect(p) => sys::stat(p.as_ptr(), buf),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `lstat(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "lstat"]
pub unsafe extern "C" fn hook_lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's string.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::lstat(path, buf),
        PathAction::Device => {
            // SAFETY: the caller's buffer for one `struct stat`.
            unsafe { *buf = emu::device_stat() };
            0
        }
        PathAction::Redirect(p) => sys::lstat(p.as_ptr(), buf),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `stat64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "stat64"]
pub unsafe extern "C" fn hook_stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: the caller's string.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::stat64(path, buf),
        PathAction::Device => {
            // SAFETY: the caller's buffer for one `struct stat64`.
            unsafe { *buf = emu::device_stat64() };
            0
        }
        PathAction::Redirect(p) => sys::stat64(p.as_ptr(), buf),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `lstat64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "lstat64"]
pub unsafe extern "C" fn hook_lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: the caller's string.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::lstat64(path, buf),
        PathAction::Device => {
            // SAFETY: the caller's buffer for one `struct stat64`.
            unsafe { *buf = emu::device_stat64() };
            0
        }
        PathAction::Redirect(p) => sys::lstat64(p.as_ptr(), buf),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `fstat(2)`: a command descriptor is the character device.
///
/// # Safety
/// As the C function.
#[export_name = "fstat"]
pub unsafe extern "C" fn hook_fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fds::is_command(fd) && !Busy::active() {
        // SAFETY: the caller's buffer for one `struct stat`.
        unsafe { *buf = emu::device_stat() };
        return 0;
    }
    sys::fstat(fd, buf)
}

/// `fstat64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "fstat64"]
pub unsafe extern "C" fn hook_fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    if fds::is_command(fd) && !Busy::active() {
        // SAFETY: the caller's buffer for one `struct stat64`.
        unsafe { *buf = emu::device_stat64() };
        return 0;
    }
    sys::fstat64(fd, buf)
}

/// `access(2)`: the device node is readable and writable (UCX checks `R_OK | W_OK`).
///
/// # Safety
/// As the C function.
#[export_name = "access"]
pub unsafe extern "C" fn hook_access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller's string.
    match unsafe { path_action(path) } {
        PathAction::Forward => sys::access(path, mode),
        PathAction::Device => 0,
        PathAction::Redirect(p) => sys::access(p.as_ptr(), mode),
        PathAction::Absent => fail(libc::ENOENT),
    }
}

/// `opendir(3)`.
///
/// # Safety
/// As the C function.
#[export_name = "opendir"]
pub unsafe extern "C" fn hook_opendir(path: *const c_char) -> *mut libc::DIR {
    // SAFETY: the caller's string.
    match unsafe { path_action(path) } {
        PathAction::Forward | PathAction::Device => sys::opendir(path),
        PathAction::Redirect(p) => sys::opendir(p.as_ptr()),
        PathAction::Absent => {
            sys::set_errno(libc::ENOENT);
            std::ptr::null_mut()
        }
    }
}

/// `socket(2)`: `NETLINK_RDMA` is refused with EPROTONOSUPPORT, what a kernel without
/// `ib_core` answers, so libibverbs takes its devices from sysfs.
///
/// # Safety
/// As the C function.
#[export_name = "socket"]
pub unsafe extern "C" fn hook_socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    if domain == libc::AF_NETLINK && proto == libc::NETLINK_RDMA && !Busy::active() {
        return fail(libc::EPROTONOSUPPORT);
    }
    sys::socket(domain, ty, proto)
}

/// `write(2)`: on a command descriptor, one uverbs command.
///
/// # Safety
/// As the C function: `buf` holds `n` readable bytes.
#[export_name = "write"]
pub unsafe extern "C" fn hook_write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    if !fds::is_command(fd) || Busy::active() {
        return sys::write(fd, buf, n);
    }
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT) as isize;
    }
    let cmd: &[u8] = if n == 0 {
        &[]
    } else {
        // SAFETY: `n` readable bytes at `buf` per the caller; read only during this call.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }
    };
    match emu::command(fd, cmd) {
        Ok(len) => len as isize,
        Err(e) => fail(e) as isize,
    }
}

/// `read(2)`: on an event descriptor, one event.
///
/// # Safety
/// As the C function: `buf` has room for `n` bytes.
#[export_name = "read"]
pub unsafe extern "C" fn hook_read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    if !fds::is_ours(fd) || Busy::active() {
        return sys::read(fd, buf, n);
    }
    if fds::is_command(fd) {
        // The uverbs file has no read method: the VFS answers EINVAL (fs/read_write.c).
        return fail(libc::EINVAL) as isize;
    }
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT) as isize;
    }
    let out: &mut [u8] = if n == 0 {
        &mut []
    } else {
        // SAFETY: room for `n` bytes at `buf` per the caller, written only during this call.
        unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) }
    };
    match emu::read_event(fd, out) {
        Ok(len) => len as isize,
        Err(e) => fail(e) as isize,
    }
}

/// `ioctl(2)`: a command descriptor has no ioctl framework (ENOTTY); `FIONBIO` on an event
/// descriptor sets its blocking mode.
///
/// # Safety
/// As the C function.
#[export_name = "ioctl"]
pub unsafe extern "C" fn hook_ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if !fds::is_ours(fd) || Busy::active() {
        return sys::ioctl(fd, req, arg);
    }
    if fds::is_command(fd) {
        return fail(libc::ENOTTY);
    }
    if req == libc::FIONBIO as c_ulong && !arg.is_null() {
        // SAFETY: FIONBIO's argument is a pointer to an int.
        let on = unsafe { *arg.cast::<c_int>() } != 0;
        emu::set_nonblocking(fd, on);
        return 0;
    }
    sys::ioctl(fd, req, arg)
}

/// `fcntl(2)`: an event descriptor's `O_NONBLOCK` is the program's view, kept by the
/// emulation; the descriptor itself stays non-blocking.
///
/// # Safety
/// As the C function.
#[export_name = "fcntl"]
pub unsafe extern "C" fn hook_fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if fds::is_event(fd) && !Busy::active() {
        if let Some(r) = emu::fcntl(fd, cmd, arg) {
            return r;
        }
    }
    sys::fcntl(fd, cmd, arg)
}

/// `fcntl64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "fcntl64"]
pub unsafe extern "C" fn hook_fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if fds::is_event(fd) && !Busy::active() {
        if let Some(r) = emu::fcntl(fd, cmd, arg) {
            return r;
        }
    }
    sys::fcntl64(fd, cmd, arg)
}

/// `close(2)`: closing a command descriptor ends its context and everything made on it, as
/// the kernel's `ib_uverbs_close` does.
///
/// # Safety
/// As the C function.
#[export_name = "close"]
pub unsafe extern "C" fn hook_close(fd: c_int) -> c_int {
    if !fds::is_ours(fd) || Busy::active() {
        return sys::close(fd);
    }
    match emu::close(fd) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `mmap(2)`: a command descriptor maps UAR pages at the offsets libmlx5 computes.
///
/// # Safety
/// As the C function.
#[export_name = "mmap"]
pub unsafe extern "C" fn hook_mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if !fds::is_command(fd) || Busy::active() {
        if flags & libc::MAP_FIXED != 0 && !Busy::active() {
            crate::pinned::before_unmap(addr as u64, len as u64);
        }
        return sys::mmap(addr, len, prot, flags, fd, off);
    }
    // `off_t` is 64 bits here, 32 on 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    let off = off as i64;
    match emu::mmap_offset(fd, len, off) {
        Ok(o) => sys::mmap(addr, len, prot, flags, fd, o as libc::off_t),
        Err(e) => {
            sys::set_errno(e);
            libc::MAP_FAILED
        }
    }
}

/// `mmap64(2)`.
///
/// # Safety
/// As the C function.
#[export_name = "mmap64"]
pub unsafe extern "C" fn hook_mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off64_t,
) -> *mut c_void {
    if !fds::is_command(fd) || Busy::active() {
        if flags & libc::MAP_FIXED != 0 && !Busy::active() {
            crate::pinned::before_unmap(addr as u64, len as u64);
        }
        return sys::mmap64(addr, len, prot, flags, fd, off);
    }
    match emu::mmap_offset(fd, len, off) {
        Ok(o) => sys::mmap64(addr, len, prot, flags, fd, o),
        Err(e) => {
            sys::set_errno(e);
            libc::MAP_FAILED
        }
    }
}

/// `munmap(2)`: pages of a registered memory region in the range are kept for the device
/// first ([`crate::pinned::before_unmap`]), as the kernel keeps them pinned.
///
/// # Safety
/// As the C function.
#[export_name = "munmap"]
pub unsafe extern "C" fn hook_munmap(addr: *mut c_void, len: usize) -> c_int {
    if !Busy::active() {
        crate::pinned::before_unmap(addr as u64, len as u64);
    }
    sys::munmap(addr, len)
}

/// Set `errno` to `e` and return -1.
fn fail(e: c_int) -> c_int {
    sys::set_errno(e);
    -1
}

/// What a path means to the emulation.
enum PathAction {
    /// Not its business.
    Forward,
    /// The uverbs character device.
    Device,
    /// A path of the emulated sysfs tree under its real name (`/sys/class/infiniband...`
    /// read with a fixed `/sys`, as UCX does).
    Redirect(std::ffi::CString),
    /// A path of the emulation that does not exist (the emulation could not start).
    Absent,
}

/// Look at a path.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn path_action(path: *const c_char) -> PathAction {
    if Busy::active() {
        return PathAction::Forward;
    }
    // SAFETY: per the caller; the slice is used during this call only.
    let Some(p) = (unsafe { sys::c_str(path) }) else {
        return PathAction::Forward;
    };
    match emu::classify(p) {
        emu::PathKind::Other => PathAction::Forward,
        emu::PathKind::Device => PathAction::Device,
        emu::PathKind::Tree => {
            if emu::tree_path(p) {
                PathAction::Forward
            } else {
                PathAction::Absent
            }
        }
        emu::PathKind::Sys(rest) => match emu::redirect(rest) {
            Some(c) => PathAction::Redirect(c),
            None => PathAction::Absent,
        },
        emu::PathKind::NoDevice => PathAction::Absent,
    }
}
