//! What a placement plan will do to a host, before it touches it: the
//! host's measured per-thread demand of the last minutes is replayed
//! through the simulator twice, on the layout the host has now and on the
//! one the plan makes, each with a few seeds, and the two are compared on
//! the measures an operator reads (mean steal, the p99 of the VMs' steal,
//! the spread between a VM's vCPUs and between VMs, throughput, and the
//! steal of the host's own work and the CPU it gets). A measure is worse
//! beyond noise when the planned layout loses more than the seeds' spread
//! of that measure (max minus min over the seeds, the larger of the two
//! layouts') plus a floor ([`FLOOR_PP`], [`FLOOR_THROUGHPUT`],
//! [`FLOOR_HOST_CPUS`]): the fluid model can give the same figure for
//! every seed, and a fraction of a point is no reason to refuse.
//!
//! Host work is judged twice because one figure misses what the other
//! sees: its most robbed thread's steal catches a small thread starved,
//! but reads ~95 % on a busy host before any plan (a low-weight thread in
//! a busy session), so a plan that takes half of a pinned host loop's CPU
//! moves it by a point; the CPU host work gets in all shows that loss.
//!
//! How the live host becomes a simulated one: each vCPU thread and each
//! thread of other host work is a one-thread VM of the model, with its own
//! allowed CPUs and its measured demand as a trace. A cpu group's weight is
//! split over its threads by their demand, which is how CFS splits a
//! group's weight over the CPUs its load is on; a thread outside any group
//! (or host work) is a nice-0 task at the top level. Emulator threads are
//! left out (they run microseconds; scenarios/calibration/vcpu-threads.md).

use crate::demand::Demand;
use crate::engine::{self, Acc, HostShape, RunOutcome, RunSpec};
use crate::scenario::{Case, Cgroups, MemNode, NumaSpec, PolicyKind, SchedSpec, VmDef};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stealscope_placement::{Action, CgroupRef, Config, HostInput, Plan};

/// Steal measures worse by more than the seeds' spread plus this many
/// percentage points refuse a plan.
pub const FLOOR_PP: f64 = 1.0;
/// Throughput lower by more than the seeds' spread plus this share refuses.
pub const FLOOR_THROUGHPUT: f64 = 0.01;
/// The host's own work getting less CPU by more than the seeds' spread
/// plus this share of what it got (and at least [`FLOOR_HOST_CPUS_MIN`])
/// refuses: a VM's gain is never paid for by the host's services (a
/// weight raised for fairness took half of a pinned host loop's CPU on
/// the walk-through's host).
pub const FLOOR_HOST_CPUS: f64 = 0.05;
/// The least loss of host work's CPU that refuses, CPUs: below it, a
/// seed's jitter on a host with little host work.
pub const FLOOR_HOST_CPUS_MIN: f64 = 0.02;
/// A thread wanting less than this share of a CPU is idle: it is left out
/// of the spreads (an idle vCPU beside a busy one is not unfairness).
pub const BUSY: f64 = 0.1;
/// Host work below this share of a CPU is left out of the model.
pub const HOST_WORK_MIN: f64 = 0.02;
/// Seeds per layout.
pub const SEEDS: [u64; 3] = [1, 2, 3];
/// Simulated before the measured part (the balancer settling).
const WARMUP_S: f64 = 2.0;
/// At least this long is simulated (a short history repeats).
const MIN_SPAN_S: f64 = 20.0;
const TICK_S: f64 = 0.01;

/// Per-thread demand measured on the host: the share of a CPU each thread
/// was runnable (run plus run-queue wait), one value per `step_s`, oldest
/// first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DemandHistory {
    pub step_s: f64,
    pub by_tid: BTreeMap<u32, Vec<f64>>,
}

