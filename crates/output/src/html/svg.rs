//! Shared pieces of the plots: the frame every plot is drawn in, the time
//! axis, tick steps, colour scales, number formats, and the figure wrapper
//! (title, caption, or "no data" when a series is empty).

use super::bins::TimeBins;
use maud::{html, Markup};

/// Width of every plot in SVG user units (the page scales it).
pub const WIDTH: f64 = 960.0;
/// Room for row labels on the left ("cpu127", "vm-name/3").
pub const LEFT: f64 = 110.0;
pub const RIGHT: f64 = 16.0;
pub const TOP: f64 = 8.0;
/// Room for the x axis, its tick labels and its title.
pub const BOTTOM: f64 = 42.0;

pub fn plot_w() -> f64 {
    WIDTH - LEFT - RIGHT
}

/// One decimal is enough for coordinates and keeps the page small.
pub fn n1(v: f64) -> String {
    stealscope_findings::units::fixed(v, 1)
}

// Kept with the time bins (which caption with them): `bins` may not use
// `html`, which uses it.
pub use crate::bins::{fmt_num, fmt_secs};

/// Ticks on an axis at most, whatever the numbers (a bound for loops).
pub const MAX_TICKS: usize = 32;

/// A step of 1, 2 or 5 times a power of ten giving about `target` ticks
/// over `range`.
pub fn nice_step(range: f64, target: usize) -> f64 {
    if !(range.is_finite() && range > 0.0) {
        return 1.0;
    }
    let raw = range / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// The smallest 1/2/5 step value at or above `v` (the top of a colour scale).
pub fn nice_ceil(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * mag >= v - 1e-12 {
            return m * mag;
        }
    }
    10.0 * mag
}

/// The time axis under a plot whose area starts at `y` (offsets in seconds
/// from the first sample).
pub fn time_axis(bins: &TimeBins, y: f64) -> Markup {
    let span = bins.span_s();
    let step = nice_step(span, 8);
    let first = (bins.t0 / step).ceil() * step;
    let ticks: Vec<f64> = (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|t| *t <= bins.t0 + span + 1e-9)
        .take(MAX_TICKS)
        .collect();
    let x = |t: f64| LEFT + plot_w() * (t - bins.t0) / span;
    html! {
        g class="axis x-axis" {
            line x1=(n1(LEFT)) x2=(n1(LEFT + plot_w())) y1=(n1(y)) y2=(n1(y)) {}
            @for t in &ticks {
                line x1=(n1(x(*t))) x2=(n1(x(*t))) y1=(n1(y)) y2=(n1(y + 4.0)) {}
                text x=(n1(x(*t))) y=(n1(y + 16.0)) text-anchor="middle" { (fmt_secs_axis(*t, step)) }
            }
            text class="axis-title" x=(n1(LEFT + plot_w() / 2.0)) y=(n1(y + 34.0)) text-anchor="middle" {
                "time since the first sample"
            }
        }
    }
}

/// Tick labels keep the step's precision ("+0.5 s", "+2 min").
fn fmt_secs_axis(t: f64, step: f64) -> String {
    if step >= 60.0 && t >= 60.0 {
        return format!("+{}", fmt_secs(t));
    }
    let digits = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("+{} s", fmt_num(t, digits))
}

/// Sequential yellow-orange-red scale for "more is worse" (steal, wait,
/// interrupt rate); `f` in [0, 1].
pub fn heat(f: f64) -> String {
    ramp(f, &[(255, 255, 204), (253, 141, 60), (128, 0, 38)])
}

/// Sequential white-to-blue scale for "more is better" (IPC).
pub fn cool(f: f64) -> String {
    ramp(f, &[(247, 251, 255), (107, 174, 214), (8, 48, 107)])
}

fn ramp(f: f64, stops: &[(u8, u8, u8)]) -> String {
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let seg = (stops.len() - 1) as f64;
    let i = ((f * seg).floor() as usize).min(stops.len() - 2);
    let local = f * seg - i as f64;
    let (a, b) = (stops[i], stops[i + 1]);
    let mix = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * local).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// Colour of a cell without data (CPU offline, nothing sampled).
pub const NO_DATA: &str = "#d9d9d9";

/// A plot section: title, one caption line, then the drawing.
pub fn figure(id: &str, title: &str, caption: &str, body: Markup) -> Markup {
    html! {
        section class="plot" id=(id) {
            h2 { (title) }
            p class="caption" { (caption) }
            (body)
        }
    }
}

/// A plot whose series is empty: the same section, saying why.
pub fn no_data(id: &str, title: &str, why: &str) -> Markup {
    html! {
        section class="plot no-data" id=(id) {
            h2 { (title) }
            p class="no-data" { "no data: " (why) }
        }
    }
}

/// The opening of an accessible SVG: its title is what screen readers and
/// hovering over the plot say.
pub fn svg(class: &str, height: f64, title: &str, body: Markup) -> Markup {
    html! {
        svg class=(class) xmlns="http://www.w3.org/2000/svg" role="img"
            viewBox=(format!("0 0 {WIDTH} {}", n1(height))) width=(WIDTH) height=(n1(height)) {
            title { (title) }
            (body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_formats() {
        assert_eq!(nice_step(10.0, 8), 2.0);
        assert_eq!(nice_step(3600.0, 8), 500.0);
        assert_eq!(nice_step(0.9, 8), 0.2);
        assert_eq!(nice_ceil(3.2), 5.0);
        assert_eq!(nice_ceil(0.07), 0.1);
        assert_eq!(nice_ceil(20.0), 20.0);
        assert_eq!(fmt_secs(0.1), "100 ms");
        assert_eq!(fmt_secs(2.5), "2.5 s");
        assert_eq!(fmt_secs(18.0), "18 s");
        assert_eq!(fmt_secs(5400.0), "1.50 h");
        assert_eq!(heat(0.0), "#ffffcc");
        assert_eq!(heat(1.0), "#800026");
        assert_eq!(heat(f64::NAN), heat(0.0));
    }
}
