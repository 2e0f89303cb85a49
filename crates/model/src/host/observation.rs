//! Reads every VM on a host from one side of an interval: the VMM process,
//! its vCPU and other threads with run/wait time, affinity and cgroups, plus
//! host facts the rules need (NUMA nodes, balancing, KVM debugfs), and what
//! the live capture asked QMP, KVM stats fds and kvm:kvm_exit (host::stored).

use super::discovery::{
    libvirt_scope, libvirt_vcpu_cgroup, thread_role, vm_name, vmm_comm, vmm_of, weight_group_path,
    ThreadRole, VmKind,
};
use super::kvm::KvmCounters;
use super::sched_store::{StoredSched, SCHED_FILE};
use super::starve::{StoredStarve, STARVE_FILE};
use super::stored::{
    QmpRecord, AFFINITY, EXIT_SAMPLE, KVM_STATS_DIR, NOTES, OWN_PID, QMP_DIR, READ_TIMES,
};
use crate::side::Side;
use serde::Serialize;
use std::collections::BTreeMap;
use stealscope_readers::autogroup::{self, Autogroup};
use stealscope_readers::cgroupfs::{self, CgroupMounts, CpuWeight};
use stealscope_readers::kvm_debugfs::{self, KvmVm};
use stealscope_readers::kvm_exits::ExitSample;
use stealscope_readers::kvm_stats;
use stealscope_readers::mempolicy::Confinement;
use stealscope_readers::numa::{self, Node};
use stealscope_readers::process::{self as proc_, CgroupMembership, TaskSchedstat, TaskStatus};
use stealscope_readers::{ReadError, Source};

#[derive(Debug, Clone, Serialize)]
pub struct ThreadObs {
    pub tid: u32,
    pub comm: String,
    pub role: ThreadRole,
    pub sched: Option<TaskSchedstat>,
    pub cpus_allowed: Option<Vec<u32>>,
}

/// Where a VM's vCPU index -> thread mapping came from, most authoritative first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VcpuSource {
    /// QMP query-cpus-fast "thread-id".
    Qmp,
    /// KVM debugfs vcpuN/pid.
    KvmDebugfs,
    /// Thread names ("CPU n/KVM", "fc_vcpu n").
    ThreadName,
    /// libvirt's per-vCPU cgroups (.../vcpuN).
    LibvirtCgroup,
    /// No vCPU thread identified.
    None,
}

