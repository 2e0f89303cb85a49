//! Per-VM and per-vCPU rows for a live view on a host (`top`): each vCPU's
//! run-queue wait and run time between two host scans (% of wall time), the
//! CPU it last ran on and its affinity, a wait history per VM and per vCPU
//! (one value per scan), and who ran while it waited, from two readings of
//! the scheduler-event collector taken with the scans
//! ([`vcpu_wait_by`]). Pure: the caller reads the system.

use super::attribution::{charges, classify_with, wait_by_rows, ProcNames};
use super::discovery::ThreadRole;
use super::vcpu_times::{vm_labels, ScannedVmId, ThreadSample};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use stealscope_readers::process::TaskSchedstat;
use stealscope_who::{Charge, Culprit, SchedSample};

/// Where a vCPU thread runs: the CPU it last ran on and the CPUs it may run
/// on (a cpulist, "0-3"), each None when unread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub cpu: Option<u32>,
    pub affinity: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VcpuLive {
    pub vcpu: u32,
    pub tid: u32,
    /// Run-queue wait since the previous scan, % of wall time; None until
    /// the thread was seen twice.
    pub wait_pct: Option<f64>,
    pub run_pct: Option<f64>,
    pub placement: Placement,
    /// Wait % per scan, oldest first.
    pub history: VecDeque<Option<f64>>,
    /// Who ran while it waited, most first; None without two collector
    /// readings of this thread.
    pub culprits: Option<Vec<Charge>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VmLive {
    /// The VM's label ([`vm_labels`]: the name, with the pid when two VMs
    /// share it).
    pub vm: String,
    pub pid: u32,
    /// Mean over the vCPUs measured in both scans, as [`super::VmRate`].
    pub wait_pct: Option<f64>,
    pub run_pct: Option<f64>,
    /// By vCPU index.
    pub vcpus: Vec<VcpuLive>,
    pub history: VecDeque<Option<f64>>,
    /// Its vCPUs' wait by culprit, shares of all of it.
    pub culprits: Option<Vec<Charge>>,
}

/// Each watched thread's wait between two collector readings, ns by
/// culprit, named with the VMs and threads of a host scan. Never trimmed
/// to schedstat: the aggregator handles switches the trace missed. For
/// live views and exporters alike.
pub fn vcpu_wait_by<V: ScannedVmId>(
    before: &SchedSample,
    now: &SchedSample,
    vms: &[V],
    threads: &[ThreadSample],
) -> BTreeMap<u32, BTreeMap<Culprit, u64>> {
    // Looked up once per culprit charge: sets, not scans of the lists
    // (10,000 vCPU threads made it 10^8 compares a scan).
    let vm_by_pid: HashMap<u32, &V> = vms.iter().map(|v| (v.pid(), v)).collect();
    let vcpu_tids: HashSet<u32> = threads
        .iter()
        .filter(|t| matches!(t.role, ThreadRole::Vcpu(_)))
        .map(|t| t.tid)
        .collect();
    let vm_of = |tgid: u32, tid: u32| {
        vm_by_pid
            .get(&tgid)
            .map(|v| (v.name(), v.pid(), vcpu_tids.contains(&tid)))
    };
    let names = ProcNames::live(now);
    let mut out = BTreeMap::new();
    for (tid, w1) in &now.threads {
        let Some(w0) = before.threads.get(tid) else {
            continue;
        };
        let w = w1.charged_since(w0);
        let by = charges(&w, |c| classify_with(c, vm_of(c.tgid, c.tid), &names));
        out.insert(*tid, by);
    }
    out
}

/// The previous scan.
#[derive(Debug, Clone)]
struct Prev {
    t_ns: u64,
    sched: BTreeMap<u32, TaskSchedstat>,
    collector: Option<SchedSample>,
}

/// Keeps the previous scan and the histories; [`LiveHost::push`] each scan.
#[derive(Debug, Clone)]
pub struct LiveHost {
    keep: usize,
    prev: Option<Prev>,
    rows: Vec<VmLive>,
}

fn pct(delta_ns: u64, wall_ns: u64) -> f64 {
    100.0 * delta_ns as f64 / wall_ns as f64
}

fn push_capped(h: &mut VecDeque<Option<f64>>, v: Option<f64>, keep: usize) {
    if h.len() == keep {
        h.pop_front();
    }
    h.push_back(v);
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = v.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / n as f64)
}

impl LiveHost {
    /// Keeps `keep` scans of history.
    pub fn new(keep: usize) -> LiveHost {
        LiveHost {
            keep: keep.max(1),
            prev: None,
            rows: Vec::new(),
        }
    }

    /// The rows of the latest scan, VMs by label.
    pub fn rows(&self) -> &[VmLive] {
        &self.rows
    }

