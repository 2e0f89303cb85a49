//! Fleets: many hosts shaped like [host], each starting with `initial_vms`
//! VMs drawn from the mix, with VMs arriving (Poisson) and leaving
//! (exponential lifetimes) while vCPUs stay within `max_vcpus_per_cpu`.
//! Hosts run in parallel over the machine's cores.

use crate::engine::{run, Acc, HostShape, RunSpec};
use crate::range::{round, Range};
use crate::scenario::{Case, FleetSpec, MemNode, NumaSpec, SchedSpec, VmDef};
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;
use stealscope_placement::synthetic::Rng;

#[derive(Debug, Clone, Serialize)]
pub struct FleetCase {
    pub name: String,
    pub policy: String,
    pub hosts: usize,
    pub vms: usize,
    pub vm_hours: f64,
    /// Per VM (over its life): steal percent, distribution over VMs.
    pub vm_steal_p50: f64,
    pub vm_steal_p90: f64,
    pub vm_steal_p99: f64,
    pub vm_steal_max: f64,
    /// Over all vCPU time.
    pub steal_pct: f64,
    pub idle_steal_pct: f64,
    pub util_pct: f64,
    pub throughput_pct: f64,
    /// Work done (run at the speed remote memory allows) as a percentage
    /// of the work the VMs asked for: 100 when every VM got all it wanted
    /// with its memory local. The VMs and their demand are the same under
    /// every policy, so this ranks policies as users read throughput.
    pub work_pct: f64,
    /// Most minus least robbed vCPU of a VM, mean over VMs of 2 or more
    /// vCPUs, percentage points.
    pub vcpu_spread_pp: f64,
    /// Most minus least robbed VM of a host, mean over hosts, percentage points.
    pub vm_spread_pp: f64,
    /// VMs whose steal is above 10%.
    pub vms_over_10pct: usize,
    /// Knob writes (affinity per thread, groups, weights, memory moves).
    pub policy_actions: usize,
    /// VMs re-placed (CPUs or memory node), once per VM per pass, and that
    /// per host-hour: how often the policy changes placement.
    pub placement_changes: usize,
    pub changes_per_host_hour: f64,
    pub ticks_simulated: u64,
    pub ticks_total: u64,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub hosts: u32,
    pub duration_s: f64,
    pub tick_ms: f64,
    pub threads: usize,
    pub cases: Vec<FleetCase>,
}

/// Exponential with the given mean.
fn exp(rng: &mut Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.unit()).ln()
}

