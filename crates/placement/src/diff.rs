//! From the target placement to the actions that reach it: only what
//! differs from what the host has now, in apply order (groups, weights,
//! affinity, memory).

use crate::action::{Action, CgroupRef, Knob, SHARED_GROUP_VM};
use crate::config::{Config, Fairness};
use crate::input::{HostInput, VmInput};
use crate::target::{fairness_for, Class, VmPlan};
use std::collections::{BTreeMap, BTreeSet};

fn clamp_weight(g: &CgroupRef, vcpus: usize) -> u64 {
    let (unit, lo, hi) = g.weight_unit();
    (unit * vcpus as u64).clamp(lo, hi)
}

/// Groups that hold exactly one VM and are not the hierarchy's root: only
/// those can carry a per-VM weight.
fn own_groups(host: &HostInput) -> BTreeSet<&str> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for vm in &host.vms {
        if let Some(g) = &vm.cpu_group {
            *count.entry(g.dir.as_str()).or_default() += 1;
        }
    }
    let root = host
        .cpu_controller
        .as_ref()
        .map(|c| c.mount.trim_end_matches('/'));
    count
        .into_iter()
        .filter(|(d, n)| *n == 1 && Some(d.trim_end_matches('/')) != root)
        .map(|(d, _)| d)
        .collect()
}

pub fn actions(host: &HostInput, cfg: &Config, plans: &[VmPlan]) -> (Vec<Action>, Vec<String>) {
    let by_pid: BTreeMap<u32, &VmInput> = host.vms.iter().map(|v| (v.pid, v)).collect();
    let own = own_groups(host);
    let shared_group = host
        .cpu_controller
        .as_ref()
        .map(|c| c.group(&cfg.shared_group));
    let (mut groups, mut weights, mut affinity, mut memory) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut warnings = Vec::new();
    let mut shared_vcpus = 0usize;
    for p in plans {
        let Some(vm) = by_pid.get(&p.pid) else {
            continue;
        };
        if p.class == Class::Shared {
            match (fairness_for(vm, cfg), &shared_group) {
                (Fairness::SharedGroup, Some(target)) => {
                    shared_vcpus += vm.vcpus.len();
                    if vm.cpu_group.as_ref() != Some(target) {
                        groups.push(Action::JoinGroup {
                            vm: vm.name.clone(),
                            pid: vm.pid,
                            group: target.clone(),
                            from: vm.cpu_group.clone(),
                            reason: format!(
                                "fairness: in one group with the other shared VMs the scheduler weighs its {} vCPU thread(s) one by one; in a group of its own it would get one VM's share whatever its size",
                                vm.vcpus.len()
                            ),
                        });
                    }
                }
                (Fairness::SharedGroup, None) => warnings.push(format!(
                    "{}: no cpu controller mounted: fairness not applied",
                    vm.name
                )),
                (Fairness::Weights, _) => match &vm.cpu_group {
                    Some(g) if own.contains(g.dir.as_str()) => {
                        let value = clamp_weight(g, vm.vcpus.len());
                        if vm.cpu_weight != Some(value) {
                            let (unit, ..) = g.weight_unit();
                            weights.push(Action::CpuWeight {
                                vm: vm.name.clone(),
                                pid: vm.pid,
                                group: g.clone(),
                                value,
                                from: vm.cpu_weight,
                                via: vm.knob.clone(),
                                reason: format!(
                                    "fairness: {} vCPU(s) x the default weight {unit}, so the VM's group gets CPU in proportion to its vCPUs, not one VM's share",
                                    vm.vcpus.len()
                                ),
                            });
                        }
                    }
                    _ => warnings.push(format!(
                        "{}: has no cpu group of its own (it shares {}): per-VM weight not set",
                        vm.name,
                        vm.cpu_group.as_ref().map_or("none", |g| g.dir.as_str())
                    )),
                },
                (Fairness::None, _) => {}
            }
        }
        for (idx, tid, cpus) in &p.vcpus {
            let Some((_, t)) = vm.vcpus.iter().find(|(_, t)| t.tid == *tid) else {
                continue;
            };
            if &t.cpus_allowed != cpus {
                affinity.push(Action::Affinity {
                    vm: vm.name.clone(),
                    pid: vm.pid,
                    tid: *tid,
                    vcpu: Some(*idx),
                    cpus: cpus.clone(),
                    from: t.cpus_allowed.clone(),
                    via: vm.knob.clone(),
                    // The mapping's reasoning is said once, in the plan.
                    reason: if p.mapping.is_some() {
                        crate::mapping::ACTION_REASON.to_string()
                    } else {
                        p.reasons.first().cloned().unwrap_or_default()
                    },
                });
            }
        }
        for t in &vm.others {
            if !p.other_cpus.is_empty() && t.cpus_allowed != p.other_cpus {
                affinity.push(Action::Affinity {
                    vm: vm.name.clone(),
                    pid: vm.pid,
                    tid: t.tid,
                    vcpu: None,
                    cpus: p.other_cpus.clone(),
                    from: t.cpus_allowed.clone(),
                    via: vm.knob.clone(),
                    reason: "emulator/I/O thread: on housekeeping CPUs when there are any, else with its VM's vCPUs".into(),
                });
            }
        }
        if let (Some(node), Some(m)) = (p.node, &vm.mem_by_node) {
            let from: BTreeMap<u32, u64> = m
                .iter()
                .filter(|(n, b)| **n != node && **b > 0)
                .map(|(n, b)| (*n, *b))
                .collect();
            let bytes: u64 = from.values().sum();
            if bytes >= cfg.migrate_min_mib << 20 {
                memory.push(Action::MigrateMemory {
                    vm: vm.name.clone(),
                    pid: vm.pid,
                    to_node: node,
                    bytes,
                    from_nodes: from,
                    via: vm.knob.clone(),
                    reason: format!(
                        "memory follows the vCPUs to node {node}: remote accesses cost latency and bandwidth; moved in {} MiB steps after checking free memory, swap headroom and memory pressure",
                        cfg.mem_step_mib
                    ),
                });
            }
        }
    }
    if let (Some(g), true) = (&shared_group, shared_vcpus > 0) {
        let (unit, ..) = g.weight_unit();
        let value = clamp_weight(g, shared_vcpus);
        if host.shared_group_weight != Some(value) {
            weights.insert(
            0,
            Action::CpuWeight {
                vm: SHARED_GROUP_VM.into(),
                pid: 0,
                group: g.clone(),
                value,
                from: host.shared_group_weight,
                via: Knob::Direct,
                reason: format!(
                    "the shared group weighs as its {shared_vcpus} vCPU thread(s) would at top level ({unit} each) against the host's other groups"
                ),
            },
        );
        }
    }
    let mut all = groups;
    all.extend(weights);
    all.extend(affinity);
    all.extend(memory);
    (all, warnings)
}
