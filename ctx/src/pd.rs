//! Protection domains.

use std::fmt;
use std::sync::Arc;

use mlx5_hw::{AccessFlags, AhAttr, PdId};

use crate::ah::Ah;
use crate::context::Context;
use crate::error::Result;
use crate::mem::HostMem;
use crate::mr::{all_access, Mr};
use crate::qp::{Qp, QpInit};
use crate::srq::Srq;

/// A protection domain. Cloning gives another handle; the device PD is freed when the last
/// handle and the last object in it (MR, QP, SRQ, AH) are gone — never while one of them
/// lives, since each holds the PD.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.device().dealloc_pd(self.id) {
            tracing::warn!(target: "mlx5_ctx", pd = self.id.0, error = %e, "dealloc_pd failed");
        }
    }
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.inner.ctx.name())
            .field("id", &self.inner.id.0)
            .finish()
    }
}

impl Pd {
    pub(crate) fn new(ctx: &Context) -> Result<Pd> {
        let id = ctx.device().alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                id,
            }),
        })
    }

    /// The device handle of this PD.
    pub fn id(&self) -> PdId {
        self.inner.id
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// A zeroed, page-aligned buffer of `len` bytes registered with local write and every
    /// remote right (READ, WRITE, atomics).
    pub fn alloc_mr(&self, len: usize) -> Result<Mr> {
        self.alloc_mr_with(len, all_access(), false)
    }

    /// A zeroed buffer of `len` bytes registered with `access`; `huge` backs it with huge pages
    /// (2 MiB, `MAP_HUGETLB`; they must be reserved, `/proc/sys/vm/nr_hugepages`).
    pub fn alloc_mr_with(&self, len: usize, access: AccessFlags, huge: bool) -> Result<Mr> {
        let mem = HostMem::new(len, huge)?;
        Mr::register_owned(self, mem, access)
    }

    /// Register the caller's memory `buf` for the duration of `f`, which gets the region; the
    /// region is deregistered before this returns (also when `f` panics), so the device never
    /// touches `buf` after the borrow ends. The region's accessors (volatile copies) are the way
    /// to read and write `buf` meanwhile.
    pub fn with_registered<R>(
        &self,
        buf: &mut [u8],
        access: AccessFlags,
        f: impl FnOnce(&Mr) -> R,
    ) -> Result<R> {
        let mr = Mr::register_borrowed(self, buf, access)?;
        let out = f(&mr);
        mr.deregister_borrowed();
        Ok(out)
    }

    /// Create a QP in Reset, as `init` describes it; its CQs (and SRQ) must come from this
    /// PD's device.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        Qp::new(self, init)
    }

    /// Create a shared receive queue of at least `max_wr` receives of `max_sge` entries each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        Srq::new(self, max_wr, max_sge)
    }

    /// Create an address handle for UD sends.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        Ah::new(self, attr)
    }
}
