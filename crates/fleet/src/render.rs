//! `fleet plan`'s report: built once (`PlanReport`), printed as JSON
//! (schema `stealscope/fleet-plan/1`) or as a table that fits 80 columns.

use crate::commands::{commands, Commands};
use crate::model::{Fleet, FleetFigures, Unseen};
use crate::plan::{Plan, Unfixed, Why};
use crate::predict::{Effect, Prediction};
use crate::prom::QueryCost;
use serde::Serialize;
use std::fmt::Write as _;

pub const PLAN_SCHEMA: &str = "stealscope/fleet-plan/1";

#[derive(Debug, Clone, Serialize)]
pub struct HostSteal {
    pub host: String,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub before: Effect,
    pub after: Effect,
}

#[derive(Debug, Clone, Serialize)]
pub struct MoveRow {
    pub vm: String,
    pub uuid: String,
    pub vcpus: u32,
    pub memory_bytes: u64,
    /// Mean demand over the window, CPUs.
    pub demand_cpus: f64,
    pub from: String,
    pub to: String,
    pub to_node: u32,
    pub why: Why,
    /// Predicted by the simulator with the VMs' demand histories.
    pub from_host: Side,
    pub to_host: Side,
    pub commands: Commands,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub schema: &'static str,
    pub prometheus: String,
    pub window_s: f64,
    pub step_s: f64,
    pub hosts: usize,
    pub vms: usize,
    pub queries: Vec<QueryCost>,
    pub hot_hosts: Vec<HostSteal>,
    /// Hosts whose steal is idle steal: `stealscope place` there, no move.
    pub fix_locally: Vec<HostSteal>,
    pub moves: Vec<MoveRow>,
    pub unfixed: Vec<Unfixed>,
    pub fleet_before: FleetFigures,
    pub fleet_predicted: FleetFigures,
    pub not_seen: Vec<Unseen>,
    pub sim_runs: usize,
    pub sim_seconds: f64,
    pub plan_seconds: f64,
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn host_steal(f: &Fleet, i: usize) -> HostSteal {
    let h = &f.hosts[i];
    HostSteal {
        host: h.name.clone(),
        busy_steal_pct: r2(100.0 * h.busy_per_vcpu()),
        idle_steal_pct: r2(100.0 * h.idle_per_vcpu()),
    }
}

pub struct Inputs<'a> {
    pub url: &'a str,
    pub fleet: &'a Fleet,
    pub plan: &'a Plan,
    pub prediction: &'a Prediction,
    pub queries: &'a [QueryCost],
    pub plan_seconds: f64,
}

pub fn report(i: &Inputs) -> PlanReport {
    let f = i.fleet;
    let moves = i
        .plan
        .moves
        .iter()
        .zip(&i.prediction.moves)
        .enumerate()
        .map(|(k, (m, e))| {
            let v = &f.hosts[m.from].vms[m.vm];
            let to = &f.hosts[m.to].name;
            MoveRow {
                vm: v.name.clone(),
                uuid: v.uuid.clone(),
                vcpus: v.vcpus,
                memory_bytes: v.memory_bytes.unwrap_or(0),
                demand_cpus: r2(v.mean_demand()),
                from: f.hosts[m.from].name.clone(),
                to: to.clone(),
                to_node: m.node,
                why: m.why.clone(),
                from_host: Side {
                    before: e.from_before,
                    after: e.from_after,
                },
                to_host: Side {
                    before: e.to_before,
                    after: e.to_after,
                },
                commands: commands(&v.name, &v.uuid, to, k + 1),
            }
        })
        .collect();
    PlanReport {
        schema: PLAN_SCHEMA,
        prometheus: i.url.to_string(),
        window_s: f.window_s,
        step_s: f.step_s,
        hosts: f.hosts.len(),
        vms: f.hosts.iter().map(|h| h.vms.len()).sum(),
        queries: i.queries.to_vec(),
        hot_hosts: i.plan.hot.iter().map(|&h| host_steal(f, h)).collect(),
        fix_locally: i.plan.local.iter().map(|&h| host_steal(f, h)).collect(),
        moves,
        unfixed: i.plan.unfixed.clone(),
        fleet_before: i.prediction.before,
        fleet_predicted: i.prediction.after,
        not_seen: f.unseen.clone(),
        sim_runs: i.prediction.sim_runs,
        sim_seconds: i.prediction.sim_seconds,
        plan_seconds: i.plan_seconds,
    }
}

/// Cuts a cell to `w` characters (the end marked with `~`).
pub fn cell(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('~');
    out
}

