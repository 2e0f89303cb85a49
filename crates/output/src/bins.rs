//! Time bins, for the page's plots and the text report: a long series
//! becomes at most [`MAX_BINS`] columns so the page stays small (an hour at
//! 1000 Hz is 3.6 million windows per CPU). A window counts in each bin it
//! overlaps by the share it has there; a bin's value is the sum of
//! numerators over the sum of denominators (a time-weighted mean, so uneven
//! windows count by their length).

use std::collections::BTreeMap;

/// Columns of a time plot at most (about 4 px each at the page's width).
pub const MAX_BINS: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeBins {
    /// Offset of the first bin's start, seconds.
    pub t0: f64,
    /// Width of one bin, seconds.
    pub width: f64,
    pub n: usize,
    /// Windows in the series; with `n` this says how many one bin averages.
    pub windows: usize,
}

impl TimeBins {
    /// Bins over windows given as (start offset, length), at most `max` of
    /// them and never more than there are windows. None without a window of
    /// positive length.
    pub fn over(spans: impl IntoIterator<Item = (f64, f64)>, max: usize) -> Option<TimeBins> {
        let (mut lo, mut hi, mut windows) = (f64::INFINITY, f64::NEG_INFINITY, 0usize);
        for (start, wall) in spans {
            if !(start.is_finite() && wall.is_finite() && wall > 0.0) {
                continue;
            }
            lo = lo.min(start);
            hi = hi.max(start + wall);
            windows += 1;
        }
        // Every plot starts at the first sample (offset 0), so that a series
        // read later (interrupts at 1 Hz, vCPU threads) lines up with the
        // steal map and its axis has a +0 s tick.
        lo = lo.min(0.0);
        // A span beyond f64 (hostile starts) cannot be drawn either.
        if windows == 0 || !(hi > lo && (hi - lo).is_finite()) {
            return None;
        }
        let n = windows.min(max.max(1));
        Some(TimeBins {
            t0: lo,
            width: (hi - lo) / n as f64,
            n,
            windows,
        })
    }

    /// Bins for a series with one entry per row and window (vCPU windows):
    /// `per_row` is the most windows any row has.
    pub fn over_rows(
        spans: impl IntoIterator<Item = (f64, f64)>,
        per_row: usize,
        max: usize,
    ) -> Option<TimeBins> {
        let all = TimeBins::over(spans, usize::MAX)?;
        let n = per_row.clamp(1, max.max(1));
        Some(TimeBins {
            t0: all.t0,
            width: all.span_s() / n as f64,
            n,
            windows: per_row.max(1),
        })
    }

    /// The bins a window overlaps, each with the share of the window that
    /// falls in it (shares sum to 1 inside the bins' span). Spreading by
    /// overlap keeps jittery windows from leaving empty columns beside
    /// doubled ones.
    pub fn spread(&self, start: f64, wall: f64) -> impl Iterator<Item = (usize, f64)> + '_ {
        let ok = start.is_finite() && wall.is_finite() && wall > 0.0 && self.width > 0.0;
        let first = if ok {
            ((start - self.t0) / self.width).floor().max(0.0) as usize
        } else {
            self.n
        };
        let end = start + wall;
        (first..self.n)
            .map_while(move |i| {
                let lo = self.start_of(i);
                // Far from 0, `start + wall - start` is off by an ulp of
                // `start`: a share just over 1 is rounding, not overlap.
                (lo < end).then(|| {
                    let share = (self.start_of(i + 1).min(end) - lo.max(start)) / wall;
                    (i, share.min(1.0))
                })
            })
            // Float slivers at bin edges are not overlap.
            .filter(|&(_, share)| share > 1e-9)
    }

    pub fn start_of(&self, i: usize) -> f64 {
        self.t0 + i as f64 * self.width
    }

    pub fn span_s(&self) -> f64 {
        self.width * self.n as f64
    }

    /// "each column 0.10 s (1 window)" or "... (25 windows averaged)".
    pub fn describe(&self) -> String {
        let per = self.windows as f64 / self.n as f64;
        let what = if per <= 1.0 + 1e-9 {
            "1 window".to_string()
        } else {
            format!("~{per:.0} windows averaged")
        };
        format!("each column {} ({what})", fmt_secs(self.width))
    }
}

/// Per-row sums of numerator and denominator per bin.
#[derive(Debug, Clone)]
pub struct Grid<K: Ord> {
    n: usize,
    rows: BTreeMap<K, Vec<(f64, f64)>>,
}

impl<K: Ord + Clone> Grid<K> {
    pub fn new(bins: &TimeBins) -> Self {
        Grid {
            n: bins.n,
            rows: BTreeMap::new(),
        }
    }

    /// Declares a row even if no value lands in it (it shows as no data).
    pub fn row(&mut self, key: K) {
        let n = self.n;
        self.rows.entry(key).or_insert_with(|| vec![(0.0, 0.0); n]);
    }

    pub fn add(&mut self, key: K, bin: usize, num: f64, den: f64) {
        if !(num.is_finite() && den.is_finite() && den > 0.0) || bin >= self.n {
            return;
        }
        let n = self.n;
        let cell = &mut self.rows.entry(key).or_insert_with(|| vec![(0.0, 0.0); n])[bin];
        cell.0 += num;
        cell.1 += den;
    }

