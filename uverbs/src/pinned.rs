//! Registered memory stays the device's after the program unmaps it, as the kernel's pinned
//! pages do.
//!
//! The kernel takes a reference on every page of a memory region when it is registered
//! (`ib_umem_get`, kernel `drivers/infiniband/core/umem.c`, through `pin_user_pages_fast`) and
//! drops it at deregistration (`ib_umem_release`). A program that unmaps the memory of a region
//! it has not deregistered only loses its own mapping: the pages live on, the adapter still
//! reads and writes them, and they are freed when the region is deregistered. The software
//! ConnectX reads the program's memory at the region's addresses, so an unmapped page would end
//! the process with SIGSEGV in the device's thread.
//!
//! So before `munmap` (and `mmap` with `MAP_FIXED`, which replaces what was mapped) the hooks
//! ask [`before_unmap`]: when the range holds pages a registered region still uses at their own
//! addresses, those pages are moved out of the program's way with `mremap` (to an address the
//! kernel picks, reserved first), with the device stopped, and every region reads and writes
//! them at their new place (`mlx5_sim::kernel::SimDevice::move_registered_pages`); the
//! program's call then removes what is left. The program's addresses are free again, as after
//! a real `munmap`. When the last region using moved pages is deregistered (or its context
//! closed), [`release_unused`] unmaps them, as `ib_umem_release` frees the pages.
//!
//! Not seen: an unmapping inside the C library itself (`free` of a large `malloc` block calls
//! glibc's internal `munmap`, a heap trimmed with `brk`), `mremap` and `madvise(MADV_DONTNEED)`
//! by the program; after them the device may touch a page that is gone. A range `mremap`
//! cannot move (a device mapping) is said on standard error.
//!
//! The check costs the hooks one atomic load while no region is registered, and a short lock
//! on this module's own list when one is; the fabric's lock is taken only when a range holds
//! registered pages, and never while this module's list is locked (the device's thread may
//! unmap its own buffers while holding the fabric's lock).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use mlx5_sim::kernel::MovedPages;

use crate::emu::Busy;
use crate::node::Node;

/// The registered regions (`(MR id, start, end)`) and the pages moved for them.
struct State {
    mrs: Vec<(u32, u64, u64)>,
    moved: Vec<MovedPages>,
}

static STATE: Mutex<State> = Mutex::new(State {
    mrs: Vec::new(),
    moved: Vec::new(),
});
/// How many regions are registered (the hooks' fast path).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The process's device.
static NODE: OnceLock<Arc<Node>> = OnceLock::new();
/// Serialises [`release_unused`], so moved pages are unmapped once.
static RELEASE: Mutex<()> = Mutex::new(());

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The device was made.
pub fn set_node(node: Arc<Node>) {
    let _ = NODE.set(node);
}

/// Region `id` covers `[start, start + len)` from now on.
pub fn registered(id: u32, start: u64, len: u64) {
    let mut s = state();
    s.mrs.push((id, start, start.saturating_add(len)));
    COUNT.store(s.mrs.len(), Ordering::Release);
}

/// Region `id` was deregistered: forget it and unmap the moved pages no region uses now.
pub fn deregistered(id: u32) {
    {
        let mut s = state();
        s.mrs.retain(|m| m.0 != id);
        COUNT.store(s.mrs.len(), Ordering::Release);
    }
    release_unused();
}

#[cfg_attr(test, allow(dead_code))]
/// In a child after `fork`: the parent's regions are not the child's (its pages are copies),
/// and the device is not its own. Only an atomic store: another thread of the parent may have
/// held the list's lock at the fork.
pub fn forget_after_fork() {
    COUNT.store(0, Ordering::Release);
}

