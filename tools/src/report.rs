//! perftest's report layout: a banner, the column header and one row per message size, with
//! the column names of `ib_write_lat` and `ib_write_bw` (perftest `src/perftest_parameters.h`
//! `RESULT_LINE`, `RESULT_FMT_LAT`, `RESULT_FMT`, `RESULT_FMT_G`) so that scripts written for
//! perftest's output read these tools' output too.

use super::stats::{
    quantile_of_sorted, BwStats, DurationStats, LatencyStats, PERFTEST_GBIT, PERFTEST_MB,
};
use hdrhistogram::Histogram;
use std::fmt::Write as _;

/// perftest's separator line (`RESULT_LINE`).
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// The latency column header (`RESULT_FMT_LAT`).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The latency column header of a run of fixed length, `-D` (`RESULT_FMT_LAT_DUR`).
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// The bandwidth column header (`RESULT_FMT`, or `RESULT_FMT_G` with `--report_gbits`), as
/// perftest prints it since it names its unit MiB (`format_factor = 0x100000`; older
/// releases said `MB/sec` for the same figure).
pub fn bw_header(gbits: bool) -> &'static str {
    if gbits {
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    } else {
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
    }
}

/// What the banner above the table says.
#[derive(Clone, Debug)]
pub struct Banner<'a> {
    /// `RDMA_Write Latency Test`, `RDMA_Write BW Test`, ...
    pub title: &'a str,
    /// Device name.
    pub device: &'a str,
    /// `direct (mlx5-direct)` or `verbs (ibv_post_send)`.
    pub path: &'a str,
    /// Connection type (`RC`).
    pub connection: &'a str,
    /// Number of QPs.
    pub qps: u32,
    /// Largest inline size.
    pub inline: u32,
    /// Send queue depth.
    pub tx_depth: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Extra `name : value` lines (local and remote QPN/PSN, ...).
    pub extra: Vec<(String, String)>,
}

impl Banner<'_> {
    /// The banner, perftest style.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{RESULT_LINE}");
        let _ = writeln!(s, "{:^87}", self.title);
        let _ = writeln!(s, " Device         : {}", self.device);
        let _ = writeln!(s, " Data path      : {}", self.path);
        let _ = writeln!(s, " Connection type: {}", self.connection);
        let _ = writeln!(s, " Number of qps  : {}", self.qps);
        let _ = writeln!(s, " TX depth       : {}", self.tx_depth);
        let _ = writeln!(s, " Mtu            : {}[B]", self.mtu);
        let _ = writeln!(s, " Max inline data: {}[B]", self.inline);
        for (k, v) in &self.extra {
            let _ = writeln!(s, " {k:<15}: {v}");
        }
        let _ = write!(s, "{RESULT_LINE}");
        s
    }
}

/// One latency row, columns under [`LAT_HEADER`].
pub fn lat_row(s: &LatencyStats) -> String {
    format!(
        " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:<.2}",
        s.bytes, s.iterations, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
    )
}

/// One row of a run of fixed length, columns under [`LAT_DUR_HEADER`]
/// (`REPORT_FMT_LAT_DUR`).
pub fn lat_dur_row(s: &DurationStats) -> String {
    format!(
        " {:<7}       {:<16} {:<14.2} {:.2}",
        s.bytes, s.iterations, s.avg, s.tps
    )
}

/// The percentile line printed under a latency table, from the sorted samples (nanoseconds)
/// of `bytes`-byte messages.
/// `p50` is the median of `t_typical` (`crate::stats::median_of_sorted`), the others the
/// samples at ⌈n × q⌉ as perftest's 99% and 99.9% columns.
pub fn lat_percentiles(bytes: u64, sorted: &[u64]) -> String {
    let qs = [0.5, 0.9, 0.99, 0.999, 0.9999, 1.0];
    let mut out = format!(" percentiles[usec] for {bytes} bytes:");
    for q in qs {
        let ns = if q == 0.5 {
            crate::stats::median_of_sorted(sorted)
        } else {
            quantile_of_sorted(sorted, q) as f64
        };
        let _ = write!(out, " p{}={:.2}", q * 100.0, ns / 1000.0);
    }
    out
}

/// perftest's `-H` / `-U` listing (`print_report_lat`): a `#, usec` line, then one
/// `index, microseconds` line per sample (nanoseconds in `samples`), in the order given.
pub fn sample_listing(samples: &[u64]) -> String {
    let mut out = String::with_capacity(16 + samples.len() * 12);
    out.push_str("#, usec");
    for (i, &ns) in samples.iter().enumerate() {
        let _ = write!(out, "\n{}, {}", i + 1, ns as f64 / 1000.0);
    }
    out
}

