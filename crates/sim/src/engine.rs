//! Runs one host through time. Each tick: VMs start and stop, the policy
//! makes its pass when due, NUMA balancing and memory moves advance, the
//! load balancer and wake-up placement move threads, then the scheduler
//! shares out the CPUs. When a tick changed nothing (no thread moved, the
//! averages settled, every balancer content), every following tick is the
//! same until the next event (a demand change, a VM coming or going, a
//! policy pass, a NUMA scan), so those ticks are summed at once instead of
//! being simulated one by one: exact for the model, and what makes a fleet
//! of hosts cheap.

use crate::balance::wake_placement;
use crate::balance::{balance, fork_cpu, random_cpu, wake_idle};
use crate::cpuset::CpuSet;
use crate::host::{BackgroundThread, Host, VmThreads};
use crate::numa::{self, Overhead};
use crate::policy::{Policy, Trim};
use crate::scenario::{Case, MemNode, NumaSpec, SchedSpec, StartPlacement, VmDef};
use crate::sched::{index, run_tick, set_wants, Scratch};
use crate::timing::{sample_queued, Timing};
use serde::Serialize;
use stealscope_placement::synthetic::Rng;

/// A tick is the same as the last when no thread's run or wait share moved
/// by more than this (0.01 percentage points).
const SETTLED: f64 = 1e-4;

/// Ticks per stationarity window, and how close two windows' per-VM
/// averages (run and wait, share of a CPU) must be.
pub const WINDOW: usize = 20;
pub const STATIONARY: f64 = 0.05;

/// Per-thread sums of run, wait, idle wait and work over the current and
/// the previous window of simulated ticks.
#[derive(Default)]
struct Windows {
    cur: Vec<[f64; 4]>,
    prev: Vec<[f64; 4]>,
    len: usize,
    have_prev: bool,
}

impl Windows {
    fn reset(&mut self) {
        self.len = 0;
        self.have_prev = false;
        self.cur.iter_mut().for_each(|x| *x = [0.0; 4]);
    }

    /// Adds this tick; true when the window just closed with the same
    /// averages as the one before.
    fn push(&mut self, h: &Host, _tick: u64) -> bool {
        if self.cur.len() < h.tasks.len() {
            self.cur.resize(h.tasks.len(), [0.0; 4]);
            self.prev.resize(h.tasks.len(), [0.0; 4]);
            self.have_prev = false;
        }
        for (i, t) in h.tasks.iter().enumerate() {
            if t.alive {
                let c = &mut self.cur[i];
                c[0] += t.run;
                c[1] += t.wait;
                c[2] += t.idle_wait;
                c[3] += t.work;
            }
        }
        self.len += 1;
        if self.len < WINDOW {
            return false;
        }
        let w = WINDOW as f64;
        // Compared per VM (threads of a VM trade places when the balancer
        // pushes them around; the VM's share is what settles).
        let same = self.have_prev
            && h.vms.iter().filter(|v| v.alive).all(|v| {
                let (mut d_run, mut d_wait) = (0.0, 0.0);
                for &i in &v.tasks {
                    d_run += self.cur[i][0] - self.prev[i][0];
                    d_wait += self.cur[i][1] - self.prev[i][1];
                }
                let n = w * v.tasks.len().max(1) as f64;
                (d_run / n).abs() < STATIONARY && (d_wait / n).abs() < STATIONARY
            });
        if same {
            // Keep both windows' sums in `prev` for the averages.
            for i in 0..self.cur.len() {
                for k in 0..4 {
                    self.prev[i][k] = (self.prev[i][k] + self.cur[i][k]) / 2.0;
                }
            }
        } else {
            std::mem::swap(&mut self.cur, &mut self.prev);
        }
        self.have_prev = true;
        self.len = 0;
        self.cur.iter_mut().for_each(|x| *x = [0.0; 4]);
        same
    }

    /// Per-tick averages of thread `i` (run, wait, idle wait, work).
    fn mean(&self, i: usize) -> [f64; 4] {
        let w = WINDOW as f64;
        let p = self.prev.get(i).copied().unwrap_or([0.0; 4]);
        [p[0] / w, p[1] / w, p[2] / w, p[3] / w]
    }
}

