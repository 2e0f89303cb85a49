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

    /// Counter windows joined with the steal windows they cover.
    pub fn with_steal(&self, steal: &[(f64, IntervalDelta)]) -> Vec<StealHw> {
        let mut out = Vec::new();
        for w in self.windows() {
            let tol = ALIGN_TOLERANCE * w.wall_s;
            let Some((_, d)) = steal
                .iter()
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
