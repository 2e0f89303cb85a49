//! Where threads run: fork placement, wake-up placement and the periodic
//! load balancer, after kernel/sched/fair.c (v5.5+ load_balance).
//!
//! Each CPU in turn (random order) looks for the busiest other CPU of its
//! node, then each node for the busiest other node. An idle CPU pulls a
//! task from one with at least two more always-runnable ones. Otherwise
//! load is compared: nothing moves unless the busiest carries more than the
//! average and more than imbalance_pct of the local load (the kernel's
//! hysteresis), and only tasks whose load (task_h_load: its share of its
//! group's weight on that CPU) fits the imbalance move. Each failed attempt
//! halves that test (nr_balance_failed), and after cache_nice_tries + 2
//! failures one task is pushed whatever its load (active balance). Moves
//! change the group weights per CPU, so layouts with equal per-VM shares can
//! settle in different stable states.

use crate::cpuset::CpuSet;
use crate::host::Host;
use crate::sched::{h_load, index, Scratch};
use crate::timing::{Timing, BUSY_FACTOR, CACHE_NICE_TRIES};
use std::cell::OnceCell;
use std::cmp::Ordering;
use stealscope_placement::synthetic::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum GroupType {
    HasSpare,
    FullyBusy,
    Overloaded,
}

/// Per sched group (a CPU, or a node at the NUMA level).
#[derive(Debug, Clone, Copy)]
struct Stats {
    load: f64,
    util: f64,
    nr_busy: u32,
    cap: f64,
    kind: GroupType,
}

fn classify(load: f64, util: f64, nr: u32, nr_busy: u32, cap: f64, pct: f64) -> Stats {
    let kind = if (nr as f64) < cap || util * pct < cap * 100.0 {
        GroupType::HasSpare
    } else if (nr as f64) > cap && (util * pct > cap * 100.0 || nr_busy as f64 > cap) {
        GroupType::Overloaded
    } else {
        GroupType::FullyBusy
    };
    Stats {
        load,
        util,
        nr_busy,
        cap,
        kind,
    }
}

fn cpu_stats(sc: &Scratch, c: usize, pct: f64) -> Stats {
    classify(
        sc.cpu_load[c],
        sc.cpu_util[c].min(1.0),
        sc.cpu_nr[c],
        sc.cpu_nr_busy[c],
        1.0,
        pct,
    )
}

fn node_stats(sc: &Scratch, cpus: &[usize], pct: f64) -> Stats {
    let (mut load, mut util, mut nr, mut nr_busy) = (0.0, 0.0, 0, 0);
    for &c in cpus {
        load += sc.cpu_load[c];
        util += sc.cpu_util[c].min(1.0);
        nr += sc.cpu_nr[c];
        nr_busy += sc.cpu_nr_busy[c];
    }
    classify(load, util, nr, nr_busy, cpus.len() as f64, pct)
}

pub fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// Where the kernel starts a new thread: the allowed CPU with the least
/// load (find_idlest_cpu), ties at random.
pub fn fork_cpu(h: &Host, allowed: &CpuSet, rng: &mut Rng) -> usize {
    let mut load = vec![0.0; h.ncpu];
    for (_, t) in h.live_tasks() {
        load[t.cpu] += t.load_avg.max(t.wants.min(1.0));
    }
    let mut best: Vec<usize> = Vec::new();
    let mut min = f64::INFINITY;
    for c in allowed.iter().filter(|c| *c < h.ncpu) {
        if load[c] < min - 1e-9 {
            min = load[c];
            best.clear();
        }
        if load[c] <= min + 1e-9 {
            best.push(c);
        }
    }
    if best.is_empty() {
        return 0;
    }
    best[rng.below(best.len() as u64) as usize]
}

/// A random allowed CPU.
pub fn random_cpu(h: &Host, allowed: &CpuSet, rng: &mut Rng) -> usize {
    let v: Vec<usize> = allowed.iter().filter(|c| *c < h.ncpu).collect();
    if v.is_empty() {
        0
    } else {
        v[rng.below(v.len() as u64) as usize]
    }
}

