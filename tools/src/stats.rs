//! Latency and bandwidth figures as perftest computes them (perftest
//! `src/perftest_parameters.c` `print_report_lat`, `src/perftest_resources.c`
//! `print_report_bw`), with the percentiles taken from an HdrHistogram.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Bytes in perftest's "MB" (`format_factor = 0x100000` for `MB/sec`).
pub const PERFTEST_MB: f64 = 1_048_576.0;
/// Bytes per second in one Gb/sec (`format_factor = 125000000` with `--report_gbits`).
pub const PERFTEST_GBIT: f64 = 125_000_000.0;

/// One row of a latency report, in microseconds.
#[derive(Clone, Debug)]
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
    /// 99th percentile (HdrHistogram, 3 significant digits).
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Every sample in nanoseconds (1 ns resolution up to 1 µs, 3 significant digits above).
    pub histogram: Histogram<u64>,
}

impl LatencyStats {
    /// Statistics of `samples` (nanoseconds each). `None` when there are none.
    pub fn from_nanos(bytes: u64, samples: &[u64]) -> Option<LatencyStats> {
        if samples.is_empty() {
            return None;
        }
        let mut histogram = Histogram::<u64>::new(3).ok()?;
        for &s in samples {
            // The histogram resizes itself on `record`; `saturating_record` alone would clamp
            // to the current range instead.
            if histogram.record(s.max(1)).is_err() {
                histogram.saturating_record(s.max(1));
            }
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len() as f64;
        let us = |ns: f64| ns / 1000.0;
        let mean = sorted.iter().map(|&s| s as f64).sum::<f64>() / n;
        let var = sorted
            .iter()
            .map(|&s| (s as f64 - mean) * (s as f64 - mean))
            .sum::<f64>()
            / n;
        Some(LatencyStats {
            bytes,
            iterations: samples.len() as u64,
            min: us(sorted[0] as f64),
            max: us(sorted[sorted.len() - 1] as f64),
            typical: us(sorted[sorted.len() / 2] as f64),
            avg: us(mean),
            stdev: us(var.sqrt()),
            p99: us(histogram.value_at_quantile(0.99) as f64),
            p999: us(histogram.value_at_quantile(0.999) as f64),
            histogram,
        })
    }

    /// The value at `quantile` (0..=1) in microseconds, from the histogram.
    pub fn quantile(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1000.0
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_figures_of_known_samples() {
        // 1..=1000 ns.
        let samples: Vec<u64> = (1..=1000).collect();
        let s = LatencyStats::from_nanos(8, &samples).unwrap();
        assert_eq!(s.iterations, 1000);
        assert!((s.min - 0.001).abs() < 1e-9);
        assert!((s.max - 1.0).abs() < 1e-9);
        assert!((s.avg - 0.5005).abs() < 1e-9);
        assert!((s.typical - 0.501).abs() < 1e-9);
        // Population stdev of 1..=1000 is sqrt((1000^2 - 1) / 12) ≈ 288.675 ns.
        assert!((s.stdev - 0.288675).abs() < 1e-5);
        assert!((s.p99 - 0.990).abs() < 0.002, "{}", s.p99);
        assert!((s.p999 - 0.999).abs() < 0.002, "{}", s.p999);
    }

    #[test]
    fn no_samples_no_stats() {
        assert!(LatencyStats::from_nanos(8, &[]).is_none());
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
    }
}
