//! The simulated host: CPUs and nodes, cpu groups, VMs with their vCPU
//! threads and memory, and other work. What the scheduler model, the load
//! balancer, NUMA balancing and the policies read and change.

use crate::cpuset::CpuSet;
pub use crate::demand::BackgroundThread;
use crate::demand::Demand;
use crate::scenario::{Cgroups, EmulatorSpec};
use stealscope_placement::synthetic::Rng;

/// Loads and weights are in units of a nice-0 task (the kernel's 1024).
pub const NICE_0: f64 = 1.0;
/// The kernel's MIN_SHARES (2 of 1024).
pub const MIN_SHARES: f64 = 2.0 / 1024.0;

#[derive(Debug, Clone)]
pub struct Group {
    /// Path as the planner sees it (cpu controller mount + group).
    pub dir: String,
    /// tg->shares in nice-0 units (cpu.shares / 1024).
    pub shares: f64,
}

#[derive(Debug, Clone)]
pub struct Task {
    /// Owning VM (index into `Host::vms`), None for other host work.
    pub vm: Option<usize>,
    pub vcpu: u32,
    pub tid: u32,
    /// cpu group, None: the top level.
    pub group: Option<usize>,
    pub cpu: usize,
    pub allowed: CpuSet,
    /// Demand of other host work (VM threads use their VM's demand).
    pub own_demand: Demand,
    /// PELT-like averages in [0, 1]: runnable (load_avg / weight) and running (util_avg).
    pub load_avg: f64,
    pub util_avg: f64,
    /// Work left over from earlier ticks, in ticks of CPU.
    pub backlog: f64,
    /// This tick: wanted, ran, waited (shares of the tick), runnable share,
    /// and the share it sat queued without wanting to run (delayed dequeue).
    pub wants: f64,
    pub run: f64,
    pub wait: f64,
    pub idle_wait: f64,
    pub runnable: f64,
    pub delayed: f64,
    /// Useful work: run less the NUMA penalties.
    pub work: f64,
    pub alive: bool,
    /// A VM's QEMU main-loop thread (its demand is `own_demand`).
    pub emulator: bool,
    /// Wake-ups per second after a sleep (0: none modelled), and the share
    /// of them another thread of its VM makes (the rest: its own timers).
    pub wakeups_per_s: f64,
    pub kicks: f64,
    /// Runnable at least this share of each tick (measured other work; 0: none).
    pub min_runnable: f64,
    /// Queued in bursts (other work that wakes and then waits long): mean
    /// seconds queued and asleep (0, 0: no bursts), the current phase and
    /// what is left of it.
    pub burst: (f64, f64),
    pub burst_on: bool,
    pub burst_left_s: f64,
    /// Queued at the moment the group weights are computed (`timing`: drawn
    /// each tick from its runnable share; otherwise whenever it wants CPU).
    pub queued: bool,
}

impl Task {
    fn new(vm: Option<usize>, tid: u32, group: Option<usize>, cpu: usize, allowed: CpuSet) -> Task {
        Task {
            vm,
            vcpu: 0,
            tid,
            group,
            cpu,
            allowed,
            own_demand: Demand::Level(0.0),
            load_avg: 1.0,
            util_avg: 0.5,
            backlog: 0.0,
            wants: 1.0,
            run: 0.0,
            wait: 0.0,
            idle_wait: 0.0,
            runnable: 1.0,
            delayed: 0.0,
            work: 0.0,
            alive: true,
            emulator: false,
            wakeups_per_s: 0.0,
            kicks: 0.0,
            min_runnable: 0.0,
            burst: (0.0, 0.0),
            burst_on: false,
            burst_left_s: 0.0,
            queued: true,
        }
    }
}

/// The threads of a VM besides what its vCPUs want: QEMU's main loop and
/// how often the vCPU threads sleep.
#[derive(Debug, Clone, Copy, Default)]
pub struct VmThreads {
    pub emulator: Option<EmulatorSpec>,
    pub vcpu_wakeups_per_s: f64,
}

