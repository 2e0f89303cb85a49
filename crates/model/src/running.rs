//! Running totals over an unbounded /proc/stat series, for long-running
//! exporters (`serve`): per-CPU seconds per mode that never decrease, because
//! every step is a [`delta`] (a counter that goes backwards or jumps past wall
//! time is clamped there and counted here), and a histogram of the steal
//! share of every span of at least ~100 ms (windows merged as the burst
//! judgement merges them, [`crate::bursts`]), so bursts survive a 15 s
//! scrape and one 10 ms counter unit does not read as a 100 % window.

use crate::bursts::SpanBuilder;
use crate::cputime::{delta, modes_present, ModeSecs};
use std::collections::BTreeMap;
use stealscope_readers::stat::ProcStat;

/// Upper bounds of the steal-share buckets (plus +Inf). A span of ~100 ms
/// with USER_HZ=100 holds 10 ticks, so shares sit near multiples of 0.1;
/// the edges lie between those so that jitter in a window's length does not
/// move it across a bucket. `0` counts the windows without any steal.
pub const STEAL_SHARE_BOUNDS: [f64; 8] = [0.0, 0.05, 0.15, 0.25, 0.45, 0.65, 0.85, 0.95];

/// Distribution of per-window shares (0..=1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareHistogram {
    /// Windows per bucket, not cumulative; the last one is above every bound.
    pub counts: [u64; STEAL_SHARE_BOUNDS.len() + 1],
    pub sum: f64,
    pub count: u64,
}

