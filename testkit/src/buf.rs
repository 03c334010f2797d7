//! A buffer registered with a software ConnectX, for the data path's and the connection
//! crate's end-to-end tests (`qp/tests/it`, `connect/tests/it`).

use mlx5_hw::{AccessFlags, Device, MrInfo, PdId};
use mlx5_qp::{RemoteAddr, Sge};
use mlx5_sim::SimDevice;

/// Access rights every test buffer gets unless a test asks for less.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A registered buffer (8-byte aligned, zeroed).
pub struct Buf {
    mem: Vec<u64>,
    /// The registration: keys and length.
    pub mr: MrInfo,
}

impl Buf {
    /// Register `len` zeroed bytes with `dev` in `pd`, with `access` (panics if the device
    /// refuses).
    pub fn new(dev: &SimDevice, pd: PdId, len: usize, access: AccessFlags) -> Buf {
        let mut mem = vec![0u64; len.div_ceil(8)];
        // SAFETY: `mem` lives in the returned Buf, which every test keeps until its QPs are
        // done (dropped after the fabric stops touching it at the end of the test).
        let mr = unsafe { dev.reg_mr(pd, mem.as_mut_ptr() as *mut u8, len, access) }
            .unwrap_or_else(|e| panic!("register a {len}-byte test buffer: {e}"));
        Buf { mem, mr }
    }
    /// The address of the first byte.
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    /// The registered bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a Vec<u64> viewed as bytes, within its length.
        unsafe {
            std::slice::from_raw_parts(self.mem.as_ptr() as *const u8, self.mr.length as usize)
        }
    }
    /// The registered bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.mem.as_mut_ptr() as *mut u8,
                self.mr.length as usize,
            )
        }
    }
    /// A gather/scatter entry `off` bytes in.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey,
        }
    }
    /// The remote address `off` bytes in (for a peer in the same process).
    pub fn remote(&self, off: usize) -> RemoteAddr {
        RemoteAddr::new(self.addr() + off as u64, self.mr.rkey)
    }
}
