//! Runs one host through time. Each tick: VMs start and stop, the policy
//! makes its pass when due, NUMA balancing and memory moves advance, the
//! load balancer and wake-up placement move threads, then the scheduler
//! shares out the CPUs. When a tick changed nothing (no thread moved, the
//! averages settled, every balancer content), every following tick is the
//! same until the next event (a demand change, a VM coming or going, a
//! policy pass, a NUMA scan), so those ticks are summed at once instead of
//! being simulated one by one: exact for the model, and what makes a fleet
//! of hosts cheap.

use crate::balance::{balance, fork_cpu, random_cpu, wake_idle};
use crate::cpuset::CpuSet;
use crate::demand::Demand;
use crate::host::Host;
use crate::numa::{self, Overhead};
use crate::policy::Policy;
use crate::scenario::{Case, MemNode, NumaSpec, SchedSpec, StartPlacement};
use crate::sched::{index, run_tick, set_wants, Scratch};
use serde::Serialize;
use stealscope_placement::synthetic::Rng;

/// The host a run simulates.
#[derive(Debug, Clone)]
pub struct HostShape {
    pub cpus: usize,
    pub nodes: usize,
    pub smt: bool,
    pub mem_per_node_gib: f64,
    pub background: Vec<(usize, f64)>,
}

/// A VM to run: when it comes and goes, what it wants.
#[derive(Debug, Clone)]
pub struct VmRun {
    pub name: String,
    pub vcpus: u32,
    pub mem_gib: f64,
    pub mem_node: MemNode,
    pub demand: Demand,
    pub cpus: Option<Vec<u32>>,
    pub weight: Option<u64>,
    pub dedicated: bool,
    pub start_s: f64,
    pub stop_s: Option<f64>,
}

/// Time accounted to one thread, seconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Acc {
    pub secs: f64,
    /// What its pattern asked for (share of a CPU x seconds).
    pub wanted: f64,
    pub run: f64,
    pub wait: f64,
    pub idle_wait: f64,
    pub work: f64,
}

impl Acc {
    fn add(&mut self, t: &crate::host::Task, level: f64, secs: f64) {
        self.secs += secs;
        self.wanted += level * secs;
        self.run += t.run * secs;
        self.wait += t.wait * secs;
        self.idle_wait += t.idle_wait * secs;
        self.work += t.work * secs;
    }

    pub fn merge(&mut self, o: &Acc) {
        self.secs += o.secs;
        self.wanted += o.wanted;
        self.run += o.run;
        self.wait += o.wait;
        self.idle_wait += o.idle_wait;
        self.work += o.work;
    }

    /// Percent of wall time.
    pub fn pct(&self, x: f64) -> f64 {
        if self.secs > 0.0 {
            (100.0 * x / self.secs).clamp(0.0, 100.0)
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone)]
pub struct VmOutcome {
    pub name: String,
    /// Per vCPU, by index.
    pub vcpus: Vec<Acc>,
    pub alive_s: f64,
}

#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub vms: Vec<VmOutcome>,
    pub warnings: Vec<String>,
    pub policy_actions: usize,
    pub policy_passes: usize,
    /// Threads moved by the load balancer and wake-up placement, and by NUMA balancing.
    pub balancer_moves: usize,
    pub numa_moves: usize,
    pub ticks_simulated: u64,
    pub ticks_total: u64,
    /// Host CPU idle (share of all CPUs x seconds), and the counted seconds.
    pub idle_cpu_s: f64,
    pub secs: f64,
}

pub struct RunSpec<'a> {
    pub shape: &'a HostShape,
    pub sched: &'a SchedSpec,
    pub numa: &'a NumaSpec,
    pub case: &'a Case,
    pub vms: &'a [VmRun],
    pub duration_s: f64,
    pub tick_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
}

