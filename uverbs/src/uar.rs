//! A context's UAR pages and BlueFlame registers.
//!
//! **The pages.** The command descriptor is a memfd: libmlx5 maps UAR page `i` with
//! `mmap(fd, page_size × ((cmd << 8) | i))` (rdma-core `providers/mlx5/mlx5.c` `mlx5_mmap`,
//! `get_uar_mmap_offset`), and the `mmap` hook ([`Uars::mmap_offset`]) turns that into page `i`
//! of the file, which the device maps too ([`mlx5_sim::mem::DmaBuf::map_shared`]): both see
//! every doorbell. Should something map the descriptor without the hook (UCX's `mmap` hooks in
//! their default `bistro` mode call the C library directly), the offset of a regular page
//! (command 0) is already the right page of the file.
//!
//! What the kernel answers (`drivers/infiniband/hw/mlx5/main.c` `mlx5_ib_mmap`, `uar_mmap`):
//! commands 0 (regular), 2 (write-combining) and 3 (non-cached) map UAR page `index`, which must
//! be below the context's page count, exactly one page long; command 1 (contiguous pages) is
//! ENOSYS; command 6 (`MLX5_IB_MMAP_ALLOC_WC`) allocates a dynamic page (below); the others
//! (core clock 5, clock info 7, device memory 8, ioctl-returned offsets) are not offered by this
//! context (it announces no clock page and no device memory) and are EINVAL.
//!
//! **Dynamic pages** (what `ibv_alloc_td` runs on). Besides the static pages a context gets
//! `num_dyn_bfregs` registers it may take a page at a time (kernel `calc_total_bfregs`:
//! `MLX5_MAX_DYN_BFREGS`, 1024, with 4 KiB pages). On a context with static UARs libmlx5 takes
//! them with `mmap` command 6 at its next page (`providers/mlx5/verbs.c` `mlx5_alloc_dyn_uar`,
//! "legacy mode", `curr_legacy_dyn_sys_uar_page`), puts both registers of the page on its list
//! of dedicated registers (`mlx5_insert_dyn_uuars`: `bfreg_dyn_index` = page × 2 + k) and gives
//! one to each thread domain (`mlx5_attach_dedicated_uar`); a QP created on a parent domain with
//! that TD names it with `MLX5_QP_FLAG_BFREG_INDEX` (`create_qp`). The kernel maps dynamic page
//! `i` at system page `num_static_sys_pages + i`, refuses a page mapped before or beyond the
//! context's (EINVAL, `uar_mmap`), and takes a QP's register from a page that is mapped
//! (`qp.c` `bfregn_to_uar_index` with `dyn_bfreg`, EINVAL otherwise).
//!
//! Here dynamic page `i` lives at the file offset the program maps it at (command 6 in the
//! offset's bits 8..16, `i` in bits 0..8 and 16..), not after the static pages: a program whose
//! `mmap` bypasses the hook (UCX's `bistro` hooks; UCX takes a thread domain for a
//! multi-threaded worker, `uct/ib/mlx5/ib_mlx5.c` `uct_ib_mlx5_res_domain_init`) then maps the
//! very page the device scans. The file grows to the page when it is taken; it is sparse, so the
//! offsets cost no memory.
//!
//! **The registers.** A context asks for `total_num_bfregs` registers, `num_low_latency_bfregs`
//! of them low-latency (rdma-core `mlx5_alloc_context`: 16 and 4 by default). Each UAR page
//! holds two user registers at 0x800 and 0xA00 (`MLX5_NON_FP_BFREGS_PER_UAR`); libmlx5 numbers
//! four per page (`NUM_BFREGS_PER_UAR`, the other two being the fast path's) and finds a QP's
//! register by the index the kernel returns (`verbs.c` `map_uuar`: `ctx->bfs[bfreg_index]`).
//! The kernel picks one per QP (`drivers/infiniband/hw/mlx5/qp.c` `alloc_bfreg`): a free
//! high-class register (the last `low latency` ones, one QP each), else the medium-class
//! register (1 .. total − low latency − 1) with the fewest QPs, the earliest of those, else
//! register 0, which has no BlueFlame; and returns its index in libmlx5's numbering
//! (`adjust_bfregn`: `n / 2 × 4 + n % 2`).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

use mlx5_sim::kernel::UserRegister;
use mlx5_sim::mem::DmaBuf;

