//! `stealscope report FILE -o report.html`: the doctor's model of a snapshot
//! or a recording drawn as one self-contained HTML page (or a simulation's
//! results). Opening the input and its model is the engine's
//! (`stealscope_engine::report::page`).

use clap::Args;
use std::path::{Path, PathBuf};
use stealscope_output::html::{self, HtmlInput};
use stealscope_output::who_time;

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Snapshot (directory or .tar.gz), recording (`record -o`) or `sim --json` output to draw
    #[arg(value_name = "FILE")]
    pub input: PathBuf,
    /// HTML file to write; without it, the report in text on stdout
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Without -o: JSON on stdout (doctor's, plus culprits_over_time)
    #[arg(long, conflicts_with = "output")]
    pub json: bool,
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

/// Without `-o`: the report in text (or JSON) on stdout, from the same
/// model and culprits the page draws.
fn print(p: &stealscope_engine::report::Page, json: bool) -> Result<(), Error> {
    crate::cut_off(p.report.damage.is_some());
    let over = who_time::for_report(&p.timeline.culprits);
    let r = who_time::ReportJson {
        report: &p.report,
        culprits_over_time: &over,
    };
    let text = stealscope_output::json::or_text(json, &r, || {
        let o = stealscope_output::text::TextOpts::for_stdout(None, false);
        stealscope_output::text::report(&p.report, Some(&over), &p.timeline, &o)
    });
    crate::write_stdout(&text)
}

pub fn run(a: &ReportArgs) -> Result<(), Error> {
    let Some(output) = &a.output else {
        if sim_page(&a.input)?.is_some() {
            return Err(format!(
                "{}: a simulation has no text report (sim prints one); draw it with -o FILE.html",
                a.input.display()
            )
            .into());
        }
        return print(&stealscope_engine::report::page(&a.input)?, a.json);
    };
    if let Some(sim) = sim_page(&a.input)? {
        let page = html::sim::render(&sim, &a.input.display().to_string());
        write_page(output, &page)?;
        eprintln!(
            "wrote {} ({} KiB, {} simulated cases)",
            output.display(),
            page.len().div_ceil(1024),
            sim.cases.len()
        );
        return Ok(());
    }
    let p = stealscope_engine::report::page(&a.input)?;
    crate::cut_off(p.report.damage.is_some());
    let page = html::render(&HtmlInput {
        report: &p.report,
        model: &p.model,
        timeline: &p.timeline,
        meta: &p.snap.meta,
        source: &a.input.display().to_string(),
    });
    write_page(output, &page)?;
    eprintln!(
        "wrote {} ({} KiB, {} finding{})",
        output.display(),
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
