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
//!
//! Every barrier instruction is issued by one of the small helpers at the end of this file,
//! which also appends it to the test-only MMIO trace (`trace`, feature `mmio-trace`), as do
//! the doorbell-record, doorbell and BlueFlame stores: a test can then check the sequence a
//! software device cannot observe (`docs/testing.md`). Without the feature the trace does not
//! exist and every primitive is exactly its instruction.

#[cfg(not(target_arch = "aarch64"))]
use core::sync::atomic::Ordering;

/// Order earlier stores to ordinary memory (WQEs, doorbell records) before later stores that
/// the device observes (rdma-core `udma_to_device_barrier`).
#[inline(always)]
pub fn to_device_barrier() {
    #[cfg(target_arch = "aarch64")]
    dmb_oshst(Prim::ToDevice);
    #[cfg(not(target_arch = "aarch64"))]
    compiler_barrier(Prim::ToDevice);
}

/// After seeing a valid bit written by the device (CQE owner), order later loads of the rest
/// of the entry (rdma-core `udma_from_device_barrier`).
#[inline(always)]
pub fn from_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    lfence(Prim::FromDevice);
    #[cfg(target_arch = "aarch64")]
    dmb_oshld(Prim::FromDevice);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    full_fence(Prim::FromDevice);
}

/// Flush write-combining buffers and keep WC stores from merging across this point
/// (rdma-core `mmio_flush_writes`: `sfence` / `dsb st`).
#[inline(always)]
pub fn flush_writes() {
    store_fence(Prim::Flush);
}

/// After a whole 64-byte line of BlueFlame copy, in UCX's `BF_POST` mode
/// (`ucs_memory_bus_cacheline_wc_flush`): nothing on x86_64, where a full write-combining
/// buffer drains by itself; the DGH hint (`hint #6`) on aarch64, which asks the core to
/// drain the gathered line now. Ordering against later doorbells is [`wc_start`]'s job.
#[inline(always)]
pub fn wc_line_done() {
    #[cfg(target_arch = "aarch64")]
    dgh(Prim::WcLineDone);
    #[cfg(not(target_arch = "aarch64"))]
    compiler_barrier(Prim::WcLineDone);
}

/// Before write-combining stores: order them after earlier memory and MMIO stores
/// (rdma-core `mmio_wc_start`, the same instruction as [`flush_writes`]).
#[inline(always)]
pub fn wc_start() {
    store_fence(Prim::WcStart);
}

/// Store a big-endian 32-bit doorbell-record value (`*dbrec = htobe32(v)`).
///
/// # Safety
/// `rec` must point to a live, 4-byte aligned doorbell record of a device object.
#[inline(always)]
pub unsafe fn write_dbrec(rec: *mut u32, value: u32) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::DbRec {
        addr: rec as usize,
        value,
    });
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
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::store(reg, 8);
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
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::store(reg, 8);
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
        #[cfg(any(test, feature = "mmio-trace"))]
        trace::store(d as *mut u8, 64);
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
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::store(dst, 64);
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
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::store(dst, 64);
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

/// Which primitive of this module issued a barrier (what the trace records with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// [`to_device_barrier`].
    ToDevice,
    /// [`from_device_barrier`].
    FromDevice,
    /// [`flush_writes`].
    Flush,
    /// [`wc_start`].
    WcStart,
    /// [`wc_line_done`].
    WcLineDone,
}

/// The instruction a barrier primitive issues on the architecture it was built for
/// (rdma-core `util/udma_barrier.h`; UCX `ucs/arch/*/cpu.h` for DGH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insn {
    /// No instruction: a compiler barrier (`asm volatile("" ::: "memory")`).
    Compiler,
    /// x86 `lfence`.
    Lfence,
    /// x86 `sfence`.
    Sfence,
    /// arm64 `dmb oshst`.
    DmbOshst,
    /// arm64 `dmb oshld`.
    DmbOshld,
    /// arm64 `dsb st`.
    DsbSt,
    /// arm64 DGH (`hint #6`).
    Dgh,
    /// Another architecture: a full sequentially consistent fence.
    Fence,
}

// The helpers below issue each barrier instruction and record it (test builds only): every
// barrier of this module is one call to one of them, so deleting a barrier deletes its record.