impl VcpuSource {
    pub fn as_str(self) -> &'static str {
        match self {
            VcpuSource::Qmp => "qmp",
            VcpuSource::KvmDebugfs => "kvm-debugfs",
            VcpuSource::ThreadName => "thread-name",
            VcpuSource::LibvirtCgroup => "libvirt-cgroup",
            VcpuSource::None => "none",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct VmObs {
    pub pid: u32,
    pub name: String,
    pub kind: VmKind,
    /// The VMM's command line (QMP sockets are found in it).
    #[serde(skip)]
    pub cmdline: Vec<String>,
    pub vcpu_source: VcpuSource,
    /// The QMP socket that answered, if any.
    pub qmp_socket: Option<String>,
    /// "libvirt" when libvirt runs it (its knobs then belong to libvirt).
    pub manager: Option<String>,
    /// vCPU threads by index.
    pub vcpus: Vec<(u32, ThreadObs)>,
    pub others: Vec<ThreadObs>,
    pub cgroups: Vec<CgroupMembership>,
    /// Weight of the VM's own cpu group (the main thread's).
    pub cpu_weight: Option<(String, CpuWeight)>,
    pub status: Option<TaskStatus>,
    /// Resident memory per NUMA node, bytes (numa_maps).
    pub numa_bytes: Option<BTreeMap<u32, u64>>,
    /// Memory the VM's own NUMA policies place (numa_maps), when any does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_policy: Option<Confinement>,
    /// The VMM's autogroup (None: the root autogroup or no autogroups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autogroup: Option<Autogroup>,
}

/// A process that is not a VM, with its threads' run and wait time: the
/// host's other runnable work, which competes with vCPUs for the CPUs.
#[derive(Debug, Clone, Serialize)]
pub struct HostProc {
    pub pid: u32,
    pub comm: String,
    /// PF_KTHREAD (read at the end of the interval only).
    pub kthread: Option<bool>,
    pub threads: BTreeMap<u32, TaskSchedstat>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct HostObservation {
    pub vms: Vec<VmObs>,
    pub nodes: Vec<Node>,
    pub numa_balancing: Option<u32>,
    pub kvm: Option<Vec<KvmVm>>,
    /// KVM binary statistics by VM pid (stats fds or QMP query-stats).
    pub kvm_binary: BTreeMap<u32, KvmCounters>,
    /// Why a VM has no binary statistics, by pid.
    pub kvm_binary_problems: BTreeMap<u32, Vec<String>>,
    /// The kvm:kvm_exit sample, when the capture took one (t1).
    pub exit_sample: Option<ExitSample>,
    pub cgroup_mounts: CgroupMounts,
    /// Every other process (see [`HostProc`]).
    #[serde(skip)]
    pub procs: Vec<HostProc>,
    /// When each process's threads were read (CLOCK_MONOTONIC ns), live
    /// or from [`READ_TIMES`]: under load the walk of every process takes
    /// a second side long enough that a process read late in one and early
    /// in the other is off by a tenth of its interval (issue 28: a loop
    /// said to take 0.46 CPU that took 0.41-0.44 over any window of the
    /// interval). Empty for older snapshots.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub read_ns: BTreeMap<u32, u64>,
    /// /proc/sys/kernel/sched_autogroup_enabled (None: no autogroups).
    pub autogroup_enabled: Option<bool>,
    /// The scheduler-event collector's reading stored in this side.
    #[serde(skip)]
    pub sched: Option<StoredSched>,
    /// The pid of the stealscope that captured this side, when it said.
    #[serde(skip)]
    pub own_pid: Option<u32>,
    /// Where the largest non-VM processes may run, by pid (t1 of a live
    /// capture; empty elsewhere).
    #[serde(skip)]
    pub affinity: BTreeMap<u32, Vec<u32>>,
    /// Open waits the starvation scanner saw during the capture (end side).
    #[serde(skip)]
    pub starved: Option<StoredStarve>,
    pub notes: Vec<String>,
}

impl HostObservation {
    /// Autogroups in effect for tasks of the root cpu cgroup
    /// (kernel.sched_autogroup_enabled=1).
    pub fn autogroups_on(&self) -> bool {
        self.autogroup_enabled == Some(true)
    }
}

fn cg_path<'a>(cgs: &'a [CgroupMembership], controller: &str) -> Option<&'a str> {
    cgs.iter()
        .find(|c| c.controllers.iter().any(|x| x == controller))
        .map(|c| c.path.as_str())
}

fn cg_v2(cgs: &[CgroupMembership]) -> Option<&str> {
    cgs.iter()
        .find(|c| c.hierarchy == 0 && c.controllers.is_empty())
        .map(|c| c.path.as_str())
}

/// What other sources say of a VMM's vCPU threads.
#[derive(Clone, Copy)]
struct Known<'a> {
    kvm: Option<&'a [KvmVm]>,
    /// Thread times read before everything else (threads started since are
    /// read with the rest).
    sched: &'a BTreeMap<u32, Option<TaskSchedstat>>,
    qmp: Option<&'a QmpRecord>,
}

/// A VMM's vCPU thread ids by the sources that name them (tid -> index).
struct VcpuTids {
    qmp: BTreeMap<u32, u32>,
    kvm: BTreeMap<u32, u32>,
}

/// A VMM's threads, sorted into vCPUs and the rest.
#[derive(Default)]
struct VmThreads {
    vcpus: Vec<(u32, ThreadObs)>,
    others: Vec<ThreadObs>,
    /// The accelerator QEMU's vCPU thread names give ("KVM", "TCG").
    accel: Option<String>,
    /// Which source named each vCPU.
    by: Vec<VcpuSource>,
}

