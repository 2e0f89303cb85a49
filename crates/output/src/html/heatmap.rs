//! A heat map: one row per CPU (or vCPU), one column per time bin, every
//! cell a `rect.cell` whose `<title>` gives its row, time and value. The
//! steal, IPC, interrupt and vCPU wait plots are all drawn with it.

use super::bins::TimeBins;
use super::svg::{self, fmt_num, fmt_secs, n1, LEFT, NO_DATA, TOP};
use maud::{html, Markup};

pub struct HeatMap<'a> {
    /// Extra class of the `<svg>` (tests find a map by it).
    pub class: &'a str,
    pub title: &'a str,
    /// (row label, one value per bin; None: no data).
    pub rows: &'a [(String, Vec<Option<f64>>)],
    pub bins: &'a TimeBins,
    /// Value drawn in the darkest colour (values above are clamped).
    pub vmax: f64,
    /// What a value is, for hover text: "steal", "IPC", ...
    pub what: &'a str,
    pub unit: &'a str,
    pub digits: usize,
    pub palette: fn(f64) -> String,
}

/// Rows get thinner as there are more of them, down to 3 px; below 9 px
/// only every k-th row is labelled.
fn row_height(rows: usize) -> f64 {
    (480.0 / rows.max(1) as f64).clamp(3.0, 16.0)
}

/// Largest value in the rows (for the top of the colour scale).
pub fn max_value(rows: &[(String, Vec<Option<f64>>)]) -> Option<f64> {
    rows.iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .reduce(f64::max)
}

pub fn render(h: &HeatMap) -> Markup {
    let rh = row_height(h.rows.len());
    let label_every = (9.0 / rh).ceil() as usize;
    let cw = svg::plot_w() / h.bins.n as f64;
    let area_h = rh * h.rows.len() as f64;
    let axis_y = TOP + area_h;
    let legend_y = axis_y + svg::BOTTOM + 4.0;
    let height = legend_y + 18.0;
    let value = |v: f64| format!("{}{}", fmt_num(v, h.digits), h.unit);
    let body = html! {
        g class="cells" shape-rendering="crispEdges" {
            @for (r, (label, cells)) in h.rows.iter().enumerate() {
                @let y = TOP + r as f64 * rh;
                @if r % label_every == 0 {
                    text class="row-label" x=(n1(LEFT - 6.0)) y=(n1(y + rh / 2.0 + 4.0)) text-anchor="end" { (label) }
                }
                @for (i, v) in cells.iter().enumerate() {
                    @let t0 = h.bins.start_of(i);
                    @let when = format!("{label} +{}–{}", fmt_secs(t0), fmt_secs(t0 + h.bins.width));
                    @match v {
                        Some(v) => rect class="cell" x=(n1(LEFT + i as f64 * cw)) y=(n1(y)) width=(n1(cw + 0.2)) height=(n1(rh)) fill=((h.palette)(v / h.vmax)) {
                            title { (when) ": " (h.what) " " (value(*v)) }
                        },
                        None => rect class="cell nodata" x=(n1(LEFT + i as f64 * cw)) y=(n1(y)) width=(n1(cw + 0.2)) height=(n1(rh)) fill=(NO_DATA) {
                            title { (when) ": no data" }
                        },
                    }
                }
            }
        }
        (svg::time_axis(h.bins, axis_y))
        (legend(h, legend_y, &value))
    };
    svg::svg(&format!("heatmap {}", h.class), height, h.title, body)
}

/// Ten swatches from 0 to vmax, labelled at both ends.
fn legend(h: &HeatMap, y: f64, value: &dyn Fn(f64) -> String) -> Markup {
    // Room on the right for "100 % or more".
    let x0 = svg::WIDTH - svg::RIGHT - 10.0 * 14.0 - 100.0;
    html! {
        g class="legend" {
            text x=(n1(x0 - 6.0)) y=(n1(y + 11.0)) text-anchor="end" { (h.what) " " (value(0.0)) }
            @for k in 0..10 {
                @let f = (k as f64 + 0.5) / 10.0;
                rect x=(n1(x0 + k as f64 * 14.0)) y=(n1(y)) width="14" height="14" fill=((h.palette)(f)) {
                    title { (value(f * h.vmax)) }
                }
            }
            text x=(n1(x0 + 146.0)) y=(n1(y + 11.0)) {
                (value(h.vmax))
                // Nothing is above 100 % of a window.
                @if !(h.unit == " %" && h.vmax >= 100.0) { " or more" }
            }
        }
    }
}
