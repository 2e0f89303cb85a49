//! `stealscope report`: one self-contained HTML page (inline CSS and SVG, no
//! script) with the plots of a snapshot or recording, the findings in the
//! doctor's order and the notes. A Content-Security-Policy forbids every
//! fetch, so opening the file never touches the network. Each plot lives in
//! its own file; long series are binned (bins.rs) so the page stays small.

pub mod bars;
pub use crate::bins;
pub mod bursts;
pub mod exact_steal;
pub mod findings;
pub mod heatmap;
pub mod host;
pub mod hw;
pub mod irq;
pub mod probes;
pub mod sim;
pub mod stacked;
pub mod steal;
pub mod svg;
pub mod vcpu;
pub mod who;
pub mod who_time;

#[cfg(test)]
mod tests;

use maud::{html, Markup, PreEscaped, DOCTYPE};
use std::borrow::Cow;
use stealscope_analysis::DoctorReport;
use stealscope_model::timeline::Timeline;
use stealscope_model::{IntervalDelta, MachineModel};
use stealscope_readers::snapshot::Meta;

/// No fetch of any kind; inline styles and data: images (the favicon)
/// only. There is no script at all.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
                       base-uri 'none'; form-action 'none'";

pub struct HtmlInput<'a> {
    pub report: &'a DoctorReport,
    pub model: &'a MachineModel,
    pub timeline: &'a Timeline,
    pub meta: &'a Meta,
    /// What the page was made from, as the user named it.
    pub source: &'a str,
}

/// The /proc/stat windows the time plots draw: the sample series, or the
/// whole interval as one window when there is none.
pub struct Series<'a> {
    pub windows: Cow<'a, [(f64, IntervalDelta)]>,
    pub whole_interval: bool,
}

impl<'a> Series<'a> {
    pub fn of(m: &'a MachineModel) -> Series<'a> {
        if m.windows.is_empty() {
            Series {
                windows: Cow::Owned(vec![(0.0, m.interval.clone())]),
                whole_interval: true,
            }
        } else {
            Series {
                windows: Cow::Borrowed(&m.windows),
                whole_interval: false,
            }
        }
    }

    /// Said in captions when the plot has one column for everything.
    fn caveat(&self) -> &'static str {
        if self.whole_interval {
            "; no sample series, so one column for the whole interval"
        } else {
            ""
        }
    }
}

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1000px; padding: 0 16px 40px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 18px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 6px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 14px 0 4px; }
.caption, .no-data { color: #555; margin: 2px 0 6px; }
section.no-data p.no-data { font-style: italic; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font-size: 11px; fill: #333; }
svg .axis line, svg line.marker { stroke: #777; }
svg .axis-title { font-size: 12px; fill: #555; }
svg .marker-label { fill: #c0392b; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { text-align: left; padding: 2px 10px 2px 0; vertical-align: top; }
table.cpus td, table.cpus th { text-align: right; padding: 2px 8px; }
table.vms th, table.vms td { padding: 2px 10px; border-bottom: 1px solid #eee; }
table.vms td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.nested { font-size: 12px; margin: 0; }
table.nested th, table.nested td { padding: 1px 8px 1px 0; border-bottom: 1px solid #eee; }
.verdict { border: 2px solid #4a8a4a; padding: 6px 14px; margin: 12px 0; background: #f4faf4; font-size: 15px; }
.verdict.status-critical, .verdict.status-cut-off { border-color: #c0392b; background: #fdf3f2; }
.verdict.status-warning { border-color: #e69b00; background: #fffaf0; }
.verdict p { margin: 4px 0; }
.finding { border-left: 5px solid #999; padding: 4px 12px; margin: 12px 0; background: #fafafa; }
.finding.sev-critical { border-color: #c0392b; }
.finding.sev-warning { border-color: #e69b00; }
.finding.sev-info { border-color: #4a78b0; }
.finding .severity { font-size: 12px; letter-spacing: .04em; color: #555; }
.finding table.evidence th { font-weight: normal; color: #555; }
pre { white-space: pre-wrap; font-size: 12px; }
nav a { margin-right: 12px; }
"#;

/// The `<head>` of every page: the CSP, the title and the style sheet.
pub(crate) fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta http-equiv="Content-Security-Policy" content=(CSP);
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="generator" content=(format!("stealscope {}", env!("CARGO_PKG_VERSION")));
            // An empty icon, so no browser asks for /favicon.ico.
            link rel="icon" href="data:,";
            title { (title) }
            style { (PreEscaped(STYLE)) }
        }
    }
}

/// The page. Sections: meta, findings, plots, notes.
pub fn render(input: &HtmlInput) -> String {
    let r = input.report;
    let series = Series::of(input.model);
    let host = r.hostname.as_deref().unwrap_or("unknown host");
    let title = format!("stealscope report: {host}");
    let mut all_notes: Vec<String> = r.notes.clone();
    all_notes.extend(input.timeline.notes.iter().cloned());
    let brief = stealscope_analysis::notes::brief(&all_notes, Some(&r.hardware));
    let host_first = r.roles.iter().any(|x| x == "host");
    let mut plots: Vec<(&str, &str, Markup)> = vec![
        (steal::ID, "steal", steal::render(&series)),
        (stacked::ID, "busy/idle/steal", stacked::render(&series)),
        (bursts::ID, "bursts", bursts::render(&series)),
        (
            exact_steal::ID,
            "exact steal",
            exact_steal::render(r.exact_steal.as_ref(), input.timeline, input.model.wall_s),
        ),
        (hw::ID, "IPC", hw::render(&series, input.model)),
        (irq::ID, "interrupts", irq::render(&input.timeline.irq)),
        (vcpu::ID, "vCPU wait", vcpu::render(&input.timeline.vcpu)),
        (
            who::ID,
            "who stole it",
            who::render(r.host.as_ref(), !input.timeline.culprits.is_empty()),
        ),
        (
            who_time::ID,
            "who, over time",
            who_time::render(&input.timeline.culprits),
        ),
        (probes::ID, "probes", probes::render(&input.timeline.probes)),
    ];
    // On a host, who stole the vCPUs' time is the answer: it comes right
    // after the VM table, before the findings and the guest-steal plots
    // (it was ~4,800 px down after them).
    let lead: Vec<(&str, &str, Markup)> = if host_first {
        let first = [who::ID, who_time::ID, vcpu::ID];
        plots.sort_by_key(|p| {
            first
                .iter()
                .position(|id| *id == p.0)
                .unwrap_or(first.len())
        });
        plots.drain(..first.len()).collect()
    } else {
        Vec::new()
    };
    let page: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(&title))
            body {
                header {
                    h1 { (title) }
                    nav {
                        @if r.host.is_some() { a href="#host" { "VMs" } }
                        a href="#findings" { "findings" }
                        @for (id, name, _) in lead.iter().chain(&plots) { a href=(format!("#{id}")) { (name) } }
                        a href="#notes" { "notes" }
                    }
                }
                (host::verdict(&r.verdict))
                @if host_first { @if let Some(h) = &r.host { (host::section(h)) } }
                @for (_, _, plot) in &lead { (plot) }
                (findings::meta(r, input.meta, input.source))
                @if !host_first { @if let Some(h) = &r.host { (host::section(h)) } }
                (findings::findings(&r.findings))
                @for (_, _, plot) in &plots { (plot) }
                (findings::notes(&brief, &all_notes))
            }
        }
    };
    page.into_string()
}
