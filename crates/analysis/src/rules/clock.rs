//! Clocksource: a guest that fell back from tsc/kvm-clock to hpet, acpi_pm or
//! jiffies pays a VM exit (MMIO/PIO emulation) on every clock read.

use crate::finding::{Evidence, Finding, Severity};
use crate::roles::Roles;
use stealscope_model::MachineModel;

/// Clocksources read without leaving the guest.
pub const FAST_CLOCKSOURCES: &[&str] = &[
    "tsc",
    "kvm-clock",
    "hyperv_clocksource_tsc_page",
    "arch_sys_counter",
    "xen",
];

const UNSTABLE_MARKERS: &[&str] = &[
    "Marking TSC unstable",
    "as unstable because the skew is too large",
    "Marking clocksource",
];

pub fn unstable(m: &MachineModel, out: &mut Vec<Finding>) {
    let o = &m.t1;
    let current = o.clocksource.current.clone();
    let slow = current
        .as_deref()
        .is_some_and(|c| !FAST_CLOCKSOURCES.contains(&c));
    let mut log: Vec<String> = Vec::new();
    for marker in UNSTABLE_MARKERS {
        for line in o.kmsg_lines_containing(marker) {
            if !log.iter().any(|l| l == line) {
                log.push(line.to_string());
            }
        }
    }
    if !slow && log.is_empty() {
        return;
    }
    let available = o.clocksource.available.clone().unwrap_or_default();
    let cur = current.as_deref().unwrap_or("?");
    let (title, remedy, reference) = if Roles::of(m).host_only() {
        host_text(slow, cur)
    } else {
        guest_text(slow, cur, &available)
    };
    out.push(
        Finding::new(
            "clock.unstable",
            if slow {
                Severity::Warning
            } else {
                Severity::Info
            },
            title,
        )
        .evidence("current_clocksource", Evidence::of(&current))
        .evidence("available_clocksource", Evidence::of(&available))
        .evidence("kernel_log", Evidence::of(&log))
        .files(&[
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "/sys/devices/system/clocksource/clocksource0/available_clocksource",
            "/dev/kmsg",
        ])
        .remedy(remedy)
        .reference("kernel/time/clocksource.c (clocksource_watchdog)")
        .reference(reference),
    );
}

/// (title, remedy, reference) inside a guest: every slow clock read is a VM exit.
fn guest_text(slow: bool, current: &str, available: &[String]) -> (String, String, &'static str) {
    let better = ["kvm-clock", "tsc"]
        .into_iter()
        .find(|c| available.iter().any(|a| a == c));
    let title = if slow {
        format!("Clocksource is {current}: every clock read is emulated by the hypervisor")
    } else {
        "The kernel marked the TSC/clocksource unstable during this boot".to_string()
    };
    let switch = match better {
        Some(c) => format!(
            "Switch now with `echo {c} > /sys/devices/system/clocksource/clocksource0/current_clocksource` and make it \
             persistent with the boot parameter `clocksource={c}`. "
        ),
        None => "No fast clocksource is available in this guest: ask the provider to expose kvm-clock or an \
                 invariant TSC (constant_tsc nonstop_tsc). "
            .to_string(),
    };
    let remedy = format!(
        "{switch}The clocksource watchdog falls back when it sees skew, often caused by steal delaying the \
         watchdog itself on an overloaded host: check steal findings, and if the TSC is known good on this \
         host (invariant TSC, kvm-clock stable bit) `tsc=reliable` disables the watchdog."
    );
    (
        title,
        remedy,
        "Documentation/virt/kvm/x86/msr.rst (kvm-clock)",
    )
}

/// (title, remedy, reference) on a KVM host: slow clock reads for the host,
/// and no master clock for the VMs.
fn host_text(slow: bool, current: &str) -> (String, String, &'static str) {
    let title = if slow {
        format!("Host clocksource is {current}: clock reads are slow and KVM cannot give VMs a master clock")
    } else {
        "The kernel marked the host's TSC/clocksource unstable during this boot".to_string()
    };
    let remedy = "A clocksource other than tsc makes every host clock read slow (hpet ~0.5-1 us) and keeps KVM \
         off the master clock (it needs the host on tsc), so each vCPU's kvmclock is updated on its own, guests \
         see less stable time, and on 6.19-7.0 hosts this drives the kvmclock IPI storm \
         (host.kvmclock-ipi-storm). Find why the TSC was rejected (the kernel log above: watchdog skew, firmware \
         TSC sync, deep C-states), fix it in firmware, use `tsc=reliable` only where the TSC is known good, then \
         `echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource`."
        .to_string();
    (
        title,
        remedy,
        "arch/x86/kvm/x86.c (pvclock_update_vm_gtod_copy: master clock needs a tsc host)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestMachine;

    const CS: &str = "/sys/devices/system/clocksource/clocksource0";

    fn machine(current: &str) -> TestMachine {
        TestMachine::guest()
            .file(&format!("{CS}/current_clocksource"), current)
            .file(
                &format!("{CS}/available_clocksource"),
                "kvm-clock tsc hpet acpi_pm \n",
            )
    }

    #[test]
    fn hpet_is_a_slow_clocksource() {
        let f = machine("hpet\n").run(unstable);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "clock.unstable");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].evidence["current_clocksource"].as_str(), Some("hpet"));
    }

    #[test]
    fn kvm_clock_is_silent_unless_the_log_says_unstable() {
        assert!(machine("kvm-clock\n").run(unstable).is_empty());
        let log = "4,100,5000,-;clocksource: timekeeping watchdog on CPU1: Marking clocksource 'tsc' as unstable because the skew is too large:\n";
        let f = machine("kvm-clock\n").file("/dev/kmsg", log).run(unstable);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
    }
}
