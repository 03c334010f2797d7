//! Every byte the software ConnectX reads or writes goes through this module.
//!
//! Two kinds of memory are shared with the driver, as on a real NIC:
//!
//! - [`DmaBuf`]: memory the *device* owns and hands out (QP/CQ/SRQ buffers, doorbell records,
//!   UAR pages): zeroed, freed when the object is destroyed. rdma-core allocates these in
//!   `mlx5_alloc_qp_buf` / `mlx5_alloc_cq_buf` / `mlx5_alloc_dbrec` and zeroes the QP buffer
//!   (`memset` in `mlx5_alloc_qp_buf`, rdma-core `providers/mlx5/verbs.c`). Unlike rdma-core's
//!   buffers, every one ends exactly at an inaccessible guard page (`mprotect(PROT_NONE)`): a
//!   driver that reads or writes one byte past a ring or CQ buffer (a wrong wrap) faults at
//!   once instead of reading bytes that merely never look like a CQE. The start is therefore
//!   page-aligned only when the length is a whole number of pages; it is always 64-byte
//!   aligned (a basic block, a CQE).
//! - [`Region`]: memory the *application* registered with `reg_mr`; the device touches it only
//!   through a bounds-checked window, so no byte outside a registered region is ever accessed.
//!
//! Under rdma-core the driver allocates the rings and doorbell records itself and hands their
//! addresses to the kernel, which pins them (`ib_umem_get` in the kernel's mlx5 `create_user_qp`,
//! `create_cq_user`, `create_srq_user`); and the UAR pages are pages of the device that the
//! program maps from its command file descriptor. A [`DmaBuf`] can therefore also be a window
//! on memory the device does not own: [`DmaBuf::user`] (the emulation's umem, whose creator
//! vouches for the memory until the object is destroyed, as the kernel's pin does) and
//! [`DmaBuf::map_shared`] (a page of a file the program maps too, mapped again for the device).
//! Every access still goes through the same bounds-checked volatile accessors.
//!
//! The driver writes these bytes concurrently (threaded mode) as it would with DMA memory, so
//! all accesses are volatile byte/word accesses: the device never forms a Rust reference to
//! shared memory. This is the only module with `unsafe` in the crate, apart from the
//! registration entry point that creates a [`Region`] from the caller's `reg_mr` promise.

use std::ptr::NonNull;

/// Size of a page: device allocations are made of whole pages.
pub const PAGE_SIZE: usize = 4096;

/// The alignment of every device allocation's start: a send basic block, a CQE.
pub const DMA_ALIGN: usize = 64;

/// Memory shared between the device and the driver: a zeroed allocation owned by the device
/// and followed at once by a guard page that faults on any access ([`DmaBuf::new`]), or a
/// window on the driver's own memory ([`DmaBuf::user`]) or on a shared file mapping
/// ([`DmaBuf::map_shared`]).
#[derive(Debug)]
pub struct DmaBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The mapping to undo on drop: `map_len` bytes from `map` (for [`DmaBuf::new`] the last
    /// page is the guard); `None` for memory the device does not own ([`DmaBuf::user`]).
    map: Option<(NonNull<u8>, usize)>,
    /// For a [`DmaBuf::window`]: the buffer it is a window on, kept alive with it.
    _parent: Option<std::sync::Arc<DmaBuf>>,
}