impl DemandHistory {
    /// Mean demand of `tid` (None: never measured).
    pub fn mean(&self, tid: u32) -> Option<f64> {
        let v = self.by_tid.get(&tid)?;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    pub fn span_s(&self) -> f64 {
        let n = self.by_tid.values().map(Vec::len).max().unwrap_or(0);
        n as f64 * self.step_s
    }
}

/// A thread of the host's own work (not a VM's), as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostThread {
    pub name: String,
    pub pid: u32,
    pub tid: u32,
    /// Its allowed CPUs (Cpus_allowed_list).
    pub cpus: Vec<u32>,
    /// The group it is scheduled in (a cpu cgroup or an autogroup) and the
    /// group's weight; None: the top level.
    #[serde(default)]
    pub group: Option<(String, f64)>,
    /// Its own weight (its nice) where it runs, 1024 at nice 0.
    pub weight: f64,
}

/// What is predicted from.
pub struct PredictInput<'a> {
    pub host: &'a HostInput,
    /// Demand of the vCPU threads and of `host_work` by tid.
    pub demand: &'a DemandHistory,
    pub host_work: &'a [HostThread],
    /// The autogroup (name, weight) of each VM, by pid, for VMs in the root
    /// cpu cgroup while autogroups are on (the kernel schedules such a
    /// process's threads in its session's group).
    pub autogroups: &'a BTreeMap<u32, (String, f64)>,
}

/// The weight of `nice` (the kernel's sched_prio_to_weight).
pub use stealscope_readers::autogroup::nice_weight;

/// Where each thread may run and the weight it runs with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layout {
    /// Allowed CPUs of every vCPU thread, by tid.
    pub cpus: BTreeMap<u32, Vec<u32>>,
    /// Each VM's cpu group, by pid (None: the top level).
    pub group: BTreeMap<u32, Option<String>>,
    /// Weight of each group, in cpu.shares units (1024 is a nice-0 task).
    pub weight: BTreeMap<String, f64>,
}

fn shares(g: &CgroupRef, value: u64) -> f64 {
    let (default, _, _) = g.weight_unit();
    value as f64 * 1024.0 / default as f64
}

impl Layout {
    /// The layout the host has now; `autogroups` as in [`PredictInput`].
    pub fn current(host: &HostInput, autogroups: &BTreeMap<u32, (String, f64)>) -> Layout {
        let root = host
            .cpu_controller
            .as_ref()
            .map(|c| c.mount.trim_end_matches('/').to_string());
        let mut l = Layout::default();
        for vm in &host.vms {
            for (_, t) in &vm.vcpus {
                l.cpus.insert(t.tid, t.cpus_allowed.clone());
            }
            let g = vm
                .cpu_group
                .as_ref()
                .filter(|g| Some(g.dir.trim_end_matches('/')) != root.as_deref());
            l.group.insert(vm.pid, g.map(|g| g.dir.clone()));
            if let (Some(g), Some(w)) = (g, vm.cpu_weight) {
                l.weight.insert(g.dir.clone(), shares(g, w));
            }
            if let (None, Some((name, w))) = (g, autogroups.get(&vm.pid)) {
                l.group.insert(vm.pid, Some(name.clone()));
                l.weight.insert(name.clone(), *w);
            }
        }
        l
    }

    /// This layout after `plan`'s actions.
    pub fn after(&self, plan: &Plan) -> Layout {
        let mut l = self.clone();
        for a in &plan.actions {
            match a {
                Action::Affinity { tid, cpus, .. } if l.cpus.contains_key(tid) => {
                    l.cpus.insert(*tid, cpus.clone());
                }
                Action::JoinGroup { pid, group, .. } => {
                    l.group.insert(*pid, Some(group.dir.clone()));
                    l.weight.entry(group.dir.clone()).or_insert(1024.0);
                }
                Action::CpuWeight { group, value, .. } => {
                    l.weight.insert(group.dir.clone(), shares(group, *value));
                }
                Action::AutogroupNice {
                    autogroup, value, ..
                } => {
                    let name = stealscope_readers::autogroup::group_name(*autogroup);
                    if l.weight.contains_key(&name) {
                        l.weight.insert(name, nice_weight(*value));
                    }
                }
                _ => {}
            }
        }
        l
    }
}

