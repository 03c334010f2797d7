//! CQE completion timestamps and the device clock they count.
//!
//! A CQ created with completion timestamps (`ibv_create_cq_ex` with
//! `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`; [`crate::Device::create_cq_with_timestamps`]) gets
//! the device's clock in bytes 48–55 of every good CQE (`struct mlx5_cqe64.timestamp`,
//! big-endian; rdma-core `mlx5_cq_read_wc_completion_ts` returns `be64toh(cqe64->timestamp)`).
//! Error CQEs carry their syndromes in bytes 54–55 instead (`struct mlx5_err_cqe`) and no
//! timestamp.
//!
//! The value is in one of two formats ([`TimestampFormat`]):
//! - **free running**: ticks of the HCA core clock, whose frequency `hca_core_clock` is
//!   reported in **kHz** (`struct ibv_device_attr_ex.hca_core_clock`, verbs.h: "in KHZ"; the
//!   unit libxlio issue #640 tripped over). Nanoseconds are `ticks × 10^6 / khz`. rdma-core's
//!   own conversion (`mlx5dv_ts_to_ns`, mlx5dv.h) goes through the kernel's clock-info page
//!   (`mlx5dv_get_clock_info`: last cycles, nanoseconds, mult/shift); [`ClockInfo::to_ns`] is
//!   the plain frequency conversion, which needs no page and agrees with it up to the
//!   kernel's frequency adjustment (PTP); **unconfirmed on hardware** here.
//! - **real time**: the device's real-time clock, the upper 32 bits seconds and the lower 32
//!   bits nanoseconds (Linux `drivers/net/ethernet/mellanox/mlx5/core/lib/clock.h`
//!   `mlx5_real_time_cyc2time`: `REAL_TIME_TO_NS(ts >> 32, ts & 0xFFFFFFFF)`; daqiri issue
//!   #265). rdma-core, when `MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS` is set, hands the raw value
//!   out as `read_completion_wallclock_ns` (`providers/mlx5/cq.c`), i.e. without the
//!   seconds:nanoseconds split; [`ClockInfo::to_ns`] follows the kernel. Which format a CQ's
//!   CQEs use is chosen per queue by firmware (`ts_format` of the SQ/RQ context, PRM); the
//!   software ConnectX only uses the free-running one. **Unconfirmed on hardware.**

/// The format of the 64-bit CQE timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampFormat {
    /// Ticks of the free-running HCA core clock (`MLX5_TIMESTAMP_FORMAT_FREE_RUNNING`).
    FreeRunning,
    /// Seconds in bits 63:32, nanoseconds in bits 31:0 (`MLX5_TIMESTAMP_FORMAT_REAL_TIME`).
    RealTime,
}

/// What it takes to turn a CQE timestamp into nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockInfo {
    /// Frequency of the HCA core clock in kHz (`ibv_device_attr_ex.hca_core_clock`).
    pub hca_core_clock_khz: u64,
    /// Valid bits of a free-running timestamp
    /// (`ibv_device_attr_ex.completion_timestamp_mask`).
    pub mask: u64,
    /// The format CQEs of this device carry.
    pub format: TimestampFormat,
}

impl ClockInfo {
    /// The timestamp `raw` (as read from the CQE, host order) in nanoseconds: since the
    /// clock's start for [`TimestampFormat::FreeRunning`], since the epoch of the device's
    /// real-time clock for [`TimestampFormat::RealTime`]. `None` for a clock of 0 kHz, or a
    /// real-time value whose nanosecond part is not below 10^9.
    pub fn to_ns(&self, raw: u64) -> Option<u64> {
        match self.format {
            TimestampFormat::FreeRunning => {
                if self.hca_core_clock_khz == 0 {
                    return None;
                }
                let ticks = (raw & self.mask) as u128;
                u64::try_from(ticks * 1_000_000 / self.hca_core_clock_khz as u128).ok()
            }
            TimestampFormat::RealTime => {
                let (s, ns) = (raw >> 32, raw & 0xffff_ffff);
                if ns >= 1_000_000_000 {
                    return None;
                }
                s.checked_mul(1_000_000_000)?.checked_add(ns)
            }
        }
    }

    /// Nanoseconds from timestamp `earlier` to `later`, across one wrap of a free-running
    /// counter of [`ClockInfo::mask`] bits. `None` where [`ClockInfo::to_ns`] is, or when
    /// `later` is before `earlier` on a real-time clock.
    pub fn delta_ns(&self, earlier: u64, later: u64) -> Option<u64> {
        match self.format {
            TimestampFormat::FreeRunning => {
                let ticks = later.wrapping_sub(earlier) & self.mask;
                ClockInfo {
                    mask: u64::MAX,
                    ..*self
                }
                .to_ns(ticks)
            }
            TimestampFormat::RealTime => self.to_ns(later)?.checked_sub(self.to_ns(earlier)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_running_in_khz() {
        // 156.25 MHz: 6.4 ns per tick.
        let c = ClockInfo {
            hca_core_clock_khz: 156_250,
            mask: (1 << 48) - 1,
            format: TimestampFormat::FreeRunning,
        };
        assert_eq!(c.to_ns(156_250_000), Some(1_000_000_000));
        assert_eq!(c.to_ns(5), Some(32));
        assert_eq!(
            c.delta_ns((1 << 48) - 5, 5),
            Some(64),
            "one wrap of 48 bits"
        );
        let zero = ClockInfo {
            hca_core_clock_khz: 0,
            ..c
        };
        assert_eq!(zero.to_ns(1), None);
    }

    #[test]
    fn real_time_is_seconds_and_nanoseconds() {
        let c = ClockInfo {
            hca_core_clock_khz: 1_000_000,
            mask: u64::MAX,
            format: TimestampFormat::RealTime,
        };
        assert_eq!(c.to_ns(3 << 32 | 250), Some(3_000_000_250));
        assert_eq!(c.to_ns(1_000_000_000), None, "nanoseconds ≥ 10^9");
        assert_eq!(c.delta_ns(1 << 32, 2 << 32 | 1), Some(1_000_000_001));
        assert_eq!(c.delta_ns(2 << 32, 1 << 32), None);
    }
}
