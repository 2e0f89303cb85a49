//! Cumulative run and run-queue wait seconds of every vCPU thread from one
//! host scan, named for exporters: the VM's name (with its pid when two VMs
//! share one, so that no two series collide) and the vCPU index.

use super::discovery::ThreadRole;
use std::collections::BTreeMap;
use stealscope_readers::process::TaskSchedstat;

/// One thread's schedstat from a host scan (the engine's `HostScanner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSample {
    pub pid: u32,
    pub tid: u32,
    pub role: ThreadRole,
    pub sched: TaskSchedstat,
}

/// A VM a host scan follows, as its series are named: pid and name.
pub trait ScannedVmId {
    fn pid(&self) -> u32;
    fn name(&self) -> &str;
}

impl ScannedVmId for (u32, String) {
    fn pid(&self) -> u32 {
        self.0
    }
    fn name(&self) -> &str {
        &self.1
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct VcpuTimes {
    pub vm: String,
    pub vcpu: u32,
    /// Run-queue wait since the thread started: the steal its guest sees.
    pub wait_s: f64,
    pub run_s: f64,
}

/// Each VM's name by pid, with the pid added when two VMs share a name, so
/// that no two series collide.
pub fn vm_labels<V: ScannedVmId>(vms: &[V]) -> BTreeMap<u32, String> {
    let mut per_name: BTreeMap<&str, usize> = BTreeMap::new();
    for vm in vms {
        *per_name.entry(vm.name()).or_default() += 1;
    }
    vms.iter()
        .map(|vm| {
            let label = if per_name[vm.name()] > 1 {
                format!("{} (pid {})", vm.name(), vm.pid())
            } else {
                vm.name().to_string()
            };
            (vm.pid(), label)
        })
        .collect()
}

pub fn vcpu_times<V: ScannedVmId>(vms: &[V], samples: &[ThreadSample]) -> Vec<VcpuTimes> {
    let labels = vm_labels(vms);
    let label = |pid: u32| labels.get(&pid).cloned();
    let mut out: Vec<VcpuTimes> = samples
        .iter()
        .filter_map(|s| {
            let ThreadRole::Vcpu(index) = s.role else {
                return None;
            };
            Some(VcpuTimes {
                vm: label(s.pid)?,
                vcpu: index,
                wait_s: s.sched.wait_ns as f64 / 1e9,
                run_s: s.sched.run_ns as f64 / 1e9,
            })
        })
        .collect();
    out.sort_by(|a, b| a.vm.cmp(&b.vm).then(a.vcpu.cmp(&b.vcpu)));
    // Two threads claiming one index (a restarted vCPU) would be one series twice.
    out.dedup_by(|a, b| a.vm == b.vm && a.vcpu == b.vcpu);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(pid: u32, name: &str) -> (u32, String) {
        (pid, name.into())
    }

    fn sample(pid: u32, tid: u32, role: ThreadRole, wait_ns: u64) -> ThreadSample {
        ThreadSample {
            pid,
            tid,
            role,
            sched: TaskSchedstat {
                run_ns: 2 * wait_ns,
                wait_ns,
                slices: 1,
            },
        }
    }

    #[test]
    fn names_vcpus_and_tells_same_named_vms_apart() {
        let vms = [vm(10, "web"), vm(20, "db"), vm(30, "db")];
        let s = [
            sample(10, 11, ThreadRole::Vcpu(1), 3_000_000_000),
            sample(10, 12, ThreadRole::Vcpu(0), 500_000_000),
            sample(10, 13, ThreadRole::Emulator, 7),
            sample(20, 21, ThreadRole::Vcpu(0), 1),
            sample(30, 31, ThreadRole::Vcpu(0), 2),
            sample(99, 91, ThreadRole::Vcpu(0), 2),
        ];
        let v = vcpu_times(&vms, &s);
        let names: Vec<(&str, u32)> = v.iter().map(|t| (t.vm.as_str(), t.vcpu)).collect();
        assert_eq!(
            names,
            [
                ("db (pid 20)", 0),
                ("db (pid 30)", 0),
                ("web", 0),
                ("web", 1)
            ]
        );
        assert_eq!(v[3].wait_s, 3.0);
        assert_eq!(v[3].run_s, 6.0);
    }
}
