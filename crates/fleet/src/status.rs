//! `fleet status`: the fleet at a glance from the same queries as `plan`:
//! hosts ranked by busy steal, the ones whose steal is idle steal (fixed
//! on the host), who stole it, and the VMs that suffer most.

use crate::model::{Fleet, FleetFigures, Unseen};
use crate::prom::QueryCost;
use crate::render::{cell, queries_line, window};
use serde::Serialize;
use std::fmt::Write as _;

pub const STATUS_SCHEMA: &str = "stealscope/fleet-status/1";

#[derive(Debug, Clone, Serialize)]
pub struct HostRow {
    pub host: String,
    pub instance: String,
    pub cpus: u32,
    pub vcpus: u32,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
    /// Most of its steal is idle steal: `place` on the host fixes it.
    pub fix_locally: bool,
    /// host.noisy-neighbor's culprits: (VM, share of the others' wait).
    pub culprits: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VmRow {
    pub vm: String,
    pub host: String,
    pub vcpus: u32,
    pub steal_pct: f64,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub schema: &'static str,
    pub prometheus: String,
    pub window_s: f64,
    pub queries: Vec<QueryCost>,
    pub fleet: FleetFigures,
    /// Every host, most busy steal first.
    pub hosts: Vec<HostRow>,
    /// The VMs with the most steal.
    pub vms: Vec<VmRow>,
    pub not_seen: Vec<Unseen>,
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn status(url: &str, f: &Fleet, queries: &[QueryCost], top_vms: usize) -> StatusReport {
    let mut hosts: Vec<HostRow> = f
        .hosts
        .iter()
        .map(|h| HostRow {
            host: h.name.clone(),
            instance: h.key.instance.clone(),
            cpus: h.cpus,
            vcpus: h.vcpus(),
            busy_steal_pct: r2(100.0 * h.busy_per_vcpu()),
            idle_steal_pct: r2(100.0 * h.idle_per_vcpu()),
            fix_locally: h.steal_is_idle(),
            culprits: h
                .culprits
                .iter()
                .map(|c| (c.vm.clone(), r2(c.share)))
                .collect(),
        })
        .collect();
    hosts.sort_by(|a, b| {
        b.busy_steal_pct
            .total_cmp(&a.busy_steal_pct)
            .then(b.idle_steal_pct.total_cmp(&a.idle_steal_pct))
    });
    let mut vms: Vec<VmRow> = f
        .hosts
        .iter()
        .flat_map(|h| {
            let busy_share = if h.wait() > 0.0 {
                h.busy_steal() / h.wait()
            } else {
                0.0
            };
            h.vms.iter().map(move |v| VmRow {
                vm: v.name.clone(),
                host: h.name.clone(),
                vcpus: v.vcpus,
                steal_pct: r2(v.steal_pct()),
                busy_steal_pct: r2(v.steal_pct() * busy_share),
                idle_steal_pct: r2(v.steal_pct() * (1.0 - busy_share)),
            })
        })
        .collect();
    vms.sort_by(|a, b| b.steal_pct.total_cmp(&a.steal_pct));
    vms.truncate(top_vms);
    StatusReport {
        schema: STATUS_SCHEMA,
        prometheus: url.to_string(),
        window_s: f.window_s,
        queries: queries.to_vec(),
        fleet: FleetFigures::measured(f),
        hosts,
        vms,
        not_seen: f.unseen.clone(),
    }
}

/// The table: the `top` hosts by busy steal, then those to fix locally,
/// then the VMs.
pub fn text(r: &StatusReport, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "fleet status: {} hosts over {} ({})",
        r.hosts.len(),
        window(r.window_s),
        queries_line(&r.queries)
    );
    let f = &r.fleet;
    let _ = writeln!(
        o,
        "busy steal {:.2} % of vCPU time; p99 VM steal {:.1} %; {} VMs over 10 %\n",
        f.busy_steal_pct, f.vm_steal_p99, f.vms_over_10pct
    );
    let _ = writeln!(
        o,
        "{:<16} {:>4} {:>5} {:>6} {:>6}  WHO STOLE IT",
        "HOST", "CPUs", "vCPUs", "BUSY %", "IDLE %"
    );
    for h in r.hosts.iter().filter(|h| !h.fix_locally).take(top) {
        let who = h
            .culprits
            .iter()
            .map(|(vm, s)| format!("{} {:.0}%", vm, s * 100.0))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            o,
            "{:<16} {:>4} {:>5} {:>6.1} {:>6.1}  {}",
            cell(&h.host, 16),
            h.cpus,
            h.vcpus,
            h.busy_steal_pct,
            h.idle_steal_pct,
            cell(&who, 32)
        );
    }
    let local: Vec<&_> = r.hosts.iter().filter(|h| h.fix_locally).collect();
    if !local.is_empty() {
        let _ = writeln!(
            o,
            "\nidle steal, fix locally (stealscope place plan on the host):"
        );
        for h in local.iter().take(top) {
            let _ = writeln!(
                o,
                "  {:<24} idle steal {:>5.1} %",
                cell(&h.host, 24),
                h.idle_steal_pct
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{:<20} {:<16} {:>5} {:>7} {:>6} {:>6}",
        "VM", "HOST", "vCPUs", "STEAL %", "BUSY", "IDLE"
    );
    for v in &r.vms {
        let _ = writeln!(
            o,
            "{:<20} {:<16} {:>5} {:>7.1} {:>6.1} {:>6.1}",
            cell(&v.vm, 20),
            cell(&v.host, 16),
            v.vcpus,
            v.steal_pct,
            v.busy_steal_pct,
            v.idle_steal_pct
        );
    }
    for u in &r.not_seen {
        let _ = writeln!(o, "{}", cell(&format!("not seen: {u}"), 80));
    }
    o
}
