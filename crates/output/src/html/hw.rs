//! Hardware counters next to steal: per-CPU IPC and cache miss rate in the
//! same columns as the steal heat map, so a collapse of IPC in high-steal
//! windows (steal.ipc-collapse) lines up under the steal it came with.

use super::bins::Grid;
use super::heatmap::{self, HeatMap};
use super::svg::{self, cool, heat, nice_ceil};
use super::{steal, Series};
use maud::{html, Markup};
use stealscope_model::MachineModel;

pub const ID: &str = "plot-hw-counters";
const TITLE: &str = "IPC and cache miss rate next to steal";

type Rows = Vec<(String, Vec<Option<f64>>)>;

/// (IPC rows, miss-rate % rows), only CPUs with values.
pub fn rows(m: &MachineModel, bins: &super::bins::TimeBins) -> (Rows, Rows) {
    let mut ipc = Grid::new(bins);
    let mut miss = Grid::new(bins);
    for w in m.hardware.windows() {
        for c in &w.cpus {
            if let (Some(ins), Some(cyc)) = (c.instructions, c.cycles) {
                ipc.add_window(bins, c.cpu, w.start_s, w.wall_s, ins, cyc);
            }
            if let (Some(mi), Some(re)) = (c.cache_misses, c.cache_references) {
                miss.add_window(bins, c.cpu, w.start_s, w.wall_s, mi, re);
            }
        }
    }
    let label = |g: Grid<u32>, scale| {
        g.ratios(scale)
            .into_iter()
            .map(|(cpu, v)| (format!("cpu{cpu}"), v))
            .collect()
    };
    (label(ipc, 1.0), label(miss, 100.0))
}

pub fn render(s: &Series, m: &MachineModel) -> Markup {
    let Some(counters) = &m.hardware.counters else {
        return svg::no_data(
            ID,
            TITLE,
            "this snapshot holds no hardware counters (counters.json)",
        );
    };
    let Some(bins) = steal::bins(s) else {
        return svg::no_data(ID, TITLE, "no /proc/stat window of positive length");
    };
    let (ipc, miss) = rows(m, &bins);
    if ipc.is_empty() && miss.is_empty() {
        let why = if counters.windows.is_empty() {
            "no counter windows were read".to_string()
        } else {
            "cycles/instructions and cache references/misses were not counted here (the notes say why)".to_string()
        };
        return svg::no_data(ID, TITLE, &why);
    }
    let steal_rows = steal::rows(s, &bins);
    let steal_max = steal::vmax(&steal_rows);
    let ipc_max = nice_ceil(heatmap::max_value(&ipc).unwrap_or(1.0));
    let miss_max = nice_ceil(heatmap::max_value(&miss).unwrap_or(1.0)).min(100.0);
    let body = html! {
        h3 { "steal" }
        (heatmap::render(&steal::map(&steal_rows, &bins, steal_max)))
        @if !ipc.is_empty() {
            h3 { "instructions per cycle (darker = more work done per cycle)" }
            (heatmap::render(&HeatMap { class: "ipc", title: "IPC per CPU over time", rows: &ipc, bins: &bins,
                vmax: ipc_max, what: "IPC", unit: "", digits: 2, palette: cool }))
        }
        @if !miss.is_empty() {
            h3 { "cache miss rate (misses per cache reference)" }
            (heatmap::render(&HeatMap { class: "miss", title: "Cache miss rate per CPU over time", rows: &miss, bins: &bins,
                vmax: miss_max, what: "miss rate", unit: " %", digits: 1, palette: heat }))
        }
    };
    let caption = format!(
        "Counter windows per CPU in the columns of the steal map (both start at the first sample); {}.",
        bins.describe()
    );
    svg::figure(ID, TITLE, &caption, body)
}
