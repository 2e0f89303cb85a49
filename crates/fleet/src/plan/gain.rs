//! The gain-ranked planner: moves are chosen one at a time, across all hot
//! hosts, by the busy steal each is estimated to remove. A live migration
//! costs about the same whatever the VM, so the move that removes the most
//! goes first, and the batch stops when the next would remove less than
//! `min_gain` of its host's vCPU time.
//!
//! The estimate: busy steal is the vCPU wait idle CPUs cannot absorb, so at
//! each step of the history a host's busy steal is about its demand
//! ([`crate::want`]) over its CPUs; the excess is counted over its CPUs
//! less headroom, so that a source is left with room. A VM leaving removes
//! the part of that excess it carried; arriving, it adds its demand over
//! the destination's CPUs less headroom. On a host, among VMs within 5 % of the best, a named
//! culprit goes first (the thief moves, not its victims), else the
//! smallest (less to copy, less added where it lands).

use super::{apply, movable, reposition, Load, Move, Plan, PlanOptions, Unfixed, Why};
use crate::model::{Fleet, Vm};

/// Mean over the steps of the demand above `cap`, CPUs.
pub fn excess(series: &[f64], cap: f64) -> f64 {
    let over: f64 = series.iter().map(|s| (s - cap).max(0.0)).sum();
    over / series.len().max(1) as f64
}

/// Excess over `cap` removed from a host with demand `series` when a VM
/// of demand `d` leaves it, CPUs (mean over the steps).
pub fn removed(series: &[f64], d: &[f64], cap: f64) -> f64 {
    let mut gain = 0.0;
    for (s, x) in series.iter().zip(d) {
        gain += (s - cap).max(0.0) - (s - x - cap).max(0.0);
    }
    gain / series.len().max(1) as f64
}

/// Excess over `cap` added to a host with demand `series` when a VM of
/// demand `d` arrives, CPUs (mean over the steps).
pub fn added(series: &[f64], d: &[f64], cap: f64) -> f64 {
    let mut cost = 0.0;
    for (s, x) in series.iter().zip(d) {
        cost += (s + x - cap).max(0.0) - (s - cap).max(0.0);
    }
    cost / series.len().max(1) as f64
}

/// The best move off one hot host now.
#[derive(Debug, Clone)]
struct Cand {
    vm: usize,
    /// Removed from its host less added at `to`, CPUs.
    gain: f64,
    why: Why,
    to: usize,
    node: u32,
}

/// Destinations that fit looked at per VM, least loaded first.
const DEST_SCAN: usize = 16;
/// Moves removing within this share of the best count as equal.
const NEAR: f64 = 0.95;

/// A source's excess is counted over its CPUs less headroom, as a
/// destination's is: counted over all its CPUs (its busy steal), a source
/// was left at its CPUs, its VMs still queueing, and more VMs stayed over
/// 10 % steal at 200 hosts (110-138 against 98-100; BENCHMARKS.md, issue 31).
fn cap(loads: &[Load], hi: usize) -> f64 {
    loads[hi].limit
}

/// The least a move off host `hi` must remove, CPUs.
fn floor(f: &Fleet, o: &PlanOptions, hi: usize) -> f64 {
    o.min_gain * f.hosts[hi].vcpus() as f64
}

/// Greedy over all hot hosts (`p.hot`): adds the moves to `p`.
pub(crate) fn choose(
    f: &Fleet,
    o: &PlanOptions,
    loads: &mut [Load],
    order: &mut Vec<usize>,
    p: &mut Plan,
) {
    let mut tried: Vec<Vec<usize>> = vec![Vec::new(); p.hot.len()];
    let mut cands: Vec<Option<Cand>> = p
        .hot
        .iter()
        .map(|&h| candidate(f, h, loads, order, &[]))
        .collect();
    // Lazy greedy: a cached gain only falls as destinations fill, so the
    // best cached one, as good when looked at again, is the best.
    while p.moves.len() < o.max_moves {
        let Some(k) = best_host(f, o, &p.hot, &cands) else {
            break;
        };
        let hi = p.hot[k];
        let was = cands[k].as_ref().map_or(0.0, |c| c.gain);
        cands[k] = candidate(f, hi, loads, order, &tried[k]);
        let Some(c) = cands[k].clone().filter(|c| c.gain >= was - 1e-9) else {
            continue;
        };
        tried[k].push(c.vm);
        apply(f, o, (hi, c.vm, c.to, c.node), loads);
        reposition(order, c.to, loads, f);
        p.moves.push(Move {
            from: hi,
            vm: c.vm,
            to: c.to,
            why: c.why,
            node: c.node,
        });
        cands[k] = candidate(f, hi, loads, order, &tried[k]);
    }
    p.unfixed = unfixed(f, o, p, loads, &cands);
}

