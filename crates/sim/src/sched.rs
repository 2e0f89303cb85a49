//! One tick of the scheduler model: CFS with group scheduling, per CPU.
//!
//! Each CPU has its own run queue. A cpu group's weight (tg->shares) is
//! split over the CPUs where its threads are, in proportion to its load on
//! each (kernel/sched/fair.c calc_group_shares: shares * load /
//! tg_load, load = max(runnable weight, load_avg), at least MIN_SHARES).
//! Within a tick, CPU time goes to the top-level entities (group entities
//! and ungrouped threads) by weighted max-min sharing (what CFS converges
//! to over a few scheduling periods), then within each group to its threads.
//! A thread that does not get all it wants was runnable the whole tick: it
//! waited for the rest. A thread that got all it wanted still waited while
//! it was runnable behind others: its rate while runnable is its weighted
//! share against the others' runnable weight (mean field). Waiting while an
//! allowed CPU idled is idle steal.

use crate::host::{Host, MIN_SHARES};

/// PELT half-life, seconds.
const PELT_HALF_LIFE_S: f64 = 0.032;

/// Reused buffers (one set per host being simulated).
#[derive(Default, Debug, Clone)]
pub struct Scratch {
    /// Task indices grouped by CPU: `by_cpu[start[c]..start[c + 1]]`.
    pub start: Vec<usize>,
    pub by_cpu: Vec<usize>,
    fillpos: Vec<usize>,
    /// Per group: total load_avg.
    tg_load: Vec<f64>,
    /// Group entities per CPU: `cg[cg_start[c]..cg_start[c + 1]]`.
    cg: Vec<CpuGroup>,
    cg_start: Vec<usize>,
    /// CPUs a balancer moved a thread from or to this tick: their figures
    /// are stale until the next index, so they sit out.
    pub dirty: Vec<bool>,
    /// Per CPU: idle share of the tick; load for the balancer.
    pub idle: Vec<f64>,
    pub cpu_load: Vec<f64>,
    pub cpu_util: Vec<f64>,
    pub cpu_nr: Vec<u32>,
    /// Runnable-all-tick tasks per CPU (the balancer's "busy" count).
    pub cpu_nr_busy: Vec<u32>,
    ents: Vec<Ent>,
    members: Vec<usize>,
    fill: Vec<(f64, f64, usize)>,
}

#[derive(Debug, Clone, Copy)]
struct Ent {
    weight: f64,
    demand: f64,
    /// Group index, or usize::MAX for a single task (then `task`).
    group: usize,
    task: usize,
    alloc: f64,
    runnable: f64,
}

/// Weighted max-min: `cap` of CPU over items (weight, demand, out index);
/// writes each share into `out[idx]`.
fn waterfill(cap: f64, items: &mut [(f64, f64, usize)], out: &mut dyn FnMut(usize, f64)) {
    items.sort_by(|a, b| (a.1 / a.0).total_cmp(&(b.1 / b.0)));
    let mut left = cap.max(0.0);
    let mut wsum: f64 = items.iter().map(|i| i.0).sum();
    for &(w, d, idx) in items.iter() {
        let fair = if wsum > 0.0 { left * w / wsum } else { 0.0 };
        let got = d.min(fair);
        out(idx, got);
        left -= got;
        wsum -= w;
    }
}

/// The demand each live thread has at `t`.
pub fn set_wants(h: &mut Host, t: f64) {
    for i in 0..h.tasks.len() {
        let task = &h.tasks[i];
        if !task.alive {
            continue;
        }
        let level = match task.vm {
            Some(v) => h.vms[v].demand.level(t, h.vms[v].key),
            None => task.own_demand.level(t, task.tid as u64),
        };
        let task = &mut h.tasks[i];
        task.wants = (level + task.backlog).min(1.0);
    }
}

/// A cpu group's entity on one CPU.
#[derive(Debug, Clone, Copy)]
pub struct CpuGroup {
    pub group: usize,
    /// Sum of its threads' load_avg here, and how many are runnable.
    pub load_avg: f64,
    pub runnable: u32,
    /// The group entity's weight here (calc_group_shares).
    pub share: f64,
}

impl Scratch {
    /// The entity of `group` on `cpu`, if it has threads there.
    pub fn group_on(&self, cpu: usize, group: usize) -> Option<&CpuGroup> {
        self.cg[self.cg_start[cpu]..self.cg_start[cpu + 1]]
            .iter()
            .find(|g| g.group == group)
    }
}

