//! The text parts of the page: what was measured (meta and per-CPU
//! summary), the findings in the doctor's order with their evidence and
//! fix, and the notes. Every string comes from files and is escaped by maud.

use crate::text::{fmt_value, pct};
use maud::{html, Markup};
use stealscope_analysis::{DoctorReport, Finding};
use stealscope_findings::units::num_text;
use stealscope_findings::Evidence;
use stealscope_readers::snapshot::Meta;

pub fn meta(r: &DoctorReport, meta: &Meta, source: &str) -> Markup {
    let started = meta
        .taken_unix_s
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map(|t| {
            httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(t))
        });
    let s = &r.summary;
    let split = match (s.steal_busy_share, s.steal_idle_share) {
        (Some(b), Some(i)) => format!(
            " ({:.0} % while vCPUs were busy, {:.0} % while idle)",
            100.0 * b,
            100.0 * i
        ),
        _ => String::new(),
    };
    // A split of nothing is noise: steal that rounds to zero is "none".
    let steal = match s.steal_pct {
        None => "not measured".to_string(),
        Some(p) if p < 0.05 => format!("none ({} % of CPU time)", pct(&s.steal_pct)),
        Some(_) => format!("{} % of CPU time{split}", pct(&s.steal_pct)),
    };
    let steal_key = if r.host.is_some() && !r.roles.iter().any(|x| x == "guest") {
        "steal of its own CPUs"
    } else {
        "steal"
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "host",
            r.hostname.clone().unwrap_or_else(|| "unknown".into()),
        ),
        (
            "kernel",
            r.kernel.clone().unwrap_or_else(|| "unknown".into()),
        ),
        (
            "roles",
            if r.roles.is_empty() {
                "none detected".into()
            } else {
                r.roles.join(", ")
            },
        ),
        ("started", started.unwrap_or_else(|| "unknown".into())),
        (
            "interval",
            format!(
                "{} s (measured {} s)",
                num_text(r.interval_s),
                pct(&s.wall_s)
            ),
        ),
        (
            "sample rate",
            meta.sample_hz.map_or("no series".into(), |hz| {
                format!("{hz} Hz, {} windows", s.windows)
            }),
        ),
        (steal_key, steal),
        ("source", source.to_string()),
        (
            "captured by",
            meta.stealscope_version
                .as_ref()
                .map_or("unknown".into(), |v| format!("stealscope {v}")),
        ),
    ];
    html! {
        section id="meta" {
            h2 { "What was measured" }
            table class="meta" {
                @for (k, v) in &rows {
                    tr { th scope="row" { (k) } td data-key=(k) { (v) } }
                }
            }
            @if !s.cpus.is_empty() {
                table class="cpus" id="cpu-summary" {
                    caption { "Per CPU over the interval, % of wall time" }
                    thead { tr { th scope="col" { "CPU" } th scope="col" { "busy" } th scope="col" { "idle" } th scope="col" { "steal" } } }
                    tbody {
                        @for c in &s.cpus {
                            tr { td { "cpu" (c.cpu) } td { (pct(&c.busy_pct)) } td { (pct(&c.idle_pct)) } td { (pct(&c.steal_pct)) } }
                        }
                    }
                }
            }
        }
    }
}

pub fn findings(list: &[Finding]) -> Markup {
    html! {
        section id="findings" {
            h2 { "Findings (" (list.len()) ")" }
            @if list.is_empty() {
                p class="none" { "No finding: nothing the rules look for was seen." }
            }
            @for (n, f) in list.iter().enumerate() {
                (finding(n, f))
            }
        }
    }
}

fn finding(n: usize, f: &Finding) -> Markup {
    let sev = f.severity.as_str();
    let files = f.file_list();
    let raw = serde_json::to_string_pretty(&f.evidence).unwrap_or_default();
    html! {
        article class=(format!("finding sev-{sev}")) id=(format!("finding-{n}")) data-finding-id=(f.id) {
            h3 {
                span class="severity" { (sev.to_uppercase()) } " "
                code class="finding-id" { (f.id) } " "
                span class="finding-title" { (f.title) }
            }
            table class="evidence" {
                @for (k, v) in f.evidence.iter().filter(|(k, _)| k.as_str() != "files") {
                    tr { th scope="row" { (k) } td { (evidence_value(v)) } }
                }
                @if !files.is_empty() {
                    tr { th scope="row" { "read from" } td { (files.join(" ")) } }
                }
            }
            p class="remedy" { strong { "Fix: " } (f.remedy) }
            @if let Some(c) = &f.case {
                p class="case" { "Case: " (c) }
            }
            @if !f.references.is_empty() {
                p class="refs" { "References: " (f.references.join(" · ")) }
            }
            details { summary { "all evidence (JSON)" } pre { (raw) } }
        }
    }
}

/// A list of records (per-VM figures) as a table, one column per key;
/// anything else as text.
fn evidence_value(v: &Evidence) -> Markup {
    let all = match v {
        Evidence::List(a) => a.len(),
        _ => 0,
    };
    let rows: Vec<&std::collections::BTreeMap<String, Evidence>> = match v {
        Evidence::List(a) if !a.is_empty() => a
            .iter()
            .filter_map(|e| match e {
                Evidence::Map(m) => Some(m),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if rows.is_empty() || rows.len() != all {
        return html! { (fmt_value(v)) };
    }
    let mut cols: Vec<&str> = Vec::new();
    for r in &rows {
        for k in r.keys() {
            if !cols.contains(&k.as_str()) {
                cols.push(k);
            }
        }
    }
    html! {
        table class="nested" {
            thead { tr { @for c in &cols { th scope="col" { (c) } } } }
            tbody {
                @for r in &rows {
                    tr { @for c in &cols { td { (r.get(*c).map(fmt_value).unwrap_or_default()) } } }
                }
            }
        }
    }
}

/// The notes in brief (those sharing a reason on one line), and in full.
pub fn notes(brief: &[String], full: &[String]) -> Markup {
    html! {
        section id="notes" {
            h2 { "Notes" }
            @if brief.is_empty() {
                p { "Every input was read." }
            } @else {
                ul { @for n in brief { li { (n) } } }
                @if brief != full {
                    details { summary { "every note in full" } ul { @for n in full { li { (n) } } } }
                }
            }
        }
    }
}