#[derive(Debug, Clone)]
pub struct Vm {
    pub name: String,
    pub pid: u32,
    pub vcpus: u32,
    pub demand: Demand,
    /// Seed of its random demand.
    pub key: u64,
    /// Task indices of its vCPUs, by vCPU index.
    pub tasks: Vec<usize>,
    /// Task index of its QEMU main-loop thread, when modelled.
    pub emulator: Option<usize>,
    /// GiB of memory per node.
    pub mem: Vec<f64>,
    /// Memory being moved: (target node, GiB left).
    pub moving: Option<(usize, f64)>,
    pub group: Option<usize>,
    pub dedicated: bool,
    pub alive: bool,
    pub started_s: f64,
    /// NUMA balancing: next scan, and the current scan period (it backs off
    /// while the VM is well placed).
    pub next_scan_s: f64,
    pub scan_period_s: f64,
}

impl Vm {
    /// Every thread of the process: its vCPUs, then the main loop.
    pub fn threads(&self) -> impl Iterator<Item = usize> + '_ {
        self.tasks.iter().copied().chain(self.emulator)
    }

    pub fn mem_total(&self) -> f64 {
        self.mem.iter().sum()
    }

    /// Share of its memory on `node`.
    pub fn mem_share(&self, node: usize) -> f64 {
        let t = self.mem_total();
        if t <= 0.0 {
            1.0
        } else {
            self.mem[node] / t
        }
    }

    pub fn home_node(&self) -> usize {
        let mut best = 0;
        for (n, m) in self.mem.iter().enumerate() {
            if *m > self.mem[best] + 1e-12 {
                best = n;
            }
        }
        best
    }
}

#[derive(Debug, Clone)]
pub struct Host {
    pub ncpu: usize,
    pub node_of: Vec<usize>,
    /// CPUs of each node.
    pub nodes: std::sync::Arc<Vec<Vec<usize>>>,
    pub smt: bool,
    pub mem_per_node_gib: f64,
    pub numa_balancing: bool,
    pub cgroups: Cgroups,
    pub groups: Vec<Group>,
    pub tasks: Vec<Task>,
    pub vms: Vec<Vm>,
    /// High-priority kernel work (page migration, hinting faults of other
    /// threads) per CPU this tick, share of the CPU.
    pub kernel: Vec<f64>,
    /// Load balancer: failed attempts per (CPU, level) (the kernel's nr_balance_failed).
    pub lb_failed: Vec<[u32; 2]>,
    /// With kernel timing: when each CPU balances next, and whether its
    /// interval is doubled (it found balance last time).
    pub lb_next_s: Vec<f64>,
    pub lb_doubled: Vec<bool>,
    /// Some thread has a measured queued share (`min_runnable`, bursts).
    pub queued_work: bool,
}

pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup/cpu";

impl Host {
    pub fn new(
        cpus: usize,
        nodes: usize,
        smt: bool,
        mem_per_node_gib: f64,
        cgroups: Cgroups,
    ) -> Host {
        let per = cpus / nodes.max(1);
        let node_of: Vec<usize> = (0..cpus).map(|c| (c / per.max(1)).min(nodes - 1)).collect();
        let node_cpus = (0..nodes)
            .map(|n| (0..cpus).filter(|c| node_of[*c] == n).collect())
            .collect();
        let mut h = Host {
            ncpu: cpus,
            node_of,
            nodes: std::sync::Arc::new(node_cpus),
            smt,
            mem_per_node_gib,
            numa_balancing: false,
            cgroups,
            groups: Vec::new(),
            tasks: Vec::new(),
            vms: Vec::new(),
            kernel: vec![0.0; cpus],
            lb_failed: vec![[0, 0]; cpus],
            lb_next_s: vec![0.0; cpus],
            lb_doubled: vec![false; cpus],
            queued_work: false,
        };
        if cgroups == Cgroups::PerHost {
            h.groups.push(Group {
                dir: format!("{CGROUP_MOUNT}/machine"),
                shares: NICE_0,
            });
        }
        h
    }

