//! Issue 8 benchmark: a fleet of 10,000 hosts (scenarios/fleet.toml: 2 x 16
//! CPUs each, VMs of 1-8 vCPUs arriving and leaving) for one simulated hour
//! at 100 ms resolution, per policy, must take under 60 s on this machine.
//! Prints a Markdown section. FLEET_HOSTS overrides the host count.

use std::path::Path;
use std::time::Instant;
use stealscope_sim::{simulate, Options, Scenario};

const TARGET_S: f64 = 60.0;

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fleet.toml");
    let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let hosts: u32 = std::env::var("FLEET_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let t0 = Instant::now();
    let r = simulate(
        &s,
        &Options {
            fleet: true,
            hosts: Some(hosts),
            ..Options::default()
        },
    );
    let total = t0.elapsed().as_secs_f64();
    let f = r.fleet.expect("scenario has a fleet");
    println!("## Issue 8: simulator fleet speed");
    println!();
    println!(
        "Command: `cargo bench -p stealscope-sim --bench fleet` (scenarios/fleet.toml): {} hosts of {} CPUs in {} nodes, each starting with 12 VMs of 1-8 vCPUs (demand changing every 30 min), VMs arriving and leaving, {} s simulated at {} ms ticks, {} threads (rayon).",
        f.hosts, r.cpus, r.nodes, f.duration_s, f.tick_ms, f.threads
    );
    println!();
    println!("| policy | wall s | VMs | VM-hours | host-ticks | simulated one by one | VM steal p50 / p90 / p99 % | idle steal % |");
    println!("|---|---|---|---|---|---|---|---|");
    for c in &f.cases {
        println!(
            "| {} | {:.1} | {} | {:.0} | {} | {:.2}% | {:.1} / {:.1} / {:.1} | {:.2} |",
            c.name,
            c.wall_s,
            c.vms,
            c.vm_hours,
            c.ticks_total,
            100.0 * c.ticks_simulated as f64 / c.ticks_total.max(1) as f64,
            c.vm_steal_p50,
            c.vm_steal_p90,
            c.vm_steal_p99,
            c.idle_steal_pct
        );
    }
    println!();
    println!(
        "Every host-tick is {} ms of the model: ticks in which something changed (a demand level, a VM coming or going, a policy pass, a thread moved) are simulated one by one; a stretch in which nothing changes is summed at once (exact for the model), and a stretch in which threads only trade places is summed at the averages of two windows of {} ticks that agree within {:.0} pp per VM. All three policies took {total:.1} s.",
        f.tick_ms,
        stealscope_sim::engine::WINDOW,
        100.0 * stealscope_sim::engine::STATIONARY
    );
    let worst = f.cases.iter().map(|c| c.wall_s).fold(0.0, f64::max);
    println!();
    println!(
        "Target: under {TARGET_S:.0} s per policy for 10,000 hosts. {}",
        if hosts < 10_000 {
            format!("Not checked: only {hosts} hosts were run.")
        } else if worst < TARGET_S {
            format!("Met: the slowest policy took {worst:.1} s.")
        } else {
            format!(
                "NOT met: {}.",
                f.cases
                    .iter()
                    .filter(|c| c.wall_s >= TARGET_S)
                    .map(|c| format!("{} took {:.1} s", c.name, c.wall_s))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
}