// SAFETY: the buffer is plain memory; every access goes through volatile reads/writes below,
// so moving the owner between threads or sharing it is sound.
unsafe impl Send for DmaBuf {}
// SAFETY: as above; no interior references are ever handed out.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocate `len` bytes (rounded up to [`DMA_ALIGN`]), zeroed, ending at a guard page:
    /// the pages it needs plus one, the buffer placed at the end of its pages and the last
    /// page made inaccessible. `None` if `len` is 0 or the mapping fails.
    pub fn new(len: usize) -> Option<DmaBuf> {
        let len = len.checked_add(DMA_ALIGN - 1)? & !(DMA_ALIGN - 1);
        if len == 0 {
            return None;
        }
        let pages = len.checked_add(PAGE_SIZE - 1)? & !(PAGE_SIZE - 1);
        let map_len = pages.checked_add(PAGE_SIZE)?;
        // SAFETY: a fresh private anonymous mapping (zeroed by the kernel); no existing memory
        // is touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let map = NonNull::new(map as *mut u8)?;
        // SAFETY: `pages` < `map_len`: the guard is the mapping's last page.
        let guard = unsafe { map.as_ptr().add(pages) };
        // SAFETY: the guard page is part of the mapping made above.
        if unsafe { libc::mprotect(guard as *mut libc::c_void, PAGE_SIZE, libc::PROT_NONE) } != 0 {
            // SAFETY: the mapping made above, unmapped once.
            unsafe { libc::munmap(map.as_ptr() as *mut libc::c_void, map_len) };
            return None;
        }
        // SAFETY: `pages - len` < `pages`: inside the accessible part.
        let ptr = NonNull::new(unsafe { map.as_ptr().add(pages - len) })?;
        Some(DmaBuf {
            ptr,
            len,
            map: Some((map, map_len)),
            _parent: None,
        })
    }

    /// A window on `len` bytes of the driver's memory at `addr` (a ring or doorbell record the
    /// driver allocated and named in a create command): the device reads and writes it through
    /// the same checked accessors and never frees it. `None` for a null address, an empty or
    /// wrapping range, or an address not aligned to 4 bytes (a doorbell record is read with
    /// 32-bit loads).
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay valid for reads and writes until the returned buffer is
    /// dropped: the caller pins it as the kernel's `ib_umem_get` does, and drops the buffer
    /// (destroys the object) before the driver frees the memory.
    pub unsafe fn user(addr: u64, len: usize) -> Option<DmaBuf> {
        if len == 0 || !addr.is_multiple_of(4) || addr.checked_add(len as u64).is_none() {
            return None;
        }
        let ptr = NonNull::new(addr as usize as *mut u8)?;
        Some(DmaBuf {
            ptr,
            len,
            map: None,
            _parent: None,
        })
    }

    /// The `len` bytes of `parent` from offset `off`, as a buffer of their own that keeps
    /// `parent` alive; `None` if they are not all inside `parent` or `off` is not 8-byte
    /// aligned.
    pub fn window(parent: &std::sync::Arc<DmaBuf>, off: usize, len: usize) -> Option<DmaBuf> {
        if len == 0 || !off.is_multiple_of(8) || !parent.in_bounds(off, len) {
            return None;
        }
        // SAFETY: `off + len <= parent.len`, so the pointer stays inside the parent's memory.
        let ptr = NonNull::new(unsafe { parent.ptr.as_ptr().add(off) })?;
        Some(DmaBuf {
            ptr,
            len,
            map: None,
            _parent: Some(parent.clone()),
        })
    }

    /// Map `len` bytes of the file `fd` at `offset` (page-aligned) shared and writable: the
    /// device's own view of pages the program maps from the same file (a UAR page of the
    /// command file descriptor), so both see every store. The mapping is undone on drop.
    pub fn map_shared(
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> std::io::Result<DmaBuf> {
        use std::os::fd::AsRawFd;
        if len == 0 || !offset.is_multiple_of(PAGE_SIZE as u64) {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let off = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a new shared mapping of a file the caller keeps open; no existing memory is
        // touched, and the mapping is owned by the returned buffer.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let map = NonNull::new(map as *mut u8)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(DmaBuf {
            ptr: map,
            len,
            map: Some((map, len)),
            _parent: None,
        })
    }

    /// Base address handed to the driver.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (for [`DmaBuf::new`] the requested length rounded up to [`DMA_ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn in_bounds(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// Copy `dst.len()` bytes from offset `off`; `false` (and nothing read) if out of bounds.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.in_bounds(off, dst.len()) {
            return false;
        }
        // SAFETY: bounds checked above; the pointer is valid for `len` bytes while `self` lives.
        unsafe { volatile_copy_from(self.ptr.as_ptr().add(off), dst) };
        true
    }

    /// Copy `src` to offset `off`; `false` (and nothing written) if out of bounds.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.in_bounds(off, src.len()) {
            return false;
        }
        // SAFETY: bounds checked above.
        unsafe { volatile_copy_to(self.ptr.as_ptr().add(off), src) };
        true
    }

    /// Fill `n` bytes at `off` with `byte`.
    pub fn fill(&self, off: usize, n: usize, byte: u8) -> bool {
        if !self.in_bounds(off, n) {
            return false;
        }
        for i in 0..n {
            // SAFETY: off + i < off + n <= len.
            unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(off + i), byte) };
        }
        true
    }

    /// Read a big-endian u32 (doorbell records); 0 if out of bounds.
    ///
    /// At a 4-byte aligned offset this is one 32-bit load, so a record the driver stores
    /// concurrently (`mmio::write_dbrec`, one 32-bit store) is seen either old or new, never
    /// torn: a byte-wise read of a record moving from 0x01ff to 0x0200 could yield 0x02ff, WQEs
    /// that were never posted.
    pub fn read_be32(&self, off: usize) -> u32 {
        if (self.ptr.as_ptr() as usize + off).is_multiple_of(4) && self.in_bounds(off, 4) {
            // SAFETY: in bounds and 4-byte aligned (every buffer starts 4-byte aligned).
            let v = unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off) as *const u32) };
            return u32::from_be(v);
        }
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_be_bytes(b)
    }

    /// Write a big-endian u32 (one 32-bit store at an aligned offset).
    pub fn write_be32(&self, off: usize, v: u32) -> bool {
        if (self.ptr.as_ptr() as usize + off).is_multiple_of(4) && self.in_bounds(off, 4) {
            // SAFETY: in bounds and 4-byte aligned.
            unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(off) as *mut u32, v.to_be()) };
            return true;
        }
        self.write(off, &v.to_be_bytes())
    }

    /// Replace the big-endian u32 at a 4-byte aligned offset with `new` if it still reads
    /// `current`, in one atomic compare-and-exchange (a driver's concurrent 32-bit store of a
    /// doorbell record is either before it, and the exchange fails, or after it); `Err` with
    /// what it reads otherwise (0 if out of bounds or misaligned).
    pub fn cas_be32(&self, off: usize, current: u32, new: u32) -> Result<(), u32> {
        if !(self.ptr.as_ptr() as usize + off).is_multiple_of(4) || !self.in_bounds(off, 4) {
            return Err(0);
        }
        // SAFETY: in bounds and 4-byte aligned; the driver writes this record with whole
        // 32-bit stores, never through a Rust reference, so an atomic view of it is sound.
        let a =
            unsafe { std::sync::atomic::AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) };
        a.compare_exchange(
            current.to_be(),
            new.to_be(),
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
        )
        .map(|_| ())
        .map_err(u32::from_be)
    }

    /// Load the 8 bytes at an 8-byte aligned offset with one 64-bit atomic load, as they sit in memory
    /// (native byte order, so `to_ne_bytes` gives the bytes back); 0 if out of bounds or
    /// misaligned. A 64-bit store of the driver (an 8-byte doorbell, one word of a BlueFlame
    /// copy) is seen whole or not at all.
    pub fn load_word(&self, off: usize) -> u64 {
        if !(self.ptr.as_ptr() as usize + off).is_multiple_of(8) || !self.in_bounds(off, 8) {
            return 0;
        }
        // SAFETY: in bounds and 8-byte aligned (checked on the address); the driver
        // writes this word with whole 64-bit stores or bytes, never through a Rust reference,
        // so an atomic view of it is sound: a concurrent store is no data race.
        let a =
            unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) };
        a.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Store 8 bytes at an 8-byte aligned offset with one 64-bit store; `false` (nothing
    /// written) if out of bounds or misaligned.
    pub fn store_word(&self, off: usize, v: u64) -> bool {
        if !(self.ptr.as_ptr() as usize + off).is_multiple_of(8) || !self.in_bounds(off, 8) {
            return false;
        }
        // SAFETY: in bounds and 8-byte aligned; an atomic view as in `load_word`.
        let a =
            unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) };
        a.store(v, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// Read 8 bytes as they sit in memory.
    pub fn read8(&self, off: usize) -> [u8; 8] {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        b
    }

    /// Read the 8 bytes at `off` (8-byte aligned) and put `new` there in one atomic exchange, as
    /// a device register takes a 64-bit doorbell whole: a driver's 64-bit store is seen entirely
    /// or not at all. `None` (nothing read or written) if out of bounds or unaligned.
    pub fn swap8(&self, off: usize, new: [u8; 8]) -> Option<[u8; 8]> {
        if !self.in_bounds(off, 8) {
            return None;
        }
        // SAFETY: in bounds (checked); the pointer is valid while `self` lives.
        let p = unsafe { self.ptr.as_ptr().add(off) };
        if !(p as usize).is_multiple_of(8) {
            return None;
        }
        // SAFETY: 8 bytes in bounds and 8-byte aligned; the driver writes this word with one
        // 64-bit store (never a Rust reference), so an atomic view of it is sound.
        let a = unsafe { std::sync::atomic::AtomicU64::from_ptr(p as *mut u64) };
        Some(
            a.swap(u64::from_ne_bytes(new), std::sync::atomic::Ordering::SeqCst)
                .to_ne_bytes(),
        )
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        if let Some((map, map_len)) = self.map {
            // SAFETY: mapped in `new` or `map_shared` with exactly this length; unmapped once.
            // A `user` buffer has no mapping and leaves the driver's memory alone.
            unsafe { libc::munmap(map.as_ptr() as *mut libc::c_void, map_len) };
        }
    }
}

