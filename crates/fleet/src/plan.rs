//! The planner: which VMs leave which hot hosts, and where they go.
//!
//! A host is hot when its busy steal per vCPU is above `threshold` (the
//! StealscopeHostBusySteal alert's 5 %) and most of its steal is busy
//! steal; a host whose steal is mostly idle steal, or whose idle steal is
//! over the threshold as well, is fixed where it is (`place`) and none of
//! its VMs moves. A hot host is fixed when its demand (the
//! `demand_quantile` of its per-step sum of what its VMs want,
//! [`crate::want`]) is under its CPUs less `headroom`. From each hot host, worst
//! first, the planner moves, in this order of preference: the smallest of
//! the named culprits (host.noisy-neighbor) whose leaving alone fixes the
//! host; else the smallest VM whose leaving alone fixes it; else the
//! largest culprit, or else the largest VM, and it looks again. A VM goes
//! to the least loaded host where its demand history added to the host's
//! stays under that host's limit and one NUMA node has free memory for all
//! of it; hosts with busy steal of their own, or idle steal over the
//! threshold, take none. At most `max_moves`. With `Planner::Gain` the
//! moves are chosen across hosts by the busy steal each removes instead
//! ([`gain`]); the same hosts are hot and the same take VMs.

/// The gain-ranked choice of moves ([`Planner::Gain`]): inside this module
/// because it works on the batch state the planner keeps.
mod gain;

use crate::model::{quantile, Fleet, Host, Vm};
use serde::Serialize;

#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Busy steal per vCPU above which a host is hot (share, 0.05 = 5 %).
    pub threshold: f64,
    /// Share of a host's CPUs kept free of runnable demand.
    pub headroom: f64,
    /// Which quantile of the per-step demand counts as the host's.
    pub demand_quantile: f64,
    pub max_moves: usize,
    /// How moves are chosen.
    pub planner: Planner,
    /// The gain-ranked planner stops when the next move would remove less
    /// busy steal than this share of its host's vCPU time (0.01 = 1 pp).
    pub min_gain: f64,
}

/// How the moves are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planner {
    /// Host by host, worst first, until each is under its limit.
    PerHost,
    /// One move at a time across all hot hosts, the one that removes the
    /// most busy steal first ([`gain`]).
    Gain,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            threshold: 0.05,
            headroom: 0.1,
            demand_quantile: 0.95,
            max_moves: 20,
            planner: Planner::Gain,
            min_gain: 0.01,
        }
    }
}

/// Why a VM moves.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Why {
    /// A named culprit whose leaving fixes its host alone.
    Culprit { share: f64 },
    /// The smallest VM whose leaving fixes its host alone.
    Smallest,
    /// The largest culprit: one step of several.
    LargestCulprit { share: f64 },
    /// The largest VM: one step of several.
    Largest,
    /// The VM whose leaving removes the most busy steal; one of several.
    MostRemoved,
}

#[derive(Debug, Clone, Serialize)]
pub struct Move {
    /// Indexes into `Fleet::hosts` and that host's `vms` (as read).
    #[serde(skip)]
    pub from: usize,
    #[serde(skip)]
    pub vm: usize,
    #[serde(skip)]
    pub to: usize,
    pub why: Why,
    /// NUMA node of the destination its memory fits in.
    pub node: u32,
}

/// A hot host the plan could not fix, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Unfixed {
    pub host: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Hot hosts (indexes), worst first.
    pub hot: Vec<usize>,
    /// Hosts whose steal is mostly idle steal: fix with `place`.
    pub local: Vec<usize>,
    pub moves: Vec<Move>,
    pub unfixed: Vec<Unfixed>,
}

/// A host's load as the planner tracks it through the batch.
pub(crate) struct Load {
    pub(crate) series: Vec<f64>,
    /// The quantile of `series` (`PlanOptions::demand_quantile`).
    pub(crate) level: f64,
    pub(crate) limit: f64,
    pub(crate) free: Vec<(u32, u64)>,
    /// VMs still on it (indexes into the host's `vms`).
    pub(crate) here: Vec<usize>,
    pub(crate) takes: bool,
}

