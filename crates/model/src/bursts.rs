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

/// One exact steal episode (issue 30): its CPU, when it was seen (the
/// steal clock read after it, CLOCK_MONOTONIC ns) and how much was stolen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    pub cpu: u32,
    pub seen_ns: u64,
    pub ns: u64,
}

/// The same judgement on exact episodes: a span of one CPU at least
/// [`BURST_SPAN_S`] long is a burst when the episodes inside it stole
/// [`BURST_WINDOW_PCT`] of it. Nanoseconds have no counter unit, so
/// [`BURST_MIN_UNITS`] does not apply: one 13.5 ms episode is a burst,
/// as is 14 ms stolen in 1 ms pieces within 90 ms. An episode takes at
/// least its own length of wall time, ending when it was seen; `start_s`
/// is the span's start on CLOCK_MONOTONIC. Only the episodes given count
/// (the collector lists the largest), so a burst found is real and one of
/// unlisted small episodes can be missed.
pub fn judge_episodes(episodes: &[Episode]) -> Option<Bursts> {
    let mut by_cpu: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for e in episodes {
        let end = e.seen_ns as f64 / 1e9;
        let len = e.ns as f64 / 1e9;
        by_cpu.entry(e.cpu).or_default().push((end - len, len));
    }
    let mut peak: Option<Span> = None;
    let mut count = 0;
    for (cpu, mut eps) in by_cpu {
        eps.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut burst_until = f64::NEG_INFINITY;
        for i in 0..eps.len() {
            let start = eps[i].0;
            let (mut end, mut steal) = (start, 0.0);
            // Episodes starting within the span that begins at this one.
            for &(s, len) in eps[i..].iter().take_while(|e| e.0 < start + BURST_SPAN_S) {
                end = end.max(s + len);
                steal += len;
            }
            let wall = (end - start).max(BURST_SPAN_S);
            if 100.0 * steal < BURST_WINDOW_PCT * wall {
                continue;
            }
            if start > burst_until {
                count += 1;
            }
            burst_until = burst_until.max(start + wall);
            let span = Span {
                cpu,
                start_s: start,
                wall_s: wall,
                steal_s: steal,
            };
            if peak.is_none_or(|p| span.steal_pct() > p.steal_pct()) {
                peak = Some(span);
            }
        }
    }
    peak.map(|peak| Bursts { peak, count })
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

    fn ep(cpu: u32, seen_ms: f64, ms: f64) -> Episode {
        Episode {
            cpu,
            seen_ns: (seen_ms * 1e6) as u64,
            ns: (ms * 1e6) as u64,
        }
    }

    #[test]
    fn one_long_episode_is_a_burst_and_a_short_one_is_not() {
        let b = judge_episodes(&[ep(1, 1000.0, 18.0), ep(0, 500.0, 2.0)]).unwrap();
        assert_eq!((b.count, b.peak.cpu), (1, 1));
        assert!((b.peak.steal_s - 0.018).abs() < 1e-9, "{b:?}");
        assert!((b.peak.wall_s - BURST_SPAN_S).abs() < 1e-9, "{b:?}");
        assert!((b.peak.start_s - 0.982).abs() < 1e-9, "{b:?}");
        // 13 ms in 90 ms is under 15 %.
        assert_eq!(judge_episodes(&[ep(0, 100.0, 13.0)]), None);
        assert_eq!(judge_episodes(&[]), None);
    }

    #[test]
    fn pieces_within_a_span_add_up_and_apart_they_do_not() {
        // Seven 2 ms pieces 10 ms apart: 14 ms within 90 ms.
        let close: Vec<Episode> = (0..7)
            .map(|i| ep(0, 100.0 + 10.0 * i as f64, 2.0))
            .collect();
        let b = judge_episodes(&close).unwrap();
        assert_eq!(b.count, 1, "{b:?}");
        assert!((b.peak.steal_s - 0.014).abs() < 1e-9, "{b:?}");
        // The same pieces 100 ms apart, or on different CPUs: no burst.
        let apart: Vec<Episode> = (0..7).map(|i| ep(0, 100.0 * i as f64, 2.0)).collect();
        assert_eq!(judge_episodes(&apart), None);
        let spread: Vec<Episode> = (0..7).map(|i| ep(i, 100.0, 2.0)).collect();
        assert_eq!(judge_episodes(&spread), None);
    }

    #[test]
    fn separate_bursts_count_apart_and_overlapping_ones_once() {
        let two = [ep(0, 100.0, 20.0), ep(0, 130.0, 20.0), ep(0, 2000.0, 30.0)];
        let b = judge_episodes(&two).unwrap();
        assert_eq!(b.count, 2, "{b:?}");
        // The peak: 40 ms in 90 ms (44 %), not 30 ms in 90 ms (33 %).
        assert!((b.peak.steal_s - 0.040).abs() < 1e-9, "{b:?}");
    }
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
