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
use crate::timing::{delayed_dequeue_s, wake_latency_s, Timing};

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
    /// CPUs whose idle share is not zero, ascending.
    idle_cpus: Vec<usize>,
    /// Per VM and node, the speed of its threads there (NaN: not yet).
    speeds: Vec<f64>,
    /// Per CPU, then per node (its CPUs without idle time): a thread
    /// whose [`busy_elsewhere`] was computed there, and the result.
    busy_memo: Vec<Option<(usize, f64, f64)>>,
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
        if !h.tasks[i].alive {
            continue;
        }
        let level = h.level(i, t);
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
            // Measured queued other work is not a thread that wants a CPU.
            if t.runnable > 0.999 && t.min_runnable == 0.0 {
                sc.cpu_nr_busy[c] += 1;
            }
            match t.group {
                None => load += t.load_avg,
                Some(g) => {
                    let runnable = t.queued as u32;
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
/// `speed` gives each thread's useful work per unit of run time (NUMA): for
/// a VM's thread it must depend only on the VM and the node of its CPU.
/// With `tm`, a thread that sleeps is also runnable while it waits for the
/// CPU after each wake-up (`timing::wake_latency_s`).
pub fn run_tick(
    h: &mut Host,
    sc: &mut Scratch,
    dt: f64,
    speed: &dyn Fn(&Host, usize) -> f64,
    tm: Option<&Timing>,
) {
    let n = h.ncpu;
    sc.idle.resize(n, 0.0);
    for c in 0..n {
        let cap = (1.0 - h.kernel[c]).max(0.0);
        top_entities(h, sc, c);
        sc.fill.clear();
        for (k, e) in sc.ents.iter().enumerate() {
            sc.fill.push((e.weight, e.demand, k));
        }
        {
            let ents = &mut sc.ents;
            waterfill(cap, &mut sc.fill, &mut |k, a| ents[k].alloc = a);
        }
        // What every entity here is shared against (sc.ents stays as is;
        // the turns matter only to wake-up latency).
        let busy_weight: f64 = sc.ents.iter().map(|e| e.weight * e.runnable).sum();
        let turns = tm.map_or(1.0, |_| busy_weight_count(&sc.ents, cap));
        let mut used = 0.0;
        for k in 0..sc.ents.len() {
            used += share_entity(h, sc, (c, cap), k, (busy_weight, turns), tm);
        }
        for k in sc.start[c]..sc.start[c + 1] {
            let t = &mut h.tasks[sc.by_cpu[k]];
            if t.wants <= 0.0 {
                t.run = 0.0;
                t.wait = 0.0;
                t.runnable = 0.0;
                t.delayed = 0.0;
            }
        }
        sc.idle[c] = (1.0 - h.kernel[c] - used).max(0.0);
        if h.queued_work {
            queued_waits(h, sc, c, (used, cap));
        }
    }
    finish_tasks(h, sc, 0.5f64.powf(dt / PELT_HALF_LIFE_S), speed);
}

/// The top-level entities on CPU `c` (group entities and ungrouped
/// threads) with their weight, demand and runnable share, into `sc.ents`.
fn top_entities(h: &Host, sc: &mut Scratch, c: usize) {
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
                    let weight = sc
                        .group_on(c, g)
                        .map_or(MIN_SHARES, |x| x.share.max(MIN_SHARES));
                    sc.ents.push(Ent {
                        weight,
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
}

/// Shares entity `k`'s CPU time on CPU `c` among its threads and sets each
/// thread's run, wait and runnable share; returns the CPU time used.
/// `busy_weight`: the CPU's entities' runnable weight; `turns`: how many
/// take turns ([`busy_weight_count`]).
fn share_entity(
    h: &mut Host,
    sc: &mut Scratch,
    (c, cap): (usize, f64),
    k: usize,
    (busy_weight, turns): (f64, f64),
    tm: Option<&Timing>,
) -> f64 {
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
    // Chance this entity runs at a random moment of the tick.
    let own = if cap > 0.0 { e.alloc / cap } else { 0.0 };
    let mut used = 0.0;
    for &i in &sc.members {
        let (waits, delayed) = match tm {
            Some(tm) if h.tasks[i].wakeups_per_s > 0.0 => wake_waits(h, i, c, (own, turns), tm),
            _ => (0.0, 0.0),
        };
        let t = &mut h.tasks[i];
        used += t.run;
        if t.run < t.wants - 1e-9 {
            t.runnable = 1.0;
        } else {
            let rate = top_rate / (1.0 + (in_busy - t.runnable).max(0.0));
            t.runnable = if rate > 0.0 {
                (t.run / rate + waits).min(1.0)
            } else {
                1.0
            };
        }
        t.wait = (t.runnable - t.run).max(0.0);
        t.delayed = delayed.min(1.0 - t.runnable).max(0.0);
    }
    used
}

/// Other work measured as queued far more than it runs waits behind what
/// runs on CPU `c`: only as long as something does.
fn queued_waits(h: &mut Host, sc: &Scratch, c: usize, (used, cap): (f64, f64)) {
    let busy = if cap > 0.0 {
        (used / cap).min(1.0)
    } else {
        0.0
    };
    for k in sc.start[c]..sc.start[c + 1] {
        let t = &mut h.tasks[sc.by_cpu[k]];
        if t.min_runnable > 0.0 && t.wants > 0.0 {
            t.runnable = t.runnable.max(t.min_runnable * busy);
            t.wait = (t.runnable - t.run).max(0.0);
        }
    }
}

/// Per thread, after every CPU: the wait that an idle CPU would have
/// taken, idle steal, useful work and the averages. A thread that sleeps
/// and wakes up behind others takes an idle CPU of its node if one is
/// free at that moment (select_idle_sibling): only the wait when none is
/// counts. Idle steal: waiting while some other allowed CPU idled
/// (independent in time).
fn finish_tasks(h: &mut Host, sc: &mut Scratch, alpha: f64, speed: &dyn Fn(&Host, usize) -> f64) {
    let any_idle = sc.idle.iter().any(|x| *x > 1e-9);
    // A CPU with no idle time multiplies the products below by exactly
    // 1.0: only the others are visited, in the same (ascending) order.
    sc.idle_cpus.clear();
    sc.idle_cpus
        .extend((0..h.ncpu).filter(|&c| sc.idle[c] != 0.0));
    // A VM's threads on one node work at one speed: looked up once.
    let nodes = h.nodes.len();
    sc.speeds.clear();
    sc.speeds.resize(h.vms.len() * nodes, f64::NAN);
    sc.busy_memo.clear();
    sc.busy_memo.resize(h.ncpu + nodes, None);
    for i in 0..h.tasks.len() {
        if !h.tasks[i].alive {
            continue;
        }
        let idle_wait = if any_idle && h.tasks[i].wait > 0.0 {
            let (all_busy, node_busy) = busy_elsewhere(h, sc, i);
            let t = &h.tasks[i];
            let sleeps = t.wants < 1.0 && t.run >= t.wants - 1e-9;
            let wait = if sleeps { t.wait * node_busy } else { t.wait };
            h.tasks[i].wait = wait;
            wait * (1.0 - all_busy)
        } else {
            0.0
        };
        let s = match h.tasks[i].vm {
            Some(v) => {
                let k = v * nodes + h.node_of[h.tasks[i].cpu];
                if sc.speeds[k].is_nan() {
                    sc.speeds[k] = speed(h, i);
                }
                sc.speeds[k]
            }
            None => speed(h, i),
        };
        let t = &mut h.tasks[i];
        t.idle_wait = idle_wait;
        t.work = t.run * s;
        // PELT counts a delayed-dequeue thread as on the run queue.
        t.load_avg = alpha * t.load_avg + (1.0 - alpha) * (t.runnable + t.delayed);
        t.util_avg = alpha * t.util_avg + (1.0 - alpha) * t.run;
        t.backlog = if t.wants >= 1.0 {
            0.0
        } else {
            (t.wants - t.run).clamp(0.0, 1.0)
        };
    }
}

/// For thread `i`: the chance that every other allowed CPU is busy, and
/// every other allowed CPU of its node, at a random moment (independent).
/// The same for threads with the same allowed CPUs on one CPU, or on any
/// CPU of a node that had no idle time (its own factor was 1.0 anyway):
/// computed once for each, in the same order of factors.
fn busy_elsewhere(h: &Host, sc: &mut Scratch, i: usize) -> (f64, f64) {
    let t = &h.tasks[i];
    let node = h.node_of[t.cpu];
    let key = if sc.idle[t.cpu] == 0.0 {
        h.ncpu + node
    } else {
        t.cpu
    };
    if let Some((j, all, here)) = sc.busy_memo[key] {
        if h.tasks[j].allowed == t.allowed {
            return (all, here);
        }
    }
    let (mut all_busy, mut node_busy) = (1.0, 1.0);
    for &c in &sc.idle_cpus {
        if c != t.cpu && t.allowed.contains(c) {
            all_busy *= 1.0 - sc.idle[c];
            if h.node_of[c] == node {
                node_busy *= 1.0 - sc.idle[c];
            }
        }
    }
    sc.busy_memo[key] = Some((i, all_busy, node_busy));
    (all_busy, node_busy)
}

/// Entities taking turns on a CPU: each counts by how much of an equal
/// share of the CPU it uses (a thread that runs microseconds hardly counts).
fn busy_weight_count(ents: &[Ent], cap: f64) -> f64 {
    if cap <= 0.0 || ents.is_empty() {
        return 1.0;
    }
    let fair = cap / ents.len() as f64;
    ents.iter()
        .map(|e| (e.alloc / fair).min(1.0))
        .sum::<f64>()
        .max(1.0)
}

/// Shares of the time thread `i` on `cpu` is queued without running: after
/// each wake-up, the latency (waiting); after each run, the delayed dequeue
/// when a sibling of its group runs here (it is not eligible in their queue).
/// A kick from a thread of its VM that runs on the same CPU finds its own
/// group running (no wait); its own timers and kicks from elsewhere come at
/// a random moment (`own`: its group runs then).
fn wake_waits(h: &Host, i: usize, cpu: usize, (own, turns): (f64, f64), tm: &Timing) -> (f64, f64) {
    let t = &h.tasks[i];
    let (same, sibling) = t.vm.map_or((0.0, false), |v| {
        let others: Vec<usize> = h.vms[v].threads().filter(|&w| w != i).collect();
        let here = others.iter().filter(|&&w| h.tasks[w].cpu == cpu).count();
        if others.is_empty() {
            (0.0, false)
        } else {
            (here as f64 / others.len() as f64, here > 0)
        }
    });
    let lat = wake_latency_s(tm, own, turns);
    let waits = t.wakeups_per_s * (t.kicks * (1.0 - same) * lat + (1.0 - t.kicks) * lat);
    let delayed = if sibling {
        t.wakeups_per_s * delayed_dequeue_s(tm, turns)
    } else {
        0.0
    };
    (waits, delayed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::CpuSet;
    use crate::demand::Demand;
    use crate::host::VmThreads;
    use crate::scenario::{Cgroups, EmulatorSpec, Fraction, Positive};

    /// One VM with `vcpus` busy vCPUs on CPU 0 and its main loop on `main_cpu`.
    fn vm_host(vcpus: u32, main_cpu: usize) -> Host {
        let mut h = Host::new(2, 1, false, 4.0, Cgroups::PerVm);
        let threads = VmThreads {
            emulator: Some(EmulatorSpec {
                wakeups_per_s: Positive(200.0),
                run_us: Positive(20.0),
                kicks: Fraction(0.0),
            }),
            vcpu_wakeups_per_s: 0.0,
        };
        let id = h.add_vm(
            "a".into(),
            vcpus,
            Demand::Busy,
            1,
            vec![1.0],
            CpuSet::all(2),
            None,
            false,
            threads,
            0.0,
            &mut |_, _| 0,
        );
        let m = h.vms[id].emulator.unwrap();
        h.tasks[m].cpu = main_cpu;
        h
    }

    #[test]
    fn pelt_halves_in_32_ms() {
        // A thread runnable from now on, load_avg 0: after the kernel's
        // half-life (32 periods of 1 ms) it is half way.
        let mut h = vm_host(1, 0);
        let mut sc = Scratch::default();
        for t in h.tasks.iter_mut() {
            t.load_avg = 0.0;
        }
        set_wants(&mut h, 0.0);
        for _ in 0..32 {
            index(&h, &mut sc);
            run_tick(&mut h, &mut sc, 0.001, &|_, _| 1.0, None);
        }
        assert!(
            (h.tasks[0].load_avg - 0.5).abs() < 1e-9,
            "{}",
            h.tasks[0].load_avg
        );
    }

    #[test]
    fn a_main_loop_elsewhere_takes_its_share_of_the_group_weight() {
        // calc_group_shares: the group's weight on a CPU is tg->shares x its
        // load there / its load everywhere. The main loop queued on CPU 1
        // with load 0.5 leaves the vCPU on CPU 0 with 1 / 1.5 of it.
        let mut h = vm_host(1, 1);
        let m = h.vms[0].emulator.unwrap();
        h.tasks[m].load_avg = 0.5;
        h.tasks[m].queued = false;
        let mut sc = Scratch::default();
        index(&h, &mut sc);
        let g = h.vms[0].group.unwrap();
        let on0 = sc.group_on(0, g).unwrap().share;
        assert!((on0 - 1.0 / 1.5).abs() < 1e-9, "{on0}");
        // Queued at the moment the weights are computed, it counts a whole
        // thread (cfs_rq->load.weight), not its average.
        h.tasks[m].queued = true;
        index(&h, &mut sc);
        let on1 = sc.group_on(1, g).unwrap().share;
        assert!((on1 - 0.5).abs() < 1e-9, "{on1}");
        // Beside its vCPU, the whole weight stays on one CPU.
        let h = vm_host(1, 0);
        index(&h, &mut sc);
        assert!((sc.group_on(0, g).unwrap().share - 1.0).abs() < 1e-9);
    }

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