/// Window averages (run, wait, idle wait, work per tick) to sum over
/// `ticks` ticks at demand `level`, with `backlog` carried in: never more
/// run than that asks for. Two windows can agree within [`STATIONARY`]
/// while a backlog drains (a thread catching up after the policy moved
/// it); summing their run over the stretch repeated the drain and made
/// work out of nothing (the proptest's case: 54.75 % use of 50.71 %
/// demand, exact with `--every-tick`).
fn capped_to_demand(mut m: [f64; 4], level: f64, backlog: f64, ticks: u64) -> [f64; 4] {
    let cap = level + backlog / ticks.max(1) as f64;
    if m[0] > cap && m[0] > 0.0 {
        m[3] *= cap / m[0];
        m[0] = cap;
    }
    m
}

/// The host a run simulates.
#[derive(Debug, Clone)]
pub struct HostShape {
    pub cpus: usize,
    pub nodes: usize,
    pub smt: bool,
    pub mem_per_node_gib: f64,
    /// Other host work, one entry per thread.
    pub background: Vec<BackgroundThread>,
}

/// Time accounted to one thread, seconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Acc {
    pub secs: f64,
    /// What its pattern asked for (share of a CPU x seconds).
    pub wanted: f64,
    pub run: f64,
    pub wait: f64,
    pub idle_wait: f64,
    pub work: f64,
}

impl Acc {
    fn add(&mut self, t: &crate::host::Task, level: f64, secs: f64) {
        self.secs += secs;
        self.wanted += level * secs;
        self.run += t.run * secs;
        self.wait += t.wait * secs;
        self.idle_wait += t.idle_wait * secs;
        self.work += t.work * secs;
    }

    /// `secs` at per-tick averages `m` (run, wait, idle wait, work).
    fn add_avg(&mut self, m: [f64; 4], level: f64, secs: f64) {
        self.secs += secs;
        self.wanted += level * secs;
        self.run += m[0] * secs;
        self.wait += m[1] * secs;
        self.idle_wait += m[2] * secs;
        self.work += m[3] * secs;
    }

    pub fn merge(&mut self, o: &Acc) {
        self.secs += o.secs;
        self.wanted += o.wanted;
        self.run += o.run;
        self.wait += o.wait;
        self.idle_wait += o.idle_wait;
        self.work += o.work;
    }

    /// Percent of wall time.
    pub fn pct(&self, x: f64) -> f64 {
        if self.secs > 0.0 {
            (100.0 * x / self.secs).clamp(0.0, 100.0)
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone)]
pub struct VmOutcome {
    pub name: String,
    /// Per vCPU, by index.
    pub vcpus: Vec<Acc>,
    pub alive_s: f64,
}

#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub vms: Vec<VmOutcome>,
    pub warnings: Vec<String>,
    pub policy_actions: usize,
    /// VMs re-placed, once per VM per pass (see `Policy::placement_changes`).
    pub placement_changes: usize,
    pub policy_passes: usize,
    /// Threads moved by the load balancer and wake-up placement, and by NUMA balancing.
    pub balancer_moves: usize,
    pub numa_moves: usize,
    pub ticks_simulated: u64,
    pub ticks_total: u64,
    /// Host CPU idle (share of all CPUs x seconds), and the counted seconds.
    pub idle_cpu_s: f64,
    pub secs: f64,
}

pub struct RunSpec<'a> {
    pub shape: &'a HostShape,
    pub sched: &'a SchedSpec,
    pub numa: &'a NumaSpec,
    pub case: &'a Case,
    pub vms: &'a [VmDef],
    pub duration_s: f64,
    pub tick_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
    /// No summing of steady stretches (to check that summing is exact).
    pub every_tick: bool,
    /// The stealscope policy's trim of each plan (None: the whole plan).
    pub trim: Option<Trim>,
}

