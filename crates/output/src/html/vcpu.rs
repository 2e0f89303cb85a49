//! Per-vCPU run-queue wait on a host (the steal each guest sees), one row
//! per VM and vCPU, from the vCPU windows of a recording.

use super::bins::{Grid, TimeBins, MAX_BINS};
use super::heatmap::{self, HeatMap};
use super::svg::{self, heat, nice_ceil};
use maud::Markup;
use std::collections::BTreeMap;
use stealscope_model::timeline::VcpuWindow;

pub const ID: &str = "plot-vcpu-wait";
const TITLE: &str = "vCPU wait per VM and vCPU (host-side steal)";

pub fn render(windows: &[VcpuWindow]) -> Markup {
    let mut per_row: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for w in windows {
        *per_row.entry((w.vm.as_str(), w.vcpu)).or_default() += 1;
    }
    let most = per_row.values().copied().max().unwrap_or(0);
    let spans = windows.iter().map(|w| (w.start_s, w.wall_s));
    let Some(bins) = TimeBins::over_rows(spans, most, MAX_BINS) else {
        return svg::no_data(
            ID,
            TITLE,
            "no vCPU windows (only a recording on a KVM host has them)",
        );
    };
    let mut g: Grid<(&str, u32)> = Grid::new(&bins);
    for w in windows {
        let key = (w.vm.as_str(), w.vcpu);
        g.row(key);
        g.add_window(&bins, key, w.start_s, w.wall_s, w.wait_s, w.wall_s);
    }
    let rows: Vec<(String, Vec<Option<f64>>)> = g
        .ratios(100.0)
        .into_iter()
        .map(|((vm, vcpu), v)| (format!("{vm}/{vcpu}"), v))
        .collect();
    let vmax = nice_ceil(heatmap::max_value(&rows).unwrap_or(0.0).max(1.0)).min(100.0);
    let caption = format!(
        "Share of wall time each vCPU thread waited runnable on a host run queue (schedstat); {}.",
        bins.describe()
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        heatmap::render(&HeatMap {
            class: "vcpu",
            title: TITLE,
            rows: &rows,
            bins: &bins,
            vmax,
            what: "wait",
            unit: " %",
            digits: 1,
            palette: heat,
        }),
    )
}
