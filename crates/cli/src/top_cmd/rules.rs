//! The rule runner: every interval, the report `doctor` builds over the
//! interval just past (the files the rules read at its start and end, and
//! the sampler's /proc/stat series in between); its findings are shown
//! until the next run. On its own thread, so the screen never waits.

use super::sampler::stop_by;
use super::state::Shared;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use stealscope_analysis::DoctorReport;
use stealscope_model::capture::IntervalCapture;
use stealscope_model::host::live::HostLiveOptions;
use stealscope_model::MachineModel;
use stealscope_readers::ReadError;

pub fn run(root: &Path, every: Duration, shared: &Shared, stop: &Receiver<()>) {
    // No kvm:kvm_exit sample: a tracing instance every few seconds is not
    // what a live view should do to a host (as in `serve`).
    let host = HostLiveOptions {
        exit_sample: Duration::ZERO,
        ..Default::default()
    };
    loop {
        let rate = shared.rate_hz();
        // No hardware counters: the IPC rule needs them read with every
        // sample (serve and record do), and perf groups opened every few
        // seconds for one reading would say nothing.
        let interval = match IntervalCapture::start_without_counters(root, rate, &host) {
            Ok(c) => c,
            Err(e) => {
                shared.lock().view.findings_error = Some(e.to_string());
                if stop_by(stop, Instant::now() + every) {
                    return;
                }
                continue;
            }
        };
        // The series of this interval starts now, with room for twice its
        // length at the current rate (a faster rate chosen meanwhile keeps
        // the newest samples).
        let cap = (2.0 * rate * every.as_secs_f64()) as usize + 16;
        drop(shared.lock().take_series(cap));
        if stop_by(stop, interval.started() + every) {
            return;
        }
        let series = shared.lock().take_series(cap);
        let report = finish(interval, series);
        let mut live = shared.lock();
        match report {
            Ok(r) => {
                live.view.findings = r.findings;
                live.view.findings_error = None;
            }
            Err(e) => live.view.findings_error = Some(e.to_string()),
        }
        live.view.findings_at = Some(Instant::now());
    }
}

fn finish(
    interval: IntervalCapture,
    series: Vec<stealscope_readers::snapshot::RawSample>,
) -> Result<DoctorReport, ReadError> {
    let snap = interval.finish(series)?;
    let model = MachineModel::build(&snap)?;
    Ok(crate::doctor_report(&snap, &model))
}