#[cfg_attr(test, allow(dead_code))]
/// The program is about to unmap `[addr, addr + len)` (`munmap`, or `mmap` with `MAP_FIXED`
/// over it): move the pages registered regions use out of its way first.
pub fn before_unmap(addr: u64, len: u64) {
    if COUNT.load(Ordering::Acquire) == 0 || len == 0 || crate::FORKED.load(Ordering::Relaxed) {
        return;
    }
    let page = crate::sys::page_size();
    if !addr.is_multiple_of(page) {
        return; // The call fails with EINVAL and unmaps nothing.
    }
    let Some(end) = addr
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(page))
    else {
        return;
    };
    if !state().mrs.iter().any(|&(_, a, b)| a < end && addr < b) {
        return;
    }
    let Some(node) = NODE.get() else { return };
    // This thread's own mmap, mremap and file reads below go straight to the C library.
    let _b = Busy::enter();
    // SAFETY: `move_pages` returns an address holding exactly the pages it was given, which
    // stay mapped until `release_unused` finds no region using them.
    let moved = unsafe {
        node.dev
            .move_registered_pages(addr, end - addr, page, &mut |va, len| {
                move_pages(va, len, (addr, end))
            })
    };
    for m in &moved {
        tracing::info!(
            va = format_args!("{:#x}", m.va),
            len = m.len,
            host = format_args!("{:#x}", m.host),
            "registered pages kept for the device after the program unmapped them"
        );
    }
    state().moved.extend(moved);
}

/// Unmap the moved pages no registered region uses any more.
pub fn release_unused() {
    let Some(node) = NODE.get() else { return };
    let _r = RELEASE.lock().unwrap_or_else(|e| e.into_inner());
    let list: Vec<MovedPages> = state().moved.clone();
    if list.is_empty() {
        return;
    }
    // The fabric's lock is taken with this module's list unlocked.
    let dead: Vec<MovedPages> = list
        .into_iter()
        .filter(|m| !node.dev.moved_pages_in_use(m.host, m.len))
        .collect();
    let _b = Busy::enter();
    for m in &dead {
        crate::sys::munmap(m.host as usize as *mut libc::c_void, m.len as usize);
        tracing::info!(
            va = format_args!("{:#x}", m.va),
            len = m.len,
            "kept registered pages freed: no region uses them any more"
        );
    }
    state().moved.retain(|m| !dead.contains(m));
}

/// A reservation of `len` bytes of address space outside `avoid` (the range the program is
/// about to unmap: pages moved out of it before free addresses in it the kernel could hand out
/// again), or `None`.
fn reserve(len: usize, avoid: (u64, u64)) -> Option<u64> {
    let mut blocked = Vec::new();
    let mut got = None;
    for _ in 0..8 {
        let p = crate::sys::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            break;
        }
        let a = p as u64;
        if a < avoid.1 && avoid.0 < a + len as u64 {
            blocked.push(p); // Held, so the next try lands elsewhere.
            continue;
        }
        got = Some(a);
        break;
    }
    for p in blocked {
        crate::sys::munmap(p, len);
    }
    got
}

/// Move the `len` bytes of pages at `va` to a new address outside `avoid`; `None` (nothing
/// moved) if they cannot all be moved.
fn move_pages(va: u64, len: u64, avoid: (u64, u64)) -> Option<u64> {
    let n = len as usize;
    // A place for them, reserved so that MREMAP_FIXED replaces nothing of the program's.
    let Some(dest) = reserve(n, avoid) else {
        crate::emu::say(&format!(
            "mlx5sim: cannot keep {len} bytes of registered memory at {va:#x} the program unmaps \
             (no address space); the device will fault if it touches them\n"
        ));
        return None;
    };
    // One mapping: one call. Several (different protections, files): one call each.
    let pieces = if crate::sys::mremap_fixed(va, len, dest) {
        return Some(dest);
    } else {
        mappings_in(va, va + len)
    };
    let mut done = Vec::new();
    for &(a, b) in &pieces {
        if !crate::sys::mremap_fixed(a, b - a, dest + (a - va)) {
            let e = std::io::Error::last_os_error();
            // Put back what moved, so nothing is half kept.
            for &(a, b) in &done {
                crate::sys::mremap_fixed(dest + (a - va), b - a, a);
            }
            crate::sys::munmap(dest as usize as *mut libc::c_void, n);
            crate::emu::say(&format!(
                "mlx5sim: cannot keep registered memory at {a:#x}..{b:#x} the program unmaps \
                 ({e}); the device will fault if it touches it\n"
            ));
            return None;
        }
        done.push((a, b));
    }
    Some(dest)
}

/// The parts of `[lo, hi)` each mapping of the process covers (`/proc/self/maps`), in order.
fn mappings_in(lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let range = l.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            let a = u64::from_str_radix(a, 16).ok()?;
            let b = u64::from_str_radix(b, 16).ok()?;
            (a < hi && lo < b).then(|| (a.max(lo), b.min(hi)))
        })
        .collect()
}
