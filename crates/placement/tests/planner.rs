//! Planner behaviour on synthetic hosts: what it decides, the reasons it
//! gives, and invariants that must hold on any input.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use stealscope_placement::plan::Class;
use stealscope_placement::synthetic::{host, random_host, vm};
use stealscope_placement::{plan, Action, Config, Fairness, History};

const GIB: u64 = 1 << 30;

fn cfg() -> Config {
    Config::default()
}

/// The mapping's tests: `auto` pins overcommitted pools of busy vCPUs.
fn auto() -> Config {
    Config {
        vcpu_mapping: stealscope_placement::VcpuMapping::Auto,
        ..cfg()
    }
}

fn vm_plan(p: &stealscope_placement::Plan, pid: u32) -> &stealscope_placement::VmPlan {
    p.vms.iter().find(|v| v.pid == pid).unwrap()
}

/// Asserts that `p` puts on `node` at least one of the VMs `pick` keeps,
/// and that the first of them says what its move saves.
fn moved_saying_what_it_saves(
    p: &stealscope_placement::Plan,
    node: u32,
    pick: impl Fn(u32) -> bool,
) {
    let moved: Vec<&stealscope_placement::VmPlan> = p
        .vms
        .iter()
        .filter(|v| pick(v.pid) && v.node == Some(node))
        .collect();
    assert!(!moved.is_empty(), "{:#?}", p.vms);
    assert!(
        moved[0]
            .reasons
            .iter()
            .any(|r| r.contains("CPU-s of waiting")),
        "{:?}",
        moved[0].reasons
    );
}

#[test]
fn dedicated_vm_gets_whole_cores_no_one_else_shares() {
    let mut h = host(2, 8, true, 64 * GIB, 0.5);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(10, 3, 1.0, 4 * GIB, 1, &all));
    h.vms.push(vm(11, 4, 0.5, 2 * GIB, 1, &all));
    let c = Config {
        dedicated: vec!["vm10".into()],
        ..cfg()
    };
    let p = plan(&h, &c, &History::default(), 0.0);
    let d = vm_plan(&p, 10);
    assert_eq!(d.class, Class::Dedicated);
    assert_eq!(
        d.node,
        Some(1),
        "stays where its memory is: {:?}",
        d.reasons
    );
    let mine: Vec<u32> = d
        .vcpus
        .iter()
        .map(|(_, _, c)| {
            assert_eq!(c.len(), 1);
            c[0]
        })
        .collect();
    // 3 vCPUs take two whole cores: the 4th sibling is held idle.
    let cores: BTreeSet<&Vec<u32>> = h
        .topology
        .cores
        .iter()
        .filter(|c| c.iter().any(|x| mine.contains(x)))
        .collect();
    assert_eq!(cores.len(), 2);
    let held: BTreeSet<u32> = cores.iter().flat_map(|c| c.iter().copied()).collect();
    assert!(
        d.reasons.iter().any(|r| r.contains("left idle")),
        "{:?}",
        d.reasons
    );
    let s = vm_plan(&p, 11);
    for (_, _, cpus) in &s.vcpus {
        assert!(
            cpus.iter().all(|c| !held.contains(c)),
            "shared VM on a dedicated core: {cpus:?}"
        );
    }
}

#[test]
fn shared_vms_are_spread_by_demand_and_stay_in_one_node() {
    let mut h = host(2, 4, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    // Four busy 2-vCPU VMs with memory on node 0: two must go to node 1.
    for pid in 1..=4 {
        h.vms.push(vm(pid, 2, 1.0, GIB, 0, &all));
    }
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    let mut per_node: BTreeMap<u32, usize> = BTreeMap::new();
    for v in &p.vms {
        let n = v.node.expect("each fits one node");
        *per_node.entry(n).or_default() += 1;
        let node_cpus = &h.topology.nodes[n as usize].cpus;
        assert!(v
            .vcpus
            .iter()
            .all(|(_, _, c)| c.iter().all(|x| node_cpus.contains(x))));
    }
    assert_eq!(per_node, BTreeMap::from([(0, 2), (1, 2)]));
    // The VMs that moved get their memory moved, with the numbers in the action.
    let moves: Vec<&Action> = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::MigrateMemory { .. }))
        .collect();
    assert_eq!(moves.len(), 2);
    for a in moves {
        let Action::MigrateMemory { to_node, bytes, .. } = a else {
            unreachable!()
        };
        assert_eq!((*to_node, *bytes), (1, GIB));
    }
}

#[test]
fn a_fresh_vm_goes_where_the_vms_already_placed_leave_room() {
    let mut h = host(2, 4, false, 64 * GIB, 0.8);
    let n0 = h.topology.nodes[0].cpus.clone();
    let n1 = h.topology.nodes[1].cpus.clone();
    let all = h.topology.cpus.clone();
    // Node 0 carries three busy 1-vCPU VMs, node 1 one: both bound there.
    for pid in 1..=3 {
        h.vms.push(vm(pid, 1, 0.9, GIB, 0, &n0));
    }
    h.vms.push(vm(4, 1, 0.9, GIB, 1, &n1));
    // A fresh 2-vCPU VM (planned first: the biggest) with its memory
    // spread evenly and its vCPUs anywhere: on no node yet.
    let mut fresh = vm(5, 2, 0.5, GIB, 0, &all);
    fresh.mem_by_node = Some(BTreeMap::from([(0, GIB / 2), (1, GIB / 2)]));
    h.vms.push(fresh);
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    let f = vm_plan(&p, 5);
    assert_eq!(f.node, Some(1), "{:?}", f.reasons);
    // The placed VMs stay: node 0 holds its 2.7 CPUs of demand.
    for pid in 1..=3 {
        assert_eq!(vm_plan(&p, pid).node, Some(0));
    }
    // Pressure after the plan: node 0 2.7 / 4, node 1 (0.9 + 1.0) / 4.
    assert!(
        (p.node_pressure[&0] - 0.675).abs() < 0.01,
        "{:?}",
        p.node_pressure
    );
    assert!(
        (p.node_pressure[&1] - 0.475).abs() < 0.01,
        "{:?}",
        p.node_pressure
    );
}

