//! The one judgement of "steal came in a burst", used by the `steal.bursty`
//! rule (doctor, record, report, top, serve's findings), the report's burst
//! histogram and serve's steal-share histogram.
//!
//! /proc/stat prints steal in USER_HZ units (10 ms at CLK_TCK=100): the
//! kernel keeps nanoseconds, adds the paravirt steal clock at every tick
//! (4 ms at HZ=250) or when a NO_HZ-idle CPU wakes, and `nsec_to_clock_t`
//! truncates what it prints. A 10 ms window at 100 Hz therefore reads 0 or
//! 1 unit for a trickle of steal: one unit is 100 % of that window and says
//! only that the truncated total crossed a boundary. So bursts are judged on
//! spans of consecutive windows of one CPU at least [`BURST_SPAN_S`] long,
//! where one unit is at most ~11 %, and a span needs [`BURST_MIN_UNITS`]
//! units besides [`BURST_WINDOW_PCT`] of its length.

use crate::cputime::IntervalDelta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A span with this much steal is a burst: the case's 18 ms stall is 18 % of
/// a 100 ms span.
pub const BURST_WINDOW_PCT: f64 = 15.0;
/// Shortest span judged: 100 ms, less jitter so that 10 Hz windows (about
/// 100 ms each) are judged alone; at 100 Hz nine or ten windows are merged.
pub const BURST_SPAN_S: f64 = 0.09;
/// A burst holds at least this many counter units: the difference of two
/// truncated totals is off by less than one unit, so one unit can be
/// rounding alone while two mean more than one unit was stolen.
pub const BURST_MIN_UNITS: f64 = 2.0;

/// Consecutive windows of one CPU, merged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub cpu: u32,
    pub start_s: f64,
    pub wall_s: f64,
    pub steal_s: f64,
}

impl Span {
    pub fn steal_pct(&self) -> f64 {
        if self.wall_s > 0.0 {
            100.0 * self.steal_s / self.wall_s
        } else {
            0.0
        }
    }
}

/// Whether `steal_s` stolen in `wall_s` (at least [`BURST_SPAN_S`]) is a
/// burst, given the counter unit 1/`clk_tck` s.
pub fn is_burst(steal_s: f64, wall_s: f64, clk_tck: f64) -> bool {
    long_enough(wall_s)
        && steal_s >= (BURST_MIN_UNITS - 1e-6) / clk_tck
        && 100.0 * steal_s >= BURST_WINDOW_PCT * wall_s
}

/// Sums of window lengths carry float error; a nanosecond does not matter.
fn long_enough(wall_s: f64) -> bool {
    wall_s >= BURST_SPAN_S - 1e-9
}

/// Each CPU's windows in order: (start s, wall s, steal s); CPUs without a
/// steal column are left out.
fn per_cpu(windows: &[(f64, IntervalDelta)]) -> BTreeMap<u32, Vec<(f64, f64, f64)>> {
    let mut m: BTreeMap<u32, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for (start, w) in windows {
        for c in w.cpus.iter().filter(|c| c.has_steal && c.wall_s > 0.0) {
            m.entry(c.cpu)
                .or_default()
                .push((*start, c.wall_s, c.secs.steal));
        }
    }
    m
}

/// Adds windows to a span until it is at least [`BURST_SPAN_S`] long; the
/// span is complete when this returns it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpanBuilder {
    start_s: Option<f64>,
    wall_s: f64,
    steal_s: f64,
}

impl SpanBuilder {
    pub fn push(&mut self, cpu: u32, start_s: f64, wall_s: f64, steal_s: f64) -> Option<Span> {
        let start = *self.start_s.get_or_insert(start_s);
        self.wall_s += wall_s;
        self.steal_s += steal_s;
        if !long_enough(self.wall_s) {
            return None;
        }
        let s = Span {
            cpu,
            start_s: start,
            wall_s: self.wall_s,
            steal_s: self.steal_s,
        };
        *self = SpanBuilder::default();
        Some(s)
    }
}

/// Back-to-back spans covering each CPU's windows once (a short tail is
/// dropped): what a histogram counts.
pub fn spans(windows: &[(f64, IntervalDelta)]) -> Vec<Span> {
    let mut out = Vec::new();
    for (cpu, ws) in per_cpu(windows) {
        let mut b = SpanBuilder::default();
        out.extend(ws.iter().filter_map(|&(s, w, st)| b.push(cpu, s, w, st)));
    }
    out
}

