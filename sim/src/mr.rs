//! Protection domains and memory regions: keys, bounds and access rights.
//!
//! A ConnectX checks every memory access against the memory key's context: the key must be
//! valid, belong to the QP's protection domain, cover the whole range, and grant the access
//! (IBTA Vol 1 §10.6.3 "Memory region access rights"; rdma-core `ibv_reg_mr(3)`). Violations
//! end in LOCAL_PROT (0x04) for an lkey and a remote access error NAK for an rkey
//! (rdma-core `mlx5dv.h` syndromes). On mlx5 the lkey and the rkey of an MR are the same
//! mkey; the software ConnectX makes them differ (low byte) so that a driver that puts an
//! rkey where an lkey belongs is caught.

use std::collections::HashMap;

use mlx5_hw::AccessFlags;

use crate::mem::Region;

/// Low byte of every lkey the device hands out.
const LKEY_VARIANT: u32 = 0x4c;
/// Low byte of every rkey.
const RKEY_VARIANT: u32 = 0x72;

/// A registered memory region.
#[derive(Debug)]
pub struct Mr {
    /// Protection domain.
    pub pd: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Access rights.
    pub access: AccessFlags,
    /// The window of application memory.
    pub region: Region,
}

/// Why a memory access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemError {
    /// No MR has this key.
    BadKey,
    /// The MR belongs to another protection domain.
    WrongPd,
    /// The range is not inside the MR.
    OutOfBounds,
    /// The MR (or the QP) lacks the access right.
    NoAccess,
}

/// The MRs of a device, indexed by key.
#[derive(Debug, Default)]
pub struct MrTable {
    mrs: HashMap<u32, Mr>,
    next_index: u32,
}

impl MrTable {
    /// Register a region; returns (index, lkey, rkey).
    pub fn insert(&mut self, pd: u32, region: Region, access: AccessFlags) -> (u32, u32, u32) {
        // Index 0 and 1 are never used so that no lkey equals MLX5_INVALID_LKEY (0x100).
        self.next_index = self.next_index.max(1) + 1;
        let idx = self.next_index & 0x00ff_ffff;
        let lkey = (idx << 8) | LKEY_VARIANT;
        let rkey = (idx << 8) | RKEY_VARIANT;
        self.mrs.insert(
            idx,
            Mr {
                pd,
                lkey,
                rkey,
                access,
                region,
            },
        );
        (idx, lkey, rkey)
    }

    /// How many MRs are registered.
    pub fn len(&self) -> usize {
        self.mrs.len()
    }

    /// Whether no MR is registered.
    pub fn is_empty(&self) -> bool {
        self.mrs.is_empty()
    }

    /// Remove an MR by index.
    pub fn remove(&mut self, idx: u32) -> Option<Mr> {
        self.mrs.remove(&idx)
    }

    /// Every MR's region, to move pages under them ([`crate::mem::Region::relocate`]).
    pub fn regions_mut(&mut self) -> impl Iterator<Item = &mut Region> {
        self.mrs.values_mut().map(|m| &mut m.region)
    }

    /// Every MR's region.
    pub fn regions(&self) -> impl Iterator<Item = &Region> {
        self.mrs.values().map(|m| &m.region)
    }

    /// Whether any MR belongs to `pd`.
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.mrs.values().any(|m| m.pd == pd)
    }

    fn lookup(&self, key: u32, variant: u32) -> Option<&Mr> {
        if key & 0xff != variant {
            return None;
        }
        self.mrs.get(&(key >> 8))
    }

    /// Check a local access through `lkey` of `len` bytes at `addr` for a QP in `pd`;
    /// `write` asks for LOCAL_WRITE (receive buffers, READ and atomic targets).
    pub fn local(
        &self,
        lkey: u32,
        pd: u32,
        addr: u64,
        len: u64,
        write: bool,
    ) -> Result<&Mr, MemError> {
        let mr = self.lookup(lkey, LKEY_VARIANT).ok_or(MemError::BadKey)?;
        if mr.pd != pd {
            return Err(MemError::WrongPd);
        }
        if !mr.region.contains(addr, len) {
            return Err(MemError::OutOfBounds);
        }
        if write && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(MemError::NoAccess);
        }
        Ok(mr)
    }

    /// Check a remote access through `rkey` needing `need` (REMOTE_WRITE/READ/ATOMIC).
    pub fn remote(
        &self,
        rkey: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<&Mr, MemError> {
        let mr = self.lookup(rkey, RKEY_VARIANT).ok_or(MemError::BadKey)?;
        if mr.pd != pd {
            return Err(MemError::WrongPd);
        }
        if !mr.region.contains(addr, len) {
            return Err(MemError::OutOfBounds);
        }
        if !mr.access.contains(need) {
            return Err(MemError::NoAccess);
        }
        Ok(mr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_and_are_checked() {
        let mut t = MrTable::default();
        let mut mem = [0u8; 64];
        let base = mem.as_mut_ptr() as u64;
        // SAFETY: `mem` outlives the table in this test.
        let r = unsafe { Region::new(base, 64) };
        let (_, lkey, rkey) = t.insert(7, r, AccessFlags::REMOTE_READ);
        assert_ne!(lkey, rkey);
        assert_ne!(lkey, 0x100);
        assert!(t.local(lkey, 7, base, 64, false).is_ok());
        assert_eq!(
            t.local(rkey, 7, base, 1, false).unwrap_err(),
            MemError::BadKey
        );
        assert_eq!(
            t.local(lkey, 8, base, 1, false).unwrap_err(),
            MemError::WrongPd
        );
        assert_eq!(
            t.local(lkey, 7, base + 1, 64, false).unwrap_err(),
            MemError::OutOfBounds
        );
        assert_eq!(
            t.local(lkey, 7, base, 8, true).unwrap_err(),
            MemError::NoAccess
        );
        assert!(t.remote(rkey, 7, base, 8, AccessFlags::REMOTE_READ).is_ok());
        assert_eq!(
            t.remote(rkey, 7, base, 8, AccessFlags::REMOTE_WRITE)
                .unwrap_err(),
            MemError::NoAccess
        );
    }
}
