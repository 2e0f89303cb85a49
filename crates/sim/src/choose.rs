//! The plan offered is never one the simulator predicts worse than the
//! current layout. When the planner's whole plan is, smaller plans are
//! tried in turn: without the shared group (the part whose effect the
//! kernel's group weighing makes hardest to foresee: live, a shared v1
//! group beside a pinned host loop starved the loop), then the memory
//! moves of VMs whose vCPUs are already in place, then nothing. The first not predicted worse is offered, with a
//! warning naming what was left out and the prediction that left it out.
//! A saved plan (`place apply --plan`) and `--force` take the plan as it is.
//! `place` and the simulator's stealscope policy both choose this way, so
//! the fleet simulation judges the policy that ships.

use crate::host::Host;
use crate::policy_samples::{Samples, SAMPLE_S};
use crate::predict::{self, DemandHistory, HostThread, PredictInput, Prediction};
use std::collections::BTreeMap;
use stealscope_placement::{Action, HostInput, Plan};

/// A part of a plan that can be left out, largest effect first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Moves into the shared group and its weight.
    SharedGroup,
    /// Affinity changes.
    Affinity,
    /// Memory moves.
    Memory,
}

impl Part {
    fn has(self, a: &Action) -> bool {
        matches!(
            (self, a),
            (
                Part::SharedGroup,
                Action::JoinGroup { .. } | Action::CpuWeight { .. }
            ) | (Part::Affinity, Action::Affinity { .. })
                | (Part::Memory, Action::MigrateMemory { .. })
        )
    }

    fn name(self) -> &'static str {
        match self {
            Part::SharedGroup => "the shared group",
            Part::Affinity => "the affinity changes",
            Part::Memory => "the memory moves",
        }
    }
}

/// The plans tried, each leaving out one more part.
const TRIES: [&[Part]; 3] = [
    &[Part::SharedGroup],
    &[Part::SharedGroup, Part::Affinity],
    &[Part::SharedGroup, Part::Affinity, Part::Memory],
];

/// `plan` with its prediction, or the largest part of it `predict` does
/// not call worse (see the module comment).
pub fn never_worse(plan: Plan, predict: impl Fn(&Plan) -> Prediction) -> (Plan, Prediction) {
    let pred = predict(&plan);
    if pred.refusal().is_none() {
        return (plan, pred);
    }
    let mut last_len = plan.actions.len();
    for parts in TRIES {
        let trimmed = without(&plan, parts);
        if trimmed.actions.len() == last_len {
            continue;
        }
        last_len = trimmed.actions.len();
        let p = predict(&trimmed);
        if p.refusal().is_none() {
            return (with_warning(trimmed, parts, &pred), p);
        }
    }
    (plan, pred)
}

/// `plan` without `parts`. Leaving out a VM's affinity change leaves out
/// its memory move too: memory sent to a node its vCPUs are not bound to
/// is no more local on average than before, and commits the VM to a
/// second change when its vCPUs follow (in the fleet the gate split
/// first placements into two passes this way).
fn without(plan: &Plan, parts: &[Part]) -> Plan {
    let mut p = plan.clone();
    let unbound: Vec<u32> = if parts.contains(&Part::Affinity) {
        plan.actions
            .iter()
            .filter(|a| Part::Affinity.has(a))
            .map(Action::pid)
            .collect()
    } else {
        Vec::new()
    };
    let left_out = |a: &Action| {
        parts.iter().any(|x| x.has(a)) || (Part::Memory.has(a) && unbound.contains(&a.pid()))
    };
    p.actions.retain(|a| !left_out(a));
    p
}

fn with_warning(mut p: Plan, parts: &[Part], whole: &Prediction) -> Plan {
    let names: Vec<&str> = parts.iter().map(|x| x.name()).collect();
    let what = if p.actions.is_empty() {
        "nothing is changed".to_string()
    } else {
        format!("this plan leaves out {}", names.join(" and "))
    };
    p.warnings.push(format!(
        "the simulator predicts the whole plan makes the host worse ({}): {what}",
        whole.worse.join("; ")
    ));
    p
}

/// The simulator's `place`: `plan` trimmed by the prediction from the
/// demand `samples` of the simulated host `h` (a `policy::Trim`).
pub fn in_sim(h: &Host, samples: &Samples, input: &HostInput, plan: Plan) -> Plan {
    let mut demand = DemandHistory {
        step_s: SAMPLE_S,
        ..DemandHistory::default()
    };
    let mut host_work = Vec::new();
    for (i, v) in samples.of_live(h) {
        let t = &h.tasks[i];
        demand.by_tid.insert(t.tid, v);
        if t.vm.is_none() {
            host_work.push(HostThread {
                name: format!("host-{}", t.tid),
                pid: t.tid,
                tid: t.tid,
                cpus: t.allowed.iter().map(|c| c as u32).collect(),
                group: None,
                weight: 1024.0,
            });
        }
    }
    let inp = PredictInput {
        host: input,
        demand: &demand,
        host_work: &host_work,
        autogroups: &BTreeMap::new(),
    };
    never_worse(plan, |x| predict::predict(&inp, x)).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::Measures;
    use stealscope_placement::Knob;

    fn affinity(pid: u32) -> Action {
        Action::Affinity {
            vm: format!("vm{pid}"),
            pid,
            tid: pid + 1,
            vcpu: Some(0),
            cpus: vec![0],
            from: vec![0, 1],
            via: Knob::Direct,
            reason: "test".into(),
        }
    }

    fn memory(pid: u32) -> Action {
        Action::MigrateMemory {
            vm: format!("vm{pid}"),
            pid,
            to_node: 0,
            bytes: 1 << 30,
            from_nodes: BTreeMap::from([(1, 1 << 30)]),
            via: Knob::Direct,
            reason: "test".into(),
        }
    }

    /// A prediction that calls any affinity change worse.
    fn refuse_affinity(p: &Plan) -> Prediction {
        let bad = p
            .actions
            .iter()
            .any(|a| matches!(a, Action::Affinity { .. }));
        Prediction {
            current: Measures::default(),
            planned: Measures::default(),
            noise: Measures::default(),
            seeds: vec![1],
            history_s: 60.0,
            throughput_change_pct: 0.0,
            worse: if bad {
                vec!["mean steal".into()]
            } else {
                Vec::new()
            },
            vms: Vec::new(),
            host_work: Vec::new(),
        }
    }

    #[test]
    fn memory_is_left_out_with_the_vcpus_it_would_follow() {
        // VM 1 is bound and its memory moved; VM 2's vCPUs are already in
        // place, only its memory moves.
        let plan = Plan {
            actions: vec![affinity(1), memory(1), memory(2)],
            ..Plan::default()
        };
        let (kept, pred) = never_worse(plan, refuse_affinity);
        assert!(pred.refusal().is_none());
        assert_eq!(kept.actions, vec![memory(2)]);
        assert_eq!(kept.warnings.len(), 1, "{:?}", kept.warnings);
    }

    #[test]
    fn a_plan_not_predicted_worse_is_kept_whole() {
        let plan = Plan {
            actions: vec![memory(1), memory(2)],
            ..Plan::default()
        };
        let (kept, _) = never_worse(plan.clone(), refuse_affinity);
        assert_eq!(kept, plan);
    }
}