#[test]
fn a_node_without_room_for_the_memory_is_not_chosen_and_the_reason_has_numbers() {
    let mut h = host(2, 4, false, 16 * GIB, 0.1); // 1.6 GiB free per node
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 4, 1.0, 8 * GIB, 0, &all));
    h.vms.push(vm(2, 4, 1.0, 8 * GIB, 0, &all));
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    // Both stay on node 0 (their memory cannot go to node 1).
    assert!(p.vms.iter().all(|v| v.node == Some(0)), "{:#?}", p.vms);
    assert!(!p
        .actions
        .iter()
        .any(|a| matches!(a, Action::MigrateMemory { .. })));
    let over = p
        .warnings
        .iter()
        .find(|w| w.contains("node 0: shared demand 8.00 CPUs on 4 pool CPUs"))
        .is_some();
    assert!(over, "{:?}", p.warnings);
    // A third VM too big for either node's memory spans nodes, saying why.
    h.vms.push(vm(3, 2, 1.0, 4 * GIB, 5, &all));
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    let v = vm_plan(&p, 3);
    assert_eq!(v.node, None);
    assert!(
        v.reasons
            .iter()
            .any(|r| r.contains("spans nodes") && r.contains("MiB free, needs 4096 MiB")),
        "{:?}",
        v.reasons
    );
}

#[test]
fn a_vm_whose_own_memory_policy_binds_it_stays_where_the_policy_allows() {
    use stealscope_readers::mempolicy::Confinement;
    let mut h = host(2, 4, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    // Four busy 2-vCPU VMs with memory on node 0, as in the spreading test:
    // two would go to node 1, but VMs 1-3 have their memory bound to node 0
    // by their owner (numa_maps "bind:0"), so only VM 4 may move.
    for pid in 1..=4 {
        let mut v = vm(pid, 2, 1.0, GIB, 0, &all);
        if pid < 4 {
            v.mem_policy = Some(Confinement::from_numa_maps(&format!(
                "7f0000000000 bind:0 anon={p} N0={p} kernelpagesize_kB=4\n",
                p = GIB / 4096
            )));
        }
        h.vms.push(v);
    }
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    for pid in 1..=3 {
        let v = vm_plan(&p, pid);
        assert_eq!(v.node, Some(0), "{:?}", v.reasons);
        assert!(
            v.reasons
                .iter()
                .any(|r| r.contains("own memory policy (bind:0 on 1024 MiB) allows node 0")),
            "{:?}",
            v.reasons
        );
    }
    assert_eq!(vm_plan(&p, 4).node, Some(1));
    let moves: Vec<u32> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::MigrateMemory { pid, .. } => Some(*pid),
            _ => None,
        })
        .collect();
    assert_eq!(moves, vec![4]);
    // Interleaved over both nodes by its owner: no single node is right, so
    // it spans them and its memory stays interleaved, the reason naming it.
    let mut h2 = host(2, 4, false, 64 * GIB, 0.8);
    let all2 = h2.topology.cpus.clone();
    let mut wide = vm(9, 2, 1.0, GIB, 1, &all2);
    wide.mem_policy = Some(Confinement::from_numa_maps(
        "7f00 interleave:0-1 anon=262144 N0=131072 N1=131072\n",
    ));
    h2.vms.push(wide);
    let p2 = plan(&h2, &cfg(), &History::default(), 0.0);
    let v = vm_plan(&p2, 9);
    assert_eq!(v.node, None);
    assert!(
        v.reasons.iter().any(|r| r.contains("spans nodes")
            && r.contains("node 1: the VM's own memory policy keeps its memory off this node (interleave:0-1 on 1024 MiB)")),
        "{:?}",
        v.reasons
    );
}

#[test]
fn hysteresis_and_minimum_interval_keep_vms_still() {
    let mut h = host(2, 4, false, 64 * GIB, 0.8);
    let n0: Vec<u32> = h.topology.nodes[0].cpus.clone();
    // Three busy 1-vCPU VMs on node 0: 0.75 CPUs of demand per CPU there,
    // none on node 1. The node holds them: no move buys anything.
    for pid in 1..=3 {
        h.vms.push(vm(pid, 1, 1.0, GIB, 0, &n0));
    }
    let p = plan(&h, &cfg(), &History::default(), 1000.0);
    assert!(p.vms.iter().all(|v| v.node == Some(0)), "{:#?}", p.vms);
    assert!(
        p.vms
            .iter()
            .flat_map(|v| &v.reasons)
            .any(|r| r.contains("no steal to save by moving")),
        "{:?}",
        p.vms[0].reasons
    );
    // Six: node 0 overcommitted (1.5). Within a wide hysteresis they stay...
    for pid in 4..=6 {
        h.vms.push(vm(pid, 1, 1.0, GIB, 0, &n0));
    }
    let c = Config {
        hysteresis: 2.0,
        ..cfg()
    };
    let p = plan(&h, &c, &History::default(), 1000.0);
    assert!(p.vms.iter().all(|v| v.node == Some(0)));
    assert!(p
        .vms
        .iter()
        .flat_map(|v| &v.reasons)
        .any(|r| r.contains("within the hysteresis")));
    // ...with the default one the last placed move, saying what it saves...
    let p = plan(&h, &cfg(), &History::default(), 1000.0);
    moved_saying_what_it_saves(&p, 1, |_| true);
    // ...unless they moved less than min_move_interval_s ago.
    let mut hist = History::default();
    for pid in 1..=6 {
        hist.record(pid, Some(0), 900.0);
    }
    let p = plan(&h, &cfg(), &hist, 1000.0);
    assert!(p.vms.iter().all(|v| v.node == Some(0)), "{:#?}", p.vms);
    assert!(p
        .vms
        .iter()
        .any(|v| v.reasons.iter().any(|r| r.contains("moved 100 s ago"))));
}