impl ShareHistogram {
    pub fn observe(&mut self, share: f64) {
        let v = share.clamp(0.0, 1.0);
        let i = STEAL_SHARE_BOUNDS
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(STEAL_SHARE_BOUNDS.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// (upper bound, windows in that bucket), ending with +Inf.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        STEAL_SHARE_BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.counts)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CpuRunning {
    /// Seconds per mode: the kernel's values at the first reading, then
    /// only clamped, non-negative deltas.
    pub secs: ModeSecs,
    /// Columns the kernel prints for this CPU ([`crate::cputime::MODES`] order).
    pub present: [bool; 8],
    /// Steal share of each span; empty when the kernel has no steal column.
    pub steal_windows: ShareHistogram,
    /// Windows since the last complete span.
    span: SpanBuilder,
    /// Counter anomalies (backwards, above wall time) clamped on this CPU.
    pub anomalies: u64,
}

#[derive(Debug, Clone, Default)]
pub struct RunningCpuTimes {
    clk_tck: f64,
    prev: Option<(u64, ProcStat)>,
    pub cpus: BTreeMap<u32, CpuRunning>,
}

impl RunningCpuTimes {
    pub fn new(clk_tck: f64) -> Self {
        RunningCpuTimes {
            clk_tck,
            ..Default::default()
        }
    }

    /// Adds one reading taken at `t_ns` (CLOCK_MONOTONIC). A reading whose
    /// clock did not advance is ignored.
    pub fn push(&mut self, t_ns: u64, stat: ProcStat) {
        if matches!(&self.prev, Some((t0, _)) if t_ns <= *t0) {
            return;
        }
        for row in &stat.cpus {
            let Some(cpu) = row.cpu else { continue };
            // A CPU seen for the first time starts at the kernel's value; one
            // back from offline continues from its own total.
            self.cpus.entry(cpu).or_insert_with(|| CpuRunning {
                secs: ModeSecs::from_ticks(&row.times, self.clk_tck),
                present: modes_present(&row.times),
                steal_windows: ShareHistogram::default(),
                span: SpanBuilder::default(),
                anomalies: 0,
            });
        }
        if let Some((t0, prev)) = &self.prev {
            let wall_s = (t_ns - t0) as f64 / 1e9;
            let d = delta(prev, &stat, wall_s, self.clk_tck);
            for c in &d.cpus {
                let Some(run) = self.cpus.get_mut(&c.cpu) else {
                    continue;
                };
                run.secs.add(&c.secs);
                if c.has_steal {
                    if let Some(span) = run.span.push(c.cpu, 0.0, wall_s, c.secs.steal) {
                        run.steal_windows.observe(span.steal_s / span.wall_s);
                    }
                }
            }
            for a in d.anomalies.iter().filter(|a| a.is_counter()) {
                if let Some(run) = self.cpus.get_mut(&a.cpu()) {
                    run.anomalies += 1;
                }
            }
        }
        self.prev = Some((t_ns, stat));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stealscope_readers::stat::parse;

    fn st(rows: &[[u64; 8]]) -> ProcStat {
        let mut s = String::from("cpu  0 0 0 0 0 0 0 0\n");
        for (i, r) in rows.iter().enumerate() {
            let cols: Vec<String> = r.iter().map(u64::to_string).collect();
            s.push_str(&format!("cpu{i} {}\n", cols.join(" ")));
        }
        s.push_str("intr 0\n");
        parse(&s, "/proc/stat").unwrap()
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn starts_at_kernel_values_and_adds_deltas() {
        let mut r = RunningCpuTimes::new(100.0);
        r.push(S, st(&[[100, 0, 50, 800, 0, 0, 0, 20]]));
        assert_eq!(r.cpus[&0].secs.steal, 0.2);
        assert_eq!(r.cpus[&0].secs.user, 1.0);
        // 1 s later: 30 ticks of steal, 70 idle.
        r.push(2 * S, st(&[[100, 0, 50, 870, 0, 0, 0, 50]]));
        let c = &r.cpus[&0];
        assert!((c.secs.steal - 0.5).abs() < 1e-9);
        assert!((c.secs.idle - 8.7).abs() < 1e-9);
        assert_eq!(c.steal_windows.count, 1);
        assert!((c.steal_windows.sum - 0.3).abs() < 1e-9);
        // 0.3 falls in the (0.25, 0.45] bucket.
        assert_eq!(c.steal_windows.counts[4], 1);
        assert_eq!(c.anomalies, 0);
    }

    #[test]
    fn short_windows_are_merged_into_100ms_spans() {
        let mut r = RunningCpuTimes::new(100.0);
        let ms = 1_000_000;
        r.push(0, st(&[[0, 0, 0, 0, 0, 0, 0, 0]]));
        // 10 ms windows; one counter unit in the first.
        for k in 1..=20u64 {
            r.push(10 * k * ms, st(&[[0, 0, 0, k, 0, 0, 0, 1]]));
        }
        let h = &r.cpus[&0].steal_windows;
        // Two spans of 90 ms (a short tail waits), 11 % and 0 %: no 100 %
        // window.
        assert_eq!(h.count, 2, "{h:?}");
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[2], 1);
    }

    #[test]
    fn backwards_counter_stays_monotonic_and_is_counted() {
        let mut r = RunningCpuTimes::new(100.0);
        r.push(S, st(&[[0, 0, 0, 100, 0, 0, 0, 500]]));
        r.push(2 * S, st(&[[0, 0, 0, 190, 0, 0, 0, 10]]));
        let c = &r.cpus[&0];
        assert_eq!(c.secs.steal, 5.0);
        assert_eq!(c.anomalies, 1);
        // From the new, lower base the counter advances again.
        r.push(3 * S, st(&[[0, 0, 0, 280, 0, 0, 0, 20]]));
        assert!((r.cpus[&0].secs.steal - 5.1).abs() < 1e-9);
    }

    #[test]
    fn missing_steal_column_has_no_windows() {
        let mut r = RunningCpuTimes::new(100.0);
        let p = |idle| parse(&format!("cpu  0 0 0 0\ncpu0 0 0 0 {idle}\n"), "s").unwrap();
        r.push(S, p(0));
        r.push(2 * S, p(100));
        let c = &r.cpus[&0];
        assert_eq!(
            c.present,
            [true, true, true, true, false, false, false, false]
        );
        assert_eq!(c.steal_windows.count, 0);
        assert_eq!(c.secs.idle, 1.0);
    }

    #[test]
    fn stale_clock_is_ignored() {
        let mut r = RunningCpuTimes::new(100.0);
        r.push(2 * S, st(&[[0, 0, 0, 0, 0, 0, 0, 0]]));
        r.push(2 * S, st(&[[0, 0, 0, 0, 0, 0, 0, 900]]));
        assert_eq!(r.cpus[&0].secs.steal, 0.0);
        assert_eq!(r.cpus[&0].steal_windows.count, 0);
    }

    proptest! {
        /// Whatever the kernel prints, every exported total only grows and
        /// every window lands in exactly one bucket.
        #[test]
        fn totals_never_decrease(readings in proptest::collection::vec(
            (1u64..2_000_000_000, proptest::array::uniform8(0u64..100_000)), 1..40)) {
            let mut r = RunningCpuTimes::new(100.0);
            let mut t = 0;
            let mut last = [0.0f64; 8];
            for (dt, row) in readings {
                t += dt;
                r.push(t, st(&[row]));
                let v = r.cpus[&0].secs.values();
                if t > dt {
                    for i in 0..8 {
                        prop_assert!(v[i] >= last[i]);
                    }
                }
                last = v;
                let h = &r.cpus[&0].steal_windows;
                prop_assert_eq!(h.counts.iter().sum::<u64>(), h.count);
                prop_assert!(h.sum <= h.count as f64);
            }
        }
    }
}
