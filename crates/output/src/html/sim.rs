//! `stealscope report sim.json`: the simulator's JSON (`sim --json`, schema
//! `stealscope/sim/1`, schemas/sim.schema.json) as a page of its own: per
//! case, steal per vCPU with the range over seeds; a comparison table of the
//! cases; for fleets, the steal distribution over VMs per policy. Read from
//! the documented JSON (not the simulator's types), so a page can be made
//! from a colleague's file by any build.

use super::bars::{self, Bars};
use super::head;
use super::svg::{figure, fmt_num};
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;

pub const SCHEMA: &str = "stealscope/sim/1";

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Range {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Deserialize)]
pub struct Vcpu {
    pub index: u32,
    pub steal_pct: Range,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
}

#[derive(Debug, Deserialize)]
pub struct Vm {
    pub name: String,
    pub steal_pct: Range,
    pub throughput_pct: f64,
    pub vcpus: Vec<Vcpu>,
}

#[derive(Debug, Deserialize)]
pub struct Case {
    pub name: String,
    pub policy: String,
    pub cgroups: serde_json::Value,
    pub vms: Vec<Vm>,
    pub spread_pp: Range,
    pub steal_pct: Range,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
    pub throughput_pct: f64,
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct FleetCase {
    pub name: String,
    pub hosts: usize,
    pub vms: usize,
    pub vm_steal_p50: f64,
    pub vm_steal_p90: f64,
    pub vm_steal_p99: f64,
    pub vm_steal_max: f64,
    pub steal_pct: f64,
    pub idle_steal_pct: f64,
    pub vms_over_10pct: usize,
    /// Added with issue 27; absent in older files.
    #[serde(default)]
    pub vcpu_spread_pp: Option<f64>,
    #[serde(default)]
    pub vm_spread_pp: Option<f64>,
    #[serde(default)]
    pub work_pct: Option<f64>,
    #[serde(default)]
    pub changes_per_host_hour: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct Fleet {
    pub hosts: u32,
    pub duration_s: f64,
    pub cases: Vec<FleetCase>,
}

#[derive(Debug, Deserialize)]
pub struct SimPage {
    pub schema: String,
    pub scenario: String,
    pub description: Option<String>,
    pub cpus: usize,
    pub nodes: usize,
    pub duration_s: f64,
    pub seeds: Vec<u64>,
    pub cases: Vec<Case>,
    pub fleet: Option<Fleet>,
}

/// Parses `sim --json` output; the error says what is wrong (the caller
/// adds the file name).
pub fn parse(text: &str) -> Result<SimPage, String> {
    let page: SimPage =
        serde_json::from_str(text).map_err(|e| format!("not simulator JSON: {e}"))?;
    if page.schema != SCHEMA {
        return Err(format!("schema {:?} is not {SCHEMA:?}", page.schema));
    }
    Ok(page)
}

/// Whether a file's first bytes look like simulator JSON (cheap sniff; the
/// parse decides).
pub fn looks_like(head: &[u8]) -> bool {
    let s = String::from_utf8_lossy(head);
    s.trim_start().starts_with('{') && s.contains(SCHEMA)
}

pub fn case_id(i: usize) -> String {
    format!("sim-case-{i}")
}

fn cgroups(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn case_plot(i: usize, c: &Case, seeds: usize) -> Markup {
    let mut labels = Vec::new();
    let mut values = Vec::new();
    let mut hover = Vec::new();
    for vm in &c.vms {
        for v in &vm.vcpus {
            labels.push(format!("{}/{}", vm.name, v.index));
            values.push(v.steal_pct.mean);
            hover.push(format!(
                "{} vCPU {}: steal {} % (seeds {}-{}), busy {} %, idle {} %",
                vm.name,
                v.index,
                fmt_num(v.steal_pct.mean, 1),
                fmt_num(v.steal_pct.min, 1),
                fmt_num(v.steal_pct.max, 1),
                fmt_num(v.busy_steal_pct, 1),
                fmt_num(v.idle_steal_pct, 1),
            ));
        }
    }
    let caption = format!(
        "policy {}, cgroups {}; mean over {seeds} seeds (hover: range); spread (most minus least robbed vCPU) {} pp, seeds {}-{}",
        c.policy,
        cgroups(&c.cgroups),
        fmt_num(c.spread_pp.mean, 1),
        fmt_num(c.spread_pp.min, 1),
        fmt_num(c.spread_pp.max, 1),
    );
    figure(
        &case_id(i),
        &format!("Steal per vCPU: {}", c.name),
        &caption,
        bars::render(&Bars {
            class: "sim-vcpus",
            title: &format!("steal per vCPU, {}", c.name),
            labels: &labels,
            values: &values,
            hover: &hover,
            x_title: "VM/vCPU",
            y_title: "steal %",
            log_y: false,
            alarm_from: None,
        }),
    )
}

fn comparison(p: &SimPage) -> Markup {
    html! {
        section id="sim-comparison" {
            h2 { "Cases compared" }
            table class="cpus" {
                tr { th { "case" } th { "policy" } th { "cgroups" } th { "steal %" } th { "busy steal %" } th { "idle steal %" } th { "spread pp (seeds)" } th { "throughput (% of one CPU)" } }
                @for c in &p.cases {
                    tr class="sim-case" {
                        td { (c.name) } td { (c.policy) } td { (cgroups(&c.cgroups)) }
                        td { (fmt_num(c.steal_pct.mean, 1)) }
                        td { (fmt_num(c.busy_steal_pct, 1)) }
                        td { (fmt_num(c.idle_steal_pct, 1)) }
                        td { (fmt_num(c.spread_pp.mean, 1)) " (" (fmt_num(c.spread_pp.min, 1)) "-" (fmt_num(c.spread_pp.max, 1)) ")" }
                        td { (fmt_num(c.throughput_pct, 1)) }
                    }
                }
            }
            @for c in &p.cases {
                @for w in &c.warnings { p class="caption" { (c.name) ": " (w) } }
            }
        }
    }
}

fn fleet(f: &Fleet) -> Markup {
    let labels: Vec<String> = f.cases.iter().map(|c| c.name.clone()).collect();
    let p99: Vec<f64> = f.cases.iter().map(|c| c.vm_steal_p99).collect();
    let hover: Vec<String> = f
        .cases
        .iter()
        .map(|c| {
            format!(
                "{}: VM steal p50 {} %, p90 {} %, p99 {} %, max {} %",
                c.name,
                fmt_num(c.vm_steal_p50, 1),
                fmt_num(c.vm_steal_p90, 1),
                fmt_num(c.vm_steal_p99, 1),
                fmt_num(c.vm_steal_max, 1)
            )
        })
        .collect();
    html! {
        (figure("sim-fleet", "Fleet: steal of the worst VMs per policy",
            &format!("{} hosts, {} s simulated; bars: p99 over VMs of each VM's steal", f.hosts, fmt_num(f.duration_s, 0)),
            bars::render(&Bars { class: "sim-fleet", title: "VM steal p99 per policy", labels: &labels, values: &p99,
                hover: &hover, x_title: "policy", y_title: "VM steal p99 %", log_y: false, alarm_from: None })))
        table class="cpus" id="sim-fleet-table" {
            tr { th { "policy" } th { "hosts" } th { "VMs" } th { "p50" } th { "p90" } th { "p99" } th { "max" } th { "steal %" } th { "idle steal %" } th { "VMs > 10 %" } th { "vCPU spread pp" } th { "VM spread pp" } th { "work % of demand" } th { "changes / host-hour" } }
            @for c in &f.cases {
                tr { td { (c.name) } td { (c.hosts) } td { (c.vms) } td { (fmt_num(c.vm_steal_p50, 1)) } td { (fmt_num(c.vm_steal_p90, 1)) }
                     td { (fmt_num(c.vm_steal_p99, 1)) } td { (fmt_num(c.vm_steal_max, 1)) } td { (fmt_num(c.steal_pct, 2)) }
                     td { (fmt_num(c.idle_steal_pct, 2)) } td { (c.vms_over_10pct) }
                     td { (opt(c.vcpu_spread_pp, 1)) } td { (opt(c.vm_spread_pp, 1)) } td { (opt(c.work_pct, 1)) }
                     td { (opt(c.changes_per_host_hour, 1)) } }
            }
        }
    }
}

/// A figure an older file may lack: "n/a" then.
fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| fmt_num(x, digits))
}

/// The page of one simulator run; `source` is the file as the user named it.
pub fn render(p: &SimPage, source: &str) -> String {
    let title = format!("stealscope sim: {}", p.scenario);
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            (head(&title))
            body {
                h1 { (title) }
                @if let Some(d) = &p.description { p { (d) } }
                p class="caption" {
                    (p.cpus) " CPUs in " (p.nodes) " node(s), " (fmt_num(p.duration_s, 0)) " s simulated, "
                    (p.seeds.len()) " seed(s); from " (source)
                }
                (comparison(p))
                @for (i, c) in p.cases.iter().enumerate() { (case_plot(i, c, p.seeds.len())) }
                @if let Some(f) = &p.fleet { (fleet(f)) }
            }
        }
    };
    page.into_string()
}
