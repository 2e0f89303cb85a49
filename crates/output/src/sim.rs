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
        let _ = writeln!(
            out,
            "\nCases side by side (mean over seeds; range in brackets)"
        );
        let _ = writeln!(
            out,
            "  {:<34} {:<18} {:>11} {:<20} {:>13}",
            "case", "mean steal %", "idle steal", "spread pp", "throughput"
        );
        for c in &r.cases {
            let _ = writeln!(
                out,
                "  {:<34} {:<18} {:>10.1}% {:<20} {:>9.2} CPUs",
                c.name,
                range(&c.steal_pct),
                c.idle_steal_pct,
                range(&c.spread_pp),
                c.throughput_pct / 100.0
            );
        }
    }
    if let Some(f) = &r.fleet {
        let _ = writeln!(
            out,
            "\nFleet: {} hosts x {} s at {} ms ticks, {} threads",
            f.hosts, f.duration_s, f.tick_ms, f.threads
        );
        let _ = writeln!(
            out,
            "  {:<22} {:>7} {:>9} {:>7} {:>7} {:>7} {:>7} {:>8} {:>9} {:>8} {:>8}",
            "case",
            "VMs",
            "VM-hours",
            "p50 %",
            "p90 %",
            "p99 %",
            "max %",
            "steal %",
            "idle st.%",
            ">10% VMs",
            "wall s"
        );
        for c in &f.cases {
            let _ = writeln!(
                out,
                "  {:<22} {:>7} {:>9.0} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>8.1} {:>9.1} {:>8} {:>8.1}",
                c.name,
                c.vms,
                c.vm_hours,
                c.vm_steal_p50,
                c.vm_steal_p90,
                c.vm_steal_p99,
                c.vm_steal_max,
                c.steal_pct,
                c.idle_steal_pct,
                c.vms_over_10pct,
                c.wall_s
            );
        }
        let _ = writeln!(
            out,
            "  (p50/p90/p99/max: each VM's steal over its life; ticks simulated one by one: {})",
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
    out
}
