//! "Who stole it" over time, from a recording's culprits per host scan: a
//! per-VM table of its largest culprits over the whole recording, and the
//! vCPU wait stacked by (VM, culprit) over time, in vCPUs waiting.

use super::bins::{TimeBins, MAX_BINS};
use super::svg::{self, fmt_num, fmt_secs, n1, LEFT, TOP};
use crate::who_time::{self, spans};
use maud::{html, Markup};
use std::collections::BTreeMap;
use stealscope_model::timeline::CulpritWindow;
use stealscope_who::{Culprit, Kind};

pub const ID: &str = "who-stole-over-time";
const TITLE: &str = "Who stole it over time: vCPU wait by culprit";
const HEIGHT: f64 = 200.0;
/// Stacked (VM, culprit) pairs drawn; the rest is one grey band.
const STACKED: usize = 7;
const COLORS: [&str; STACKED] = [
    "#c0392b", "#4a78b0", "#e69b00", "#27ae60", "#8e44ad", "#16a085", "#d35400",
];
const REST: &str = "#bbbbbb";
/// Culprits listed per VM in the table before `other`.
const TABLE_ROWS: usize = 5;

type Key = (String, Culprit); // vm, culprit

fn label(c: &Culprit) -> String {
    let name = &c.name;
    match c.kind {
        Kind::Vcpu => format!("VM {name}'s vCPUs"),
        Kind::Vmm => format!("VM {name}'s VMM threads"),
        Kind::HostKthread => format!("{name} (kernel)"),
        Kind::HostProcess => format!("{name} (host process)"),
        _ => name.to_string(),
    }
}

pub fn render(w: &[CulpritWindow]) -> Markup {
    if w.is_empty() {
        return svg::no_data(
            ID,
            TITLE,
            "the recording carries no culprits (a guest, no VMs, or the scheduler-event collector could not run: see the notes)",
        );
    }
    let stacked = stacked_keys(w);
    let table = culprit_table(w);
    let sp = spans(w);
    let Some(bins) = TimeBins::over(sp.iter().map(|(a, d, _)| (*a, *d)), MAX_BINS) else {
        return html! { section class="plot" id=(ID) { h2 { (TITLE) } (table) } };
    };
    let rate = wait_rates(&sp, &bins, &stacked);
    let top = svg::nice_ceil(
        rate.iter()
            .map(|r| r.iter().sum::<f64>())
            .fold(0.0, f64::max)
            .max(0.1),
    );
    let plot = Plot {
        bins: &bins,
        stacked: &stacked,
        top,
        cw: svg::plot_w() / bins.n as f64,
        base: TOP + HEIGHT,
    };
    let body = html! {
        (plot.y_axis())
        (plot.bands(&rate))
        (svg::time_axis(&bins, plot.base))
        (plot.legend())
    };
    let legend_rows = (stacked.len() + 1).div_ceil(3) as f64;
    html! {
        section class="plot" id=(ID) {
            h2 { (TITLE) }
            p class="caption" { "Seconds each VM's vCPUs waited while the culprit ran on their CPU, over the whole recording (largest culprits per VM; scheduler events):" }
            (table)
            p class="caption" { (format!("The same over time, stacked by VM and culprit, in vCPUs waiting (1 = one vCPU's worth of wall time); {} bins of {}.", bins.n, fmt_secs(bins.width))) }
            (svg::svg("stacked who-stacked", plot.base + svg::BOTTOM + 8.0 + 18.0 * legend_rows, TITLE, body))
        }
    }
}

