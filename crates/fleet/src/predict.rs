//! Each move's effect on both hosts, predicted by the simulator: each host
//! a move touches is replayed as it is once the whole batch is made, with
//! every VM's measured demand history (stealscope_sim::measured), one run
//! per step of the history, busy steal split step by step as `read` does.
//! Touched hosts are simulated once each, in parallel; a host as read is
//! taken as measured (the "before" of every move).

use crate::model::{quantile, Fleet, FleetFigures, Vm};
use crate::plan::Plan;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use stealscope_sim::measured::{run_steps_for, summarize, MeasuredVm};

/// Seconds of each step replayed. A step's demand is constant, so its
/// shares settle within seconds; a host left over its CPUs (one the plan
/// could not fix) never settles exactly and was simulated tick by tick
/// for the whole 15-minute step, most of the prediction's time.
const REPLAY_S: f64 = 60.0;

/// VMs on a host: (host they came from, index there), sorted.
type State = Vec<(usize, usize)>;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Effect {
    /// Busy steal, percent of the host's vCPU time.
    pub busy_steal_pct: f64,
    /// 99th percentile of its VMs' steal, percent.
    pub vm_steal_p99: f64,
}

/// Both hosts of a move as read (before) and once the whole batch is made
/// (after): what an operator applying the batch will see.
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
    let r = summarize(&run_steps_for(
        f.hosts[host].cpus,
        &m,
        f.step_s,
        REPLAY_S,
        1,
    ));
    Sim {
        busy: r.busy_steal,
        vcpus: vms.iter().map(|v| v.vcpus).sum(),
        steal: r.vm_steal_pct,
    }
}

pub fn predict(f: &Fleet, p: &Plan) -> Prediction {
    let t0 = Instant::now();
    let last = final_states(f, p);
    // Only each touched host's state after the whole batch is replayed:
    // replaying every state the batch passes through cost two runs a move
    // and made 10,000 hosts take tens of CPU-minutes.
    let runs: Vec<(usize, &State)> = last
        .iter()
        .filter(|(h, s)| !as_read(f, **h, s))
        .map(|(h, s)| (*h, s))
        .collect();
    let sims: BTreeMap<usize, Sim> = runs
        .par_iter()
        .map(|&(h, s)| (h, simulate(f, h, s)))
        .collect();
    let sim_of = |h: usize| sims.get(&h).cloned().unwrap_or_else(|| measured(f, h));
    let moves = p
        .moves
        .iter()
        .map(|m| MoveEffect {
            from_before: measured(f, m.from).effect(),
            from_after: sim_of(m.from).effect(),
            to_before: measured(f, m.to).effect(),
            to_after: sim_of(m.to).effect(),
        })
        .collect();
    let after = FleetFigures::of((0..f.hosts.len()).map(|i| {
        let sim = sim_of(i);
        (sim.busy, sim.vcpus, sim.steal)
    }));
    Prediction {
        moves,
        before: FleetFigures::measured(f),
        after,
        sim_runs: runs.len(),
        sim_seconds: t0.elapsed().as_secs_f64(),
    }
}

/// Each host a move touches, with the VMs on it once every move is made.
fn final_states(f: &Fleet, p: &Plan) -> BTreeMap<usize, State> {
    let mut now: BTreeMap<usize, State> = BTreeMap::new();
    let read = |h: usize| -> State { (0..f.hosts[h].vms.len()).map(|i| (h, i)).collect() };
    for m in &p.moves {
        now.entry(m.from)
            .or_insert_with(|| read(m.from))
            .retain(|x| *x != (m.from, m.vm));
        now.entry(m.to)
            .or_insert_with(|| read(m.to))
            .push((m.from, m.vm));
    }
    for s in now.values_mut() {
        s.sort();
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{test_host, Host};
    use crate::plan::{Move, Why};

    fn host(name: &str, cpus: u32, vms: &[(u32, f64, f64)]) -> Host {
        let vms: Vec<Vm> = vms
            .iter()
            .enumerate()
            .map(|(i, &(vcpus, demand, wait))| Vm {
                name: format!("{name}-{i}"),
                uuid: String::new(),
                vcpus,
                memory_bytes: Some(2 << 30),
                demand: vec![demand; 2],
                wait,
                run: (demand - wait).max(0.0),
            })
            .collect();
        let busy = vms.iter().map(|v| v.wait).sum();
        test_host(name, cpus, 32 << 30, busy, vms)
    }

    fn mv(from: usize, vm: usize, to: usize) -> Move {
        Move {
            from,
            vm,
            to,
            why: Why::Largest,
            node: 0,
        }
    }

    #[test]
    fn each_touched_host_is_replayed_once_as_the_batch_leaves_it() {
        // 6 busy vCPUs on 4 CPUs, measured with 2 CPU-s/s of wait; two of
        // them leave, one to each idle host; a third host is untouched.
        let hot = host("hot", 4, &[(2, 2.0, 0.7), (2, 2.0, 0.7), (2, 2.0, 0.6)]);
        let f = Fleet {
            window_s: 1800.0,
            step_s: 900.0,
            hosts: vec![
                hot,
                host("a", 8, &[(2, 1.0, 0.0)]),
                host("b", 8, &[(2, 1.0, 0.0)]),
                host("c", 8, &[(2, 1.0, 0.0)]),
            ],
            unseen: Vec::new(),
        };
        let p = Plan {
            hot: vec![0],
            moves: vec![mv(0, 0, 1), mv(0, 1, 2)],
            ..Plan::default()
        };
        let pr = predict(&f, &p);
        assert_eq!(pr.sim_runs, 3, "hot, a and b; c as read");
        let (m0, m1) = (&pr.moves[0], &pr.moves[1]);
        // The source's before is as read, its after the batch's end: the
        // same for both of its moves.
        assert!((m0.from_before.busy_steal_pct - 100.0 * 2.0 / 6.0).abs() < 1e-9);
        assert_eq!(m0.from_after.busy_steal_pct, m1.from_after.busy_steal_pct);
        // 2 vCPUs on 4 CPUs: no busy steal left.
        assert!(m0.from_after.busy_steal_pct < 1.0, "{:?}", m0.from_after);
        assert!(pr.after.busy_steal_pct < pr.before.busy_steal_pct / 4.0);
    }
}