/// Runs one case with one seed: each tick (or steady stretch of ticks)
/// VMs come and go, the policy and NUMA move things, the balancer moves
/// threads, the scheduler shares out the CPUs, and the time is counted.
pub fn run(spec: &RunSpec) -> RunOutcome {
    let mut r = Run::new(spec);
    let total_ticks = (spec.duration_s / spec.tick_s).round().max(1.0) as u64;
    let mut tick: u64 = 0;
    while tick < total_ticks {
        let t = tick as f64 * spec.tick_s;
        let changed = r.vms_come_and_go(t);
        let step = r.step(t, tick, changed);
        let n = r.stretch(&step, t, tick, total_ticks);
        r.count(&step, t, tick, n);
        tick += n;
    }
    r.outcome(total_ticks)
}

/// What one simulated tick did, for deciding how long its state lasts.
struct Step {
    /// The tick equals the last and nothing moved: it lasts until the next event.
    steady: bool,
    /// Threads only trade places, at averages two windows agree on.
    stationary: bool,
}

/// The state of one run.
struct Run<'a> {
    spec: &'a RunSpec<'a>,
    rng: Rng,
    h: Host,
    tm: Option<Timing>,
    policy: Policy,
    sc: Scratch,
    over: Overhead,
    /// VM index in `spec.vms` -> VM id on the host; whether it stopped.
    started: Vec<Option<usize>>,
    stopped: Vec<bool>,
    accs: Vec<Acc>,
    prev: Vec<(f64, f64)>,
    win: Windows,
    out: RunOutcome,
}

impl<'a> Run<'a> {
    /// The host, its other work, the kernel's timing and the policy.
    fn new(spec: &'a RunSpec<'a>) -> Run<'a> {
        let mut rng = Rng(spec.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
        let shape = spec.shape;
        let mut h = Host::new(
            shape.cpus,
            shape.nodes,
            shape.smt,
            shape.mem_per_node_gib,
            spec.case.cgroups,
        );
        h.numa_balancing = spec.case.numa_balancing;
        let tm = Timing::new(spec.sched, shape.cpus);
        if let Some(tm) = &tm {
            // Each CPU's balancer starts at a random point of its interval.
            for c in 0..shape.cpus {
                let span = h.nodes[h.node_of[c]].len();
                h.lb_next_s[c] = rng.unit() * tm.balance_interval_s(span, false, true);
            }
        }
        for b in &shape.background {
            let allowed = b
                .cpu
                .map_or(CpuSet::all(shape.cpus), |c| CpuSet::from_cpus(&[c as u32]));
            let at = fork_cpu(&h, &allowed, &mut rng);
            h.add_background(at, allowed, b);
        }
        let mut cfg = spec.case.planner.clone();
        cfg.dedicated.extend(
            spec.vms
                .iter()
                .filter(|v| v.dedicated)
                .map(|v| v.name.clone()),
        );
        Run {
            spec,
            rng,
            h,
            tm,
            policy: Policy::new(spec.case.policy, cfg, spec.trim),
            sc: Scratch::default(),
            over: Overhead::default(),
            started: vec![None; spec.vms.len()],
            stopped: vec![false; spec.vms.len()],
            accs: Vec::new(),
            prev: Vec::new(),
            win: Windows::default(),
            out: RunOutcome::default(),
        }
    }

    /// Starts the VMs due at `t` and stops those whose time is up; true
    /// when any did.
    fn vms_come_and_go(&mut self, t: f64) -> bool {
        let spec = self.spec;
        let shape = spec.shape;
        let all = CpuSet::all(shape.cpus);
        let mut changed = false;
        for (k, v) in spec.vms.iter().enumerate() {
            if self.started[k].is_none() && v.start_s <= t + 1e-9 && v.stop_s.is_none_or(|s| s > t)
            {
                let allowed = v
                    .cpus
                    .as_ref()
                    .map_or(all.clone(), |c| CpuSet::from_cpus(c));
                let mem = match v.mem_node {
                    MemNode::Spread => vec![v.mem_gib / shape.nodes as f64; shape.nodes],
                    MemNode::Node(n) => {
                        let mut m = vec![0.0; shape.nodes];
                        m[n as usize] = v.mem_gib;
                        m
                    }
                };
                let start = spec.sched.start;
                let key = spec.seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let rng = &mut self.rng;
                let id = self.h.add_vm(
                    v.name.clone(),
                    v.vcpus,
                    v.demand.clone(),
                    key,
                    mem,
                    allowed,
                    v.weight,
                    v.dedicated,
                    VmThreads {
                        emulator: v.emulator,
                        vcpu_wakeups_per_s: v.vcpu_wakeups_per_s,
                    },
                    t,
                    &mut |h, allowed| match start {
                        StartPlacement::Idlest => fork_cpu(h, allowed, rng),
                        StartPlacement::Random => random_cpu(h, allowed, rng),
                    },
                );
                if self.h.numa_balancing {
                    numa::start_scans(&mut self.h, id, spec.numa, t, &mut self.rng);
                }
                self.started[k] = Some(id);
                changed = true;
            }
            if let (Some(id), false, Some(stop)) = (self.started[k], self.stopped[k], v.stop_s) {
                if stop <= t + 1e-9 {
                    self.h.remove_vm(id);
                    self.stopped[k] = true;
                    changed = true;
                }
            }
        }
        if changed {
            self.policy.host_changed();
        }
        changed
    }