/// Runs one case with one seed.
pub fn run(spec: &RunSpec) -> RunOutcome {
    let mut rng = Rng(spec.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
    let shape = spec.shape;
    let mut h = Host::new(
        shape.cpus,
        shape.nodes,
        shape.smt,
        shape.mem_per_node_gib,
        spec.case.cgroups,
    );
    h.numa_balancing = spec.case.numa_balancing;
    for (cpu, d) in &shape.background {
        h.add_background(*cpu, *d);
    }
    let mut cfg = spec.case.planner.clone();
    cfg.dedicated.extend(
        spec.vms
            .iter()
            .filter(|v| v.dedicated)
            .map(|v| v.name.clone()),
    );
    let mut policy = Policy::new(spec.case.policy, cfg);
    let mut sc = Scratch::default();
    let mut over = Overhead::default();
    // VM index in `spec.vms` -> VM id on the host.
    let mut started: Vec<Option<usize>> = vec![None; spec.vms.len()];
    let mut stopped = vec![false; spec.vms.len()];
    let mut accs: Vec<Acc> = Vec::new();
    let mut prev: Vec<(f64, f64)> = Vec::new();
    let mut out = RunOutcome::default();
    let dt = spec.tick_s;
    let total_ticks = (spec.duration_s / dt).round().max(1.0) as u64;
    let mut tick: u64 = 0;
    let all = CpuSet::all(shape.cpus);
    while tick < total_ticks {
        let t = tick as f64 * dt;
        // VMs come and go.
        let mut changed = false;
        for (k, v) in spec.vms.iter().enumerate() {
            if started[k].is_none() && v.start_s <= t + 1e-9 && v.stop_s.is_none_or(|s| s > t) {
                let allowed = v
                    .cpus
                    .as_ref()
                    .map_or(all.clone(), |c| CpuSet::from_cpus(c));
                let mem = match v.mem_node {
                    MemNode::Spread => vec![v.mem_gib / shape.nodes as f64; shape.nodes],
                    MemNode::Node(n) => {
                        let mut m = vec![0.0; shape.nodes];
                        m[n as usize] = v.mem_gib;
                        m
                    }
                };
                let start = spec.sched.start;
                let key = spec.seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let id = h.add_vm(
                    v.name.clone(),
                    v.vcpus,
                    v.demand.clone(),
                    key,
                    mem,
                    allowed,
                    v.weight,
                    v.dedicated,
                    t,
                    &mut |h, allowed| match start {
                        StartPlacement::Idlest => fork_cpu(h, allowed, &mut rng),
                        StartPlacement::Random => random_cpu(h, allowed, &mut rng),
                    },
                );
                if h.numa_balancing {
                    numa::start_scans(&mut h, id, spec.numa, t, &mut rng);
                }
                started[k] = Some(id);
                changed = true;
            }
            if let (Some(id), false, Some(stop)) = (started[k], stopped[k], v.stop_s) {
                if stop <= t + 1e-9 {
                    h.remove_vm(id);
                    stopped[k] = true;
                    changed = true;
                }
            }
        }
        if changed {
            policy.host_changed();
        }
        let changes = policy.pass(&mut h, t);
        let (numa_moves, mem_busy) = numa::tick(&mut h, spec.numa, t, dt, &mut rng, &mut over);
        out.numa_moves += numa_moves;
        set_wants(&mut h, t);
        index(&h, &mut sc);
        let mut moves = 0;
        let mut lb_steady = true;
        if spec.sched.balance {
            let (m, s) = balance(&mut h, &mut sc, &mut rng, spec.sched.imbalance_pct.0, true);
            moves += m;
            lb_steady = s;
            moves += wake_idle(&mut h, &mut sc);
        }
        out.balancer_moves += moves;
        let numa_spec = spec.numa;
        let over_ref = &over;
        run_tick(&mut h, &mut sc, dt, &|h, i| {
            numa::speed(h, numa_spec, over_ref, i)
        });
        // Whether this tick is the same as the last (the model has settled).
        if prev.len() < h.tasks.len() {
            prev.resize(h.tasks.len(), (f64::NAN, f64::NAN));
        }
        let mut same = true;
        for (i, task) in h.tasks.iter().enumerate() {
            if task.alive {
                let p = prev[i];
                if !((p.0 - task.run).abs() < 1e-7 && (p.1 - task.wait).abs() < 1e-7) {
                    same = false;
                }
                prev[i] = (task.run, task.wait);
            }
        }
        let steady = same
            && !changed
            && changes == 0
            && moves == 0
            && numa_moves == 0
            && !mem_busy
            && lb_steady;
        // How many ticks this state lasts.
        let mut n: u64 = 1;
        if steady {
            let mut next = total_ticks as f64 * dt;
            for v in h.vms.iter().filter(|v| v.alive) {
                next = next.min(v.demand.next_change(t));
                if h.numa_balancing && h.nodes.len() > 1 {
                    next = next.min(v.next_scan_s);
                }
            }
            for (k, v) in spec.vms.iter().enumerate() {
                if started[k].is_none() {
                    next = next.min(v.start_s);
                } else if !stopped[k] {
                    if let Some(s) = v.stop_s {
                        next = next.min(s);
                    }
                }
            }
            next = next.min(policy.due());
            // Ticks strictly before the one at which `next` happens.
            let until = ((next - 1e-9) / dt).ceil().max(tick as f64 + 1.0) as u64;
            n = until.min(total_ticks) - tick;
        }
        out.ticks_simulated += 1;
        // Statistics, for the part after the warm-up.
        let warm_ticks = (spec.warmup_s / dt).round() as u64;
        let counted = (tick + n).saturating_sub(tick.max(warm_ticks));
        if accs.len() < h.tasks.len() {
            accs.resize(h.tasks.len(), Acc::default());
        }
        if counted > 0 {
            let secs = counted as f64 * dt;
            for (i, task) in h.tasks.iter().enumerate() {
                if task.alive {
                    let level = match task.vm {
                        Some(v) => h.vms[v].demand.level(t, h.vms[v].key),
                        None => task.own_demand,
                    };
                    accs[i].add(task, level, secs);
                }
            }
            out.idle_cpu_s += sc.idle.iter().sum::<f64>() / shape.cpus as f64 * secs;
            out.secs += secs;
        }
        policy.observe(&h, n as f64 * dt);
        tick += n;
    }
    out.ticks_total = total_ticks;
    out.policy_actions = policy.actions;
    out.policy_passes = policy.passes;
    out.warnings = policy.warnings;
    for (k, v) in spec.vms.iter().enumerate() {
        let Some(id) = started[k] else { continue };
        let vm = &h.vms[id];
        let vcpus: Vec<Acc> = vm
            .tasks
            .iter()
            .map(|&i| accs.get(i).copied().unwrap_or_default())
            .collect();
        let alive_s = vcpus.first().map_or(0.0, |a| a.secs);
        out.vms.push(VmOutcome {
            name: v.name.clone(),
            vcpus,
            alive_s,
        });
    }
    out
}
