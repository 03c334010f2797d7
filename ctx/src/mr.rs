//! Memory regions that cannot dangle, and the soundness boundary of registered memory.
//!
//! **Owned or lent, never freed under the device.** An [`Mr`] from [`Pd::alloc_mr`] owns a
//! zeroed, page-aligned buffer that never moves; its `Drop` deregisters the region first and
//! frees the buffer after (if the device refuses to deregister, the buffer is leaked rather than
//! freed under it). [`Pd::with_registered`] lends caller memory for the length of a closure and
//! deregisters before the borrow ends: no `mem::forget` of a guard can leave the device writing
//! into memory the program has taken back, since the program never holds the guard.
//!
//! After deregistration returns, the device no longer reaches the memory through the region's
//! keys: a WQE posted earlier that names it completes with an error (`IBV_WC_LOC_PROT_ERR` for
//! the lkey, a remote access error for the rkey), as a ConnectX invalidates an mkey when it is
//! destroyed (rdma-core `mlx5_dereg_mr` → kernel `DESTROY_MKEY`; the software ConnectX looks the
//! key up at every access, `mlx5_sim::mr`).
//!
//! **Remote peers write at any time.** A peer holding the rkey may write the region whenever it
//! likes, and the NIC writes receive buffers and READ results while the program runs. So this
//! module never hands out `&[u8]` or `&mut [u8]` over registered memory (the compiler could
//! assume such bytes stable); every read and write is a bounds-checked copy made of relaxed
//! atomic loads and stores. A copy that races with the device may see a mix of old and new
//! bytes — the program orders its accesses with completions, as with any DMA — but never
//! undefined behaviour.
//!
//! **Which memory a WR may name.** The lean and generic posts take [`mlx5_qp::Sge`]s as plain
//! values (address, length, lkey) and do not check them: checking costs the hot path, and the
//! device checks every access against the key's region, PD and rights before it touches a byte
//! (IBTA Vol. 1 §10.6 memory protection; the sim's `mlx5_sim::mr`). With this crate every key
//! the device knows belongs to a live [`Mr`] whose memory stays valid while it is registered,
//! so an SGE can only ever make the device touch memory of a live region — or fail with a
//! protection error. [`Mr::sge`] builds an SGE checked against the region's bounds when it is
//! made (not per post), for callers who want the mistake found before the WR is written.
//!
//! Per entry point of the data path (all reached through [`crate::Qp`] / [`crate::Srq`]):
//!
//! | entry point | memory it names | checked by |
//! |---|---|---|
//! | `post_write_inline`, `post_send_inline`, `SendWr::inline` | none: the bytes are copied from a Rust slice into the WQE at post time | the type system (a borrowed `&[u8]`) |
//! | `post_write`, `post_send` (one SGE), `post` / `batch` with `SendWr::sges` | the SGEs' local memory, and the remote address of a WRITE/READ/atomic | the device, at execution: lkey (region, PD, bounds, LOCAL_WRITE for READ/atomic results) and, at the peer, rkey (region, bounds, remote rights); a miss is `IBV_WC_LOC_PROT_ERR` / `IBV_WC_REM_ACCESS_ERR`, nothing is touched |
//! | `post_recv`, `Srq::post_recv` | the receive SGEs | the device, when a message lands (lkey, bounds, LOCAL_WRITE) |
//! | `post_raw` | whatever the caller's WQE bytes name | the device, as above (and its WQE checks: a malformed WQE is an error completion) |
//!
//! The lean entry points stay lean: no lookup of the region per post.

use std::fmt;

use mlx5_hw::{AccessFlags, MrInfo};
use mlx5_qp::{RemoteAddr, Sge};

use crate::error::{Error, Result};
use crate::mem::{copy_from_device, copy_to_device, HostMem};
use crate::pd::Pd;

/// Every right a general-purpose buffer needs: local write (receives, READ and atomic results)
/// and remote READ, WRITE and atomics.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A registered memory region: an owned buffer ([`Pd::alloc_mr`]) or caller memory lent for
/// a closure ([`Pd::with_registered`]). See the [module docs](self) for what is guaranteed.
pub struct Mr {
    info: MrInfo,
    ptr: *mut u8,
    len: usize,
    /// The buffer, when the region owns it; `None` when it is lent.
    owned: Option<HostMem>,
    pd: Pd,
}

// SAFETY: the region's memory is reached only through `copy_from_device`/`copy_to_device`
// (relaxed atomics, bounds-checked here), so handles on several threads cannot race in the
// program's memory model; the raw pointer carries no thread affinity.
unsafe impl Send for Mr {}
// SAFETY: as above: every `&self` method is an atomic copy or reads immutable fields.
unsafe impl Sync for Mr {}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.info.lkey))
            .field("rkey", &format_args!("{:#x}", self.info.rkey))
            .field("owned", &self.owned.is_some())
            .finish()
    }
}

