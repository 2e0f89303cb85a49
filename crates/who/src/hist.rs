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

/// Counts are kept sparse, (bucket, count) for the buckets that hold any,
/// in bucket order: a wait lands in a few dozen of the 272 buckets, and a
/// host of 10,000 watched threads keeps several samples of every thread
/// (dense, 2.2 KB per thread per sample: issue 29's serve at 10,000
/// threads held over 80 MB of zeros).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EpisodeHist {
    #[serde(skip)]
    counts: Vec<(u16, u64)>,
    pub count: u64,
    pub sum_ns: u64,
    /// Longest episode seen (exact; cumulative samples keep the all-time
    /// maximum, so `since` keeps the later one when it grew, else the
    /// upper bound of the highest bucket that grew).
    pub max_ns: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
}

impl EpisodeHist {
    /// A histogram whose bucket counts are `buckets` (index, count), in any
    /// order; indexes past the last bucket are dropped.
    pub fn with_buckets(buckets: impl IntoIterator<Item = (usize, u64)>) -> EpisodeHist {
        let mut counts: Vec<(u16, u64)> = buckets
            .into_iter()
            .filter(|&(i, n)| i < BUCKETS && n > 0)
            .map(|(i, n)| (i as u16, n))
            .collect();
        counts.sort_unstable_by_key(|&(i, _)| i);
        counts.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        EpisodeHist {
            counts,
            ..EpisodeHist::default()
        }
    }

    /// The same buckets with the totals kept beside them (the kernel's, or
    /// a stored sample's: they are exact where the buckets are not).
    pub fn totals(
        self,
        count: u64,
        sum_ns: u64,
        max_ns: u64,
        over_1ms: u64,
        over_10ms: u64,
    ) -> Self {
        EpisodeHist {
            count,
            sum_ns,
            max_ns,
            over_1ms,
            over_10ms,
            ..self
        }
    }

    /// (bucket, count) of every bucket that holds any, in bucket order.
    pub fn buckets(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts.iter().map(|&(i, n)| (i as usize, n))
    }

    fn add_to_bucket(&mut self, i: usize, n: u64) {
        match self.counts.binary_search_by_key(&(i as u16), |&(b, _)| b) {
            Ok(at) => self.counts[at].1 += n,
            Err(at) => self.counts.insert(at, (i as u16, n)),
        }
    }

    pub fn record(&mut self, ns: u64) {
        self.add_to_bucket(bucket(ns), 1);
        self.count += 1;
        self.sum_ns += ns;
        self.max_ns = self.max_ns.max(ns);
        self.over_1ms += u64::from(ns > 1_000_000);
        self.over_10ms += u64::from(ns > 10_000_000);
    }

    /// Adds another histogram's episodes (of another interval or thread).
    pub fn add(&mut self, d: &EpisodeHist) {
        for (i, n) in d.buckets() {
            self.add_to_bucket(i, n);
        }
        self.count += d.count;
        self.sum_ns += d.sum_ns;
        self.max_ns = self.max_ns.max(d.max_ns);
        self.over_1ms += d.over_1ms;
        self.over_10ms += d.over_10ms;
    }

    /// Value at quantile `q` (0..=1): the upper bound of the bucket holding
    /// it, capped at the maximum seen. None when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.buckets() {
            seen += c;
            if seen >= rank {
                return Some(upper(i).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    pub fn since(&self, earlier: &EpisodeHist) -> EpisodeHist {
        // Both are in bucket order: one walk, no lookup table (this runs
        // for every watched thread at every scan).
        let mut before = earlier.counts.iter().peekable();
        let counts: Vec<(u16, u64)> = self
            .counts
            .iter()
            .filter_map(|&(i, n)| {
                while before.next_if(|&&(b, _)| b < i).is_some() {}
                let was = before.next_if(|&&(b, _)| b == i).map_or(0, |&(_, m)| m);
                let d = n.saturating_sub(was);
                (d > 0).then_some((i, d))
            })
            .collect();
        let max_ns = if self.max_ns > earlier.max_ns {
            self.max_ns
        } else {
            counts
                .last()
                .map(|&(i, _)| upper(i as usize).min(self.max_ns))
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

    #[test]
    fn sparse_counts_match_a_dense_count() {
        let values = [3u64, 3, 900, 5_000, 5_001, 2_000_000, 1 << 40];
        let mut h = EpisodeHist::default();
        let mut dense = vec![0u64; BUCKETS];
        for v in values {
            h.record(v);
            dense[bucket(v)] += 1;
        }
        let from_dense = EpisodeHist::with_buckets(dense.iter().copied().enumerate());
        assert_eq!(
            h.buckets().collect::<Vec<_>>(),
            from_dense.buckets().collect::<Vec<_>>()
        );
        assert!(h.buckets().all(|(_, n)| n > 0));
        let mut twice = h.clone();
        twice.add(&h);
        let d = twice.since(&h);
        assert_eq!(
            d.buckets().collect::<Vec<_>>(),
            h.buckets().collect::<Vec<_>>()
        );
        assert_eq!(d.count, values.len() as u64);
        assert_eq!(h.since(&h).buckets().count(), 0);
        // Buckets on one side only, either side.
        let (mut early, mut late) = (EpisodeHist::default(), EpisodeHist::default());
        early.record(900);
        early.record(2_000_000);
        late.record(5_000);
        late.record(2_000_000);
        late.record(2_000_000);
        let d: Vec<_> = late.since(&early).buckets().collect();
        assert_eq!(d, vec![(bucket(5_000), 1), (bucket(2_000_000), 1)]);
    }
}