/// The measures of one layout (mean over the seeds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Measures {
    /// Mean over vCPUs of the share of wall time each waited, percent.
    pub mean_steal_pct: f64,
    /// The 99th percentile over VMs of each VM's steal, percent.
    pub p99_vm_steal_pct: f64,
    /// Largest spread between the busy vCPUs of one VM, points.
    pub spread_vcpus_pp: f64,
    /// Most minus least robbed busy VM, points.
    pub spread_vms_pp: f64,
    /// CPUs of useful work of all vCPUs (run less NUMA penalties).
    pub throughput_cpus: f64,
    /// The most robbed thread of the host's own work, percent.
    pub host_steal_pct: f64,
    /// CPUs the host's own work got, all its threads (run; a simulated
    /// run less the model's remote-memory cost, as throughput).
    #[serde(default)]
    pub host_cpus: f64,
    /// What the host's own work wanted, CPUs (not judged: it says whether
    /// a measured result and its prediction saw the same host).
    #[serde(default)]
    pub host_demand_cpus: f64,
}

/// One measure's name, how it reads, and whether higher is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    MeanSteal,
    P99VmSteal,
    SpreadVcpus,
    SpreadVms,
    Throughput,
    HostSteal,
    HostCpus,
}

impl Measure {
    pub const ALL: [Measure; 7] = [
        Measure::MeanSteal,
        Measure::P99VmSteal,
        Measure::SpreadVcpus,
        Measure::SpreadVms,
        Measure::Throughput,
        Measure::HostSteal,
        Measure::HostCpus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Measure::MeanSteal => "mean steal",
            Measure::P99VmSteal => "p99 VM steal",
            Measure::SpreadVcpus => "spread between a VM's vCPUs",
            Measure::SpreadVms => "spread between VMs",
            Measure::Throughput => "throughput",
            Measure::HostSteal => "host work steal",
            Measure::HostCpus => "host work CPU",
        }
    }

    pub fn of(self, m: &Measures) -> f64 {
        match self {
            Measure::MeanSteal => m.mean_steal_pct,
            Measure::P99VmSteal => m.p99_vm_steal_pct,
            Measure::SpreadVcpus => m.spread_vcpus_pp,
            Measure::SpreadVms => m.spread_vms_pp,
            Measure::Throughput => m.throughput_cpus,
            Measure::HostSteal => m.host_steal_pct,
            Measure::HostCpus => m.host_cpus,
        }
    }

    /// Whether more of it is better (CPUs of work), not worse (steal).
    fn higher_is_better(self) -> bool {
        matches!(self, Measure::Throughput | Measure::HostCpus)
    }

    /// How much worse `b` is than `a` (positive: worse), in the measure's units.
    pub fn loss(self, a: &Measures, b: &Measures) -> f64 {
        let d = self.of(b) - self.of(a);
        if self.higher_is_better() {
            -d
        } else {
            d
        }
    }

    fn floor(self, current: &Measures) -> f64 {
        match self {
            Measure::Throughput => FLOOR_THROUGHPUT * current.throughput_cpus.max(0.1),
            Measure::HostCpus => (FLOOR_HOST_CPUS * current.host_cpus).max(FLOOR_HOST_CPUS_MIN),
            _ => FLOOR_PP,
        }
    }
}

/// The simulator's forecast for a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub current: Measures,
    pub planned: Measures,
    /// Per measure, the larger layout's spread over the seeds (max - min).
    pub noise: Measures,
    pub seeds: Vec<u64>,
    /// Seconds of measured demand replayed.
    pub history_s: f64,
    /// Planned throughput against the current, percent.
    pub throughput_change_pct: f64,
    /// The measures the plan makes worse beyond noise, in words; empty: safe.
    pub worse: Vec<String>,
    /// The VMs (pids) the measures are of: those the plan manages; the
    /// host's other VMs are simulated, as load, but not judged.
    pub vms: Vec<u32>,
    /// The host's own work as simulated, by process, most demand first.
    #[serde(default)]
    pub host_work: Vec<HostWorkEntry>,
}

