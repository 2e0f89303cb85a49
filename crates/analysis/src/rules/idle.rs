//! How idle vCPUs idle: halt-polling and deep C-states.

use crate::finding::{Evidence, Finding, Severity};
use crate::roles::is_kvm;
use stealscope_model::{MachineModel, Observation};
use stealscope_readers::cpuid::KvmCpuid;
use stealscope_readers::cpuidle::CpuIdleStates;

/// Exit latency from which a C-state is "deep": wake-ups pay tens of µs
/// (C6 is ~100-200 µs on Intel servers; C1/C1E are 1-10 µs).
pub const DEEP_CSTATE_LATENCY_US: u64 = 50;

/// Idle drivers that idle in the guest without an HLT exit (MWAIT passthrough).
const HARDWARE_IDLE_DRIVERS: &[&str] = &["intel_idle"];

const HALTPOLL_CASE: &str = "haltpoll-hypervisor-cpuid.txt";
const HALTPOLL_DOC: &str = "Documentation/virt/guest-halt-polling.rst";

/// POLL-state entries and all idle entries, summed over CPUs: cumulative
/// since boot.
fn entries(cpus: &[CpuIdleStates]) -> (u64, u64) {
    cpus.iter().fold((0u64, 0u64), |(p, t), cpu| {
        let p2: u64 = cpu
            .states
            .iter()
            .filter(|s| s.name.as_deref() == Some("POLL"))
            .filter_map(|s| s.usage)
            .sum();
        let t2: u64 = cpu.states.iter().filter_map(|s| s.usage).sum();
        (p + p2, t + t2)
    })
}

/// POLL and all idle entries during the interval, over the CPUs read at
/// both ends; None without both readings (the totals since boot say what
/// happened before, possibly with another guest_halt_poll_ns).
fn interval_entries(m: &MachineModel) -> Option<(u64, u64)> {
    let mut sum = None;
    for c1 in &m.t1.idle_states {
        let Some(c0) = m.t0.idle_states.iter().find(|c| c.cpu == c1.cpu) else {
            continue;
        };
        let (p0, t0) = entries(std::slice::from_ref(c0));
        let (p1, t1) = entries(std::slice::from_ref(c1));
        let (p, t) = sum.get_or_insert((0u64, 0u64));
        *p += p1.saturating_sub(p0);
        *t += t1.saturating_sub(t0);
    }
    sum
}

/// The haltpoll title from what the interval measured.
fn poll_ns_zero_title(over: Option<(u64, u64)>, wall_s: f64) -> String {
    let head = "haltpoll driver is loaded but guest_halt_poll_ns=0";
    match over {
        Some((_, 0)) => format!(
            "{head}: no CPU idled in the {wall_s:.0} s measured; with this setting each idle halts with an HLT exit"
        ),
        Some((0, idle)) => format!(
            "{head}: none of {idle} idle entries in {wall_s:.0} s polled ({:.0}/s HLT exits)",
            idle as f64 / wall_s.max(1e-9)
        ),
        Some((poll, idle)) => format!(
            "{head}: only {poll} of {idle} idle entries in {wall_s:.0} s polled ({:.0}/s); the rest exit with HLT",
            poll as f64 / wall_s.max(1e-9)
        ),
        None => format!("{head}: the governor will not poll, so each idle halts with an HLT exit"),
    }
}

/// What the haltpoll rule reads, gathered once and shared by the finding's
/// text and its evidence.
struct HaltpollFacts<'a> {
    o: &'a Observation,
    governors: Vec<String>,
    has_driver: bool,
    driver: Option<String>,
    poll_usage: u64,
    idle_usage: u64,
    over_interval: Option<(u64, u64)>,
    no_poll_control: Option<String>,
    cmd_force: Option<String>,
    cmd_poll_ns: Option<String>,
    kvm: Option<&'a KvmCpuid>,
    captured: bool,
    realtime: Option<bool>,
    poll_control: Option<bool>,
    wall_s: f64,
}