#[test]
fn fairness_shared_group_and_weights() {
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 2, 1.0, GIB, 0, &all));
    h.vms.push(vm(2, 1, 1.0, GIB, 0, &all));
    h.vms.push(vm(3, 1, 1.0, GIB, 0, &all));
    let p = plan(&h, &shared_group(), &History::default(), 0.0);
    let joins = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::JoinGroup { .. }))
        .count();
    assert_eq!(joins, 3);
    let w: Vec<u64> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CpuWeight { value, .. } => Some(*value),
            _ => None,
        })
        .collect();
    assert_eq!(w, vec![4 * 1024], "group weighs as its 4 vCPU threads");
    let c = Config {
        fairness: Fairness::Weights,
        ..cfg()
    };
    let p = plan(&h, &c, &History::default(), 0.0);
    let w: BTreeMap<u32, u64> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CpuWeight { pid, value, .. } => Some((*pid, *value)),
            _ => None,
        })
        .collect();
    // vm1 has 2 vCPUs: 2048; the others already have 1024: no action.
    assert_eq!(w, BTreeMap::from([(1, 2048)]));
}

fn shared_group() -> Config {
    Config {
        fairness: Fairness::SharedGroup,
        ..cfg()
    }
}

fn weights_of(p: &stealscope_placement::Plan) -> BTreeMap<u32, u64> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::CpuWeight { pid, value, .. } => Some((*pid, *value)),
            _ => None,
        })
        .collect()
}

/// The default (`auto`): per-VM groups left alone while the pool has room,
/// weighed by vCPUs while it is overcommitted by half, and the weight this
/// rule set given back once the pool has room again.
#[test]
fn auto_fairness_weighs_only_overcommitted_pools() {
    assert_eq!(cfg().fairness, Fairness::Auto);
    let all: Vec<u32> = (0..2).collect();
    let with = |util: f64, weight: u64| {
        let mut h = host(1, 2, false, 64 * GIB, 0.8);
        h.vms.push(vm(1, 2, util, GIB, 0, &all));
        h.vms.push(vm(2, 1, util, GIB, 0, &all));
        h.vms.push(vm(3, 1, util, GIB, 0, &all));
        h.vms[0].cpu_weight = Some(weight);
        h
    };
    let joins = |p: &stealscope_placement::Plan| {
        p.actions
            .iter()
            .filter(|a| matches!(a, Action::JoinGroup { .. }))
            .count()
    };
    // 4 busy vCPUs on 2 CPUs (2.0 per CPU): vm1's 2 vCPUs weigh 2048.
    let p = plan(&with(1.0, 1024), &cfg(), &History::default(), 0.0);
    assert_eq!(weights_of(&p), BTreeMap::from([(1, 2048)]));
    assert_eq!(joins(&p), 0, "no shared group");
    // 1.2 CPUs of demand on 2: left alone.
    let p = plan(&with(0.3, 1024), &cfg(), &History::default(), 0.0);
    assert!(weights_of(&p).is_empty(), "{:?}", p.actions);
    // Weighed earlier, now with room: back to the default weight...
    let p = plan(&with(0.3, 2048), &cfg(), &History::default(), 0.0);
    assert_eq!(weights_of(&p), BTreeMap::from([(1, 1024)]));
    // ...but a weight the operator set otherwise stays.
    let p = plan(&with(0.3, 3000), &cfg(), &History::default(), 0.0);
    assert!(weights_of(&p).is_empty(), "{:?}", p.actions);
    // Between the two thresholds (1.4 per CPU): as it is, either way.
    for w in [1024, 2048] {
        let p = plan(&with(0.7, w), &cfg(), &History::default(), 0.0);
        assert!(weights_of(&p).is_empty(), "{w}: {:?}", p.actions);
    }
}

