//! The hardware side of a machine model: decoded CPUID, which counters were
//! read or missing, the counter windows, and each window's counters next to
//! the steal of the same CPU in the same window.

use crate::cputime::IntervalDelta;
use crate::hw::{windows, CpuHwWindow, HwWindow};
use serde::Serialize;
use stealscope_readers::cpuid::{decode, CpuidFacts};
use stealscope_readers::perf::{Counter, Missing};
use stealscope_readers::snapshot::Snapshot;

/// Counter windows match steal windows when their starts and lengths differ
/// by less than this share of the window (the capture reads both back to
/// back, microseconds apart).
pub const ALIGN_TOLERANCE: f64 = 0.25;

#[derive(Debug, Clone, Serialize)]
pub struct CounterModel {
    pub opened: Vec<Counter>,
    pub missing: Vec<Missing>,
    pub windows: Vec<HwWindow>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct HardwareModel {
    /// None: the snapshot holds no cpuid.json.
    pub cpuid: Option<CpuidFacts>,
    /// None: the snapshot holds no counters.json.
    pub counters: Option<CounterModel>,
}

/// One CPU's counters in one window with that window's steal and util.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StealHw {
    pub start_s: f64,
    pub steal_pct: f64,
    pub util_pct: f64,
    pub hw: CpuHwWindow,
}

impl HardwareModel {
    pub fn build(snap: &Snapshot) -> HardwareModel {
        let origin = snap
            .samples
            .first()
            .map(|s| s.t_ns)
            .or_else(|| {
                let c = snap.hardware.counters.as_ref()?;
                c.samples.first().map(|s| s.t_ns)
            })
            .unwrap_or(0);
        HardwareModel {
            cpuid: snap.hardware.cpuid.as_ref().map(decode),
            counters: snap.hardware.counters.as_ref().map(|c| CounterModel {
                opened: c.opened.clone(),
                missing: c.missing.clone(),
                windows: windows(&c.samples, origin),
            }),
        }
    }

    pub fn windows(&self) -> &[HwWindow] {
        self.counters.as_ref().map_or(&[], |c| &c.windows)
    }

    /// Counter windows joined with the steal windows they cover. `steal`
    /// is in time order (as the series gives it), so each counter window
    /// looks only at the steal windows starting within the tolerance: an
    /// hour-long recording joins in linear time, not quadratic.
    pub fn with_steal(&self, steal: &[(f64, IntervalDelta)]) -> Vec<StealHw> {
        let mut out = Vec::new();
        for w in self.windows() {
            let tol = ALIGN_TOLERANCE * w.wall_s;
            let first = steal.partition_point(|(s, _)| *s < w.start_s - tol);
            let Some((_, d)) = steal[first..]
                .iter()
                .take_while(|(s, _)| *s <= w.start_s + tol)
                .find(|(s, d)| (s - w.start_s).abs() <= tol && (d.wall_s - w.wall_s).abs() <= tol)
            else {
                continue;
            };
            for hw in &w.cpus {
                if let Some(c) = d.cpus.iter().find(|c| c.cpu == hw.cpu) {
                    out.push(StealHw {
                        start_s: w.start_s,
                        steal_pct: c.steal_pct(),
                        util_pct: c.busy_pct(),
                        hw: hw.clone(),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cputime::{CpuInterval, ModeSecs};
    use crate::hw::HwWindow;

    fn hw(cpu: u32) -> CpuHwWindow {
        CpuHwWindow {
            cpu,
            cycles: Some(1e8),
            instructions: Some(1e8),
            cache_references: None,
            cache_misses: None,
            hw_running_share: Some(1.0),
            tsc_mhz: None,
            avg_mhz: None,
            busy_mhz: None,
            busy_pct: None,
            smi: None,
        }
    }

    fn steal_window(start: f64, wall: f64, steal: f64) -> (f64, IntervalDelta) {
        let ci = |cpu| CpuInterval {
            cpu,
            secs: ModeSecs {
                user: 0.5 * wall,
                steal: steal * wall,
                idle: (0.5 - steal) * wall,
                ..Default::default()
            },
            wall_s: wall,
            has_steal: true,
        };
        (
            start,
            IntervalDelta {
                wall_s: wall,
                cpus: vec![ci(0), ci(1)],
                anomalies: vec![],
            },
        )
    }

    fn model(windows: Vec<HwWindow>) -> HardwareModel {
        HardwareModel {
            cpuid: None,
            counters: Some(CounterModel {
                opened: vec![Counter::Cycles],
                missing: vec![],
                windows,
            }),
        }
    }

    #[test]
    fn counter_windows_join_the_steal_window_they_cover_only() {
        let m = model(vec![
            HwWindow {
                start_s: 0.0001,
                wall_s: 0.1,
                cpus: vec![hw(0), hw(1), hw(7)],
            },
            // Starts 40 ms after the steal window: a different window.
            HwWindow {
                start_s: 0.14,
                wall_s: 0.1,
                cpus: vec![hw(0)],
            },
        ]);
        let steal = vec![steal_window(0.0, 0.1, 0.2), steal_window(0.1, 0.1, 0.0)];
        let j = m.with_steal(&steal);
        assert_eq!(
            j.len(),
            2,
            "cpu7 has no steal row, the late window no match"
        );
        assert!(j.iter().all(|p| (p.steal_pct - 20.0).abs() < 1e-9));
        assert!(j.iter().all(|p| (p.util_pct - 50.0).abs() < 1e-9));
        assert!(HardwareModel::default().with_steal(&steal).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn joining_never_panics(
            hws in proptest::collection::vec((-1e3f64..1e3, 0f64..10.0), 0..8),
            st in proptest::collection::vec((-1e3f64..1e3, 0f64..10.0, 0f64..0.5), 0..8),
        ) {
            let m = model(hws.into_iter().map(|(s, w)| HwWindow { start_s: s, wall_s: w, cpus: vec![hw(0)] }).collect());
            let steal: Vec<_> = st.into_iter().map(|(s, w, x)| steal_window(s, w, x)).collect();
            for p in m.with_steal(&steal) {
                proptest::prop_assert!(p.steal_pct.is_finite());
            }
        }
    }
}
