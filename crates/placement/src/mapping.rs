//! Balanced vCPU mapping inside an overcommitted shared pool: each shared
//! vCPU thread pinned to one pool CPU so that every CPU carries the same
//! demand. Why: with more busy vCPU threads than CPUs the kernel's load
//! balancer does not keep an even layout. Measured on 2 CPUs with 2+1+1
//! busy vCPUs in one cpu group, it held 3+1 layouts for seconds, and the
//! spread between the most and least robbed vCPU was 1-55 pp (most rounds above 10) over 20 s
//! windows; pinned 2+2 by hand it was 0.6-2.1 pp, and by `place` within 5 pp
//! in 11 of 14 rounds (BENCHMARKS.md, issue 6). When the
//! pool is overcommitted every CPU is busy anyway, so pinning costs no idle
//! CPU; below that the pool is left to the balancer, which then uses idle
//! CPUs better than a fixed map would.
//!
//! The map is greedy by demand (largest first onto the least loaded CPU),
//! spreading a VM's vCPUs over different CPUs (vCPUs of one VM sharing a
//! CPU never run at once: a preempted lock holder stalls the others), and
//! keeping a thread on the CPU it is pinned to when that CPU is within
//! `TOLERANCE` of the least loaded one, so a placed host plans no moves.
//! Demand, the host's own work on each CPU included, is counted in steps
//! of `STEP` CPUs and ties go to the lower pid, vCPU and CPU, so two
//! measurements of one host (`plan`, then `apply`, or a smoothed daemon
//! pass) give the same map.

use crate::config::{Config, VcpuMapping};
use crate::input::{HostInput, VmInput};
use crate::nodes::NodeState;
use crate::target::{Class, VmPlan};
use std::collections::BTreeMap;
use stealscope_readers::cpulist::format as cpulist;

/// CPUs of demand within which a CPU counts as least loaded.
const TOLERANCE: f64 = 0.15;
/// Demand is rounded to this many CPUs: a busy vCPU measured 0.87 one
/// second and 1.00 the next (run plus wait, a TCG guest on a loaded host),
/// which must not reorder the map; half CPUs still tell busy, light and
/// idle vCPUs apart.
const STEP: f64 = 0.5;

/// A measured demand in [`STEP`]s, as the planner compares demands.
pub(crate) fn steps(demand: f64) -> f64 {
    (demand / STEP).round() * STEP
}
/// The reason of each pin action the map makes; the plan says the why once.
pub const ACTION_REASON: &str = "balanced vCPU mapping (see `vCPU mapping` in the plan)";
/// `auto` keeps a pinned pool pinned down to this share of `pin_above`.
const RELEASE: f64 = 0.9;

/// Pins the shared VMs' vCPUs of every node whose pool calls for it.
pub fn map_pools(plans: &mut [VmPlan], host: &HostInput, nodes: &[NodeState], cfg: &Config) {
    if cfg.vcpu_mapping == VcpuMapping::Pool {
        return;
    }
    let inputs: BTreeMap<u32, &VmInput> = host.vms.iter().map(|v| (v.pid, v)).collect();
    for node in nodes {
        let pool = node.pool();
        if pool.is_empty() {
            continue;
        }
        let members: Vec<usize> = (0..plans.len())
            .filter(|&i| plans[i].class == Class::Shared && plans[i].node == Some(node.id))
            .collect();
        // A pool that spills shares its CPUs with threads that come and go:
        // no fixed map holds there.
        if members.is_empty() || members.iter().any(|&i| plans[i].spill.is_some()) {
            continue;
        }
        let pressure = node.pressure_with(0.0);
        let pinned_now = members.iter().all(|&i| {
            inputs.get(&plans[i].pid).is_some_and(|vm| {
                vm.vcpus
                    .iter()
                    .all(|(_, t)| t.cpus_allowed.len() == 1 && pool.contains(&t.cpus_allowed[0]))
            })
        });
        let swinging = swinging(&members, plans, &inputs);
        let why = match cfg.vcpu_mapping {
            VcpuMapping::Pool => unreachable!(),
            VcpuMapping::Pinned => "vcpu_mapping = \"pinned\"".to_string(),
            VcpuMapping::Auto if swinging > 0 => continue,
            VcpuMapping::Auto if pressure >= cfg.pin_above => format!(
                "the pool is overcommitted: {:.2} CPUs of demand per pool CPU, at or above pin_above {:.2}, and every vCPU in it is busy or idle",
                pressure, cfg.pin_above
            ),
            VcpuMapping::Auto if pinned_now && pressure >= cfg.pin_above * RELEASE => format!(
                "the pool stays pinned: {:.2} CPUs of demand per pool CPU, not yet below {:.2} (90 % of pin_above)",
                pressure,
                cfg.pin_above * RELEASE
            ),
            VcpuMapping::Auto => continue,
        };
        // The host's other work where it runs: a CPU that a pinned loop
        // or kernel thread holds starts loaded.
        let online = host.topology.cpus.len().max(1) as f64;
        let base: Vec<f64> = pool
            .iter()
            .map(|c| steps(host.host_work.on(*c) + host.host_work.anywhere / online))
            .collect();
        map_node(plans, &members, &inputs, (&pool, &base), &why);
    }
}

