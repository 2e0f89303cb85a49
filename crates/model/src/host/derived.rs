//! Host-side steal: for every vCPU thread the run-queue wait between two
//! readings (exactly the steal its guest is told about), its run time, VM
//! totals, and the hypervisor-level split into busy steal (no CPU was idle:
//! only moving VMs away helps) and idle steal (CPUs sat idle while vCPUs
//! waited: scheduler, cgroup or placement; fixable in software).

use super::attribution::{attribute, AttributionStatus, CulpritShare, WaitEpisodes};
use super::discovery::VmKind;
use super::host_work::{host_work, HostWork};
use super::kvm::{deltas, KvmDelta};
use super::observation::{HostObservation, VmObs};
use crate::cputime::IntervalDelta;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use stealscope_readers::kvm_exits::{ExitCounts, ExitSample};
use stealscope_who::Charge;

#[derive(Debug, Clone, Serialize)]
pub struct VcpuSteal {
    pub index: u32,
    pub tid: u32,
    /// Run-queue wait as % of wall time.
    pub host_steal_pct: f64,
    /// Run time as % of wall time.
    pub util_pct: f64,
    pub cpus_allowed: Option<Vec<u32>>,
    /// Who ran while it waited (attribution; empty without a collector).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wait_by: Vec<Charge>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_episodes: Option<WaitEpisodes>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OtherThread {
    pub tid: u32,
    pub comm: String,
    pub role: &'static str,
    pub util_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VmSteal {
    pub name: String,
    pub pid: u32,
    pub kind: &'static str,
    pub manager: Option<String>,
    pub vcpus: Vec<VcpuSteal>,
    pub other_tids: Vec<u32>,
    pub others: Vec<OtherThread>,
    /// Mean over vCPUs.
    pub steal_pct: f64,
    pub util_pct: f64,
    /// Where the vCPU -> thread mapping came from ("qmp", "kvm-debugfs",
    /// "thread-name", "libvirt-cgroup", "none").
    pub vcpu_source: &'static str,
    /// The QMP socket that answered for this VM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qmp_socket: Option<String>,
    /// KVM counter changes over the interval, when a source has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm: Option<VmKvm>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VmKvm {
    /// "kvm debugfs", "binary stats fd" or "QMP query-stats".
    pub source: &'static str,
    /// Counter deltas over the interval (exits, halt_exits, ...).
    pub interval: BTreeMap<String, u64>,
}

/// kvm:kvm_exit counts of one VM in the sample.
#[derive(Debug, Clone, Serialize)]
pub struct VmExits {
    pub name: String,
    pub pid: u32,
    pub exits: u64,
    pub exits_per_s: f64,
    /// Exit reason -> count, as the tracepoint names them.
    pub reasons: BTreeMap<String, u64>,
}

/// The kvm:kvm_exit sample by VM.
#[derive(Debug, Clone, Serialize)]
pub struct ExitsByVm {
    pub duration_s: f64,
    pub events: u64,
    pub lost: u64,
    pub unparsed: u64,
    pub vms: Vec<VmExits>,
    /// Exits of threads that belong to no VM found (another VMM).
    pub other_exits: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HypervisorSplit {
    /// Sum of vCPU run-queue wait, CPU-seconds.
    pub vcpu_wait_s: f64,
    /// Host CPU idle time in the same interval, CPU-seconds.
    pub host_idle_s: f64,
    /// Wait that coincided with idle CPUs (could have run: fixable).
    pub idle_steal_s: f64,
    /// Wait while no CPU was idle (host oversubscribed).
    pub busy_steal_s: f64,
}

impl HypervisorSplit {
    pub fn idle_share(&self) -> Option<f64> {
        (self.vcpu_wait_s > 0.0).then(|| self.idle_steal_s / self.vcpu_wait_s)
    }
    pub fn busy_share(&self) -> Option<f64> {
        (self.vcpu_wait_s > 0.0).then(|| self.busy_steal_s / self.vcpu_wait_s)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct HostModel {
    pub vms: Vec<VmSteal>,
    pub split: HypervisorSplit,
    /// KVM counter deltas per VM (debugfs, else binary statistics).
    pub kvm: Vec<KvmDelta>,
    /// The kvm:kvm_exit sample by VM, when one was taken.
    pub exits: Option<ExitsByVm>,
    /// Which route attributed vCPU wait to culprits, or why none did.
    pub attribution: AttributionStatus,
    /// Culprits of all vCPU wait, most first (empty without attribution).
    pub culprits: Vec<CulpritShare>,
    /// The host's runnable work that is not a VM's.
    pub host_work: HostWork,
    pub notes: Vec<String>,
}

fn pct(ns: u64, wall_s: f64) -> f64 {
    100.0 * ns as f64 / 1e9 / wall_s
}

fn vm_delta(a: &VmObs, b: &VmObs, wall_s: f64) -> VmSteal {
    let mut vcpus = Vec::new();
    let before: HashMap<u32, _> = a.vcpus.iter().map(|(_, t)| (t.tid, t)).collect();
    for (idx, t1) in &b.vcpus {
        let Some(t0) = before.get(&t1.tid) else {
            continue;
        };
        let (Some(s0), Some(s1)) = (t0.sched, t1.sched) else {
            continue;
        };
        vcpus.push(VcpuSteal {
            index: *idx,
            tid: t1.tid,
            // Saturating: a thread id reused by a new thread restarts at 0.
            host_steal_pct: pct(s1.wait_ns.saturating_sub(s0.wait_ns), wall_s),
            util_pct: pct(s1.run_ns.saturating_sub(s0.run_ns), wall_s),
            cpus_allowed: t1.cpus_allowed.clone(),
            wait_by: Vec::new(),
            wait_episodes: None,
        });
    }
    let others = b
        .others
        .iter()
        .map(|t| {
            let before = a
                .others
                .iter()
                .find(|o| o.tid == t.tid)
                .and_then(|o| o.sched);
            OtherThread {
                tid: t.tid,
                comm: t.comm.clone(),
                role: match t.role {
                    super::discovery::ThreadRole::Io => "io",
                    _ => "emulator",
                },
                util_pct: before
                    .zip(t.sched)
                    .map(|(x, y)| pct(y.run_ns.saturating_sub(x.run_ns), wall_s)),
            }
        })
        .collect::<Vec<_>>();
    let n = vcpus.len().max(1) as f64;
    VmSteal {
        name: b.name.clone(),
        pid: b.pid,
        kind: b.kind.as_str(),
        manager: b.manager.clone(),
        steal_pct: vcpus.iter().map(|v| v.host_steal_pct).sum::<f64>() / n,
        util_pct: vcpus.iter().map(|v| v.util_pct).sum::<f64>() / n,
        other_tids: others.iter().map(|o| o.tid).collect(),
        others,
        vcpus,
        vcpu_source: b.vcpu_source.as_str(),
        qmp_socket: b.qmp_socket.clone(),
        kvm: None,
    }
}

fn exits_by_vm(c: &ExitCounts, vms: &[VmObs]) -> ExitsByVm {
    let owner = |tid: u32| {
        vms.iter().position(|v| {
            v.pid == tid
                || v.vcpus.iter().any(|(_, t)| t.tid == tid)
                || v.others.iter().any(|t| t.tid == tid)
        })
    };
    let mut per: BTreeMap<usize, BTreeMap<String, u64>> = BTreeMap::new();
    let mut other = 0;
    for (tid, reasons) in &c.by_tid {
        match owner(*tid) {
            Some(i) => {
                let m = per.entry(i).or_default();
                for (r, n) in reasons {
                    *m.entry(r.clone()).or_default() += n;
                }
            }
            None => other += reasons.values().sum::<u64>(),
        }
    }
    let dur = c.duration_s.max(1e-9);
    ExitsByVm {
        duration_s: c.duration_s,
        events: c.events,
        lost: c.lost,
        unparsed: c.unparsed,
        vms: per
            .into_iter()
            .map(|(i, reasons)| {
                let exits = reasons.values().sum();
                VmExits {
                    name: vms[i].name.clone(),
                    pid: vms[i].pid,
                    exits,
                    exits_per_s: exits as f64 / dur,
                    reasons,
                }
            })
            .collect(),
        other_exits: other,
    }
}

/// `interval` is the host's own /proc/stat delta (its idle time).
pub fn host_model(
    t0: &HostObservation,
    t1: &HostObservation,
    interval: &IntervalDelta,
) -> HostModel {
    let wall_s = interval.wall_s;
    let mut m = HostModel::default();
    if wall_s <= 0.0 {
        return m;
    }
    for b in &t1.vms {
        match t0.vms.iter().find(|a| a.pid == b.pid && a.name == b.name) {
            Some(a) => m.vms.push(vm_delta(a, b, wall_s)),
            None => m.notes.push(format!(
                "VM {} (pid {}) started during the interval; measured from the next run",
                b.name, b.pid
            )),
        }
    }
    // VMs present at t0 only exited mid-interval: dropped quietly, by design.
    let wait: f64 = m
        .vms
        .iter()
        .flat_map(|v| &v.vcpus)
        .map(|c| c.host_steal_pct / 100.0 * wall_s)
        .sum();
    let idle: f64 = interval.cpus.iter().map(|c| c.secs.idle_all()).sum();
    let idle_steal = wait.min(idle);
    m.split = HypervisorSplit {
        vcpu_wait_s: wait,
        host_idle_s: idle,
        idle_steal_s: idle_steal,
        busy_steal_s: wait - idle_steal,
    };
    if t1.vms.iter().any(|v| v.kind == VmKind::Qemu) {
        m.notes.push("a QEMU VM has unnamed vCPU threads (no -name ...,debug-threads=on), no KVM debugfs and no QMP socket: its vCPUs cannot be told apart".into());
    }
    m.kvm = deltas(
        (t0.kvm.as_deref(), t1.kvm.as_deref()),
        (&t0.kvm_binary, &t1.kvm_binary),
    );
    for vm in &mut m.vms {
        if let Some(d) = m.kvm.iter().find(|d| d.pid == vm.pid) {
            vm.kvm = Some(VmKvm {
                source: d.source,
                interval: d.counters.clone(),
            });
        }
    }
    if let Some(ExitSample::Sampled(c)) = &t1.exit_sample {
        m.exits = Some(exits_by_vm(c, &t1.vms));
    }
    m.host_work = host_work(t0, t1, wall_s);
    if t0.procs.is_empty() && !t1.vms.is_empty() {
        m.notes.push(
            "host work: not measured: no VMM ran at the start, so no other \
             process was read then"
                .into(),
        );
    }
    let mut a = attribute(t0, t1);
    for c in m.vms.iter_mut().flat_map(|v| v.vcpus.iter_mut()) {
        if let Some((by, ep)) = a.by_tid.remove(&c.tid) {
            c.wait_by = by;
            c.wait_episodes = Some(ep);
        }
    }
    if !t1.vms.is_empty() && !a.status.available() {
        m.notes.push(format!(
            "attribution: none ({}): who ran while vCPUs waited is estimated from run times",
            a.status.reason
        ));
    }
    if let Some(own) = m.host_work.own.as_mut() {
        own.vcpu_wait_s = a.status.available().then_some(a.own_wait_s);
    }
    m.attribution = a.status;
    m.culprits = a.culprits;
    m
}
