//! Per-CPU steal heat map over time: the first plot, where bursts and the
//! CPUs they hit show at a glance.

use super::bins::{Grid, TimeBins, MAX_BINS};
use super::heatmap::{self, HeatMap};
use super::svg::{self, heat, nice_ceil};
use super::Series;
use maud::Markup;

pub const ID: &str = "plot-steal-heatmap";
const TITLE: &str = "Steal per CPU over time";

/// Bins of the /proc/stat series (shared by every plot aligned with it).
pub fn bins(s: &Series) -> Option<TimeBins> {
    TimeBins::over(s.windows.iter().map(|(t, d)| (*t, d.wall_s)), MAX_BINS)
}

/// Steal % of wall time per CPU and bin.
pub fn rows(s: &Series, bins: &TimeBins) -> Vec<(String, Vec<Option<f64>>)> {
    let mut g = Grid::new(bins);
    // One buffer for all windows: an hour at 1000 Hz is millions of them.
    let mut spread = Vec::new();
    for (t, d) in s.windows.iter() {
        spread.clear();
        spread.extend(bins.spread(*t, d.wall_s));
        for c in d.cpus.iter().filter(|c| c.has_steal) {
            g.row(c.cpu);
            for &(i, share) in &spread {
                g.add(c.cpu, i, share * c.secs.steal, share * c.wall_s);
            }
        }
    }
    g.ratios(100.0)
        .into_iter()
        .map(|(cpu, v)| (format!("cpu{cpu}"), v))
        .collect()
}

/// Top of the steal colour scale: the largest bin, at least 1 %.
pub fn vmax(rows: &[(String, Vec<Option<f64>>)]) -> f64 {
    nice_ceil(heatmap::max_value(rows).unwrap_or(0.0).max(1.0)).min(100.0)
}

pub fn map<'a>(
    rows: &'a [(String, Vec<Option<f64>>)],
    bins: &'a TimeBins,
    vmax: f64,
) -> HeatMap<'a> {
    HeatMap {
        class: "steal",
        title: TITLE,
        rows,
        bins,
        vmax,
        what: "steal",
        unit: " %",
        digits: 1,
        palette: heat,
    }
}

pub fn render(s: &Series) -> Markup {
    let Some(bins) = bins(s) else {
        return svg::no_data(ID, TITLE, "no /proc/stat window of positive length");
    };
    let rows = rows(s, &bins);
    if rows.is_empty() {
        return svg::no_data(
            ID,
            TITLE,
            "/proc/stat has no steal column on this kernel (before 2.6.11)",
        );
    }
    let vmax = vmax(&rows);
    let caption = format!(
        "Share of wall time each CPU lost to the hypervisor; {}{}. Darkest = {} %{}; grey = no data (CPU offline).",
        bins.describe(),
        s.caveat(),
        svg::fmt_num(vmax, 1),
        if vmax < 100.0 { " or more" } else { "" }
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        heatmap::render(&map(&rows, &bins, vmax)),
    )
}