    /// The group with this directory, created with `shares` if new.
    pub fn group_named(&mut self, dir: &str, shares: f64) -> usize {
        if let Some(i) = self.groups.iter().position(|g| g.dir == dir) {
            return i;
        }
        self.groups.push(Group {
            dir: dir.to_string(),
            shares,
        });
        self.groups.len() - 1
    }

    /// What thread `i` wants at `t` (share of a CPU): its VM's demand for a
    /// vCPU, its own for anything else.
    pub fn level(&self, i: usize, t: f64) -> f64 {
        let task = &self.tasks[i];
        match task.vm {
            Some(v) if !task.emulator => self.vms[v].demand.level(t, self.vms[v].key),
            _ => task.own_demand.level(t, task.tid as u64),
        }
    }

    pub fn live_tasks(&self) -> impl Iterator<Item = (usize, &Task)> {
        self.tasks.iter().enumerate().filter(|(_, t)| t.alive)
    }

    /// Total vCPUs of live VMs.
    pub fn live_vcpus(&self) -> u32 {
        self.vms.iter().filter(|v| v.alive).map(|v| v.vcpus).sum()
    }

    /// Keeps the per-host group's weight at its vCPUs (x the default), as
    /// the talk's modified libvirt and stealscope's shared group do.
    pub fn refresh_per_host_weight(&mut self) {
        if self.cgroups == Cgroups::PerHost {
            let n: u32 = self
                .vms
                .iter()
                .filter(|v| v.alive && v.group == Some(0))
                .map(|v| v.vcpus)
                .sum();
            self.groups[0].shares = (n.max(1) as f64).min(256.0);
        }
    }

