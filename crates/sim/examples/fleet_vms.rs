//! Per-VM figures of a fleet scenario, every tick, one line per VM: case,
//! host, VM, vCPUs, steal %, idle steal %, demand (CPUs per vCPU), work %
//! of demand, seconds alive; then per host `#host case host changes passes
//! wanted work`. What the fleet's percentiles are made of (BENCHMARKS.md,
//! issue 27: which VMs and hosts a policy robs).
//!
//!   cargo run -p stealscope-sim --example fleet_vms -- scenarios/fleet.toml 20 1 [case...]

use rayon::prelude::*;
use std::path::Path;
use stealscope_sim::engine::{run, Acc, RunOutcome, RunSpec};
use stealscope_sim::fleet::host_vms;
use stealscope_sim::{choose, shape, Scenario};

fn lines(case: &str, host: u32, r: &RunOutcome) -> Vec<String> {
    let mut out = Vec::new();
    let mut all = Acc::default();
    for v in &r.vms {
        let mut t = Acc::default();
        v.vcpus.iter().for_each(|x| t.merge(x));
        all.merge(&t);
        if t.secs > 0.0 {
            let work = if t.wanted > 0.0 {
                100.0 * t.work / t.wanted
            } else {
                100.0
            };
            out.push(format!(
                "{case}\t{host}\t{}\t{}\t{:.3}\t{:.3}\t{:.3}\t{work:.2}\t{:.0}",
                v.name,
                v.vcpus.len(),
                t.pct(t.wait),
                t.pct(t.idle_wait),
                t.wanted / t.secs,
                v.alive_s
            ));
        }
    }
    out.push(format!(
        "#host\t{case}\t{host}\t{}\t{}\t{:.3}\t{:.3}",
        r.placement_changes, r.policy_passes, all.wanted, all.work
    ));
    out
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: fleet_vms SCENARIO HOSTS SEED [CASE...]");
        std::process::exit(2);
    }
    let s = Scenario::load(Path::new(&a[1])).unwrap_or_else(|e| panic!("{e}"));
    let hosts: u32 = a[2].parse().expect("HOSTS: a number");
    let seed: u64 = a[3].parse().expect("SEED: a number");
    let f = s.file.fleet.clone().expect("a scenario with [fleet]");
    let sh = shape(&s);
    let base = s.path.parent().unwrap_or(Path::new("."));
    let (dur, tick) = (s.file.duration_s.0, s.file.tick_ms.0 / 1000.0);
    for case in s
        .cases
        .iter()
        .filter(|c| a.len() == 4 || a[4..].contains(&c.name))
    {
        let rows: Vec<Vec<String>> = (0..hosts)
            .into_par_iter()
            .map(|i| {
                let vms = host_vms(&f, sh.cpus, base, dur, seed, i);
                let r = run(&RunSpec {
                    shape: &sh,
                    sched: &s.file.scheduler,
                    numa: &s.file.numa,
                    case,
                    vms: &vms,
                    duration_s: dur,
                    tick_s: tick,
                    warmup_s: 0.0,
                    every_tick: true,
                    trim: Some(choose::in_sim),
                    // The fleet's own per-host seed (fleet::run_fleet).
                    seed: seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407),
                });
                lines(&case.name, i, &r)
            })
            .collect();
        rows.iter().flatten().for_each(|l| println!("{l}"));
    }
}