/// Moves `task` to `dst` (affinity permitting).
pub(crate) fn migrate(h: &mut Host, task: usize, dst: usize) -> bool {
    let t = &mut h.tasks[task];
    if t.cpu == dst || !t.allowed.contains(dst) {
        return false;
    }
    t.cpu = dst;
    true
}

/// Threads on `src` that could move to `dst`, in random order; the one
/// running now (any of them, in a fluid model) cannot be detached unless
/// `active`, and each of the others is cache hot (skipped) with chance `hot`.
fn candidates(
    h: &Host,
    sc: &Scratch,
    (src, dst): (usize, usize),
    active: bool,
    hot: f64,
    rng: &mut Rng,
) -> Vec<usize> {
    let mut v: Vec<usize> = sc.by_cpu[sc.start[src]..sc.start[src + 1]]
        .iter()
        .copied()
        .filter(|&i| h.tasks[i].wants > 0.0)
        .collect();
    shuffle(&mut v, rng);
    if !active && !v.is_empty() {
        v.remove(0);
    }
    v.retain(|&i| h.tasks[i].allowed.contains(dst));
    if hot > 0.0 {
        v.retain(|_| rng.unit() >= hot);
    }
    v
}

/// can_migrate_task's cache-hot test on `src`: skipped once the balancer
/// has failed more than cache_nice_tries times.
fn hot_chance(tm: Option<&Timing>, sc: &Scratch, src: usize, failed: u32) -> f64 {
    match tm {
        Some(tm) if failed <= CACHE_NICE_TRIES => tm.p_hot(sc.cpu_nr[src]),
        _ => 0.0,
    }
}

/// A VM's thread whose memory lives on `node` (NUMA balancing keeps it there).
fn prefers(h: &Host, task: usize, node: usize) -> bool {
    match h.tasks[task].vm {
        Some(v) => h.vms[v].home_node() == node && h.vms[v].mem_share(node) > 0.5,
        None => false,
    }
}

/// One pass of the load balancer over every CPU and node. Returns the
/// number of threads moved; `steady` is false when some balancer is still
/// failing (it will act in a later tick). With `tm`, each CPU balances when
/// its own interval has passed (`now`), else on the tick grid.
pub fn balance(
    h: &mut Host,
    sc: &mut Scratch,
    rng: &mut Rng,
    pct: f64,
    (tick, dt): (u64, f64),
    tm: Option<&Timing>,
) -> (usize, bool) {
    let mut moved = 0;
    let nodes = h.nodes.clone();
    sc.dirty.clear();
    sc.dirty.resize(h.ncpu, false);
    // A busy CPU balances every busy_factor (16) x its domain's CPUs ms; one
    // with spare capacity every tick.
    let every = |cpus: usize| ((BUSY_FACTOR * cpus as f64 / 1000.0) / dt).round().max(1.0) as u64;
    let now = tick as f64 * dt;
    // `sc` is indexed again only after the pass, so every CPU's figures
    // hold for the whole of it: classified once, not once per pair.
    let stats: Vec<Stats> = (0..h.ncpu).map(|c| cpu_stats(sc, c, pct)).collect();
    for node in nodes.iter() {
        let mut order = node.clone();
        shuffle(&mut order, rng);
        let k = every(node.len());
        let mut pass = Pass {
            pct,
            tm,
            stats: &stats,
            top: top_two(node, &stats),
            clean: true,
            by_load: OnceCell::new(),
            avg: node.iter().map(|&c| sc.cpu_load[c]).sum::<f64>() / node.len() as f64,
        };
        for &dst in &order {
            // No CPU is dirty until a thread moves (balance_one, finish).
            pass.clean = moved == 0;
            let busy = stats[dst].kind != GroupType::HasSpare;
            let due = match tm {
                Some(_) => now + 1e-9 >= h.lb_next_s[dst],
                None => (tick + dst as u64).is_multiple_of(k) || !busy,
            };
            if !due {
                continue;
            }
            let (m, balanced) = balance_one(h, sc, rng, &pass, dst, node, 0);
            moved += m;
            if let Some(tm) = tm {
                // rebalance_domains: the interval doubles while balanced
                // and drops back to its minimum when there was work.
                h.lb_doubled[dst] = balanced && m == 0;
                h.lb_next_s[dst] = now + tm.balance_interval_s(node.len(), h.lb_doubled[dst], busy);
            }
        }
    }
    if moved > 0 {
        index(h, sc);
        sc.dirty.iter_mut().for_each(|d| *d = false);
    }
    let mut moved_numa = 0;
    if nodes.len() > 1 {
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        shuffle(&mut order, rng);
        let k = every(h.ncpu);
        for n in order {
            let due = (tick + n as u64).is_multiple_of(k)
                || node_stats(sc, &nodes[n], pct).kind == GroupType::HasSpare;
            if due {
                moved_numa += balance_numa(h, sc, rng, pct, n);
            }
        }
    }
    if moved_numa > 0 {
        index(h, sc);
    }
    let steady = h.lb_failed.iter().all(|f| f[0] == 0 && f[1] == 0);
    (moved + moved_numa, steady)
}

