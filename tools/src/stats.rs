//! Latency and bandwidth figures as perftest computes them (perftest
//! `src/perftest_parameters.c` `print_report_lat`, `print_report_lat_duration`,
//! `print_report_bw`). One method per mode keeps memory bounded: a run of `-n` iterations keeps
//! every sample, as perftest does (8 bytes each, `-n` capped by the memory there is:
//! `crate::limits`); a run of `-D` seconds keeps an HdrHistogram instead, whose size depends on
//! the range of the values, not on their count.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Bytes in perftest's "MB" (`format_factor = 0x100000` for `MB/sec`).
pub const PERFTEST_MB: f64 = 1_048_576.0;
/// Bytes per second in one Gb/sec (`format_factor = 125000000` with `--report_gbits`).
pub const PERFTEST_GBIT: f64 = 125_000_000.0;

/// One row of a latency report, in microseconds.
///
/// Computed as perftest computes it (`print_report_lat`): every sample is kept (one per
/// iteration), sorted, and the median and percentiles are read off the sorted samples
/// (`t_typical` the median, the p99 the sample at index ⌈n × 0.99⌉). Differences: perftest's
/// sample is the time between two successive posts and it drops the two largest; here each
/// sample is one iteration's own time and none is dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyStats {
    /// Message size.
    pub bytes: u64,
    /// Samples measured.
    pub iterations: u64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// The median (perftest's `t_typical`).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation (population).
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// The median of sorted samples as perftest takes it (`get_median`, `src/perftest_parameters.c`):
/// the middle sample of an odd count, the mean of the two middle ones of an even count. Both
/// `t_typical` and the `p50` of the percentile line are this one value.
pub fn median_of_sorted(sorted: &[u64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n.is_multiple_of(2) => (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0,
        _ => sorted[n / 2] as f64,
    }
}

/// The sample at `quantile` (0..=1) of sorted samples, perftest's way: index ⌈n × q⌉, at most
/// the last.
pub fn quantile_of_sorted(sorted: &[u64], quantile: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * quantile).ceil() as usize).min(sorted.len() - 1);
    sorted[i]
}

impl LatencyStats {
    /// Statistics of `samples` (nanoseconds each), which are sorted in place. `None` when
    /// there are none.
    pub fn from_samples(bytes: u64, samples: &mut [u64]) -> Option<LatencyStats> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let sorted = &*samples;
        let n = sorted.len();
        let us = |ns: f64| ns / 1000.0;
        let mean = sorted.iter().map(|&s| s as f64).sum::<f64>() / n as f64;
        let var = sorted
            .iter()
            .map(|&s| (s as f64 - mean) * (s as f64 - mean))
            .sum::<f64>()
            / n as f64;
        let median = median_of_sorted(sorted);
        Some(LatencyStats {
            bytes,
            iterations: n as u64,
            min: us(sorted[0] as f64),
            max: us(sorted[n - 1] as f64),
            typical: us(median),
            avg: us(mean),
            stdev: us(var.sqrt()),
            p99: us(quantile_of_sorted(sorted, 0.99) as f64),
            p999: us(quantile_of_sorted(sorted, 0.999) as f64),
        })
    }
}

/// The figures of a latency run of fixed length (`-D`), perftest's
/// (`print_report_lat_duration`): the mean latency and the transactions per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DurationStats {
    /// Message size.
    pub bytes: u64,
    /// Iterations measured (in the sampling window).
    pub iterations: u64,
    /// Mean latency, microseconds.
    pub avg: f64,
    /// Iterations per second.
    pub tps: f64,
}

impl DurationStats {
    /// `iterations` of `bytes` measured over `window`, each taking `per_iteration` (a
    /// ping-pong: half of the round trip, which counts 2 of a round trip's halves: `halves`).
    pub fn new(bytes: u64, iterations: u64, window: Duration, halves: u32) -> DurationStats {
        let secs = window.as_secs_f64().max(1e-12);
        let n = iterations.max(1) as f64;
        DurationStats {
            bytes,
            iterations,
            avg: secs * 1e6 / n / f64::from(halves.max(1)),
            tps: iterations as f64 / secs,
        }
    }
}

/// An empty latency histogram in nanoseconds: 3 significant digits, growing as values come
/// (memory bounded by the range, a few tens of KiB, not by the count).
/// (`None` only if the histogram library refused its own parameters.)
pub fn new_histogram() -> Option<Histogram<u64>> {
    Histogram::<u64>::new(3).ok()
}

/// Record `ns` into `h` (values of 0 count as 1 ns; a value past the range the histogram can
/// grow to is clamped to its top).
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    let v = ns.max(1);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// The histogram of `samples` (nanoseconds).
pub fn histogram_of(samples: &[u64]) -> Option<Histogram<u64>> {
    let mut h = new_histogram()?;
    for &s in samples {
        record(&mut h, s);
    }
    Some(h)
}

