//! Placement policies acting on the simulated host, as they would on a real
//! one: they see measured demand (run plus run-queue wait since their last
//! pass) and change affinity, cpu groups, weights and memory.
//!
//! - `none`: the kernel alone.
//! - `numad`: numad's rule (`stealscope_placement::numad`), every 15 s: each
//!   VM bound to one node, its memory moved there.
//! - `stealscope`: `stealscope_placement::plan`, the code of `place`, every
//!   `interval_s`, trimmed as `place` trims it to the largest part the
//!   prediction does not call worse (a [`Trim`]), applied the way `place
//!   apply` does.

use crate::cpuset::CpuSet;
use crate::host::{Host, CGROUP_MOUNT};
use crate::policy_samples::{Samples, KEEP_S};
use crate::scenario::PolicyKind;
use std::collections::BTreeMap;
use stealscope_placement::action::{Action, CgroupRef, Knob};
use stealscope_placement::input::{
    CpuController, HostWork, NodeInput, ThreadInput, Topology, VmInput,
};
use stealscope_placement::{numad, plan, Config, History, HostInput, Plan};

const GIB: f64 = (1u64 << 30) as f64;
/// numad's default interval between passes (numad -i 15).
const NUMAD_INTERVAL_S: f64 = 15.0;

/// What a pass does to the planner's plan before applying it: `place`'s
/// choice of the largest part not predicted worse (`choose::in_sim`). The
/// prediction runs the engine, so the engine's caller passes it in.
pub type Trim = fn(&Host, &Samples, &HostInput, Plan) -> Plan;

#[derive(Debug, Clone)]
pub struct Policy {
    pub kind: PolicyKind,
    pub cfg: Config,
    history: History,
    pub next_pass_s: f64,
    /// Per task: run + wait and time since the last pass (the measured demand).
    demand_s: Vec<f64>,
    since_s: Vec<f64>,
    /// Plan warnings and refusals, once each.
    pub warnings: Vec<String>,
    pub actions: usize,
    /// Placement changes: a VM whose CPUs or memory node a pass changed
    /// counts once per pass, however many threads and knobs it took (the
    /// measure compared between policies; `actions` counts knob writes).
    pub placement_changes: usize,
    pub passes: usize,
    /// The last pass changed nothing: the next one is needed only when the
    /// host changes or a held-back move becomes due.
    pub idle_until_change: bool,
    /// Demand samples for the prediction (stealscope only).
    samples: Samples,
    /// The changes of the last plan the prediction trimmed to nothing, and
    /// when (see `Policy::stealscope`).
    trimmed_away: Option<(Vec<Action>, f64)>,
    trim: Option<Trim>,
}

impl Policy {
    pub fn new(kind: PolicyKind, cfg: Config, trim: Option<Trim>) -> Policy {
        let first = match kind {
            PolicyKind::None => f64::INFINITY,
            PolicyKind::Numad => NUMAD_INTERVAL_S,
            PolicyKind::Stealscope => cfg.interval_s,
        };
        Policy {
            kind,
            cfg,
            history: History::default(),
            next_pass_s: first,
            demand_s: Vec::new(),
            since_s: Vec::new(),
            warnings: Vec::new(),
            actions: 0,
            placement_changes: 0,
            passes: 0,
            idle_until_change: false,
            samples: Samples::default(),
            trimmed_away: None,
            trim,
        }
    }

    fn interval(&self) -> f64 {
        match self.kind {
            PolicyKind::None => f64::INFINITY,
            PolicyKind::Numad => NUMAD_INTERVAL_S,
            PolicyKind::Stealscope => self.cfg.interval_s,
        }
    }

    /// Adds what each thread ran and waited over `secs` (the policy's measurement).
    pub fn observe(&mut self, h: &Host, secs: f64) {
        if self.kind == PolicyKind::None {
            return;
        }
        if self.kind == PolicyKind::Stealscope {
            self.samples.observe(h, secs);
        }
        if self.demand_s.len() < h.tasks.len() {
            self.demand_s.resize(h.tasks.len(), 0.0);
            self.since_s.resize(h.tasks.len(), 0.0);
        }
        for (i, t) in h.tasks.iter().enumerate() {
            if t.alive {
                self.demand_s[i] += (t.run + t.wait).min(1.0) * secs;
                self.since_s[i] += secs;
            }
        }
    }

