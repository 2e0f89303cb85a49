//! A bar chart with categorical x (histogram buckets, CPUs): each bar a
//! `rect.bar` with a `<title>` giving its label and count. Counts of
//! histograms span decades, so the y axis can be logarithmic.

use super::svg::{self, fmt_num, n1, nice_step, LEFT, MAX_TICKS, TOP};
use maud::{html, Markup};

pub struct Bars<'a> {
    pub class: &'a str,
    pub title: &'a str,
    /// One per bar, under it (thinned out when there are many).
    pub labels: &'a [String],
    pub values: &'a [f64],
    /// Hover text per bar.
    pub hover: &'a [String],
    pub x_title: &'a str,
    pub y_title: &'a str,
    pub log_y: bool,
    /// Bars from this index on are drawn in the alarm colour (e.g. burst
    /// windows), with the label at the boundary.
    pub alarm_from: Option<(usize, &'a str)>,
}

const HEIGHT: f64 = 180.0;
const COLOR: &str = "#4a78b0";
const ALARM: &str = "#c0392b";

/// Bar height as a share of the plot for `v` when the tallest is `max`.
fn share(v: f64, max: f64, log: bool) -> f64 {
    if !(v > 0.0 && v.is_finite() && max > 0.0) {
        return 0.0;
    }
    if log {
        (1.0 + v).log10() / (1.0 + max).log10()
    } else {
        v / max
    }
}

pub fn render(b: &Bars) -> Markup {
    let n = b.values.len().max(1);
    let max = b
        .values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let slot = svg::plot_w() / n as f64;
    let base = TOP + HEIGHT;
    let label_every = ((n as f64 * 42.0 / svg::plot_w()).ceil() as usize).max(1);
    let mut ticks: Vec<f64> = if b.log_y {
        (0..)
            .map(|k| 10f64.powi(k))
            .take_while(|t| *t <= max.max(1.0))
            .take(MAX_TICKS)
            .collect()
    } else {
        let step = nice_step(max, 4);
        (0..)
            .map(|k| k as f64 * step)
            .take_while(|t| *t <= max)
            .take(MAX_TICKS)
            .collect()
    };
    // The top of the axis says how tall the tallest bar is, unless a tick
    // is already close to it.
    if ticks.last().is_some_and(|t| share(*t, max, b.log_y) < 0.9) {
        ticks.push(max);
    }
    let y = |v: f64| base - HEIGHT * share(v, max, b.log_y);
    let body = html! {
        g class="axis y-axis" {
            line x1=(n1(LEFT)) x2=(n1(LEFT)) y1=(n1(TOP)) y2=(n1(base)) {}
            @for t in &ticks {
                line x1=(n1(LEFT - 4.0)) x2=(n1(LEFT)) y1=(n1(y(*t))) y2=(n1(y(*t))) {}
                text x=(n1(LEFT - 6.0)) y=(n1(y(*t) + 4.0)) text-anchor="end" { (fmt_num(*t, 2)) }
            }
            text class="axis-title" transform=(format!("translate(14 {}) rotate(-90)", n1(TOP + HEIGHT / 2.0))) text-anchor="middle" {
                (b.y_title) @if b.log_y { " (log)" }
            }
        }
        g class="bars" {
            @for (i, v) in b.values.iter().enumerate() {
                @let alarm = b.alarm_from.is_some_and(|(from, _)| i >= from);
                rect class=(if alarm { "bar alarm" } else { "bar" }) x=(n1(LEFT + i as f64 * slot + 1.0)) y=(n1(y(*v)))
                    width=(n1((slot - 2.0).max(1.0))) height=(n1(base - y(*v))) fill=(if alarm { ALARM } else { COLOR }) {
                    title { (b.hover.get(i).map_or("", |s| s.as_str())) }
                }
            }
        }
        g class="axis x-axis" {
            line x1=(n1(LEFT)) x2=(n1(LEFT + svg::plot_w())) y1=(n1(base)) y2=(n1(base)) {}
            @for (i, l) in b.labels.iter().enumerate() {
                @if i % label_every == 0 {
                    text x=(n1(LEFT + (i as f64 + 0.5) * slot)) y=(n1(base + 16.0)) text-anchor="middle" { (l) }
                }
            }
            text class="axis-title" x=(n1(LEFT + svg::plot_w() / 2.0)) y=(n1(base + 34.0)) text-anchor="middle" { (b.x_title) }
        }
        @if let Some((from, label)) = b.alarm_from {
            @let x = LEFT + from as f64 * slot;
            line class="marker" x1=(n1(x)) x2=(n1(x)) y1=(n1(TOP)) y2=(n1(base)) stroke-dasharray="4 3" {}
            text class="marker-label" x=(n1(x + 4.0)) y=(n1(TOP + 12.0)) { (label) }
        }
    };
    svg::svg(
        &format!("bars {}", b.class),
        base + svg::BOTTOM,
        b.title,
        body,
    )
}