/// A registered memory region: the window `[base, base + len)` of application memory the
/// device may access.
///
/// The pages of a region are the device's, not only the program's: the kernel pins them when
/// the region is registered (`ib_umem_get`, kernel `drivers/infiniband/core/umem.c`), so the
/// device still reaches them after the program unmapped their addresses. An emulation of the
/// kernel side that moves such pages out of the program's way instead of unmapping them
/// (`mremap`) tells the region where they went ([`Region::relocate`]); the device then reads
/// and writes them there.
#[derive(Clone, Debug)]
pub struct Region {
    base: u64,
    len: u64,
    /// Parts of the window whose pages now live elsewhere, sorted by address, disjoint.
    moved: Vec<Moved>,
}

/// Part of a region's window whose pages were moved to another address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Moved {
    /// The first virtual address of the part (in the window).
    va: u64,
    /// Its length.
    len: u64,
    /// Where its first byte is now.
    host: u64,
}

impl Region {
    /// Describe a registered region.
    ///
    /// # Safety
    /// `[base, base + len)` must be valid for reads and writes until the region is dropped by
    /// the device (the `reg_mr` contract of `mlx5_hw::Device`), or until its pages are moved
    /// and [`relocate`](Self::relocate) says where.
    pub unsafe fn new(base: u64, len: u64) -> Region {
        Region {
            base,
            len,
            moved: Vec::new(),
        }
    }