    /// The host changed (a VM came or went): plan at the next pass time.
    pub fn host_changed(&mut self) {
        self.idle_until_change = false;
    }

    /// When the next pass must run (infinity: only after a change).
    pub fn due(&self) -> f64 {
        if self.idle_until_change {
            // A move held back by min_move_interval_s may become due.
            let hold = self
                .history
                .vms
                .values()
                .map(|v| v.changed_at_s + self.cfg.min_move_interval_s)
                .filter(|t| *t >= self.next_pass_s - self.interval())
                .fold(f64::INFINITY, f64::min);
            if hold.is_finite() {
                // Passes run on the interval grid.
                let k = ((hold - self.next_pass_s) / self.interval())
                    .ceil()
                    .max(0.0);
                return self.next_pass_s + k * self.interval();
            }
            return f64::INFINITY;
        }
        self.next_pass_s
    }

    /// Runs a pass at `now` if one is due; returns how many changes it made.
    pub fn pass(&mut self, h: &mut Host, now: f64) -> usize {
        if now + 1e-9 < self.due() {
            return 0;
        }
        let k = ((now - self.next_pass_s) / self.interval())
            .floor()
            .max(0.0)
            + 1.0;
        self.next_pass_s += k * self.interval();
        self.passes += 1;
        let input = self.input(h);
        self.demand_s.iter_mut().for_each(|x| *x = 0.0);
        self.since_s.iter_mut().for_each(|x| *x = 0.0);
        let (n, moved) = match self.kind {
            PolicyKind::None => (0, 0),
            PolicyKind::Numad => self.numad(h, &input),
            PolicyKind::Stealscope => self.stealscope(h, &input, now),
        };
        self.actions += n;
        self.placement_changes += moved;
        // numad idles until the host changes, once every vCPU was measured
        // (a VM that arrived since the last pass had no demand yet): it
        // rebinds only VMs it finds unbound. The stealscope daemon plans
        // every interval, as demand changes: a pass that changed nothing
        // says nothing of the next one.
        let measured = input
            .vms
            .iter()
            .all(|v| v.vcpus.iter().all(|(_, t)| t.util.is_some()));
        self.idle_until_change = n == 0 && measured && self.kind == PolicyKind::Numad;
        n
    }

    /// Binds each VM not yet bound to one node (numad rebinds a process
    /// only when it first finds it unbound), and moves its memory there.
    /// Returns the knob writes and the VMs re-placed.
    fn numad(&mut self, h: &mut Host, input: &HostInput) -> (usize, usize) {
        let choice = numad::choose_nodes(input);
        let mut changes = 0;
        let mut moved = 0;
        for (v, node) in input.vms.iter().zip(choice) {
            let (Some(node), Some(vm)) = (node, vm_of(h, v.pid)) else {
                continue;
            };
            let bound = h.vms[vm].tasks.iter().all(|&i| {
                let mut nodes = h.tasks[i].allowed.iter().map(|c| h.node_of[c]);
                let first = nodes.next();
                nodes.all(|n| Some(n) == first)
            });
            if bound {
                continue;
            }
            let cpus: Vec<u32> = h.nodes[node as usize].iter().map(|c| *c as u32).collect();
            moved += 1;
            for i in h.vms[vm].tasks.clone() {
                changes += set_affinity(h, i, &cpus) as usize;
            }
            let away = h.vms[vm].mem_total() - h.vms[vm].mem[node as usize];
            if away > 1e-6 {
                h.vms[vm].moving = Some((node as usize, away));
                changes += 1;
            }
        }
        (changes, moved)
    }

    /// Plans and applies; returns the knob writes and the VMs re-placed.
    fn stealscope(&mut self, h: &mut Host, input: &HostInput, now: f64) -> (usize, usize) {
        let p = plan(input, &self.cfg, &self.history, now);
        if p.refused.is_some() {
            self.note(p.refused.iter());
            return (0, 0);
        }
        let planned = p.clone();
        let p = self.never_worse(h, input, p, now);
        // After the prediction: what it left out, and why, is said too.
        self.note(p.warnings.iter());
        let mut changes = 0;
        let mut moved = std::collections::BTreeSet::new();
        for a in &p.actions {
            if apply(h, a) {
                changes += 1;
                if matches!(
                    a,
                    Action::Affinity { vcpu: Some(_), .. } | Action::MigrateMemory { .. }
                ) {
                    moved.insert(a.pid());
                }
            }
        }
        planned.record_in(&mut self.history, &p.actions, now);
        (changes, moved.len())
    }

