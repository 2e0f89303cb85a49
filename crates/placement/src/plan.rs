//! The planner: dedicated VMs get whole cores on one node, shared VMs go to
//! the node whose shared pool has the most room for their measured demand
//! (staying put unless another node is better by the hysteresis margin and
//! the VM has not moved recently), emulator/I/O threads go to housekeeping
//! CPUs, shared VMs get CPU in proportion to their vCPUs, and memory follows
//! the VM's node when it fits with a margin. Then the actions are the
//! difference between that target and what the host has now.

use crate::action::Action;
use crate::config::Config;
use crate::history::History;
use crate::input::{HostInput, VmInput};
use crate::nodes::{node_states, NodeState};
pub use crate::target::{libvirt_domain, Class, VmPlan};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use stealscope_readers::cpulist::format as cpulist;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub vms: Vec<VmPlan>,
    /// In the order they must be applied.
    pub actions: Vec<Action>,
    pub warnings: Vec<String>,
    /// Why applying this plan must be refused (conflicts without override).
    pub refused: Option<String>,
    /// Shared load per pool CPU, per node, after the plan.
    pub node_pressure: BTreeMap<u32, f64>,
}

impl Plan {
    /// Records in `hist` each VM's planned node where the plan took
    /// effect: VMs it left as they were, and VMs all of whose actions were
    /// `applied`. A VM whose change was held back (a refused or trimmed
    /// plan, a dry run) keeps its old entry, so the next pass plans from
    /// where it is: a trimmed move recorded as made had the next pass
    /// "keep" the VM on a node it never reached, placing it there outside
    /// the tests a move must pass (the fleet simulation, 2026-12-07).
    pub fn record_in(&self, hist: &mut History, applied: &[Action], now_s: f64) {
        for v in &self.vms {
            let mut own = self.actions.iter().filter(|a| a.pid() == v.pid);
            if own.all(|a| applied.contains(a)) {
                hist.record(v.pid, v.node, now_s);
            }
        }
    }
}

struct Ctx<'a> {
    cfg: &'a Config,
    hist: &'a History,
    now_s: f64,
    /// Shared VMs exist: dedicated cores must leave them at least one CPU.
    keep_pool: bool,
    online: Vec<u32>,
    /// Node of each CPU, indexed by CPU number.
    node_of: Vec<Option<u32>>,
}

/// Plans `host` from scratch, using `hist` for hysteresis; `now_s` is on the
/// same clock as the history.
pub fn plan(host: &HostInput, cfg: &Config, hist: &History, now_s: f64) -> Plan {
    if !cfg.manage.is_empty() {
        let mut managed = host.clone();
        managed.vms.retain(|v| cfg.manages(&v.name));
        let left = host.vms.len() - managed.vms.len();
        let mut p = plan_all(&managed, cfg, hist, now_s);
        if left > 0 {
            p.warnings
                .push(format!("{left} VM(s) not matched by `manage` left alone"));
        }
        return p;
    }
    plan_all(host, cfg, hist, now_s)
}