/// A compiler barrier (the x86 `udma_to_device_barrier`).
#[cfg(not(target_arch = "aarch64"))]
#[inline(always)]
fn compiler_barrier(_p: Prim) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::Barrier(_p, Insn::Compiler));
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// `lfence`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lfence(_p: Prim) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::Barrier(_p, Insn::Lfence));
    // SAFETY: `lfence` has no operands and no memory effects beyond ordering.
    unsafe { core::arch::x86_64::_mm_lfence() }
}

/// The store fence of `mmio_flush_writes` / `mmio_wc_start`: `sfence` on x86_64, `dsb st`
/// on aarch64, a full fence elsewhere.
#[inline(always)]
fn store_fence(_p: Prim) {
    #[cfg(target_arch = "x86_64")]
    {
        #[cfg(any(test, feature = "mmio-trace"))]
        trace::record(trace::Event::Barrier(_p, Insn::Sfence));
        // SAFETY: `sfence` has no operands and no memory effects beyond ordering.
        unsafe { core::arch::x86_64::_mm_sfence() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        #[cfg(any(test, feature = "mmio-trace"))]
        trace::record(trace::Event::Barrier(_p, Insn::DsbSt));
        // SAFETY: a barrier instruction; touches no memory Rust knows about.
        unsafe { core::arch::asm!("dsb st", options(nostack, preserves_flags)) }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    full_fence(_p);
}

/// `dmb oshst`.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn dmb_oshst(_p: Prim) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::Barrier(_p, Insn::DmbOshst));
    // SAFETY: a barrier instruction; touches no memory Rust knows about.
    unsafe { core::arch::asm!("dmb oshst", options(nostack, preserves_flags)) }
}

/// `dmb oshld`.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn dmb_oshld(_p: Prim) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::Barrier(_p, Insn::DmbOshld));
    // SAFETY: a barrier instruction; touches no memory Rust knows about.
    unsafe { core::arch::asm!("dmb oshld", options(nostack, preserves_flags)) }
}

/// DGH (`hint #6`).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn dgh(_p: Prim) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::Barrier(_p, Insn::Dgh));
    // SAFETY: a hint instruction; touches no memory Rust knows about.
    unsafe { core::arch::asm!("hint #6", options(nostack, preserves_flags)) }
}