/// Bytes of a UAR page (`MLX5_ADAPTER_PAGE_SIZE`; 4 KiB system pages here).
pub const PAGE: usize = 4096;
/// `bf_reg_size` the context announces: two halves of 256 bytes.
pub const BF_REG_SIZE: u32 = 512;
/// User registers per UAR page (`MLX5_NON_FP_BFREGS_PER_UAR`).
const USER_BFREGS_PER_PAGE: u32 = 2;
/// libmlx5's registers per page, fast path included (`NUM_BFREGS_PER_UAR`).
const BFREGS_PER_PAGE: u32 = 4;
/// Most registers a context may ask for (kernel `MLX5_MAX_BFREGS`: 512 UARs of 2).
pub const MAX_BFREGS: u32 = 1024;
/// Dynamic registers of every context (kernel `mlx5_ib.h` `MLX5_MAX_DYN_BFREGS`, what
/// `calc_dynamic_bfregs` gives with 4 KiB pages): `num_dyn_bfregs` of `GET_CONTEXT`.
pub const DYN_BFREGS: u32 = 1024;

/// `mmap` commands (`enum mlx5_ib_mmap_cmd`).
mod mmap_cmd {
    pub const REGULAR: u64 = 0;
    pub const CONTIGUOUS: u64 = 1;
    pub const WC: u64 = 2;
    pub const NC: u64 = 3;
    pub const ALLOC_WC: u64 = 6;
}

/// A context's UAR pages (the device's mappings) and register use counts.
#[derive(Debug)]
pub struct Uars {
    pages: Vec<Arc<DmaBuf>>,
    /// Dynamic page `i` (at the file offset of its command-6 `mmap`), once mapped.
    dyn_pages: Vec<Option<Arc<DmaBuf>>>,
    /// Bytes of the command descriptor's file.
    file_len: u64,
    total: u32,
    low_lat: u32,
    count: Vec<u32>,
}

impl Uars {
    /// The pages for `total` registers of which `low_lat` are low-latency (the kernel's
    /// `calc_total_bfregs`: `total` rounded up to whole pages, at least one register left for
    /// the others, else EINVAL), mapped from `memfd`, which is grown to hold them (and later
    /// each dynamic page the program takes, [`Uars::mmap_offset`]).
    pub fn new(memfd: BorrowedFd<'_>, total: u32, low_lat: u32) -> Result<Uars, i32> {
        let total = total.div_ceil(USER_BFREGS_PER_PAGE) * USER_BFREGS_PER_PAGE;
        if total == 0 || low_lat > total - 1 {
            return Err(libc::EINVAL);
        }
        if total > MAX_BFREGS {
            return Err(libc::ENOMEM);
        }
        let n = (total / USER_BFREGS_PER_PAGE) as usize;
        let n_dyn = (DYN_BFREGS / USER_BFREGS_PER_PAGE) as usize;
        let file_len = (n * PAGE) as u64;
        if crate::sys::ftruncate(memfd.as_raw_fd(), file_len) != 0 {
            return Err(libc::ENOMEM);
        }
        let mut pages = Vec::with_capacity(n);
        for i in 0..n {
            let p = DmaBuf::map_shared(memfd, (i * PAGE) as u64, PAGE)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
            pages.push(Arc::new(p));
        }
        Ok(Uars {
            pages,
            dyn_pages: vec![None; n_dyn],
            file_len,
            total,
            low_lat,
            count: vec![0; total as usize],
        })
    }

    /// Registers (after rounding).
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Pages.
    #[cfg(test)]
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// UAR page `i`.
    pub fn page(&self, i: usize) -> Option<&Arc<DmaBuf>> {
        self.pages.get(i)
    }

    fn num_med(&self) -> u32 {
        self.total.saturating_sub(self.low_lat + 1)
    }

    /// Pick a register for a new QP (kernel `alloc_bfreg`); its number in the kernel's
    /// numbering (0 .. total).
    pub fn alloc(&mut self) -> u32 {
        let first_hi = self.num_med() + 1;
        if let Some(n) = (first_hi..self.total).find(|&n| self.count[n as usize] == 0) {
            self.count[n as usize] += 1;
            return n;
        }
        let n = (1..first_hi)
            .min_by_key(|&n| (self.count[n as usize], n))
            .unwrap_or(0);
        self.count[n as usize] += 1;
        n
    }

    /// A QP is gone: its register counts one QP less (kernel `free_bfreg`).
    pub fn free(&mut self, n: u32) {
        if let Some(c) = self.count.get_mut(n as usize) {
            *c = c.saturating_sub(1);
        }
    }

    /// The index libmlx5 finds register `n` by (kernel `adjust_bfregn`).
    pub fn libmlx5_index(n: u32) -> u32 {
        n / USER_BFREGS_PER_PAGE * BFREGS_PER_PAGE + n % USER_BFREGS_PER_PAGE
    }

