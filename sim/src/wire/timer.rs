//! The IB transport's timer encodings: the 5-bit RNR NAK timer and the local ACK timeout.

use core::time::Duration;

/// Minimum RNR NAK timer values in microseconds, indexed by the 5-bit code
/// (IBTA Vol 1 Table 45 "Encoding for RNR NAK Timer Field"; the same values are the
/// Linux kernel's `IB_RNR_TIMER_*` in `include/rdma/ib_verbs.h`). Code 0 is the longest.
pub const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// A 5-bit RNR NAK timer code (the `min_rnr_timer` QP attribute and the low 5 bits of an
/// RNR NAK's AETH syndrome).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RnrTimer(u8);

impl RnrTimer {
    /// The code from `code`, if it fits in 5 bits.
    pub const fn new(code: u8) -> Option<Self> {
        if code < 32 {
            Some(Self(code))
        } else {
            None
        }
    }

    /// The code from the low 5 bits of `bits` (the AETH syndrome layout).
    pub const fn from_low_bits(bits: u8) -> Self {
        Self(bits & 0x1f)
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The minimum time the requester waits before retrying (IBTA Table 45).
    pub const fn duration(self) -> Duration {
        Duration::from_micros(RNR_TIMER_MICROS[self.0 as usize] as u64)
    }
}

/// The local ACK timeout for the 5-bit `timeout` QP attribute: 4.096 µs × 2^timeout, `None`
/// for 0, which means wait forever (IBTA Vol 1 §9.7.6.1.3 transport timer; `ibv_modify_qp(3)`,
/// `timeout`).
/// Values above 31 are clamped to 31, the largest the 5-bit field can hold.
pub const fn local_ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        return None;
    }
    let exp = if timeout > 31 { 31 } else { timeout };
    Some(Duration::from_nanos(4_096u64 << exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rnr_table_endpoints() {
        assert_eq!(
            RnrTimer::new(0).map(RnrTimer::duration),
            Some(Duration::from_micros(655_360))
        );
        assert_eq!(
            RnrTimer::new(1).map(RnrTimer::duration),
            Some(Duration::from_micros(10))
        );
        assert_eq!(
            RnrTimer::new(14).map(RnrTimer::duration),
            Some(Duration::from_micros(1_280))
        );
        assert_eq!(
            RnrTimer::new(31).map(RnrTimer::duration),
            Some(Duration::from_micros(491_520))
        );
        assert_eq!(RnrTimer::new(32), None);
        assert_eq!(RnrTimer::from_low_bits(0x3f).code(), 31);
        // Codes 1..=31 are increasing.
        assert!(RNR_TIMER_MICROS[1..].windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn ack_timeout() {
        assert_eq!(local_ack_timeout(0), None);
        assert_eq!(local_ack_timeout(1), Some(Duration::from_nanos(8_192)));
        // 14 is a common choice: 4.096 µs × 16384 = 67.108864 ms.
        assert_eq!(
            local_ack_timeout(14),
            Some(Duration::from_nanos(67_108_864))
        );
        assert_eq!(
            local_ack_timeout(31),
            Some(Duration::from_nanos(4_096u64 << 31))
        );
        assert_eq!(local_ack_timeout(200), local_ack_timeout(31));
    }
}
