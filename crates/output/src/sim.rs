//! Text for `sim`: each case's VMs and vCPUs (steal with its range over the
//! seeds, busy and idle steal, utilisation, demand, throughput), then the
//! cases side by side, then the fleet.

use std::fmt::Write as _;
use stealscope_sim::report::{CaseReport, Range};
use stealscope_sim::SimReport;

fn range(r: &Range) -> String {
    if (r.max - r.min).abs() < 0.05 {
        format!("{:.1}", r.mean)
    } else {
        format!("{:.1} ({:.1}-{:.1})", r.mean, r.min, r.max)
    }
}

fn seeds(s: &[u64]) -> String {
    match s {
        [] => "none".into(),
        [one] => format!("seed {one}"),
        [first, .., last] if (*last - *first) as usize + 1 == s.len() => {
            format!("seeds {first}-{last}")
        }
        _ => format!(
            "seeds {}",
            s.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        ),
    }
}

fn case(out: &mut String, c: &CaseReport) {
    let _ = writeln!(
        out,
        "\n{} (policy {}, cgroups {:?}, NUMA balancing {})",
        c.name,
        c.policy,
        c.cgroups,
        if c.numa_balancing { "on" } else { "off" }
    );
    let _ = writeln!(
        out,
        "  {:<14} {:>4}  {:<20} {:>6} {:>6} {:>6} {:>7} {:>7}",
        "VM", "vCPU", "steal % (range)", "busy", "idle", "util", "demand", "thrput"
    );
    for v in &c.vms {
        for x in &v.vcpus {
            let _ = writeln!(
                out,
                "  {:<14} {:>4}  {:<20} {:>6.1} {:>6.1} {:>6.1} {:>7.1} {:>7.1}",
                v.name,
                x.index,
                range(&x.steal_pct),
                x.busy_steal_pct,
                x.idle_steal_pct,
                x.util_pct,
                x.demand_pct,
                x.throughput_pct
            );
        }
    }
    let _ = writeln!(
        out,
        "  spread {} pp; mean steal {}%, idle steal {:.1}%; CPUs idle {:.1}%; policy actions {:.1}; threads moved {:.1} by the balancer, {:.1} by NUMA balancing",
        range(&c.spread_pp),
        range(&c.steal_pct),
        c.idle_steal_pct,
        c.idle_cpu_pct,
        c.policy_actions,
        c.balancer_moves,
        c.numa_moves
    );
    for w in &c.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
}

pub fn render(r: &SimReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Scenario {}: {} CPUs, {} node(s); {} s at {} ms ticks{}; {}",
        r.scenario,
        r.cpus,
        r.nodes,
        r.duration_s,
        r.tick_ms,
        if r.warmup_s > 0.0 {
            format!(" (first {} s not counted)", r.warmup_s)
        } else {
            String::new()
        },
        seeds(&r.seeds)
    );
    if let Some(d) = &r.description {
        let _ = writeln!(out, "{}", d.trim());
    }
    for c in &r.cases {
        case(&mut out, c);
    }
    if r.cases.len() > 1 {
        side_by_side(&mut out, &r.cases);
    }
    if let Some(f) = &r.fleet {
        fleet(&mut out, f);
    }
    out
}

/// The cases on the measures placement policies are compared on.
fn side_by_side(out: &mut String, cases: &[CaseReport]) {
    // The name column fits the longest case name.
    let w = cases
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0)
        .max(34);
    let _ = writeln!(
        out,
        "\nCases side by side (mean over seeds; range in brackets)"
    );
    let _ = writeln!(
        out,
        "  {:<w$} {:<18} {:>11} {:<20} {:>13}",
        "case", "mean steal %", "idle steal", "spread pp", "throughput"
    );
    for c in cases {
        let _ = writeln!(
            out,
            "  {:<w$} {:<18} {:>10.1}% {:<20} {:>9.2} CPUs",
            c.name,
            range(&c.steal_pct),
            c.idle_steal_pct,
            range(&c.spread_pp),
            c.throughput_pct / 100.0
        );
    }
    let _ = writeln!(
        out,
        "\n  {:<w$} {:>7} {:>7} {:>9} {:>9} {:>8} {:>7} {:>9}",
        "case", "p90 %", "p99 %", ">10% VMs", "vCPU spr", "VM spr", "work %", "changes/h"
    );
    for c in cases {
        let m = &c.measures;
        let _ = writeln!(
            out,
            "  {:<w$} {:>7.1} {:>7.1} {:>9.1} {:>9.1} {:>8.1} {:>7.1} {:>9.1}",
            c.name,
            m.vm_steal_p90.mean,
            m.vm_steal_p99.mean,
            m.vms_over_10pct.mean,
            m.vcpu_spread_pp.mean,
            m.vm_spread_pp.mean,
            m.work_pct.mean,
            m.changes_per_host_hour.mean
        );
    }
    let _ = writeln!(
        out,
        "  (VM steal percentiles over the host's VMs; spread: most minus least robbed vCPU of a VM, and VM of the host, pp; work: done at memory speed, % of demand; changes: VMs re-placed per host-hour)"
    );
}

