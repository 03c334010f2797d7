//! The real C library functions behind the hooks, and the program's memory named by address.
//!
//! With the library preloaded, every call of `write`, `open`, `mmap`, ... in the process (this
//! library's own included: Rust's `std` calls the same symbols) reaches [`crate::hooks`] first.
//! A hook that is not about one of the emulation's files or paths forwards the call here, to
//! the next definition in the lookup order (`dlsym(RTLD_NEXT, name)`, the C library's), resolved
//! on first use and kept in an atomic (hooks run before any constructor, in any thread).
//!
//! The uverbs command ABI passes user addresses (a response buffer, a ring, a doorbell
//! record) in the command; [`copy_to_user`] writes a response there and [`user_readable`]
//! checks a range before the device takes it, both through `process_vm_writev` /
//! `process_vm_readv` on this process, so an address the program did not map is EFAULT, as
//! the kernel's `copy_to_user` and `ib_umem_get` answer, not a fault.
//!
//! Together with [`crate::hooks`] this is where the library's `unsafe` is.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A lazily resolved `RTLD_NEXT` symbol.
struct Next {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Next {
    const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The address of the next definition, or 0 if there is none.
    fn get(&self) -> usize {
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            return a;
        }
        // SAFETY: dlsym with a valid NUL-terminated name; it returns an address or null.
        let a = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        self.addr.store(a, Ordering::Relaxed);
        a
    }
}

static OPEN: Next = Next::new(c"open");
static OPEN64: Next = Next::new(c"open64");
static OPENAT: Next = Next::new(c"openat");
static OPENAT64: Next = Next::new(c"openat64");
static STAT: Next = Next::new(c"stat");
static STAT64: Next = Next::new(c"stat64");
static LSTAT: Next = Next::new(c"lstat");
static LSTAT64: Next = Next::new(c"lstat64");
static FSTAT: Next = Next::new(c"fstat");
static FSTAT64: Next = Next::new(c"fstat64");
static ACCESS: Next = Next::new(c"access");
static OPENDIR: Next = Next::new(c"opendir");
static WRITE: Next = Next::new(c"write");
static READ: Next = Next::new(c"read");
static IOCTL: Next = Next::new(c"ioctl");
static FCNTL: Next = Next::new(c"fcntl");
static FCNTL64: Next = Next::new(c"fcntl64");
static CLOSE: Next = Next::new(c"close");
static MMAP: Next = Next::new(c"mmap");
static MMAP64: Next = Next::new(c"mmap64");
static MUNMAP: Next = Next::new(c"munmap");
static SOCKET: Next = Next::new(c"socket");

/// No next definition of a libc function: a broken process; say so and fail like the call.
fn missing(name: &CStr) -> c_int {
    // The only thing that can be done without the function itself.
    set_errno(libc::ENOSYS);
    let _ = name;
    -1
}

/// Set `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: as in `set_errno`.
    unsafe { *libc::__errno_location() }
}

macro_rules! forward {
    ($slot:ident, fn($($a:ident: $t:ty),* $(,)?) -> $r:ty, $fail:expr $(,)?) => {{
        let f = $slot.get();
        if f == 0 {
            missing($slot.name);
            return $fail;
        }
        // SAFETY: `f` is the address of the C library's function of this name and type
        // (glibc's prototype); the arguments are passed through unchanged.
        let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(f) };
        // SAFETY: as the caller's own call of the function would be.
        unsafe { f($($a),*) }
    }};
}