    /// Start address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[addr, addr + n)` lies inside the region.
    pub fn contains(&self, addr: u64, n: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(n)
                .is_some_and(|end| end <= self.base.saturating_add(self.len))
    }

    /// The parts of `[lo, hi)` inside the window whose pages are still at their own
    /// addresses (not moved), in order.
    pub fn unmoved(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let (lo, hi) = (
            lo.max(self.base),
            hi.min(self.base.saturating_add(self.len)),
        );
        let mut out = Vec::new();
        let mut cur = lo;
        for m in &self.moved {
            if cur >= hi {
                break;
            }
            if m.va + m.len <= cur {
                continue;
            }
            if m.va > cur {
                out.push((cur, m.va.min(hi)));
            }
            cur = cur.max(m.va + m.len);
        }
        if cur < hi {
            out.push((cur, hi));
        }
        out
    }

    /// The pages of `[lo, hi)` moved so that address `lo` is now at `host`: the parts of the
    /// window in that range not moved before are read and written there from now on (a part
    /// already moved stays where it went: its first move took its pages).
    ///
    /// # Safety
    /// The moved pages must stay valid for reads and writes until the region is dropped.
    pub unsafe fn relocate(&mut self, lo: u64, hi: u64, host: u64) {
        for (a, b) in self.unmoved(lo, hi) {
            let m = Moved {
                va: a,
                len: b - a,
                host: host + (a - lo),
            };
            let at = self.moved.partition_point(|x| x.va < a);
            self.moved.insert(at, m);
        }
    }

