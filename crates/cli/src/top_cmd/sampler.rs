//! The sampling thread: /proc/stat at the chosen rate through a kept-open
//! file (one window per sample), and on a host every vCPU thread once a
//! second through [`HostTracker`]. Stops when its channel closes.

use super::state::Shared;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use stealscope_model::capture::{monotonic_ns, StatSampler};
use stealscope_model::host::{vcpu_times, HostTracker};
use stealscope_readers::snapshot::RawSample;
use stealscope_readers::stat;

/// How often vCPU threads are read and new VMMs looked for.
const HOST_EVERY: Duration = Duration::from_secs(1);

/// Waits until `t`; true when told to stop.
pub fn stop_by(stop: &Receiver<()>, t: Instant) -> bool {
    let wait = t.saturating_duration_since(Instant::now());
    !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
}

pub fn run(mut stat_file: StatSampler, root: &Path, shared: &Shared, stop: &Receiver<()>) {
    // Discovery reads every process: here, not on the screen's thread.
    let (mut host, error) = HostTracker::start(root);
    shared.lock().view.host_error = error.map(|e| format!("host scan: {e}"));
    let mut next = Instant::now();
    let mut next_host = next;
    loop {
        let t_ns = monotonic_ns();
        let read = stat_file.cpu_lines().and_then(|text| {
            let parsed = stat::parse(&text, stat::PATH)?;
            Ok((text, parsed))
        });
        {
            let mut live = shared.lock();
            match read {
                Ok((text, parsed)) => {
                    live.view.windows.push(t_ns, parsed);
                    live.push_sample(RawSample { t_ns, stat: text });
                    live.view.sample_error = None;
                }
                Err(e) => live.view.sample_error = Some(e.to_string()),
            }
        }
        let now = Instant::now();
        if now >= next_host {
            // Scanned outside the lock: a rediscovery reads every process.
            let error = host.scan(root, true).err();
            let vcpus = vcpu_times(host.vms(), host.samples());
            let t_ns = monotonic_ns();
            let mut live = shared.lock();
            live.view.host_error = error.map(|e| format!("host scan: {e}"));
            live.view.host |= !vcpus.is_empty();
            live.view.vms.push(t_ns, vcpus);
            next_host = now + HOST_EVERY;
        }
        next += Duration::from_secs_f64(1.0 / shared.rate_hz());
        // After a stall (suspend, overload) skip the missed windows instead
        // of sampling back to back.
        if next < now {
            next = now + Duration::from_secs_f64(1.0 / shared.rate_hz());
        }
        if stop_by(stop, next) {
            return;
        }
    }
}