/// A thread's role and the source that decided it.
fn classify_thread(
    src: &dyn Source,
    pid: u32,
    tid: u32,
    mut role: ThreadRole,
    ids: &VcpuTids,
) -> Result<(ThreadRole, VcpuSource), ReadError> {
    // QMP's thread ids are QEMU's own word and KVM debugfs vcpuN/pid the
    // kernel's: either is authoritative over names; libvirt's vcpuN
    // cgroups come after names.
    let mut source = VcpuSource::ThreadName;
    if !ids.qmp.is_empty() {
        source = VcpuSource::Qmp;
        role = match (ids.qmp.get(&tid), role) {
            (Some(i), _) => ThreadRole::Vcpu(*i),
            (None, ThreadRole::Vcpu(_)) => ThreadRole::Emulator,
            (None, r) => r,
        };
    } else if let Some(i) = ids.kvm.get(&tid) {
        source = VcpuSource::KvmDebugfs;
        role = ThreadRole::Vcpu(*i);
    } else if role == ThreadRole::Emulator {
        if let Some(i) = proc_::task_cgroup(src, pid, tid)?
            .and_then(|c| c.iter().find_map(|m| libvirt_vcpu_cgroup(&m.path)))
        {
            source = VcpuSource::LibvirtCgroup;
            role = ThreadRole::Vcpu(i);
        }
    }
    Ok((role, source))
}

/// Reads each thread of the VMM (skipping those that exited) and sorts it
/// into vCPUs, by index, and the rest.
fn read_threads(
    src: &dyn Source,
    pid: u32,
    tids: Vec<u32>,
    ids: &VcpuTids,
    early: &BTreeMap<u32, Option<TaskSchedstat>>,
) -> Result<VmThreads, ReadError> {
    let mut out = VmThreads::default();
    for tid in tids {
        let Some(comm) = proc_::task_comm(src, pid, tid)? else {
            continue;
        };
        let (role, acc) = thread_role(&comm);
        if acc.is_some() {
            out.accel = acc.map(str::to_string);
        }
        let (role, source) = classify_thread(src, pid, tid, role, ids)?;
        if matches!(role, ThreadRole::Vcpu(_)) {
            out.by.push(source);
        }
        let sched = match early.get(&tid) {
            Some(s) => *s,
            None => proc_::task_schedstat(src, pid, tid)?,
        };
        let status = proc_::task_status(src, pid, tid)?;
        let t = ThreadObs {
            tid,
            comm,
            role,
            sched,
            cpus_allowed: status.and_then(|s| s.cpus_allowed),
        };
        match role {
            ThreadRole::Vcpu(i) => out.vcpus.push((i, t)),
            _ => out.others.push(t),
        }
    }
    out.vcpus.sort_by_key(|(i, _)| *i);
    Ok(out)
}

/// QEMU's accelerator, from its vCPU thread names, QMP or KVM's debugfs.
fn qemu_accel(
    kind: VmKind,
    threads: &VmThreads,
    qmp: Option<&QmpRecord>,
    ids: &VcpuTids,
) -> VmKind {
    match (
        kind,
        threads.accel.as_deref(),
        qmp.and_then(QmpRecord::kvm_enabled),
    ) {
        (VmKind::Qemu, Some("KVM"), _) | (VmKind::Qemu, _, Some(true)) => VmKind::QemuKvm,
        (VmKind::Qemu, Some("TCG"), _) | (VmKind::Qemu, _, Some(false)) => VmKind::QemuTcg,
        (VmKind::Qemu, _, _) if !ids.kvm.is_empty() => VmKind::QemuKvm,
        (k, _, _) => k,
    }
}

/// The most authoritative source that named any vCPU.
fn vcpu_source(by: &[VcpuSource]) -> VcpuSource {
    [
        VcpuSource::Qmp,
        VcpuSource::KvmDebugfs,
        VcpuSource::ThreadName,
        VcpuSource::LibvirtCgroup,
    ]
    .into_iter()
    .find(|s| by.contains(s))
    .unwrap_or(VcpuSource::None)
}

