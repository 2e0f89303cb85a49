//! The sampling thread: /proc/stat at the configured rate (one steal window
//! per sample) through a kept-open file, with the hardware counter groups
//! read right after it (so their windows are the steal windows); on a host,
//! every vCPU thread's schedstat once a second, rediscovering VMs when a VMM
//! process starts.

use crate::log;
use crate::shared::{Shared, Stop};
use std::path::Path;
use std::time::{Duration, Instant};
use stealscope_model::capture::{clk_tck, monotonic_ns, open_counters, StatSampler};
use stealscope_model::host::{vcpu_times, HostTracker};
use stealscope_model::hw::HwSampler;
use stealscope_model::machine::DEFAULT_CLK_TCK;
use stealscope_model::running::RunningCpuTimes;
use stealscope_readers::snapshot::RawSample;
use stealscope_readers::{stat, ReadError, RootFs};

/// How often vCPU threads are read and new VMMs looked for.
const HOST_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Sampler {
    stat: StatSampler,
    /// None off the live root or when no counter opened.
    hw: Option<HwSampler>,
}

/// The host side, with each new error logged once.
struct Host {
    tracker: HostTracker,
    /// Last error printed, so a persistent one is logged once.
    last_error: Option<String>,
}

impl Host {
    fn new(root: &Path) -> Host {
        let (tracker, err) = HostTracker::start(root);
        let mut h = Host {
            tracker,
            last_error: None,
        };
        h.note(err.map_or(Ok(()), Err));
        h
    }

    fn note(&mut self, r: Result<(), ReadError>) {
        let msg = r.err().map(|e| format!("host scan: {e}"));
        if msg.is_some() && msg != self.last_error {
            log(msg.as_deref().unwrap_or_default());
        }
        self.last_error = msg;
    }

    fn scan(&mut self, root: &Path, shared: &Shared) {
        let r = self.tracker.scan(root, true);
        self.note(r);
        let vcpus = vcpu_times(self.tracker.vms(), self.tracker.samples());
        shared.update(|s| s.vcpus = vcpus);
    }
}

impl Sampler {
    pub fn open(root: &Path) -> Result<Sampler, ReadError> {
        let hw = open_counters(root, &RootFs::new(root));
        Ok(Sampler {
            stat: StatSampler::open(root)?,
            hw,
        })
    }

    pub fn run(mut self, root: &Path, rate_hz: f64, shared: &Shared, stop: &Stop) {
        let clk = clk_tck().unwrap_or(DEFAULT_CLK_TCK) as f64;
        if let Some(h) = &self.hw {
            shared.set_counters_opened(h.counters().opened().to_vec());
        }
        shared.update(|s| {
            s.cpu = RunningCpuTimes::new(clk);
            s.hw_missing = self
                .hw
                .as_ref()
                .map(|h| h.counters().missing().to_vec())
                .unwrap_or_default();
        });
        if self
            .hw
            .as_ref()
            .is_some_and(|h| h.counters().opened().is_empty())
        {
            self.hw = None;
        }
        let mut host = Host::new(root);
        let period = Duration::from_secs_f64(1.0 / rate_hz);
        let mut next = Instant::now();
        let mut next_host = next;
        let mut last_error: Option<String> = None;
        loop {
            let t_ns = monotonic_ns();
            let read = self.stat.cpu_lines().and_then(|text| {
                let parsed = stat::parse(&text, stat::PATH)?;
                Ok((text, parsed))
            });
            match read {
                Ok((text, parsed)) => {
                    let counters = self.hw.as_mut().map(|h| h.sample());
                    shared.update(|s| {
                        s.cpu.push(t_ns, parsed);
                        if let Some(c) = &counters {
                            s.hw.push(c.clone());
                        }
                    });
                    shared.push_sample(RawSample { t_ns, stat: text }, counters);
                    last_error = None;
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_ref() != Some(&msg) {
                        log(&msg);
                    }
                    last_error = Some(msg);
                }
            }
            let now = Instant::now();
            if now >= next_host {
                host.scan(root, shared);
                next_host = now + HOST_EVERY;
            }
            next += period;
            // After a stall (suspend, overload) skip the missed windows
            // instead of sampling back to back.
            if next < now {
                next = now + period;
            }
            if stop.wait_until(next) {
                return;
            }
        }
    }
}
