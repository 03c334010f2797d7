//! 24-bit packet sequence numbers and their modular arithmetic.
//!
//! Source: IBTA Vol 1 §9.7.1 (PSN is 24 bits and wraps; the responder treats the 2^23 PSNs before
//! the expected PSN as duplicates and the others as out of sequence), §9.7.5.1.1 (the requester's
//! view of ACK PSNs). The Linux kernel's rxe (`drivers/infiniband/sw/rxe/rxe_hdr.h`,
//! `psn_compare`) orders PSNs by the sign of the 24-bit difference, as here.

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number. Arithmetic wraps modulo 2^24.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

/// How a responder classifies a request PSN against its expected PSN (IBTA Vol 1 §9.7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PsnWindow {
    /// The PSN is the expected one: execute the request.
    Expected,
    /// One of the 2^23 PSNs before the expected one: a retried request (re-ACK, replay a READ or
    /// an atomic, never re-execute).
    Duplicate,
    /// One of the 2^23 - 1 PSNs after the expected one: a packet was lost; NAK with
    /// PSN sequence error (RC) or drop the message (UC).
    OutOfSequence,
}

impl Psn {
    /// Mask of the 24 PSN bits.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Number of distinct PSNs (2^24).
    pub const MODULUS: u32 = 1 << 24;
    /// Half of the PSN space (2^23): the size of the duplicate window.
    pub const HALF: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `value` (higher bits are discarded, as on the wire).
    pub const fn new(value: u32) -> Self {
        Self(value & Self::MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Self::new(self.0.wrapping_add(n))
    }

    /// `self - n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Self {
        Self::new(self.0.wrapping_sub(n))
    }

    /// The next PSN (`self + 1` modulo 2^24).
    pub const fn next(self) -> Self {
        self.add(1)
    }

    /// The signed distance from `self` to `other` in `-2^23..2^23`: positive when `other` is
    /// after `self` in sequence space.
    pub const fn distance_to(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((other.0.wrapping_sub(self.0) << 8) as i32) >> 8
    }

    /// Orders `self` against `other` in sequence space (modulo 2^24, within half the space).
    pub const fn compare(self, other: Psn) -> Ordering {
        let d = other.distance_to(self);
        if d < 0 {
            Ordering::Less
        } else if d > 0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }

    /// True if `self` comes strictly before `other` in sequence space.
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance_to(other) > 0
    }

    /// True if `self` comes strictly after `other` in sequence space.
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance_to(other) < 0
    }

    /// Classifies a received request PSN (`self`) against the responder's expected PSN
    /// (IBTA Vol 1 §9.7.1).
    pub const fn window(self, expected: Psn) -> PsnWindow {
        let d = expected.distance_to(self);
        if d == 0 {
            PsnWindow::Expected
        } else if d < 0 {
            PsnWindow::Duplicate
        } else {
            PsnWindow::OutOfSequence
        }
    }

    /// True if `self` lies in the half-open range `[start, end)` of sequence space, walking
    /// forward from `start` (an empty range when `start == end`).
    pub const fn in_range(self, start: Psn, end: Psn) -> bool {
        let len = end.0.wrapping_sub(start.0) & Self::MASK;
        let off = self.0.wrapping_sub(start.0) & Self::MASK;
        off < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::new(0xff_ffff));
        assert_eq!(Psn::new(0x1ff_fffe).get(), 0xff_fffe);
        assert_eq!(Psn::new(0xff_fff0).add(0x20).get(), 0x10);
    }

    #[test]
    fn distance_is_signed_and_wraps() {
        assert_eq!(Psn::new(0xff_fffe).distance_to(Psn::new(1)), 3);
        assert_eq!(Psn::new(1).distance_to(Psn::new(0xff_fffe)), -3);
        assert_eq!(
            Psn::new(0).distance_to(Psn::new(Psn::HALF)),
            -(Psn::HALF as i32)
        );
        assert_eq!(
            Psn::new(0).distance_to(Psn::new(Psn::HALF - 1)),
            Psn::HALF as i32 - 1
        );
        assert!(Psn::new(0xff_ffff).is_before(Psn::new(0)));
        assert!(Psn::new(0).is_after(Psn::new(0xff_ffff)));
        assert_eq!(Psn::new(5).compare(Psn::new(5)), Ordering::Equal);
    }

    #[test]
    fn responder_windows() {
        let e = Psn::new(10);
        assert_eq!(Psn::new(10).window(e), PsnWindow::Expected);
        assert_eq!(Psn::new(9).window(e), PsnWindow::Duplicate);
        assert_eq!(Psn::new(11).window(e), PsnWindow::OutOfSequence);
        // The duplicate window is exactly the 2^23 PSNs before expected.
        assert_eq!(e.sub(Psn::HALF).window(e), PsnWindow::Duplicate);
        assert_eq!(e.add(Psn::HALF - 1).window(e), PsnWindow::OutOfSequence);
        // Across the wrap.
        assert_eq!(
            Psn::new(0xff_ffff).window(Psn::new(2)),
            PsnWindow::Duplicate
        );
        assert_eq!(
            Psn::new(1).window(Psn::new(0xff_ffff)),
            PsnWindow::OutOfSequence
        );
    }

    #[test]
    fn ranges_wrap() {
        let (s, e) = (Psn::new(0xff_fffe), Psn::new(2));
        assert!(Psn::new(0xff_fffe).in_range(s, e));
        assert!(Psn::new(0).in_range(s, e));
        assert!(Psn::new(1).in_range(s, e));
        assert!(!Psn::new(2).in_range(s, e));
        assert!(!Psn::new(0xff_fffd).in_range(s, e));
        assert!(!Psn::new(3).in_range(s, s));
    }
}
