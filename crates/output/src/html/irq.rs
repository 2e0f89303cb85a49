//! Interrupt rate per CPU: a heat map over time when the timeline has
//! several interrupt windows (a recording), bars per CPU when it has one
//! (a snapshot's t0..t1).

use super::bars::{self, Bars};
use super::bins::{Grid, TimeBins, MAX_BINS};
use super::heatmap::{self, HeatMap};
use super::svg::{self, fmt_num, heat, nice_ceil};
use maud::Markup;
use std::collections::BTreeMap;
use stealscope_model::timeline::IrqWindow;

pub const ID: &str = "plot-irq-rate";
const TITLE: &str = "Interrupts per CPU";

/// Sources named in a CPU's hover text.
const TOP_SOURCES: usize = 3;

pub fn render(windows: &[IrqWindow]) -> Markup {
    match windows {
        [] => svg::no_data(ID, TITLE, "no /proc/interrupts readings"),
        [one] => bars_per_cpu(one),
        many => over_time(many),
    }
}

fn bars_per_cpu(w: &IrqWindow) -> Markup {
    if w.cpus.is_empty() {
        return svg::no_data(ID, TITLE, "no per-CPU interrupt counts");
    }
    let labels: Vec<String> = w.cpus.iter().map(|c| format!("cpu{}", c.cpu)).collect();
    let values: Vec<f64> = w.cpus.iter().map(|c| c.total_per_s).collect();
    let hover: Vec<String> = w
        .cpus
        .iter()
        .map(|c| {
            let top: Vec<String> = c
                .sources
                .iter()
                .take(TOP_SOURCES)
                .map(|s| format!("{} {}/s", s.label, fmt_num(s.per_s, 0)))
                .collect();
            format!(
                "cpu{}: {}/s ({})",
                c.cpu,
                fmt_num(c.total_per_s, 0),
                top.join(", ")
            )
        })
        .collect();
    let caption = format!(
        "Interrupts per second on each CPU over {} (/proc/interrupts at both ends); hover for the top sources.",
        svg::fmt_secs(w.wall_s)
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        bars::render(&Bars {
            class: "irq",
            title: TITLE,
            labels: &labels,
            values: &values,
            hover: &hover,
            x_title: "CPU",
            y_title: "interrupts/s",
            log_y: false,
            alarm_from: None,
        }),
    )
}

fn over_time(windows: &[IrqWindow]) -> Markup {
    let Some(bins) = TimeBins::over(windows.iter().map(|w| (w.start_s, w.wall_s)), MAX_BINS) else {
        return svg::no_data(ID, TITLE, "no interrupt window of positive length");
    };
    let mut g: Grid<u32> = Grid::new(&bins);
    for w in windows {
        for c in &w.cpus {
            g.add_window(
                &bins,
                c.cpu,
                w.start_s,
                w.wall_s,
                c.total_per_s * w.wall_s,
                w.wall_s,
            );
        }
    }
    let rows: Vec<(String, Vec<Option<f64>>)> = g
        .ratios(1.0)
        .into_iter()
        .map(|(cpu, v)| (format!("cpu{cpu}"), v))
        .collect();
    if rows.is_empty() {
        return svg::no_data(ID, TITLE, "no per-CPU interrupt counts");
    }
    let vmax = nice_ceil(heatmap::max_value(&rows).unwrap_or(1.0));
    let caption = format!(
        "Interrupts per second per CPU; {}. Top sources over the recording: {}.",
        bins.describe(),
        top_sources(windows)
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        heatmap::render(&HeatMap {
            class: "irq",
            title: TITLE,
            rows: &rows,
            bins: &bins,
            vmax,
            what: "interrupts",
            unit: "/s",
            digits: 0,
            palette: heat,
        }),
    )
}

/// The sources with the most interrupts over all windows and CPUs.
fn top_sources(windows: &[IrqWindow]) -> String {
    let mut total: BTreeMap<&str, f64> = BTreeMap::new();
    for w in windows {
        for s in w.cpus.iter().flat_map(|c| &c.sources) {
            *total.entry(s.label.as_str()).or_default() += s.per_s * w.wall_s;
        }
    }
    let mut v: Vec<(&str, f64)> = total.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<&str> = v.iter().take(TOP_SOURCES).map(|(l, _)| *l).collect();
    if top.is_empty() {
        "none".into()
    } else {
        top.join(", ")
    }
}