/// Resident bytes per node and the VM's own NUMA policy, at the end of the
/// interval only.
fn read_numa(
    src: &dyn Source,
    pid: u32,
    side: Side,
) -> (Option<BTreeMap<u32, u64>>, Option<Confinement>) {
    // numa_maps walks the VM's page tables (costly for large VMs) and the
    // rules use it at the end of the interval only.
    let numa_text = (side == Side::End)
        .then(|| {
            src.read_text(&format!("/proc/{pid}/numa_maps"))
                .ok()
                .flatten()
        })
        .flatten();
    let numa_bytes = numa_text.as_deref().map(numa::parse_numa_maps);
    let mem_policy = numa_text
        .as_deref()
        .map(Confinement::from_numa_maps)
        .filter(|c| !c.is_empty());
    (numa_bytes, mem_policy)
}

/// One VMM process; None if it exited while we read it.
fn read_vm(
    src: &dyn Source,
    pid: u32,
    kind: VmKind,
    cmdline: &[String],
    mounts: &CgroupMounts,
    known: Known<'_>,
    side: Side,
) -> Result<Option<VmObs>, ReadError> {
    let Known {
        kvm,
        qmp,
        sched: early,
    } = known;
    let Some(tids) = proc_::tids(src, pid)? else {
        return Ok(None);
    };
    let cgroups = proc_::task_cgroup(src, pid, pid)?.unwrap_or_default();
    let ids = VcpuTids {
        kvm: kvm
            .and_then(|vms| vms.iter().find(|v| v.pid == pid))
            .map(|v| v.vcpu_tids.iter().map(|(i, t)| (*t, *i)).collect())
            .unwrap_or_default(),
        qmp: qmp.map(QmpRecord::vcpu_tids).unwrap_or_default(),
    };
    let threads = read_threads(src, pid, tids, &ids, early)?;
    let kind = qemu_accel(kind, &threads, qmp, &ids);
    let paths: Vec<String> = cgroups.iter().map(|c| c.path.clone()).collect();
    let manager = paths
        .iter()
        .any(|p| libvirt_scope(p).is_some())
        .then(|| "libvirt".to_string());
    // libvirt keeps the main thread in .../libvirt/emulator (default weight);
    // the domain's weight is set on the machine scope above it.
    let v1 = cg_path(&cgroups, "cpu").map(weight_group_path);
    let v2 = cg_v2(&cgroups).map(weight_group_path);
    let cpu_weight = cgroupfs::cpu_weight(src, mounts, v1.as_deref(), v2.as_deref())?;
    let status = proc_::task_status(src, pid, pid)?;
    let autogroup = autogroup::read(src, pid)?;
    let (numa_bytes, mem_policy) = read_numa(src, pid, side);
    Ok(Some(VmObs {
        pid,
        name: vm_name(kind, cmdline, &paths, pid),
        kind,
        cmdline: cmdline.to_vec(),
        vcpu_source: vcpu_source(&threads.by),
        qmp_socket: qmp.and_then(|q| q.socket.clone()),
        manager,
        vcpus: threads.vcpus,
        others: threads.others,
        cgroups,
        cpu_weight,
        status,
        numa_bytes,
        mem_policy,
        autogroup,
    }))
}

/// Finds and reads every VM. Processes that exit mid-scan are skipped.
pub fn collect_host(src: &dyn Source, side: Side) -> Result<HostObservation, ReadError> {
    let times = thread_times(src)?;
    collect_host_with(src, side, times)
}

/// Run and wait times of every thread of every VMM-looking process, read
/// first and back to back: with the clock read just before them they time
/// the interval. A VM's other files (cmdline, numa_maps) take its mmap lock
/// and wait behind the VM's own memory work, for seconds on a contended
/// host (0.7 s for one numa_maps measured here); read in between, they
/// shifted each VM's window against the clock by up to 30 %.
#[derive(Debug, Default)]
pub struct ThreadTimes {
    /// pid -> (comm, tid -> schedstat).
    by_pid: BTreeMap<u32, (String, BTreeMap<u32, Option<TaskSchedstat>>)>,
    /// Every other process the same way: the host's other runnable work,
    /// which competes with the vCPUs for the same CPUs.
    others: BTreeMap<u32, (String, BTreeMap<u32, Option<TaskSchedstat>>)>,
    /// CLOCK_MONOTONIC ns right before each process's threads were read
    /// (a live source only; see [`HostObservation::read_ns`]).
    read_ns: BTreeMap<u32, u64>,
}