/// How many of the pool's vCPUs want part of a CPU (between a quarter and
/// three quarters of one): their demand comes and goes, so a map fixed on
/// this pass's measurement is wrong on the next, and the load balancer,
/// which moves them as they change, places them better. `auto` pins only
/// pools of busy and idle vCPUs (the steady overcommit of spinning guests,
/// where the balancer's layouts are uneven for seconds).
fn swinging(members: &[usize], plans: &[VmPlan], inputs: &BTreeMap<u32, &VmInput>) -> usize {
    members
        .iter()
        .filter_map(|&i| inputs.get(&plans[i].pid))
        .flat_map(|vm| vm.vcpus.iter())
        .filter(|(_, t)| {
            let d = t.util.unwrap_or(1.0).clamp(0.0, 1.0);
            d > 0.25 && d < 0.75
        })
        .count()
}

/// One thread to place: (plan index, position in its plan's vcpus, VM pid,
/// demand, the CPU it is pinned to now).
struct Thread {
    plan: usize,
    slot: usize,
    pid: u32,
    demand: f64,
    current: Option<u32>,
}

fn map_node(
    plans: &mut [VmPlan],
    members: &[usize],
    inputs: &BTreeMap<u32, &VmInput>,
    (pool, base): (&[u32], &[f64]),
    why: &str,
) {
    let mut threads = Vec::new();
    for &i in members {
        let vm = inputs.get(&plans[i].pid);
        for (slot, (_, tid, _)) in plans[i].vcpus.iter().enumerate() {
            let t = vm.and_then(|v| v.vcpus.iter().find(|(_, t)| t.tid == *tid).map(|(_, t)| t));
            threads.push(Thread {
                plan: i,
                slot,
                pid: plans[i].pid,
                // A vCPU never measured counts as busy (as in the pool's demand).
                demand: steps(t.and_then(|t| t.util).unwrap_or(1.0).clamp(0.0, 1.0)),
                current: t
                    .filter(|t| t.cpus_allowed.len() == 1)
                    .map(|t| t.cpus_allowed[0])
                    .filter(|c| pool.contains(c)),
            });
        }
    }
    threads.sort_by(|a, b| {
        b.demand
            .total_cmp(&a.demand)
            .then(a.pid.cmp(&b.pid))
            .then(a.slot.cmp(&b.slot))
    });
    let mut load = base.to_vec();
    let mut count = vec![0usize; pool.len()];
    // (CPU index, pid) -> vCPUs of that VM already there.
    let mut same: BTreeMap<(usize, u32), usize> = BTreeMap::new();
    let mut got = Vec::with_capacity(threads.len());
    for t in &threads {
        let least = load.iter().copied().fold(f64::INFINITY, f64::min);
        let k = (0..pool.len())
            .filter(|&k| load[k] <= least + TOLERANCE)
            .min_by(|&a, &b| {
                let key = |k: usize| {
                    (
                        same.get(&(k, t.pid)).copied().unwrap_or(0),
                        Some(pool[k]) != t.current,
                        count[k],
                    )
                };
                key(a)
                    .cmp(&key(b))
                    .then(load[a].total_cmp(&load[b]))
                    .then(a.cmp(&b))
            })
            .expect("the pool is not empty");
        load[k] += t.demand;
        count[k] += 1;
        *same.entry((k, t.pid)).or_default() += 1;
        got.push(k);
    }
    let per_cpu: Vec<String> = pool
        .iter()
        .zip(&load)
        .map(|(c, l)| format!("CPU {c}: {l:.2}"))
        .collect();
    let even = load.iter().all(|l| (l - load[0]).abs() < 1e-9);
    let reason = format!(
        "pool {}: each vCPU pinned to one CPU, {} (demand in steps of {STEP} CPU: {}), because {why}; left to the load balancer, more busy vCPU threads than CPUs sit in uneven layouts for seconds",
        cpulist(pool),
        if even {
            "so every CPU carries the same demand"
        } else {
            "spreading the demand as evenly as whole vCPUs allow"
        },
        per_cpu.join(", ")
    );
    for (t, k) in threads.iter().zip(got) {
        plans[t.plan].vcpus[t.slot].2 = vec![pool[k]];
    }
    for &i in members {
        plans[i].reasons.push(format!(
            "vCPUs pinned one per CPU of the pool {} (see `vCPU mapping`)",
            cpulist(pool)
        ));
        plans[i].mapping = Some(reason.clone());
    }
}