/// VMs in the root cpu group, each in an autogroup of its own (`qemu
/// -daemonize` on a host without libvirt): the weight goes through the
/// autogroup's nice, the nearest to vCPUs x 1024 (2 vCPUs: nice -3, weight
/// 1991), by `weights` always and by `auto` while overcommitted by half;
/// never through an autogroup another process shares.
#[test]
fn vms_in_autogroups_are_weighed_through_the_autogroups_nice() {
    use stealscope_placement::input::VmAutogroup;
    let all: Vec<u32> = (0..2).collect();
    let with = |util: f64, nice: i32, shared: Vec<u32>| {
        let mut h = host(1, 2, false, 64 * GIB, 0.8);
        for (pid, vcpus) in [(1, 2), (2, 1), (3, 1)] {
            let mut v = vm(pid, vcpus, util, GIB, 0, &all);
            v.cpu_group = Some(stealscope_placement::CgroupRef {
                v2: false,
                dir: "/sys/fs/cgroup/cpu".into(),
            });
            v.cpu_weight = Some(1024);
            v.autogroup = Some(VmAutogroup {
                id: 100 + u64::from(pid),
                nice: 0,
                shared_with: Vec::new(),
            });
            h.vms.push(v);
        }
        h.cpu_controller = Some(stealscope_placement::input::CpuController {
            v2: false,
            mount: "/sys/fs/cgroup/cpu".into(),
        });
        let ag = h.vms[0].autogroup.as_mut().unwrap();
        ag.nice = nice;
        ag.shared_with = shared;
        h
    };
    let nices = |p: &stealscope_placement::Plan| -> BTreeMap<u32, (u64, i32, Option<i32>)> {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::AutogroupNice {
                    pid,
                    autogroup,
                    value,
                    from,
                    ..
                } => Some((*pid, (*autogroup, *value, *from))),
                _ => None,
            })
            .collect()
    };
    let weights = Config {
        fairness: Fairness::Weights,
        ..cfg()
    };
    // `weights`: the 2-vCPU VM's autogroup to nice -3; the 1-vCPU VMs are
    // at their weight already. No cgroup weight is written.
    let p = plan(&with(0.3, 0, vec![]), &weights, &History::default(), 0.0);
    assert_eq!(nices(&p), BTreeMap::from([(1, (101, -3, Some(0)))]));
    assert!(weights_of(&p).is_empty(), "{:?}", p.actions);
    assert!(
        p.warnings.iter().all(|w| !w.contains("vm1")),
        "{:?}",
        p.warnings
    );
    // An autogroup another process is in: not weighed, and said why.
    let p = plan(&with(0.3, 0, vec![77]), &weights, &History::default(), 0.0);
    assert!(nices(&p).is_empty(), "{:?}", p.actions);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("vm1") && w.contains("autogroup-101") && w.contains("77")),
        "{:?}",
        p.warnings
    );
    // `auto`: weighed at 2.0 per CPU, left at 1.2, given back at 1.2 when
    // this rule set it, kept at 1.4 either way.
    let p = plan(&with(1.0, 0, vec![]), &cfg(), &History::default(), 0.0);
    assert_eq!(nices(&p), BTreeMap::from([(1, (101, -3, Some(0)))]));
    let p = plan(&with(0.3, 0, vec![]), &cfg(), &History::default(), 0.0);
    assert!(nices(&p).is_empty(), "{:?}", p.actions);
    let p = plan(&with(0.3, -3, vec![]), &cfg(), &History::default(), 0.0);
    assert_eq!(nices(&p), BTreeMap::from([(1, (101, 0, Some(-3)))]));
    let p = plan(&with(0.3, -5, vec![]), &cfg(), &History::default(), 0.0);
    assert!(
        nices(&p).is_empty(),
        "an operator's nice stays: {:?}",
        p.actions
    );
    for n in [0, -3] {
        let p = plan(&with(0.7, n, vec![]), &cfg(), &History::default(), 0.0);
        assert!(nices(&p).is_empty(), "{n}: {:?}", p.actions);
    }
}

/// place_libvirt's host: CPU 0 for housekeeping, a busy 2-vCPU VM on the
/// one pool CPU left. No single node fits it (it spans), and the pool it
/// spans is overcommitted (2.0 per CPU): auto weighs it as it would a VM
/// on one node.
#[test]
fn auto_fairness_weighs_a_vm_that_spans_an_overcommitted_pool() {
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 2, 1.0, GIB, 0, &all));
    h.vms[0].cpu_weight = Some(1024);
    let c = Config {
        housekeeping_cpus: "0".into(),
        ..cfg()
    };
    let p = plan(&h, &c, &History::default(), 0.0);
    assert_eq!(
        weights_of(&p),
        BTreeMap::from([(1, 2048)]),
        "{:?}",
        p.actions
    );
}

#[test]
fn conflicts_refuse_unless_overridden() {
    let mut h = host(2, 2, false, 8 * GIB, 0.5);
    h.numa_balancing = Some(1);
    h.numad_running = true;
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    let r = p.refused.expect("refused");
    assert!(r.contains("numa_balancing=0") && r.contains("numad"), "{r}");
    let c = Config {
        override_conflicts: true,
        ..cfg()
    };
    let p = plan(&h, &c, &History::default(), 0.0);
    assert!(p.refused.is_none() && p.warnings.len() == 2);
}

#[test]
fn housekeeping_cpus_take_emulator_threads_and_no_vcpu() {
    let mut h = host(1, 4, false, 8 * GIB, 0.5);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 2, 1.0, GIB, 0, &all));
    let c = Config {
        housekeeping_cpus: "0".into(),
        ..cfg()
    };
    let p = plan(&h, &c, &History::default(), 0.0);
    let v = vm_plan(&p, 1);
    assert_eq!(v.other_cpus, vec![0]);
    assert!(v.vcpus.iter().all(|(_, _, cpus)| cpus == &vec![1, 2, 3]));
}