/// The VMs host `index` sees over `duration_s`.
pub fn host_vms(
    f: &FleetSpec,
    cpus: usize,
    base: &Path,
    duration_s: f64,
    seed: u64,
    index: u32,
) -> Vec<VmDef> {
    let mut rng = Rng(seed ^ (index as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let total: f64 = f.mix.iter().map(|m| m.share.0).sum();
    let cap = f.max_vcpus_per_cpu.0 * cpus as f64;
    let life = f.mean_lifetime_h.0 * 3600.0;
    let mut out: Vec<VmDef> = Vec::new();
    let draw = |rng: &mut Rng, at: f64, out: &mut Vec<VmDef>| {
        let mut u = rng.unit() * total;
        let m = f
            .mix
            .iter()
            .find(|m| {
                u -= m.share.0;
                u < 0.0
            })
            .unwrap_or(&f.mix[f.mix.len() - 1]);
        let live: u32 = out
            .iter()
            .filter(|v| v.start_s <= at && v.stop_s.is_none_or(|s| s > at))
            .map(|v| v.vcpus)
            .sum();
        let stop = at + exp(rng, life);
        if (live + m.vcpus.0) as f64 <= cap {
            out.push(VmDef {
                name: format!("h{index}-vm{}", out.len()),
                vcpus: m.vcpus.0,
                mem_gib: m.mem_gib.0,
                mem_node: MemNode::Spread,
                demand: m.demand.resolve(base).unwrap_or_default(),
                cpus: None,
                weight: None,
                dedicated: false,
                start_s: at,
                stop_s: (stop < duration_s).then_some(stop),
                emulator: None,
                vcpu_wakeups_per_s: 0.0,
            });
        }
    };
    for _ in 0..f.initial_vms.0 {
        draw(&mut rng, 0.0, &mut out);
    }
    let rate = f.arrivals_per_host_hour.0 / 3600.0;
    if rate > 0.0 {
        let mut t = exp(&mut rng, 1.0 / rate);
        while t < duration_s {
            draw(&mut rng, t, &mut out);
            t += exp(&mut rng, 1.0 / rate);
        }
    }
    out
}

pub fn pctl(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Most minus least of `v` (0 for none).
pub fn spread(v: impl Iterator<Item = f64>) -> f64 {
    let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if hi >= lo {
        hi - lo
    } else {
        0.0
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Work done as a percentage of the work asked for (see `FleetCase::work_pct`).
pub fn work_of_demand(a: &Acc) -> f64 {
    if a.wanted > 0.0 {
        100.0 * a.work / a.wanted
    } else {
        100.0
    }
}

/// Per VM of one host run: (steal %, vCPU-time totals).
struct HostResult {
    vm_steal: Vec<f64>,
    /// Per VM of 2 or more vCPUs: most minus least robbed vCPU.
    vcpu_spread: Vec<f64>,
    total: Acc,
    vm_secs: f64,
    actions: usize,
    placement_changes: usize,
    ticks_simulated: u64,
    ticks_total: u64,
}

/// One host's run folded to what the fleet's figures need.
fn host_result(r: &crate::engine::RunOutcome) -> HostResult {
    let mut total = Acc::default();
    let mut vm_steal = Vec::new();
    let mut vcpu_spread = Vec::new();
    let mut vm_secs = 0.0;
    for v in &r.vms {
        let mut a = Acc::default();
        v.vcpus.iter().for_each(|x| a.merge(x));
        if a.secs > 0.0 {
            vm_steal.push(a.pct(a.wait));
            vm_secs += v.alive_s;
            if v.vcpus.len() > 1 {
                vcpu_spread.push(spread(v.vcpus.iter().map(|x| x.pct(x.wait))));
            }
        }
        total.merge(&a);
    }
    HostResult {
        vm_steal,
        vcpu_spread,
        total,
        vm_secs,
        actions: r.policy_actions,
        placement_changes: r.placement_changes,
        ticks_simulated: r.ticks_simulated,
        ticks_total: r.ticks_total,
    }
}

#[allow(clippy::too_many_arguments)]
pub fn run_fleet(
    f: &FleetSpec,
    shape: &HostShape,
    sched: &SchedSpec,
    numa: &NumaSpec,
    cases: &[Case],
    base: &Path,
    duration_s: f64,
    tick_s: f64,
    seed: u64,
    every_tick: bool,
) -> FleetReport {
    let mut out = Vec::new();
    for case in cases {
        let t0 = Instant::now();
        let results: Vec<HostResult> = (0..f.hosts.0)
            .into_par_iter()
            .map(|i| {
                let vms = host_vms(f, shape.cpus, base, duration_s, seed, i);
                host_result(&run(&RunSpec {
                    shape,
                    sched,
                    numa,
                    case,
                    vms: &vms,
                    duration_s,
                    tick_s,
                    warmup_s: 0.0,
                    every_tick,
                    trim: Some(crate::choose::in_sim),
                    seed: seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407),
                }))
            })
            .collect();
        let wall_s = t0.elapsed().as_secs_f64();
        let mut steal: Vec<f64> = results
            .iter()
            .flat_map(|r| r.vm_steal.iter().copied())
            .collect();
        steal.sort_by(f64::total_cmp);
        let mut total = Acc::default();
        results.iter().for_each(|r| total.merge(&r.total));
        let vcpu_spread: Vec<f64> = results
            .iter()
            .flat_map(|r| r.vcpu_spread.iter().copied())
            .collect();
        let vm_spread: Vec<f64> = results
            .iter()
            .filter(|r| !r.vm_steal.is_empty())
            .map(|r| spread(r.vm_steal.iter().copied()))
            .collect();
        let placement_changes: usize = results.iter().map(|r| r.placement_changes).sum();
        let host_hours = results.len().max(1) as f64 * duration_s / 3600.0;
        out.push(FleetCase {
            name: case.name.clone(),
            policy: case.policy.name().into(),
            hosts: results.len(),
            vms: steal.len(),
            vm_hours: round(results.iter().map(|r| r.vm_secs).sum::<f64>() / 3600.0),
            vm_steal_p50: round(pctl(&steal, 0.5)),
            vm_steal_p90: round(pctl(&steal, 0.9)),
            vm_steal_p99: round(pctl(&steal, 0.99)),
            vm_steal_max: round(steal.last().copied().unwrap_or(0.0)),
            steal_pct: round(total.pct(total.wait)),
            idle_steal_pct: round(total.pct(total.idle_wait)),
            util_pct: round(total.pct(total.run)),
            throughput_pct: round(total.pct(total.work)),
            work_pct: round(work_of_demand(&total)),
            vcpu_spread_pp: round(mean(&vcpu_spread)),
            vm_spread_pp: round(mean(&vm_spread)),
            vms_over_10pct: steal.iter().filter(|s| **s > 10.0).count(),
            policy_actions: results.iter().map(|r| r.actions).sum(),
            placement_changes,
            changes_per_host_hour: round(placement_changes as f64 / host_hours),
            ticks_simulated: results.iter().map(|r| r.ticks_simulated).sum(),
            ticks_total: results.iter().map(|r| r.ticks_total).sum(),
            wall_s: round(wall_s),
        });
    }
    let _ = Range::of(&[]);
    FleetReport {
        hosts: f.hosts.0,
        duration_s,
        tick_ms: tick_s * 1000.0,
        threads: rayon::current_num_threads(),
        cases: out,
    }
}
