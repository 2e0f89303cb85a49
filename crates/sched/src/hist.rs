//! Wait-episode histogram with log-linear buckets: 8 sub-buckets per power
//! of two (at most 12.5 % relative error), exact below 8 ns, clamped at
//! 2^36 ns (about 69 s). Hand-written rather than `hdrhistogram` because the
//! BPF program fills the same buckets in the kernel (`bucket()` is mirrored
//! in bpf/wait_by.bpf.c) and user space only adds them up.

use serde::Serialize;

pub const SUB_BITS: u32 = 3;
pub const MAX_EXP: u32 = 35;
/// Number of buckets: 8 exact ones, then 8 per power of two up to 2^36.
pub const BUCKETS: usize = ((MAX_EXP - 1) * 8) as usize;

/// Bucket index of a value in ns.
pub fn bucket(ns: u64) -> usize {
    if ns < 8 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros();
    if e > MAX_EXP {
        return BUCKETS - 1;
    }
    ((e - 2) * 8 + ((ns >> (e - SUB_BITS)) & 7) as u32) as usize
}

/// Smallest value in bucket `i`.
pub fn lower(i: usize) -> u64 {
    if i < 8 {
        return i as u64;
    }
    let e = (i / 8) as u32 + 2;
    (8 + (i % 8) as u64) << (e - SUB_BITS)
}

/// Largest value in bucket `i`.
pub fn upper(i: usize) -> u64 {
    if i + 1 >= BUCKETS {
        u64::MAX
    } else {
        lower(i + 1) - 1
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpisodeHist {
    #[serde(skip)]
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum_ns: u64,
    /// Longest episode seen (exact; cumulative samples keep the all-time
    /// maximum, so `since` keeps the later one when it grew, else the
    /// upper bound of the highest bucket that grew).
    pub max_ns: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
}

impl Default for EpisodeHist {
    fn default() -> Self {
        EpisodeHist {
            counts: vec![0; BUCKETS],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
            over_1ms: 0,
            over_10ms: 0,
        }
    }
}

impl EpisodeHist {
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.count += 1;
        self.sum_ns += ns;
        self.max_ns = self.max_ns.max(ns);
        self.over_1ms += u64::from(ns > 1_000_000);
        self.over_10ms += u64::from(ns > 10_000_000);
    }

    /// Value at quantile `q` (0..=1): the upper bound of the bucket holding
    /// it, capped at the maximum seen. None when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper(i).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    pub fn since(&self, earlier: &EpisodeHist) -> EpisodeHist {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .zip(earlier.counts.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let max_ns = if self.max_ns > earlier.max_ns {
            self.max_ns
        } else {
            counts
                .iter()
                .rposition(|&c| c > 0)
                .map(|i| upper(i).min(self.max_ns))
                .unwrap_or(0)
        };
        EpisodeHist {
            count: self.count.saturating_sub(earlier.count),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            over_1ms: self.over_1ms.saturating_sub(earlier.over_1ms),
            over_10ms: self.over_10ms.saturating_sub(earlier.over_10ms),
            max_ns,
            counts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_bound_their_values() {
        for i in 0..BUCKETS - 1 {
            assert_eq!(upper(i) + 1, lower(i + 1), "bucket {i}");
        }
        for ns in [0u64, 7, 8, 9, 15, 16, 17, 1000, 999_999, 1_000_001, 1 << 36] {
            let i = bucket(ns);
            assert!(lower(i) <= ns && ns <= upper(i), "{ns} in bucket {i}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_within_an_eighth() {
        let mut h = EpisodeHist::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        assert!((p50 / 500_000.0 - 1.0).abs() <= 0.125, "p50 {p50}");
        assert_eq!(h.quantile(1.0), Some(1_000_000));
        assert_eq!(h.over_1ms, 0);
    }
}