    /// Whether register `n` may be rung by several QPs (medium class, or 0).
    pub fn is_shared(&self, n: u32) -> bool {
        n <= self.num_med()
    }

    /// Where register `n` is, for the device.
    pub fn register(&self, n: u32) -> Option<UserRegister> {
        let page = self.pages.get((n / USER_BFREGS_PER_PAGE) as usize)?.clone();
        Some(UserRegister {
            page,
            offset: 0x800 + (n % USER_BFREGS_PER_PAGE) as usize * BF_REG_SIZE as usize,
            // Register 0 has no BlueFlame (rdma-core gives bfs[0] buf_size 0).
            size: if n == 0 { 0 } else { BF_REG_SIZE / 2 },
            shared: self.is_shared(n),
        })
    }

    /// Where dynamic register `n` (libmlx5's `bfreg_dyn_index`, named with
    /// `MLX5_QP_FLAG_BFREG_INDEX`) is, for the device; EINVAL for a register beyond the
    /// context's or on a page not mapped (kernel `bfregn_to_uar_index` with `dyn_bfreg`). Any
    /// QP of the context may name it (libmlx5 gives one to a thread domain, whose QPs share
    /// it; the kernel counts no users), so the device treats it as shared.
    pub fn dyn_register(&self, n: u32) -> Result<UserRegister, i32> {
        let page = (n / USER_BFREGS_PER_PAGE) as usize;
        if n >= DYN_BFREGS {
            return Err(libc::EINVAL);
        }
        let p = self
            .dyn_pages
            .get(page)
            .and_then(Option::as_ref)
            .ok_or(libc::EINVAL)?;
        Ok(UserRegister {
            page: p.clone(),
            offset: 0x800 + (n % USER_BFREGS_PER_PAGE) as usize * BF_REG_SIZE as usize,
            size: BF_REG_SIZE / 2,
            shared: true,
        })
    }