/// The facts, or None when the rule does not apply: not KVM, a kernel
/// without haltpoll, or idle that never exits to the host.
fn gather_haltpoll(m: &MachineModel) -> Option<HaltpollFacts<'_>> {
    let o = &m.t1;
    if !is_kvm(o) {
        return None;
    }
    let governors = o.cpuidle.available_governors.clone().unwrap_or_default();
    let has_governor = governors.iter().any(|g| g == "haltpoll") || o.haltpoll.governor_present;
    let has_driver = o.haltpoll.driver_present;
    if !has_governor && !has_driver {
        return None; // kernel without haltpoll (before 5.4, or not configured)
    }
    let driver = o.cpuidle.current_driver.clone();
    // With MWAIT passed through (intel_idle in the guest) idle does not exit
    // to the host at all, so polling would buy nothing.
    if HARDWARE_IDLE_DRIVERS.contains(&driver.as_deref().unwrap_or("")) {
        return None;
    }
    let (poll_usage, idle_usage) = entries(&o.idle_states);
    let kvm = m.hardware.cpuid.as_ref().and_then(|c| c.kvm.as_ref());
    Some(HaltpollFacts {
        o,
        governors,
        has_driver,
        driver,
        poll_usage,
        idle_usage,
        over_interval: interval_entries(m),
        no_poll_control: o
            .kmsg_lines_containing("does not support poll control")
            .next()
            .map(str::to_string),
        cmd_force: o.cmdline_has("cpuidle_haltpoll.force").map(str::to_string),
        cmd_poll_ns: o
            .cmdline_has("haltpoll.guest_halt_poll_ns")
            .map(str::to_string),
        kvm,
        captured: m.hardware.cpuid.is_some(),
        // What the host advertises, as evidence and in the remedy.
        realtime: kvm.map(|k| k.realtime_hint),
        poll_control: kvm.map(|k| k.poll_control),
        wall_s: m.wall_s,
    })
}

/// What the CPUID capture says about the KVM leaf, as the remedy's opening
/// sentence (empty when CPUID was not captured).
fn cpuid_says(f: &HaltpollFacts) -> String {
    match (f.captured, f.kvm) {
        (false, _) => String::new(),
        (true, None) => "CPUID shows no KVM signature in 0x40000000-0x4000FF00 (hidden with QEMU `kvm=off` / libvirt \
                         `<kvm><hidden state='on'/>`, or not KVM), so kvm_para_available() is false. "
            .to_string(),
        (true, Some(k)) => format!(
            "CPUID {}: KVM_HINTS_REALTIME is {} and KVM_FEATURE_POLL_CONTROL is {} (features EAX {}, hints EDX {}). ",
            k.base,
            if k.realtime_hint { "set" } else { "clear" },
            if k.poll_control { "set" } else { "clear" },
            k.features_eax,
            k.hints_edx
        ),
    }
}

/// Why the haltpoll driver did not register, from the host's hint.
fn driver_missing_why(f: &HaltpollFacts, cpuid_says: &str) -> String {
    match f.realtime {
        Some(false) => format!(
            "{cpuid_says}The driver registers only when kvm_para_available() and haltpoll_want() = \
             kvm_para_has_hint(KVM_HINTS_REALTIME) || force (drivers/cpuidle/cpuidle-haltpoll.c \
             haltpoll_init); this host does not set the hint, which hosts set only for dedicated, pinned vCPUs."
        ),
        Some(true) => format!(
            "{cpuid_says}The host sets the hint, so the driver should have registered: it refuses when an \
             `idle=` boot option is given (boot_option_idle_override) or, built as a module, when \
             cpuidle-haltpoll is not loaded (drivers/cpuidle/cpuidle-haltpoll.c haltpoll_init)."
        ),
        None => format!(
            "{cpuid_says}It needs the host to advertise KVM_HINTS_REALTIME (CPUID 0x40000001 EDX bit 0), \
             which hosts set only for dedicated, pinned vCPUs, or `force=1` (drivers/cpuidle/cpuidle-haltpoll.c \
             haltpoll_want())."
        ),
    }
}

/// The finding when haltpoll is in the kernel but another cpuidle driver
/// is in use.
fn driver_not_in_use(f: &HaltpollFacts, cpuid_says: &str) -> Finding {
    let host_fix = "on the host: QEMU `-cpu host,kvm-hint-dedicated=on,kvm-poll-control=on`, libvirt \
                    `<features><kvm><hint-dedicated state='on'/><poll-control state='on'/></kvm></features>`";
    let poll_control_note = match f.poll_control {
        Some(false) => " The host does not advertise KVM_FEATURE_POLL_CONTROL either: with haltpoll in the guest it \
                       cannot switch off the host's own halt-polling (MSR_KVM_POLL_CONTROL), so both sides poll; \
                       add kvm-poll-control=on on the host.",
        _ => "",
    };
    // CPUID that shows the KVM leaf rules out a hidden signature.
    let hidden_note = if f.kvm.is_some() {
        ""
    } else {
        " If the VM's KVM signature is hidden (QEMU `kvm=off`, libvirt `<kvm><hidden state='on'/>`), the guest \
         cannot use any KVM paravirtual feature, haltpoll included: un-hide it."
    };
    let module_hint = if f.has_driver {
        ""
    } else {
        " (or `modprobe cpuidle-haltpoll force=1` if it is a module)"
    };
    let why = driver_missing_why(f, cpuid_says);
    let remedy = format!(
        "The guest kernel can poll briefly before halting (cuts wake-up latency and HLT exits) but the haltpoll \
         cpuidle driver did not load. {why} With dedicated vCPUs, set the hint {host_fix}. Otherwise force it \
         in the guest with the boot parameter `cpuidle_haltpoll.force=1`{module_hint} and reboot; verify with \
         `cat /sys/devices/system/cpu/cpuidle/current_driver` (expect haltpoll). Forcing it on an \
         oversubscribed host burns host CPU while idle, so weigh it against steal.{poll_control_note}{hidden_note}"
    );
    Finding::new(
        "idle.haltpoll-inactive",
        Severity::Warning,
        format!(
            "haltpoll is in the kernel but not in use (cpuidle driver: {}): every idle vCPU exits to the host with HLT",
            f.driver.as_deref().unwrap_or("unknown")
        ),
    )
    .remedy(remedy)
}