#[test]
fn a_placed_host_needs_no_actions() {
    let h0 = random_host(7, 2, 8, 12);
    let p = plan(&h0, &cfg(), &History::default(), 0.0);
    // Apply the plan to the input as the appliers would, then plan again.
    let mut h = h0.clone();
    for vm in &mut h.vms {
        let vp = vm_plan(&p, vm.pid);
        for (_, t) in &mut vm.vcpus {
            t.cpus_allowed = vp
                .vcpus
                .iter()
                .find(|(_, tid, _)| *tid == t.tid)
                .unwrap()
                .2
                .clone();
        }
        for t in &mut vm.others {
            t.cpus_allowed = vp.other_cpus.clone();
        }
        if let Some(n) = vp.node {
            let total = vm.mem_bytes().unwrap();
            vm.mem_by_node = Some(BTreeMap::from([(n, total)]));
        }
        vm.cpu_group = Some(
            h.cpu_controller
                .as_ref()
                .unwrap()
                .group("/stealscope.shared"),
        );
    }
    let mut hist = History::default();
    for v in &p.vms {
        hist.record(v.pid, v.node, 0.0);
    }
    let again = plan(&h, &cfg(), &hist, 10.0);
    let non_weight: Vec<&Action> = again
        .actions
        .iter()
        .filter(|a| !matches!(a, Action::CpuWeight { .. }))
        .collect();
    assert!(non_weight.is_empty(), "{non_weight:#?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn invariants_hold_on_random_hosts(seed in any::<u64>(), nodes in 1u32..5, cpn in 1u32..17, vms in 0u32..60, hk in 0u32..3, ded in 0u32..4) {
        let h = random_host(seed, nodes, cpn, vms);
        let c = Config {
            housekeeping_cpus: if hk == 0 { String::new() } else { format!("0-{}", hk - 1) },
            dedicated: (0..ded).map(|i| format!("vm{}", 1000 + i * 3)).collect(),
            ..cfg()
        };
        let p = plan(&h, &c, &History::default(), 0.0);
        let online: BTreeSet<u32> = h.topology.cpus.iter().copied().collect();
        let housekeeping: BTreeSet<u32> = c.housekeeping().unwrap().into_iter().filter(|x| online.contains(x)).collect();
        let hk_used = !housekeeping.is_empty() && housekeeping.len() < online.len();
        prop_assert_eq!(p.vms.len(), h.vms.len());
        let mut dedicated_cpus = BTreeSet::new();
        for v in &p.vms {
            prop_assert_eq!(v.vcpus.len(), h.vms.iter().find(|x| x.pid == v.pid).unwrap().vcpus.len());
            for (_, _, cpus) in &v.vcpus {
                prop_assert!(!cpus.is_empty());
                prop_assert!(cpus.iter().all(|x| online.contains(x)));
                if hk_used { prop_assert!(cpus.iter().all(|x| !housekeeping.contains(x))); }
                // A spilled VM's vCPUs may use every node's pool (its memory
                // is not moved meanwhile); any other stays inside its node.
                if let (Some(n), None) = (v.node, &v.spill) {
                    let ncpus = &h.topology.nodes[n as usize].cpus;
                    prop_assert!(cpus.iter().all(|x| ncpus.contains(x)));
                }
                if v.class == Class::Dedicated {
                    prop_assert!(dedicated_cpus.insert(cpus[0]), "dedicated CPU given twice");
                }
            }
            prop_assert!(!v.reasons.is_empty());
        }
        for v in p.vms.iter().filter(|v| v.class == Class::Shared) {
            for (_, _, cpus) in &v.vcpus {
                prop_assert!(cpus.iter().all(|x| !dedicated_cpus.contains(x)));
            }
        }
        for a in &p.actions {
            prop_assert!(!a.reason().is_empty());
            // Memory moves only to the node holding every CPU its VM's
            // vCPUs may run on (never ahead of them, as for a spilled VM).
            if let Action::MigrateMemory { pid, to_node, .. } = a {
                let v = p.vms.iter().find(|v| v.pid == *pid).unwrap();
                let ncpus = &h.topology.nodes[*to_node as usize].cpus;
                prop_assert!(v.vcpus.iter().all(|(_, _, c)| c.iter().all(|x| ncpus.contains(x))), "{:?}", v);
            }
        }
    }
}

#[test]
fn the_node_of_a_vm_is_the_one_holding_every_vcpu_mask() {
    use stealscope_placement::synthetic::{host, vm};
    let h = host(2, 4, false, 8 << 30, 0.5);
    let node_of = h.topology.node_of_cpus();
    // Every CPU maps to the node whose CPU list holds it.
    for n in &h.topology.nodes {
        for c in &n.cpus {
            assert_eq!(node_of[*c as usize], Some(n.id));
        }
    }
    let inside = vm(1, 2, 0.5, 1 << 30, 0, &h.topology.nodes[1].cpus);
    assert_eq!(inside.cpus_node(&node_of), Some(1));
    let spanning = vm(2, 2, 0.5, 1 << 30, 0, &[0, 4]);
    assert_eq!(spanning.cpus_node(&node_of), None);
    let offline = vm(3, 1, 0.5, 1 << 30, 0, &[0, 99]);
    assert_eq!(offline.cpus_node(&node_of), None, "a CPU of no node");
    let mut empty = vm(4, 1, 0.5, 1 << 30, 0, &[]);
    empty.vcpus.clear();
    assert_eq!(empty.cpus_node(&node_of), None);
}

/// Applies a plan's vCPU masks to the input, as `place apply` would.
fn applied(
    h: &stealscope_placement::HostInput,
    p: &stealscope_placement::Plan,
) -> stealscope_placement::HostInput {
    let mut h = h.clone();
    for vm in &mut h.vms {
        let vp = vm_plan(p, vm.pid);
        for (_, t) in &mut vm.vcpus {
            t.cpus_allowed = vp
                .vcpus
                .iter()
                .find(|(_, tid, _)| *tid == t.tid)
                .unwrap()
                .2
                .clone();
        }
    }
    h
}

/// The talk's experiment on two CPUs: VM A with 2 busy vCPUs, B and C with 1.
fn two_cpu_host(util: f64) -> stealscope_placement::HostInput {
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 2, util, GIB, 0, &all));
    h.vms.push(vm(2, 1, util, GIB, 0, &all));
    h.vms.push(vm(3, 1, util, GIB, 0, &all));
    h
}

/// CPU -> (threads, demand) of a plan's pinned vCPUs; None if any is not pinned.
fn per_cpu(
    h: &stealscope_placement::HostInput,
    p: &stealscope_placement::Plan,
) -> Option<BTreeMap<u32, (usize, f64)>> {
    let mut m: BTreeMap<u32, (usize, f64)> = BTreeMap::new();
    for v in &p.vms {
        let input = h.vms.iter().find(|x| x.pid == v.pid).unwrap();
        for (_, tid, cpus) in &v.vcpus {
            if cpus.len() != 1 {
                return None;
            }
            let util = input
                .vcpus
                .iter()
                .find(|(_, t)| t.tid == *tid)
                .unwrap()
                .1
                .util
                .unwrap();
            let e = m.entry(cpus[0]).or_default();
            e.0 += 1;
            e.1 += util;
        }
    }
    Some(m)
}

