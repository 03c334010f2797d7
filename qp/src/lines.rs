//! Per-slot bookkeeping arrays that own whole cache lines.
//!
//! The layout rule of the data path for threads (one `Qp` and its `Cq` per thread, no lock):
//! everything a post or a poll writes lies in cache lines that belong to that one object —
//! [`crate::Qp`], [`crate::Cq`] and [`crate::Srq`] are `#[repr(align(64))]` (their hot fields
//! start a line and no other object's bytes share their last one), and their per-slot arrays
//! are [`LineArray`]s, allocations of whole 64-byte lines. Without it the allocator may put
//! one thread's WR-id array and another's next to each other, and every post of one would
//! invalidate a line the other writes (false sharing). The rings and doorbell records are the
//! device's: rdma-core gives each doorbell record a cache line of its own
//! (`providers/mlx5/dbrec.c`, `mlx5_alloc_dbrec`: blocks of `cache_line_size`).

use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

/// The cache line size the layout rule assumes (x86_64 and the usual aarch64 servers).
pub(crate) const LINE: usize = 64;

/// One cache line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE]);

const _: () =
    assert!(core::mem::size_of::<Line>() == LINE && core::mem::align_of::<Line>() == LINE);

/// Element types a [`LineArray`] may hold: plain values for which all-zero bytes are a valid
/// value (0, `false`), of an alignment that divides 64.
pub(crate) trait Plain: Copy {}
impl Plain for u64 {}
impl Plain for u8 {}
impl Plain for bool {}

/// `len` zeroed `T`s at the start of whole, 64-byte aligned cache lines owned by this array;
/// dereferences to `[T]`.
pub(crate) struct LineArray<T: Plain> {
    lines: Box<[Line]>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> LineArray<T> {
    /// `len` zero values.
    pub fn zeroed(len: usize) -> LineArray<T> {
        let bytes = len * core::mem::size_of::<T>();
        let n = bytes.div_ceil(LINE).max(1);
        LineArray {
            lines: vec![Line([0; LINE]); n].into_boxed_slice(),
            len,
            _t: PhantomData,
        }
    }
}

impl<T: Plain> Deref for LineArray<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: the lines hold at least `len` `T`s (sized in `zeroed`), 64-byte aligned
        // (a multiple of T's alignment: `Plain` types are u8, u64, bool); every byte pattern
        // written through `deref_mut` is a `T`, and zero bytes are a valid `T` (`Plain`).
        unsafe { core::slice::from_raw_parts(self.lines.as_ptr() as *const T, self.len) }
    }
}

impl<T: Plain> DerefMut for LineArray<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the borrow unique.
        unsafe { core::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut T, self.len) }
    }
}

impl<T: Plain + core::fmt::Debug> core::fmt::Debug for LineArray<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LineArray").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{LineArray, LINE};

    /// Each array starts a cache line and owns every line it touches, whatever its length.
    #[test]
    fn arrays_own_whole_lines() {
        for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 1024] {
            let a = LineArray::<u64>::zeroed(len);
            let b = LineArray::<u8>::zeroed(len);
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&v| v == 0) && b.iter().all(|&v| v == 0));
            for (p, bytes, cap) in [
                (a.as_ptr() as usize, len * 8, a.lines.len() * LINE),
                (b.as_ptr() as usize, len, b.lines.len() * LINE),
            ] {
                assert_eq!(p % LINE, 0, "starts a line");
                assert!(bytes <= cap && cap % LINE == 0, "whole lines cover it");
            }
        }
    }
}