/// Reads [`ThreadTimes`]: only /proc/<pid>/comm, the task list and each
/// thread's schedstat, none of which waits for the process; for every
/// process, since all runnable work competes with the vCPUs. Every comm
/// comes first: with no VMM-looking process there are no vCPUs to compete
/// with, and no thread is read (on a guest, most of a snapshot side's
/// reads; [`super::host_work`] then says it was not measured).
pub fn thread_times(src: &dyn Source) -> Result<ThreadTimes, ReadError> {
    let mut t = ThreadTimes::default();
    let mut comms = Vec::new();
    for pid in proc_::pids(src)? {
        if let Some(comm) = proc_::comm(src, pid)? {
            comms.push((pid, comm));
        }
    }
    if !comms.iter().any(|(_, c)| vmm_comm(c)) {
        return Ok(t);
    }
    for (pid, comm) in comms {
        let at = src.now_ns();
        let Some(tids) = proc_::tids(src, pid)? else {
            continue;
        };
        if let Some(at) = at {
            t.read_ns.insert(pid, at);
        }
        let mut m = BTreeMap::new();
        for tid in tids {
            m.insert(tid, proc_::task_schedstat(src, pid, tid)?);
        }
        // Cheap filter: only VMM-looking processes are read further.
        if vmm_comm(&comm) {
            t.by_pid.insert(pid, (comm, m));
        } else {
            t.others.insert(pid, (comm, m));
        }
    }
    Ok(t)
}

/// [`collect_host`] with thread times read earlier by [`thread_times`].
pub fn collect_host_with(
    src: &dyn Source,
    side: Side,
    mut times: ThreadTimes,
) -> Result<HostObservation, ReadError> {
    let mut h = HostObservation {
        cgroup_mounts: cgroupfs::mounts(src)?,
        ..Default::default()
    };
    h.kvm = kvm_debugfs::read(src).unwrap_or_else(|e| {
        h.notes.push(format!("KVM debugfs unreadable: {e}"));
        None
    });
    let by_pid = std::mem::take(&mut times.by_pid);
    for (&pid, (comm, sched)) in &by_pid {
        let Some(cmdline) = proc_::cmdline(src, pid)? else {
            continue;
        };
        let Some(kind) = vmm_of(comm, &cmdline) else {
            continue;
        };
        let qmp = read_json::<QmpRecord>(src, &format!("{QMP_DIR}/{pid}.json"), &mut h.notes);
        match read_vm(
            src,
            pid,
            kind,
            &cmdline,
            &h.cgroup_mounts,
            Known {
                kvm: h.kvm.as_deref(),
                qmp: qmp.as_ref(),
                sched,
            },
            side,
        ) {
            Ok(Some(vm)) => {
                read_kvm_binary(src, &mut h, pid, qmp.as_ref());
                if let Some(q) = &qmp {
                    h.notes.extend(qmp_notes(&vm, q));
                }
                h.vms.push(vm);
            }
            Ok(None) => {}
            Err(e) => h.notes.push(format!("skipped VM pid {pid}: {e}")),
        }
    }
    for (pid, (comm, threads)) in times.others {
        // Only the end names kernel threads: the model names culprits from it.
        let kthread = match side {
            Side::End => proc_::is_kthread(src, pid).unwrap_or_else(|e| {
                h.notes.push(format!("skipped {e}"));
                None
            }),
            Side::Start => None,
        };
        h.procs.push(HostProc {
            pid,
            comm,
            kthread,
            threads: threads
                .into_iter()
                .filter_map(|(t, s)| Some((t, s?)))
                .collect(),
        });
    }
    h.read_ns = if times.read_ns.is_empty() {
        read_json(src, READ_TIMES, &mut h.notes).unwrap_or_default()
    } else {
        std::mem::take(&mut times.read_ns)
    };
    h.autogroup_enabled = autogroup::enabled(src).unwrap_or_else(|e| {
        h.notes.push(format!("skipped {e}"));
        None
    });
    h.sched = read_json(src, SCHED_FILE, &mut h.notes);
    h.own_pid = read_json(src, OWN_PID, &mut h.notes).or_else(|| own_pid_live(src));
    h.affinity = read_json(src, AFFINITY, &mut h.notes).unwrap_or_default();
    h.starved = read_json(src, STARVE_FILE, &mut h.notes);
    h.exit_sample = read_json(src, EXIT_SAMPLE, &mut h.notes);
    let capture_notes: Option<Vec<String>> = read_json(src, NOTES, &mut h.notes);
    h.notes.extend(capture_notes.unwrap_or_default());
    h.nodes = numa::nodes(src)?;
    h.numa_balancing = numa::numa_balancing(src)?;
    Ok(h)
}