fn plan_all(host: &HostInput, cfg: &Config, hist: &History, now_s: f64) -> Plan {
    let mut out = Plan::default();
    let dedicated = cfg.dedicated_matcher().unwrap_or_default();
    let ctx = Ctx {
        cfg,
        hist,
        now_s,
        keep_pool: host.vms.iter().any(|v| !dedicated.is_match(&v.name)),
        online: host.topology.cpus.clone(),
        node_of: host.topology.node_of_cpus(),
    };
    conflicts(host, cfg, &mut out);
    let hk = housekeeping(host, cfg, &mut out.warnings);
    let mut nodes = node_states(host, &hk);

    // Biggest first: they are the hardest to fit. Demand in the mapping's
    // steps, so that measurement noise does not reorder VMs of equal size.
    let mut order: Vec<&VmInput> = host.vms.iter().filter(|v| !v.vcpus.is_empty()).collect();
    let steps = |v: &VmInput| crate::mapping::steps(v.demand());
    order.sort_by(|a, b| {
        b.vcpus
            .len()
            .cmp(&a.vcpus.len())
            .then(steps(b).total_cmp(&steps(a)))
            .then(a.pid.cmp(&b.pid))
    });
    let mut shared = Vec::new();
    for vm in order {
        if dedicated.is_match(&vm.name) {
            match place_dedicated(vm, &mut nodes, &ctx) {
                Ok(p) => out.vms.push(p),
                Err(why) => {
                    out.warnings.push(format!(
                        "{}: no node has room for dedicated cores ({why}); placed as shared",
                        vm.name
                    ));
                    shared.push(vm);
                }
            }
        } else {
            shared.push(vm);
        }
    }
    // Each node starts with the demand of the shared VMs on it now, and a
    // VM's own is taken off while it is placed: a VM (biggest first) then
    // chooses against the load it would join or leave, not against the
    // VMs planned before it only (a fresh VM went to the node that looked
    // empty because its VMs came later).
    let held: BTreeMap<u32, usize> = shared
        .iter()
        .filter_map(|vm| {
            let id = current_node(vm, &ctx)?;
            Some((vm.pid, nodes.iter().position(|n| n.id == id)?))
        })
        .collect();
    for vm in &shared {
        if let Some(&i) = held.get(&vm.pid) {
            nodes[i].add(vm.demand(), vm.spread());
        }
    }
    for vm in shared {
        if let Some(&i) = held.get(&vm.pid) {
            nodes[i].add(-vm.demand(), -vm.spread());
        }
        let p = place_shared(vm, &mut nodes, &ctx);
        out.vms.push(p);
    }
    // Who stole the VM's time, when attribution ran: evidence, not input.
    for p in &mut out.vms {
        let why = host.vms.iter().find(|v| v.pid == p.pid);
        if let Some(r) = why.and_then(|v| v.wait.as_ref()).and_then(|w| w.reason()) {
            p.reasons.push(r);
        }
    }
    node_pressure(&nodes, &mut out);
    emulator_cpus(&mut out.vms, &nodes, &hk);
    // After the emulator threads took the VMs' pools: they are not pinned.
    crate::spill::spill(&mut out.vms, host, &nodes);
    crate::mapping::map_pools(&mut out.vms, host, &nodes, cfg);
    out.vms.sort_by_key(|p| p.pid);
    let (actions, warnings) = crate::diff::actions(host, cfg, &out.vms, &out.node_pressure);
    out.actions = actions;
    out.warnings.extend(warnings);
    out
}

/// Each node's demand per pool CPU, and a warning for each overcommitted one.
fn node_pressure(nodes: &[NodeState], out: &mut Plan) {
    for n in nodes {
        let p = n.pressure_with(0.0);
        out.node_pressure
            .insert(n.id, (p * 1000.0).round() / 1000.0);
        if p > 1.0 && !n.free.is_empty() {
            let host = if n.host_load >= 0.01 {
                format!(" (with {:.2} CPUs of the host's own work)", n.host_load)
            } else {
                String::new()
            };
            out.warnings.push(format!(
                "node {}: shared demand {:.2} CPUs{host} on {} pool CPUs ({:.0}%): busy steal will remain; only moving VMs to another host removes it",
                n.id, n.load, n.free.len(), 100.0 * p
            ));
        }
    }
}

/// The config's housekeeping CPUs that are online (all of them would leave
/// the VMs nothing: then none).
fn housekeeping(host: &HostInput, cfg: &Config, warnings: &mut Vec<String>) -> BTreeSet<u32> {
    let online: BTreeSet<u32> = host.topology.cpus.iter().copied().collect();
    let mut hk: BTreeSet<u32> = cfg.housekeeping().unwrap_or_default().into_iter().collect();
    let offline: Vec<u32> = hk.difference(&online).copied().collect();
    if !offline.is_empty() {
        warnings.push(format!(
            "housekeeping CPUs {} are not online: left out",
            cpulist(&offline)
        ));
        hk.retain(|c| online.contains(c));
    }
    if !hk.is_empty() && hk.len() == online.len() {
        warnings.push("housekeeping_cpus covers every online CPU: ignored, VMs need CPUs".into());
        hk.clear();
    }
    hk
}

/// Emulator/I/O threads: housekeeping CPUs of the VM's node, else all
/// housekeeping CPUs, else the VM's own CPUs.
fn emulator_cpus(plans: &mut [VmPlan], nodes: &[NodeState], hk: &BTreeSet<u32>) {
    let hk_all: Vec<u32> = hk.iter().copied().collect();
    for p in plans {
        let local = p
            .node
            .and_then(|id| nodes.iter().find(|n| n.id == id))
            .map(|n| n.housekeeping.clone())
            .unwrap_or_default();
        p.other_cpus = if !local.is_empty() {
            local
        } else if !hk_all.is_empty() {
            hk_all.clone()
        } else {
            let mut all: Vec<u32> = p
                .vcpus
                .iter()
                .flat_map(|(_, _, c)| c.iter().copied())
                .collect();
            all.sort_unstable();
            all.dedup();
            all
        };
    }
}