/// What one pass over a node's CPUs reads: the CPUs' figures as indexed
/// before it, its two busiest CPUs, whether none is dirty yet and the
/// node's mean load.
struct Pass<'a> {
    pct: f64,
    tm: Option<&'a Timing>,
    stats: &'a [Stats],
    top: (Option<usize>, Option<usize>),
    clean: bool,
    /// Once a CPU is dirty: the node's CPUs busiest first ([`by_load`]).
    by_load: OnceCell<Vec<usize>>,
    avg: f64,
}

/// `cpus` by (group type, load), greatest first, equal ones in the order
/// given (a stable sort): the first that may be taken from is the one
/// [`busiest_of`] finds.
fn by_load(cpus: &[usize], stats: &[Stats]) -> Vec<usize> {
    let key = |c: usize| (stats[c].kind, stats[c].load);
    let mut v = cpus.to_vec();
    v.sort_by(|&a, &b| key(b).partial_cmp(&key(a)).unwrap_or(Ordering::Equal));
    v
}

/// The busiest of `cpus` other than `skip`, by (group type, load): the
/// first of the greatest in the order given.
fn busiest_of(cpus: &[usize], stats: &[Stats], skip: &dyn Fn(usize) -> bool) -> Option<usize> {
    let mut best: Option<usize> = None;
    for &c in cpus {
        if skip(c) {
            continue;
        }
        let better =
            best.is_none_or(|b| (stats[c].kind, stats[c].load) > (stats[b].kind, stats[b].load));
        if better {
            best = Some(c);
        }
    }
    best
}

/// The busiest of `cpus` and the busiest of the others: with no CPU
/// dirty, the busiest other than a balancing CPU is one of the two.
fn top_two(cpus: &[usize], stats: &[Stats]) -> (Option<usize>, Option<usize>) {
    let first = busiest_of(cpus, stats, &|_| false);
    (first, busiest_of(cpus, stats, &|c| Some(c) == first))
}

