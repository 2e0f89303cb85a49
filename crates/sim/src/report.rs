//! What `sim` reports: per case, per VM and vCPU, the steal (busy and
//! idle), utilisation, demand and throughput, as the mean and range over
//! the seeds (repeated runs); the spread between the most and least robbed
//! vCPU; for fleets, distributions over VMs.

use crate::engine::{Acc, RunOutcome};
use crate::fleet::FleetReport;
use serde::Serialize;

pub use crate::range::{round, Range};

pub const SCHEMA: &str = "stealscope/sim/1";

#[derive(Debug, Clone, Serialize)]
pub struct VcpuReport {
    pub index: u32,
    pub steal_pct: Range,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
    pub util_pct: f64,
    pub demand_pct: f64,
    /// Useful work, percent of a CPU (run less NUMA penalties).
    pub throughput_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct VmReport {
    pub name: String,
    pub steal_pct: Range,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
    pub util_pct: f64,
    pub demand_pct: f64,
    pub throughput_pct: f64,
    pub vcpus: Vec<VcpuReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    pub name: String,
    pub policy: String,
    pub cgroups: crate::scenario::Cgroups,
    pub numa_balancing: bool,
    pub vms: Vec<VmReport>,
    /// Most minus least robbed vCPU, percentage points, per run.
    pub spread_pp: Range,
    /// Mean over vCPUs.
    pub steal_pct: Range,
    pub busy_steal_pct: f64,
    pub idle_steal_pct: f64,
    /// Sum over vCPUs, percent of one CPU.
    pub throughput_pct: f64,
    pub idle_cpu_pct: f64,
    pub policy_actions: f64,
    pub balancer_moves: f64,
    pub numa_moves: f64,
    pub warnings: Vec<String>,
    /// Ticks simulated one by one, and in all (the rest were summed in steady stretches).
    pub ticks_simulated: u64,
    pub ticks_total: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub schema: &'static str,
    pub scenario: String,
    pub description: Option<String>,
    pub cpus: usize,
    pub nodes: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub tick_ms: f64,
    pub seeds: Vec<u64>,
    pub cases: Vec<CaseReport>,
    pub fleet: Option<FleetReport>,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        round(s / n as f64)
    }
}

/// Folds the runs of one case (one per seed) into its report.
pub fn case_report(case: &crate::scenario::Case, runs: &[RunOutcome]) -> CaseReport {
    let first = &runs[0];
    let mut vms = Vec::new();
    for (k, vm) in first.vms.iter().enumerate() {
        let mut vcpus = Vec::new();
        for j in 0..vm.vcpus.len() {
            let per: Vec<Acc> = runs
                .iter()
                .filter_map(|r| r.vms.get(k).and_then(|v| v.vcpus.get(j)).copied())
                .collect();
            let steal: Vec<f64> = per.iter().map(|a| a.pct(a.wait)).collect();
            vcpus.push(VcpuReport {
                index: j as u32,
                steal_pct: Range::of(&steal),
                busy_steal_pct: mean(per.iter().map(|a| a.pct(a.wait - a.idle_wait))),
                idle_steal_pct: mean(per.iter().map(|a| a.pct(a.idle_wait))),
                util_pct: mean(per.iter().map(|a| a.pct(a.run))),
                demand_pct: mean(per.iter().map(|a| a.pct(a.wanted))),
                throughput_pct: mean(per.iter().map(|a| a.pct(a.work))),
            });
        }
        let vm_steal: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.vms.get(k))
            .map(|v| {
                let mut a = Acc::default();
                v.vcpus.iter().for_each(|x| a.merge(x));
                a.pct(a.wait)
            })
            .collect();
        let avg = |f: fn(&VcpuReport) -> f64| mean(vcpus.iter().map(f));
        vms.push(VmReport {
            name: vm.name.clone(),
            steal_pct: Range::of(&vm_steal),
            busy_steal_pct: avg(|v| v.busy_steal_pct),
            idle_steal_pct: avg(|v| v.idle_steal_pct),
            util_pct: avg(|v| v.util_pct),
            demand_pct: avg(|v| v.demand_pct),
            throughput_pct: avg(|v| v.throughput_pct),
            vcpus,
        });
    }
    let spreads: Vec<f64> = runs
        .iter()
        .map(|r| {
            let s: Vec<f64> = r
                .vms
                .iter()
                .flat_map(|v| v.vcpus.iter())
                .filter(|a| a.secs > 0.0)
                .map(|a| a.pct(a.wait))
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let min = s.iter().copied().fold(f64::INFINITY, f64::min);
            if s.is_empty() {
                0.0
            } else {
                max - min
            }
        })
        .collect();
    let host_steal: Vec<f64> = runs
        .iter()
        .map(|r| {
            mean(
                r.vms
                    .iter()
                    .flat_map(|v| v.vcpus.iter())
                    .filter(|a| a.secs > 0.0)
                    .map(|a| a.pct(a.wait)),
            )
        })
        .collect();
    let all: Vec<&VcpuReport> = vms.iter().flat_map(|v| v.vcpus.iter()).collect();
    let n = runs.len() as f64;
    let mut warnings: Vec<String> = Vec::new();
    for r in runs {
        for w in &r.warnings {
            if !warnings.contains(w) {
                warnings.push(w.clone());
            }
        }
    }
    CaseReport {
        name: case.name.clone(),
        policy: case.policy.name().into(),
        cgroups: case.cgroups,
        numa_balancing: case.numa_balancing,
        spread_pp: Range::of(&spreads),
        steal_pct: Range::of(&host_steal),
        busy_steal_pct: mean(all.iter().map(|v| v.busy_steal_pct)),
        idle_steal_pct: mean(all.iter().map(|v| v.idle_steal_pct)),
        throughput_pct: round(all.iter().map(|v| v.throughput_pct).sum()),
        idle_cpu_pct: mean(runs.iter().map(|r| {
            if r.secs > 0.0 {
                100.0 * r.idle_cpu_s / r.secs
            } else {
                0.0
            }
        })),
        policy_actions: round(runs.iter().map(|r| r.policy_actions as f64).sum::<f64>() / n),
        balancer_moves: round(runs.iter().map(|r| r.balancer_moves as f64).sum::<f64>() / n),
        numa_moves: round(runs.iter().map(|r| r.numa_moves as f64).sum::<f64>() / n),
        warnings,
        ticks_simulated: runs.iter().map(|r| r.ticks_simulated).sum(),
        ticks_total: runs.iter().map(|r| r.ticks_total).sum(),
        vms,
    }
}
