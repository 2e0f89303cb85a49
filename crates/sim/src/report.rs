//! What `sim` reports: per case, per VM and vCPU, the steal (busy and
//! idle), utilisation, demand and throughput, as the mean and range over
//! the seeds (repeated runs); the spread between the most and least robbed
//! vCPU; for fleets, distributions over VMs.

use crate::engine::{Acc, RunOutcome, VmOutcome};
use crate::fleet::{pctl, spread, FleetReport};
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
    /// The measures placement policies are compared on.
    pub measures: Measures,
    pub idle_cpu_pct: f64,
    pub policy_actions: f64,
    pub balancer_moves: f64,
    pub numa_moves: f64,
    pub warnings: Vec<String>,
    /// Ticks simulated one by one, and in all (the rest were summed in steady stretches).
    pub ticks_simulated: u64,
    pub ticks_total: u64,
}

/// What a placement policy is judged by (issue 27), each per run and
/// then over the seeds; the fleet reports the same over its hosts.
#[derive(Debug, Clone, Serialize)]
pub struct Measures {
    /// VM steal (each VM over its life) at the 90th and 99th percentile
    /// of the host's VMs.
    pub vm_steal_p90: Range,
    pub vm_steal_p99: Range,
    pub vms_over_10pct: Range,
    /// Most minus least robbed vCPU of a VM, mean over VMs of 2 or more vCPUs.
    pub vcpu_spread_pp: Range,
    /// Most minus least robbed VM.
    pub vm_spread_pp: Range,
    /// Work done (run at the speed remote memory allows) as a percentage
    /// of the work asked for.
    pub work_pct: Range,
    /// VMs re-placed (CPUs or memory node), once per VM per pass, per hour.
    pub changes_per_host_hour: Range,
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

pub(crate) fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        round(s / n as f64)
    }
}

/// Folds the runs of one case (one per seed) into its report.
pub fn case_report(case: &crate::scenario::Case, runs: &[RunOutcome]) -> CaseReport {
    let vms = vm_reports(runs);
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
    let per_run = |f: fn(&RunOutcome) -> f64| Range::of(&runs.iter().map(f).collect::<Vec<_>>());
    CaseReport {
        name: case.name.clone(),
        policy: case.policy.name().into(),
        cgroups: case.cgroups,
        numa_balancing: case.numa_balancing,
        spread_pp: per_run(|r| spread(vcpu_steals(r))),
        steal_pct: per_run(|r| mean(vcpu_steals(r))),
        busy_steal_pct: mean(all.iter().map(|v| v.busy_steal_pct)),
        idle_steal_pct: mean(all.iter().map(|v| v.idle_steal_pct)),
        throughput_pct: round(all.iter().map(|v| v.throughput_pct).sum()),
        measures: measures(runs),
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

/// Per VM and vCPU, each figure over the seeds.
fn vm_reports(runs: &[RunOutcome]) -> Vec<VmReport> {
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
            .map(|v| total(v).pct(total(v).wait))
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
    vms
}

/// The measures policies are compared on (the same as a fleet's), each
/// computed per run and then taken over the seeds.
fn measures(runs: &[RunOutcome]) -> Measures {
    let per_run =
        |f: &dyn Fn(&RunOutcome) -> f64| Range::of(&runs.iter().map(f).collect::<Vec<_>>());
    Measures {
        vm_steal_p90: per_run(&|r| pctl(&sorted(vm_steals(r)), 0.9)),
        vm_steal_p99: per_run(&|r| pctl(&sorted(vm_steals(r)), 0.99)),
        vms_over_10pct: per_run(&|r| vm_steals(r).filter(|s| *s > 10.0).count() as f64),
        vcpu_spread_pp: per_run(&|r| {
            mean(
                r.vms
                    .iter()
                    .filter(|v| v.vcpus.len() > 1 && total(v).secs > 0.0)
                    .map(|v| spread(v.vcpus.iter().map(|a| a.pct(a.wait)))),
            )
        }),
        vm_spread_pp: per_run(&|r| spread(vm_steals(r))),
        work_pct: per_run(&|r| {
            let mut a = Acc::default();
            r.vms.iter().for_each(|v| a.merge(&total(v)));
            crate::fleet::work_of_demand(&a)
        }),
        changes_per_host_hour: per_run(&|r| {
            if r.secs > 0.0 {
                r.placement_changes as f64 * 3600.0 / r.secs
            } else {
                0.0
            }
        }),
    }
}

/// A VM's vCPUs summed.
fn total(v: &VmOutcome) -> Acc {
    let mut a = Acc::default();
    v.vcpus.iter().for_each(|x| a.merge(x));
    a
}

/// Steal of every vCPU that ran in the counted time.
fn vcpu_steals(r: &RunOutcome) -> impl Iterator<Item = f64> + '_ {
    r.vms
        .iter()
        .flat_map(|v| v.vcpus.iter())
        .filter(|a| a.secs > 0.0)
        .map(|a| a.pct(a.wait))
}

/// Steal of every VM that ran in the counted time.
fn vm_steals(r: &RunOutcome) -> impl Iterator<Item = f64> + '_ {
    r.vms
        .iter()
        .map(total)
        .filter(|a| a.secs > 0.0)
        .map(|a| a.pct(a.wait))
}

fn sorted(v: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    v
}
