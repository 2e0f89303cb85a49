//! What kind of machine this is, from evidence the kernel gives a guest.

use stealscope_model::{MachineModel, Observation};

/// Evidence that we run under some hypervisor.
pub fn guest_evidence(m: &MachineModel) -> Vec<String> {
    let o = &m.t1;
    let mut ev = Vec::new();
    if o.cpuinfo.as_ref().is_some_and(|c| c.has("hypervisor")) {
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