/// One row of a bandwidth report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwStats {
    /// Message size.
    pub bytes: u64,
    /// Messages completed (over all QPs).
    pub iterations: u64,
    /// Best bandwidth over any window of completions, bytes per second.
    pub peak_bps: f64,
    /// Bandwidth over the whole run, bytes per second.
    pub avg_bps: f64,
    /// Messages per second over the whole run.
    pub msg_rate: f64,
}

impl BwStats {
    /// Figures for `iterations` messages of `bytes` that took `total` from the first post to
    /// the last completion; `best_window` is the fastest (messages, time) window seen, which
    /// gives the peak (perftest takes its peak from the fastest completion gap).
    pub fn new(
        bytes: u64,
        iterations: u64,
        total: Duration,
        best_window: Option<(u64, Duration)>,
    ) -> BwStats {
        let secs = total.as_secs_f64().max(1e-12);
        let avg_bps = bytes as f64 * iterations as f64 / secs;
        let peak_bps = match best_window {
            Some((msgs, d)) if !d.is_zero() => {
                (bytes as f64 * msgs as f64 / d.as_secs_f64()).max(avg_bps)
            }
            _ => avg_bps,
        };
        BwStats {
            bytes,
            iterations,
            peak_bps,
            avg_bps,
            msg_rate: iterations as f64 / secs,
        }
    }

    /// Figures without a peak (perftest prints 0 when it does not measure one: duration
    /// runs, `-N`).
    pub fn without_peak(mut self) -> BwStats {
        self.peak_bps = 0.0;
        self
    }

    /// The figures of both directions of a bidirectional run added up, as perftest reports
    /// them (`print_full_bw_report` with the remote report: the rates summed, the iterations
    /// this side's own).
    pub fn plus(&self, other: &BwStats) -> BwStats {
        BwStats {
            bytes: self.bytes,
            iterations: self.iterations,
            peak_bps: self.peak_bps + other.peak_bps,
            avg_bps: self.avg_bps + other.avg_bps,
            msg_rate: self.msg_rate + other.msg_rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_figures_of_known_samples() {
        // 1..=1000 ns, shuffled.
        let mut samples: Vec<u64> = (1..=1000).rev().collect();
        let s = LatencyStats::from_samples(8, &mut samples).unwrap();
        assert_eq!(s.iterations, 1000);
        assert!((s.min - 0.001).abs() < 1e-9);
        assert!((s.max - 1.0).abs() < 1e-9);
        assert!((s.avg - 0.5005).abs() < 1e-9);
        // The mean of the two middle samples, 500 and 501 ns.
        assert!((s.typical - 0.5005).abs() < 1e-9, "{}", s.typical);
        // Population stdev of 1..=1000 is sqrt((1000^2 - 1) / 12) ≈ 288.675 ns.
        assert!((s.stdev - 0.288675).abs() < 1e-5);
        // perftest's index: ⌈1000 × 0.99⌉ = 990, the sample 991 ns.
        assert!((s.p99 - 0.991).abs() < 1e-9, "{}", s.p99);
        assert!((s.p999 - 1.0).abs() < 1e-9, "{}", s.p999);
        let mut odd = vec![5, 1, 3];
        assert!((LatencyStats::from_samples(1, &mut odd).unwrap().typical - 0.003).abs() < 1e-9);
    }

    #[test]
    fn no_samples_no_stats() {
        assert!(LatencyStats::from_samples(8, &mut []).is_none());
        assert_eq!(quantile_of_sorted(&[], 0.5), 0);
    }

    #[test]
    fn duration_figures() {
        let d = DurationStats::new(2, 1000, Duration::from_millis(10), 2);
        assert!((d.avg - 5.0).abs() < 1e-9, "{d:?}");
        assert!((d.tps - 100_000.0).abs() < 1e-6, "{d:?}");
        let r = DurationStats::new(2, 1000, Duration::from_millis(10), 1);
        assert!((r.avg - 10.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn histograms_grow_and_never_fail() {
        let mut h = new_histogram().unwrap();
        for v in [0, 1, 1_000, 1 << 40, u64::MAX] {
            record(&mut h, v);
        }
        assert_eq!(h.len(), 5);
        assert_eq!(histogram_of(&[5, 6, 7]).unwrap().len(), 3);
    }

    #[test]
    fn bandwidth_of_a_known_run() {
        let s = BwStats::new(
            1 << 20,
            1000,
            Duration::from_secs(2),
            Some((10, Duration::from_millis(5))),
        );
        assert!((s.avg_bps - 500.0 * 1048576.0).abs() < 1.0);
        assert!((s.msg_rate - 500.0).abs() < 1e-9);
        assert!((s.peak_bps - 2000.0 * 1048576.0).abs() < 1.0);
        // A window slower than the average never lowers the peak below it.
        let t = BwStats::new(
            8,
            100,
            Duration::from_secs(1),
            Some((1, Duration::from_secs(1))),
        );
        assert_eq!(t.peak_bps, t.avg_bps);
        // Both directions of a bidirectional run add up.
        let sum = s.plus(&t);
        assert_eq!(
            sum.iterations, s.iterations,
            "this side's own, as perftest prints"
        );
        assert!((sum.avg_bps - s.avg_bps - t.avg_bps).abs() < 1e-6);
    }
}