    /// Whether a moved part of the region lives in `[host, host + len)`.
    pub fn uses_moved(&self, host: u64, len: u64) -> bool {
        self.moved
            .iter()
            .any(|m| m.host < host.saturating_add(len) && host < m.host + m.len)
    }

    /// Call `f(address now, offset, length)` for the pieces of `[addr, addr + n)` (inside the
    /// window), each at the address its pages are at now.
    fn pieces(&self, addr: u64, n: u64, mut f: impl FnMut(u64, usize, usize)) {
        if self.moved.is_empty() {
            f(addr, 0, n as usize);
            return;
        }
        let end = addr + n;
        let mut cur = addr;
        while cur < end {
            let i = self.moved.partition_point(|m| m.va + m.len <= cur);
            let (at, upto) = match self.moved.get(i) {
                Some(m) if m.va <= cur => (m.host + (cur - m.va), (m.va + m.len).min(end)),
                Some(m) => (cur, m.va.min(end)),
                None => (cur, end),
            };
            f(at, (cur - addr) as usize, (upto - cur) as usize);
            cur = upto;
        }
    }

    /// Read `dst.len()` bytes at virtual address `addr`; `false` (nothing read) if any byte
    /// lies outside the region.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> bool {
        if !self.contains(addr, dst.len() as u64) {
            return false;
        }
        self.pieces(addr, dst.len() as u64, |at, off, n| {
            // SAFETY: inside the registered window, valid per the `new` contract, or a moved
            // part, valid per the `relocate` contract.
            unsafe { volatile_copy_from(at as usize as *const u8, &mut dst[off..off + n]) };
        });
        true
    }

    /// Write `src` at virtual address `addr`; `false` (nothing written) if any byte lies
    /// outside the region.
    pub fn write(&self, addr: u64, src: &[u8]) -> bool {
        if !self.contains(addr, src.len() as u64) {
            return false;
        }
        self.pieces(addr, src.len() as u64, |at, off, n| {
            // SAFETY: as in `read`.
            unsafe { volatile_copy_to(at as usize as *mut u8, &src[off..off + n]) };
        });
        true
    }
}

/// # Safety
/// `src` must be valid for `dst.len()` byte reads.
unsafe fn volatile_copy_from(src: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: caller guarantees `src + i` is readable.
        *d = unsafe { std::ptr::read_volatile(src.add(i)) };
    }
}

