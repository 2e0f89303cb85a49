//! Histogram of steal per short span and CPU: bursts that 1 s and 15 s
//! averages hide are the bars right of the burst threshold. Drawn from
//! every window, not the binned columns, so no burst is averaged away, with
//! windows merged into spans of ~100 ms as the burst judgement merges them
//! (a 10 ms window holding one counter unit is not a 100 % burst).

use super::bars::{self, Bars};
use super::svg::{self, fmt_secs};
use super::Series;
use maud::Markup;
use stealscope_model::bursts::{spans, BURST_SPAN_S, BURST_WINDOW_PCT};

pub const ID: &str = "plot-steal-bursts";
const TITLE: &str = "Steal per short window (bursts)";
/// Width of a histogram bucket, percentage points of the window.
pub const BUCKET_PCT: f64 = 5.0;

/// Count of (CPU, span) pairs per BUCKET_PCT bucket of steal, 0 to 100 %.
pub fn histogram(s: &Series) -> Vec<u64> {
    let n = (100.0 / BUCKET_PCT) as usize;
    let mut counts = vec![0u64; n];
    for span in spans(&s.windows) {
        let pct = span.steal_pct().clamp(0.0, 100.0);
        counts[((pct / BUCKET_PCT) as usize).min(n - 1)] += 1;
    }
    counts
}

pub fn render(s: &Series) -> Markup {
    if s.whole_interval {
        return svg::no_data(
            ID,
            TITLE,
            "no sample series (taken with --rate 0): only the whole interval, which hides bursts",
        );
    }
    let counts = histogram(s);
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return svg::no_data(ID, TITLE, "no window with a steal column");
    }
    let labels: Vec<String> = (0..counts.len())
        .map(|k| {
            format!(
                "{:.0}–{:.0}",
                k as f64 * BUCKET_PCT,
                (k + 1) as f64 * BUCKET_PCT
            )
        })
        .collect();
    let hover: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let lo = k as f64 * BUCKET_PCT;
            format!("{lo:.0}–{:.0} % steal: {c} spans", lo + BUCKET_PCT)
        })
        .collect();
    let values: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    let from = (BURST_WINDOW_PCT / BUCKET_PCT).ceil() as usize;
    let bursts: u64 = counts[from.min(counts.len())..].iter().sum();
    let mut walls: Vec<f64> = spans(&s.windows).iter().map(|s| s.wall_s).collect();
    walls.sort_by(f64::total_cmp);
    let window = fmt_secs(walls[walls.len() / 2]);
    let marker = format!("burst ≥ {BURST_WINDOW_PCT:.0} %");
    let caption = format!(
        "{total} CPU-spans (median length {window}, consecutive windows merged to at least {:.0} ms); {bursts} at or above {BURST_WINDOW_PCT:.0} % steal (red), the level the steal.bursty rule calls a burst.",
        BURST_SPAN_S * 1000.0
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        bars::render(&Bars {
            class: "bursts",
            title: TITLE,
            labels: &labels,
            values: &values,
            hover: &hover,
            x_title: "steal in the window, %",
            y_title: "CPU-spans",
            log_y: true,
            alarm_from: Some((from, &marker)),
        }),
    )
}