    /// Keeps `ws`, once per kind: the same warning with other numbers is
    /// not news.
    fn note<'a>(&mut self, ws: impl Iterator<Item = &'a String>) {
        let shape = |w: &str| w.replace(|c: char| c.is_ascii_digit() || c == '.', "");
        for w in ws {
            if !self.warnings.iter().any(|x| shape(x) == shape(w)) {
                self.warnings.push(w.clone());
            }
        }
    }

    /// `p`, or the largest part of it the prediction from the samples
    /// does not call worse, as `place` chooses. The same changes trimmed to
    /// nothing less than the samples' window ago are not predicted again
    /// (most of the samples are the same; each prediction replays several
    /// short simulations): nothing is changed.
    fn never_worse(&mut self, h: &Host, input: &HostInput, p: Plan, now: f64) -> Plan {
        let Some(trim) = self.trim.filter(|_| self.cfg.never_worse) else {
            return p;
        };
        if p.actions.is_empty() {
            return p;
        }
        let changes: Vec<Action> = p.actions.iter().map(Action::change).collect();
        if let Some((last, at)) = &self.trimmed_away {
            if *last == changes && now - at < KEEP_S {
                return Plan {
                    actions: Vec::new(),
                    ..p
                };
            }
        }
        let kept = trim(h, &self.samples, input, p);
        self.trimmed_away = kept.actions.is_empty().then_some((changes, now));
        kept
    }

    /// What `place` would read on this host: topology, memory per node,
    /// each VM's threads with measured demand, affinity, group and weight.
    pub fn input(&self, h: &Host) -> HostInput {
        host_input(h, |i| {
            let since = self.since_s.get(i).copied().unwrap_or(0.0);
            (since > 0.0).then(|| self.demand_s[i] / since)
        })
    }
}

/// The planner's view of `h`, with `util(task)` as each vCPU's demand.
pub fn host_input(h: &Host, util: impl Fn(usize) -> Option<f64>) -> HostInput {
    let per = h.ncpu / h.nodes.len();
    let mut cores = Vec::new();
    for node in h.nodes.iter() {
        if h.smt && per >= 2 {
            for k in 0..per / 2 {
                cores.push(vec![node[k] as u32, node[k + per / 2] as u32]);
            }
        } else {
            cores.extend(node.iter().map(|c| vec![*c as u32]));
        }
    }
    let mut used = vec![0.0; h.nodes.len()];
    for v in h.vms.iter().filter(|v| v.alive) {
        for (n, m) in v.mem.iter().enumerate() {
            used[n] += m;
        }
    }
    let nodes = h
        .nodes
        .iter()
        .enumerate()
        .map(|(n, cpus)| NodeInput {
            id: n as u32,
            cpus: cpus.iter().map(|c| *c as u32).collect(),
            mem_total_bytes: Some((h.mem_per_node_gib * GIB) as u64),
            mem_free_bytes: Some(((h.mem_per_node_gib - used[n]).max(0.0) * GIB) as u64),
        })
        .collect();
    let ctl = CpuController {
        v2: false,
        mount: CGROUP_MOUNT.into(),
    };
    let vms = h
        .vms
        .iter()
        .filter(|v| v.alive)
        .map(|v| {
            let group_dir = v
                .group
                .map_or(CGROUP_MOUNT.to_string(), |g| h.groups[g].dir.clone());
            VmInput {
                pid: v.pid,
                name: v.name.clone(),
                knob: Knob::Direct,
                vcpus: v
                    .tasks
                    .iter()
                    .map(|&i| {
                        let t = &h.tasks[i];
                        (
                            t.vcpu,
                            ThreadInput {
                                tid: t.tid,
                                util: util(i),
                                cpus_allowed: t.allowed.to_vec(),
                            },
                        )
                    })
                    .collect(),
                others: Vec::new(),
                mem_by_node: Some(
                    v.mem
                        .iter()
                        .enumerate()
                        .map(|(n, m)| (n as u32, (m * GIB) as u64))
                        .collect::<BTreeMap<_, _>>(),
                ),
                mem_policy: None,
                cpu_group: Some(CgroupRef {
                    v2: false,
                    dir: group_dir,
                }),
                cpu_weight: Some(match v.group {
                    Some(g) => (h.groups[g].shares * 1024.0).round() as u64,
                    None => 1024,
                }),
                autogroup: None,
                wait: None,
            }
        })
        .collect();
    HostInput {
        topology: Topology {
            cpus: (0..h.ncpu as u32).collect(),
            cores,
            nodes,
        },
        swap_total_bytes: Some(0),
        swap_free_bytes: Some(0),
        numa_balancing: Some(h.numa_balancing as u32),
        numad_running: false,
        cpu_controller: Some(ctl),
        vms,
        shared_group_weight: None,
        host_work: host_work(h, &util),
    }
}

