//! What kind of machine this is, from evidence the kernel gives a guest and
//! from the VMs it runs.

use stealscope_model::{MachineModel, Observation};

/// Which sides of virtualisation this machine is on. A nested host (a VM that
/// runs VMs, like the test machines) is both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub guest: bool,
    pub host: bool,
}

impl Roles {
    pub fn of(m: &MachineModel) -> Roles {
        Roles {
            guest: !guest_evidence(m).is_empty(),
            host: !m.t1.host.vms.is_empty(),
        }
    }

    /// Runs VMs and shows no sign of running under a hypervisor: what the
    /// guest rules say of vCPUs and providers does not apply.
    pub fn host_only(self) -> bool {
        self.host && !self.guest
    }
}

/// The `hypervisor` CPU flag (CPUID.1:ECX[31]) in /proc/cpuinfo.
pub fn hypervisor_flag(o: &Observation) -> bool {
    o.cpuinfo.as_ref().is_some_and(|c| c.has("hypervisor"))
}

/// Evidence that we run under some hypervisor.
pub fn guest_evidence(m: &MachineModel) -> Vec<String> {
    let o = &m.t1;
    let mut ev = Vec::new();
    if hypervisor_flag(o) {
        ev.push("/proc/cpuinfo flag 'hypervisor'".to_string());
    }
    if let Some(line) = o.kmsg_lines_containing("Hypervisor detected").next() {
        ev.push(format!("kernel log: {line}"));
    }
    if m.interval.cpus.iter().any(|c| c.secs.steal > 0.0) {
        ev.push("/proc/stat steal is non-zero".to_string());
    }
    ev
}

/// KVM (or a KVM-compatible hypervisor such as Firecracker) specifically.
pub fn is_kvm(o: &Observation) -> bool {
    o.kmsg_lines_containing("Hypervisor detected: KVM")
        .next()
        .is_some()
        || o.clocksource
            .available
            .iter()
            .flatten()
            .any(|c| c == "kvm-clock")
        || o.clocksource.current.as_deref() == Some("kvm-clock")
}