fn fleet(out: &mut String, f: &stealscope_sim::fleet::FleetReport) {
    let _ = writeln!(
        out,
        "\nFleet: {} hosts x {} s at {} ms ticks, {} threads",
        f.hosts, f.duration_s, f.tick_ms, f.threads
    );
    // The name column fits the longest case name (fleet.toml's
    // `stealscope-shared-group` pushed its row out of line).
    let w = f
        .cases
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0)
        .max(20);
    let _ = writeln!(
        out,
        "  {:<w$} {:>6} {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>5} {:>5} {:>6} {:>9} {:>6}",
        "case",
        "VMs",
        "VM-h",
        "p50 %",
        "p90 %",
        "p99 %",
        "max %",
        "steal %",
        ">10%",
        "vCPU",
        "VM",
        "work %",
        "changes/h",
        "wall s"
    );
    for c in &f.cases {
        let _ = writeln!(
            out,
            "  {:<w$} {:>6} {:>7.0} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>7.2} {:>6} {:>5.1} {:>5.1} {:>6.1} {:>9.1} {:>6.1}",
            c.name,
            c.vms,
            c.vm_hours,
            c.vm_steal_p50,
            c.vm_steal_p90,
            c.vm_steal_p99,
            c.vm_steal_max,
            c.steal_pct,
            c.vms_over_10pct,
            c.vcpu_spread_pp,
            c.vm_spread_pp,
            c.work_pct,
            c.changes_per_host_hour,
            c.wall_s
        );
    }
    let _ = writeln!(
        out,
        "  (p50-max: each VM's steal over its life; >10%: VMs above 10 % steal; vCPU / VM: spread in pp between a VM's vCPUs, and between a host's VMs, means; work: done at memory speed, % of demand; changes/h: VMs re-placed per host-hour; ticks simulated one by one: {})",
        f.cases
            .iter()
            .map(|c| format!(
                "{} {:.1}% of {}",
                c.name,
                100.0 * c.ticks_simulated as f64 / c.ticks_total.max(1) as f64,
                c.ticks_total
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_sim::fleet::{FleetCase, FleetReport};

    fn case(name: &str) -> FleetCase {
        FleetCase {
            name: name.into(),
            policy: "stealscope".into(),
            hosts: 5,
            vms: 69,
            vm_hours: 60.0,
            vm_steal_p50: 0.0,
            vm_steal_p90: 1.0,
            vm_steal_p99: 15.3,
            vm_steal_max: 26.7,
            steal_pct: 1.55,
            idle_steal_pct: 1.0,
            util_pct: 50.0,
            throughput_pct: 98.0,
            work_pct: 98.3,
            vcpu_spread_pp: 3.1,
            vm_spread_pp: 5.3,
            vms_over_10pct: 2,
            policy_actions: 10,
            placement_changes: 5,
            changes_per_host_hour: 13.8,
            ticks_simulated: 10,
            ticks_total: 100,
            wall_s: 3.8,
        }
    }

    /// Every row's columns end where the heading's do, whatever the
    /// longest case name.
    #[test]
    fn fleet_rows_line_up_under_the_heading_with_a_long_case_name() {
        let f = FleetReport {
            hosts: 5,
            duration_s: 3600.0,
            tick_ms: 100.0,
            threads: 2,
            cases: vec![case("none"), case("stealscope-shared-group-of-many-words")],
        };
        let mut out = String::new();
        fleet(&mut out, &f);
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
        let edges = |l: &str| -> Vec<usize> {
            let b = l.as_bytes();
            (1..b.len())
                .filter(|&i| b[i] == b' ' && b[i - 1] != b' ')
                .chain([b.len()])
                .collect()
        };
        let head = edges(lines[0]);
        for row in &lines[1..3] {
            // Each figure ends where a heading word does (after the name).
            let e = edges(row);
            assert_eq!(e.len(), 14, "{row}");
            assert!(e[1..].iter().all(|x| head.contains(x)), "{out}");
        }
    }
}