/// The host's other work as `place` measures it on a real host: each
/// background thread's demand where its affinity lets it run. QEMU's main
/// loops belong to their VMs (the planner places them with the VM).
fn host_work(h: &Host, util: &impl Fn(usize) -> Option<f64>) -> HostWork {
    let online: Vec<u32> = (0..h.ncpu as u32).collect();
    let mut w = HostWork::default();
    for (i, t) in h.live_tasks().filter(|(_, t)| t.vm.is_none()) {
        let cpus: Vec<u32> = t.allowed.iter().map(|c| c as u32).collect();
        // Not measured yet (before the first pass): what it asks for now.
        let demand = util(i).unwrap_or(t.wants).clamp(0.0, 1.0);
        w.add(demand, &cpus, &online);
    }
    w
}

fn vm_of(h: &Host, pid: u32) -> Option<usize> {
    let i = pid.checked_sub(1000)? as usize;
    (i < h.vms.len() && h.vms[i].alive).then_some(i)
}

fn task_of(h: &Host, pid: u32, tid: u32) -> Option<usize> {
    let vm = vm_of(h, pid)?;
    h.vms[vm]
        .tasks
        .iter()
        .copied()
        .find(|&i| h.tasks[i].tid == tid)
}

/// sched_setaffinity: a thread outside its new set moves to the allowed
/// CPU with the fewest threads.
fn set_affinity(h: &mut Host, i: usize, cpus: &[u32]) -> bool {
    let set = CpuSet::from_cpus(cpus);
    if h.tasks[i].allowed == set || set.is_empty() {
        return false;
    }
    if !set.contains(h.tasks[i].cpu) {
        let mut count = vec![0usize; h.ncpu];
        for (_, t) in h.live_tasks() {
            count[t.cpu] += 1;
        }
        if let Some(c) = set
            .iter()
            .filter(|c| *c < h.ncpu)
            .min_by_key(|c| (count[*c], *c))
        {
            h.tasks[i].cpu = c;
        }
    }
    h.tasks[i].allowed = set;
    true
}

/// Sets group `g`'s weight (nice-0 units); true when that changed it.
fn set_shares(h: &mut Host, g: usize, shares: f64) -> bool {
    let changed = h.groups[g].shares != shares;
    h.groups[g].shares = shares;
    changed
}

