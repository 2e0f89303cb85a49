//! Wait-episode histogram with log-linear buckets: 8 sub-buckets per power
//! of two (at most 12.5 % relative error), exact below 8 ns, clamped at
//! 2^36 ns (about 69 s). Hand-written rather than `hdrhistogram` because the
//! BPF program fills the same buckets in the kernel (`bucket()` is mirrored
//! in bpf/wait_by.bpf.c) and user space only adds them up.

use bytes::{Bytes, BytesMut};
use integer_encoding::VarInt;
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

/// Counts are kept sparse, for the buckets that hold any, in bucket order:
/// a wait lands in a few dozen of the 272 buckets, and a host of 10,000
/// watched threads keeps several readings of every thread (dense, 2.2 KB
/// per thread per reading: issue 29's serve at 10,000 threads held over
/// 80 MB of zeros).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EpisodeHist {
    #[serde(skip)]
    counts: Counts,
    pub count: u64,
    pub sum_ns: u64,
    /// Longest episode seen (exact; cumulative samples keep the all-time
    /// maximum, so `since` keeps the later one when it grew, else the
    /// upper bound of the highest bucket that grew).
    pub max_ns: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
}

/// The non-empty buckets, in one of two forms.
#[derive(Clone)]
enum Counts {
    /// (bucket, count): what `record` and `add` change.
    Open(Vec<(u16, u64)>),
    /// Varint (gap to the previous bucket, count) pairs in a slice of a
    /// reading's shared buffer ([`HistPacker`]). Read-only. A cumulative
    /// histogram only gains buckets over weeks, and every reading held
    /// has one per watched thread: as pairs of 16 bytes, each in its own
    /// allocation whose size drifts up, they were half of issue 29's
    /// serve growth (BENCHMARKS.md); packed they take 2-4 bytes a bucket
    /// in a few chunks of one size. A packed histogram keeps its whole
    /// chunk alive: what is kept on its own for long (a running total) is
    /// a `since` or `add` result, which is open.
    Packed(Bytes),
}

impl Counts {
    fn buckets(&self) -> Buckets<'_> {
        Buckets(match self {
            Counts::Open(v) => BucketsIn::Open(v.iter()),
            Counts::Packed(b) => BucketsIn::Packed { rest: b, next: 0 },
        })
    }
}

/// The buckets, not the packed bytes.
impl std::fmt::Debug for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.buckets()).finish()
    }
}

impl Default for Counts {
    fn default() -> Self {
        Counts::Open(Vec::new())
    }
}

/// (bucket, count) of a histogram's non-empty buckets, in bucket order.
pub struct Buckets<'a>(BucketsIn<'a>);

