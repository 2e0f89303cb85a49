//! Running totals of the hardware counters for long-running exporters
//! (`serve`): per CPU and counter, the sum of every window's scaled delta
//! ([`crate::hw::scaled_delta`]: wrap-safe, scaled for multiplexing, resets
//! dropped), so the totals never decrease even when the kernel's counts do.

use crate::hw::scaled_delta;
use std::collections::BTreeMap;
use stealscope_readers::perf::{Counter, CounterSample, HARDWARE, MSR};

#[derive(Debug, Clone, Default)]
pub struct RunningHw {
    prev: Option<CounterSample>,
    /// Events per CPU and counter since the first reading.
    pub cpus: BTreeMap<u32, BTreeMap<Counter, f64>>,
}

impl RunningHw {
    /// Adds one reading; a reading whose clock did not advance is ignored,
    /// a CPU absent from the previous reading (hotplug) starts at zero.
    pub fn push(&mut self, cur: CounterSample) {
        if let Some(prev) = &self.prev {
            if cur.t_ns <= prev.t_ns {
                return;
            }
            for c in &cur.cpus {
                let Some(p) = prev.cpus.iter().find(|p| p.cpu == c.cpu) else {
                    continue;
                };
                let totals = self.cpus.entry(c.cpu).or_default();
                for counter in HARDWARE.iter().chain(&MSR) {
                    if let Some(d) = scaled_delta(p, c, *counter) {
                        *totals.entry(*counter).or_default() += d;
                    }
                }
            }
        }
        self.prev = Some(cur);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::perf::{CpuRead, GroupRead};

    fn sample(t_ns: u64, cpus: &[(u32, u64, u64, u64)]) -> CounterSample {
        CounterSample {
            t_ns,
            cpus: cpus
                .iter()
                .map(|&(cpu, en, run, tsc)| CpuRead {
                    cpu,
                    groups: vec![GroupRead {
                        enabled_ns: en,
                        running_ns: run,
                        counts: BTreeMap::from([(Counter::Tsc, tsc)]),
                    }],
                })
                .collect(),
        }
    }

    #[test]
    fn totals_are_scaled_sums_that_never_decrease() {
        let mut r = RunningHw::default();
        r.push(sample(1, &[(0, 100, 100, 1000)]));
        assert!(r.cpus.is_empty(), "one reading is no window");
        // Counted half the window: scaled to twice the events.
        r.push(sample(2, &[(0, 200, 150, 1100), (1, 10, 10, 5)]));
        assert_eq!(r.cpus[&0][&Counter::Tsc], 200.0);
        assert!(!r.cpus.contains_key(&1), "CPU 1 appeared: no window yet");
        // A reset (group re-created: times go backwards) adds nothing.
        r.push(sample(3, &[(0, 50, 50, 10), (1, 20, 20, 25)]));
        assert_eq!(r.cpus[&0][&Counter::Tsc], 200.0);
        assert_eq!(r.cpus[&1][&Counter::Tsc], 20.0);
        // A reading whose clock did not advance is ignored.
        r.push(sample(3, &[(0, 1000, 1000, 999_999)]));
        r.push(sample(4, &[(0, 60, 60, 20), (1, 30, 30, 35)]));
        assert_eq!(r.cpus[&0][&Counter::Tsc], 210.0);
        assert_eq!(r.cpus[&1][&Counter::Tsc], 30.0);
    }
}
