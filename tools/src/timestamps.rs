//! `lat --timestamps`: the same run measured with the NIC's clock, from completion timestamps,
//! next to the CPU's figures.
//!
//! The measuring end's CQ is created with completion timestamps (`ibv_create_cq_ex` with
//! `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`: the device clock in bytes 48–55 of every good CQE,
//! `docs/wqe-layout.md`), on `--path direct` through `mlx5_ctx::Context::create_cq_with_timestamps`
//! and `poll_timestamped`, on `--path verbs` through
//! `mlx5_hw::verbs::VerbsDevice::create_cq_verbs_with_timestamps` and `ibv_wc_read_completion_ts`.
//! Each iteration ends with one completion of a known kind on that CQ, its [`Marker`]: the
//! receive of the peer's SEND (SEND), the send completion of this end's WRITE (WRITE; every
//! send is signaled), the completion of the READ or atomic (READ, atomics). The NIC's samples
//! are the device-clock intervals between the markers of consecutive iterations, converted
//! to nanoseconds with the device's clock info (`mlx5_hw::ClockInfo::delta_ns`:
//! `hca_core_clock` is in kHz), divided like the CPU's samples by the halves of a round trip
//! one iteration is — perftest too takes its samples as differences of consecutive stamps
//! (`print_report_lat`, `tstamp[i + 1] - tstamp[i]`), only with the CPU's cycle counter. Of
//! `-n` iterations come `n − 1` samples. What the NIC figure leaves out is the measuring CPU's
//! own delay in seeing a completion: the timestamp is taken when the device writes the CQE,
//! not when it is polled.
//!
//! The software ConnectX stamps CQEs from its virtual clock (156.25 MHz, following the wall
//! clock while its thread runs), which moves once per pass of its thread: two operations it
//! handles in one pass share a stamp, so a single interval can be 0 there. On a ConnectX the raw value is the free-running core clock
//! unless firmware chose the real-time format (`mlx5_hw::timestamp`, unconfirmed on hardware).
//! A device without completion timestamps or without a reported core clock (Soft-RoCE: its
//! provider refuses the flag with EOPNOTSUPP and its kernel driver reports no core clock) is
//! refused before the run with a usage error saying so ([`unsupported`]).

use crate::path::Done;
use crate::stats::LatencyStats;
use crate::{Error, Result};
use mlx5_hw::ClockInfo;

/// Which completion ends an iteration on the measuring end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A receive completion (SEND: the peer's answer arrived).
    Receive,
    /// A send-side completion (WRITE: this end's ping; READ and atomics: the operation).
    Send,
}

/// The refusal of `--timestamps` on device `device` because of `why` (a usage error, exit 2).
pub fn unsupported(device: &str, why: impl std::fmt::Display) -> Error {
    Error::Usage(format!(
        "--timestamps: completion timestamps are not supported by this device ({device}): {why}"
    ))
}

/// The clock of the measuring end's device (`Device::query_clock`), refused with
/// [`unsupported`] when the device reports none.
pub fn clock_of(ctx: &mlx5_ctx::Context) -> Result<ClockInfo> {
    ctx.clock().map_err(|e| unsupported(ctx.name(), e))
}

/// Keeps the raw timestamps of the markers of one size, in completion order.
#[derive(Debug)]
pub struct NicRecorder {
    marker: Marker,
    stamps: Vec<u64>,
}

impl NicRecorder {
    /// A recorder of `marker` completions with room for `iters` of them (allocated now, off
    /// the timed loop).
    pub fn new(marker: Marker, iters: u64) -> Result<NicRecorder> {
        let mut stamps = Vec::new();
        let n = usize::try_from(iters).unwrap_or(usize::MAX);
        stamps.try_reserve_exact(n).map_err(|_| {
            Error::Usage(format!(
                "--timestamps: could not allocate room for {iters} timestamps"
            ))
        })?;
        Ok(NicRecorder { marker, stamps })
    }

    /// Note one completion: kept if it is a marker.
    #[inline]
    pub fn note(&mut self, d: &Done) {
        let is_marker = match self.marker {
            Marker::Receive => d.recv,
            Marker::Send => !d.recv,
        };
        if is_marker {
            self.stamps.push(d.ts);
        }
    }