/// # Safety
/// `dst` must be valid for `src.len()` byte writes.
unsafe fn volatile_copy_to(dst: *mut u8, src: &[u8]) {
    for (i, s) in src.iter().enumerate() {
        // SAFETY: caller guarantees `dst + i` is writable.
        unsafe { std::ptr::write_volatile(dst.add(i), *s) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dma_buf_is_zeroed_aligned_and_checked() {
        let b = DmaBuf::new(100).unwrap();
        assert_eq!(b.len(), 128);
        assert_eq!(b.as_ptr() as usize % DMA_ALIGN, 0);
        assert_eq!(
            (b.as_ptr() as usize + b.len()) % PAGE_SIZE,
            0,
            "the buffer ends where the guard page begins"
        );
        assert_eq!(b.read_be32(0), 0);
        assert!(b.write_be32(8, 0x1234_5678));
        assert_eq!(b.read_be32(8), 0x1234_5678);
        assert!(!b.write(126, &[1, 2, 3]));
        let p = DmaBuf::new(2 * PAGE_SIZE).unwrap();
        assert_eq!(
            p.as_ptr() as usize % PAGE_SIZE,
            0,
            "whole pages stay page-aligned"
        );
        assert!(!b.read(usize::MAX, &mut [0u8; 2]));
        assert!(DmaBuf::new(0).is_none());
    }

    #[test]
    fn words_are_whole_aligned_and_checked() {
        let b = DmaBuf::new(64).unwrap();
        assert!(b.store_word(8, u64::from_ne_bytes([1, 2, 3, 4, 5, 6, 7, 8])));
        assert_eq!(b.read8(8), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b.load_word(8).to_ne_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(!b.store_word(4, 1), "misaligned");
        assert!(!b.store_word(64, 1), "out of bounds");
        assert_eq!(b.load_word(12), 0);
        b.write(16, &[0, 0, 0x01, 0xff]);
        assert_eq!(b.read_be32(16), 0x1ff);
        assert!(
            b.write_be32(18, 0x0102_0304),
            "unaligned records still work"
        );
        assert_eq!(b.read_be32(18), 0x0102_0304);
    }

    /// The guard page faults: checked in a child process (the fault would end this one).
    #[test]
    fn a_read_past_the_end_faults_at_once() {
        let b = DmaBuf::new(512).unwrap();
        // SAFETY: fork in a test; the child only reads memory and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: deliberately one byte past the buffer: the guard page, which faults.
            let v = unsafe { std::ptr::read_volatile(b.as_ptr().add(b.len())) };
            // SAFETY: never reached when the guard works; `_exit` is async-signal-safe.
            unsafe { libc::_exit(v as i32 + 100) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child made above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFSIGNALED(status),
            "the read past the end did not fault"
        );
        assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
    }

    #[test]
    fn region_refuses_every_byte_outside() {
        let mut mem = [0u8; 32];
        let base = mem.as_mut_ptr() as u64;
        // SAFETY: `mem` outlives the region.
        let r = unsafe { Region::new(base + 8, 16) };
        assert!(r.write(base + 8, &[1; 16]));
        assert!(!r.write(base + 7, &[2; 2]));
        assert!(!r.write(base + 23, &[2; 2]));
        assert!(!r.read(u64::MAX - 1, &mut [0; 4]));
        assert_eq!(mem[7], 0);
        assert_eq!(mem[8], 1);
        assert_eq!(mem[24], 0);
    }

    #[test]
    fn a_moved_part_is_read_and_written_where_it_went() {
        let mut mem = [0u8; 64];
        let mut away = [0u8; 64];
        let base = mem.as_mut_ptr() as u64;
        let host = away.as_mut_ptr() as u64;
        // SAFETY: `mem` and `away` outlive the region.
        let mut r = unsafe { Region::new(base, 48) };
        // SAFETY: as above.
        unsafe { r.relocate(base + 16, base + 32, host) };
        assert_eq!(
            r.unmoved(base, base + 64),
            [(base, base + 16), (base + 32, base + 48)]
        );
        assert!(r.write(base + 8, &[7; 32]));
        assert_eq!(&mem[8..16], &[7; 8]);
        assert_eq!(
            &mem[16..32],
            &[0; 16],
            "moved: not written at its old address"
        );
        assert_eq!(&away[..16], &[7; 16]);
        assert_eq!(&mem[32..40], &[7; 8]);
        // SAFETY: `host` points at `away`, alive.
        unsafe { std::ptr::write_volatile(host as usize as *mut u8, 9) };
        let mut got = [0u8; 4];
        assert!(r.read(base + 14, &mut got));
        assert_eq!(got, [7, 7, 9, 7]);
        // A second move of the same addresses (new pages mapped there since) changes nothing.
        // SAFETY: as above.
        unsafe { r.relocate(base, base + 64, host + 16) };
        assert_eq!(r.unmoved(base, base + 64), []);
        assert!(r.read(base + 14, &mut got));
        assert_eq!(
            got,
            [0, 0, 9, 7],
            "the first part went to host + 16 .. host + 32"
        );
        assert!(r.uses_moved(host, 1) && r.uses_moved(host + 63, 1));
        assert!(!r.uses_moved(host + 64, 8));
    }
}
