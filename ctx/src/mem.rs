//! Memory the device may read and write behind the program's back: the owned buffers of memory
//! regions, and the volatile copies every access to registered memory goes through.
//!
//! This is one of the two modules of this crate with `unsafe` (the other is `datapath.rs`).
//! The soundness argument, in short: registered memory is only ever reached through raw
//! pointers and `read_volatile`/`write_volatile` of bytes (never a `&[u8]` or `&mut [u8]`
//! over it, which the compiler could assume stable while the NIC or a remote peer writes it),
//! every access is bounds-checked against the allocation first, and an allocation is freed only
//! after the device has let go of it ([`crate::Mr`]'s `Drop` deregisters first).

use std::ptr::NonNull;

use crate::error::{Error, Result};

/// The page size every owned buffer is aligned to (x86_64 and aarch64 Linux base pages; a
/// NIC registers memory in whole pages, rdma-core `ibv_reg_mr`).
pub const PAGE: usize = 4096;
/// Huge page size used with `huge` (the x86_64 and aarch64 default `MAP_HUGETLB` size).
pub const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, page-aligned allocation for a memory region.
#[derive(Debug)]
pub(crate) struct HostMem {
    ptr: NonNull<u8>,
    /// Bytes the caller asked for.
    len: usize,
    /// Bytes mapped (whole pages).
    cap: usize,
}

// SAFETY: the allocation is plain memory reached only through raw pointers and volatile
// accesses (below); no reference into it is ever handed out, so moving or sharing the owner
// across threads is sound.
unsafe impl Send for HostMem {}
// SAFETY: as above.
unsafe impl Sync for HostMem {}

impl HostMem {
    /// `len` zeroed bytes (at least one), rounded up to whole pages (huge pages with `huge`):
    /// an anonymous private mapping, zeroed and page-aligned by the kernel.
    pub(crate) fn new(len: usize, huge: bool) -> Result<HostMem> {
        let page = if huge { HUGE_PAGE } else { PAGE };
        let fail = Error::Alloc { len, huge };
        let cap = len
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or(Error::Alloc { len, huge })?;
        let flags =
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if huge { libc::MAP_HUGETLB } else { 0 };
        // SAFETY: an anonymous private mapping of `cap` bytes at an address the kernel picks;
        // no existing memory is affected. MAP_FAILED is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail);
        }
        let ptr = NonNull::new(p as *mut u8).ok_or(fail)?;
        Ok(HostMem { ptr, len, cap })
    }

    /// Start of the buffer.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes asked for (the region registered is this long).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        // With the `quarantine` feature (tests) the pages stay reserved but inaccessible, so a
        // use after free faults at once instead of reading whatever is mapped there next.
        #[cfg(feature = "quarantine")]
        // SAFETY: the mapping was made by `new` with this address and length; the MR that
        // registered it was deregistered before (crate::Mr's Drop).
        unsafe {
            libc::mprotect(self.ptr.as_ptr().cast(), self.cap, libc::PROT_NONE);
        }
        #[cfg(not(feature = "quarantine"))]
        // SAFETY: as above; unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.cap);
        }
    }
}

// Accesses are relaxed atomic loads and stores: as cheap as plain moves, never elided or
// merged by the compiler (unlike plain accesses, which it may assume no one else changes), and
// free of data races between threads of this program. What the device or a remote peer writes
// meanwhile is outside the program's memory model, as with any DMA; a copy racing with it may
// see old bytes, new bytes or a mix, never undefined behaviour.

/// Copy `dst.len()` bytes from `src` (8 bytes at a time where aligned).
///
/// # Safety
/// `src..src + dst.len()` is inside one live allocation that is only accessed atomically.
pub(crate) unsafe fn copy_from_device(src: *const u8, dst: &mut [u8]) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
    let mut i = 0;
    while i < dst.len() {
        // SAFETY: `src + i` is in bounds (caller) and u8 has no alignment.
        let p = unsafe { src.add(i) };
        if (p as usize).is_multiple_of(8) && dst.len() - i >= 8 {
            // SAFETY: 8 bytes in bounds, 8-byte aligned (checked); atomic access only.
            let v = unsafe { AtomicU64::from_ptr(p as *mut u64) }.load(Relaxed);
            dst[i..i + 8].copy_from_slice(&v.to_ne_bytes());
            i += 8;
        } else {
            // SAFETY: in bounds; atomic access only.
            dst[i] = unsafe { AtomicU8::from_ptr(p as *mut u8) }.load(Relaxed);
            i += 1;
        }
    }
}

/// Copy `src` to `dst` (8 bytes at a time where aligned).
///
/// # Safety
/// `dst..dst + src.len()` is inside one live allocation that is only accessed atomically.
pub(crate) unsafe fn copy_to_device(src: &[u8], dst: *mut u8) {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
    let mut i = 0;
    while i < src.len() {
        // SAFETY: `dst + i` is in bounds (caller).
        let p = unsafe { dst.add(i) };
        if (p as usize).is_multiple_of(8) && src.len() - i >= 8 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&src[i..i + 8]);
            // SAFETY: 8 bytes in bounds, 8-byte aligned (checked); atomic access only.
            unsafe { AtomicU64::from_ptr(p as *mut u64) }.store(u64::from_ne_bytes(w), Relaxed);
            i += 8;
        } else {
            // SAFETY: in bounds; atomic access only.
            unsafe { AtomicU8::from_ptr(p) }.store(src[i], Relaxed);
            i += 1;
        }
    }
}
