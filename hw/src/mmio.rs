//! The stores and barriers of the mlx5 doorbell protocol, per architecture.
//!
//! Sequence (rdma-core `providers/mlx5/qp.c` `post_send_db`; UCX `uct_ib_mlx5_txwq_ring_doorbell`):
//! WQEs written → [`to_device_barrier`] → doorbell record → [`wc_start`] → BlueFlame copy or
//! 8-byte doorbell → [`flush_writes`] → toggle the BlueFlame half.
//!
//! Barriers follow rdma-core `util/udma_barrier.h`: on x86_64 `udma_to_device_barrier` is a
//! compiler barrier, `udma_from_device_barrier` is `lfence`, `mmio_flush_writes` is `sfence`;
//! on aarch64 they are `dmb oshst`, `dmb oshld` and `dsb st` (Rust's `fence` lowers to
//! inner-shareable `dmb ish*`, which does not order against DMA, so inline asm is used).

#[cfg(not(target_arch = "aarch64"))]
use core::sync::atomic::Ordering;

/// Order earlier stores to ordinary memory (WQEs, doorbell records) before later stores that
/// the device observes (rdma-core `udma_to_device_barrier`).
#[inline(always)]
pub fn to_device_barrier() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; touches no memory Rust knows about.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// After seeing a valid bit written by the device (CQE owner), order later loads of the rest
/// of the entry (rdma-core `udma_from_device_barrier`).
#[inline(always)]
pub fn from_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` has no operands and no memory effects beyond ordering.
    unsafe {
        core::arch::x86_64::_mm_lfence();
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(Ordering::Acquire);
}

/// Flush write-combining buffers and keep WC stores from merging across this point
/// (rdma-core `mmio_flush_writes`: `sfence` / `dsb st`).
#[inline(always)]
pub fn flush_writes() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no memory effects beyond ordering.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// After a whole 64-byte line of BlueFlame copy, in UCX's `BF_POST` mode
/// (`ucs_memory_bus_cacheline_wc_flush`): nothing on x86_64, where a full write-combining
/// buffer drains by itself; the DGH hint (`hint #6`) on aarch64, which asks the core to
/// drain the gathered line now. Ordering against later doorbells is [`wc_start`]'s job.
#[inline(always)]
pub fn wc_line_done() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a hint instruction; touches no memory Rust knows about.
    unsafe {
        core::arch::asm!("hint #6", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// Before write-combining stores: order them after earlier memory and MMIO stores
/// (rdma-core `mmio_wc_start`, the same instruction as [`flush_writes`]).
#[inline(always)]
pub fn wc_start() {
    flush_writes();
}

/// Store a big-endian 32-bit doorbell-record value (`*dbrec = htobe32(v)`).
///
/// # Safety
/// `rec` must point to a live, 4-byte aligned doorbell record of a device object.
#[inline(always)]
pub unsafe fn write_dbrec(rec: *mut u32, value: u32) {
    // SAFETY: the caller guarantees `rec` is a valid aligned record; volatile because the
    // device reads it asynchronously.
    core::ptr::write_volatile(rec, value.to_be());
}

/// Load a big-endian 32-bit doorbell-record value.
///
/// # Safety
/// `rec` must point to a live, 4-byte aligned doorbell record.
#[inline(always)]
pub unsafe fn read_dbrec(rec: *const u32) -> u32 {
    // SAFETY: as for `write_dbrec`.
    u32::from_be(core::ptr::read_volatile(rec))
}

/// Ring the 8-byte doorbell: one 64-bit store of the first 8 bytes of the last WQE's ctrl
/// segment, exactly as they sit in memory (already big-endian; rdma-core `mmio_write64_be`).
///
/// # Safety
/// `reg` must be an 8-byte aligned doorbell register (or RAM standing in for one); `ctrl` must
/// point to at least 8 readable bytes.
#[inline(always)]
pub unsafe fn ring_db64(reg: *mut u8, ctrl: *const u8) {
    // SAFETY: caller guarantees both pointers; the source may be unaligned only to 16 bytes
    // (ctrl segments start on 64-byte blocks) so an aligned read is fine.
    let v = core::ptr::read(ctrl as *const u64);
    core::ptr::write_volatile(reg as *mut u64, v);
}

/// Ring the 8-byte doorbell with a value already in a register: `w0` is the first 8 bytes of
/// the last WQE's ctrl segment in memory order (what [`ring_db64`] reads from the ring), one
/// 64-bit volatile store.
///
/// # Safety
/// `reg` must be an 8-byte aligned doorbell register (or RAM standing in for one).
#[inline(always)]
pub unsafe fn write_db64(reg: *mut u8, w0: u64) {
    // SAFETY: the caller guarantees the register; volatile, the device reads it.
    core::ptr::write_volatile(reg as *mut u64, w0);
}

/// Copy `blocks` 64-byte blocks of a WQE to the BlueFlame register `dst`, in ascending order,
/// the source wrapping from `ring_end` back to `ring_start` (rdma-core `mlx5_bf_copy`, UCX
/// `uct_ib_mlx5_bf_copy`). Each block is eight 64-bit volatile stores so that the compiler
/// neither merges nor reorders them (no `memcpy`, which has no ordering guarantee).
///
/// # Safety
/// `dst` must be a BlueFlame half with room for `blocks × 64` bytes; `src` must point to a
/// 64-byte block inside `[ring_start, ring_end)` and the ring must hold `blocks` blocks.
#[inline(always)]
pub unsafe fn bf_copy(
    dst: *mut u8,
    mut src: *const u8,
    blocks: usize,
    ring_start: *const u8,
    ring_end: *const u8,
) {
    let mut d = dst as *mut u64;
    for _ in 0..blocks {
        let s = src as *const u64;
        // SAFETY: the caller guarantees a whole 64-byte block at `src` and room at `d`.
        for i in 0..8 {
            core::ptr::write_volatile(d.add(i), core::ptr::read(s.add(i)));
        }
        d = d.add(8);
        src = src.add(64);
        if src == ring_end {
            src = ring_start;
        }
    }
}

/// Copy one 64-byte basic block to the BlueFlame register `dst`, straight-line: four 16-byte
/// SSE2 stores on x86_64 (UCX `uct_ib_mlx5_bf_copy_bb` copies in `__m128i` words), eight
/// 64-bit stores elsewhere, always in ascending address order and volatile so that the
/// compiler neither merges, reorders nor turns them into `memcpy`. The bytes written are those
/// of [`bf_copy`] with `blocks = 1`.
///
/// # Safety
/// `dst` must be a BlueFlame half (or RAM standing in for one) with room for 64 bytes and
/// `src` a 64-byte block; both 16-byte aligned (a ring's blocks and a bfreg half are).
#[inline(always)]
pub unsafe fn bf_copy_bb(dst: *mut u8, src: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__m128i;
        let s = src as *const __m128i;
        let d = dst as *mut __m128i;
        // SAFETY: the caller guarantees 64 readable bytes at `src`, 64 writable at `dst`,
        // both 16-byte aligned; SSE2 is part of the x86_64 baseline.
        for i in 0..4 {
            core::ptr::write_volatile(d.add(i), core::ptr::read(s.add(i)));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let s = src as *const u64;
        let d = dst as *mut u64;
        // SAFETY: as above, 8-byte granules.
        for i in 0..8 {
            core::ptr::write_volatile(d.add(i), core::ptr::read(s.add(i)));
        }
    }
}

/// [`bf_copy_bb`] for a WQE of at most 48 bytes (DS ≤ 3): the device reads DS × 16 bytes of
/// a BlueFlame write (PRM "Send WQE": the ctrl segment's DS counts the WQE's 16-byte units),
/// so the line's last 16 bytes are padding, like the stale ring bytes rdma-core's
/// `mlx5_bf_copy` sends there; they repeat bytes 32..48 instead of being loaded again.
/// The write is still one whole 64-byte line, in ascending order.
///
/// # Safety
/// As for [`bf_copy_bb`]; only the first 48 bytes of `src` are read.
#[inline(always)]
pub unsafe fn bf_copy_bb_48(dst: *mut u8, src: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__m128i;
        let s = src as *const __m128i;
        let d = dst as *mut __m128i;
        // SAFETY: as in `bf_copy_bb`; three 16-byte units read, four written.
        unsafe {
            let c = core::ptr::read(s.add(2));
            core::ptr::write_volatile(d, core::ptr::read(s));
            core::ptr::write_volatile(d.add(1), core::ptr::read(s.add(1)));
            core::ptr::write_volatile(d.add(2), c);
            core::ptr::write_volatile(d.add(3), c);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let s = src as *const u64;
        let d = dst as *mut u64;
        // SAFETY: as above, 8-byte granules; six read, eight written.
        unsafe {
            for i in 0..6 {
                core::ptr::write_volatile(d.add(i), core::ptr::read(s.add(i)));
            }
            core::ptr::write_volatile(d.add(6), core::ptr::read(s.add(4)));
            core::ptr::write_volatile(d.add(7), core::ptr::read(s.add(5)));
        }
    }
}