fn conflicts(host: &HostInput, cfg: &Config, out: &mut Plan) {
    let mut why = Vec::new();
    if host.topology.nodes.len() > 1 && host.numa_balancing.is_some_and(|v| v != 0) {
        why.push("automatic NUMA balancing is on (kernel.numa_balancing=1): it migrates vCPU threads and pages against the plan and itself causes idle steal; disable it with `sysctl -w kernel.numa_balancing=0`".to_string());
    }
    if host.numad_running {
        why.push("numad is running: it rebinds processes to nodes on its own schedule; stop it (`systemctl disable --now numad`)".to_string());
    }
    for w in &why {
        out.warnings.push(w.clone());
    }
    if !why.is_empty() && !cfg.override_conflicts {
        out.refused = Some(format!(
            "{} (set override_conflicts = true in the config, or pass --override-conflicts, to place anyway)",
            why.join("; ")
        ));
    }
}

/// The node a VM is on now: the history's, else the one holding all its
/// vCPUs' CPUs, else the one holding more than half its memory. A VM
/// whose memory is spread evenly (a fresh VM on a host nobody placed) is
/// on no node yet: it goes to the least loaded one, not to the first.
fn current_node(vm: &VmInput, ctx: &Ctx) -> Option<u32> {
    if let Some(h) = ctx.hist.vms.get(&vm.pid) {
        return h.node;
    }
    vm.cpus_node(&ctx.node_of).or_else(|| {
        let home = vm.home_node()?;
        let total = vm.mem_bytes()?;
        let here = vm.mem_by_node.as_ref()?.get(&home).copied().unwrap_or(0);
        (2 * here > total).then_some(home)
    })
}

fn mib(b: u64) -> u64 {
    b >> 20
}

fn place_dedicated(vm: &VmInput, nodes: &mut [NodeState], ctx: &Ctx) -> Result<VmPlan, String> {
    let n = vm.vcpus.len();
    let cur = current_node(vm, ctx);
    // Preference: where it is now, then where its memory is, then most free cores.
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&i| {
        let id = nodes[i].id;
        (
            Some(id) != cur,
            Some(id) != vm.home_node(),
            std::cmp::Reverse(nodes[i].free.len()),
            id,
        )
    });
    let mut why = Vec::new();
    let pool_total: usize = nodes.iter().map(|n| n.free.len()).sum();
    for i in order {
        let node = &mut nodes[i];
        let Some(cores) = node.cores_for(n) else {
            let threads: usize = node.cores.iter().map(Vec::len).sum();
            why.push(format!(
                "node {}: {} free hardware threads in whole cores for {} vCPUs",
                node.id, threads, n
            ));
            continue;
        };
        let taking: usize = cores.iter().map(Vec::len).sum();
        if ctx.keep_pool && taking >= pool_total {
            why.push(format!(
                "the host's last {pool_total} shared CPU(s) must stay for the shared VMs"
            ));
            continue;
        }
        let incoming = match node.mem_fits(vm, ctx.cfg) {
            Ok(b) => b,
            Err(e) => {
                why.push(e);
                continue;
            }
        };
        let cores = node.take_cores(n).expect("checked above");
        node.take_mem(incoming.unwrap_or(0));
        let cpus: Vec<u32> = cores.iter().flatten().copied().collect();
        let idle: Vec<u32> = cpus[n..].to_vec();
        let mut reasons = vec![format!(
            "dedicated (matches `dedicated` in the config): {} vCPU(s) on whole cores {} of node {}{}",
            n,
            cpulist(&cpus),
            node.id,
            if idle.is_empty() { String::new() } else { format!("; sibling(s) {} left idle so no other VM shares these cores", cpulist(&idle)) }
        )];
        reasons.push(mem_reason(vm, node.id, incoming));
        return Ok(VmPlan {
            pid: vm.pid,
            name: vm.name.clone(),
            class: Class::Dedicated,
            node: Some(node.id),
            demand: vm.demand(),
            mem_bytes: vm.mem_bytes(),
            vcpus: vm
                .vcpus
                .iter()
                .zip(&cpus)
                .map(|((i, t), c)| (*i, t.tid, vec![*c]))
                .collect(),
            other_cpus: Vec::new(),
            reasons,
            mapping: None,
            spill: None,
        });
    }
    Err(why.join("; "))
}

