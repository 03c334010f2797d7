//! The latency histograms of a run as an HdrHistogram interval log (`lat --hlog FILE`), the
//! format HdrHistogram's own tools read: `HistogramLogAnalyzer` plots it, and
//! `HistogramLogProcessor` turns it into the percentile distribution (`.hgrm`) that
//! HdrHistogram's web plotter (`plotFiles.html`) draws. One interval per message size, tagged
//! `size=N`, values in nanoseconds (`MaxValueDivisor` 1000: the interval maximum reads in
//! microseconds). Format: HdrHistogram's `HistogramLogWriter` (log format version 1.3: a
//! version comment, `StartTime`/`BaseTime` headers, the column legend, then one line per
//! interval with the histogram in the compressed V2 encoding, base64).

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use std::io::{self, Write};
use std::time::{Duration, SystemTime};

/// One interval of the log: the histogram of one message size.
pub struct Interval<'a> {
    /// Message size.
    pub bytes: u64,
    /// The latencies, nanoseconds.
    pub histogram: &'a Histogram<u64>,
    /// When the interval started, since the log's start.
    pub start: Duration,
    /// How long it lasted.
    pub length: Duration,
}

/// Write the log of `intervals` of a run that started at `started`; `title` (the test's name)
/// goes into a comment.
pub fn write(
    out: &mut impl Write,
    title: &str,
    started: SystemTime,
    intervals: &[Interval<'_>],
) -> io::Result<()> {
    // The two lines HdrHistogram's HistogramLogWriter starts a log with (outputLogFormatVersion,
    // outputLegend) that this crate's writer leaves to the caller.
    writeln!(out, "#[Histogram log format version 1.3]")?;
    let mut serializer = V2DeflateSerializer::new();
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment(&format!("{title}, mlx5-direct lat; values in nanoseconds"))
        .with_start_time(started)
        .with_base_time(started)
        .with_max_value_divisor(1000.0)
        .begin_log_with(out, &mut serializer)?;
    log.write_comment("")?;
    drop(log);
    writeln!(
        out,
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    )?;
    let mut serializer = V2DeflateSerializer::new();
    let mut log = IntervalLogWriterBuilder::new().begin_log_with(out, &mut serializer)?;
    for i in intervals {
        let tag = format!("size={}", i.bytes);
        log.write_histogram(i.histogram, i.start, i.length, Tag::new(&tag))
            .map_err(|e| io::Error::other(format!("encoding the {} B histogram: {e}", i.bytes)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn the_log_reads_back() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1000..2000u64 {
            h.record(v).unwrap();
        }
        let mut out = Vec::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        write(
            &mut out,
            "RDMA_Write Latency Test",
            t0,
            &[Interval {
                bytes: 64,
                histogram: &h,
                start: Duration::from_millis(5),
                length: Duration::from_millis(20),
            }],
        )
        .unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with("#[Histogram log format version 1.3]\n"),
            "{text}"
        );
        assert!(text.contains("#[StartTime: 1700000000.000"), "{text}");
        assert!(
            text.contains("\"StartTimestamp\",\"Interval_Length\""),
            "{text}"
        );
        let mut got = Vec::new();
        for e in IntervalLogIterator::new(&out) {
            if let Ok(LogEntry::Interval(i)) = e {
                got.push((
                    i.tag().map(|t| t.as_str().to_string()),
                    i.encoded_histogram().to_string(),
                ));
            }
        }
        assert_eq!(got.len(), 1, "{text}");
        assert_eq!(got[0].0.as_deref(), Some("size=64"));
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&got[0].1)
            .unwrap();
        let back: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        assert_eq!(back.len(), 1000);
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
    }
}