    /// Adds a window's totals to the bins it overlaps, by overlap.
    pub fn add_window(
        &mut self,
        bins: &TimeBins,
        key: K,
        start: f64,
        wall: f64,
        num: f64,
        den: f64,
    ) {
        for (i, share) in bins.spread(start, wall) {
            self.add(key.clone(), i, num * share, den * share);
        }
    }

    /// Rows in key order, each value `scale * num / den`, None where nothing
    /// landed.
    pub fn ratios(&self, scale: f64) -> Vec<(K, Vec<Option<f64>>)> {
        self.rows
            .iter()
            .map(|(k, cells)| {
                let v = cells
                    .iter()
                    .map(|&(num, den)| (den > 0.0).then(|| scale * num / den))
                    .collect();
                (k.clone(), v)
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A duration for people: 250 ms, 2.5 s, 4.0 min, 1.50 h.
pub fn fmt_secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 60.0 {
        format!("{} s", trim(format!("{s:.2}")))
    } else if s < 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.2} h", s / 3600.0)
    }
}

/// A value with up to `digits` decimals, trailing zeros dropped.
pub fn fmt_num(v: f64, digits: usize) -> String {
    trim(format!("{v:.digits$}"))
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bin_per_window_until_the_cap() {
        let w: Vec<(f64, f64)> = (0..50).map(|i| (i as f64 * 0.1, 0.1)).collect();
        let b = TimeBins::over(w.iter().copied(), MAX_BINS).unwrap();
        assert_eq!(b.n, 50);
        for (i, (s, l)) in w.iter().enumerate() {
            let sp: Vec<_> = b.spread(*s, *l).collect();
            assert_eq!(sp.len(), 1);
            assert_eq!(sp[0].0, i);
            assert!((sp[0].1 - 1.0).abs() < 1e-6);
        }
        let long: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64 * 0.001, 0.001)).collect();
        let b = TimeBins::over(long.iter().copied(), MAX_BINS).unwrap();
        assert_eq!(b.n, MAX_BINS);
        assert!((b.width - 10.0 / MAX_BINS as f64).abs() < 1e-9);
        // Every bin gets the same time (50 windows of 1 ms).
        let mut got = vec![0.0; b.n];
        for (s, l) in long {
            for (i, share) in b.spread(s, l) {
                got[i] += share * l;
            }
        }
        assert!(got.iter().all(|t| (t - 0.05).abs() < 1e-9), "{got:?}");
    }

    #[test]
    fn empty_and_degenerate_series_have_no_bins() {
        assert_eq!(TimeBins::over([], MAX_BINS), None);
        assert_eq!(TimeBins::over([(1.0, 0.0), (f64::NAN, 1.0)], 10), None);
    }

    #[test]
    fn a_jittery_window_is_shared_by_overlap() {
        // Three windows of 0.9, 1.2 and 0.9 s over bins of 1 s.
        let w = [(0.0, 0.9), (0.9, 1.2), (2.1, 0.9)];
        let b = TimeBins::over(w, 10).unwrap();
        assert_eq!(b.n, 3);
        let sp: Vec<_> = b.spread(0.9, 1.2).collect();
        let want = [(0, 0.1 / 1.2), (1, 1.0 / 1.2), (2, 0.1 / 1.2)];
        assert_eq!(sp.len(), want.len());
        for ((i, share), (wi, ws)) in sp.iter().zip(want) {
            assert_eq!(*i, wi);
            assert!((share - ws).abs() < 1e-9);
        }
        let mut g = Grid::new(&b);
        for (s, l) in w {
            g.add_window(&b, 0u8, s, l, 0.5 * l, l);
        }
        // No empty column, and 50 % everywhere stays 50 %.
        for v in &g.ratios(100.0)[0].1 {
            assert!((v.unwrap() - 50.0).abs() < 1e-9);
        }
    }

    #[test]
    fn grid_is_a_time_weighted_mean() {
        let b = TimeBins::over([(0.0, 1.0), (1.0, 3.0)], 1).unwrap();
        let mut g = Grid::new(&b);
        // 10 % of 1 s and 50 % of 3 s: 1.6 s of 4 s.
        g.add(0u32, 0, 0.1, 1.0);
        g.add(0u32, 0, 1.5, 3.0);
        g.row(1u32);
        let r = g.ratios(100.0);
        assert!((r[0].1[0].unwrap() - 40.0).abs() < 1e-9);
        assert_eq!(r[1].1, vec![None]);
    }

    proptest::proptest! {
        /// Any series, however uneven or hostile: every window lands in
        /// bins that exist, with shares in (0, 1] summing to at most 1.
        #[test]
        fn spreading_any_series_is_sound(
            spans in proptest::collection::vec((-1e6f64..1e6, -1.0f64..1e3), 0..50),
            max in 1usize..300,
        ) {
            let Some(b) = TimeBins::over(spans.iter().copied(), max) else {
                return Ok(());
            };
            proptest::prop_assert!(b.n >= 1 && b.n <= max);
            for (s, l) in spans {
                let mut sum = 0.0;
                for (i, share) in b.spread(s, l) {
                    proptest::prop_assert!(i < b.n);
                    proptest::prop_assert!(share > 0.0 && share <= 1.0 + 1e-9);
                    sum += share;
                }
                proptest::prop_assert!(sum <= 1.0 + 1e-6);
            }
        }
    }
}