fn mem_reason(vm: &VmInput, node: u32, incoming: Option<u64>) -> String {
    let base = mem_reason_bytes(vm, node, incoming);
    match &vm.mem_policy {
        Some(c) => format!(
            "{base}; the VM's own memory policy ({}) allows node {node}",
            c.describe(&c.all())
        ),
        None => base,
    }
}

fn mem_reason_bytes(vm: &VmInput, node: u32, incoming: Option<u64>) -> String {
    match (vm.mem_bytes(), incoming) {
        (Some(total), Some(0)) => format!("memory: all {} MiB already on node {node}", mib(total)),
        (Some(total), Some(b)) => format!(
            "memory: {} of {} MiB to move to node {node}, which has room for it with the margin",
            mib(b),
            mib(total)
        ),
        _ => "memory per node unknown (numa_maps unreadable): no memory move planned".to_string(),
    }
}

/// A shared VM: the node it stays on or moves to (named phases below),
/// its share of that node's pool, and its memory there.
fn place_shared(vm: &VmInput, nodes: &mut [NodeState], ctx: &Ctx) -> VmPlan {
    if let Some(p) = leave_unbound(vm, nodes, ctx) {
        return p;
    }
    let n = vm.vcpus.len();
    let demand = vm.demand();
    let mut reasons = Vec::new();
    let (eligible, rejected) = eligible_nodes(vm, nodes, ctx);
    let chosen = choose_node(vm, demand, nodes, &eligible, ctx, &mut reasons);
    let (node, pool) = match chosen {
        Some(i) => {
            let node = &mut nodes[i];
            let incoming = node.mem_fits(vm, ctx.cfg).ok().flatten();
            node.take_mem(incoming.unwrap_or(0));
            node.add(demand, vm.spread());
            let pool = node.pool();
            reasons.insert(0, format!("shared: {n} vCPU(s), measured demand {demand:.2} CPUs, in node {}'s shared pool {}", node.id, cpulist(&pool)));
            reasons.push(mem_reason(vm, node.id, incoming));
            (Some(node.id), pool)
        }
        None => {
            let pool = spanning_pool(nodes, (demand, vm.spread()), ctx);
            reasons.push(if pool.1 {
                format!(
                    "shared, spans nodes (the pool CPUs {} of every node): no single node fits it ({}); memory is left where it is",
                    cpulist(&pool.0),
                    rejected.join("; ")
                )
            } else {
                format!(
                    "shared, but dedicated VMs hold every pool CPU: runs on {} (add CPUs or dedicate fewer VMs)",
                    cpulist(&pool.0)
                )
            });
            (None, pool.0)
        }
    };
    VmPlan {
        pid: vm.pid,
        name: vm.name.clone(),
        class: Class::Shared,
        node,
        demand,
        mem_bytes: vm.mem_bytes(),
        vcpus: vm
            .vcpus
            .iter()
            .map(|(i, t)| (*i, t.tid, pool.clone()))
            .collect(),
        other_cpus: Vec::new(),
        reasons,
        mapping: None,
        spill: None,
    }
}

/// Measured demand (CPUs) below which a VM on no node yet is left where it
/// is. Binding it would buy at most this times `REMOTE_PENALTY` over half
/// its time (0.03 CPUs) and cost a placement change and a memory copy;
/// left unbound, the load balancer fits its little work into whatever CPU
/// idles on either node. It is placed once it wants more. In the fleet
/// simulation (300 hosts, seed 1) 0.1, 0.15, 0.2 and 0.25 made 4,355,
/// 4,243, 4,140 and 3,989 placement changes (numad: 4,167) for work done
/// of 98.50, 98.45, 98.42 and 98.36 % (numad 98.11 %), mean steal within
/// 0.01 pp (BENCHMARKS.md, issue 27).
const MIN_BIND_DEMAND: f64 = 0.2;

/// The plan of a VM too idle to place (see [`MIN_BIND_DEMAND`]): its vCPUs
/// keep their CPUs and its memory stays where it is; its demand counts on
/// every node's pool in proportion to its CPUs.
fn leave_unbound(vm: &VmInput, nodes: &mut [NodeState], ctx: &Ctx) -> Option<VmPlan> {
    let demand = vm.demand();
    let measured = vm.vcpus.iter().all(|(_, t)| t.util.is_some());
    if !measured || demand >= MIN_BIND_DEMAND || current_node(vm, ctx).is_some() {
        return None;
    }
    spanning_pool(nodes, (demand, vm.spread()), ctx);
    Some(VmPlan {
        pid: vm.pid,
        name: vm.name.clone(),
        class: Class::Shared,
        node: None,
        demand,
        mem_bytes: vm.mem_bytes(),
        vcpus: vm
            .vcpus
            .iter()
            .map(|(i, t)| (*i, t.tid, t.cpus_allowed.clone()))
            .collect(),
        other_cpus: Vec::new(),
        reasons: vec![format!(
            "left where it is: measured demand {demand:.2} CPUs, below {MIN_BIND_DEMAND} (binding it to a node would buy at most {:.3} CPUs of work and cost a placement change); placed once it wants more",
            demand * REMOTE_PENALTY * 0.5
        )],
        mapping: None,
        spill: None,
    })
}

