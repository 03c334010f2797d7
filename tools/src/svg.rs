//! The latency histogram as a small standalone SVG (`lat --histogram out.svg`), written by hand:
//! a few dozen rectangles and labels need no plotting library. Kept next to the HdrHistogram
//! log (`--hlog`, [`crate::hlog`]) because it opens in any browser with nothing else
//! installed, while the log needs HdrHistogram's own tools to be looked at.

use super::stats::LatencyStats;
use hdrhistogram::Histogram;
use std::fmt::Write as _;

const W: f64 = 800.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const BINS: usize = 60;

/// Escape text for an SVG text node.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Counts of `BINS` bins spaced logarithmically from the minimum to the maximum (latency
/// distributions have long tails: a linear axis squeezes the body into one bar), and the
/// axis ends in microseconds.
fn bins(s: &LatencyStats, h: &Histogram<u64>) -> (Vec<u64>, f64, f64) {
    let lo = s.min.max(0.001);
    let hi = s.max.max(lo * 1.01);
    let span = (hi / lo).ln();
    let mut counts = vec![0u64; BINS];
    for v in h.iter_recorded() {
        let us = (v.value_iterated_to() as f64 / 1000.0).max(lo);
        let i = (((us / lo).ln() / span * BINS as f64).floor() as usize).min(BINS - 1);
        counts[i] += v.count_at_value();
    }
    (counts, lo, hi)
}

/// The picture of one latency distribution (`s`, with every sample in `h`, nanoseconds);
/// `title` names the test.
pub fn histogram_svg(title: &str, s: &LatencyStats, h: &Histogram<u64>) -> String {
    let (counts, lo, hi) = bins(s, h);
    let max = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let bw = pw / BINS as f64;
    let span = (hi / lo).ln();
    let x_of = |us: f64| LEFT + ((us.max(lo) / lo).ln() / span).clamp(0.0, 1.0) * pw;
    let edge = |i: usize| lo * (span * i as f64 / BINS as f64).exp();
    // Counts on a log scale too, so that the tail's single samples stay visible.
    let y_of = |c: u64| (c as f64 + 1.0).ln() / (max + 1.0).ln() * ph;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(&format!(
            "{title}: {} bytes, {} iterations",
            s.bytes, s.iterations
        ))
    );
    for (i, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let h = y_of(c);
        let _ = writeln!(
            o,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4a78b5"><title>{:.2}–{:.2} usec: {c}</title></rect>"##,
            LEFT + i as f64 * bw + 0.5,
            TOP + ph - h,
            (bw - 1.0).max(0.5),
            h,
            edge(i),
            edge(i + 1)
        );
    }
    // Axes and labels.
    let _ = writeln!(
        o,
        r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        TOP + ph,
        LEFT + pw,
        TOP + ph
    );
    let _ = writeln!(
        o,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#,
        TOP + ph
    );
    for k in 0..=5 {
        let us = lo * (span * k as f64 / 5.0).exp();
        let x = x_of(us);
        let _ = writeln!(
            o,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{us:.2}</text>"#,
            TOP + ph + 18.0
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">latency [usec], logarithmic</text>"#,
        LEFT + pw / 2.0,
        H - 15.0
    );
    let _ = writeln!(
        o,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">samples, logarithmic (max {})</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        max as u64
    );
    for (name, v, color) in [
        ("median", s.typical, "#2a9d3a"),
        ("p99", s.p99, "#e07b00"),
        ("p99.9", s.p999, "#c0392b"),
    ] {
        let x = x_of(v);
        let _ = writeln!(
            o,
            r#"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="{color}" stroke-dasharray="4 3"/>"#,
            TOP + ph
        );
        // Labels right of their line, or left of it near the right edge.
        let (lx, anchor) = if x > LEFT + 0.75 * pw {
            (x - 3.0, "end")
        } else {
            (x + 3.0, "start")
        };
        let dy = match name {
            "p99" => 14.0,
            "p99.9" => 28.0,
            _ => 0.0,
        };
        let _ = writeln!(
            o,
            r#"<text x="{lx:.1}" y="{:.1}" fill="{color}" text-anchor="{anchor}">{name} {v:.2}</text>"#,
            TOP + 12.0 + dy
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_lands_in_a_bin() {
        let mut samples: Vec<u64> = (0..500).map(|i| 1000 + (i % 50) * 20).collect();
        let h = crate::stats::histogram_of(&samples).unwrap();
        let s = LatencyStats::from_samples(8, &mut samples).unwrap();
        let (counts, _, _) = bins(&s, &h);
        assert_eq!(counts.iter().sum::<u64>(), 500);
    }

    #[test]
    fn picture_is_an_svg_with_bars_and_markers() {
        let mut samples: Vec<u64> = (0..100).map(|i| 2000 + i * 10).collect();
        let h = crate::stats::histogram_of(&samples).unwrap();
        let s = LatencyStats::from_samples(8, &mut samples).unwrap();
        let svg = histogram_svg("RDMA_Write <lat>", &s, &h);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.matches("<rect").count() > 10);
        assert!(svg.contains("p99.9"));
        assert!(svg.contains("RDMA_Write &lt;lat&gt;"));
    }
}