fn why(w: &Why) -> String {
    match w {
        Why::Culprit { share } => format!("culprit: {:.0} % of wait", share * 100.0),
        Why::Smallest => "smallest that fixes".into(),
        Why::LargestCulprit { share } => format!("largest culprit {:.0} %", share * 100.0),
        Why::Largest => "largest (1 of more)".into(),
        Why::MostRemoved => "removes most (1 of more)".into(),
    }
}

fn gib(b: u64) -> String {
    format!("{:.0}G", b as f64 / (1u64 << 30) as f64)
}

pub fn queries_line(q: &[QueryCost]) -> String {
    let secs: f64 = q.iter().map(|c| c.seconds).sum();
    let samples: u64 = q.iter().filter_map(|c| c.samples).sum();
    format!(
        "{} queries, {:.2} s, {} samples read",
        q.len(),
        secs,
        samples
    )
}

pub fn text(r: &PlanReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "fleet plan: {} hosts, {} VMs over {} ({})",
        r.hosts,
        r.vms,
        window(r.window_s),
        queries_line(&r.queries)
    );
    let _ = writeln!(
        o,
        "hot (busy steal over the threshold): {} hosts; idle steal, fix locally: {}",
        r.hot_hosts.len(),
        r.fix_locally.len()
    );
    if r.moves.is_empty() {
        let _ = writeln!(o, "\nno moves.");
    } else {
        let _ = writeln!(
            o,
            "\n{:>3} {:<16} {:>4} {:>4} {:<12} {:<12} WHY",
            "#", "VM", "vCPU", "MEM", "FROM", "TO"
        );
    }
    for (k, m) in r.moves.iter().enumerate() {
        let _ = writeln!(
            o,
            "{:>3} {:<16} {:>4} {:>4} {:<12} {:<12} {}",
            k + 1,
            cell(&m.vm, 16),
            m.vcpus,
            gib(m.memory_bytes),
            cell(&m.from, 12),
            cell(&m.to, 12),
            cell(&why(&m.why), 22)
        );
        for (h, s) in [(&m.from, &m.from_host), (&m.to, &m.to_host)] {
            let _ = writeln!(
                o,
                "    {:<12} busy steal {:>5.1} -> {:>5.1} %   p99 VM steal {:>5.1} -> {:>5.1} %",
                cell(h, 12),
                s.before.busy_steal_pct,
                s.after.busy_steal_pct,
                s.before.vm_steal_p99,
                s.after.vm_steal_p99
            );
        }
    }
    let (b, a) = (&r.fleet_before, &r.fleet_predicted);
    let _ = writeln!(
        o,
        "\nfleet, measured -> predicted:\n  busy steal {:.2} -> {:.2} % of vCPU time\n  p99 VM steal {:.1} -> {:.1} %\n  VMs over 10 % steal {} -> {}",
        b.busy_steal_pct, a.busy_steal_pct, b.vm_steal_p99, a.vm_steal_p99, b.vms_over_10pct, a.vms_over_10pct
    );
    for h in &r.fix_locally {
        let _ = writeln!(
            o,
            "fix locally: {} (idle steal {:.1} %): stealscope place plan there",
            cell(&h.host, 24),
            h.idle_steal_pct
        );
    }
    for u in &r.unfixed {
        let line = format!("not fixed: {}: {}", u.host, u.reason);
        let _ = writeln!(o, "{}", cell(&line, 80));
    }
    for u in &r.not_seen {
        let _ = writeln!(o, "{}", cell(&format!("not seen: {u}"), 80));
    }
    if !r.moves.is_empty() {
        let _ = writeln!(
            o,
            "\nstealscope migrates nothing; --commands virsh|openstack|kubevirt prints them."
        );
    }
    o
}

pub fn window(s: f64) -> String {
    if s >= 3600.0 && s % 3600.0 == 0.0 {
        format!("{} h", s / 3600.0)
    } else if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{s} s")
    }
}

/// Which commands `--commands` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Virsh,
    Openstack,
    Kubevirt,
}

pub fn command_lines(r: &PlanReport, t: Target) -> String {
    let mut o = String::new();
    for (k, m) in r.moves.iter().enumerate() {
        match t {
            Target::Virsh => {
                let _ = writeln!(
                    o,
                    "# {}: {} -> {}\n{}",
                    k + 1,
                    m.from,
                    m.to,
                    m.commands.virsh
                );
            }
            Target::Openstack => {
                let _ = writeln!(
                    o,
                    "# {}: {} -> {}\n{}",
                    k + 1,
                    m.from,
                    m.to,
                    m.commands.openstack
                );
            }
            Target::Kubevirt => {
                let _ = write!(o, "---\n{}", m.commands.kubevirt);
            }
        }
    }
    o
}