    /// The stamps noted since the last call, leaving the recorder empty for the next size.
    pub fn take(&mut self) -> Vec<u64> {
        let cap = self.stamps.capacity();
        std::mem::replace(&mut self.stamps, Vec::with_capacity(cap))
    }
}

/// The NIC's samples (nanoseconds) of consecutive marker `stamps`, each interval divided by
/// `halves` (2 for a ping-pong, 1 for READ and atomics). An interval the clock cannot convert
/// (a zero-frequency clock, a real-time value out of range or going backwards) is an error.
pub fn samples(clock: &ClockInfo, stamps: &[u64], halves: u32) -> Result<Vec<u64>> {
    let halves = u64::from(halves.max(1));
    stamps
        .windows(2)
        .map(|w| {
            clock
                .delta_ns(w[0], w[1])
                .map(|ns| ns / halves)
                .ok_or_else(|| {
                    Error::Check(format!(
                        "--timestamps: the CQE timestamps {:#x} then {:#x} are no interval of \
                         the device clock {clock:?}",
                        w[0], w[1]
                    ))
                })
        })
        .collect()
}

/// The report line of the NIC's figures for `bytes`-byte messages, printed under the CPU's
/// row: ` NIC (CQE timestamps, <kHz> kHz): #bytes … #samples … t_min … t_max … t_typical …
/// t_avg … t_stdev … 99% … 99.9% …[usec]`, or a line saying why there are none.
pub fn nic_line(clock: &ClockInfo, bytes: u64, mut ns: Vec<u64>) -> String {
    let head = format!(" NIC (CQE timestamps, {} kHz):", clock.hca_core_clock_khz);
    match LatencyStats::from_samples(bytes, &mut ns) {
        Some(s) => format!(
            "{head} #bytes {} #samples {} t_min {:.2} t_max {:.2} t_typical {:.2} t_avg {:.2} \
             t_stdev {:.2} 99% {:.2} 99.9% {:.2} [usec]",
            s.bytes, s.iterations, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
        ),
        None => format!(
            "{head} #bytes {bytes}: no interval (one iteration has no successor; use -n 2 or \
             more)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_hw::TimestampFormat;

    const SIM: ClockInfo = ClockInfo {
        hca_core_clock_khz: 156_250,
        mask: u64::MAX,
        format: TimestampFormat::FreeRunning,
    };

    fn done(recv: bool, ts: u64) -> Done {
        Done {
            recv,
            ts,
            ..Done::default()
        }
    }

    #[test]
    fn markers_are_kept_and_intervals_converted() {
        let mut r = NicRecorder::new(Marker::Receive, 4).unwrap();
        for d in [
            done(false, 1),
            done(true, 1000),
            done(false, 5),
            done(true, 2562),
        ] {
            r.note(&d);
        }
        let stamps = r.take();
        assert_eq!(stamps, vec![1000, 2562]);
        assert!(r.take().is_empty());
        // 1562 ticks of 6.4 ns = 9996.8 ns, half of it per direction.
        assert_eq!(samples(&SIM, &stamps, 2).unwrap(), vec![4998]);
        let line = nic_line(&SIM, 8, samples(&SIM, &stamps, 1).unwrap());
        assert!(line.starts_with(" NIC (CQE timestamps, 156250 kHz): #bytes 8 #samples 1 "));
        assert!(line.contains("t_typical 10.00"), "{line}");
    }

    #[test]
    fn one_stamp_is_no_interval_and_backwards_real_time_is_an_error() {
        assert!(samples(&SIM, &[7], 2).unwrap().is_empty());
        assert!(nic_line(&SIM, 2, Vec::new()).contains("no interval"));
        let rt = ClockInfo {
            format: TimestampFormat::RealTime,
            ..SIM
        };
        assert!(samples(&rt, &[2 << 32, 1 << 32], 1).is_err());
        // A free-running counter wraps: the interval across the wrap is still short.
        let c48 = ClockInfo {
            mask: (1 << 48) - 1,
            ..SIM
        };
        assert_eq!(samples(&c48, &[(1 << 48) - 5, 5], 1).unwrap(), vec![64]);
    }
}