impl Load {
    /// The NUMA node with the most free memory, if it holds `mem` bytes.
    pub(crate) fn node_for(&self, mem: u64) -> Option<u32> {
        self.free
            .iter()
            .filter(|n| n.1 >= mem)
            .max_by_key(|n| n.1)
            .map(|n| n.0)
    }
}

pub(crate) fn add(series: &mut [f64], d: &[f64], sign: f64) {
    for (s, x) in series.iter_mut().zip(d) {
        *s += sign * x;
    }
}

pub(crate) fn level(series: &[f64], q: f64) -> f64 {
    quantile(&mut series.to_vec(), q)
}

pub(crate) fn movable(v: &Vm) -> bool {
    v.vcpus > 0 && v.memory_bytes.is_some() && !v.demand.is_empty()
}

pub fn plan(f: &Fleet, o: &PlanOptions) -> Plan {
    let steps = f
        .hosts
        .iter()
        .flat_map(|h| h.vms.iter().map(|v| v.demand.len()))
        .max()
        .unwrap_or(0);
    let mut loads: Vec<Load> = f.hosts.iter().map(|h| load_of(h, steps, o)).collect();
    let mut p = Plan::default();
    for (i, h) in f.hosts.iter().enumerate() {
        if h.busy_per_vcpu() > o.threshold {
            // Idle steal over the threshold too (VMs pinned to a few CPUs of
            // a full host): its cause is not in the metrics, so the VMs left
            // behind would be predicted as if it were gone. Fixed locally
            // first, then planned again.
            if h.steal_is_idle() || h.idle_per_vcpu() > o.threshold {
                p.local.push(i);
            } else {
                p.hot.push(i);
            }
        } else if h.steal_is_idle() && h.idle_per_vcpu() > o.threshold {
            p.local.push(i);
        }
    }
    p.hot.sort_by(|a, b| {
        f.hosts[*b]
            .busy_per_vcpu()
            .total_cmp(&f.hosts[*a].busy_per_vcpu())
    });
    for &i in &p.hot {
        loads[i].takes = false;
    }
    for &i in &p.local {
        loads[i].takes = false;
    }
    // Destinations by load ratio, least loaded first (kept so as they fill).
    let mut order: Vec<usize> = (0..f.hosts.len()).filter(|&i| loads[i].takes).collect();
    order.sort_by(|a, b| ratio(f, &loads, *a).total_cmp(&ratio(f, &loads, *b)));
    match o.planner {
        Planner::PerHost => {
            for hi in p.hot.clone() {
                fix_host(f, o, hi, &mut loads, &mut order, &mut p);
            }
        }
        Planner::Gain => gain::choose(f, o, &mut loads, &mut order, &mut p),
    }
    p
}

fn load_of(h: &Host, steps: usize, o: &PlanOptions) -> Load {
    let mut series = vec![0.0; steps];
    for v in &h.vms {
        add(&mut series, &v.demand, 1.0);
    }
    Load {
        level: level(&series, o.demand_quantile),
        series,
        limit: h.cpus as f64 * (1.0 - o.headroom),
        free: h.nodes.iter().map(|n| (n.node, n.free_bytes)).collect(),
        here: (0..h.vms.len()).collect(),
        // A host with busy steal of its own (half the threshold), idle
        // steal to fix first (its cause, such as pinning, is not in the
        // metrics, so no prediction would hold), or unknown memory takes none.
        takes: !h.nodes.is_empty()
            && h.busy_per_vcpu() < o.threshold / 2.0
            && h.idle_per_vcpu() < o.threshold,
    }
}

