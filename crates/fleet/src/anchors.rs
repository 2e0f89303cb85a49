//! The anchors' rules on the same fleet, for comparison (BENCHMARKS.md,
//! the end-to-end test): what a DRS-like and a Watcher-like balancer would
//! move. Both see steal (CPU ready) or utilisation only, not busy from
//! idle steal, and name no culprit.

use crate::model::{Fleet, Vm};
use crate::plan::{Move, Plan, Why};

fn mem(v: &Vm) -> u64 {
    v.memory_bytes.unwrap_or(0)
}

/// Places `vm` of host `from` on the least loaded host (mean demand over
/// CPUs) with a node that holds its memory; updates the loads.
fn least_loaded(
    f: &Fleet,
    from: usize,
    vm: usize,
    load: &mut [f64],
    free: &mut [Vec<(u32, u64)>],
) -> Option<(usize, u32)> {
    let v = &f.hosts[from].vms[vm];
    let mut best: Option<(f64, usize, u32)> = None;
    for (d, h) in f.hosts.iter().enumerate() {
        if d == from {
            continue;
        }
        let Some(n) = free[d].iter().find(|n| n.1 >= mem(v)) else {
            continue;
        };
        let r = load[d] / h.cpus.max(1) as f64;
        if best.is_none_or(|b| r < b.0) {
            best = Some((r, d, n.0));
        }
    }
    let (_, d, node) = best?;
    load[d] += v.mean_demand();
    load[from] -= v.mean_demand();
    if let Some(n) = free[d].iter_mut().find(|n| n.0 == node) {
        n.1 -= mem(v);
    }
    Some((d, node))
}

fn loads(f: &Fleet) -> (Vec<f64>, Vec<Vec<(u32, u64)>>) {
    (
        f.hosts
            .iter()
            .map(|h| h.vms.iter().map(Vm::mean_demand).sum())
            .collect(),
        f.hosts
            .iter()
            .map(|h| h.nodes.iter().map(|n| (n.node, n.free_bytes)).collect())
            .collect(),
    )
}

/// Both anchors' shape: for each hot host in order, the VM `pick` names
/// (one with a known memory size) goes to the least loaded host; one move
/// per host, at most `max_moves`.
fn one_move_per_host(
    f: &Fleet,
    hosts: Vec<usize>,
    max_moves: usize,
    pick: impl Fn(usize, &[usize]) -> Option<usize>,
) -> Plan {
    let (mut load, mut free) = loads(f);
    let mut p = Plan {
        hot: hosts.clone(),
        ..Plan::default()
    };
    for h in hosts {
        if p.moves.len() >= max_moves {
            break;
        }
        let vms = &f.hosts[h].vms;
        let sized: Vec<usize> = (0..vms.len())
            .filter(|&i| vms[i].memory_bytes.is_some())
            .collect();
        let Some(vm) = pick(h, &sized) else {
            continue;
        };
        if let Some((to, node)) = least_loaded(f, h, vm, &mut load, &mut free) {
            p.moves.push(Move {
                from: h,
                vm,
                to,
                why: Why::Largest,
                node,
            });
        }
    }
    p
}

/// DRS-like: every host whose vCPUs wait (CPU ready) more than
/// `threshold` gives up the VM with the most steal, to the least loaded
/// host; one move per host, at most `max_moves`, worst host first.
pub fn drs_like(f: &Fleet, threshold: f64, max_moves: usize) -> Plan {
    let ready = |i: usize| f.hosts[i].wait() / f.hosts[i].vcpus().max(1) as f64;
    let mut hosts: Vec<usize> = (0..f.hosts.len())
        .filter(|&i| ready(i) > threshold)
        .collect();
    hosts.sort_by(|a, b| ready(*b).total_cmp(&ready(*a)));
    one_move_per_host(f, hosts, max_moves, |h, sized| {
        let vms = &f.hosts[h].vms;
        sized
            .iter()
            .copied()
            .max_by(|a, b| vms[*a].steal_pct().total_cmp(&vms[*b].steal_pct()))
    })
}

/// Watcher workload_balance-like: every host whose CPU use (vCPU run, by
/// its CPUs) is above `util_threshold` gives up one VM, the one whose
/// leaving brings it closest to the threshold, to the least loaded host.
pub fn watcher_like(f: &Fleet, util_threshold: f64, max_moves: usize) -> Plan {
    let util = |i: usize| {
        let h = &f.hosts[i];
        h.vms.iter().map(|v| v.run).sum::<f64>() / h.cpus.max(1) as f64
    };
    let hosts: Vec<usize> = (0..f.hosts.len())
        .filter(|&i| util(i) > util_threshold)
        .collect();
    one_move_per_host(f, hosts, max_moves, |h, sized| {
        let host = &f.hosts[h];
        let over = util(h) - util_threshold;
        let d = |i: usize| (host.vms[i].run / host.cpus as f64 - over).abs();
        sized.iter().copied().min_by(|a, b| d(*a).total_cmp(&d(*b)))
    })
}
