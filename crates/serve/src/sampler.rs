//! The sampling thread: /proc/stat at the configured rate (one steal window
//! per sample) through a kept-open file; on a host, every vCPU thread's
//! schedstat once a second, rediscovering VMs when a VMM process starts.

use crate::log;
use crate::shared::{Shared, Stop};
use std::path::Path;
use std::time::{Duration, Instant};
use stealscope_model::capture::{clk_tck, monotonic_ns, StatSampler};
use stealscope_model::host::HostFollow;
use stealscope_model::machine::DEFAULT_CLK_TCK;
use stealscope_model::running::RunningCpuTimes;
use stealscope_readers::snapshot::RawSample;
use stealscope_readers::{stat, ReadError};

/// How often vCPU threads are read and new VMMs looked for.
const HOST_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Sampler {
    stat: StatSampler,
}

/// The host side ([`HostFollow`]), logging a persistent error once.
struct Host {
    follow: HostFollow,
    /// Last error printed, so a persistent one is logged once.
    last_error: Option<String>,
}

impl Host {
    fn scan(&mut self, shared: &Shared) {
        let (vcpus, error) = self.follow.scan();
        let msg = error.map(|e| format!("host scan: {e}"));
        if msg.is_some() && msg != self.last_error {
            log(msg.as_deref().unwrap_or_default());
        }
        self.last_error = msg;
        shared.update(|s| s.vcpus = vcpus);
    }
}

impl Sampler {
    pub fn open(root: &Path) -> Result<Sampler, ReadError> {
        Ok(Sampler {
            stat: StatSampler::open(root)?,
        })
    }

    pub fn run(mut self, root: &Path, rate_hz: f64, shared: &Shared, stop: &Stop) {
        let clk = clk_tck().unwrap_or(DEFAULT_CLK_TCK) as f64;
        shared.update(|s| s.cpu = RunningCpuTimes::new(clk));
        let mut host = Host {
            follow: HostFollow::new(root),
            last_error: None,
        };
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
                    shared.update(|s| s.cpu.push(t_ns, parsed));
                    shared.push_sample(RawSample { t_ns, stat: text });
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
                host.scan(shared);
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