    /// Adds a scan taken at `t_ns` (CLOCK_MONOTONIC): the VMs, every thread
    /// read, where each vCPU thread runs, and the collector's reading taken
    /// with the scan (None when it is not running).
    pub fn push<V: ScannedVmId>(
        &mut self,
        t_ns: u64,
        vms: &[V],
        samples: &[ThreadSample],
        placement: impl Fn(u32) -> Placement,
        collector: Option<&SchedSample>,
    ) {
        let now: BTreeMap<u32, TaskSchedstat> = samples.iter().map(|s| (s.tid, s.sched)).collect();
        let prev = self.prev.as_ref().filter(|p| t_ns > p.t_ns);
        let wall_ns = prev.map(|p| t_ns - p.t_ns);
        // A thread's schedstat delta; None when unseen before or gone back
        // (a thread id reused).
        let delta = |tid: u32| -> Option<(u64, u64)> {
            let (p, n) = (prev?.sched.get(&tid)?, now.get(&tid)?);
            (n.wait_ns >= p.wait_ns && n.run_ns >= p.run_ns)
                .then(|| (n.wait_ns - p.wait_ns, n.run_ns - p.run_ns))
        };
        let blame = match (prev.and_then(|p| p.collector.as_ref()), collector) {
            (Some(a), Some(b)) => Some(vcpu_wait_by(a, b, vms, samples)),
            _ => None,
        };
        let labels = vm_labels(vms);
        let (mut old, mut old_vm) = take_histories(&mut self.rows);
        for vm in vms {
            let mut vcpus: Vec<VcpuLive> = samples
                .iter()
                .filter(|s| s.pid == vm.pid())
                .filter_map(|s| match s.role {
                    ThreadRole::Vcpu(i) => Some((i, s.tid)),
                    _ => None,
                })
                .map(|(vcpu, tid)| {
                    // A thread cannot wait and run longer than the time that
                    // passed: when it seems to, its reads were further apart
                    // than the stamps (a stalled scan), so that is the span.
                    let d = delta(tid)
                        .zip(wall_ns)
                        .filter(|(_, w)| *w > 0)
                        .map(|((w, r), wall)| (w, r, wall.max(w + r)));
                    let wait_pct = d.map(|(w, _, wall)| pct(w, wall));
                    let run_pct = d.map(|(_, r, wall)| pct(r, wall));
                    let mut history = old.remove(&(vm.pid(), tid)).unwrap_or_default();
                    push_capped(&mut history, wait_pct, self.keep);
                    let culprits = blame.as_ref().and_then(|b| b.get(&tid)).map(wait_by_rows);
                    VcpuLive {
                        vcpu,
                        tid,
                        wait_pct,
                        run_pct,
                        placement: placement(tid),
                        history,
                        culprits,
                    }
                })
                .collect();
            if vcpus.is_empty() {
                continue;
            }
            vcpus.sort_by_key(|c| (c.vcpu, c.tid));
            let wait_pct = mean(vcpus.iter().filter_map(|c| c.wait_pct));
            let run_pct = mean(vcpus.iter().filter_map(|c| c.run_pct));
            let mut history = old_vm.remove(&vm.pid()).unwrap_or_default();
            push_capped(&mut history, wait_pct, self.keep);
            let culprits = blame.as_ref().and_then(|b| vm_wait_by(b, &vcpus));
            self.rows.push(VmLive {
                vm: labels
                    .get(&vm.pid())
                    .cloned()
                    .unwrap_or_else(|| vm.name().to_string()),
                pid: vm.pid(),
                wait_pct,
                run_pct,
                vcpus,
                history,
                culprits,
            });
        }
        self.rows.sort_by(|a, b| a.vm.cmp(&b.vm));
        self.prev = Some(Prev {
            t_ns,
            sched: now,
            collector: collector.cloned(),
        });
    }
}

/// Takes the rows' wait histories (by (VM pid, vCPU tid) and by VM pid),
/// for the next rows to carry on.
#[allow(clippy::type_complexity)]
fn take_histories(
    rows: &mut Vec<VmLive>,
) -> (
    BTreeMap<(u32, u32), VecDeque<Option<f64>>>,
    BTreeMap<u32, VecDeque<Option<f64>>>,
) {
    let mut old = BTreeMap::new();
    let mut old_vm = BTreeMap::new();
    for r in std::mem::take(rows) {
        for c in r.vcpus {
            old.insert((r.pid, c.tid), c.history);
        }
        old_vm.insert(r.pid, r.history);
    }
    (old, old_vm)
}

/// A VM's wait by culprit: its vCPUs' summed (None when no vCPU of it
/// has a reading).
fn vm_wait_by(
    blame: &BTreeMap<u32, BTreeMap<Culprit, u64>>,
    vcpus: &[VcpuLive],
) -> Option<Vec<Charge>> {
    let mut sum: BTreeMap<Culprit, u64> = BTreeMap::new();
    let mut any = false;
    for by in vcpus.iter().filter_map(|c| blame.get(&c.tid)) {
        any = true;
        for (k, ns) in by {
            *sum.entry(k.clone()).or_default() += ns;
        }
    }
    any.then(|| wait_by_rows(&sum))
}

#[cfg(test)]
#[path = "live_rows_tests.rs"]
mod tests;
