//! `stealscope report FILE -o report.html`: the doctor's model of a snapshot
//! or a recording drawn as one self-contained HTML page (or a simulation's
//! results). Opening the input and its model is the engine's
//! (`stealscope_engine::report::page`).

use clap::Args;
use std::path::{Path, PathBuf};
use stealscope_output::html::{self, HtmlInput};

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Snapshot (directory or .tar.gz), recording (`record -o`) or `sim --json` output to draw
    #[arg(value_name = "FILE")]
    pub input: PathBuf,
    /// HTML file to write
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: PathBuf,
}

/// `sim --json` output, if that is what `path` holds (a file starting with
/// a JSON object naming the simulator's schema).
fn sim_page(path: &Path) -> Result<Option<html::sim::SimPage>, Error> {
    use std::io::Read;
    if !path.is_file() {
        return Ok(None);
    }
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !html::sim::looks_like(&head[..n]) {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    html::sim::parse(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()).into())
}

fn write_page(out: &Path, page: &str) -> Result<(), Error> {
    std::fs::write(out, page).map_err(|e| format!("{}: {e}", out.display()).into())
}

pub fn run(a: &ReportArgs) -> Result<(), Error> {
    if let Some(sim) = sim_page(&a.input)? {
        let page = html::sim::render(&sim, &a.input.display().to_string());
        write_page(&a.output, &page)?;
        eprintln!(
            "wrote {} ({} KiB, {} simulated cases)",
            a.output.display(),
            page.len().div_ceil(1024),
            sim.cases.len()
        );
        return Ok(());
    }
    let p = stealscope_engine::report::page(&a.input)?;
    let page = html::render(&HtmlInput {
        report: &p.report,
        model: &p.model,
        timeline: &p.timeline,
        meta: &p.snap.meta,
        source: &a.input.display().to_string(),
    });
    write_page(&a.output, &page)?;
    eprintln!(
        "wrote {} ({} KiB, {} finding{})",
        a.output.display(),
        page.len().div_ceil(1024),
        p.report.findings.len(),
        if p.report.findings.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    Ok(())
}
