//! A host whose VMs' demand is a measured history (one level per step, as
//! Prometheus gives it): what `stealscope fleet` replays to predict a
//! migration's effect, and what the fleet's OpenMetrics writer
//! ([`crate::openmetrics`]) runs to make such histories. Policy none,
//! one cpu group per VM (libvirt's layout), one node: a prediction of
//! steal, not of NUMA costs.

use crate::demand::Demand;
use crate::engine::{run, HostShape, RunSpec};
use crate::scenario::{Case, Cgroups, MemNode, NumaSpec, PolicyKind, SchedSpec, VmDef};
use std::sync::Arc;

/// The fluid model's tick (the fleet scenarios' 100 ms).
pub const TICK_S: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct MeasuredVm {
    pub name: String,
    pub vcpus: u32,
    pub mem_gib: f64,
    /// Share of a CPU each vCPU wants, one value per step, within [0, 1].
    pub levels: Arc<[f64]>,
    /// CPUs its vCPU threads are confined to (None: all).
    pub pinned: Option<Vec<u32>>,
}

impl MeasuredVm {
    /// From a history of the whole VM's demand in CPUs (run + wait).
    pub fn from_cpus(name: &str, vcpus: u32, mem_gib: f64, cpus: &[f64]) -> MeasuredVm {
        let n = vcpus.max(1) as f64;
        MeasuredVm {
            name: name.to_string(),
            vcpus: vcpus.max(1),
            mem_gib,
            levels: cpus
                .iter()
                .map(|c| (c / n).clamp(0.0, 1.0))
                .collect::<Vec<_>>()
                .into(),
            pinned: None,
        }
    }
}

/// Per VM and for the host, seconds over the run.
#[derive(Debug, Clone, Default)]
pub struct HostRun {
    /// Per VM (in the order given): vCPU run, vCPU wait, vCPU-seconds.
    pub vm_run: Vec<f64>,
    pub vm_wait: Vec<f64>,
    pub vm_secs: Vec<f64>,
    /// CPU-seconds the host's CPUs sat idle.
    pub idle_cpu_s: f64,
    /// Wall seconds counted.
    pub secs: f64,
}

impl HostRun {
    /// Wait that idle CPUs could not have absorbed, CPU-seconds per
    /// second: the hypervisor split of `stealscope host` over the run.
    pub fn busy_steal(&self) -> f64 {
        let wait: f64 = self.vm_wait.iter().sum();
        if self.secs <= 0.0 {
            return 0.0;
        }
        (wait - self.idle_cpu_s).max(0.0) / self.secs
    }

    /// A VM's steal, percent of its vCPU time.
    pub fn vm_steal_pct(&self, i: usize) -> f64 {
        if self.vm_secs[i] > 0.0 {
            (100.0 * self.vm_wait[i] / self.vm_secs[i]).clamp(0.0, 100.0)
        } else {
            0.0
        }
    }
}

/// Runs `vms` on a host of `cpus` CPUs for `duration_s`, each VM's level
/// changing every `step_s` (held at its last value past the end).
pub fn run_measured(
    cpus: u32,
    vms: &[MeasuredVm],
    step_s: f64,
    duration_s: f64,
    seed: u64,
) -> HostRun {
    let shape = HostShape {
        cpus: cpus.max(1) as usize,
        nodes: 1,
        smt: false,
        mem_per_node_gib: vms.iter().map(|v| v.mem_gib).sum::<f64>() + 1.0,
        background: Vec::new(),
    };
    let case = Case {
        name: "measured".into(),
        policy: PolicyKind::None,
        cgroups: Cgroups::PerVm,
        numa_balancing: false,
        planner: stealscope_placement::Config::default(),
    };
    let defs: Vec<VmDef> = vms
        .iter()
        .map(|v| VmDef {
            name: v.name.clone(),
            vcpus: v.vcpus,
            mem_gib: v.mem_gib,
            mem_node: MemNode::Spread,
            demand: match v.levels.len() {
                0 => Demand::Level(0.0),
                1 => Demand::Level(v.levels[0]),
                _ => Demand::Trace {
                    levels: v.levels.clone(),
                    step_s,
                    repeat: false,
                },
            },
            cpus: v.pinned.clone(),
            weight: None,
            dedicated: false,
            start_s: 0.0,
            stop_s: None,
            emulator: None,
            vcpu_wakeups_per_s: 0.0,
        })
        .collect();
    let out = run(&RunSpec {
        shape: &shape,
        sched: &SchedSpec::default(),
        numa: &NumaSpec::default(),
        case: &case,
        vms: &defs,
        duration_s,
        tick_s: TICK_S.min(step_s),
        warmup_s: 0.0,
        seed,
        every_tick: false,
        trim: Some(crate::choose::in_sim),
    });
    let mut r = HostRun {
        idle_cpu_s: out.idle_cpu_s * shape.cpus as f64,
        secs: out.secs,
        ..HostRun::default()
    };
    // The engine reports VMs in the order given (all start at 0).
    for v in &out.vms {
        r.vm_run.push(v.vcpus.iter().map(|a| a.run).sum());
        r.vm_wait.push(v.vcpus.iter().map(|a| a.wait).sum());
        r.vm_secs.push(v.vcpus.iter().map(|a| a.secs).sum());
    }
    r
}