/// The nodes whose pool holds the VM's vCPUs and whose memory holds its
/// memory (with the margin), and why each other one does not.
fn eligible_nodes(vm: &VmInput, nodes: &[NodeState], ctx: &Ctx) -> (Vec<usize>, Vec<String>) {
    let n = vm.vcpus.len();
    let mut rejected = Vec::new();
    let eligible = (0..nodes.len())
        .filter(|&i| {
            let node = &nodes[i];
            if node.free.len() < n {
                rejected.push(format!(
                    "node {}: {} pool CPUs for {} vCPUs",
                    node.id,
                    node.free.len(),
                    n
                ));
                return false;
            }
            match node.mem_fits(vm, ctx.cfg) {
                Ok(_) => true,
                Err(e) => {
                    rejected.push(e);
                    false
                }
            }
        })
        .collect();
    (eligible, rejected)
}

/// Where a shared VM goes: a VM already on a node stays there while the
/// node holds its demand (a move costs a memory copy and buys nothing
/// then); it moves only when its node is overcommitted and the steal the
/// move saves over `min_move_interval_s` outweighs the move's cost
/// ([`move_pays`]). A VM on no node yet goes to the least loaded one.
fn choose_node(
    vm: &VmInput,
    demand: f64,
    nodes: &[NodeState],
    eligible: &[usize],
    ctx: &Ctx,
    reasons: &mut Vec<String>,
) -> Option<usize> {
    let best = eligible.iter().copied().min_by(|&a, &b| {
        nodes[a]
            .pressure_with(demand)
            .total_cmp(&nodes[b].pressure_with(demand))
            .then(nodes[a].id.cmp(&nodes[b].id))
    });
    let cur =
        current_node(vm, ctx).and_then(|id| eligible.iter().copied().find(|&i| nodes[i].id == id));
    match (cur, best) {
        (Some(c), Some(b)) if c != b => {
            let (pc, pb) = (
                nodes[c].pressure_with(demand),
                nodes[b].pressure_with(demand),
            );
            let since = ctx
                .hist
                .vms
                .get(&vm.pid)
                .map(|h| ctx.now_s - h.changed_at_s);
            let why = move_pays(vm, (&nodes[c], &nodes[b]), ctx);
            if pc - pb <= ctx.cfg.hysteresis {
                reasons.push(format!(
                    "stays on node {}: node {} would be only {:.2} CPUs/CPU less loaded ({:.2} vs {:.2}), within the hysteresis of {:.2}",
                    nodes[c].id, nodes[b].id, pc - pb, pb, pc, ctx.cfg.hysteresis
                ));
                Some(c)
            } else if let Err(why) = why {
                reasons.push(format!("stays on node {}: {why}", nodes[c].id));
                Some(c)
            } else if since.is_some_and(|s| s < ctx.cfg.min_move_interval_s) {
                reasons.push(format!(
                    "stays on node {}: node {} is less loaded ({:.2} vs {:.2} CPUs/CPU) but the VM moved {:.0} s ago (minimum {:.0} s between moves)",
                    nodes[c].id, nodes[b].id, pb, pc, since.unwrap_or(0.0), ctx.cfg.min_move_interval_s
                ));
                Some(c)
            } else {
                reasons.push(format!(
                    "moves from node {} to node {}: {}",
                    nodes[c].id,
                    nodes[b].id,
                    why.unwrap_or_default()
                ));
                Some(b)
            }
        }
        (Some(c), _) => {
            reasons.push(format!(
                "stays on node {}: no other node is better ({:.2} CPUs of demand per pool CPU with it)",
                nodes[c].id,
                nodes[c].pressure_with(demand)
            ));
            Some(c)
        }
        (None, Some(b)) => {
            reasons.push(format!(
                "node {}: the least loaded pool that holds {} vCPU(s) and the VM's memory ({:.2} CPUs of demand per pool CPU with it)",
                nodes[b].id, vm.vcpus.len(), nodes[b].pressure_with(demand)
            ));
            Some(b)
        }
        (None, None) => None,
    }
}