/// Moves VMs off hot host `hi` until it is under its limit, out of moves
/// or out of candidates.
fn fix_host(
    f: &Fleet,
    o: &PlanOptions,
    hi: usize,
    loads: &mut [Load],
    order: &mut Vec<usize>,
    p: &mut Plan,
) {
    let host = &f.hosts[hi];
    let mut tried: Vec<usize> = Vec::new();
    loop {
        if level(&loads[hi].series, o.demand_quantile) <= loads[hi].limit {
            return;
        }
        if p.moves.len() >= o.max_moves {
            p.unfixed.push(Unfixed {
                host: host.name.clone(),
                reason: format!("--max-moves {} reached", o.max_moves),
            });
            return;
        }
        let Some((vm, why)) = choose(host, o, &loads[hi], &tried) else {
            p.unfixed.push(Unfixed {
                host: host.name.clone(),
                reason: "no VM left that fits elsewhere".into(),
            });
            return;
        };
        tried.push(vm);
        let v = &host.vms[vm];
        let Some((to, node)) = destination(f, o, v, loads, order) else {
            continue;
        };
        apply(f, o, (hi, vm, to, node), loads);
        reposition(order, to, loads, f);
        p.moves.push(Move {
            from: hi,
            vm,
            to,
            why,
            node,
        });
    }
}

/// The VM to move next from a hot host (see the module comment).
fn choose(h: &Host, o: &PlanOptions, l: &Load, tried: &[usize]) -> Option<(usize, Why)> {
    let cands: Vec<usize> = l
        .here
        .iter()
        .copied()
        .filter(|&i| movable(&h.vms[i]) && !tried.contains(&i))
        .collect();
    let share = |i: usize| {
        h.culprits
            .iter()
            .find(|c| c.vm == h.vms[i].name)
            .map(|c| c.share)
    };
    let fixes = |i: usize| {
        let mut s = l.series.clone();
        add(&mut s, &h.vms[i].demand, -1.0);
        level(&s, o.demand_quantile) <= l.limit
    };
    let size = |i: usize| h.vms[i].mean_demand();
    let smallest =
        |it: &mut dyn Iterator<Item = usize>| it.min_by(|a, b| size(*a).total_cmp(&size(*b)));
    if let Some(i) = smallest(
        &mut cands
            .iter()
            .copied()
            .filter(|&i| share(i).is_some() && fixes(i)),
    ) {
        return Some((i, Why::Culprit { share: share(i)? }));
    }
    if let Some(i) = smallest(&mut cands.iter().copied().filter(|&i| fixes(i))) {
        return Some((i, Why::Smallest));
    }
    let largest =
        |it: &mut dyn Iterator<Item = usize>| it.max_by(|a, b| size(*a).total_cmp(&size(*b)));
    if let Some(i) = largest(&mut cands.iter().copied().filter(|&i| share(i).is_some())) {
        return Some((i, Why::LargestCulprit { share: share(i)? }));
    }
    largest(&mut cands.iter().copied()).map(|i| (i, Why::Largest))
}

/// The least loaded host that takes `v` under its limit with its memory
/// in one node; the best of the first few that fit.
fn destination(
    f: &Fleet,
    o: &PlanOptions,
    v: &Vm,
    loads: &[Load],
    order: &[usize],
) -> Option<(usize, u32)> {
    let mem = v.memory_bytes?;
    // The quantile of series + demand is at least the series' own plus
    // the demand's least step: a cheap, exact reject that spares the
    // exact check on full hosts (a VM no host takes was checked against
    // every host, which at 10,000 hosts was most of the choice's time).
    // (A history shorter than the fleet's adds nothing at its missing steps.)
    let steps = order.first().map_or(0, |&d| loads[d].series.len());
    let least = if v.demand.len() < steps {
        0.0
    } else {
        v.demand.iter().copied().fold(f64::INFINITY, f64::min)
    };
    let mut best: Option<(f64, usize, u32)> = None;
    let mut fits = 0;
    for &d in order {
        let l = &loads[d];
        if l.level + least > l.limit + 1e-9 {
            continue;
        }
        let Some(node) = l.node_for(mem) else {
            continue;
        };
        let mut s = l.series.clone();
        add(&mut s, &v.demand, 1.0);
        let after = level(&s, o.demand_quantile);
        if after > l.limit {
            continue;
        }
        let ratio = after / f.hosts[d].cpus.max(1) as f64;
        if best.is_none_or(|b| ratio < b.0) {
            best = Some((ratio, d, node));
        }
        fits += 1;
        if fits >= 8 {
            break;
        }
    }
    best.map(|b| (b.1, b.2))
}