/// Each step of `vms`' histories as its own run at that step's levels:
/// what a scrape every step would have seen.
pub fn run_steps(cpus: u32, vms: &[MeasuredVm], step_s: f64, seed: u64) -> Vec<HostRun> {
    run_steps_for(cpus, vms, step_s, step_s, seed)
}

/// As [`run_steps`], each step replayed for `replay_s` (at most `step_s`)
/// only: a step's levels are constant, so its shares settle within
/// seconds, and a host whose balancer never lets them settle exactly is
/// otherwise simulated tick by tick for the whole step. Every step lasts
/// as long, so [`summarize`]'s shares weigh them as before.
pub fn run_steps_for(
    cpus: u32,
    vms: &[MeasuredVm],
    step_s: f64,
    replay_s: f64,
    seed: u64,
) -> Vec<HostRun> {
    let replay_s = replay_s.min(step_s);
    let steps = vms.iter().map(|v| v.levels.len()).max().unwrap_or(0);
    (0..steps)
        .map(|k| {
            let at: Vec<MeasuredVm> = vms
                .iter()
                .map(|v| MeasuredVm {
                    levels: vec![v.levels.get(k).copied().unwrap_or(0.0)].into(),
                    ..v.clone()
                })
                .collect();
            run_measured(cpus, &at, step_s, replay_s, seed ^ k as u64)
        })
        .collect()
}

/// Steps summed: busy steal split step by step (wait that the step's idle
/// CPU time could not absorb), per second of the whole; each VM's steal
/// percent over all steps.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub busy_steal: f64,
    pub vm_steal_pct: Vec<f64>,
}

pub fn summarize(runs: &[HostRun]) -> Summary {
    let secs: f64 = runs.iter().map(|r| r.secs).sum();
    let busy: f64 = runs.iter().map(|r| r.busy_steal() * r.secs).sum();
    let n = runs.first().map_or(0, |r| r.vm_wait.len());
    let vm_steal_pct = (0..n)
        .map(|i| {
            let w: f64 = runs.iter().map(|r| r.vm_wait[i]).sum();
            let s: f64 = runs.iter().map(|r| r.vm_secs[i]).sum();
            if s > 0.0 {
                (100.0 * w / s).clamp(0.0, 100.0)
            } else {
                0.0
            }
        })
        .collect();
    Summary {
        busy_steal: if secs > 0.0 { busy / secs } else { 0.0 },
        vm_steal_pct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overcommitted_host_waits_as_much_as_it_lacks() {
        // 4 CPUs, 3 VMs of 2 vCPUs each wanting a whole CPU per vCPU:
        // 6 runnable on 4 CPUs, so 2 CPU-s/s of wait and no idle CPU.
        let vms: Vec<MeasuredVm> = (0..3)
            .map(|i| MeasuredVm::from_cpus(&format!("v{i}"), 2, 1.0, &[2.0, 2.0]))
            .collect();
        let r = run_measured(4, &vms, 60.0, 120.0, 1);
        assert!((r.busy_steal() - 2.0).abs() < 0.05, "{}", r.busy_steal());
        for i in 0..3 {
            assert!(
                (r.vm_steal_pct(i) - 33.3).abs() < 2.0,
                "{}",
                r.vm_steal_pct(i)
            );
        }
        // Half the demand in the second minute: 3 CPUs wanted of 4, one CPU
        // idle. Over the window the first minute's 120 CPU-s of wait less
        // the second's 60 of idle, per 120 s, is 0.5; vCPUs at half a CPU
        // that share a CPU still queue behind each other at times (the
        // model's overlap), which adds wait but not idle.
        let half: Vec<MeasuredVm> = (0..3)
            .map(|i| MeasuredVm::from_cpus(&format!("v{i}"), 2, 1.0, &[2.0, 1.0]))
            .collect();
        let r = run_measured(4, &half, 60.0, 120.0, 1);
        assert!((0.5..0.9).contains(&r.busy_steal()), "{}", r.busy_steal());
        // Step by step, the second minute's idle CPU absorbs none of the
        // first minute's wait: 120 CPU-s over 120 s, plus the overlap's.
        let s = summarize(&run_steps(4, &half, 60.0, 1));
        assert!((1.0..1.2).contains(&s.busy_steal), "{}", s.busy_steal);
    }
}