/// Share of a vCPU's throughput lost when all its memory is on another
/// node. Grounded on the kernel's own figure: node distances follow the
/// ACPI SLIT, local 10 and remote 20 by default (LOCAL_DISTANCE and
/// REMOTE_DISTANCE in include/linux/topology.h), i.e. a remote access
/// takes twice as long. A vCPU that spends a share f of its time waiting
/// for local memory slows by 1 - 1 / (1 + f): 0.3 is f = 0.43; the range
/// 0.1-0.5 (f from 0.11 to a wholly memory-bound 1.0) is what BENCHMARKS.md
/// checks the ranking over. The same default as the simulator's
/// `[numa] remote_penalty`.
pub const REMOTE_PENALTY: f64 = 0.3;
/// Memory a move copies per second (the actuators move it in steps; the
/// simulator's `[numa] migrate_mib_per_s` default).
const MIGRATE_GIB_PER_S: f64 = 0.125;
/// CPU time a move spends per GiB copied (`[numa] migrate_ms_per_gib`).
const MIGRATE_CPU_S_PER_GIB: f64 = 0.5;

/// Whether moving a VM from node `c` to node `b` (neither counting it yet)
/// pays: the CPU time the two nodes' threads stop waiting over the next
/// `min_move_interval_s` (what each pool leaves unserved,
/// [`crate::overflow`], with the VM here against with it there) against
/// what the move costs (copying its memory, and running on remote memory
/// while it moves, half of it on average). Ok with the numbers, or Err
/// saying why not.
fn move_pays(vm: &VmInput, (c, b): (&NodeState, &NodeState), ctx: &Ctx) -> Result<String, String> {
    let (demand, spread) = (vm.demand(), vm.spread());
    let (pc, pb) = (c.pressure_with(demand), b.pressure_with(demand));
    let here = c.unserved_with(demand, spread) + b.unserved_with(0.0, 0.0);
    let there = c.unserved_with(0.0, 0.0) + b.unserved_with(demand, spread);
    let horizon = ctx.cfg.min_move_interval_s.max(ctx.cfg.interval_s);
    let gain = (here - there) * horizon;
    if here - there <= 1e-3 {
        return Err(format!(
            "its node holds its demand ({pc:.2} CPUs of demand per pool CPU with it, {here:.3} CPUs left waiting on the two nodes, {there:.3} if it moved): no steal to save by moving"
        ));
    }
    let gib = vm.mem_bytes().unwrap_or(0) as f64 / (1u64 << 30) as f64;
    let copy_s = gib / MIGRATE_GIB_PER_S;
    let cost = gib * MIGRATE_CPU_S_PER_GIB + demand * REMOTE_PENALTY * 0.5 * copy_s;
    if gain <= cost {
        return Err(format!(
            "moving to a pool at {pb:.2} would save {gain:.0} CPU-s of waiting over {horizon:.0} s, less than the move costs ({cost:.0} CPU-s: {gib:.1} GiB to copy)"
        ));
    }
    Ok(format!(
        "pool load {pb:.2} there vs {pc:.2} here (CPUs of demand per pool CPU): saves {gain:.0} CPU-s of waiting over {horizon:.0} s for a move costing {cost:.0} CPU-s"
    ))
}

/// Every node's pool for a VM no node fits, its demand spread over them;
/// `false` when no pool CPU is left at all (dedicated VMs hold them) and
/// the VM gets the housekeeping CPUs, or every online CPU, instead.
fn spanning_pool(
    nodes: &mut [NodeState],
    (demand, spread): (f64, f64),
    ctx: &Ctx,
) -> (Vec<u32>, bool) {
    let total: usize = nodes.iter().map(|n| n.free.len()).sum::<usize>().max(1);
    let mut pool = Vec::new();
    for node in nodes.iter_mut() {
        let share = node.free.len() as f64 / total as f64;
        node.add(demand * share, spread * share);
        pool.extend(node.free.iter().copied());
    }
    let mut found = true;
    if pool.is_empty() {
        found = false;
        pool = nodes
            .iter()
            .flat_map(|n| n.housekeeping.iter().copied())
            .collect();
        if pool.is_empty() {
            pool = ctx.online.clone();
        }
    }
    pool.sort_unstable();
    (pool, found)
}