/// A full fence (architectures without a mapping of their own).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
fn full_fence(_p: Prim) {
    #[cfg(any(test, feature = "mmio-trace"))]
    trace::record(trace::Event::Barrier(_p, Insn::Fence));
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// A test-only record of this thread's MMIO sequence: every barrier with its instruction,
/// every doorbell-record store with its value, every store to a doorbell or BlueFlame
/// register with its address and width. Off until [`trace::start`]; compiled only with the
/// feature `mmio-trace` (or in this crate's unit tests).
#[cfg(any(test, feature = "mmio-trace"))]
pub mod trace {
    use super::{Insn, Prim};
    use std::cell::RefCell;

    /// One recorded step.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Event {
        /// A barrier: the primitive and the instruction it issued.
        Barrier(Prim, Insn),
        /// A doorbell-record store ([`super::write_dbrec`]) of `value` (host order).
        DbRec {
            /// The record's address.
            addr: usize,
            /// The value stored (before the big-endian conversion).
            value: u32,
        },
        /// A store of `len` bytes to a doorbell / BlueFlame register (one 8-byte doorbell or
        /// one 64-byte line of a BlueFlame copy).
        Store {
            /// The register address written.
            addr: usize,
            /// Bytes written.
            len: usize,
        },
    }

    thread_local! {
        static TRACE: RefCell<Option<Vec<Event>>> = const { RefCell::new(None) };
    }

    /// Start recording on this thread (dropping anything recorded before).
    pub fn start() {
        TRACE.with(|t| *t.borrow_mut() = Some(Vec::new()));
    }

    /// Stop recording and return what was recorded since [`start`] (empty if never started).
    pub fn take() -> Vec<Event> {
        TRACE.with(|t| t.borrow_mut().take().unwrap_or_default())
    }

    /// Append `e` when recording.
    #[inline(never)]
    pub(crate) fn record(e: Event) {
        TRACE.with(|t| {
            if let Some(v) = t.borrow_mut().as_mut() {
                v.push(e);
            }
        });
    }

    /// Append a register store.
    #[inline(always)]
    pub(crate) fn store(addr: *mut u8, len: usize) {
        record(Event::Store {
            addr: addr as usize,
            len,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::trace::{self, Event};
    use super::*;

    /// The instruction of each primitive on this architecture (`docs/sources.md` §12).
    fn insn(p: Prim) -> Insn {
        #[cfg(target_arch = "x86_64")]
        return match p {
            Prim::ToDevice | Prim::WcLineDone => Insn::Compiler,
            Prim::FromDevice => Insn::Lfence,
            Prim::Flush | Prim::WcStart => Insn::Sfence,
        };
        #[cfg(target_arch = "aarch64")]
        return match p {
            Prim::ToDevice => Insn::DmbOshst,
            Prim::FromDevice => Insn::DmbOshld,
            Prim::Flush | Prim::WcStart => Insn::DsbSt,
            Prim::WcLineDone => Insn::Dgh,
        };
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        return match p {
            Prim::ToDevice | Prim::WcLineDone => Insn::Compiler,
            _ => Insn::Fence,
        };
    }

    #[test]
    fn every_barrier_records_its_instruction() {
        trace::start();
        to_device_barrier();
        from_device_barrier();
        flush_writes();
        wc_start();
        wc_line_done();
        let want: Vec<Event> = [
            Prim::ToDevice,
            Prim::FromDevice,
            Prim::Flush,
            Prim::WcStart,
            Prim::WcLineDone,
        ]
        .into_iter()
        .map(|p| Event::Barrier(p, insn(p)))
        .collect();
        assert_eq!(trace::take(), want);
    }

    #[repr(C, align(64))]
    struct Lines([u8; 256]);

    #[test]
    fn stores_record_their_place_and_bytes_land_in_order() {
        let mut rec = 0u32;
        let src = Lines(core::array::from_fn(|i| i as u8));
        let mut reg = Lines([0; 256]);
        let r = reg.0.as_mut_ptr();
        let s = src.0.as_ptr();
        trace::start();
        // SAFETY: all pointers are into the locals above, aligned and large enough.
        unsafe {
            write_dbrec(&mut rec, 0x0102_0304);
            ring_db64(r, s);
            write_db64(r.add(8), 0x1122);
            bf_copy_bb(r.add(64), s);
            bf_copy_bb_48(r.add(128), s);
            // Two blocks from the ring's last one: the source wraps to its start.
            bf_copy(r, s.add(192), 2, s, s.add(256));
        }
        let at = |off: usize| r as usize + off;
        assert_eq!(
            trace::take(),
            vec![
                Event::DbRec {
                    addr: &rec as *const u32 as usize,
                    value: 0x0102_0304
                },
                Event::Store {
                    addr: at(0),
                    len: 8
                },
                Event::Store {
                    addr: at(8),
                    len: 8
                },
                Event::Store {
                    addr: at(64),
                    len: 64
                },
                Event::Store {
                    addr: at(128),
                    len: 64
                },
                Event::Store {
                    addr: at(0),
                    len: 64
                },
                Event::Store {
                    addr: at(64),
                    len: 64
                },
            ]
        );
        assert_eq!(rec, 0x0102_0304u32.to_be());
        // SAFETY: `rec` is a live aligned record.
        assert_eq!(unsafe { read_dbrec(&rec) }, 0x0102_0304);
        assert_eq!(
            &reg.0[..64],
            &src.0[192..256],
            "the wrapped copy: block 3 first"
        );
        assert_eq!(&reg.0[64..128], &src.0[..64], "then block 0");
        assert_eq!(&reg.0[128..176], &src.0[..48]);
        assert_eq!(
            &reg.0[176..192],
            &src.0[32..48],
            "the 48-byte copy pads with 32..48"
        );
    }

    #[test]
    fn the_trace_is_per_thread_and_off_until_started() {
        flush_writes();
        assert!(trace::take().is_empty());
        trace::start();
        std::thread::spawn(flush_writes).join().unwrap();
        assert!(trace::take().is_empty(), "another thread's barrier");
    }
}
