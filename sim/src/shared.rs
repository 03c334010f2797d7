//! The state every handle of one fabric shares ([`crate::Fabric`], its [`crate::SimDevice`]s,
//! its [`crate::Faults`] controls and threads): the world behind its lock, each device's link
//! layer, and the waker of sleeping fabric threads ([`crate::fabric`] describes the sleeping).

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use mlx5_hw::LinkLayer;

use crate::notify::EventFd;
use crate::world::World;

/// Wakes fabric threads sleeping in `ppoll` (device calls and [`FabricThread`]'s drop).
pub(crate) struct Waker {
    /// `None` if no eventfd could be created: the threads then only sleep with a timeout.
    pub(crate) fd: Option<EventFd>,
    /// Threads sleeping (or about to): set under the world lock before it is released, so a
    /// device call, which takes the lock, always sees it.
    pub(crate) parked: AtomicU32,
}

impl Waker {
    /// Wake every sleeping fabric thread (nothing to do, and no system call, when none
    /// sleeps).
    pub(crate) fn kick(&self) {
        if self.parked.load(Ordering::SeqCst) > 0 {
            self.force();
        }
    }

    /// Wake them even if none is known to sleep.
    pub(crate) fn force(&self) {
        if let Some(fd) = &self.fd {
            fd.signal();
        }
    }

    /// The eventfd to wait on.
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }
}

/// What every handle of one fabric shares.
pub(crate) struct Inner {
    pub(crate) world: Mutex<World>,
    pub(crate) link_layer: Mutex<Vec<LinkLayer>>,
    pub(crate) waker: Waker,
}

impl Inner {
    /// Lock the world (a poisoned lock is recovered: the state is still consistent enough to
    /// inspect, and the sim never panics on bad input).
    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}