/// The finding when the haltpoll driver is in use but polling is off.
fn poll_ns_zero(f: &HaltpollFacts, cpuid_says: &str) -> Finding {
    let host_polling = match (f.poll_control, f.no_poll_control.is_some()) {
        (Some(true), _) => "; the host advertises KVM_FEATURE_POLL_CONTROL (CPUID), so it has stopped polling for it",
        (Some(false), _) | (None, true) => "; this host does not support it, so host polling still applies",
        (None, false) => "",
    };
    Finding::new(
        "idle.haltpoll-inactive",
        Severity::Warning,
        poll_ns_zero_title(f.over_interval, f.wall_s),
    )
    .remedy(format!(
        "{cpuid_says}With guest_halt_poll_ns=0 the haltpoll governor never grows its poll window, so it always \
         picks the halt state. The haltpoll driver also asks the host to stop halt-polling for this vCPU \
         (MSR_KVM_POLL_CONTROL=0{host_polling}), so neither side polls and each wake-up pays a full exit and host \
         reschedule. Re-enable polling in the guest: `echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns` \
         (takes effect at once){}; verify that the POLL state's usage in \
         /sys/devices/system/cpu/cpu*/cpuidle/state0/usage starts growing.",
        if f.cmd_poll_ns.is_some() { " and remove `haltpoll.guest_halt_poll_ns=0` from the kernel command line" } else { "" }
    ))
}

/// What CPUID says about the KVM leaf, as evidence.
fn cpuid_evidence(f: Finding, h: &HaltpollFacts) -> Finding {
    let kvm = h.kvm;
    f.evidence("cpuid_kvm_base", Evidence::of(&kvm.map(|k| &k.base)))
        .evidence("cpuid_kvm_hints_realtime", Evidence::of(&h.realtime))
        .evidence("cpuid_kvm_poll_control", Evidence::of(&h.poll_control))
        .evidence(
            "cpuid_kvm_features_eax",
            Evidence::of(&kvm.map(|k| &k.features_eax)),
        )
        .evidence("cpuid", if h.captured { "read" } else { "not captured" })
}

/// The guest's cpuidle setup, its idle entries and boot parameters, as
/// evidence, with the files and references behind them.
fn idle_evidence(f: Finding, h: &HaltpollFacts) -> Finding {
    let o = h.o;
    let over_interval = h.over_interval;
    f.evidence("current_driver", Evidence::of(&h.driver))
        .evidence("current_governor", Evidence::of(&o.cpuidle.governor()))
        .evidence("available_governors", Evidence::of(&h.governors))
        .evidence("haltpoll_driver_present", h.has_driver)
        .evidence("guest_halt_poll_ns", Evidence::of(&o.haltpoll.guest_halt_poll_ns))
        .evidence("poll_state_entries_since_boot", h.poll_usage)
        .evidence("idle_entries_since_boot", h.idle_usage)
        .evidence("poll_state_entries", Evidence::of(&over_interval.map(|o| o.0)))
        .evidence("idle_entries", Evidence::of(&over_interval.map(|o| o.1)))
        .evidence(
            "poll_state_entries_per_s",
            Evidence::of(&over_interval.map(|o| crate::finding::round(o.0 as f64 / h.wall_s.max(1e-9), 1))),
        )
        .evidence("interval_s", crate::finding::round(h.wall_s, 1))
        .evidence("cmdline_cpuidle_haltpoll_force", Evidence::of(&h.cmd_force))
        .evidence("cmdline_guest_halt_poll_ns", Evidence::of(&h.cmd_poll_ns))
        .evidence("host_lacks_poll_control", Evidence::of(&h.no_poll_control))
        .files(&[
            "/sys/devices/system/cpu/cpuidle/current_driver",
            "/sys/devices/system/cpu/cpuidle/available_governors",
            "/sys/module/haltpoll/parameters/guest_halt_poll_ns",
            "/sys/devices/system/cpu/cpu*/cpuidle/state*/usage",
            "/proc/cmdline",
            "/dev/kmsg",
            "cpuid.json",
        ])
        .reference(HALTPOLL_DOC)
        .reference("drivers/cpuidle/cpuidle-haltpoll.c haltpoll_want(): kvm_para_has_hint(KVM_HINTS_REALTIME) || force")
        .reference("drivers/cpuidle/governors/haltpoll.c")
        .reference("arch/x86/include/uapi/asm/kvm_para.h (KVM_FEATURE_POLL_CONTROL 12, KVM_HINTS_REALTIME 0)")
        .case(HALTPOLL_CASE)
}

