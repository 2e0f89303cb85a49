//! Latency statistics from an HDR histogram: every sample counts (no cap, no
//! reservoir), percentiles to 3 significant digits, and compact log buckets
//! for plotting.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest value a histogram holds (60 s in ns); larger ones are clamped.
const MAX_NS: u64 = 60_000_000_000;
/// First bucket of the compact form ends at 1 µs...
const BUCKET_FIRST_NS: u64 = 1_000;
/// ...and each next one is 25 % wider: ~80 buckets from 1 µs to 60 s, fine
/// enough to see a 200 µs shelf, small enough to ship in every report.
const BUCKET_LOG_BASE: f64 = 1.25;

/// A new histogram in ns, 3 significant digits (~220 KiB, allocated and
/// faulted in before the measurement so the hot loop never allocates or
/// faults).
pub(crate) fn new_histogram() -> Histogram<u64> {
    let mut h =
        Histogram::new_with_bounds(1, MAX_NS, 3).expect("static histogram bounds are valid");
    // The counts come from calloc: untouched pages that would fault the first
    // time a sample lands on them. Writing them all now faults them in here,
    // before the measurement (and before mlock, which then keeps them).
    h.reset();
    h
}

/// One compact bucket: `count` samples above the previous bucket's `le_us`
/// and at most this `le_us`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub le_us: f64,
    pub count: u64,
}

/// Percentiles and max of one CPU (`cpu` set) or of all CPUs together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu: Option<u32>,
    pub samples: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Non-empty log buckets (1 µs, then ×1.25), for plotting.
    pub buckets: Vec<Bucket>,
}

fn us(ns: f64) -> f64 {
    (ns / 1000.0 * 1000.0).round() / 1000.0
}

impl LatencyStats {
    pub fn from_histogram(cpu: Option<u32>, h: &Histogram<u64>) -> LatencyStats {
        let samples = h.len();
        if samples == 0 {
            return LatencyStats {
                cpu,
                samples: 0,
                min_us: 0.0,
                mean_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                max_us: 0.0,
                buckets: Vec::new(),
            };
        }
        let q = |x: f64| us(h.value_at_quantile(x) as f64);
        let buckets = h
            .iter_log(BUCKET_FIRST_NS, BUCKET_LOG_BASE)
            .filter(|v| v.count_since_last_iteration() > 0)
            .map(|v| Bucket {
                le_us: us(v.value_iterated_to() as f64),
                count: v.count_since_last_iteration(),
            })
            .collect();
        LatencyStats {
            cpu,
            samples,
            min_us: us(h.min() as f64),
            mean_us: us(h.mean()),
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: us(h.max() as f64),
            buckets,
        }
    }

    /// Samples in buckets entirely above `us` (bucket resolution: ±25 %).
    /// Only non-empty buckets are kept, so a bucket's lower edge is its
    /// `le_us` divided by the log base.
    pub fn count_above_us(&self, us: f64) -> u64 {
        self.buckets
            .iter()
            .filter(|b| b.le_us / BUCKET_LOG_BASE >= us)
            .map(|b| b.count)
            .sum()
    }
}

/// Records a duration in ns, clamped into the histogram's range.
#[inline]
pub(crate) fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.min(MAX_NS));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = new_histogram();
        // 1..=10000 µs, one each: p50 = 5000, p99 = 9900, p99.9 = 9990.
        for v in 1..=10_000u64 {
            record(&mut h, v * 1000);
        }
        let s = LatencyStats::from_histogram(Some(3), &h);
        assert_eq!(s.cpu, Some(3));
        assert_eq!(s.samples, 10_000);
        let close = |a: f64, b: f64| (a - b).abs() / b < 0.002;
        assert!(close(s.p50_us, 5000.0), "{}", s.p50_us);
        assert!(close(s.p99_us, 9900.0), "{}", s.p99_us);
        assert!(close(s.p999_us, 9990.0), "{}", s.p999_us);
        assert!(close(s.max_us, 10_000.0), "{}", s.max_us);
        assert!(close(s.min_us, 1.0), "{}", s.min_us);
        assert_eq!(s.buckets.iter().map(|b| b.count).sum::<u64>(), 10_000);
        assert!(s.buckets.windows(2).all(|w| w[0].le_us < w[1].le_us));
        // Buckets are log-spaced: about log(10000)/log(1.25) = 41 of them.
        assert!((38..=45).contains(&s.buckets.len()), "{}", s.buckets.len());
    }

    #[test]
    fn empty_and_clamped() {
        let h = new_histogram();
        let s = LatencyStats::from_histogram(None, &h);
        assert_eq!(s.samples, 0);
        assert!(s.buckets.is_empty());
        let json = stealscope_findings::Evidence::of(&s);
        assert!(json.get("cpu").is_none() && json.get("samples").is_some());
        let mut h = new_histogram();
        record(&mut h, u64::MAX);
        let s = LatencyStats::from_histogram(Some(0), &h);
        assert!(s.max_us >= 59_000_000.0 && s.max_us <= 61_000_000.0);
    }

    #[test]
    fn count_above() {
        let mut h = new_histogram();
        for _ in 0..98 {
            record(&mut h, 10_000);
        }
        record(&mut h, 200_000);
        record(&mut h, 210_000);
        let s = LatencyStats::from_histogram(Some(0), &h);
        assert_eq!(s.count_above_us(50.0), 2);
        assert_eq!(s.count_above_us(5.0), 100);
        assert_eq!(s.count_above_us(1000.0), 0);
    }
}
