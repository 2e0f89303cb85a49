//! Live per-window hardware counters, read by the engine's sampler right
//! after each /proc/stat sample (doctor, record, serve, top): opened once
//! on the live root, `sample()` per window; model::hw turns consecutive
//! readings into windows.

use crate::stop::next_due_ns;
use std::time::Duration;
use stealscope_readers::perf::{Counter, CounterSample, CpuCounters};
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

/// When the hardware counter groups are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterReads {
    /// Not opened at all.
    Off,
    /// With every sample.
    EverySample,
    /// With every sample, or with the first and then this often when the
    /// TSC alone opened (a constant TSC MHz: at 100 Hz its reads would be
    /// most of a recording).
    EverySampleOrTscEvery(Duration),
}

/// When the sampling loop reads the groups it opened: with every sample,
/// or, when the TSC alone opened, with the first and then at its period.
pub(crate) struct CounterSchedule {
    /// None when nothing opened: no read at all.
    hw: Option<HwSampler>,
    /// The period and the next read's time, in CLOCK_MONOTONIC ns.
    lone_tsc_every: Option<u64>,
    next_tsc: u64,
}

impl CounterSchedule {
    pub(crate) fn new(hw: Option<HwSampler>, reads: CounterReads, start_ns: u64) -> Self {
        let hw = hw.filter(|h| !h.counters().opened().is_empty());
        let lone_tsc = hw
            .as_ref()
            .is_some_and(|h| h.counters().opened().iter().all(|&c| c == Counter::Tsc));
        CounterSchedule {
            hw,
            lone_tsc_every: match reads {
                CounterReads::EverySampleOrTscEvery(p) if lone_tsc => Some(p.as_nanos() as u64),
                _ => None,
            },
            next_tsc: start_ns,
        }
    }

    /// The reading that goes with a sample taken at `t_ns`, if one is due
    /// (`last`: the sample that ends the loop, which always has one).
    #[inline]
    pub(crate) fn read(&mut self, t_ns: u64, last: bool) -> Option<CounterSample> {
        let hw = self.hw.as_mut()?;
        if let Some(p) = self.lone_tsc_every {
            if !last && t_ns < self.next_tsc {
                return None;
            }
            self.next_tsc = next_due_ns(self.next_tsc, p, t_ns);
        }
        Some(hw.sample())
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