/// The (VM, culprit) pairs drawn as their own bands: the largest over the
/// whole recording, `other` excluded.
fn stacked_keys(w: &[CulpritWindow]) -> Vec<Key> {
    let mut totals: BTreeMap<Key, f64> = BTreeMap::new();
    for c in w {
        for r in &c.culprits {
            *totals.entry((c.vm.clone(), r.culprit.clone())).or_default() += r.seconds;
        }
    }
    let mut ranked: Vec<(Key, f64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
        .into_iter()
        .filter(|(k, _)| k.1.kind != Kind::Other)
        .take(STACKED)
        .map(|(k, _)| k)
        .collect()
}

/// Per VM: its largest culprits, then everything else as `other`.
fn culprit_table(w: &[CulpritWindow]) -> Markup {
    let vms = who_time::summarize(w, TABLE_ROWS, 0.0, 1);
    html! {
        table class="cpus who-over-time" {
            tr { th { "VM" } th { "culprit" } th { "kind" } th { "wait s" } th { "share" } }
            @for v in &vms {
                @for (i, c) in v.culprits.iter().enumerate() {
                    tr {
                        td { @if i == 0 { (v.vm) } }
                        td { (c.culprit.name) }
                        td { (c.culprit.kind) }
                        td { (stealscope_findings::units::fixed(c.seconds, 2)) }
                        td { (format!("{:.0}%", 100.0 * c.share)) }
                    }
                }
                @if v.other_s > 0.0 {
                    tr {
                        td { @if v.culprits.is_empty() { (v.vm) } }
                        td { "other" }
                        td { "" }
                        td { (stealscope_findings::units::fixed(v.other_s, 2)) }
                        td { (format!("{:.0}%", 100.0 * v.other_s / v.wait_s.max(1e-12))) }
                    }
                }
            }
        }
    }
}

/// vCPUs waiting per bin and band (the last band is the rest).
fn wait_rates(
    sp: &[(f64, f64, &CulpritWindow)],
    bins: &TimeBins,
    stacked: &[Key],
) -> Vec<Vec<f64>> {
    // Seconds of wait per bin and band.
    let mut cells = vec![vec![0.0f64; stacked.len() + 1]; bins.n];
    for (start, dur, c) in sp {
        for r in &c.culprits {
            let band = stacked
                .iter()
                .position(|k| k.0 == c.vm && k.1 == r.culprit)
                .unwrap_or(stacked.len());
            for (i, share) in bins.spread(*start, *dur) {
                cells[i][band] += r.seconds * share;
            }
        }
    }
    cells
        .iter()
        .map(|r| r.iter().map(|s| s / bins.width).collect())
        .collect()
}

fn color(b: usize) -> &'static str {
    COLORS.get(b).copied().unwrap_or(REST)
}

/// The stacked plot's geometry and bands.
struct Plot<'a> {
    bins: &'a TimeBins,
    stacked: &'a [Key],
    /// The y axis's top, vCPUs waiting.
    top: f64,
    /// Width of one bin's column.
    cw: f64,
    /// The y of the x axis.
    base: f64,
}

impl Plot<'_> {
    fn y(&self, v: f64) -> f64 {
        self.base - HEIGHT * (v / self.top).clamp(0.0, 1.0)
    }

    fn name(&self, b: usize) -> String {
        self.stacked.get(b).map_or("the rest".to_string(), |k| {
            format!("{} ← {}", k.0, label(&k.1))
        })
    }

    fn y_axis(&self) -> Markup {
        let top = self.top;
        html! {
            g class="axis y-axis" {
                @for t in [0.0, 0.25, 0.5, 0.75, 1.0] {
                    line x1=(n1(LEFT - 4.0)) x2=(n1(LEFT)) y1=(n1(self.y(t * top))) y2=(n1(self.y(t * top)))  {}
                    text x=(n1(LEFT - 6.0)) y=(n1(self.y(t * top) + 4.0)) text-anchor="end" { (fmt_num(t * top, 2)) }
                }
                text class="axis-title" transform=(format!("translate(14 {}) rotate(-90)", n1(TOP + HEIGHT / 2.0))) text-anchor="middle" { "vCPUs waiting" }
            }
        }
    }

    fn bands(&self, rate: &[Vec<f64>]) -> Markup {
        let (bins, cw) = (self.bins, self.cw);
        html! {
            g class="stack" shape-rendering="crispEdges" {
                @for (i, r) in rate.iter().enumerate() {
                    @let t0 = bins.t0 + i as f64 * bins.width;
                    @let tip = format!("+{}–{}: {}", fmt_secs(t0), fmt_secs(t0 + bins.width),
                        r.iter().enumerate().filter(|(_, v)| **v > 0.0).map(|(b, v)| format!("{} {v:.2}", self.name(b))).collect::<Vec<_>>().join(", "));
                    @for (b, v) in r.iter().enumerate() {
                        @let below: f64 = r[..b].iter().sum();
                        @if *v > 0.0 {
                            rect x=(n1(LEFT + i as f64 * cw)) y=(n1(self.y(below + v))) width=(n1(cw + 0.2))
                                height=(n1(self.y(below) - self.y(below + v))) fill=(color(b)) { title { (tip) } }
                        }
                    }
                }
            }
        }
    }

    fn legend(&self) -> Markup {
        html! {
            g class="legend" {
                @for b in 0..=self.stacked.len() {
                    @let lx = LEFT + (b % 3) as f64 * 280.0;
                    @let ly = self.base + svg::BOTTOM + 4.0 + (b / 3) as f64 * 18.0;
                    rect x=(n1(lx)) y=(n1(ly)) width="14" height="14" fill=(color(b)) stroke="#999" {}
                    text x=(n1(lx + 20.0)) y=(n1(ly + 11.0)) { (self.name(b)) }
                }
            }
        }
    }
}
