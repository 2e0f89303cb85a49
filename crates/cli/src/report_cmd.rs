//! `stealscope report FILE -o report.html`: the doctor's model of a snapshot
//! (a recording later) drawn as one self-contained HTML page.

use clap::Args;
use std::path::{Path, PathBuf};
use stealscope_model::timeline::{IrqWindow, Timeline};
use stealscope_model::MachineModel;
use stealscope_output::html::{self, HtmlInput};
use stealscope_readers::snapshot::{self, Snapshot};

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Snapshot (directory or .tar.gz) to draw
    #[arg(value_name = "FILE")]
    pub input: PathBuf,
    /// HTML file to write
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: PathBuf,
}

/// Everything `report` draws from one input: the snapshot the doctor's
/// model is built from, and the series only a recording has (empty for a
/// snapshot). The one place a new input kind is added.
pub fn load(path: &Path) -> Result<(Snapshot, Timeline), Error> {
    Ok((snapshot::open(path)?, Timeline::default()))
}

pub fn run(a: &ReportArgs) -> Result<(), Error> {
    let (snap, mut timeline) = load(&a.input)?;
    let model = MachineModel::build(&snap)?;
    let report = crate::doctor_report(&snap, &model);
    // A snapshot's interrupts are one window, t0 to t1.
    if timeline.irq.is_empty() && !model.irq.is_empty() {
        timeline.irq.push(IrqWindow {
            start_s: 0.0,
            wall_s: model.wall_s,
            cpus: model.irq.clone(),
        });
    }
    let page = html::render(&HtmlInput {
        report: &report,
        model: &model,
        timeline: &timeline,
        meta: &snap.meta,
        source: &a.input.display().to_string(),
    });
    std::fs::write(&a.output, &page).map_err(|e| format!("{}: {e}", a.output.display()))?;
    eprintln!(
        "wrote {} ({} KiB, {} findings)",
        a.output.display(),
        page.len().div_ceil(1024),
        report.findings.len()
    );
    Ok(())
}
