//! KPTI on a CPU without PCID: every kernel entry and exit switches CR3 and
//! flushes the TLB; under shadow paging (host without EPT/NPT) each CR3 write
//! is a VM exit, which made the KPTI case's VM several times slower.

use crate::finding::{Evidence, Finding, Severity};
use crate::roles::Roles;
use stealscope_model::MachineModel;

pub fn kpti_without_pcid(m: &MachineModel, out: &mut Vec<Finding>) {
    let o = &m.t1;
    let Some(cpuinfo) = &o.cpuinfo else { return };
    let meltdown = o
        .vulnerabilities
        .as_ref()
        .and_then(|v| v.get("meltdown"))
        .cloned();
    let pti_active = meltdown.as_deref().is_some_and(|s| s.contains("PTI")) || cpuinfo.has("pti");
    if !pti_active || cpuinfo.has("pcid") {
        return;
    }
    let pti_log: Vec<String> = o
        .kmsg_lines_containing("page tables isolation")
        .map(str::to_string)
        .collect();
    let host = Roles::of(m).host_only();
    let (title, remedy) = if host {
        (
            "Kernel page-table isolation is on but the host CPU has no PCID: every syscall and interrupt flushes the TLB",
            "This host's CPU predates PCID (before Westmere), so KPTI costs the host on every kernel entry, VMM \
             exits included. Guests running KPTI pay more, and several times more without EPT/NPT (see \
             host.no-ept). The fix is newer hardware; `pti=off` on the host only where the threat model allows it \
             (it exposes the host kernel to Meltdown from every process, VMMs included).",
        )
    } else {
        (
            "Kernel page-table isolation is on but the vCPU has no PCID: every syscall and interrupt flushes the TLB",
            GUEST_REMEDY,
        )
    };
    out.push(
        Finding::new("mitigation.kpti-without-pcid", Severity::Warning, title)
            .evidence("meltdown", Evidence::of(&meltdown))
            .evidence("cpuinfo_pti", cpuinfo.has("pti"))
            .evidence("cpuinfo_pcid", false)
            .evidence("cpuinfo_invpcid", cpuinfo.has("invpcid"))
            .evidence("kernel_log", Evidence::of(&pti_log))
            .files(&[
                "/sys/devices/system/cpu/vulnerabilities/meltdown",
                "/proc/cpuinfo",
                "/dev/kmsg",
            ])
            .remedy(remedy)
            .reference("arch/x86/mm/pti.c")
            .reference("Documentation/arch/x86/pti.rst")
            .case("kpti-shadow-paging-slow-vm.txt"),
    );
}

const GUEST_REMEDY: &str = "Ask the provider to expose PCID (and INVPCID) to the VM where the host CPU has it: QEMU `-cpu host` or a \
             CPU model with `+pcid`, libvirt `<feature policy='require' name='pcid'/>`. If the host runs without \
             EPT/NPT (shadow paging) the cost multiplies: each CR3 switch is a VM exit; the fix is then a host CPU \
             with EPT or a newer host kernel (`stealscope host` on that host reports host.no-ept). Only where the \
             threat model allows it (single tenant, trusted code, host patched) boot the guest with `pti=off` \
             (`nopti`); EL7 kernels can also switch at run time: `echo 0 > /sys/kernel/debug/x86/pti_enabled`.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestMachine;

    fn machine(flags: &str) -> TestMachine {
        TestMachine::guest()
            .file(
                "/proc/cpuinfo",
                format!("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon\nflags\t\t: fpu {flags} hypervisor\n\n"),
            )
            .file("/sys/devices/system/cpu/vulnerabilities/meltdown", "Mitigation: PTI\n")
    }

    #[test]
    fn pti_without_pcid_fires_and_with_pcid_is_silent() {
        let f = machine("sse2 pti").run(kpti_without_pcid);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "mitigation.kpti-without-pcid");
        assert!(machine("sse2 pcid pti").run(kpti_without_pcid).is_empty());
        assert!(TestMachine::guest().run(kpti_without_pcid).is_empty());
    }
}
