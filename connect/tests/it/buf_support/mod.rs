//! A buffer registered with a software ConnectX, shared by the connect and data-path test
//! helpers (`connect_support`, `datapath_support`).
#![allow(dead_code)]

use mlx5_connect::RemoteBuffer;
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
    pub mr: MrInfo,
}

impl Buf {
    pub fn new(dev: &SimDevice, pd: PdId, len: usize, access: AccessFlags) -> Buf {
        let mut mem = vec![0u64; len.div_ceil(8)];
        // SAFETY: `mem` lives in the returned Buf, which every test keeps until its QPs are
        // done (dropped after the fabric stops touching it at the end of the test).
        let mr = unsafe { dev.reg_mr(pd, mem.as_mut_ptr() as *mut u8, len, access) }.unwrap();
        Buf { mem, mr }
    }
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a Vec<u64> viewed as bytes, within its length.
        unsafe {
            std::slice::from_raw_parts(self.mem.as_ptr() as *const u8, self.mr.length as usize)
        }
    }
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
    /// The buffer as the connect exchange announces it.
    pub fn remote_buffer(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.mr.rkey,
            len: self.mr.length,
        }
    }
}