/// Balances `dst` against the busiest other CPU of `span`. Returns the
/// threads moved and whether the CPUs were found balanced.
fn balance_one(
    h: &mut Host,
    sc: &mut Scratch,
    rng: &mut Rng,
    pass: &Pass,
    dst: usize,
    span: &[usize],
    level: usize,
) -> (usize, bool) {
    if sc.dirty[dst] {
        return (0, true);
    }
    let (pct, tm, avg) = (pass.pct, pass.tm, pass.avg);
    let local = pass.stats[dst];
    let busiest = match pass.top {
        (Some(first), second) if pass.clean => Some(first).filter(|&c| c != dst).or(second),
        _ => pass
            .by_load
            .get_or_init(|| by_load(span, pass.stats))
            .iter()
            .copied()
            .find(|&c| c != dst && !sc.dirty[c]),
    };
    let Some(src) = busiest else {
        return (0, true);
    };
    let b = pass.stats[src];
    let failed = h.lb_failed[dst][level];
    let mut moved = 0;
    let balanced;
    if b.kind != GroupType::Overloaded {
        balanced = true;
    } else if local.kind == GroupType::HasSpare {
        // An idle-ish CPU pulls one thread that waits all the time on an
        // overloaded CPU, busiest first (migrate_task: even out the threads
        // that always want to run); when none can come, that is balance,
        // not a failure.
        balanced = true;
        let mut over: Vec<(usize, Stats)> = span
            .iter()
            .filter(|&&c| c != dst && !sc.dirty[c])
            .map(|&c| (c, pass.stats[c]))
            .filter(|(_, s)| {
                s.kind == GroupType::Overloaded
                    && s.nr_busy >= 2
                    && s.nr_busy as i64 - local.nr_busy as i64 >= 2
            })
            .collect();
        over.sort_by(|a, b| b.1.load.total_cmp(&a.1.load));
        'cpus: for (c, _) in over {
            let hot = hot_chance(tm, sc, c, failed);
            for i in candidates(h, sc, (c, dst), false, hot, rng) {
                let t = &h.tasks[i];
                if t.runnable > 0.999 && migrate(h, i, dst) {
                    moved += 1;
                    sc.dirty[c] = true;
                    break 'cpus;
                }
            }
        }
    } else if (local.kind == GroupType::Overloaded && 100.0 * b.load <= pct * local.load)
        || local.load >= avg
        || b.load <= local.load
    {
        balanced = true;
    } else {
        let imb = (b.load - avg).min(avg - local.load);
        let hot = hot_chance(tm, sc, src, failed);
        let cands = candidates(h, sc, (src, dst), false, hot, rng);
        // Nothing to move at all is balance; threads skipped as cache hot
        // are a failure (the next attempt relaxes the tests).
        balanced = cands.is_empty() && hot == 0.0;
        moved += pull_load(h, sc, &cands, dst, imb, failed, |_, _| true);
    }
    let moved = finish(h, sc, rng, (src, dst, dst), level, balanced, moved);
    (moved, balanced)
}

/// migrate_load: moves threads whose load (task_h_load) fits the imbalance,
/// a test each failed attempt halves (nr_balance_failed), until it is spent.
fn pull_load(
    h: &mut Host,
    sc: &Scratch,
    cands: &[usize],
    dst: usize,
    mut imb: f64,
    failed: u32,
    ok: impl Fn(&Host, usize) -> bool,
) -> usize {
    let mut moved = 0;
    for &i in cands {
        let load = h_load(h, sc, i);
        if load / 2f64.powi(failed.min(30) as i32) > imb + 1e-9 || !ok(h, i) {
            continue;
        }
        if migrate(h, i, dst) {
            moved += 1;
            imb -= load;
            if imb <= 1e-9 {
                break;
            }
        }
    }
    moved
}

/// Updates the failure count (kept on `fail_cpu`) and does the active
/// balance when it is due.
fn finish(
    h: &mut Host,
    sc: &mut Scratch,
    rng: &mut Rng,
    (src, dst, fail_cpu): (usize, usize, usize),
    level: usize,
    balanced: bool,
    mut moved: usize,
) -> usize {
    let cache_nice_tries = if level == 0 { 1 } else { 2 };
    let failed = &mut h.lb_failed[fail_cpu][level];
    if balanced || moved > 0 {
        *failed = 0;
    } else {
        *failed += 1;
        if *failed > cache_nice_tries + 2 {
            *failed = cache_nice_tries + 1;
            if let Some(i) = candidates(h, sc, (src, dst), true, 0.0, rng)
                .first()
                .copied()
            {
                if migrate(h, i, dst) {
                    moved += 1;
                }
            }
        }
    }
    if moved > 0 {
        sc.dirty[src] = true;
        sc.dirty[dst] = true;
    }
    moved
}

