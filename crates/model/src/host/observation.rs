//! Reads every VM on a host from one side of an interval: the VMM process,
//! its vCPU and other threads with run/wait time, affinity and cgroups, plus
//! host facts the rules need (NUMA nodes, balancing, KVM debugfs).

use super::discovery::{
    libvirt_scope, libvirt_scope_path, libvirt_vcpu_cgroup, thread_role, vm_name, vmm_comm, vmm_of,
    ThreadRole, VmKind,
};
use crate::observation::Side;
use serde::Serialize;
use std::collections::BTreeMap;
use stealscope_readers::cgroupfs::{self, CgroupMounts, CpuWeight};
use stealscope_readers::kvm_debugfs::{self, KvmVm};
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

#[derive(Debug, Clone, Serialize)]
pub struct VmObs {
    pub pid: u32,
    pub name: String,
    pub kind: VmKind,
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
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct HostObservation {
    pub vms: Vec<VmObs>,
    pub nodes: Vec<Node>,
    pub numa_balancing: Option<u32>,
    pub kvm: Option<Vec<KvmVm>>,
    pub cgroup_mounts: CgroupMounts,
    pub notes: Vec<String>,
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

/// One VMM process; None if it exited while we read it.
fn read_vm(
    src: &dyn Source,
    pid: u32,
    kind: VmKind,
    cmdline: &[String],
    mounts: &CgroupMounts,
    kvm: Option<&[KvmVm]>,
    side: Side,
) -> Result<Option<VmObs>, ReadError> {
    let Some(tids) = proc_::tids(src, pid)? else {
        return Ok(None);
    };
    let cgroups = proc_::task_cgroup(src, pid, pid)?.unwrap_or_default();
    let kvm_tids: BTreeMap<u32, u32> = kvm
        .and_then(|vms| vms.iter().find(|v| v.pid == pid))
        .map(|v| v.vcpu_tids.iter().map(|(i, t)| (*t, *i)).collect())
        .unwrap_or_default();
    let mut vcpus = Vec::new();
    let mut others = Vec::new();
    let mut accel = None;
    for tid in tids {
        let Some(comm) = proc_::task_comm(src, pid, tid)? else {
            continue;
        };
        let (mut role, acc) = thread_role(&comm);
        if acc.is_some() {
            accel = acc.map(str::to_string);
        }
        // KVM debugfs vcpuN/pid is authoritative; libvirt vcpuN cgroups next.
        if let Some(i) = kvm_tids.get(&tid) {
            role = ThreadRole::Vcpu(*i);
        } else if role == ThreadRole::Emulator {
            if let Some(i) = proc_::task_cgroup(src, pid, tid)?
                .and_then(|c| c.iter().find_map(|m| libvirt_vcpu_cgroup(&m.path)))
            {
                role = ThreadRole::Vcpu(i);
            }
        }
        let sched = proc_::task_schedstat(src, pid, tid)?;
        let status = proc_::task_status(src, pid, tid)?;
        let t = ThreadObs {
            tid,
            comm,
            role,
            sched,
            cpus_allowed: status.and_then(|s| s.cpus_allowed),
        };
        match role {
            ThreadRole::Vcpu(i) => vcpus.push((i, t)),
            _ => others.push(t),
        }
    }
    vcpus.sort_by_key(|(i, _)| *i);
    let kind = match (kind, accel.as_deref()) {
        (VmKind::Qemu, Some("KVM")) => VmKind::QemuKvm,
        (VmKind::Qemu, Some("TCG")) => VmKind::QemuTcg,
        (VmKind::Qemu, _) if !kvm_tids.is_empty() => VmKind::QemuKvm,
        (k, _) => k,
    };
    let paths: Vec<String> = cgroups.iter().map(|c| c.path.clone()).collect();
    let manager = paths
        .iter()
        .any(|p| libvirt_scope(p).is_some())
        .then(|| "libvirt".to_string());
    // libvirt keeps the main thread in .../libvirt/emulator (default weight);
    // the domain's weight is set on the machine scope above it.
    let scope = |p: &str| libvirt_scope_path(p).unwrap_or_else(|| p.to_string());
    let v1 = cg_path(&cgroups, "cpu").map(scope);
    let v2 = cg_v2(&cgroups).map(scope);
    let cpu_weight = cgroupfs::cpu_weight(src, mounts, v1.as_deref(), v2.as_deref())?;
    let status = proc_::task_status(src, pid, pid)?;
    // numa_maps walks the VM's page tables (costly for large VMs) and the
    // rules use it at the end of the interval only.
    let numa_bytes = (side == Side::End)
        .then(|| {
            src.read_text(&format!("/proc/{pid}/numa_maps"))
                .ok()
                .flatten()
        })
        .flatten()
        .map(|t| numa::parse_numa_maps(&t));
    Ok(Some(VmObs {
        pid,
        name: vm_name(kind, cmdline, &paths, pid),
        kind,
        manager,
        vcpus,
        others,
        cgroups,
        cpu_weight,
        status,
        numa_bytes,
    }))
}

/// Finds and reads every VM. Processes that exit mid-scan are skipped.
pub fn collect_host(src: &dyn Source, side: Side) -> Result<HostObservation, ReadError> {
    let mut h = HostObservation {
        cgroup_mounts: cgroupfs::mounts(src)?,
        ..Default::default()
    };
    h.kvm = kvm_debugfs::read(src).unwrap_or_else(|e| {
        h.notes.push(format!("KVM debugfs unreadable: {e}"));
        None
    });
    for pid in proc_::pids(src)? {
        let Some(comm) = proc_::comm(src, pid)? else {
            continue;
        };
        // Cheap filter first: only VMM-looking processes get their cmdline read.
        if !vmm_comm(&comm) {
            continue;
        }
        let Some(cmdline) = proc_::cmdline(src, pid)? else {
            continue;
        };
        let Some(kind) = vmm_of(&comm, &cmdline) else {
            continue;
        };
        match read_vm(
            src,
            pid,
            kind,
            &cmdline,
            &h.cgroup_mounts,
            h.kvm.as_deref(),
            side,
        ) {
            Ok(Some(vm)) => h.vms.push(vm),
            Ok(None) => {}
            Err(e) => h.notes.push(format!("skipped VM pid {pid}: {e}")),
        }
    }
    h.nodes = numa::nodes(src)?;
    h.numa_balancing = numa::numa_balancing(src)?;
    Ok(h)
}