/// `-H` of a run of fixed length, which keeps a histogram and not the samples: a
/// `#usec, count` line, then one `microseconds, count` line per histogram bucket that holds a
/// sample, in increasing order.
pub fn histogram_listing(h: &Histogram<u64>) -> String {
    let mut out = String::from("#usec, count");
    for v in h.iter_recorded() {
        let _ = write!(
            out,
            "\n{}, {}",
            h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0,
            v.count_at_value()
        );
    }
    out
}

/// One bandwidth row, columns under [`bw_header`].
pub fn bw_row(s: &BwStats, gbits: bool) -> String {
    let unit = if gbits { PERFTEST_GBIT } else { PERFTEST_MB };
    format!(
        " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
        s.bytes,
        s.iterations,
        s.peak_bps / unit,
        s.avg_bps / unit,
        s.msg_rate / 1e6
    )
}

/// The message sizes of `-a`: 2, 4, ..., 2^23 (perftest `MAX_SIZE` 8 MiB), capped at `max`.
pub fn all_sizes(max: u64) -> Vec<u64> {
    (1..=23).map(|k| 1u64 << k).filter(|&s| s <= max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn columns(header: &str) -> Vec<&str> {
        header
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect()
    }

    #[test]
    fn lat_header_has_perftest_columns() {
        assert_eq!(
            columns(LAT_HEADER),
            [
                "#bytes #iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]",
                "99% percentile[usec]",
                "99.9% percentile[usec]"
            ]
        );
    }

    #[test]
    fn lat_row_has_nine_numbers() {
        let s = LatencyStats::from_samples(64, &mut [1500, 2500, 2000]).unwrap();
        let row = lat_row(&s);
        let nums: Vec<f64> = row.split_whitespace().map(|t| t.parse().unwrap()).collect();
        assert_eq!(nums.len(), 9, "{row}");
        assert_eq!(nums[0], 64.0);
        assert_eq!(nums[1], 3.0);
        assert_eq!(nums[2], 1.5);
        assert_eq!(nums[3], 2.5);
    }

    #[test]
    fn bw_row_units() {
        let s = BwStats::new(1 << 20, 100, Duration::from_secs(1), None);
        let mb: Vec<f64> = bw_row(&s, false)
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(mb, [1048576.0, 100.0, 100.0, 100.0, 0.0001]);
        let gb: Vec<f64> = bw_row(&s, true)
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(gb[3], 0.84); // 100 MiB/s = 0.8389 Gb/s
        assert!(bw_header(true).contains("Gb/sec") && bw_header(false).contains("MiB/sec"));
    }

    #[test]
    fn duration_row_and_listings() {
        assert_eq!(
            columns(LAT_DUR_HEADER),
            ["#bytes", "#iterations", "t_avg[usec]", "tps average"]
        );
        let d = DurationStats::new(2, 1000, Duration::from_millis(10), 2);
        let nums: Vec<f64> = lat_dur_row(&d)
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(nums, [2.0, 1000.0, 5.0, 100000.0]);
        assert_eq!(sample_listing(&[1500, 2000]), "#, usec\n1, 1.5\n2, 2");
        let h = crate::stats::histogram_of(&[1000, 1000, 3000]).unwrap();
        let l = histogram_listing(&h);
        assert!(l.starts_with("#usec, count\n"), "{l}");
        assert_eq!(l.lines().count(), 3, "{l}");
        assert!(l.lines().nth(1).unwrap().ends_with(", 2"), "{l}");
        // p50 is t_typical's median: of an even count the mean of the middle two (it was the
        // sample at ⌈n × 0.5⌉, 3.00, while t_typical said 2.50); the rest perftest's index.
        let samples = [1000, 2000, 3000, 4000];
        let p = lat_percentiles(8, &samples);
        assert!(p.contains("p50=2.50") && p.contains("p100=4.00"), "{p}");
        let typical = crate::stats::LatencyStats::from_samples(8, &mut samples.clone())
            .unwrap()
            .typical;
        assert!(p.contains(&format!("p50={typical:.2}")), "{p}");
        assert!(lat_percentiles(8, &[1000, 2000, 3000]).contains("p50=2.00"));
    }

    #[test]
    fn all_sizes_are_powers_of_two_from_2() {
        assert_eq!(all_sizes(16), [2, 4, 8, 16]);
        assert_eq!(all_sizes(u64::MAX).len(), 23);
        assert_eq!(*all_sizes(u64::MAX).last().unwrap(), 8 << 20);
    }
}