/// A process of the host's own work as the prediction took it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostWorkEntry {
    pub name: String,
    pub pid: u32,
    pub threads: u32,
    /// Mean demand, CPUs.
    pub demand_cpus: f64,
    /// The group it runs in (None: the top level).
    pub group: Option<String>,
    /// Its threads' weights at the top level, summed (layout now).
    pub weight: f64,
}

fn host_work_entries(inp: &PredictInput, l: &Layout) -> Vec<HostWorkEntry> {
    let w = thread_weights(inp, l);
    let mut out: Vec<HostWorkEntry> = Vec::new();
    for h in inp.host_work {
        let d = inp.demand.mean(h.tid).unwrap_or(0.0);
        if d < HOST_WORK_MIN {
            continue;
        }
        let tw = w.get(&h.tid).copied().unwrap_or(h.weight);
        match out.iter_mut().find(|e| e.pid == h.pid) {
            Some(e) => {
                e.threads += 1;
                e.demand_cpus += d;
                e.weight += tw;
            }
            None => out.push(HostWorkEntry {
                name: h.name.clone(),
                pid: h.pid,
                threads: 1,
                demand_cpus: d,
                group: h.group.as_ref().map(|g| g.0.clone()),
                weight: tw,
            }),
        }
    }
    out.sort_by(|a, b| b.demand_cpus.total_cmp(&a.demand_cpus));
    out
}

/// The VMs a plan is judged on: the ones it lists or acts on; all when it
/// names none.
pub fn judged(host: &HostInput, plan: &Plan) -> Vec<u32> {
    let named: Vec<u32> = host
        .vms
        .iter()
        .map(|v| v.pid)
        .filter(|p| {
            plan.vms.iter().any(|v| v.pid == *p) || plan.actions.iter().any(|a| a.pid() == *p)
        })
        .collect();
    if named.is_empty() {
        host.vms.iter().map(|v| v.pid).collect()
    } else {
        named
    }
}

impl Measures {
    /// The larger of the two spreads: what "spread" reads as in one figure.
    pub fn spread_pp(&self) -> f64 {
        self.spread_vcpus_pp.max(self.spread_vms_pp)
    }
}

impl Prediction {
    /// `steal 4.1 % -> 1.2 %, p99 18 % -> 6 %, spread 12 -> 3 pp,
    /// throughput +9 %, host work steal 0 -> 2 %, host work CPUs 0.98 -> 0.97`.
    pub fn summary(&self) -> String {
        self.measures().join(", ")
    }

    /// The summary's measures, one item each (a layout breaks lines only
    /// between them).
    pub fn measures(&self) -> Vec<String> {
        let (a, b) = (&self.current, &self.planned);
        vec![
            format!(
                "steal {:.1} % -> {:.1} %",
                a.mean_steal_pct, b.mean_steal_pct
            ),
            format!(
                "p99 {:.1} % -> {:.1} %",
                a.p99_vm_steal_pct, b.p99_vm_steal_pct
            ),
            format!("spread {:.1} -> {:.1} pp", a.spread_pp(), b.spread_pp()),
            format!("throughput {:+.1} %", self.throughput_change_pct),
            format!(
                "host work steal {:.1} -> {:.1} %",
                a.host_steal_pct, b.host_steal_pct
            ),
            format!("host work CPUs {:.2} -> {:.2}", a.host_cpus, b.host_cpus),
        ]
    }

    /// Why the plan must not be applied, when it is predicted worse.
    pub fn refusal(&self) -> Option<String> {
        (!self.worse.is_empty()).then(|| {
            format!(
                "the simulator predicts this plan makes the host worse: {} \
                 (noise: the spread over {} seeds plus {FLOOR_PP} pp, {:.0} % of throughput \
                 or {:.0} % of host work's CPUs); nothing was changed (--force applies it anyway)",
                self.worse.join("; "),
                self.seeds.len(),
                100.0 * FLOOR_THROUGHPUT,
                100.0 * FLOOR_HOST_CPUS
            )
        })
    }
}