/// What the burst judgement found over a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bursts {
    /// The burst span with the most steal.
    pub peak: Span,
    /// Separate bursts: overlapping or touching burst spans of one CPU
    /// count once.
    pub count: usize,
}

/// Judges every span that starts at a window (so a burst straddling two
/// back-to-back spans is not halved); None when no span is a burst.
pub fn judge(windows: &[(f64, IntervalDelta)], clk_tck: f64) -> Option<Bursts> {
    let mut peak: Option<Span> = None;
    let mut count = 0;
    for (cpu, ws) in per_cpu(windows) {
        // Index of the last window of the latest burst span on this CPU.
        let mut burst_until: Option<usize> = None;
        let (mut j, mut wall, mut steal) = (0usize, 0.0, 0.0);
        for i in 0..ws.len() {
            while !long_enough(wall) && j < ws.len() {
                wall += ws[j].1;
                steal += ws[j].2;
                j += 1;
            }
            if !long_enough(wall) {
                break;
            }
            if is_burst(steal, wall, clk_tck) {
                if burst_until.is_none_or(|end| i > end + 1) {
                    count += 1;
                }
                burst_until = Some(j - 1);
                let s = Span {
                    cpu,
                    start_s: ws[i].0,
                    wall_s: wall,
                    steal_s: steal,
                };
                if peak.is_none_or(|p| s.steal_pct() > p.steal_pct()) {
                    peak = Some(s);
                }
            }
            wall -= ws[i].1;
            steal -= ws[i].2;
        }
    }
    peak.map(|peak| Bursts { peak, count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cputime::{CpuInterval, ModeSecs};

    /// `n` windows of `ms` on one CPU; `steal_ticks(i)` units in window i.
    fn series(n: usize, ms: f64, steal_ticks: impl Fn(usize) -> u32) -> Vec<(f64, IntervalDelta)> {
        (0..n)
            .map(|i| {
                let wall = ms / 1000.0;
                let steal = steal_ticks(i) as f64 / 100.0;
                let c = CpuInterval {
                    cpu: 1,
                    secs: ModeSecs {
                        idle: (wall - steal).max(0.0),
                        steal,
                        ..Default::default()
                    },
                    wall_s: wall,
                    has_steal: true,
                };
                (
                    i as f64 * wall,
                    IntervalDelta {
                        wall_s: wall,
                        cpus: vec![c],
                        anomalies: vec![],
                    },
                )
            })
            .collect()
    }

    #[test]
    fn one_unit_in_a_10ms_window_is_no_burst() {
        let w = series(1500, 10.0, |i| u32::from(i == 700));
        assert_eq!(judge(&w, 100.0), None);
        // ...nor are units a second apart.
        let w = series(1500, 10.0, |i| u32::from(i % 100 == 0));
        assert_eq!(judge(&w, 100.0), None);
    }

    #[test]
    fn forty_percent_for_200ms_is_one_burst_at_any_rate() {
        // 100 Hz: 8 units spread over 20 windows of 10 ms.
        let w = series(1500, 10.0, |i| {
            u32::from((700..720).contains(&i) && i % 5 < 2)
        });
        let b = judge(&w, 100.0).expect("burst");
        assert_eq!(b.count, 1);
        assert_eq!(b.peak.cpu, 1);
        assert!(b.peak.steal_pct() >= 30.0, "{b:?}");
        assert!((6.9..7.3).contains(&b.peak.start_s), "{b:?}");
        // 10 Hz: two windows of 100 ms with 4 units each.
        let w = series(150, 100.0, |i| if (70..72).contains(&i) { 4 } else { 0 });
        let b = judge(&w, 100.0).expect("burst");
        assert_eq!(b.count, 1);
        assert!((b.peak.steal_pct() - 40.0).abs() < 1e-9);
    }

    #[test]
    fn spans_cover_each_window_once() {
        let w = series(95, 10.0, |i| u32::from(i == 3));
        let s = spans(&w);
        assert_eq!(s.len(), 10);
        assert!((s[0].steal_s - 0.01).abs() < 1e-12);
        assert!(s.iter().all(|s| s.steal_pct() <= 100.0 / 9.0 + 1e-9));
    }
}