    /// Adds a VM: its group per the layout, its vCPU threads started where
    /// the kernel puts new threads (`place`), memory per `mem`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_vm(
        &mut self,
        name: String,
        vcpus: u32,
        demand: Demand,
        key: u64,
        mem: Vec<f64>,
        allowed: CpuSet,
        weight: Option<u64>,
        dedicated: bool,
        threads: VmThreads,
        now_s: f64,
        place: &mut dyn FnMut(&Host, &CpuSet) -> usize,
    ) -> usize {
        let id = self.vms.len();
        let pid = 1000 + id as u32;
        let group = match self.cgroups {
            Cgroups::None => None,
            Cgroups::PerHost => Some(0),
            Cgroups::PerVm | Cgroups::Proportional => {
                let shares = match (weight, self.cgroups) {
                    (Some(w), _) => w as f64 / 1024.0,
                    (None, Cgroups::Proportional) => (vcpus as f64).min(256.0),
                    _ => NICE_0,
                };
                let dir = format!("{CGROUP_MOUNT}/machine/{name}");
                let g = self.group_named(&dir, shares);
                self.groups[g].shares = shares;
                Some(g)
            }
        };
        let mut tasks = Vec::new();
        for i in 0..vcpus {
            let cpu = place(self, &allowed);
            let mut t = Task::new(Some(id), pid * 1000 + 1 + i, group, cpu, allowed.clone());
            t.vcpu = i;
            t.wakeups_per_s = threads.vcpu_wakeups_per_s;
            // Woken by another thread of its VM (the main loop or a sibling).
            t.kicks = 1.0;
            self.tasks.push(t);
            tasks.push(self.tasks.len() - 1);
        }
        // QEMU starts its main loop first; the vCPU threads are its children,
        // so it starts where the first of them did.
        let emulator = threads.emulator.map(|e| {
            let cpu = tasks.first().map_or(0, |&i| self.tasks[i].cpu);
            let mut t = Task::new(Some(id), pid, group, cpu, allowed.clone());
            let level = e.wakeups_per_s.0 * e.run_us.0 / 1e6;
            t.emulator = true;
            t.own_demand = Demand::Level(level);
            t.wants = level;
            t.load_avg = 0.5;
            t.util_avg = level;
            t.runnable = 0.5;
            t.wakeups_per_s = e.wakeups_per_s.0;
            t.kicks = e.kicks.0;
            self.tasks.push(t);
            self.tasks.len() - 1
        });
        self.vms.push(Vm {
            name,
            pid,
            vcpus,
            demand,
            key,
            tasks,
            emulator,
            mem,
            moving: None,
            group,
            dedicated,
            alive: true,
            started_s: now_s,
            next_scan_s: f64::INFINITY,
            scan_period_s: 1.0,
        });
        self.refresh_per_host_weight();
        id
    }

    pub fn remove_vm(&mut self, id: usize) {
        self.vms[id].alive = false;
        for t in self.vms[id].threads().collect::<Vec<_>>() {
            self.tasks[t].alive = false;
        }
        self.refresh_per_host_weight();
    }

    /// Other host work at the top level, starting on `cpu`.
    pub fn add_background(&mut self, cpu: usize, allowed: CpuSet, b: &BackgroundThread) {
        let (demand, wakeups_per_s, queued) = (b.demand.clone(), b.wakeups_per_s, b.queued);
        let now = demand.level(0.0, 0);
        let mut t = Task::new(None, 1 + self.tasks.len() as u32, None, cpu, allowed);
        t.own_demand = demand;
        t.util_avg = now;
        t.wants = now;
        t.runnable = now;
        t.load_avg = now.max(queued);
        t.wakeups_per_s = wakeups_per_s;
        t.min_runnable = queued;
        self.queued_work |= queued > 0.0;
        if queued > 0.0 && wakeups_per_s > 0.0 {
            // Each wake-up starts a stretch on the run queue: queued / rate
            // seconds on average, then asleep for the rest of the period.
            t.burst = (
                queued / wakeups_per_s,
                (1.0 - queued).max(0.0) / wakeups_per_s,
            );
        }
        self.tasks.push(t);
    }

    /// Advances the queued bursts of other work by `dt` (exponential
    /// stretches, so the seeds differ in when the load comes and goes).
    pub fn step_bursts(&mut self, dt: f64, rng: &mut Rng) {
        for t in self.tasks.iter_mut().filter(|t| t.alive && t.burst.0 > 0.0) {
            t.burst_left_s -= dt;
            while t.burst_left_s <= 0.0 {
                t.burst_on = !t.burst_on;
                let mean = if t.burst_on { t.burst.0 } else { t.burst.1 };
                t.burst_left_s += -mean * (1.0 - rng.unit()).max(1e-12).ln();
                if mean <= 0.0 {
                    break;
                }
            }
            t.min_runnable = if t.burst_on { 1.0 } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_bursts_keep_the_measured_share_and_length() {
        // kdamond on this machine: queued 63 % of the time, 0.8 wake-ups a
        // second, so stretches of 0.79 s queued and 0.46 s asleep.
        let mut h = Host::new(2, 1, false, 4.0, Cgroups::PerVm);
        let kdamond = BackgroundThread {
            demand: Demand::Level(0.001),
            wakeups_per_s: 0.8,
            queued: 0.63,
            ..BackgroundThread::default()
        };
        h.add_background(0, CpuSet::all(2), &kdamond);
        assert!(h.queued_work);
        let mut rng = Rng(7);
        let (dt, steps) = (0.004, 1_000_000);
        let (mut on, mut starts) = (0.0, 0);
        let mut was = false;
        for _ in 0..steps {
            h.step_bursts(dt, &mut rng);
            let t = &h.tasks[0];
            assert!(t.min_runnable == 0.0 || t.min_runnable == 1.0);
            if t.burst_on {
                on += dt;
                starts += usize::from(!was);
            }
            was = t.burst_on;
        }
        let secs = dt * steps as f64;
        assert!(
            (on / secs - 0.63).abs() < 0.02,
            "queued share {}",
            on / secs
        );
        assert!(
            (starts as f64 / secs - 0.8).abs() < 0.05,
            "{} wake-ups/s",
            starts as f64 / secs
        );
        // Without a wake-up rate the queued share is a floor on every tick.
        let mut h = Host::new(2, 1, false, 4.0, Cgroups::PerVm);
        let steady = BackgroundThread {
            wakeups_per_s: 0.0,
            queued: 0.3,
            ..kdamond
        };
        h.add_background(0, CpuSet::all(2), &steady);
        assert_eq!(h.tasks[0].min_runnable, 0.3);
    }
}