/// `steal 4.0 % (predicted 3.8 %), ...`: a measured result beside its
/// prediction, measure by measure.
pub fn versus(measured: &Measures, predicted: &Measures) -> String {
    let (m, p) = (measured, predicted);
    format!(
        "steal {:.1} % (predicted {:.1} %), p99 {:.1} % (predicted {:.1} %), spread {:.1} pp \
         (predicted {:.1} pp), throughput {:.2} CPUs (predicted {:.2}), host work steal {:.1} % \
         (predicted {:.1} %), host work got {:.2} CPUs (predicted {:.2}), host work {:.2} CPUs \
         (predicted from {:.2})",
        m.mean_steal_pct,
        p.mean_steal_pct,
        m.p99_vm_steal_pct,
        p.p99_vm_steal_pct,
        m.spread_pp(),
        p.spread_pp(),
        m.throughput_cpus,
        p.throughput_cpus,
        m.host_steal_pct,
        p.host_steal_pct,
        m.host_cpus,
        p.host_cpus,
        m.host_demand_cpus,
        p.host_demand_cpus
    )
}

/// One thread of the model and what it stands for.
struct Member {
    /// VM pid, or None for host work.
    vm: Option<u32>,
    def: VmDef,
}

fn demand_of(h: &DemandHistory, tid: u32) -> Demand {
    match h.by_tid.get(&tid) {
        Some(v) if v.len() > 1 => Demand::Trace {
            levels: v.iter().map(|x| x.clamp(0.0, 1.0)).collect(),
            step_s: h.step_s.max(0.01),
            repeat: true,
        },
        Some(v) if v.len() == 1 => Demand::Level(v[0].clamp(0.0, 1.0)),
        // Never measured: a busy thread, the safe assumption for capacity.
        _ => Demand::Busy,
    }
}

fn one_thread(name: String, demand: Demand, cpus: &[u32], ncpu: u32, weight: f64) -> VmDef {
    let cpus: Vec<u32> = cpus.iter().copied().filter(|c| *c < ncpu).collect();
    VmDef {
        name,
        vcpus: 1,
        mem_gib: 0.25,
        mem_node: MemNode::Spread,
        demand,
        cpus: (!cpus.is_empty()).then_some(cpus),
        weight: Some(weight.round().clamp(2.0, 262_144.0) as u64),
        dedicated: false,
        start_s: 0.0,
        stop_s: None,
        emulator: None,
        vcpu_wakeups_per_s: 0.0,
    }
}

/// Each thread's weight at the top level under `l` (vCPUs and host work,
/// by tid): a group's weight split by demand over the group's threads; a
/// thread outside any group keeps its own (1024 for a vCPU).
fn thread_weights(inp: &PredictInput, l: &Layout) -> BTreeMap<u32, f64> {
    let d = |tid: u32| inp.demand.mean(tid).unwrap_or(1.0).max(0.01);
    // (group, tid, own weight when outside any group)
    let mut members: Vec<(Option<&str>, u32, f64)> = Vec::new();
    for vm in &inp.host.vms {
        let g = l.group.get(&vm.pid).and_then(|g| g.as_deref());
        members.extend(vm.vcpus.iter().map(|(_, t)| (g, t.tid, 1024.0)));
    }
    let mut weight: BTreeMap<&str, f64> = l.weight.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    for h in inp.host_work {
        if let Some((g, w)) = &h.group {
            weight.entry(g.as_str()).or_insert(*w);
        }
        members.push((h.group.as_ref().map(|g| g.0.as_str()), h.tid, h.weight));
    }
    let mut load: BTreeMap<&str, f64> = BTreeMap::new();
    for (g, tid, _) in &members {
        if let Some(g) = g {
            *load.entry(g).or_default() += d(*tid);
        }
    }
    members
        .iter()
        .map(|(g, tid, own)| {
            let w = match g {
                Some(g) => {
                    let gw = weight.get(g).copied().unwrap_or(1024.0);
                    gw * d(*tid) / load.get(g).copied().unwrap_or(1.0).max(0.01)
                }
                None => *own,
            };
            (*tid, w)
        })
        .collect()
}

