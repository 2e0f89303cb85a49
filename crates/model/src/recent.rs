//! The recent past of a live view: a bounded ring of short windows, one per
//! /proc/stat reading (deltas through [`crate::cputime::delta`], so hostile
//! counters are clamped as everywhere else). `top` draws its per-CPU bars
//! from the last second of it and its steal sparklines from single windows,
//! in shares of accounted time ([`CpuInterval::accounted_shares`]).
//! CPUs come and go with hotplug: each window holds the CPUs online at both
//! of its readings, and "now" is the CPU set of the newest window.

use crate::cputime::{delta, CpuInterval, IntervalDelta};
use std::collections::VecDeque;
use stealscope_readers::stat::ProcStat;

#[derive(Debug, Clone)]
pub struct Window {
    /// CLOCK_MONOTONIC of the reading that ended the window.
    pub end_ns: u64,
    pub delta: IntervalDelta,
}

#[derive(Debug, Clone)]
pub struct RecentWindows {
    clk_tck: f64,
    capacity: usize,
    prev: Option<(u64, ProcStat)>,
    windows: VecDeque<Window>,
    counter_anomalies: u64,
}

impl RecentWindows {
    /// Keeps at most `capacity` windows (at least one).
    pub fn new(clk_tck: f64, capacity: usize) -> Self {
        RecentWindows {
            clk_tck,
            capacity: capacity.max(1),
            prev: None,
            windows: VecDeque::new(),
            counter_anomalies: 0,
        }
    }

    /// Adds a reading taken at `t_ns` (CLOCK_MONOTONIC); a reading whose
    /// clock did not advance is ignored.
    pub fn push(&mut self, t_ns: u64, stat: ProcStat) {
        if let Some((t0, prev)) = &self.prev {
            if t_ns <= *t0 {
                return;
            }
            let wall_s = (t_ns - t0) as f64 / 1e9;
            let d = delta(prev, &stat, wall_s, self.clk_tck);
            self.counter_anomalies += d.anomalies.iter().filter(|a| a.is_counter()).count() as u64;
            if self.windows.len() == self.capacity {
                self.windows.pop_front();
            }
            self.windows.push_back(Window {
                end_ns: t_ns,
                delta: d,
            });
        }
        self.prev = Some((t_ns, stat));
    }

    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Oldest first.
    pub fn windows(&self) -> impl DoubleEndedIterator<Item = &Window> + ExactSizeIterator {
        self.windows.iter()
    }

    /// Counter anomalies (backwards, above wall time) clamped so far.
    pub fn counter_anomalies(&self) -> u64 {
        self.counter_anomalies
    }

    /// The CPUs online now: those of the newest window.
    pub fn cpus(&self) -> Vec<u32> {
        self.windows
            .back()
            .map(|w| w.delta.cpus.iter().map(|c| c.cpu).collect())
            .unwrap_or_default()
    }

    /// For each CPU online now, its windows that ended within `span_s` of
    /// the newest one, added up (at least the newest window).
    pub fn over_last(&self, span_s: f64) -> Vec<CpuInterval> {
        let Some(newest) = self.windows.back() else {
            return Vec::new();
        };
        let mut out: Vec<CpuInterval> = newest.delta.cpus.clone();
        let span_ns = (span_s.max(0.0) * 1e9) as u64;
        // Windows are added while the time they cover stays inside the span.
        let mut covered_ns = (newest.delta.wall_s * 1e9) as u64;
        for w in self.windows.iter().rev().skip(1) {
            let wall_ns = (w.delta.wall_s * 1e9) as u64;
            if covered_ns + wall_ns > span_ns {
                break;
            }
            covered_ns += wall_ns;
            for acc in &mut out {
                if let Some(c) = cpu_in(&w.delta, acc.cpu) {
                    acc.add(c);
                }
            }
        }
        out
    }

    /// Steal share (% of accounted time) of `cpu` in each of the newest `n`
    /// windows, oldest first; None where the CPU was offline or the kernel
    /// has no steal column.
    pub fn steal_series(&self, cpu: u32, n: usize) -> Vec<Option<f64>> {
        self.newest(n)
            .map(|w| cpu_in(&w.delta, cpu).and_then(|c| c.accounted_shares()?.steal))
            .collect()
    }

    /// Steal share of all CPUs together (stolen CPU-seconds over accounted
    /// CPU-seconds) in each of the newest `n` windows, oldest first.
    pub fn total_steal_series(&self, n: usize) -> Vec<Option<f64>> {
        self.newest(n)
            .map(|w| {
                total(&w.delta)
                    .filter(|t| t.has_steal)
                    .map(|t| t.steal_pct())
            })
            .collect()
    }

    fn newest(&self, n: usize) -> impl Iterator<Item = &Window> {
        self.windows
            .iter()
            .skip(self.windows.len().saturating_sub(n))
    }
}

/// One CPU of a window, by binary search (a frame of a big host looks up
/// every CPU in every window it draws): the rows follow /proc/stat, whose
/// parser refuses CPUs out of ascending order.
fn cpu_in(d: &IntervalDelta, cpu: u32) -> Option<&CpuInterval> {
    let i = d.cpus.binary_search_by_key(&cpu, |c| c.cpu).ok()?;
    Some(&d.cpus[i])
}