    /// The file offset an `mmap` of `len` bytes at `offset` of `memfd` (the context's command
    /// descriptor) maps (see the module doc), or the kernel's errno. Command 6 takes a dynamic
    /// page, which the device maps from `memfd` here.
    pub fn mmap_offset(
        &mut self,
        memfd: BorrowedFd<'_>,
        len: usize,
        offset: i64,
    ) -> Result<i64, i32> {
        if offset < 0 || !(offset as usize).is_multiple_of(PAGE) {
            return Err(libc::EINVAL);
        }
        let pgoff = offset as u64 / PAGE as u64;
        let cmd = (pgoff >> 8) & 0xff;
        let index = (pgoff & 0xff) | ((pgoff >> 16) << 8);
        match cmd {
            mmap_cmd::REGULAR | mmap_cmd::WC | mmap_cmd::NC => {
                if len != PAGE || index >= self.pages.len() as u64 {
                    return Err(libc::EINVAL);
                }
                Ok((index as usize * PAGE) as i64)
            }
            mmap_cmd::ALLOC_WC => {
                let slot = self
                    .dyn_pages
                    .get_mut(index as usize)
                    .filter(|_| len == PAGE)
                    .ok_or(libc::EINVAL)?;
                if slot.is_some() {
                    // "wrong offset, idx is busy": each dynamic page is taken once.
                    return Err(libc::EINVAL);
                }
                // The page the program maps (the module doc); the file grows to hold it.
                let at = offset as u64;
                if self.file_len < at + PAGE as u64 {
                    if crate::sys::ftruncate(memfd.as_raw_fd(), at + PAGE as u64) != 0 {
                        return Err(libc::ENOMEM);
                    }
                    self.file_len = at + PAGE as u64;
                }
                let p = DmaBuf::map_shared(memfd, at, PAGE)
                    .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
                *slot = Some(Arc::new(p));
                Ok(at as i64)
            }
            mmap_cmd::CONTIGUOUS => Err(libc::ENOSYS),
            _ => Err(libc::EINVAL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    fn memfd() -> OwnedFd {
        let fd = crate::sys::memfd(c"t", true);
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor owned here.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    fn uars(total: u32, low: u32) -> Result<Uars, i32> {
        Uars::new(memfd().as_fd(), total, low)
    }

    #[test]
    fn registers_go_out_as_the_kernel_hands_them() {
        let mut u = uars(16, 4).unwrap();
        assert_eq!(u.pages(), 8);
        // High class first: 12..15, one QP each.
        let hi: Vec<u32> = (0..4).map(|_| u.alloc()).collect();
        assert_eq!(hi, [12, 13, 14, 15]);
        assert!(!u.is_shared(12));
        // Then medium class 1..11, fewest QPs first, earliest of those.
        let med: Vec<u32> = (0..12).map(|_| u.alloc()).collect();
        assert_eq!(med, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1]);
        assert!(u.is_shared(1));
        u.free(13);
        assert_eq!(u.alloc(), 13, "a freed high-class register is taken again");
        assert_eq!(Uars::libmlx5_index(12), 24);
        assert_eq!(Uars::libmlx5_index(13), 25);
        assert_eq!(Uars::libmlx5_index(1), 1);
        let r = u.register(13).unwrap();
        assert_eq!((r.offset, r.size), (0xa00, 256));
        assert_eq!(u.register(0).unwrap().size, 0);
        // No medium class: everything shares register 0.
        let mut u = uars(2, 1).unwrap();
        assert_eq!((u.alloc(), u.alloc(), u.alloc()), (1, 0, 0));
    }

    #[test]
    fn sizes_and_mmap_offsets_are_checked() {
        assert_eq!(uars(4, 4).unwrap_err(), libc::EINVAL);
        assert_eq!(uars(0, 0).unwrap_err(), libc::EINVAL);
        assert_eq!(uars(5, 4).unwrap().total(), 6, "rounded up to whole pages");
        let fd = memfd();
        let mut u = Uars::new(fd.as_fd(), 16, 4).unwrap();
        let m = fd.as_fd();
        assert_eq!(u.mmap_offset(m, PAGE, 3 * 4096), Ok(3 * 4096));
        assert_eq!(u.mmap_offset(m, PAGE, ((2 << 8) | 5) * 4096), Ok(5 * 4096));
        assert_eq!(
            u.mmap_offset(m, PAGE, 8 * 4096),
            Err(libc::EINVAL),
            "no page 8"
        );
        assert_eq!(u.mmap_offset(m, 2 * PAGE, 0), Err(libc::EINVAL), "one page");
        assert_eq!(u.mmap_offset(m, PAGE, (1 << 8) * 4096), Err(libc::ENOSYS));
        assert_eq!(u.mmap_offset(m, PAGE, (5 << 8) * 4096), Err(libc::EINVAL));
        assert_eq!(u.mmap_offset(m, PAGE, 100), Err(libc::EINVAL));
    }

    #[test]
    fn dynamic_pages_are_taken_once_and_name_registers() {
        let fd = memfd();
        let m = fd.as_fd();
        let mut u = Uars::new(m, 16, 4).unwrap();
        assert_eq!(
            u.dyn_register(0).unwrap_err(),
            libc::EINVAL,
            "page not mapped"
        );
        // libmlx5's first dynamic page: command 6, index 0, at the offset it maps.
        assert_eq!(u.mmap_offset(m, PAGE, (6 << 8) * 4096), Ok((6 << 8) * 4096));
        assert_eq!(
            u.mmap_offset(m, PAGE, (6 << 8) * 4096),
            Err(libc::EINVAL),
            "busy"
        );
        let r = u.dyn_register(1).unwrap();
        assert_eq!((r.offset, r.size, r.shared), (0xa00, 256, true));
        assert_eq!(
            u.dyn_register(2).unwrap_err(),
            libc::EINVAL,
            "page 1 not mapped"
        );
        // The extended index: page 256 is bits 16.. of the page offset.
        let at = ((6 << 8) | (1 << 16)) * 4096;
        assert_eq!(u.mmap_offset(m, PAGE, at), Ok(at));
        assert!(u.dyn_register(512).is_ok());
        let last = ((6 << 8) | 0xff | (1 << 16)) * 4096;
        assert_eq!(u.mmap_offset(m, PAGE, last), Ok(last));
        // The device's page is the one a program maps at that offset, hook or not.
        let r = u.dyn_register(1023).unwrap();
        assert!(r.page.write(0xa00, &0xdead_beef_u32.to_ne_bytes()));
        let mut b = [0u8; 4];
        // SAFETY: reads 4 bytes of the memfd into `b`, which is 4 bytes long.
        let n = unsafe { libc::pread(m.as_raw_fd(), b.as_mut_ptr().cast(), 4, last + 0xa00) };
        assert_eq!((n, u32::from_ne_bytes(b)), (4, 0xdead_beef));
        let beyond = (6 << 8) * 4096 + (2 << 16) * 4096;
        assert_eq!(u.mmap_offset(m, PAGE, beyond), Err(libc::EINVAL), "beyond");
        assert_eq!(u.dyn_register(DYN_BFREGS).unwrap_err(), libc::EINVAL);
    }
}