/// Applies one planner action to the simulated host, as the actuators
/// would to a real one.
fn apply(h: &mut Host, a: &Action) -> bool {
    match a {
        Action::Affinity {
            pid,
            tid,
            vcpu: Some(_),
            cpus,
            ..
        } => match task_of(h, *pid, *tid) {
            Some(i) => set_affinity(h, i, cpus),
            None => false,
        },
        Action::Affinity { .. } => false,
        Action::JoinGroup { pid, group, .. } => {
            let Some(vm) = vm_of(h, *pid) else {
                return false;
            };
            let g = h.group_named(&group.dir, 1.0);
            h.vms[vm].group = Some(g);
            for i in h.vms[vm].threads().collect::<Vec<_>>() {
                h.tasks[i].group = Some(g);
            }
            h.refresh_per_host_weight();
            true
        }
        Action::CpuWeight { group, value, .. } => {
            let g = h.group_named(&group.dir, 1.0);
            set_shares(h, g, *value as f64 / 1024.0)
        }
        // A simulated VM's own group stands for its autogroup.
        Action::AutogroupNice { pid, value, .. } => {
            match vm_of(h, *pid).and_then(|vm| h.vms[vm].group) {
                Some(g) => set_shares(
                    h,
                    g,
                    stealscope_readers::autogroup::nice_weight(*value) / 1024.0,
                ),
                None => false,
            }
        }
        Action::MigrateMemory {
            pid,
            to_node,
            bytes,
            ..
        } => match vm_of(h, *pid) {
            // Already on its way there (the planner sees what is left).
            Some(vm)
                if h.vms[vm]
                    .moving
                    .is_some_and(|(n, _)| n == *to_node as usize) =>
            {
                false
            }
            Some(vm) => {
                h.vms[vm].moving = Some((*to_node as usize, *bytes as f64 / GIB));
                true
            }
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use crate::host::VmThreads;
    use crate::scenario::Cgroups;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Two nodes of 2 CPUs, one busy 2-vCPU VM allowed everywhere with its
    /// memory spread: the planner binds it to a node.
    fn spread_vm_host() -> Host {
        let mut h = Host::new(4, 2, false, 16.0, Cgroups::PerVm);
        let threads = VmThreads {
            emulator: None,
            vcpu_wakeups_per_s: 0.0,
        };
        h.add_vm(
            "a".into(),
            2,
            Demand::Busy,
            1,
            vec![1.0, 1.0],
            CpuSet::all(4),
            None,
            false,
            threads,
            0.0,
            &mut |_, _| 0,
        );
        // Measured at half a CPU a vCPU: the planner leaves a nearly idle
        // fresh VM unbound, and spills one that fills its node.
        h.tasks.iter_mut().for_each(|t| t.run = 0.5);
        h
    }

    static PREDICTED: AtomicUsize = AtomicUsize::new(0);

    /// A prediction that calls every plan worse: nothing is applied.
    fn refuse_all(_: &Host, _: &Samples, _: &HostInput, p: Plan) -> Plan {
        PREDICTED.fetch_add(1, Ordering::SeqCst);
        Plan {
            actions: Vec::new(),
            ..p
        }
    }

    #[test]
    fn stealscope_plans_every_interval_and_predicts_a_refused_plan_once_a_window() {
        let mut h = spread_vm_host();
        let mut p = Policy::new(PolicyKind::Stealscope, Config::default(), Some(refuse_all));
        let plan_now = |p: &Policy, h: &Host, t: f64| {
            plan(&p.input(h), &p.cfg, &History::default(), t)
                .actions
                .len()
        };
        p.observe(&h, 10.0);
        assert!(plan_now(&p, &h, 10.0) > 0, "the planner binds the VM");
        assert_eq!(p.pass(&mut h, 10.0), 0);
        assert_eq!(PREDICTED.load(Ordering::SeqCst), 1);
        // Nothing changed, yet the next pass is the next interval: demand
        // may change without the host changing.
        assert_eq!(p.due(), 20.0);
        // The same plan within the samples' window: not predicted again.
        p.observe(&h, 10.0);
        assert_eq!(p.pass(&mut h, 20.0), 0);
        assert_eq!(PREDICTED.load(Ordering::SeqCst), 1);
        assert_eq!(p.due(), 30.0);
        // A window later it is.
        p.observe(&h, 60.0);
        assert_eq!(p.pass(&mut h, 80.0), 0);
        assert_eq!(PREDICTED.load(Ordering::SeqCst), 2);
        assert_eq!(h.tasks.iter().filter(|t| t.allowed.len() < 4).count(), 0);
    }

    #[test]
    fn numad_idles_once_every_vm_is_bound() {
        let mut h = spread_vm_host();
        let mut p = Policy::new(PolicyKind::Numad, Config::default(), None);
        p.observe(&h, 15.0);
        assert!(p.pass(&mut h, 15.0) > 0);
        assert_eq!(p.due(), 30.0);
        p.observe(&h, 15.0);
        assert_eq!(p.pass(&mut h, 30.0), 0);
        assert_eq!(p.due(), f64::INFINITY);
    }
}