fn members(inp: &PredictInput, l: &Layout, ncpu: u32) -> Vec<Member> {
    let w = thread_weights(inp, l);
    let mut out = Vec::new();
    for vm in &inp.host.vms {
        for (i, t) in &vm.vcpus {
            let cpus = l.cpus.get(&t.tid).unwrap_or(&t.cpus_allowed);
            out.push(Member {
                vm: Some(vm.pid),
                def: one_thread(
                    format!(
                        "{}/{i}/{}",
                        vm.name.replace(char::is_whitespace, "_"),
                        t.tid
                    ),
                    demand_of(inp.demand, t.tid),
                    cpus,
                    ncpu,
                    w.get(&t.tid).copied().unwrap_or(1024.0),
                ),
            });
        }
    }
    for h in inp.host_work {
        if inp.demand.mean(h.tid).unwrap_or(0.0) < HOST_WORK_MIN {
            continue;
        }
        out.push(Member {
            vm: None,
            def: one_thread(
                format!(
                    "host/{}/{}",
                    h.name.replace(char::is_whitespace, "_"),
                    h.tid
                ),
                demand_of(inp.demand, h.tid),
                &h.cpus,
                ncpu,
                w.get(&h.tid).copied().unwrap_or(h.weight),
            ),
        });
    }
    out
}

fn shape(host: &HostInput) -> HostShape {
    let ncpu = host.topology.cpus.iter().max().map_or(1, |m| m + 1) as usize;
    let nodes = host.topology.nodes.len().max(1);
    HostShape {
        cpus: ncpu,
        // The model splits CPUs evenly over nodes; a host that does not is one node.
        nodes: if ncpu.is_multiple_of(nodes) { nodes } else { 1 },
        smt: false,
        mem_per_node_gib: 64.0,
        background: Vec::new(),
    }
}

fn pct(a: &Acc, x: f64) -> f64 {
    a.pct(x)
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = (0.99 * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    if v.len() < 2 {
        0.0
    } else {
        max - min
    }
}

/// Per-thread figures the measures are made of, from a run or the host.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadFigures {
    /// Share of wall time it waited, percent.
    pub steal_pct: f64,
    /// Share of a CPU it was runnable (what it wanted).
    pub demand: f64,
    /// CPUs of useful work.
    pub work_cpus: f64,
}

/// The measures from per-thread figures: `vms` by VM, each its vCPUs;
/// `host` the host's own threads. The same for a simulated run and for
/// what was measured on the host, so the two compare.
pub fn measures(vms: &[Vec<ThreadFigures>], host: &[ThreadFigures]) -> Measures {
    let all: Vec<&ThreadFigures> = vms.iter().flatten().collect();
    let n = all.len().max(1) as f64;
    let vm_steal =
        |v: &Vec<ThreadFigures>| v.iter().map(|t| t.steal_pct).sum::<f64>() / v.len().max(1) as f64;
    let busy_vms: Vec<f64> = vms
        .iter()
        .filter(|v| v.iter().any(|t| t.demand >= BUSY))
        .map(vm_steal)
        .collect();
    let spread_vcpus = vms
        .iter()
        .map(|v| {
            let s: Vec<f64> = v
                .iter()
                .filter(|t| t.demand >= BUSY)
                .map(|t| t.steal_pct)
                .collect();
            spread(&s)
        })
        .fold(0.0, f64::max);
    Measures {
        mean_steal_pct: all.iter().map(|t| t.steal_pct).sum::<f64>() / n,
        p99_vm_steal_pct: p99(vms.iter().map(vm_steal).collect()),
        spread_vcpus_pp: spread_vcpus,
        spread_vms_pp: spread(&busy_vms),
        // Folded from +0.0: an empty f64 sum is -0.0, printed "-0.00".
        throughput_cpus: all.iter().fold(0.0, |s, t| s + t.work_cpus),
        host_steal_pct: host.iter().map(|t| t.steal_pct).fold(0.0, f64::max),
        host_cpus: host.iter().fold(0.0, |s, t| s + t.work_cpus),
        host_demand_cpus: host.iter().fold(0.0, |s, t| s + t.demand),
    }
}