/// `open(2)`.
pub fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    forward!(
        OPEN,
        fn(path: *const c_char, flags: c_int, mode: c_uint) -> c_int,
        -1
    )
}
/// `open64(2)`.
pub fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    forward!(
        OPEN64,
        fn(path: *const c_char, flags: c_int, mode: c_uint) -> c_int,
        -1
    )
}
/// `openat(2)`.
pub fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    forward!(
        OPENAT,
        fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int,
        -1
    )
}
/// `openat64(2)`.
pub fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    forward!(
        OPENAT64,
        fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int,
        -1
    )
}
/// `stat(2)`.
pub fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    forward!(
        STAT,
        fn(path: *const c_char, buf: *mut libc::stat) -> c_int,
        -1
    )
}
/// `stat64(2)`.
pub fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    forward!(
        STAT64,
        fn(path: *const c_char, buf: *mut libc::stat64) -> c_int,
        -1
    )
}
/// `lstat(2)`.
pub fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    forward!(
        LSTAT,
        fn(path: *const c_char, buf: *mut libc::stat) -> c_int,
        -1
    )
}
/// `lstat64(2)`.
pub fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    forward!(
        LSTAT64,
        fn(path: *const c_char, buf: *mut libc::stat64) -> c_int,
        -1
    )
}
/// `fstat(2)`.
pub fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    forward!(FSTAT, fn(fd: c_int, buf: *mut libc::stat) -> c_int, -1)
}
/// `fstat64(2)`.
pub fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    forward!(FSTAT64, fn(fd: c_int, buf: *mut libc::stat64) -> c_int, -1)
}
/// `access(2)`.
pub fn access(path: *const c_char, mode: c_int) -> c_int {
    forward!(ACCESS, fn(path: *const c_char, mode: c_int) -> c_int, -1)
}
/// `opendir(3)`.
pub fn opendir(path: *const c_char) -> *mut libc::DIR {
    forward!(
        OPENDIR,
        fn(path: *const c_char) -> *mut libc::DIR,
        std::ptr::null_mut()
    )
}
/// `write(2)`.
pub fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    forward!(
        WRITE,
        fn(fd: c_int, buf: *const c_void, n: usize) -> isize,
        -1
    )
}
/// `read(2)`.
pub fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    forward!(READ, fn(fd: c_int, buf: *mut c_void, n: usize) -> isize, -1)
}
/// `ioctl(2)` with one argument word.
pub fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    forward!(
        IOCTL,
        fn(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int,
        -1
    )
}
/// `fcntl(2)` with one argument word.
pub fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    forward!(FCNTL, fn(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int, -1)
}
/// `fcntl64(2)` with one argument word.
pub fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    forward!(
        FCNTL64,
        fn(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int,
        -1
    )
}
/// `close(2)`.
pub fn close(fd: c_int) -> c_int {
    forward!(CLOSE, fn(fd: c_int) -> c_int, -1)
}
/// `mmap(2)`.
pub fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    forward!(
        MMAP,
        fn(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: libc::off_t,
        ) -> *mut c_void,
        libc::MAP_FAILED
    )
}
/// `mmap64(2)`.
pub fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off64_t,
) -> *mut c_void {
    forward!(
        MMAP64,
        fn(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: libc::off64_t,
        ) -> *mut c_void,
        libc::MAP_FAILED
    )
}
/// `munmap(2)`.
pub fn munmap(addr: *mut c_void, len: usize) -> c_int {
    forward!(MUNMAP, fn(addr: *mut c_void, len: usize) -> c_int, -1)
}
/// `mremap(2)` of `len` bytes at `from` to exactly `to`, replacing what is mapped there
/// (`MREMAP_MAYMOVE | MREMAP_FIXED`); whether it worked (`errno` says why not). The library
/// defines no `mremap`, so the C library's is called directly.
pub fn mremap_fixed(from: u64, len: u64, to: u64) -> bool {
    // SAFETY: moves whole pages of this process's own mappings; the callers move only pages
    // no Rust reference points into (the program's registered memory, which the device reads
    // by address with its thread stopped, and a reservation of their own).
    let r = unsafe {
        libc::mremap(
            from as usize as *mut c_void,
            len as usize,
            len as usize,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as usize as *mut c_void,
        )
    };
    r != libc::MAP_FAILED
}
/// The page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}
/// `socket(2)`.
pub fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    forward!(
        SOCKET,
        fn(domain: c_int, ty: c_int, proto: c_int) -> c_int,
        -1
    )
}

/// The C string at `p` as bytes (without the NUL); `None` for a null pointer.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that outlives the returned slice.
pub unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// `memfd_create(2)`: the anonymous file behind a command descriptor.
pub fn memfd(name: &CStr, cloexec: bool) -> c_int {
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: a valid NUL-terminated name; returns a new descriptor or -1.
    unsafe { libc::memfd_create(name.as_ptr(), flags) }
}

/// `ftruncate(2)`.
pub fn ftruncate(fd: c_int, len: u64) -> c_int {
    // SAFETY: plain system call on a descriptor.
    unsafe { libc::ftruncate(fd, len as libc::off_t) }
}

/// `eventfd(2)`, non-blocking and close-on-exec.
pub fn eventfd() -> c_int {
    // SAFETY: plain system call.
    unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }
}

/// `poll(2)` on one descriptor for readability, `timeout_ms` (-1: forever); the `poll` result.
pub fn poll_in(fd: c_int, timeout_ms: c_int) -> c_int {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, timeout_ms) }
}

/// Write an 8-byte counter increment to an eventfd (makes it readable).
pub fn eventfd_signal(fd: c_int) {
    let one = 1u64.to_ne_bytes();
    write(fd, one.as_ptr().cast(), 8);
}

/// Read (reset) an eventfd's counter; nothing if it is 0 (the descriptor is non-blocking).
pub fn eventfd_clear(fd: c_int) {
    let mut v = [0u8; 8];
    read(fd, v.as_mut_ptr().cast(), 8);
}

/// Write a whole buffer to a descriptor of the library's own (standard error, a report file),
/// through the real `write`.
pub fn write_all(fd: c_int, mut buf: &[u8]) {
    while !buf.is_empty() {
        let n = write(fd, buf.as_ptr().cast(), buf.len());
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Copy `src` to the program's memory at `addr` as the kernel's `copy_to_user` does: EFAULT
/// (and nothing written where the memory is missing) for an address the process has not
/// mapped writable. Done with `process_vm_writev` on this process, which checks the mapping.
pub fn copy_to_user(addr: u64, src: &[u8]) -> Result<(), i32> {
    if src.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: src.as_ptr() as *mut c_void,
        iov_len: src.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut c_void,
        iov_len: src.len(),
    };
    // SAFETY: one valid local iovec over `src`; the remote one names the program's memory,
    // which the kernel checks (no fault here, EFAULT there).
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == src.len() as isize {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// Whether every page of `[addr, addr + len)` is mapped readable in this process (what
/// `ib_umem_get` needs before it pins a range): one byte of each page read with
/// `process_vm_readv`, which reports EFAULT instead of faulting.
pub fn user_readable(addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let page = 4096u64;
    let mut at = addr;
    let mut byte = [0u8; 64];
    while at < end {
        // Up to 64 pages per call.
        let mut remote = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 64];
        let mut k = 0;
        while k < 64 && at < end {
            remote[k] = libc::iovec {
                iov_base: at as usize as *mut c_void,
                iov_len: 1,
            };
            k += 1;
            at = (at / page + 1) * page;
        }
        let local = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: k,
        };
        // SAFETY: the local iovec covers `byte` (64 bytes, `k` ≤ 64 used); the remote ones name
        // the program's memory, which the kernel checks.
        let n = unsafe {
            libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), k as u64, 0)
        };
        if n != k as isize {
            return false;
        }
    }
    true
}