pub fn haltpoll_inactive(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(h) = gather_haltpoll(m) else {
        return;
    };
    let cpuid_says = cpuid_says(&h);
    let f = if h.driver.as_deref() != Some("haltpoll") {
        driver_not_in_use(&h, &cpuid_says)
    } else if h.o.haltpoll.guest_halt_poll_ns == Some(0) {
        poll_ns_zero(&h, &cpuid_says)
    } else {
        return;
    };
    out.push(idle_evidence(cpuid_evidence(f, &h), &h));
}

pub fn deep_cstates(m: &MachineModel, out: &mut Vec<Finding>) {
    let o = &m.t1;
    let mut deep = Vec::new();
    for cpu in &o.idle_states {
        for s in &cpu.states {
            let (Some(lat), Some(false)) = (s.latency_us, s.disabled) else {
                continue;
            };
            if lat >= DEEP_CSTATE_LATENCY_US {
                deep.push((cpu.cpu, s.name.clone().unwrap_or_default(), lat, s.usage));
            }
        }
    }
    let Some(max_lat) = deep.iter().map(|d| d.2).max() else {
        return;
    };
    // A PM QoS request below the deepest latency keeps the governor out of it.
    if let Some(qos) = o.pm_qos_us {
        if (qos as i64) < max_lat as i64 {
            return;
        }
    }
    let mut names: Vec<String> = deep
        .iter()
        .map(|d| format!("{} ({} us)", d.1, d.2))
        .collect();
    names.sort();
    names.dedup();
    let cpus = {
        let mut c: Vec<u32> = deep.iter().map(|d| d.0).collect();
        c.dedup();
        c
    };
    out.push(
        Finding::new(
            "idle.deep-cstates",
            Severity::Warning,
            format!("Deep C-states enabled ({}) and no PM QoS limit holds them off", names.join(", ")),
        )
        .evidence("states", Evidence::of(&names))
        .evidence("cpus", Evidence::of(&cpus))
        .evidence("max_exit_latency_us", max_lat)
        .evidence("pm_qos_cpu_latency_us", Evidence::of(&o.pm_qos_us))
        .evidence("cpuidle_driver", Evidence::of(&o.cpuidle.current_driver))
        .evidence("threshold_us", DEEP_CSTATE_LATENCY_US)
        .files(&["/sys/devices/system/cpu/cpu*/cpuidle/state*/{name,latency,disable}", "/dev/cpu_dma_latency"])
        .remedy(format!(
            "Waking from these states costs up to {max_lat} us per idle exit. For latency-sensitive work disable them: \
             `cpupower idle-set -D {}` (or write 1 to /sys/devices/system/cpu/cpu*/cpuidle/stateN/disable), or hold a \
             PM QoS request (tuned profile latency-performance, or keep /dev/cpu_dma_latency open with a 4-byte \
             binary value such as 10); persistent: boot with `intel_idle.max_cstate=1` / `processor.max_cstate=1`. \
             Costs power.",
            DEEP_CSTATE_LATENCY_US - 1
        ))
        .reference("Documentation/admin-guide/pm/cpuidle.rst")
        .reference("kernel/power/qos.c (cpu_dma_latency)")
        .case("guest-micro-jitter-case.txt"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestMachine;

    fn machine(latency_us: u64, disabled: u8) -> TestMachine {
        let dir = "/sys/devices/system/cpu/cpu0/cpuidle/state2";
        TestMachine::guest()
            .file(&format!("{dir}/name"), "C6\n")
            .file(&format!("{dir}/latency"), format!("{latency_us}\n"))
            .file(&format!("{dir}/disable"), format!("{disabled}\n"))
            .file(&format!("{dir}/usage"), "12\n")
    }

    #[test]
    fn an_enabled_deep_state_fires() {
        let f = machine(100, 0).run(deep_cstates);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "idle.deep-cstates");
    }

    #[test]
    fn shallow_disabled_or_held_off_states_are_silent() {
        assert!(machine(10, 0).run(deep_cstates).is_empty());
        assert!(machine(100, 1).run(deep_cstates).is_empty());
        // A PM QoS request of 0 µs (4 raw bytes) keeps the governor out.
        let held = machine(100, 0).file("/dev/cpu_dma_latency", [0u8; 4]);
        assert!(held.run(deep_cstates).is_empty());
    }
}
