//! The rule runner: every interval, the same report `doctor` builds, over
//! the interval just past (the files the rules read at its start and end,
//! and the sampler's /proc/stat series in between); its findings become
//! `stealscope_finding` series until the next run.

use crate::log;
use crate::shared::{Shared, Stop};
use std::path::Path;
use std::time::Duration;
use stealscope_analysis::{build, ReportInput, Severity};
use stealscope_model::capture::IntervalCapture;
use stealscope_model::host::live::HostLiveOptions;
use stealscope_model::MachineModel;
use stealscope_readers::ReadError;

pub(crate) fn run(root: &Path, rate_hz: f64, every: Duration, shared: &Shared, stop: &Stop) {
    loop {
        // No kvm:kvm_exit sample: a tracing instance every interval is not
        // what a background exporter should do to a host.
        let host = HostLiveOptions {
            exit_sample: Duration::ZERO,
            ..Default::default()
        };
        // The sampler reads the counters with every sample: no second set.
        let interval = match IntervalCapture::start_without_counters(root, rate_hz, &host) {
            Ok(c) => c,
            Err(e) => {
                log(&format!("rules: {e}"));
                if stop.wait_until(std::time::Instant::now() + every) {
                    return;
                }
                continue;
            }
        };
        // The series of this interval starts now.
        drop(shared.take_series());
        if stop.wait_until(interval.started() + every) {
            return;
        }
        match findings(interval, shared) {
            Ok(f) => shared.update(|s| s.findings = f),
            Err(e) => log(&format!("rules: {e}")),
        }
    }
}

fn findings(
    interval: IntervalCapture,
    shared: &Shared,
) -> Result<Vec<(String, Severity)>, ReadError> {
    let (samples, counters) = shared.take_series();
    let counters = shared.counter_capture(counters);
    let snap = interval.finish_with_counters(samples, counters)?;
    let model = MachineModel::build(&snap)?;
    let report = build(ReportInput {
        model: &model,
        interval_s: snap.meta.interval_s,
        hostname: snap.meta.hostname.clone(),
        kernel: snap.meta.kernel.clone(),
    });
    let mut f: Vec<(String, Severity)> = report
        .findings
        .into_iter()
        .map(|f| (f.id, f.severity))
        .collect();
    f.sort();
    f.dedup();
    Ok(f)
}