enum BucketsIn<'a> {
    Open(std::slice::Iter<'a, (u16, u64)>),
    Packed { rest: &'a [u8], next: usize },
}

impl Iterator for Buckets<'_> {
    type Item = (usize, u64);

    fn next(&mut self) -> Option<(usize, u64)> {
        match &mut self.0 {
            BucketsIn::Open(it) => it.next().map(|&(i, n)| (i as usize, n)),
            BucketsIn::Packed { rest, next } => {
                let (gap, a) = u64::decode_var(rest)?;
                let (n, b) = u64::decode_var(&rest[a..])?;
                *rest = &rest[a + b..];
                let i = *next + gap as usize;
                *next = i + 1;
                Some((i, n))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            BucketsIn::Open(it) => it.size_hint(),
            // 2 to 12 bytes a bucket (MAX_PACKED).
            BucketsIn::Packed { rest, .. } => (rest.len().div_ceil(12), Some(rest.len() / 2)),
        }
    }
}

impl std::iter::FusedIterator for Buckets<'_> {}

/// Packs the histograms of one reading into shared chunks: each packed
/// histogram is a slice of a chunk, so a reading of 10,000 threads is a
/// few dozen allocations of one size instead of 10,000 of drifting sizes.
#[derive(Debug, Default)]
pub struct HistPacker {
    buf: BytesMut,
}

/// Bytes one chunk holds.
const CHUNK: usize = 64 * 1024;
/// Most bytes one histogram can take: every bucket, a 2-byte gap and a
/// 10-byte count each.
const MAX_PACKED: usize = BUCKETS * 12;

impl HistPacker {
    /// The counts of `dense` (one per bucket, in bucket order; indexes past
    /// the last bucket are dropped), packed. Totals are left at zero: the
    /// caller sets them ([`EpisodeHist::totals`]).
    pub fn pack_dense(&mut self, dense: &[u64]) -> EpisodeHist {
        self.pack(dense.iter().copied().enumerate().take(BUCKETS))
    }

    /// `h` with its counts packed.
    pub fn repack(&mut self, h: &EpisodeHist) -> EpisodeHist {
        EpisodeHist {
            counts: self.pack(h.buckets()).counts,
            ..*h
        }
    }

    /// `buckets` must come in ascending bucket order (both callers' do).
    fn pack(&mut self, buckets: impl Iterator<Item = (usize, u64)>) -> EpisodeHist {
        if self.buf.capacity() - self.buf.len() < MAX_PACKED {
            self.buf = BytesMut::with_capacity(CHUNK);
        }
        let mut tmp = [0u8; 10];
        let mut next = 0;
        for (i, n) in buckets.filter(|&(_, n)| n > 0) {
            assert!(i >= next, "bucket {i} out of order");
            for v in [(i - next) as u64, n] {
                let len = v.encode_var(&mut tmp);
                self.buf.extend_from_slice(&tmp[..len]);
            }
            next = i + 1;
        }
        // An empty one holds no chunk.
        let counts = if self.buf.is_empty() {
            Counts::default()
        } else {
            Counts::Packed(self.buf.split().freeze())
        };
        EpisodeHist {
            counts,
            ..EpisodeHist::default()
        }
    }
}

impl PartialEq for EpisodeHist {
    fn eq(&self, o: &EpisodeHist) -> bool {
        (
            self.count,
            self.sum_ns,
            self.max_ns,
            self.over_1ms,
            self.over_10ms,
        ) == (o.count, o.sum_ns, o.max_ns, o.over_1ms, o.over_10ms)
            && self.buckets().eq(o.buckets())
    }
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
            counts: Counts::Open(counts),
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
    pub fn buckets(&self) -> Buckets<'_> {
        self.counts.buckets()
    }

    /// The counts in the form `record` and `add` change.
    fn open(&mut self) -> &mut Vec<(u16, u64)> {
        if let Counts::Packed(_) = self.counts {
            let v = self.buckets().map(|(i, n)| (i as u16, n)).collect();
            self.counts = Counts::Open(v);
        }
        match &mut self.counts {
            Counts::Open(v) => v,
            Counts::Packed(_) => unreachable!("opened above"),
        }
    }

    fn add_to_bucket(&mut self, i: usize, n: u64) {
        let counts = self.open();
        match counts.binary_search_by_key(&(i as u16), |&(b, _)| b) {
            Ok(at) => counts[at].1 += n,
            Err(at) => counts.insert(at, (i as u16, n)),
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
        let mut before = earlier.buckets().peekable();
        let counts: Vec<(u16, u64)> = self
            .buckets()
            .filter_map(|(i, n)| {
                while before.next_if(|&(b, _)| b < i).is_some() {}
                let was = before.next_if(|&(b, _)| b == i).map_or(0, |(_, m)| m);
                let d = n.saturating_sub(was);
                (d > 0).then_some((i as u16, d))
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
            counts: Counts::Open(counts),
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

    #[test]
    fn packed_counts_read_back_and_subtract_as_open_ones() {
        let values = [0u64, 7, 8, 900, 5_000, 5_001, 2_000_000, 1 << 40];
        let mut open = EpisodeHist::default();
        let mut dense = vec![0u64; BUCKETS];
        for (k, v) in values.iter().enumerate() {
            // Counts past one varint byte too.
            for _ in 0..=k * 60 {
                open.record(*v);
                dense[bucket(*v)] += 1;
            }
        }
        let mut packer = HistPacker::default();
        let packed = packer.pack_dense(&dense).totals(
            open.count,
            open.sum_ns,
            open.max_ns,
            open.over_1ms,
            open.over_10ms,
        );
        assert_eq!(packed, open);
        assert_eq!(packer.repack(&open), open);
        let mut early = EpisodeHist::default();
        early.record(5_000);
        early.record(1 << 40);
        let early = packer.repack(&early);
        assert_eq!(packed.since(&early), open.since(&early));
        let early_open = EpisodeHist::with_buckets(early.buckets());
        assert_eq!(packed.since(&early_open), open.since(&early_open));
        assert_eq!(packed.quantile(0.5), open.quantile(0.5));
        assert_eq!(packed.quantile(0.99), open.quantile(0.99));
        let mut sum = packer.repack(&early);
        sum.add(&packed);
        let mut want = EpisodeHist::with_buckets(early.buckets());
        want.add(&open);
        assert_eq!(
            sum.buckets().collect::<Vec<_>>(),
            want.buckets().collect::<Vec<_>>()
        );
        // Changing a packed histogram opens it first.
        let mut grown = packed.clone();
        grown.record(5_000);
        open.record(5_000);
        assert_eq!(grown, open);
        assert_eq!(packer.pack_dense(&[0; BUCKETS]).buckets().count(), 0);
        // More than a chunk: every histogram still reads back whole.
        let full: Vec<u64> = (0..BUCKETS as u64).map(|i| (1 << 40) + i).collect();
        let many: Vec<EpisodeHist> = (0..2 * CHUNK / (BUCKETS * 7))
            .map(|_| packer.pack_dense(&full))
            .collect();
        let want: Vec<(usize, u64)> = full.iter().copied().enumerate().collect();
        assert!(many.iter().all(|h| h.buckets().eq(want.iter().copied())));
    }
}