pub(crate) fn apply(
    f: &Fleet,
    o: &PlanOptions,
    (from, vm, to, node): (usize, usize, usize, u32),
    loads: &mut [Load],
) {
    let v = &f.hosts[from].vms[vm];
    add(&mut loads[from].series, &v.demand, -1.0);
    loads[from].here.retain(|&i| i != vm);
    loads[from].level = level(&loads[from].series, o.demand_quantile);
    add(&mut loads[to].series, &v.demand, 1.0);
    loads[to].level = level(&loads[to].series, o.demand_quantile);
    let mem = v.memory_bytes.unwrap_or(0);
    if let Some(n) = loads[to].free.iter_mut().find(|n| n.0 == node) {
        n.1 = n.1.saturating_sub(mem);
    }
}

fn mean(s: &[f64]) -> f64 {
    s.iter().sum::<f64>() / s.len().max(1) as f64
}

fn ratio(f: &Fleet, loads: &[Load], d: usize) -> f64 {
    mean(&loads[d].series) / f.hosts[d].cpus.max(1) as f64
}

/// Keeps the destinations ordered by mean load ratio: only `to`'s load
/// changed, so it alone moves (re-sorting all of them after every move
/// made the choice quadratic in the fleet's size).
pub(crate) fn reposition(order: &mut Vec<usize>, to: usize, loads: &[Load], f: &Fleet) {
    if let Some(k) = order.iter().position(|&d| d == to) {
        order.remove(k);
    }
    let r = ratio(f, loads, to);
    let at = order.partition_point(|&d| ratio(f, loads, d) <= r);
    order.insert(at, to);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{test_fleet as fleet, test_host, test_vm as vm, Culprit};

    fn host(name: &str, cpus: u32, idle: f64, vms: Vec<Vm>) -> Host {
        let wait: f64 = vms.iter().map(|v| v.wait).sum();
        test_host(name, cpus, 16 << 30, (wait - idle).max(0.0), vms)
    }

    #[test]
    fn the_smallest_vm_that_fixes_the_host_goes_to_the_idlest_host() {
        // hot: 8 CPUs, demand 4 + 3 + 1.5 = 8.5 > 7.2; the 1.5-CPU VM
        // leaving brings it to 7.0.
        let hot = host(
            "hot",
            8,
            0.0,
            vec![
                vm("big", 4, 4.0, 0.4),
                vm("mid", 4, 3.0, 0.3),
                vm("small", 2, 1.5, 0.2),
            ],
        );
        let busy = host("busy", 8, 2.0, vec![vm("x", 8, 6.0, 0.0)]);
        let idle = host("idle", 8, 6.0, vec![vm("y", 2, 2.0, 0.0)]);
        let f = fleet(vec![hot, busy, idle]);
        let p = plan(&f, &PlanOptions::default());
        assert_eq!(p.hot, vec![0]);
        assert_eq!(p.moves.len(), 1);
        let m = &p.moves[0];
        assert_eq!(
            (f.hosts[m.from].vms[m.vm].name.as_str(), m.to),
            ("small", 2)
        );
        assert_eq!(m.why, Why::Smallest);
    }

    #[test]
    fn a_culprit_goes_first_and_idle_steal_stays() {
        let mut hot = host(
            "hot",
            8,
            0.0,
            vec![
                vm("noisy", 4, 3.0, 0.1),
                vm("a", 2, 2.0, 0.3),
                vm("b", 2, 2.0, 0.3),
                vm("c", 2, 1.9, 0.3),
            ],
        );
        hot.culprits.push(Culprit {
            vm: "noisy".into(),
            share: 0.6,
        });
        // Steal all idle: 1.2 CPU-s/s of wait while 3 CPUs idle.
        let pinned = host("pinned", 8, 3.0, vec![vm("p", 8, 5.0, 1.2)]);
        let idle = host("idle", 16, 12.0, vec![vm("y", 2, 2.0, 0.0)]);
        let f = fleet(vec![hot, pinned, idle]);
        let p = plan(&f, &PlanOptions::default());
        assert_eq!(p.local, vec![1]);
        assert_eq!(p.moves.len(), 1);
        assert_eq!(f.hosts[0].vms[p.moves[0].vm].name, "noisy");
        assert_eq!(p.moves[0].why, Why::Culprit { share: 0.6 });
        assert!(p.moves.iter().all(|m| m.from != 1 && m.to != 1));
    }

    #[test]
    fn a_hot_host_with_idle_steal_too_is_fixed_locally() {
        // 8 CPUs, 12 busy vCPUs: 4 CPU-s/s of wait, of which 1.0 while
        // CPUs idled (VMs pinned to a few CPUs): busy 3.0, idle 1.0, both
        // over 5 % of its vCPUs. Moving from it would be predicted as if
        // the pinning went with the VMs that left.
        let vms = (0..6)
            .map(|i| vm(&format!("p{i}"), 2, 2.0, 4.0 / 6.0))
            .collect();
        let both = host("both", 8, 1.0, vms);
        assert!(both.busy_per_vcpu() > 0.05 && !both.steal_is_idle());
        let idle = host("idle", 32, 30.0, vec![vm("y", 2, 2.0, 0.0)]);
        let f = fleet(vec![both, idle]);
        let p = plan(&f, &PlanOptions::default());
        assert_eq!((p.hot.len(), p.local.clone()), (0, vec![0]));
        assert!(p.moves.is_empty(), "{:?}", p.moves);
    }

    #[test]
    fn max_moves_and_memory_bound_the_plan() {
        let hot = host(
            "hot",
            4,
            0.0,
            (0..6).map(|i| vm(&format!("v{i}"), 1, 1.0, 0.3)).collect(),
        );
        let mut small = host("small", 16, 16.0, vec![]);
        small.nodes[0].free_bytes = 5 << 30; // one 4 GiB VM fits
        let f = fleet(vec![hot, small]);
        let p = plan(
            &f,
            &PlanOptions {
                max_moves: 5,
                ..PlanOptions::default()
            },
        );
        assert_eq!(p.moves.len(), 1, "{:?}", p.moves);
        assert_eq!(p.unfixed.len(), 1);
    }

    #[test]
    fn a_shorter_history_is_checked_at_the_steps_it_has() {
        // The destination is busy in the last two steps only; the VM's
        // history covers the first two, so it fits (1.5 + 0 at each step,
        // 6 at the others, under 7.2), though its least step added to the
        // destination's quantile (6 + 1.5) would not.
        let hot = host(
            "hot",
            4,
            0.0,
            vec![
                Vm {
                    demand: vec![1.5, 1.5],
                    ..vm("short", 2, 1.5, 0.3)
                },
                // Of unknown memory: they stay.
                Vm {
                    memory_bytes: None,
                    ..vm("a", 2, 2.0, 0.3)
                },
                Vm {
                    memory_bytes: None,
                    ..vm("b", 2, 2.0, 0.3)
                },
            ],
        );
        let mut dest = host("dest", 8, 4.0, vec![vm("d", 6, 3.0, 0.0)]);
        dest.vms[0].demand = vec![0.0, 0.0, 6.0, 6.0];
        let f = fleet(vec![hot, dest]);
        let p = plan(&f, &PlanOptions::default());
        assert_eq!(p.moves.len(), 1, "{:?} {:?}", p.moves, p.unfixed);
        assert_eq!(f.hosts[0].vms[p.moves[0].vm].name, "short");
    }
}
