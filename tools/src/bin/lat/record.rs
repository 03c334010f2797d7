//! The samples of one size and the report of a run: perftest's rows, the listings, the SVG
//! histogram and the HdrHistogram log.

use super::plan::{Listing, Plan};
use hdrhistogram::Histogram;
use mlx5_tools::args::Length;
use mlx5_tools::hlog;
use mlx5_tools::limits;
use mlx5_tools::report;
use mlx5_tools::serve::say;
use mlx5_tools::stats::{self, DurationStats, LatencyStats};
use mlx5_tools::{svg, Error, Result};
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

/// What one size measured.
pub(super) enum Measured {
    /// `-n`: every sample (nanoseconds), in the order taken.
    Samples(Vec<u64>),
    /// `-D`: the samples in the window, as a histogram, with the window's span.
    Window {
        histogram: Histogram<u64>,
        iterations: u64,
        span: Duration,
    },
}

/// Collects the samples of one size.
pub(super) struct Recorder {
    pub(super) length: Length,
    pub(super) halves: u32,
    pub(super) samples: Vec<u64>,
    pub(super) histogram: Option<Histogram<u64>>,
    pub(super) start: Instant,
    pub(super) window: (Instant, Instant),
    pub(super) first: Option<Instant>,
    pub(super) last: Instant,
    pub(super) iterations: u64,
}

impl Recorder {
    pub(super) fn new(p: &Plan) -> Result<Recorder> {
        let now = Instant::now();
        let mut r = Recorder {
            length: p.run.length,
            halves: p.halves(),
            samples: Vec::new(),
            histogram: None,
            start: now,
            window: (now, now),
            first: None,
            last: now,
            iterations: 0,
        };
        match p.run.length {
            Length::Iters(n) => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                r.samples.try_reserve_exact(n).map_err(|_| {
                    Error::Usage(format!(
                        "-n {n}: could not allocate {} for the samples",
                        limits::human((n as u64).saturating_mul(limits::SAMPLE_BYTES))
                    ))
                })?;
            }
            Length::Duration { secs, margin } => {
                r.histogram = Some(
                    stats::new_histogram()
                        .ok_or_else(|| Error::Check("no histogram could be made".into()))?,
                );
                r.window = (
                    now + Duration::from_secs(margin),
                    now + Duration::from_secs(secs - margin),
                );
                p.run.cpu_util.watch(r.window.0, r.window.1);
            }
        }
        Ok(r)
    }

    /// Whether another iteration is due after `i` of them.
    pub(super) fn more(&self, i: u64) -> bool {
        match self.length {
            Length::Iters(n) => i < n,
            Length::Duration { secs, .. } => self.start.elapsed() < Duration::from_secs(secs),
        }
    }

    /// One iteration from `t0` to `t1`.
    #[inline]
    pub(super) fn record(&mut self, t0: Instant, t1: Instant) {
        let ns = (t1 - t0).as_nanos() as u64 / u64::from(self.halves);
        match &mut self.histogram {
            None => self.samples.push(ns),
            Some(h) => {
                if t0 >= self.window.0 && t1 <= self.window.1 {
                    stats::record(h, ns);
                    self.first.get_or_insert(t0);
                    self.last = t1;
                    self.iterations += 1;
                }
            }
        }
    }

    pub(super) fn finish(self) -> Measured {
        match self.histogram {
            None => Measured::Samples(self.samples),
            Some(histogram) => Measured::Window {
                histogram,
                iterations: self.iterations,
                span: self.first.map_or(Duration::ZERO, |f| self.last - f),
            },
        }
    }
}

/// What the report of a run collects for the files written at its end.
pub(super) struct Reporter<'p> {
    pub(super) p: &'p Plan,
    pub(super) title: String,
    pub(super) started: SystemTime,
    pub(super) t0: Instant,
    /// For the SVG: the last size's figures and histogram.
    pub(super) last: Option<(LatencyStats, Histogram<u64>)>,
    /// For the log: every size's histogram and when it ran.
    pub(super) intervals: Vec<(u64, Histogram<u64>, Duration, Duration)>,
    /// The `#iterations` a row shows when it is not the sample count: the run's `-n` against
    /// perftest, whose samples are the `-n` − 1 gaps between posts.
    pub(super) iterations: Option<u64>,
}

