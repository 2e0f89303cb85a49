//! Live per-window hardware counters for any command that samples in
//! windows (doctor, record, serve): open once, `sample()` per window;
//! model::hw turns consecutive readings into windows.

use stealscope_readers::perf::{CounterSample, CpuCounters};
use stealscope_readers::Source;

/// Live per-window counters: opens the groups once, reads them per window.
pub struct HwSampler {
    counters: CpuCounters,
}

impl HwSampler {
    /// `src` describes the PMUs (sysfs); `cpus` are the CPUs to count on.
    pub fn open(src: &dyn Source, cpus: &[u32]) -> HwSampler {
        HwSampler {
            counters: CpuCounters::open(src, cpus),
        }
    }

    pub fn counters(&self) -> &CpuCounters {
        &self.counters
    }

    /// Reads every CPU's groups, stamped with CLOCK_MONOTONIC.
    pub fn sample(&mut self) -> CounterSample {
        self.counters
            .read(stealscope_readers::clock::monotonic_ns())
    }
}