/// The hot host whose best move removes the most, if worth a move.
fn best_host(f: &Fleet, o: &PlanOptions, hot: &[usize], cands: &[Option<Cand>]) -> Option<usize> {
    cands
        .iter()
        .enumerate()
        .filter_map(|(k, c)| c.as_ref().map(|c| (k, c.gain)))
        .filter(|&(k, g)| g >= floor(f, o, hot[k]))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// Hot hosts left with busy steal worth a move, and why.
fn unfixed(
    f: &Fleet,
    o: &PlanOptions,
    p: &Plan,
    loads: &[Load],
    cands: &[Option<Cand>],
) -> Vec<Unfixed> {
    let mut out = Vec::new();
    for (k, &hi) in p.hot.iter().enumerate() {
        if excess(&loads[hi].series, cap(loads, hi)) < floor(f, o, hi) {
            continue;
        }
        let reason = match &cands[k] {
            _ if p.moves.len() >= o.max_moves => format!("--max-moves {} reached", o.max_moves),
            Some(_) => "no single move removes enough busy steal".into(),
            None => "no VM left that fits elsewhere".into(),
        };
        out.push(Unfixed {
            host: f.hosts[hi].name.clone(),
            reason,
        });
    }
    out
}

/// The move to make next from hot host `hi`: each VM with its best
/// destination, the most busy steal removed net of what it adds there.
fn candidate(
    f: &Fleet,
    hi: usize,
    loads: &[Load],
    order: &[usize],
    tried: &[usize],
) -> Option<Cand> {
    let (h, l, cap) = (&f.hosts[hi], &loads[hi], cap(loads, hi));
    if excess(&l.series, cap) <= 0.0 {
        return None;
    }
    let nets: Vec<(usize, f64, usize, u32)> = l
        .here
        .iter()
        .copied()
        .filter(|&i| movable(&h.vms[i]) && !tried.contains(&i))
        .filter_map(|i| {
            let gain = removed(&l.series, &h.vms[i].demand, cap);
            if gain <= 0.0 {
                return None;
            }
            let (to, node, cost) = destination(&h.vms[i], loads, order)?;
            Some((i, gain - cost, to, node))
        })
        .collect();
    let best = nets.iter().map(|g| g.1).fold(0.0, f64::max);
    if best <= 0.0 {
        return None;
    }
    let share = |i: usize| {
        h.culprits
            .iter()
            .find(|c| c.vm == h.vms[i].name)
            .map(|c| c.share)
    };
    let size = |i: usize| h.vms[i].mean_demand();
    let near = || nets.iter().filter(|g| g.1 >= NEAR * best);
    let culprit = near().filter(|g| share(g.0).is_some()).max_by(|a, b| {
        let s = |i| share(i).unwrap_or(0.0);
        s(a.0).total_cmp(&s(b.0))
    });
    let &(vm, gain, to, node) =
        culprit.or_else(|| near().min_by(|a, b| size(a.0).total_cmp(&size(b.0))))?;
    let fixes = removed(&l.series, &h.vms[vm].demand, cap) >= 0.999 * excess(&l.series, cap);
    let why = match share(vm) {
        Some(share) => Why::Culprit { share },
        None if fixes => Why::Smallest,
        None => Why::MostRemoved,
    };
    Some(Cand {
        vm,
        gain,
        why,
        to,
        node,
    })
}

/// Where `v` adds the least busy steal (its demand over the host's CPUs
/// less headroom, step by step) among the least loaded hosts with one NUMA
/// node holding its memory, the best of the first few; and that cost. No
/// hard limit: a VM that adds a little over a destination's limit may
/// remove far more where it leaves (a hard limit on the destination's
/// demand quantile made 30-60 % more moves for about the same busy steal).
fn destination(v: &Vm, loads: &[Load], order: &[usize]) -> Option<(usize, u32, f64)> {
    let mem = v.memory_bytes?;
    let mut best: Option<(f64, usize, u32)> = None;
    let mut fits = 0;
    for &d in order {
        let l = &loads[d];
        let Some(node) = l.node_for(mem) else {
            continue;
        };
        let cost = added(&l.series, &v.demand, l.limit);
        if best.is_none_or(|b| cost < b.0) {
            best = Some((cost, d, node));
        }
        fits += 1;
        if fits >= DEST_SCAN || cost == 0.0 {
            break;
        }
    }
    best.map(|(cost, d, node)| (d, node, cost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{test_fleet, test_host, test_vm, Culprit, Host};
    use crate::plan::{plan, Planner};

    fn vm(name: &str, vcpus: u32, demand: f64) -> Vm {
        test_vm(name, vcpus, demand, 0.0)
    }

    /// A host whose busy steal is its demand over its CPUs less 10 %.
    fn host(name: &str, cpus: u32, vms: Vec<Vm>) -> Host {
        let d: f64 = vms.iter().map(|v| v.demand[0]).sum();
        let busy = (d - 0.9 * cpus as f64).max(0.0);
        let mut h = test_host(name, cpus, 64 << 30, busy, vms);
        let n = h.vms.len() as f64;
        for v in &mut h.vms {
            v.wait = busy / n;
        }
        h
    }

    fn gain(max_moves: usize) -> PlanOptions {
        PlanOptions {
            planner: Planner::Gain,
            max_moves,
            ..PlanOptions::default()
        }
    }

    #[test]
    fn a_vm_removes_at_most_the_excess_it_carries() {
        // 16 CPUs, demand 20 then 14: excess 4 then 0, mean 2.
        let s = [20.0, 14.0];
        assert_eq!(excess(&s, 16.0), 2.0);
        // A 6-CPU VM takes all of it; a 1-CPU VM 1 of the first step's 4.
        assert_eq!(removed(&s, &[6.0, 6.0], 16.0), 2.0);
        assert_eq!(removed(&s, &[1.0, 1.0], 16.0), 0.5);
        // Arriving on a host at 10 and 15: over 16 only in the second step.
        assert_eq!(added(&[10.0, 15.0], &[3.0, 3.0], 16.0), 1.0);
    }

    #[test]
    fn the_move_that_removes_most_goes_first_whatever_the_host() {
        // Limits 3.6 and 14.4 (10 % headroom). "small" is worse per vCPU
        // (over by 1.4, 5 vCPUs) but a move there removes 1; on "big"
        // (over by 2.8) b-big and b-mid each remove all 2.8, b0-b4 2 each.
        let small = host(
            "small",
            4,
            (0..5).map(|i| vm(&format!("s{i}"), 1, 1.0)).collect(),
        );
        let mut bvms: Vec<Vm> = (0..5).map(|i| vm(&format!("b{i}"), 2, 2.0)).collect();
        bvms.push(vm("b5", 1, 1.0));
        bvms.push(vm("b-big", 4, 3.2));
        bvms.push(vm("b-mid", 3, 3.0));
        let big = host("big", 16, bvms);
        assert!(small.busy_per_vcpu() > big.busy_per_vcpu());
        let idle = host("idle", 32, vec![vm("y", 2, 2.0)]);
        let f = test_fleet(vec![small, big, idle]);
        let p = plan(&f, &gain(1));
        assert_eq!(p.hot, vec![0, 1]);
        assert_eq!(p.moves.len(), 1, "{:?}", p.moves);
        let m = &p.moves[0];
        // One VM that fixes the host, the smaller of the two that do.
        assert_eq!((m.from, f.hosts[1].vms[m.vm].name.as_str()), (1, "b-mid"));
        assert_eq!(m.why, Why::Smallest);
        // Unbounded: "small" needs two (1 then the last 0.4), "big" none.
        let p = plan(&f, &gain(20));
        let from: Vec<usize> = p.moves.iter().map(|m| m.from).collect();
        assert_eq!(from, vec![1, 0, 0], "{:?}", p.moves);
        assert_eq!(p.moves[1].why, Why::MostRemoved);
        assert!(p.unfixed.is_empty(), "{:?}", p.unfixed);
    }

    #[test]
    fn a_culprit_goes_first_and_a_move_worth_little_is_not_made() {
        // Over its limit (7.2) by 2.8 on 8 CPUs: "noisy" and "c" each
        // remove all of it, "a" and "d" 2.
        let mut hot = host(
            "hot",
            8,
            vec![
                vm("a", 2, 2.0),
                vm("noisy", 4, 3.0),
                vm("c", 4, 3.0),
                vm("d", 2, 2.0),
            ],
        );
        hot.culprits.push(Culprit {
            vm: "noisy".into(),
            share: 0.5,
        });
        // Hot as measured (busy steal 3 of 32 vCPUs), but its demand is
        // over its limit by 0.1: a move would remove under 1 % of its vCPUs.
        let mut warm = host(
            "warm",
            16,
            (0..16)
                .map(|i| vm(&format!("w{i}"), 2, 14.5 / 16.0))
                .collect(),
        );
        warm.busy = 3.0;
        for v in &mut warm.vms {
            v.wait = 3.0 / 16.0;
        }
        let idle = host("idle", 32, vec![]);
        let f = test_fleet(vec![hot, warm, idle]);
        let p = plan(&f, &gain(20));
        assert_eq!(p.hot.len(), 2);
        assert_eq!(p.moves.len(), 1, "{:?}", p.moves);
        assert_eq!(f.hosts[0].vms[p.moves[0].vm].name, "noisy");
        assert_eq!(p.moves[0].why, Why::Culprit { share: 0.5 });
    }

    #[test]
    fn memory_per_node_and_headroom_bound_the_destinations() {
        // Over its limit (3.6) by 4.4; the one destination with a node free
        // for a 4 GiB VM (two of them) is at 2.7 of its own 3.6: a second
        // VM would add as much over that limit as it removes.
        let hot = host(
            "hot",
            4,
            (0..8).map(|i| vm(&format!("v{i}"), 1, 1.0)).collect(),
        );
        let mut dest = host("dest", 4, vec![vm("d", 2, 2.7)]);
        dest.nodes[0].free_bytes = 9 << 30;
        let mut full = host("full", 64, vec![]);
        full.nodes[0].free_bytes = 3 << 30;
        let f = test_fleet(vec![hot, dest, full]);
        let p = plan(&f, &gain(20));
        assert_eq!(p.moves.len(), 1, "{:?}", p.moves);
        assert_eq!(p.moves[0].to, 1);
        assert_eq!(p.unfixed.len(), 1, "{:?}", p.unfixed);
    }
}