/// Indexes live threads by CPU and computes every group's weight per CPU
/// and each CPU's load (what the load balancer reads).
pub fn index(h: &Host, sc: &mut Scratch) {
    let n = h.ncpu;
    sc.start.clear();
    sc.start.resize(n + 1, 0);
    sc.tg_load.clear();
    sc.tg_load.resize(h.groups.len(), 0.0);
    for (_, t) in h.live_tasks() {
        sc.start[t.cpu + 1] += 1;
        if let Some(g) = t.group {
            sc.tg_load[g] += t.load_avg;
        }
    }
    for c in 0..n {
        sc.start[c + 1] += sc.start[c];
    }
    sc.by_cpu.clear();
    sc.by_cpu.resize(sc.start[n], 0);
    sc.fillpos.clear();
    sc.fillpos.extend_from_slice(&sc.start[..n]);
    for (i, t) in h.live_tasks() {
        sc.by_cpu[sc.fillpos[t.cpu]] = i;
        sc.fillpos[t.cpu] += 1;
    }
    sc.cg.clear();
    sc.cg_start.clear();
    sc.cpu_load.clear();
    sc.cpu_load.resize(n, 0.0);
    sc.cpu_util.clear();
    sc.cpu_util.resize(n, 0.0);
    sc.cpu_nr.clear();
    sc.cpu_nr.resize(n, 0);
    sc.cpu_nr_busy.clear();
    sc.cpu_nr_busy.resize(n, 0);
    for c in 0..n {
        let first = sc.cg.len();
        sc.cg_start.push(first);
        let mut load = 0.0;
        for k in sc.start[c]..sc.start[c + 1] {
            let t = &h.tasks[sc.by_cpu[k]];
            sc.cpu_util[c] += t.util_avg;
            if t.wants > 0.0 {
                sc.cpu_nr[c] += 1;
            }
            if t.runnable > 0.999 {
                sc.cpu_nr_busy[c] += 1;
            }
            match t.group {
                None => load += t.load_avg,
                Some(g) => {
                    let runnable = (t.wants > 0.0) as u32;
                    match sc.cg[first..].iter_mut().find(|x| x.group == g) {
                        Some(x) => {
                            x.load_avg += t.load_avg;
                            x.runnable += runnable;
                        }
                        None => sc.cg.push(CpuGroup {
                            group: g,
                            load_avg: t.load_avg,
                            runnable,
                            share: 0.0,
                        }),
                    }
                }
            }
        }
        for x in &mut sc.cg[first..] {
            let shares = h.groups[x.group].shares;
            let here = x.load_avg.max(x.runnable as f64);
            let tg_weight = sc.tg_load[x.group] - x.load_avg + here;
            let s = if tg_weight > 0.0 {
                shares * here / tg_weight
            } else {
                shares
            };
            x.share = s.clamp(MIN_SHARES, shares);
            // A group entity's load: its weight here times how much of the
            // time it is runnable.
            load += x.share * x.load_avg.min(1.0);
        }
        sc.cpu_load[c] = load;
    }
    sc.cg_start.push(sc.cg.len());
}

/// The load this thread adds to its CPU as the balancer sees it (task_h_load).
pub fn h_load(h: &Host, sc: &Scratch, task: usize) -> f64 {
    let t = &h.tasks[task];
    match t.group {
        None => t.load_avg,
        Some(g) => match sc.group_on(t.cpu, g) {
            Some(x) if x.load_avg > 0.0 => t.load_avg * x.share * x.load_avg.min(1.0) / x.load_avg,
            _ => 0.0,
        },
    }
}

