//! A QP's BlueFlame / doorbell register and the modes of ringing it; the sequences that ring
//! it are in `ring`.

/// How a post reaches the device (UCX `uct_ib_mlx5_mmio_mode_t`, `docs/sources.md` §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DoorbellMode {
    /// BlueFlame copy without a flush after it (UCX `UCT_IB_MLX5_MMIO_MODE_BF_POST`, what
    /// UCX picks for a single-thread owner of a dedicated bfreg — a [`crate::Qp`] always is
    /// one): a whole 64-byte line written to write-combining memory drains by itself, and the
    /// next doorbell's WC start orders it before anything that follows. On x86_64 nothing
    /// follows the copy; on aarch64 a DGH hint (UCX `ucs_memory_bus_cacheline_wc_flush`).
    /// 8-byte doorbells (batches, WQEs larger than a half) are still flushed. The default
    /// when the QP has BlueFlame registers.
    BfPost,
    /// BlueFlame copy, then `mmio_flush_writes` (`sfence` / `dsb st`): rdma-core's
    /// `post_send_db` exactly, and UCX `BF_POST_MT`.
    Bf,
    /// The 8-byte doorbell of the ctrl segment only, flushed (rdma-core with
    /// `MLX5_SHUT_UP_BF`, UCX `DB`). The only mode without BlueFlame registers (`bf.size` 0).
    Db,
}

/// The BlueFlame / doorbell register of a QP.
#[derive(Debug)]
pub(crate) struct Doorbell {
    /// Base of the bfreg (`mlx5dv_qp.bf.reg`).
    pub(super) reg: *mut u8,
    /// The half the next write goes to (`reg` or `reg + size`).
    pub(super) cur: *mut u8,
    /// `reg ^ (reg + size)`: XORed into `cur` it moves to the other half, one instruction
    /// (UCX `uct_ib_mlx5_txwq_ring_doorbell` does `addr ^= 256`); 0 when `size` is 0.
    pub(super) flip: usize,
    /// Half size (`bf.size`), 0 when only 8-byte doorbells may be used.
    pub size: u32,
    /// Whether a one-block WQE may take the straight-line 16-byte-store copy
    /// ([`mmio::bf_copy_bb`](mlx5_hw::mmio::bf_copy_bb)): BlueFlame is available and the register
    /// is 16-byte aligned (a bfreg is; the constructor only demands 8, so a looser one takes
    /// [`mmio::bf_copy`](mlx5_hw::mmio::bf_copy)).
    pub(super) one_bb: bool,
    /// How doorbells are rung.
    pub mode: DoorbellMode,
    /// Other QPs may ring this register too (`mlx5_hw::BfLayout::shared`): only
    /// [`DoorbellMode::Db`].
    pub shared: bool,
}

impl Doorbell {
    /// The register of `reg` with halves of `size` bytes, starting at the first half, in
    /// [`DoorbellMode::BfPost`] when `size` is not 0 and the register is dedicated, else
    /// [`DoorbellMode::Db`].
    pub fn new(reg: *mut u8, size: u32, shared: bool) -> Doorbell {
        let other = reg.wrapping_add(size as usize);
        Doorbell {
            reg,
            cur: reg,
            flip: reg as usize ^ other as usize,
            size,
            one_bb: size != 0 && (reg as usize).is_multiple_of(16),
            mode: if size != 0 && !shared {
                DoorbellMode::BfPost
            } else {
                DoorbellMode::Db
            },
            shared,
        }
    }

    /// Which half the next write goes to (0 or `size`).
    #[inline(always)]
    pub fn offset(&self) -> u32 {
        (self.cur as usize - self.reg as usize) as u32
    }
}
