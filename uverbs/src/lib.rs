//! # mlx5-sim-uverbs: the kernel side of an mlx5 device, in user space
//!
//! `libmlx5sim.so` is a preload library: a program started with it in `LD_PRELOAD` (the
//! `mlx5sim` launcher does that) finds an mlx5 device, `mlx5_0`, and the unmodified rdma-core
//! it loads (libibverbs and the `libmlx5` provider, Debian's rdma-core 44) drives it exactly as
//! it drives a ConnectX: it reads the device from sysfs, opens `/dev/infiniband/uverbs0`, writes
//! uverbs commands to it, maps its UAR pages, allocates the rings itself and rings doorbells.
//! Behind the descriptor is the software ConnectX (`mlx5-sim`): every WQE the program posts is
//! executed by it, every CQE it polls written by it, and everything a driver can get wrong
//! without hardware noticing is reported (`mlx5_sim::DriverBug`).
//!
//! `docs/rdma-core-on-the-software-connectx.md` is the user's page: how to run a program, what
//! is emulated and what is not, the facts from rdma-core and the kernel this rests on.
//!
//! ## Modules
//!
//! - the boundary: [`hooks`] (the C library functions this library defines) and [`sys`] (the
//!   real ones, and the program's memory by address) — the only modules with `unsafe`, apart
//!   from the one-line views of the program's rings and doorbell records the create commands
//!   make (`DmaBuf::user`, in [`objects::cq`], [`objects::qp`], [`objects::srq`]), the
//!   registration of a memory region ([`objects::mr`]), a borrowed descriptor
//!   ([`objects::device`], [`emu`]), a zeroed `struct stat` ([`emu`], [`objects::srq`]) and the
//!   liveness probe of a stale tree's process ([`sysfs::sweep`]), each with its reason;
//! - [`fds`]: which descriptors are the emulation's (a lock-free test for every hook);
//! - [`emu`]: the state behind one lock and what the hooks ask of it; [`config`] (the
//!   environment), [`node`] (this process's device, its address, faults, capture),
//!   [`faultspec`] and [`control`] (fault rules from a line or a file), [`sysfs`] (the tree
//!   libibverbs reads), [`log`], [`report`];
//! - the command ABI: [`abi`] (the uapi structs), [`cmd`] (framing, errno), [`context`] (a
//!   descriptor's objects), [`uar`] (UAR pages and BlueFlame registers), [`events`]
//!   (completion channels, asynchronous events), [`objects`] (one module per object family).

// The library has no Rust API (a cdylib): its documentation is about its modules, which are
// private, and links to them.
#![allow(rustdoc::private_intra_doc_links)]
// Unit tests build without the hooks, which call most of the rest.
#![cfg_attr(test, allow(dead_code))]

mod abi;
mod cmd;
mod config;
mod context;
mod control;
mod emu;
mod events;
mod faultspec;
mod fds;
#[cfg(not(test))]
mod hooks;
mod log;
mod node;
mod objects;
mod pinned;
mod report;
mod sys;
mod sysfs;
mod uar;

use std::sync::atomic::AtomicBool;
#[cfg(not(test))]
use std::sync::atomic::Ordering;

/// Set in a child after `fork`: the parent's device is not its own (no thread runs it), so the
/// child gets no emulation and must not remove the parent's tree at exit.
static FORKED: AtomicBool = AtomicBool::new(false);

/// The library's constructor: point libibverbs at this process's sysfs tree (made on first
/// use, `emu::ensure`) before anything reads `SYSFS_PATH`, and arrange for a forked child to
/// drop the parent's state.
#[cfg(not(test))]
extern "C" fn init() {
    let _b = emu::Busy::enter();
    std::env::set_var("SYSFS_PATH", emu::tree_root());
    // SAFETY: registering a plain function as the child handler; no other handler.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
}

/// In a forked child: forget every descriptor of the parent's emulation.
#[cfg(not(test))]
extern "C" fn after_fork_child() {
    FORKED.store(true, Ordering::SeqCst);
    fds::clear_all();
    pinned::forget_after_fork();
}

/// The library's destructor: the report, the fabric thread stopped, the tree removed.
#[cfg(not(test))]
extern "C" fn fini() {
    if FORKED.load(Ordering::SeqCst) {
        return;
    }
    let _b = emu::Busy::enter();
    let node = emu::lock().as_ref().and_then(|e| e.node.clone());
    if let Some(n) = node {
        n.stop();
        report::at_exit(&n);
        let _ = std::fs::remove_dir_all(&n.tree);
    }
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