impl<'p> Reporter<'p> {
    pub(super) fn new(p: &'p Plan, title: String) -> Reporter<'p> {
        Reporter {
            p,
            title,
            started: SystemTime::now(),
            t0: Instant::now(),
            last: None,
            intervals: Vec::new(),
            iterations: None,
        }
    }

    pub(super) fn header(&self) {
        let h = match self.p.run.length {
            Length::Iters(_) => report::LAT_HEADER,
            Length::Duration { .. } => report::LAT_DUR_HEADER,
        };
        self.p
            .run
            .say(&format!("{h}{}", self.p.run.cpu_util.header_ext()));
    }

    /// The row (and listing) of one size that started at `from` and took `took`.
    pub(super) fn row(
        &mut self,
        size: u64,
        m: Measured,
        from: Instant,
        took: Duration,
    ) -> Result<()> {
        let p = self.p;
        let keep = p.svg.is_some() || p.hlog.is_some();
        let start = from.saturating_duration_since(self.t0);
        match m {
            Measured::Samples(mut samples) => {
                if p.listing == Listing::Unsorted {
                    p.run.say(&report::sample_listing(&samples));
                }
                let hist = if keep {
                    stats::histogram_of(&samples)
                } else {
                    None
                };
                let Some(mut s) = LatencyStats::from_samples(size, &mut samples) else {
                    return Ok(());
                };
                if let Some(n) = self.iterations {
                    s.iterations = n;
                }
                if p.listing != Listing::None {
                    p.run.say(&report::sample_listing(&samples));
                    p.run.say(report::RESULT_LINE);
                    p.run.say(report::LAT_HEADER);
                }
                if p.run.quiet {
                    say(&format!("{:.6}", s.avg));
                } else {
                    say(&report::lat_row(&s));
                }
                if let Some(h) = hist {
                    self.intervals.push((size, h.clone(), start, took));
                    self.last = Some((s, h));
                }
                if !p.run.quiet && p.run.sizes.len() == 1 {
                    say(report::RESULT_LINE);
                    say(&report::lat_percentiles(size, &samples));
                }
            }
            Measured::Window {
                histogram,
                iterations,
                span,
            } => {
                if iterations == 0 {
                    return Err(Error::Check(
                        "no iteration ended inside the measuring window of -D: use a longer -D \
                         or a smaller -f"
                            .into(),
                    ));
                }
                let d = DurationStats::new(size, iterations, span, p.halves());
                if p.listing != Listing::None {
                    p.run.say(&report::histogram_listing(&histogram));
                    p.run.say(report::RESULT_LINE);
                    p.run.say(&format!(
                        "{}{}",
                        report::LAT_DUR_HEADER,
                        p.run.cpu_util.header_ext()
                    ));
                }
                if p.run.quiet {
                    say(&format!("{:.6}", d.avg));
                } else {
                    say(&format!(
                        "{}{}",
                        report::lat_dur_row(&d),
                        p.run.cpu_util.row_ext()
                    ));
                }
                if keep {
                    let s = LatencyStats {
                        bytes: size,
                        iterations,
                        min: histogram.min() as f64 / 1000.0,
                        max: histogram.max() as f64 / 1000.0,
                        typical: histogram.value_at_quantile(0.5) as f64 / 1000.0,
                        avg: histogram.mean() / 1000.0,
                        stdev: histogram.stdev() / 1000.0,
                        p99: histogram.value_at_quantile(0.99) as f64 / 1000.0,
                        p999: histogram.value_at_quantile(0.999) as f64 / 1000.0,
                    };
                    self.intervals.push((size, histogram.clone(), start, took));
                    self.last = Some((s, histogram));
                }
            }
        }
        Ok(())
    }

    /// The end of the report, and the files.
    pub(super) fn finish(self) -> Result<()> {
        let p = self.p;
        if !(p.run.quiet || p.run.sizes.len() == 1 && matches!(p.run.length, Length::Iters(_))) {
            say(report::RESULT_LINE);
        }
        let io = |path: &str, source| Error::Io {
            path: path.to_string(),
            source,
        };
        if let (Some((file, path)), Some((s, h))) = (&p.svg, &self.last) {
            let mut f = file;
            f.write_all(svg::histogram_svg(&self.title, s, h).as_bytes())
                .map_err(|e| io(path, e))?;
            p.run.say(&format!(" histogram written to {path}"));
        }
        if let Some((file, path)) = &p.hlog {
            let intervals: Vec<hlog::Interval<'_>> = self
                .intervals
                .iter()
                .map(|(bytes, h, start, length)| hlog::Interval {
                    bytes: *bytes,
                    histogram: h,
                    start: *start,
                    length: *length,
                })
                .collect();
            let mut w = std::io::BufWriter::new(file);
            hlog::write(&mut w, &self.title, self.started, &intervals)
                .and_then(|()| w.flush())
                .map_err(|e| io(path, e))?;
            p.run.say(&format!(" HdrHistogram log written to {path}"));
        }
        Ok(())
    }
}
