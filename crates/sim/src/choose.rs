//! The plan offered is never one the simulator predicts worse than the
//! current layout. When the planner's whole plan is, smaller plans are
//! tried in turn ([`TRIES`]): without the shared group and the group
//! weights (the part whose effect the kernel's group weighing makes
//! hardest to foresee: live, a shared v1 group beside a pinned host loop
//! starved the loop), then with the weights but without the affinity
//! changes, then without both, then nothing. The first not predicted worse
//! is offered, with a warning naming what was left out and the prediction
//! that left it out.
//! A saved plan (`place apply --plan`) and `--force` take the plan as it is.
//! `place` and the simulator's stealscope policy both choose this way, so
//! the fleet simulation judges the policy that ships.

use crate::host::Host;
use crate::policy_samples::{Samples, SAMPLE_S};
use crate::predict::{self, DemandHistory, HostThread, PredictInput, Prediction};
use std::collections::BTreeMap;
use stealscope_placement::action::SHARED_GROUP_VM;
use stealscope_placement::{Action, HostInput, Plan};

/// A part of a plan that can be left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Moves into the shared group and the shared group's weight.
    SharedGroup,
    /// Each VM's own weight (its cpu group's or its autogroup's).
    Weights,
    /// Affinity changes.
    Affinity,
    /// Memory moves.
    Memory,
}

impl Part {
    fn has(self, a: &Action) -> bool {
        match (self, a) {
            (Part::SharedGroup, Action::JoinGroup { .. }) => true,
            (Part::SharedGroup, Action::CpuWeight { vm, .. }) => vm == SHARED_GROUP_VM,
            (Part::Weights, Action::CpuWeight { vm, .. }) => vm != SHARED_GROUP_VM,
            (Part::Weights, Action::AutogroupNice { .. }) => true,
            (Part::Affinity, Action::Affinity { .. }) => true,
            (Part::Memory, Action::MigrateMemory { .. }) => true,
            _ => false,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Part::SharedGroup => "the shared group",
            Part::Weights => "the group weights",
            Part::Affinity => "the affinity changes",
            Part::Memory => "the memory moves",
        }
    }
}

/// The plans tried, in turn. The groups and weights go first (their
/// effect is the hardest to foresee); a plan whose weights are right but
/// whose affinity changes are not keeps its weights (on the autogroup test
/// host, widening three vCPUs pinned to one CPU split a VM's vCPUs while
/// the weights alone evened the VMs out).
const TRIES: [&[Part]; 4] = [
    &[Part::SharedGroup, Part::Weights],
    &[Part::SharedGroup, Part::Affinity],
    &[Part::SharedGroup, Part::Weights, Part::Affinity],
    &[
        Part::SharedGroup,
        Part::Weights,
        Part::Affinity,
        Part::Memory,
    ],
];

/// `plan` with its prediction, or the largest part of it `predict` does
/// not call worse (see the module comment).
pub fn never_worse(plan: Plan, predict: impl Fn(&Plan) -> Prediction) -> (Plan, Prediction) {
    let pred = predict(&plan);
    if pred.refusal().is_none() {
        return (plan, pred);
    }
    let mut tried = vec![plan.actions.clone()];
    for parts in TRIES {
        let trimmed = without(&plan, parts);
        if tried.contains(&trimmed.actions) {
            continue;
        }
        tried.push(trimmed.actions.clone());
        let p = predict(&trimmed);
        if p.refusal().is_none() {
            return (with_warning(trimmed, parts, &pred, &plan), p);
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

fn with_warning(mut p: Plan, parts: &[Part], whole: &Prediction, full: &Plan) -> Plan {
    // Only the parts the whole plan had.
    let names: Vec<&str> = parts
        .iter()
        .filter(|x| full.actions.iter().any(|a| x.has(a)))
        .map(|x| x.name())
        .collect();
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

    /// The autogroup test host: the weights are right, the affinity
    /// changes are not; the weights are kept.
    #[test]
    fn weights_are_kept_when_only_the_affinity_changes_are_worse() {
        let nice = Action::AutogroupNice {
            vm: "vm1".into(),
            pid: 1,
            autogroup: 7,
            value: -3,
            from: Some(0),
            reason: "test".into(),
        };
        let plan = Plan {
            actions: vec![nice.clone(), affinity(1), affinity(2)],
            ..Plan::default()
        };
        let (kept, pred) = never_worse(plan, refuse_affinity);
        assert!(pred.refusal().is_none());
        assert_eq!(kept.actions, vec![nice]);
        assert!(
            kept.warnings[0].ends_with("this plan leaves out the affinity changes"),
            "{:?}",
            kept.warnings
        );
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