#[test]
fn an_overcommitted_pool_is_pinned_one_vcpu_per_cpu_balanced_and_stays_so() {
    let h = two_cpu_host(1.0);
    let p = plan(&h, &auto(), &History::default(), 0.0);
    // 4 busy vCPUs on 2 CPUs: demand 2.0 per CPU, pinned 2 + 2.
    let m = per_cpu(&h, &p).expect("every vCPU pinned");
    assert_eq!(m.len(), 2, "{m:?}");
    for (cpu, (n, d)) in &m {
        assert_eq!(*n, 2, "CPU {cpu}: {m:?}");
        assert!((d - 2.0).abs() < 1e-9, "CPU {cpu}: {m:?}");
    }
    // A's two vCPUs are on different CPUs (they never run at once otherwise).
    let a = vm_plan(&p, 1);
    assert_ne!(a.vcpus[0].2, a.vcpus[1].2);
    assert!(
        a.reasons.iter().any(|r| r.contains("see `vCPU mapping`")),
        "{:?}",
        a.reasons
    );
    let why = a.mapping.as_deref().unwrap_or_default();
    assert!(
        why.contains("overcommitted: 2.00 CPUs of demand per pool CPU")
            && why.contains("every CPU carries the same demand"),
        "{why}"
    );
    let aff: Vec<&Action> = p
        .actions
        .iter()
        .filter(|x| matches!(x, Action::Affinity { vcpu: Some(_), .. }))
        .collect();
    assert_eq!(aff.len(), 4);
    for x in aff {
        let Action::Affinity { reason, .. } = x else {
            unreachable!()
        };
        // The why is said once, in the plan's mapping, not per action.
        assert!(reason.starts_with("balanced vCPU mapping (see"), "{reason}");
    }
    // Applied, then planned again with slightly different measurements: no move.
    let mut again = applied(&h, &p);
    for (k, vm) in again.vms.iter_mut().enumerate() {
        for (_, t) in &mut vm.vcpus {
            t.util = Some(0.97 + 0.01 * k as f64);
        }
    }
    let p2 = plan(&again, &auto(), &History::default(), 10.0);
    assert!(
        !p2.actions
            .iter()
            .any(|x| matches!(x, Action::Affinity { .. })),
        "{:#?}",
        p2.actions
    );
}

#[test]
fn a_pool_with_room_is_left_to_the_balancer_and_auto_has_hysteresis() {
    // 4 vCPUs at 0.3: 0.6 CPUs of demand per CPU: the whole pool each.
    let h = two_cpu_host(0.3);
    let p = plan(&h, &auto(), &History::default(), 0.0);
    assert!(per_cpu(&h, &p).is_none());
    assert!(p
        .vms
        .iter()
        .all(|v| v.vcpus.iter().all(|(_, _, c)| c == &vec![0, 1])));
    assert!(p.vms.iter().all(|v| v.mapping.is_none()));
    // Pinned earlier, now at 0.95 of pin_above: stays pinned; at 0.85:
    // released; with vCPUs at half a CPU (demand that comes and goes):
    // released whatever the pressure.
    let pinned = applied(
        &h,
        &plan(&two_cpu_host(1.0), &auto(), &History::default(), 0.0),
    );
    for (utils, stays) in [
        ([1.0, 0.9, 0.0, 0.0], true),
        ([0.85, 0.85, 0.0, 0.0], false),
        ([0.5, 0.5, 0.5, 0.5], false),
    ] {
        let util = utils;
        let mut x = pinned.clone();
        let mut u = utils.iter();
        for vm in &mut x.vms {
            for (_, t) in &mut vm.vcpus {
                t.util = Some(*u.next().unwrap());
            }
        }
        let p = plan(&x, &auto(), &History::default(), 0.0);
        assert_eq!(
            per_cpu(&x, &p).is_some(),
            stays,
            "demand {util:?}: {:?}",
            p.vms
        );
        if stays {
            assert!(vm_plan(&p, 1)
                .mapping
                .as_deref()
                .is_some_and(|r| r.contains("stays pinned")));
        }
    }
    // `pool` never pins, `pinned` always does.
    let pool = Config {
        vcpu_mapping: stealscope_placement::VcpuMapping::Pool,
        ..cfg()
    };
    assert!(per_cpu(
        &h,
        &plan(&two_cpu_host(1.0), &pool, &History::default(), 0.0)
    )
    .is_none());
    let always = Config {
        vcpu_mapping: stealscope_placement::VcpuMapping::Pinned,
        ..cfg()
    };
    let m = per_cpu(&h, &plan(&h, &always, &History::default(), 0.0)).expect("pinned");
    assert!(m.values().all(|(n, _)| *n == 2), "{m:?}");
}

/// The host: VM A with 2 busy vCPUs and B with 1 on 2 CPUs, none
/// pinned yet, measured with the noise of a busy host (run plus wait of a
/// spinning TCG vCPU read 0.87-1.05 in place_qemu): all plan one map.
#[test]
fn noisy_measurements_of_one_host_plan_the_same_map() {
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 2, 1.0, GIB, 0, &all));
    h.vms.push(vm(2, 1, 1.0, GIB, 0, &all));
    let measured = |utils: [f64; 3]| {
        let mut x = h.clone();
        let mut u = utils.iter();
        for vm in &mut x.vms {
            for (_, t) in &mut vm.vcpus {
                t.util = Some(*u.next().unwrap());
            }
        }
        let p = plan(&x, &auto(), &History::default(), 0.0);
        let map: Vec<String> = p
            .vms
            .iter()
            .map(|v| format!("{} {:?}", v.pid, v.vcpus))
            .collect();
        let acts: Vec<String> = p.actions.iter().map(|a| a.to_string()).collect();
        (map, acts)
    };
    let first = measured([1.0, 0.96, 0.99]);
    assert!(per_cpu(&h, &plan(&h, &auto(), &History::default(), 0.0)).is_some());
    for utils in [
        [0.95, 1.0, 1.0],
        [1.0, 1.0, 0.93],
        [0.97, 0.87, 1.0],
        [0.8, 1.0, 0.9],
    ] {
        assert_eq!(measured(utils), first, "measured {utils:?}");
    }
}