fn balance_numa(
    h: &mut Host,
    sc: &mut Scratch,
    rng: &mut Rng,
    pct: f64,
    local_node: usize,
) -> usize {
    let nodes = h.nodes.clone();
    let local = node_stats(sc, &nodes[local_node], pct);
    let mut busiest: Option<(usize, Stats)> = None;
    for (n, cpus) in nodes.iter().enumerate() {
        if n == local_node {
            continue;
        }
        let s = node_stats(sc, cpus, pct);
        let key = (s.kind, s.load / s.cap);
        if busiest
            .as_ref()
            .is_none_or(|(_, b)| key > (b.kind, b.load / b.cap))
        {
            busiest = Some((n, s));
        }
    }
    let Some((bn, b)) = busiest else {
        return 0;
    };
    // The CPU that balances for the node: its least loaded one.
    let dst = *nodes[local_node]
        .iter()
        .min_by(|a, c| sc.cpu_load[**a].total_cmp(&sc.cpu_load[**c]))
        .expect("nodes have CPUs");
    let lead = nodes[local_node][0];
    let failed = h.lb_failed[lead][1];
    // Source: the busiest CPU of the busiest node that has a thread to give.
    let src = nodes[bn]
        .iter()
        .copied()
        .filter(|&c| sc.cpu_nr[c] >= 1)
        .max_by(|a, c| {
            (sc.cpu_nr[*a] >= 2, sc.cpu_load[*a])
                .partial_cmp(&(sc.cpu_nr[*c] >= 2, sc.cpu_load[*c]))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    let Some(src) = src else {
        h.lb_failed[lead][1] = 0;
        return 0;
    };
    let cands = candidates(h, sc, (src, dst), false, 0.0, rng);
    if cands.is_empty() {
        return finish(h, sc, rng, (src, dst, lead), 1, true, 0);
    }
    let locality_ok = |h: &Host, i: usize| !h.numa_balancing || failed > 2 || !prefers(h, i, bn);
    let mut moved = 0;
    let mut balanced = false;
    let avg_all: f64 = {
        let tl: f64 = (0..h.ncpu).map(|c| sc.cpu_load[c]).sum();
        tl / h.ncpu as f64
    };
    if b.kind != GroupType::Overloaded {
        // Allow a small imbalance between nodes (adjust_numa_imbalance).
        let diff = b.nr_busy as i64 - local.nr_busy as i64;
        if local.kind == GroupType::HasSpare && diff > 2 {
            for i in cands.clone().into_iter().take((diff / 2) as usize) {
                if locality_ok(h, i) && migrate(h, i, dst) {
                    moved += 1;
                }
            }
        } else {
            balanced = true;
        }
    } else if local.kind == GroupType::HasSpare {
        // migrate_util: fill the local node's spare capacity.
        let mut room = local.cap - local.util;
        for i in cands.clone() {
            let u = h.tasks[i].util_avg;
            if u <= room && locality_ok(h, i) && migrate(h, i, dst) {
                moved += 1;
                room -= u;
            }
        }
        if moved == 0 && room < 0.5 {
            balanced = true;
        }
    } else {
        let (la, ba) = (local.load / local.cap, b.load / b.cap);
        if (local.kind == GroupType::Overloaded && 100.0 * ba <= pct * la)
            || la >= avg_all
            || ba <= la
        {
            balanced = true;
        } else {
            let imb = ((ba - avg_all) * b.cap).min((avg_all - la) * local.cap);
            moved += pull_load(h, sc, &cands, dst, imb, failed, locality_ok);
        }
    }
    finish(h, sc, rng, (src, dst, lead), 1, balanced, moved)
}

/// Wake-up placement (select_idle_sibling): a thread that sleeps and wakes
/// up behind others moves to an allowed CPU of its node that idles enough
/// to hold it.
pub fn wake_idle(h: &mut Host, sc: &mut Scratch) -> usize {
    let mut moved = 0;
    // Last tick's idle shares, updated as threads move (run_tick redoes them).
    let mut idle = std::mem::take(&mut sc.idle);
    if idle.len() != h.ncpu || !idle.iter().any(|x| *x > 1e-6) {
        sc.idle = idle;
        return 0;
    }
    // No CPU idles more than this: a thread it cannot hold stays (exact:
    // the best CPU found below would fail the same test).
    let mut most = idle.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    for c in 0..h.ncpu {
        if sc.cpu_nr[c] < 2 {
            continue;
        }
        // The best CPU for the last allowed set looked up here (`idle`
        // changes only when a thread moves, and then this CPU is done).
        let mut memo: Option<(usize, Option<usize>)> = None;
        for k in sc.start[c]..sc.start[c + 1] {
            let i = sc.by_cpu[k];
            let t = &h.tasks[i];
            if t.wants <= 0.0 || t.wants >= 1.0 || t.wait <= 1e-9 {
                continue;
            }
            if !(most > t.wants && most > idle[c] + t.wants) {
                continue;
            }
            let best = match memo {
                Some((j, best)) if h.tasks[j].allowed == t.allowed => best,
                _ => {
                    let node = h.node_of[c];
                    let best = h.nodes[node]
                        .iter()
                        .copied()
                        .filter(|&d| d != c && t.allowed.contains(d))
                        .max_by(|a, b| idle[*a].total_cmp(&idle[*b]).then(b.cmp(a)));
                    memo = Some((i, best));
                    best
                }
            };
            if let Some(d) = best {
                if idle[d] > t.wants && idle[d] > idle[c] + t.wants {
                    let w = t.wants;
                    if migrate(h, i, d) {
                        idle[d] -= w;
                        idle[c] += w;
                        most = idle.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        moved += 1;
                        break;
                    }
                }
            }
        }
    }
    sc.idle = idle;
    if moved > 0 {
        index(h, sc);
    }
    moved
}

/// Wake-up placement of the threads another thread of their VM woke during
/// this tick (a vCPU kicking the main loop, the main loop releasing a vCPU
/// blocked on QEMU's lock): select_task_rq_fair's fast path, taken only by
/// a thread that was really dequeued (not still queued by DELAY_DEQUEUE:
/// the share of the time it is not runnable). Returns the threads moved.
pub fn wake_placement(h: &mut Host, sc: &Scratch, rng: &mut Rng, dt: f64, pct: f64) -> usize {
    let mut moved = 0;
    for i in 0..h.tasks.len() {
        let t = &h.tasks[i];
        let rate = t.wakeups_per_s * t.kicks * (1.0 - t.runnable - t.delayed).max(0.0);
        let Some(vm) = t.vm else { continue };
        if !t.alive || rate <= 0.0 || rng.unit() >= 1.0 - (-rate * dt).exp() {
            continue;
        }
        // The waker: another thread of the VM (for the main loop, a vCPU).
        let wakers: Vec<usize> = h.vms[vm]
            .threads()
            .filter(|&w| w != i && (!t.emulator || !h.tasks[w].emulator))
            .collect();
        if wakers.is_empty() {
            continue;
        }
        let waker = wakers[rng.below(wakers.len() as u64) as usize];
        let (this, prev) = (h.tasks[waker].cpu, t.cpu);
        if this == prev || !t.allowed.contains(this) {
            continue;
        }
        let idle = |c: usize, rng: &mut Rng| rng.unit() < sc.idle.get(c).copied().unwrap_or(0.0);
        // wake_affine_idle, then wake_affine_weight.
        let target = if idle(this, rng) {
            if idle(prev, rng) {
                prev
            } else {
                this
            }
        } else if idle(prev, rng) {
            prev
        } else {
            let load = h_load(h, sc, i);
            let this_eff = (sc.cpu_load[this] + load) * 100.0;
            let prev_eff = (sc.cpu_load[prev] - load) * (100.0 + (pct - 100.0) / 2.0);
            if this_eff < prev_eff {
                this
            } else {
                prev
            }
        };
        if target != prev && migrate(h, i, target) {
            moved += 1;
        }
    }
    moved
}