/// On a live root (`place`, which reads /proc directly) the reader is
/// stealscope itself: /proc/self/stat's first field. A snapshot side
/// without the capture's own-pid file has no /proc/self: None.
fn own_pid_live(src: &dyn Source) -> Option<u32> {
    let stat = src.read_text("/proc/self/stat").ok()??;
    stat.split_whitespace().next()?.parse().ok()
}

/// A JSON file the live capture wrote (absent on a live root: Ok(None)).
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    src: &dyn Source,
    path: &str,
    notes: &mut Vec<String>,
) -> Option<T> {
    let bytes = match src.read(path) {
        Ok(b) => b?,
        Err(e) => {
            notes.push(format!("skipped {e}"));
            return None;
        }
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| notes.push(format!("skipped {path}: {e}")))
        .ok()
}

/// Binary statistics of one VM: stats files the capture read from the VMM's
/// fds, else the QMP query-stats export; otherwise the reasons there are none.
fn read_kvm_binary(src: &dyn Source, h: &mut HostObservation, pid: u32, qmp: Option<&QmpRecord>) {
    let dir = format!("{KVM_STATS_DIR}/{pid}");
    let mut files = Vec::new();
    for name in src.list(&dir).ok().flatten().unwrap_or_default() {
        if !name.ends_with(".bin") {
            continue;
        }
        let path = format!("{dir}/{name}");
        match src
            .read(&path)
            .map(|b| b.map(|b| kvm_stats::parse(&b, &path)))
        {
            Ok(Some(Ok(f))) => files.push(f),
            Ok(Some(Err(e))) | Err(e) => h.notes.push(format!("skipped {e}")),
            Ok(None) => {}
        }
    }
    let counters = KvmCounters::from_files(&files).or_else(|| {
        let q = qmp?;
        KvmCounters::from_query_stats(
            q.replies.get("query-stats vm"),
            q.replies.get("query-stats vcpu"),
            &q.qom_index(),
        )
    });
    match counters {
        Some(c) => {
            h.kvm_binary.insert(pid, c);
        }
        None => {
            let mut why: Vec<String> =
                read_json(src, &format!("{dir}/problems.json"), &mut h.notes).unwrap_or_default();
            if let Some(e) = qmp.and_then(|q| q.errors.get("query-stats vcpu")) {
                why.push(format!("QMP query-stats: {e}"));
            }
            if !why.is_empty() {
                h.kvm_binary_problems.insert(pid, why);
            }
        }
    }
}

/// Notes on a VM's QMP: sockets that failed and monitors that cannot be used.
fn qmp_notes(vm: &VmObs, q: &QmpRecord) -> Vec<String> {
    let mut out: Vec<String> = q
        .failed
        .iter()
        .map(|a| {
            format!(
                "VM {} (pid {}): QMP socket from {} not used: {}",
                vm.name, vm.pid, a.origin, a.error
            )
        })
        .collect();
    out.extend(
        q.notes
            .iter()
            .map(|n| format!("VM {} (pid {}): {n}", vm.name, vm.pid)),
    );
    if let Some(e) = q.errors.get("query-cpus-fast") {
        out.push(format!("VM {} (pid {}): {e}", vm.name, vm.pid));
    }
    out
}