#[test]
fn the_hosts_own_light_work_does_not_flip_the_map() {
    // The map of a clean host, then the same host with the few hundredths
    // of a CPU a shell, a kworker or the daemon itself add on one CPU or
    // the other between two measurements (the live plan/apply pair that
    // flipped a VM between CPU 0 and CPU 1 with mirrored layouts).
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 1, 1.0, GIB, 0, &all));
    h.vms.push(vm(2, 2, 1.0, GIB, 0, &all));
    h.vms[1].vcpus[1].1.util = Some(0.0);
    let map = |x: &stealscope_placement::HostInput| {
        let p = plan(x, &cfg_pinned(), &History::default(), 0.0);
        p.vms
            .iter()
            .map(|v| format!("{} {:?}", v.pid, v.vcpus))
            .collect::<Vec<_>>()
    };
    let clean = map(&h);
    for (cpu0, cpu1) in [(0.08, 0.0), (0.0, 0.12), (0.2, 0.05)] {
        let mut x = h.clone();
        x.host_work.add(cpu0, &[0], &all);
        x.host_work.add(cpu1, &[1], &all);
        assert_eq!(map(&x), clean, "host work {cpu0} on CPU 0, {cpu1} on CPU 1");
    }
    // A whole CPU of it is not noise: the map moves off it.
    let mut x = h.clone();
    x.host_work.add(1.0, &[0], &all);
    assert_ne!(map(&x), clean);
}

fn cfg_pinned() -> Config {
    Config {
        vcpu_mapping: stealscope_placement::VcpuMapping::Pinned,
        ..cfg()
    }
}

#[test]
fn pinning_balances_demand_not_thread_counts() {
    // One busy 1-vCPU VM and four light ones on 2 CPUs (pressure 1.2): the
    // busy vCPU gets a CPU nearly to itself.
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 1, 1.0, GIB, 0, &all));
    for pid in 2..=5 {
        h.vms.push(vm(pid, 1, 0.35, GIB, 0, &all));
    }
    // `auto` leaves a pool of such swinging demand to the balancer...
    assert!(per_cpu(&h, &plan(&h, &auto(), &History::default(), 0.0)).is_none());
    // ...`pinned` maps it, by demand.
    let pinned = Config {
        vcpu_mapping: stealscope_placement::VcpuMapping::Pinned,
        ..cfg()
    };
    let p = plan(&h, &pinned, &History::default(), 0.0);
    let m = per_cpu(&h, &p).expect("pinned");
    let busy_cpu = vm_plan(&p, 1).vcpus[0].2[0];
    let (n, d) = m[&busy_cpu];
    assert_eq!(n, 2, "{m:?}");
    assert!((d - 1.35).abs() < 1e-9, "{m:?}");
    let other = m.iter().find(|(c, _)| **c != busy_cpu).unwrap().1;
    assert_eq!(other.0, 3, "{m:?}");
}

/// The walk-through: 2 CPUs, VM web (2 busy vCPUs), db (1 busy),
/// an idle VM, and a host loop `backup` pinned to CPU 0. The old map put
/// web's vCPU 0 and db on CPU 0 beside the loop ("CPU 0: 2.00, CPU 1:
/// 1.00") and weighed the shared group as 4 threads, and the loop got no
/// CPU for minutes.
#[test]
fn host_work_pinned_to_a_cpu_keeps_that_cpu_light_and_is_never_starved() {
    let mut h = host(1, 2, false, 64 * GIB, 0.8);
    let all = h.topology.cpus.clone();
    h.vms.push(vm(1, 2, 1.0, GIB, 0, &all)); // web
    h.vms.push(vm(2, 1, 1.0, GIB, 0, &all)); // db
    h.vms.push(vm(3, 1, 0.02, GIB, 0, &all)); // idle
    h.host_work.add(1.0, &[0], &all); // backup, pinned to CPU 0
    for mapping in [
        stealscope_placement::VcpuMapping::Auto,
        stealscope_placement::VcpuMapping::Pinned,
    ] {
        let c = Config {
            vcpu_mapping: mapping,
            ..shared_group()
        };
        let p = plan(&h, &c, &History::default(), 0.0);
        let m = per_cpu(&h, &p).expect("an overcommitted pool of busy vCPUs is pinned");
        let vcpu_load = |cpu: u32| m.get(&cpu).map_or(0.0, |x| x.1);
        // CPU 0 carries the loop: it gets the least vCPU demand, and with the
        // loop counted the two CPUs are within one vCPU of each other.
        assert!(vcpu_load(0) < vcpu_load(1), "{mapping:?}: {m:?}");
        assert!(
            ((vcpu_load(0) + 1.0) - vcpu_load(1)).abs() <= 1.0 + 1e-9,
            "{mapping:?}: {m:?}"
        );
        let why = vm_plan(&p, 1).mapping.clone().unwrap_or_default();
        assert!(why.contains("CPU 0: 2.0"), "{why}");
        // web's vCPUs never share a CPU.
        let web = vm_plan(&p, 1);
        assert_ne!(web.vcpus[0].2, web.vcpus[1].2);
        assert_no_starving_weight(&h, &p);
    }
    // Left to the balancer (the default), nothing is pinned beside it either.
    let p = plan(&h, &shared_group(), &History::default(), 0.0);
    assert!(per_cpu(&h, &p).is_none());
    assert_no_starving_weight(&h, &p);
    // The default fairness (`auto`, the pool at 2.0 per CPU with the loop):
    // each VM's group weighs at most a thread per vCPU, so on any CPU a VM's
    // group weighs no more than its threads there would at top level.
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    assert!(per_cpu(&h, &p).is_none());
    for (pid, w) in weights_of(&p) {
        let vcpus = h.vms.iter().find(|v| v.pid == pid).unwrap().vcpus.len() as u64;
        assert!(w <= 1024 * vcpus, "vm{pid}: weight {w} for {vcpus} vCPU(s)");
    }
    assert_eq!(
        weights_of(&p).get(&1),
        Some(&2048),
        "web weighs as its 2 vCPUs"
    );
}

