//! Snapshot -> model -> report, written once: doctor, host and report
//! read a snapshot from disk or capture one, serve and top build one per
//! rule interval; all of them get their report here.

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
    let model = MachineModel::build(snap)?;
    Ok(doctor_report(snap, &model))
}
