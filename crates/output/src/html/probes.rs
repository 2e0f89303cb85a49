//! Latency histograms of the active probes (wakeup, preempt, ...), one per
//! probe, from the probe windows of a recording. Buckets are merged into
//! powers of two of microseconds so any bucket layout gives a bounded chart.

use super::bars::{self, Bars};
use super::svg::{self, fmt_num};
use maud::{html, Markup};
use std::collections::BTreeMap;
use stealscope_model::timeline::ProbeWindow;

pub const ID: &str = "plot-probe-latency";
const TITLE: &str = "Probe latency";

/// One probe's windows merged: counts per power-of-two bucket (exponent k:
/// latencies in (2^(k-1), 2^k] µs), samples, the worst window's p99, max.
#[derive(Debug, Default, PartialEq)]
pub struct Merged {
    pub buckets: BTreeMap<i32, u64>,
    pub samples: u64,
    pub worst_p99_us: f64,
    pub max_us: f64,
    pub windows: usize,
}

/// Latencies above 2^MAX_EXP µs (about 12.7 days) share the last bucket.
const MAX_EXP: i32 = 40;

pub fn bucket_of(upper_us: f64) -> i32 {
    (upper_us.max(1.0).log2().ceil() as i32).min(MAX_EXP)
}

pub fn merge(windows: &[ProbeWindow]) -> BTreeMap<&str, Merged> {
    let mut out: BTreeMap<&str, Merged> = BTreeMap::new();
    for w in windows {
        let m = out.entry(w.probe.as_str()).or_default();
        for &(upper, count) in &w.buckets {
            if upper.is_finite() {
                let b = m.buckets.entry(bucket_of(upper)).or_default();
                *b = b.saturating_add(count);
            }
        }
        m.samples = m.samples.saturating_add(w.samples);
        m.worst_p99_us = m.worst_p99_us.max(w.p99_us);
        m.max_us = m.max_us.max(w.max_us);
        m.windows += 1;
    }
    out
}

fn one(probe: &str, m: &Merged) -> Markup {
    let (Some(&lo), Some(&hi)) = (m.buckets.keys().next(), m.buckets.keys().next_back()) else {
        return html! { p class="no-data" { (probe) ": no data: no latency buckets recorded" } };
    };
    let ks: Vec<i32> = (lo..=hi).collect();
    let values: Vec<f64> = ks
        .iter()
        .map(|k| *m.buckets.get(k).unwrap_or(&0) as f64)
        .collect();
    let labels: Vec<String> = ks.iter().map(|&k| fmt_us(2f64.powi(k))).collect();
    let hover: Vec<String> = ks
        .iter()
        .zip(&values)
        .map(|(&k, v)| {
            format!(
                "{probe}: {}–{}: {v:.0} samples",
                fmt_us(2f64.powi(k - 1)),
                fmt_us(2f64.powi(k))
            )
        })
        .collect();
    let title = format!("{probe} latency");
    html! {
        div class="probe" data-probe=(probe) {
            h3 { (probe) }
            p class="caption" {
                (m.samples) " samples in " (m.windows) @if m.windows == 1 { " window" } @else { " windows" } "; worst window p99 " (fmt_us(m.worst_p99_us))
                ", max " (fmt_us(m.max_us)) "."
            }
            (bars::render(&Bars {
                class: "probe-hist",
                title: &title,
                labels: &labels,
                values: &values,
                hover: &hover,
                x_title: "latency (bucket upper bound)",
                y_title: "samples",
                log_y: true,
                alarm_from: None,
            }))
        }
    }
}

fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{} ms", fmt_num(us / 1000.0, 2))
    } else {
        format!("{} µs", fmt_num(us, 1))
    }
}

pub fn render(windows: &[ProbeWindow]) -> Markup {
    if windows.is_empty() {
        return svg::no_data(
            ID,
            TITLE,
            "no probe windows (a snapshot holds none; record with probes to get them)",
        );
    }
    let merged = merge(windows);
    let body = html! {
        @for (probe, m) in &merged {
            (one(probe, m))
        }
    };
    svg::figure(
        ID,
        TITLE,
        "Distribution of each probe's latencies over the whole recording, buckets of powers of two.",
        body,
    )
}