/// The shared group's weight on each CPU (its weight x its demand there /
/// its demand everywhere, as the kernel splits a group's shares by load)
/// is never more than what its demand there would weigh as top-level
/// threads (1024 per CPU of demand, within a tenth), so a top-level task on
/// that CPU gets about a thread's share; the old weight (1024 per vCPU,
/// idle ones too) gave the group 4096 x 2 / 3 on CPU 0.
fn assert_no_starving_weight(h: &stealscope_placement::HostInput, p: &stealscope_placement::Plan) {
    let weight = p.actions.iter().find_map(|a| match a {
        Action::CpuWeight { vm, value, .. } if vm.as_str() == "(shared group)" => Some(*value),
        _ => None,
    });
    let weight = weight.expect("the plan sets the shared group's weight") as f64;
    let total: f64 = h.vms.iter().map(|v| v.demand()).sum();
    let by_cpu = per_cpu(h, p).unwrap_or_else(|| {
        // Unpinned: the balancer spreads the demand over both CPUs.
        BTreeMap::from([(0, (2, total / 2.0)), (1, (2, total / 2.0))])
    });
    for (cpu, (_, here)) in &by_cpu {
        let group_here = weight * here / total;
        // Within a tenth of what its demand there weighs as threads.
        let threads_here = 1024.0 * here.max(1.0) * 1.1;
        assert!(
            group_here <= threads_here,
            "CPU {cpu}: the group weighs {group_here:.0} with {here:.2} CPUs of vCPU demand (weight {weight})"
        );
    }
    assert!(weight <= 3.0 * 1024.0, "weight {weight} for 3 busy vCPUs");
}

/// Node 0 at 75 % of its CPUs, node 1 at 30 %: with vCPUs that want CPU
/// now and then (0.6 each) node 0 leaves some demand waiting, and a VM
/// moves when the waiting saved pays for the copy; with always-busy vCPUs
/// (1.0 each) the same loads leave none waiting, and nothing moves.
#[test]
fn an_uneven_pair_of_nodes_moves_a_vm_only_when_the_waiting_saved_pays() {
    let plan_for = |util: f64, on0: u32, on1: u32| {
        let mut h = host(2, 16, false, 64 * GIB, 0.8);
        let n0 = h.topology.nodes[0].cpus.clone();
        let n1 = h.topology.nodes[1].cpus.clone();
        for pid in 1..=on0 {
            h.vms.push(vm(pid, 2, util, GIB, 0, &n0));
        }
        for pid in on0 + 1..=on0 + on1 {
            h.vms.push(vm(pid, 2, util, GIB, 1, &n1));
        }
        plan(&h, &cfg(), &History::default(), 1000.0)
    };
    // 20 vCPUs at 0.6 on node 0 (12 CPUs of demand), 8 on node 1 (4.8).
    let p = plan_for(0.6, 10, 4);
    moved_saying_what_it_saves(&p, 1, |pid| pid <= 10);
    let after = p.node_pressure[&0];
    assert!(
        after < 0.75 && after >= p.node_pressure[&1],
        "{:?}",
        p.node_pressure
    );
    // 12 always-busy vCPUs on node 0's 16 CPUs, 4 on node 1: none waits.
    let p = plan_for(1.0, 6, 2);
    assert!(p
        .vms
        .iter()
        .all(|v| v.node == Some(if v.pid <= 6 { 0 } else { 1 })));
    assert!(p.actions.is_empty(), "{:#?}", p.actions);
}

/// A VM on no node yet that wants almost nothing is left where it is (no
/// placement change buys anything for it); once it wants more it is placed.
#[test]
fn a_nearly_idle_fresh_vm_is_left_unbound_until_it_wants_more() {
    let plan_for = |util: f64| {
        let mut h = host(2, 8, false, 64 * GIB, 0.8);
        let all = h.topology.cpus.clone();
        let mut v = vm(1, 2, util, 2 * GIB, 0, &all);
        v.mem_by_node = Some(BTreeMap::from([(0, GIB), (1, GIB)]));
        h.vms.push(v);
        plan(&h, &cfg(), &History::default(), 0.0)
    };
    let p = plan_for(0.02);
    let v = vm_plan(&p, 1);
    assert_eq!(v.node, None);
    assert!(p.actions.iter().all(|a| a.pid() != 1), "{:#?}", p.actions);
    assert!(
        v.reasons.iter().any(|r| r.contains("left where it is")),
        "{:?}",
        v.reasons
    );
    let p = plan_for(0.3);
    assert!(vm_plan(&p, 1).node.is_some());
    assert!(p.actions.iter().any(|a| a.pid() == 1));
}

/// Only a change that took effect moves a VM in the history the next pass
/// plans from.
#[test]
fn a_vm_whose_change_was_held_back_keeps_its_old_node() {
    // Three busy VMs on node 0 of a 2 x 4-CPU host: the planner spreads
    // them, so some change node and some do not.
    let mut h = host(2, 4, false, 16 * GIB, 0.8);
    let n0 = h.topology.nodes[0].cpus.clone();
    for pid in 1..=3 {
        h.vms.push(vm(pid, 2, 1.0, GIB, 0, &n0));
    }
    let p = plan(&h, &cfg(), &History::default(), 0.0);
    assert!(p.vms.iter().any(|v| v.node != Some(0)), "{:#?}", p.vms);
    let mut old = History::default();
    for pid in 1..=3 {
        old.record(pid, Some(0), -100.0);
    }
    // Nothing applied: every VM keeps node 0.
    let mut hist = old.clone();
    p.record_in(&mut hist, &[], 0.0);
    assert_eq!(hist, old);
    // All applied: every VM is where the plan put it.
    p.record_in(&mut hist, &p.actions, 0.0);
    for v in &p.vms {
        assert_eq!(hist.vms[&v.pid].node, v.node, "{}", v.pid);
    }
}
