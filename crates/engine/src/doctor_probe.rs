//! `doctor --probe`: after the sampling interval, the wakeup probe and then
//! the preempt probe run on every CPU for a bounded time each, and their
//! `jitter.*` findings join the report. They run after, not during, the
//! interval: the preempt spinner keeps every CPU busy, which would turn the
//! interval's idle steal into busy steal.

use std::time::Duration;
use stealscope_analysis::report::ProbeReports;
use stealscope_analysis::DoctorReport;
use stealscope_probes::{findings::jitter_findings, preempt, signals, wakeup};

type Error = Box<dyn std::error::Error>;

pub fn add_to(report: &mut DoctorReport, duration: Duration) -> Result<(), Error> {
    let stop = signals::stop_on_signals()?;
    let w = wakeup::run(
        &wakeup::WakeupOptions {
            duration,
            ..Default::default()
        },
        &stop,
    )?;
    let p = if stop.load(std::sync::atomic::Ordering::Relaxed) {
        None
    } else {
        Some(preempt::run(
            &preempt::PreemptOptions {
                duration,
                ..Default::default()
            },
            &stop,
        )?)
    };
    let findings = jitter_findings(Some(&w), p.as_ref());
    let mut notes: Vec<String> = w
        .notes
        .iter()
        .map(|n| format!("probe wakeup: {n}"))
        .collect();
    if let Some(p) = &p {
        notes.extend(p.notes.iter().map(|n| format!("probe preempt: {n}")));
    }
    if w.interrupted || p.as_ref().is_none_or(|p| p.interrupted) {
        notes.push("probes interrupted: their figures cover the part that ran".into());
    }
    report.add_probes(
        ProbeReports {
            wakeup: w,
            preempt: p,
        },
        findings,
        notes,
    );
    Ok(())
}