    /// One tick: the policy's pass, NUMA, the balancer, the scheduler; and
    /// whether the result can be summed over the following ticks.
    fn step(&mut self, t: f64, tick: u64, changed: bool) -> Step {
        let spec = self.spec;
        let dt = spec.tick_s;
        let changes = self.policy.pass(&mut self.h, t);
        let (numa_moves, _moving) =
            numa::tick(&mut self.h, spec.numa, t, dt, &mut self.rng, &mut self.over);
        self.out.numa_moves += numa_moves;
        if self.h.queued_work {
            self.h.step_bursts(dt, &mut self.rng);
        }
        set_wants(&mut self.h, t);
        sample_queued(&mut self.h, self.tm.as_ref(), &mut self.rng);
        index(&self.h, &mut self.sc);
        let (moves, lb_steady) = self.move_threads(tick);
        let over_ref = &self.over;
        run_tick(
            &mut self.h,
            &mut self.sc,
            dt,
            &|h, i| numa::speed(h, spec.numa, over_ref, i),
            self.tm.as_ref(),
        );
        let same = self.same_as_last();
        let external = changed || changes > 0 || numa_moves > 0;
        // With kernel timing every tick draws anew: nothing is summed.
        let every_tick = spec.every_tick || self.tm.is_some();
        let steady = same && !external && moves == 0 && lb_steady && !every_tick;
        // Threads moving back and forth (the balancer's active pushes, NUMA
        // balancing) never settle tick by tick, but their averages do: two
        // windows in a row with the same averages make the stretch up to
        // the next event stationary, summed at those averages.
        let stationary = if external {
            self.win.reset();
            false
        } else {
            !steady && !every_tick && self.win.push(&self.h, tick)
        };
        Step { steady, stationary }
    }

    /// The load balancer and wake-up placement: threads moved, and whether
    /// every balancer is content.
    fn move_threads(&mut self, tick: u64) -> (usize, bool) {
        let spec = self.spec;
        let mut moves = 0;
        let mut lb_steady = true;
        let pct = spec.sched.imbalance_pct.0;
        if spec.sched.balance {
            let (m, s) = balance(
                &mut self.h,
                &mut self.sc,
                &mut self.rng,
                pct,
                (tick, spec.tick_s),
                self.tm.as_ref(),
            );
            moves += m;
            lb_steady = s;
            moves += wake_idle(&mut self.h, &mut self.sc);
        }
        if self.tm.is_some() {
            let woken = wake_placement(&mut self.h, &self.sc, &mut self.rng, spec.tick_s, pct);
            if woken > 0 {
                index(&self.h, &mut self.sc);
            }
            moves += woken;
        }
        self.out.balancer_moves += moves;
        (moves, lb_steady)
    }

    /// Whether every thread ran and waited as in the last tick.
    fn same_as_last(&mut self) -> bool {
        if self.prev.len() < self.h.tasks.len() {
            self.prev.resize(self.h.tasks.len(), (f64::NAN, f64::NAN));
        }
        let mut same = true;
        for (i, task) in self.h.tasks.iter().enumerate() {
            if task.alive {
                let p = self.prev[i];
                if !((p.0 - task.run).abs() < SETTLED && (p.1 - task.wait).abs() < SETTLED) {
                    same = false;
                }
                self.prev[i] = (task.run, task.wait);
            }
        }
        same
    }

