//! Snapshot -> model -> report, written once: doctor, host and report
//! read a snapshot from disk or capture one, serve and top build one per
//! rule interval; all of them get their report here. A one-off capture
//! (doctor, host, snapshot) ends early on Ctrl-C with a report of what
//! was measured.

use crate::capture::{CaptureOptions, Captured};
use crate::host::HostLiveOptions;
use stealscope_analysis::{DoctorReport, ReportInput};
use stealscope_model::MachineModel;
use stealscope_readers::snapshot::Snapshot;
use stealscope_readers::ReadError;

/// The doctor's report of a snapshot's model.
pub fn doctor_report(snap: &Snapshot, model: &MachineModel) -> DoctorReport {
    stealscope_analysis::build(ReportInput {
        model,
        interval_s: snap.meta.interval_s,
        hostname: snap.meta.hostname.clone(),
        kernel: snap.meta.kernel.clone(),
    })
}

/// Builds the model of a snapshot and its report.
pub fn of(snap: &Snapshot) -> Result<DoctorReport, ReadError> {
    after(snap, None)
}

/// [`of`] for a rule run that follows another on the same host: the
/// findings of the run before hold findings between their clearing and
/// firing thresholds (stealscope_analysis::hysteresis).
pub fn after(
    snap: &Snapshot,
    previous: Option<&[stealscope_analysis::Finding]>,
) -> Result<DoctorReport, ReadError> {
    let model = MachineModel::build(snap)?;
    Ok(stealscope_analysis::build_after(
        ReportInput {
            model: &model,
            interval_s: snap.meta.interval_s,
            hostname: snap.meta.hostname.clone(),
            kernel: snap.meta.kernel.clone(),
        },
        previous,
    ))
}

/// Captures one interval under `opts.root` (which must hold proc/).
/// Ctrl-C, SIGTERM or SIGHUP end it early with what was measured (a second
/// signal exits at once, status 130); `tick` sees the time elapsed, to
/// show progress.
pub fn capture(
    opts: &CaptureOptions,
    host: &HostLiveOptions,
    tick: &mut dyn FnMut(std::time::Duration),
) -> Result<Captured, Box<dyn std::error::Error>> {
    if !opts.root.join("proc").is_dir() {
        return Err(format!("{}: no proc/ under this root", opts.root.display()).into());
    }
    let stop = stealscope_probes::signals::stop_on_signals()?;
    Ok(crate::capture::capture(opts, host, &*stop, tick)?)
}

/// The doctor's report of a saved snapshot or recording (`from`), or else
/// of one interval captured now (written to `save` when asked), with notes
/// on where its figures came from.
pub fn doctor(
    from: Option<&std::path::Path>,
    opts: &CaptureOptions,
    host: &HostLiveOptions,
    save: Option<&std::path::Path>,
    tick: &mut dyn FnMut(std::time::Duration),
) -> Result<DoctorReport, Box<dyn std::error::Error>> {
    let (snap, notes) = match from {
        Some(p) => stealscope_model::recording::open_snapshot(p)?,
        None => {
            let c = capture(opts, host, tick)?;
            if let Some(p) = save {
                stealscope_readers::snapshot::write(&c.snapshot, p)?;
            }
            let note = c.note(opts.interval);
            (c.snapshot, note.into_iter().collect())
        }
    };
    let mut r = of(&snap)?;
    r.notes.extend(notes);
    Ok(r)
}

/// Everything `report` draws from one snapshot or recording: the snapshot,
/// the doctor's model and report of it, and the series (a recording's; a
/// snapshot's interrupts are one window, t0 to t1).
pub struct Page {
    pub snap: Snapshot,
    pub model: MachineModel,
    pub report: DoctorReport,
    pub timeline: stealscope_model::timeline::Timeline,
}

/// Opens a snapshot or a recording for `report`. The one place a new
/// input kind is added.
pub fn page(path: &std::path::Path) -> Result<Page, Box<dyn std::error::Error>> {
    let (snap, mut timeline) = if stealscope_readers::recording::is_recording(path) {
        let r = stealscope_model::recording::open(path)?;
        (r.snapshot, r.timeline)
    } else {
        (
            stealscope_readers::snapshot::open(path)?,
            Default::default(),
        )
    };
    let model = MachineModel::build(&snap)?;
    let report = doctor_report(&snap, &model);
    if timeline.irq.is_empty() && !model.irq.is_empty() {
        timeline.irq.push(stealscope_model::timeline::IrqWindow {
            start_s: 0.0,
            wall_s: model.wall_s,
            cpus: model.irq.clone(),
        });
    }
    Ok(Page {
        snap,
        model,
        report,
        timeline,
    })
}
