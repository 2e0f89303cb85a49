//! The rule runner: every interval, the same report `doctor` builds, over
//! the interval just past (the files the rules read at its start and end,
//! and the sampler's /proc/stat series in between, with the counter
//! readings taken with it). On its own thread, so a sampler or a screen
//! never waits for it.

use crate::capture::IntervalCapture;
use crate::host::HostLiveOptions;
use crate::series::{self, Series};
use crate::stop::{Rate, Stop, Wait};
use std::path::Path;
use std::time::{Duration, Instant};
use stealscope_analysis::DoctorReport;
use stealscope_readers::ReadError;

/// Where each rule run's result goes.
pub trait Findings: Send + Sync {
    /// The start of an interval could not be read (none ran).
    fn start_failed(&self, e: ReadError);
    /// The report of the interval just past, or why it has none.
    fn report(&self, r: Result<DoctorReport, ReadError>);
}

pub(crate) fn run(
    root: &Path,
    every: Duration,
    rate: &Rate,
    series: &Series,
    out: &dyn Findings,
    stop: &Stop,
) {
    // No kvm:kvm_exit sample: a tracing instance every interval is not
    // what a background exporter or a live view should do to a host.
    let host = HostLiveOptions {
        exit_sample: Duration::ZERO,
        ..Default::default()
    };
    // The findings of the run before, for the rules' hysteresis.
    let mut previous: Option<Vec<stealscope_analysis::Finding>> = None;
    loop {
        let rate_hz = rate.hz();
        // The sampler reads the counters with every sample: no second set.
        let interval = match IntervalCapture::start(root, rate_hz, &host) {
            Ok(c) => c.asked(every),
            Err(e) => {
                out.start_failed(e);
                if stop.wait_until(Instant::now() + every) {
                    return;
                }
                continue;
            }
        };
        // The series of this interval starts now.
        let cap = series::cap(rate_hz, every);
        drop(series.take(cap));
        if stop.wait_until(interval.started() + every) {
            return;
        }
        let r = finish(interval, series, cap, previous.as_deref());
        previous = r.as_ref().ok().map(|r| r.findings.clone());
        out.report(r);
    }
}

fn finish(
    interval: IntervalCapture,
    series: &Series,
    cap: usize,
    previous: Option<&[stealscope_analysis::Finding]>,
) -> Result<DoctorReport, ReadError> {
    let (samples, counters) = series.take(cap);
    let counters = series.counter_capture(counters);
    let snap = interval.finish(samples, counters)?;
    crate::report::after(&snap, previous)
}
