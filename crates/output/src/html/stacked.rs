//! Busy, steal and idle stacked over time (mean over CPUs): how much of the
//! machine worked, waited for the hypervisor or had nothing to do.

use super::bins::Grid;
use super::svg::{self, fmt_num, fmt_secs, n1, LEFT, TOP};
use super::Series;
use maud::{html, Markup};

pub const ID: &str = "plot-busy-idle-steal";
const TITLE: &str = "Busy, steal and idle over time (mean over CPUs)";
const HEIGHT: f64 = 200.0;

/// Bottom to top: steal first, so small amounts sit on the axis and show.
const PARTS: [(&str, &str); 3] = [
    ("steal", "#c0392b"),
    ("busy", "#4a78b0"),
    ("idle", "#e6e6e6"),
];

pub fn render(s: &Series) -> Markup {
    let Some(bins) = super::steal::bins(s) else {
        return svg::no_data(ID, TITLE, "no /proc/stat window of positive length");
    };
    let mut g = Grid::new(&bins);
    for k in 0..PARTS.len() {
        g.row(k);
    }
    // One buffer for all windows: an hour at 1000 Hz is millions of them.
    let mut spread = Vec::new();
    for (t, d) in s.windows.iter() {
        spread.clear();
        spread.extend(bins.spread(*t, d.wall_s));
        for c in &d.cpus {
            let parts = [c.secs.steal, c.secs.util(), c.secs.idle_all()];
            // Shares of the time the kernel accounted, not of wall time:
            // tick counts miss or exceed a window's length by a tick, which
            // would leave a column at 99.4 % (a white notch) or above 100 %.
            let accounted: f64 = parts.iter().sum();
            if accounted <= 0.0 {
                continue;
            }
            for (k, v) in parts.into_iter().enumerate() {
                for &(i, share) in &spread {
                    g.add(k, i, share * v * c.wall_s / accounted, share * c.wall_s);
                }
            }
        }
    }
    let rows = g.ratios(100.0);
    let cw = svg::plot_w() / bins.n as f64;
    let base = TOP + HEIGHT;
    let y = |pct: f64| base - HEIGHT * pct.clamp(0.0, 100.0) / 100.0;
    // Edges rounded once, so that a segment ends exactly where the next
    // begins (rounding top and height apart leaves hairline gaps).
    let edge = |pct: f64| (y(pct) * 10.0).round() / 10.0;
    let body = html! {
        g class="axis y-axis" {
            @for t in [0.0, 25.0, 50.0, 75.0, 100.0] {
                line x1=(n1(LEFT - 4.0)) x2=(n1(LEFT)) y1=(n1(y(t))) y2=(n1(y(t))) {}
                text x=(n1(LEFT - 6.0)) y=(n1(y(t) + 4.0)) text-anchor="end" { (fmt_num(t, 0)) " %" }
            }
            text class="axis-title" transform=(format!("translate(14 {}) rotate(-90)", n1(TOP + HEIGHT / 2.0))) text-anchor="middle" { "% of CPU time" }
        }
        g class="stack" shape-rendering="crispEdges" {
            @for i in 0..bins.n {
                @let vals: Vec<f64> = rows.iter().map(|(_, v)| v[i].unwrap_or(0.0)).collect();
                @let t0 = bins.start_of(i);
                @let tip = format!("+{}–{}: {}", fmt_secs(t0), fmt_secs(t0 + bins.width),
                    PARTS.iter().zip(&vals).map(|((n, _), v)| format!("{n} {} %", stealscope_findings::units::fixed(*v, 1))).collect::<Vec<_>>().join(", "));
                @for (k, (name, color)) in PARTS.iter().enumerate() {
                    @let below: f64 = vals[..k].iter().sum();
                    @let v = vals[k];
                    rect class=(format!("seg {name}")) x=(n1(LEFT + i as f64 * cw)) y=(n1(edge(below + v)))
                        width=(n1(cw + 0.2)) height=(n1(edge(below) - edge(below + v))) fill=(color) {
                        title { (tip) }
                    }
                }
            }
        }
        (svg::time_axis(&bins, base))
        g class="legend" {
            @for (k, (name, color)) in PARTS.iter().enumerate() {
                rect x=(n1(LEFT + k as f64 * 90.0)) y=(n1(base + svg::BOTTOM + 4.0)) width="14" height="14" fill=(color) stroke="#999" {}
                text x=(n1(LEFT + k as f64 * 90.0 + 20.0)) y=(n1(base + svg::BOTTOM + 15.0)) { (name) }
            }
        }
    };
    let caption = format!(
        "Busy = user+nice+system+irq+softirq, idle = idle+iowait, steal = time the hypervisor ran something else, as shares of the time the kernel accounted (so each column adds to 100 %); {}{}.",
        bins.describe(),
        s.caveat()
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        svg::svg("stacked", base + svg::BOTTOM + 24.0, TITLE, body),
    )
}
