//! Issue 6 benchmark: planning a large host (256 CPUs in 8 nodes, 1,000
//! VMs of 1-8 vCPUs with random demand and memory) must take under 50 ms.
//! Side by side, in the same run, numad's placement rule on the same input
//! (numad.c pick_numa_nodes: each process, biggest first, goes to the node
//! with the largest free-CPU x free-memory "magnitude", which then shrinks),
//! as the reference for both cost and balance. Prints a Markdown section.

use std::time::Instant;
use stealscope_placement::numad::node_load_per_cpu;
use stealscope_placement::synthetic::random_host;
use stealscope_placement::{plan, Config, History};

const RUNS: usize = 50;

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (p(0.5), p(0.95), v[v.len() - 1])
}

fn main() {
    let host = random_host(42, 8, 32, 1000);
    let cfg = Config::default();
    let hist = History::default();
    let mut ours = Vec::new();
    let mut reference = Vec::new();
    let mut last = None;
    let mut numad_load = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let p = plan(&host, &cfg, &hist, 0.0);
        ours.push(t.elapsed().as_secs_f64() * 1e3);
        last = Some(p);
        let t = Instant::now();
        numad_load = node_load_per_cpu(&host);
        reference.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let p = last.unwrap();
    let (o50, o95, omax) = stats(ours);
    let (r50, r95, rmax) = stats(reference);
    let spread = |v: &[f64]| {
        let max = v.iter().cloned().fold(f64::MIN, f64::max);
        let min = v.iter().cloned().fold(f64::MAX, f64::min);
        (min, max)
    };
    let pressures: Vec<f64> = p.node_pressure.values().copied().collect();
    let (pmin, pmax) = spread(&pressures);
    let (nmin, nmax) = spread(&numad_load);
    let vcpus: usize = host.vms.iter().map(|v| v.vcpus.len()).sum();
    println!("## Issue 6: placement planner speed");
    println!();
    println!(
        "Command: `cargo bench --bench planner`. Input: {} CPUs in {} nodes (SMT pairs), {} VMs with {} vCPUs of random demand (1-8 vCPUs, 1-8 GiB each), {} runs.",
        host.topology.cpus.len(),
        host.topology.nodes.len(),
        host.vms.len(),
        vcpus,
        RUNS
    );
    println!("The reference is numad's rule on the same input (node choice only: no cores, fairness, reasons or actions).");
    println!();
    println!(
        "| planner | median ms | p95 ms | max ms | demand per CPU, least to most loaded node |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| stealscope `plan` ({} actions, every VM with reasons) | {o50:.2} | {o95:.2} | {omax:.2} | {pmin:.2} - {pmax:.2} |",
        p.actions.len()
    );
    println!(
        "| numad's rule (reference) | {r50:.3} | {r95:.3} | {rmax:.3} | {nmin:.2} - {nmax:.2} |"
    );
    println!();
    println!(
        "Target: under 50 ms. {}",
        if omax < 50.0 {
            format!("Met: the slowest of {RUNS} runs took {omax:.2} ms.")
        } else {
            format!("NOT met: the slowest run took {omax:.2} ms.")
        }
    );
}
