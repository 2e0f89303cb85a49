//! Each move's effect on both hosts, predicted by the simulator: the host
//! before and after the move (in the batch's order) replayed with every
//! VM's measured demand history (stealscope_sim::measured), one run per
//! step of the history, busy steal split step by step as `read` does. Distinct host
//! states are simulated once each, in parallel; a host as read is taken
//! as measured.

use crate::model::{quantile, Fleet, FleetFigures, Vm};
use crate::plan::Plan;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use stealscope_sim::measured::{run_steps, summarize, MeasuredVm};

/// VMs on a host: (host they came from, index there), sorted.
type State = Vec<(usize, usize)>;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Effect {
    /// Busy steal, percent of the host's vCPU time.
    pub busy_steal_pct: f64,
    /// 99th percentile of its VMs' steal, percent.
    pub vm_steal_p99: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MoveEffect {
    pub from_before: Effect,
    pub from_after: Effect,
    pub to_before: Effect,
    pub to_after: Effect,
}

#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub moves: Vec<MoveEffect>,
    /// The fleet as measured, and as predicted after every move.
    pub before: FleetFigures,
    pub after: FleetFigures,
    pub sim_runs: usize,
    pub sim_seconds: f64,
}

/// A simulated host state's figures.
#[derive(Debug, Clone)]
struct Sim {
    busy: f64,
    vcpus: u32,
    steal: Vec<f64>,
}

impl Sim {
    fn effect(&self) -> Effect {
        Effect {
            busy_steal_pct: 100.0 * self.busy / self.vcpus.max(1) as f64,
            vm_steal_p99: quantile(&mut self.steal.clone(), 0.99),
        }
    }
}

fn measured_vm(v: &Vm) -> MeasuredVm {
    let gib = v.memory_bytes.unwrap_or(0) as f64 / (1u64 << 30) as f64;
    MeasuredVm::from_cpus(&v.name, v.vcpus.max(1), gib, &v.demand)
}

/// A host as measured: the figures every prediction starts from.
fn measured(f: &Fleet, host: usize) -> Sim {
    let h = &f.hosts[host];
    Sim {
        busy: h.busy_steal(),
        vcpus: h.vcpus(),
        steal: h.vms.iter().map(Vm::steal_pct).collect(),
    }
}

/// The host's VMs as read (states are sorted and hold each VM once).
fn as_read(f: &Fleet, host: usize, state: &State) -> bool {
    state.len() == f.hosts[host].vms.len() && state.iter().all(|&(h, _)| h == host)
}

fn simulate(f: &Fleet, host: usize, state: &State) -> Sim {
    // Its state as read needs no run (and a hot host's is the dearest).
    if as_read(f, host, state) {
        return measured(f, host);
    }
    let vms: Vec<&Vm> = state.iter().map(|&(h, i)| &f.hosts[h].vms[i]).collect();
    let m: Vec<MeasuredVm> = vms.iter().map(|v| measured_vm(v)).collect();
    // Step by step, as Prometheus's history was split.
    let r = summarize(&run_steps(f.hosts[host].cpus, &m, f.step_s, 1));
    Sim {
        busy: r.busy_steal,
        vcpus: vms.iter().map(|v| v.vcpus).sum(),
        steal: r.vm_steal_pct,
    }
}

pub fn predict(f: &Fleet, p: &Plan) -> Prediction {
    let t0 = Instant::now();
    // Host states through the batch.
    let mut now: BTreeMap<usize, State> = BTreeMap::new();
    let state_of = |now: &BTreeMap<usize, State>, h: usize| -> State {
        now.get(&h)
            .cloned()
            .unwrap_or_else(|| (0..f.hosts[h].vms.len()).map(|i| (h, i)).collect())
    };
    let mut steps: Vec<[(usize, State); 4]> = Vec::new();
    for m in &p.moves {
        let from_before = state_of(&now, m.from);
        let to_before = state_of(&now, m.to);
        let mut from_after = from_before.clone();
        from_after.retain(|x| *x != (m.from, m.vm));
        let mut to_after = to_before.clone();
        to_after.push((m.from, m.vm));
        to_after.sort();
        now.insert(m.from, from_after.clone());
        now.insert(m.to, to_after.clone());
        steps.push([
            (m.from, from_before),
            (m.from, from_after),
            (m.to, to_before),
            (m.to, to_after),
        ]);
    }
    let mut distinct: Vec<(usize, State)> = steps.iter().flatten().cloned().collect();
    distinct.sort();
    distinct.dedup();
    let sims: BTreeMap<(usize, State), Sim> = distinct
        .par_iter()
        .map(|(h, s)| ((*h, s.clone()), simulate(f, *h, s)))
        .collect();
    let eff = |k: &(usize, State)| sims[k].effect();
    let moves = steps
        .iter()
        .map(|s| MoveEffect {
            from_before: eff(&s[0]),
            from_after: eff(&s[1]),
            to_before: eff(&s[2]),
            to_after: eff(&s[3]),
        })
        .collect();
    let after = FleetFigures::of((0..f.hosts.len()).map(|i| {
        let sim = match now.get(&i) {
            Some(s) => sims[&(i, s.clone())].clone(),
            None => measured(f, i),
        };
        (sim.busy, sim.vcpus, sim.steal)
    }));
    Prediction {
        moves,
        before: FleetFigures::measured(f),
        after,
        sim_runs: distinct.iter().filter(|(h, s)| !as_read(f, *h, s)).count(),
        sim_seconds: t0.elapsed().as_secs_f64(),
    }
}