    /// How many ticks this state lasts: up to the next event when the
    /// tick was steady or stationary, else one.
    fn stretch(&self, step: &Step, t: f64, tick: u64, total_ticks: u64) -> u64 {
        if !(step.steady || step.stationary) {
            return 1;
        }
        let (h, spec, dt) = (&self.h, self.spec, self.spec.tick_s);
        let mut next = total_ticks as f64 * dt;
        for task in h
            .tasks
            .iter()
            .filter(|t| t.alive && (t.vm.is_none() || t.emulator))
        {
            next = next.min(task.own_demand.next_change(t));
        }
        for v in h.vms.iter().filter(|v| v.alive) {
            next = next.min(v.demand.next_change(t));
            if h.numa_balancing && h.nodes.len() > 1 {
                next = next.min(v.next_scan_s);
            }
        }
        for (k, v) in spec.vms.iter().enumerate() {
            if self.started[k].is_none() {
                next = next.min(v.start_s);
            } else if !self.stopped[k] {
                if let Some(s) = v.stop_s {
                    next = next.min(s);
                }
            }
        }
        next = next.min(self.policy.due());
        next = next.min(numa::moves_done(h, spec.numa, t + dt));
        // Ticks strictly before the one at which `next` happens.
        let until = ((next - 1e-9) / dt).ceil().max(tick as f64 + 1.0) as u64;
        until.min(total_ticks) - tick
    }

    /// Counts `n` ticks of this state (the part after the warm-up), lets
    /// the policy measure them and advances memory moves over them.
    fn count(&mut self, step: &Step, t: f64, tick: u64, n: u64) {
        let (spec, dt) = (self.spec, self.spec.tick_s);
        self.out.ticks_simulated += 1;
        let warm_ticks = (spec.warmup_s / dt).round() as u64;
        let counted = (tick + n).saturating_sub(tick.max(warm_ticks));
        if self.accs.len() < self.h.tasks.len() {
            self.accs.resize(self.h.tasks.len(), Acc::default());
        }
        if counted > 0 {
            let secs = counted as f64 * dt;
            // The ticks summed at once use the window's averages when stationary.
            let summed = if step.stationary {
                counted.saturating_sub(1)
            } else {
                0
            };
            for (i, task) in self.h.tasks.iter().enumerate() {
                if task.alive {
                    let level = self.h.level(i, t);
                    let one = if summed > 0 { dt } else { secs };
                    self.accs[i].add(task, level, one);
                    if summed > 0 {
                        let m = capped_to_demand(self.win.mean(i), level, task.backlog, summed);
                        self.accs[i].add_avg(m, level, summed as f64 * dt);
                    }
                }
            }
            self.out.idle_cpu_s += self.sc.idle.iter().sum::<f64>() / spec.shape.cpus as f64 * secs;
            self.out.secs += secs;
        }
        self.policy.observe(&self.h, n as f64 * dt);
        if n > 1 {
            numa::advance_moves(&mut self.h, (n - 1) as f64 * dt, spec.numa);
            self.win.reset();
        }
    }

    /// Each VM's vCPU times and the policy's counts.
    fn outcome(mut self, total_ticks: u64) -> RunOutcome {
        let mut out = std::mem::take(&mut self.out);
        out.ticks_total = total_ticks;
        out.policy_actions = self.policy.actions;
        out.placement_changes = self.policy.placement_changes;
        out.policy_passes = self.policy.passes;
        out.warnings = std::mem::take(&mut self.policy.warnings);
        for (k, v) in self.spec.vms.iter().enumerate() {
            let Some(id) = self.started[k] else { continue };
            let vm = &self.h.vms[id];
            let vcpus: Vec<Acc> = vm
                .tasks
                .iter()
                .map(|&i| self.accs.get(i).copied().unwrap_or_default())
                .collect();
            let alive_s = vcpus.first().map_or(0.0, |a| a.secs);
            out.vms.push(VmOutcome {
                name: v.name.clone(),
                vcpus,
                alive_s,
            });
        }
        out
    }
}