/// All CPUs of one window as one interval of CPU-seconds.
fn total(d: &IntervalDelta) -> Option<CpuInterval> {
    let (first, rest) = d.cpus.split_first()?;
    let mut t = *first;
    for c in rest {
        t.add(c);
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::stat::parse;

    const MS: u64 = 1_000_000;

    /// cpu rows "cpuN user nice system idle iowait irq softirq steal".
    fn st(rows: &[(u32, [u64; 8])]) -> ProcStat {
        let mut s = String::from("cpu  0 0 0 0 0 0 0 0\n");
        for (cpu, r) in rows {
            let cols: Vec<String> = r.iter().map(u64::to_string).collect();
            s.push_str(&format!("cpu{cpu} {}\n", cols.join(" ")));
        }
        parse(&s, "/proc/stat").unwrap()
    }

    /// Readings every 100 ms at 100 ticks/s: each window has 10 ticks per CPU,
    /// `steal` of them stolen and the rest idle.
    fn feed(r: &mut RecentWindows, steal_per_window: &[u64], cpus: &[u32]) {
        let (mut s, mut i) = (0, 0);
        for (k, st_ticks) in std::iter::once(&0).chain(steal_per_window).enumerate() {
            s += st_ticks;
            i += 10 - st_ticks;
            let rows: Vec<(u32, [u64; 8])> = cpus
                .iter()
                .map(|c| (*c, [0, 0, 0, i, 0, 0, 0, s]))
                .collect();
            r.push(1000 * MS + k as u64 * 100 * MS, st(&rows));
        }
    }

    #[test]
    fn ring_is_bounded_and_series_are_per_window() {
        let mut r = RecentWindows::new(100.0, 3);
        feed(&mut r, &[1, 2, 3, 4, 5], &[0, 1]);
        assert_eq!(r.len(), 3);
        let s = r.steal_series(0, 10);
        let pct: Vec<f64> = s.iter().map(|v| v.unwrap().round()).collect();
        assert_eq!(pct, [30.0, 40.0, 50.0]);
        assert_eq!(r.steal_series(1, 2).len(), 2);
        assert_eq!(r.total_steal_series(1)[0].map(f64::round), Some(50.0));
        assert_eq!(r.cpus(), [0, 1]);
    }

    #[test]
    fn over_last_adds_the_windows_inside_the_span() {
        let mut r = RecentWindows::new(100.0, 100);
        feed(&mut r, &[0, 0, 10, 10, 0, 5], &[0]);
        // The last 0.3 s: windows with 10, 0 and 5 stolen ticks of 30.
        let c = r.over_last(0.3)[0];
        assert!((c.wall_s - 0.3).abs() < 1e-9);
        assert!((c.steal_pct() - 50.0).abs() < 1e-6);
        assert!((c.idle_pct() - 50.0).abs() < 1e-6);
        // A span shorter than a window still gives the newest one.
        assert!((r.over_last(0.01)[0].steal_pct() - 50.0).abs() < 1e-6);
    }

    #[test]
    fn hotplug_is_followed() {
        let mut r = RecentWindows::new(100.0, 10);
        r.push(0, st(&[(0, [0; 8]), (1, [0; 8])]));
        r.push(100 * MS, st(&[(0, [0, 0, 0, 10, 0, 0, 0, 0])]));
        assert_eq!(r.cpus(), [0]);
        assert_eq!(r.steal_series(1, 5), [None]);
        r.push(
            200 * MS,
            st(&[
                (0, [0, 0, 0, 15, 0, 0, 0, 5]),
                (1, [0, 0, 0, 5, 0, 0, 0, 5]),
            ]),
        );
        // cpu1 came back with counters it kept: the window has cpu0 only.
        assert_eq!(r.cpus(), [0]);
        r.push(
            300 * MS,
            st(&[
                (0, [0, 0, 0, 25, 0, 0, 0, 5]),
                (1, [0, 0, 0, 10, 0, 0, 0, 10]),
            ]),
        );
        assert_eq!(r.cpus(), [0, 1]);
        let s1: Vec<Option<f64>> = r
            .steal_series(1, 5)
            .iter()
            .map(|v| v.map(f64::round))
            .collect();
        assert_eq!(s1, [None, None, Some(50.0)]);
        assert_eq!(r.over_last(10.0).len(), 2);
    }

    #[test]
    fn missing_steal_column_is_none_and_stale_clock_ignored() {
        let mut r = RecentWindows::new(100.0, 10);
        let p = |idle| parse(&format!("cpu  0 0 0 0\ncpu0 0 0 0 {idle}\n"), "s").unwrap();
        r.push(100 * MS, p(0));
        r.push(100 * MS, p(50));
        assert!(r.is_empty());
        r.push(200 * MS, p(10));
        assert_eq!(r.steal_series(0, 1), [None]);
        assert_eq!(r.total_steal_series(1), [None]);
        assert!((r.over_last(1.0)[0].idle_pct() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn backwards_counters_are_counted() {
        let mut r = RecentWindows::new(100.0, 10);
        r.push(0, st(&[(0, [0, 0, 0, 0, 0, 0, 0, 50])]));
        r.push(100 * MS, st(&[(0, [0, 0, 0, 10, 0, 0, 0, 0])]));
        assert_eq!(r.counter_anomalies(), 1);
        assert_eq!(r.steal_series(0, 1), [Some(0.0)]);
    }
}