/// Runs one tick of `dt` seconds: CPU time per thread, waits, idle, averages.
/// `speed` gives each thread's useful work per unit of run time (NUMA).
pub fn run_tick(h: &mut Host, sc: &mut Scratch, dt: f64, speed: &dyn Fn(&Host, usize) -> f64) {
    let n = h.ncpu;
    let alpha = 0.5f64.powf(dt / PELT_HALF_LIFE_S);
    for c in 0..n {
        let cap = (1.0 - h.kernel[c]).max(0.0);
        // Top-level entities on this CPU.
        sc.ents.clear();
        for k in sc.start[c]..sc.start[c + 1] {
            let i = sc.by_cpu[k];
            let t = &h.tasks[i];
            if t.wants <= 0.0 {
                continue;
            }
            match t.group {
                None => sc.ents.push(Ent {
                    weight: 1.0,
                    demand: t.wants,
                    group: usize::MAX,
                    task: i,
                    alloc: 0.0,
                    runnable: t.runnable,
                }),
                Some(g) => {
                    if let Some(e) = sc.ents.iter_mut().find(|e| e.group == g) {
                        e.demand = (e.demand + t.wants).min(1.0);
                        // Runnable when any of its threads is (independent).
                        e.runnable = 1.0 - (1.0 - e.runnable) * (1.0 - t.runnable);
                    } else {
                        sc.ents.push(Ent {
                            weight: sc
                                .group_on(c, g)
                                .map_or(MIN_SHARES, |x| x.share.max(MIN_SHARES)),
                            demand: t.wants,
                            group: g,
                            task: i,
                            alloc: 0.0,
                            runnable: t.runnable,
                        });
                    }
                }
            }
        }
        sc.fill.clear();
        for (k, e) in sc.ents.iter().enumerate() {
            sc.fill.push((e.weight, e.demand, k));
        }
        {
            let ents = &mut sc.ents;
            waterfill(cap, &mut sc.fill, &mut |k, a| ents[k].alloc = a);
        }
        let busy_weight: f64 = sc.ents.iter().map(|e| e.weight * e.runnable).sum();
        let mut used = 0.0;
        for k in 0..sc.ents.len() {
            let e = sc.ents[k];
            // Share of the CPU this entity gets while it is runnable.
            let others = busy_weight - e.weight * e.runnable;
            let top_rate = cap * e.weight / (e.weight + others.max(0.0));
            sc.members.clear();
            if e.group == usize::MAX {
                sc.members.push(e.task);
            } else {
                for kk in sc.start[c]..sc.start[c + 1] {
                    let i = sc.by_cpu[kk];
                    let t = &h.tasks[i];
                    if t.group == Some(e.group) && t.wants > 0.0 {
                        sc.members.push(i);
                    }
                }
            }
            sc.fill.clear();
            for &i in &sc.members {
                sc.fill.push((1.0, h.tasks[i].wants, i));
            }
            {
                let tasks = &mut h.tasks;
                waterfill(e.alloc, &mut sc.fill, &mut |i, a| tasks[i].run = a);
            }
            let in_busy: f64 = sc.members.iter().map(|&i| h.tasks[i].runnable).sum();
            for &i in &sc.members {
                let t = &mut h.tasks[i];
                used += t.run;
                if t.run < t.wants - 1e-9 {
                    t.runnable = 1.0;
                } else {
                    let rate = top_rate / (1.0 + (in_busy - t.runnable).max(0.0));
                    t.runnable = if rate > 0.0 {
                        (t.run / rate).min(1.0)
                    } else {
                        1.0
                    };
                }
                t.wait = (t.runnable - t.run).max(0.0);
            }
        }
        for k in sc.start[c]..sc.start[c + 1] {
            let t = &mut h.tasks[sc.by_cpu[k]];
            if t.wants <= 0.0 {
                t.run = 0.0;
                t.wait = 0.0;
                t.runnable = 0.0;
            }
        }
        sc.idle.resize(n, 0.0);
        sc.idle[c] = (1.0 - h.kernel[c] - used).max(0.0);
    }
    // A thread that sleeps and wakes up behind others takes an idle CPU of
    // its node if one is free at that moment (select_idle_sibling): only the
    // wait when none is counts. Idle steal: waiting while some other allowed
    // CPU idled (independent in time).
    let any_idle = sc.idle.iter().any(|x| *x > 1e-9);
    for i in 0..h.tasks.len() {
        if !h.tasks[i].alive {
            continue;
        }
        let idle_wait = if any_idle && h.tasks[i].wait > 0.0 {
            let t = &h.tasks[i];
            let node = h.node_of[t.cpu];
            let (mut all_busy, mut node_busy) = (1.0, 1.0);
            for c in t.allowed.iter() {
                if c != t.cpu && c < n {
                    all_busy *= 1.0 - sc.idle[c];
                    if h.node_of[c] == node {
                        node_busy *= 1.0 - sc.idle[c];
                    }
                }
            }
            let sleeps = t.wants < 1.0 && t.run >= t.wants - 1e-9;
            let wait = if sleeps { t.wait * node_busy } else { t.wait };
            h.tasks[i].wait = wait;
            wait * (1.0 - all_busy)
        } else {
            0.0
        };
        let s = speed(h, i);
        let t = &mut h.tasks[i];
        t.idle_wait = idle_wait;
        t.work = t.run * s;
        t.load_avg = alpha * t.load_avg + (1.0 - alpha) * t.runnable;
        t.util_avg = alpha * t.util_avg + (1.0 - alpha) * t.run;
        t.backlog = if t.wants >= 1.0 {
            0.0
        } else {
            (t.wants - t.run).clamp(0.0, 1.0)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waterfill_is_weighted_max_min() {
        let mut items = vec![(1.0, 1.0, 0), (3.0, 1.0, 1), (1.0, 0.1, 2)];
        let mut out = [0.0; 3];
        waterfill(1.0, &mut items, &mut |i, a| out[i] = a);
        assert!((out[2] - 0.1).abs() < 1e-12);
        assert!((out[0] - 0.225).abs() < 1e-12, "{out:?}");
        assert!((out[1] - 0.675).abs() < 1e-12);
    }
}