impl Mr {
    pub(crate) fn register_owned(pd: &Pd, mem: HostMem, access: AccessFlags) -> Result<Mr> {
        let (ptr, len) = (mem.as_ptr(), mem.len());
        // SAFETY: `mem` is owned by the `Mr` returned and freed only after `dereg_mr` succeeded
        // (Drop below); it never moves (heap or mmap memory behind a pointer).
        let info = unsafe { pd.context().device().reg_mr(pd.id(), ptr, len, access) }?;
        Ok(Mr {
            info,
            ptr,
            len,
            owned: Some(mem),
            pd: pd.clone(),
        })
    }

    /// Lend `buf`; only [`Pd::with_registered`] calls this, and it drops the `Mr` before the
    /// borrow of `buf` ends.
    pub(crate) fn register_borrowed(pd: &Pd, buf: &mut [u8], access: AccessFlags) -> Result<Mr> {
        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
        // SAFETY: `buf` stays borrowed until `with_registered` returns, and it drops this `Mr`
        // (deregistering, or aborting if the device refuses) before that.
        let info = unsafe { pd.context().device().reg_mr(pd.id(), ptr, len, access) }?;
        Ok(Mr {
            info,
            ptr,
            len,
            owned: None,
            pd: pd.clone(),
        })
    }

    /// Deregister a lent region now (the end of [`Pd::with_registered`]).
    pub(crate) fn deregister_borrowed(self) {
        drop(self);
    }

    /// The registration as the device reported it.
    pub fn info(&self) -> MrInfo {
        self.info
    }

    /// The PD the region belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// Start address (what SGEs and remote addresses name).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for an owned one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key (data segments).
    pub fn lkey(&self) -> u32 {
        self.info.lkey
    }

    /// Remote key (given to peers).
    pub fn rkey(&self) -> u32 {
        self.info.rkey
    }

    /// Access rights granted at registration.
    pub fn access(&self) -> AccessFlags {
        self.info.access
    }

    fn check(&self, what: &'static str, offset: usize, len: usize) -> Result<*mut u8> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.ptr.wrapping_add(offset)),
            _ => Err(Error::OutOfBounds {
                what,
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copy `dst.len()` bytes from `offset` into `dst`.
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let p = self.check("read", offset, dst.len())?;
        // SAFETY: in bounds (checked); the memory is live while `self` is (owned or lent) and
        // reached only atomically.
        unsafe { copy_from_device(p, dst) };
        Ok(())
    }

    /// `len` bytes from `offset`.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        self.check("read", offset, len)?;
        let mut v = vec![0u8; len];
        self.read_into(offset, &mut v)?;
        Ok(v)
    }

    /// Copy `src` to `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        let p = self.check("write", offset, src.len())?;
        // SAFETY: in bounds (checked); live and reached only atomically, as in `read_into`.
        unsafe { copy_to_device(src, p) };
        Ok(())
    }

    /// Set `len` bytes from `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check("fill", offset, len)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// One byte.
    pub fn read_u8(&self, offset: usize) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read_into(offset, &mut b)?;
        Ok(b[0])
    }

    /// Store one byte.
    pub fn write_u8(&self, offset: usize, v: u8) -> Result<()> {
        self.write(offset, &[v])
    }

    /// An 8-byte value in host order: how atomic targets and 8-byte atomic results sit in
    /// memory on a device in host-endianness mode, which `mlx5_core` selects whenever the
    /// device offers it (and Soft-RoCE and the software ConnectX by default;
    /// `docs/wqe-layout.md`, "Reply byte order").
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_into(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Store an 8-byte value in host order (an atomic target, [`Mr::read_u64`]).
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<()> {
        self.write(offset, &v.to_ne_bytes())
    }

    /// An 8-byte big-endian value: a device in big-endian atomic mode
    /// (`atomic_req_8B_endianness_mode` 0; `docs/wqe-layout.md`), or data sent big-endian.
    pub fn read_u64_be(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_into(offset, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Store an 8-byte big-endian value ([`Mr::read_u64_be`]).
    pub fn write_u64_be(&self, offset: usize, v: u64) -> Result<()> {
        self.write(offset, &v.to_be_bytes())
    }

    /// A gather/scatter entry for `len` bytes at `offset`, checked against the region now.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        self.check("sge", offset, len as usize)?;
        Ok(Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.info.lkey,
        })
    }

    /// The remote address `offset` bytes into this region (what a peer's RDMA names).
    pub fn remote(&self, offset: usize) -> Result<RemoteAddr> {
        self.check("remote address", offset, 0)?;
        Ok(RemoteAddr::new(self.addr() + offset as u64, self.info.rkey))
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let dev = self.pd.context().device();
        match dev.dereg_mr(self.info.id) {
            Ok(()) => {} // `owned` is freed after this, by field drop.
            Err(e) => match self.owned.take() {
                Some(mem) => {
                    tracing::error!(target: "mlx5_ctx", lkey = self.info.lkey, error = %e,
                        "dereg_mr failed: leaking the buffer rather than freeing memory the \
                         device may still use");
                    std::mem::forget(mem);
                }
                None => {
                    // The borrow of the caller's memory ends when we return; the device would
                    // keep it. No safe way on: stop.
                    eprintln!(
                        "mlx5-ctx: dereg_mr of lent memory failed ({e}); aborting, since the \
                         device could otherwise write memory the program has taken back"
                    );
                    std::process::abort();
                }
            },
        }
    }
}