fn figures(a: &Acc) -> ThreadFigures {
    let secs = a.secs.max(1e-9);
    ThreadFigures {
        steal_pct: pct(a, a.wait),
        demand: a.wanted / secs,
        work_cpus: a.work / secs,
    }
}

fn run_measures(ms: &[Member], out: &RunOutcome, host: &HostInput, vms: &[u32]) -> Measures {
    let by_name: BTreeMap<&str, &Acc> = out
        .vms
        .iter()
        .filter_map(|v| Some((v.name.as_str(), v.vcpus.first()?)))
        .collect();
    let fig = |m: &Member| by_name.get(m.def.name.as_str()).map(|a| figures(a));
    let vms: Vec<Vec<ThreadFigures>> = host
        .vms
        .iter()
        .filter(|vm| vms.contains(&vm.pid))
        .map(|vm| {
            ms.iter()
                .filter(|m| m.vm == Some(vm.pid))
                .filter_map(fig)
                .collect()
        })
        .filter(|v: &Vec<ThreadFigures>| !v.is_empty())
        .collect();
    let hw: Vec<ThreadFigures> = ms
        .iter()
        .filter(|m| m.vm.is_none())
        .filter_map(fig)
        .collect();
    measures(&vms, &hw)
}

fn mean_and_noise(runs: &[Measures]) -> (Measures, Measures) {
    let n = runs.len().max(1) as f64;
    let f = |g: fn(&Measures) -> f64| {
        let v: Vec<f64> = runs.iter().map(g).collect();
        (v.iter().sum::<f64>() / n, spread(&v))
    };
    let (a, b, c, d, e, h) = (
        f(|m| m.mean_steal_pct),
        f(|m| m.p99_vm_steal_pct),
        f(|m| m.spread_vcpus_pp),
        f(|m| m.spread_vms_pp),
        f(|m| m.throughput_cpus),
        f(|m| m.host_steal_pct),
    );
    let (hc, hd) = (f(|m| m.host_cpus), f(|m| m.host_demand_cpus));
    let pick = |k: usize| Measures {
        mean_steal_pct: [a.0, a.1][k],
        p99_vm_steal_pct: [b.0, b.1][k],
        spread_vcpus_pp: [c.0, c.1][k],
        spread_vms_pp: [d.0, d.1][k],
        throughput_cpus: [e.0, e.1][k],
        host_steal_pct: [h.0, h.1][k],
        host_cpus: [hc.0, hc.1][k],
        host_demand_cpus: [hd.0, hd.1][k],
    };
    (pick(0), pick(1))
}

/// Runs the layout `l` once per seed; measures of the VMs `vms`.
fn simulate_layout(inp: &PredictInput, l: &Layout, seeds: &[u64], vms: &[u32]) -> Vec<Measures> {
    let sh = shape(inp.host);
    let ms = members(inp, l, sh.cpus as u32);
    if ms.is_empty() {
        return vec![Measures::default(); seeds.len()];
    }
    let defs: Vec<VmDef> = ms.iter().map(|m| m.def.clone()).collect();
    let case = Case {
        name: "predict".into(),
        policy: PolicyKind::None,
        cgroups: Cgroups::PerVm,
        numa_balancing: false,
        planner: Config::default(),
    };
    let (sched, numa) = (SchedSpec::default(), NumaSpec::default());
    let span = inp.demand.span_s().max(MIN_SPAN_S);
    seeds
        .par_iter()
        .map(|&seed| {
            let out = engine::run(&RunSpec {
                shape: &sh,
                sched: &sched,
                numa: &numa,
                case: &case,
                vms: &defs,
                duration_s: span + WARMUP_S,
                tick_s: TICK_S,
                warmup_s: WARMUP_S,
                seed,
                every_tick: false,
                trim: None,
            });
            run_measures(&ms, &out, inp.host, vms)
        })
        .collect()
}

