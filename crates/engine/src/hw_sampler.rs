//! Live per-window hardware counters, read by the engine's sampler right
//! after each /proc/stat sample (doctor, record, serve, top): opened once
//! on the live root, `sample()` per window; model::hw turns consecutive
//! readings into windows.

use stealscope_readers::perf::{CounterSample, CpuCounters};
use stealscope_readers::{cpu_topology, stat, RootFs, Source};

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

/// CPUID and perf counters describe the machine we run on, not a directory:
/// they are captured only when the root is the live "/".
pub fn is_live_root(root: &std::path::Path) -> bool {
    root == std::path::Path::new("/")
}

/// Opens the counter groups on the online CPUs as `cpus_from` lists them
/// (the stat rows if sysfs does not say); None unless `root` is "/".
pub fn open_counters(
    root: &std::path::Path,
    cpus_from: &dyn stealscope_readers::Source,
) -> Option<HwSampler> {
    if !is_live_root(root) {
        return None;
    }
    let live = RootFs::new(root);
    let mut cpus = cpu_topology::read(cpus_from)
        .ok()
        .and_then(|c| c.online)
        .unwrap_or_default();
    if cpus.is_empty() {
        cpus = stat::read(cpus_from)
            .ok()
            .flatten()
            .map(|s| s.cpus.iter().filter_map(|r| r.cpu).collect())
            .unwrap_or_default();
    }
    Some(HwSampler::open(&live, &cpus))
}