/// Compares `planned` with `current`: the measures worse beyond noise.
/// `paired` holds each seed's (current, planned) run: host work's CPU is
/// also worse when it loses more than its floor on the mean and in most
/// seeds (see [`seeds_losing`]).
pub fn worse(
    current: &Measures,
    planned: &Measures,
    noise: &Measures,
    paired: &[(Measures, Measures)],
) -> Vec<String> {
    Measure::ALL
        .iter()
        .filter_map(|&m| {
            let (loss, floor) = (m.loss(current, planned), m.floor(current));
            let allowed = m.of(noise) + floor;
            let why = if loss > allowed {
                format!("noise {allowed:.2}")
            } else if m == Measure::HostCpus && loss > floor {
                let losing = seeds_losing(m, floor, paired);
                if 2 * losing <= paired.len() {
                    return None;
                }
                format!(
                    "{losing} of {} seeds lose more than {floor:.2}",
                    paired.len()
                )
            } else {
                return None;
            };
            let (a, b) = (m.of(current), m.of(planned));
            Some(if m.higher_is_better() {
                format!("{} {a:.2} CPUs -> {b:.2} CPUs ({why})", m.name())
            } else {
                format!("{} {a:.1} % -> {b:.1} % ({why})", m.name())
            })
        })
        .collect()
}

/// How many seeds, each run on both layouts, lose more than `floor`. The seeds' spread can be the model's balancer settling in one of
/// two layouts (on a 2-CPU host one seed stacks a VM's vCPUs, two split
/// them), wider than the plan's effect; a seed's own pair mostly is not.
/// Host work's CPU is worse when most seeds lose it: a plan must never be
/// paid for by the host's services.
fn seeds_losing(m: Measure, floor: f64, paired: &[(Measures, Measures)]) -> usize {
    paired.iter().filter(|(c, p)| m.loss(c, p) > floor).count()
}

/// Per measure, the larger of two layouts' spreads over the seeds.
fn larger_noise(n1: &Measures, n2: &Measures) -> Measures {
    Measures {
        mean_steal_pct: n1.mean_steal_pct.max(n2.mean_steal_pct),
        p99_vm_steal_pct: n1.p99_vm_steal_pct.max(n2.p99_vm_steal_pct),
        spread_vcpus_pp: n1.spread_vcpus_pp.max(n2.spread_vcpus_pp),
        spread_vms_pp: n1.spread_vms_pp.max(n2.spread_vms_pp),
        throughput_cpus: n1.throughput_cpus.max(n2.throughput_cpus),
        host_steal_pct: n1.host_steal_pct.max(n2.host_steal_pct),
        host_cpus: n1.host_cpus.max(n2.host_cpus),
        host_demand_cpus: n1.host_demand_cpus.max(n2.host_demand_cpus),
    }
}

/// Predicts what `plan` does to the host of `inp`.
pub fn predict(inp: &PredictInput, plan: &Plan) -> Prediction {
    let now = Layout::current(inp.host, inp.autogroups);
    let next = now.after(plan);
    let vms = judged(inp.host, plan);
    let (cur_runs, plan_runs) = rayon::join(
        || simulate_layout(inp, &now, &SEEDS, &vms),
        || simulate_layout(inp, &next, &SEEDS, &vms),
    );
    let paired: Vec<(Measures, Measures)> = cur_runs
        .iter()
        .copied()
        .zip(plan_runs.iter().copied())
        .collect();
    let (current, n1) = mean_and_noise(&cur_runs);
    let (planned, n2) = mean_and_noise(&plan_runs);
    let noise = larger_noise(&n1, &n2);
    let change = if current.throughput_cpus > 1e-9 {
        100.0 * (planned.throughput_cpus / current.throughput_cpus - 1.0)
    } else {
        0.0
    };
    Prediction {
        worse: worse(&current, &planned, &noise, &paired),
        current,
        planned,
        noise,
        seeds: SEEDS.to_vec(),
        history_s: inp.demand.span_s(),
        throughput_change_pct: change,
        vms,
        host_work: host_work_entries(inp, &now),
    }
}

#[cfg(test)]
#[path = "predict_tests.rs"]
mod tests;
