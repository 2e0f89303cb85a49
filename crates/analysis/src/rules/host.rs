//! Host-side rules: steal seen from the hypervisor (vCPU run-queue wait) and
//! the host configuration that causes it.

use crate::finding::{evidence, round, Evidence, Finding, Severity};
use stealscope_model::MachineModel;
use stealscope_who::Kind;

/// Mean vCPU wait (% of wall) at which host steal is worth a finding; the
/// same level as the guest-side threshold, since it is the same quantity.
pub const HOST_STEAL_WARN_PCT: f64 = 2.0;
pub const HOST_STEAL_CRITICAL_PCT: f64 = 10.0;
/// Clearing threshold of [`HOST_STEAL_WARN_PCT`] where rules run
/// repeatedly ([`crate::hysteresis`]): a host steady at 2 % moves by a few
/// tenths between 5 s intervals, so a finding that fired holds to 1.5 %.
pub const HOST_STEAL_CLEAR_PCT: f64 = 1.5;
/// "Lightly loaded" VM: its vCPUs ran less than this share of the time.
pub const IDLE_VM_UTIL_PCT: f64 = 30.0;
/// ...next to a VM whose vCPUs ran at least this much.
pub const BUSY_VM_UTIL_PCT: f64 = 70.0;
/// Weight per vCPU differing by more than this factor between VMs is unfair.
pub const WEIGHT_RATIO_UNFAIR: f64 = 1.5;
/// A node holding at least this share of a VM's memory counts as "used".
pub const SPAN_MEMORY_SHARE: f64 = 0.10;
/// Host IPIs (RES or CAL) per second per CPU that signal the kvmclock storm
/// (the report saw host kernel CPU jump from 2-3 to 3-12 CPUs).
pub const KVMCLOCK_IPI_PER_S: f64 = 5_000.0;
/// HLT exits at least this share of all exits: guests idle by HLT.
pub const HLT_EXIT_SHARE: f64 = 0.5;

pub fn idle_vm_penalty(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(busy) = m
        .host
        .vms
        .iter()
        .filter(|v| v.util_pct >= BUSY_VM_UTIL_PCT)
        .max_by(|a, b| a.util_pct.total_cmp(&b.util_pct))
    else {
        return;
    };
    for v in &m.host.vms {
        if v.util_pct < IDLE_VM_UTIL_PCT
            && v.steal_pct >= HOST_STEAL_WARN_PCT
            && !v.vcpus.is_empty()
        {
            out.push(
                Finding::new(
                    "host.idle-vm-penalty",
                    Severity::Warning,
                    format!("Lightly loaded VM {} ({:.0}% busy) loses {:.1}% to steal next to busy VM {}", v.name, v.util_pct, v.steal_pct, busy.name),
                )
                .evidence("vm", v.name.clone())
                .evidence("vm_util_pct", round(v.util_pct, 2))
                .evidence("vm_steal_pct", round(v.steal_pct, 2))
                .evidence("busy_vm", busy.name.clone())
                .evidence("busy_vm_util_pct", round(busy.util_pct, 2))
                .files(&["/proc/<pid>/task/<tid>/schedstat"])
                .remedy(
                    "A mostly idle VM wakes to find its CPU taken by a busy neighbour and waits a full slice. Give \
                     latency-sensitive light VMs their own CPUs or a separate shared pool away from batch VMs, and keep \
                     shared VMs in one cpu group rather than per-VM groups.",
                )
                .case("who-stole-my-cpu-talk.md"),
            );
        }
    }
}

pub fn numa_balancing(m: &MachineModel, out: &mut Vec<Finding>) {
    let h = &m.t1.host;
    let Some(mode) = h.numa_balancing else { return };
    if mode == 0 || h.nodes.len() < 2 || h.vms.is_empty() {
        return;
    }
    // What the migration stopper threads (which move tasks, NUMA balancing's
    // swaps among them) took from the vCPUs.
    let attributed = m.host.attribution.available();
    let migration_share = attributed.then(|| {
        m.host
            .culprits
            .iter()
            .filter(|c| {
                c.charge.culprit.kind == Kind::HostKthread && c.charge.culprit.name == "migration"
            })
            .map(|c| c.charge.share)
            .sum::<f64>()
    });
    let migration_cpus = m
        .host
        .host_work
        .top
        .iter()
        .find(|w| w.culprit.kind == Kind::HostKthread && w.culprit.name == "migration")
        .map_or(0.0, |w| w.run_cpus);
    let cited = match migration_share {
        Some(s) => format!("; migration threads caused {:.1}% of vCPU wait", 100.0 * s),
        None => format!(
            "; migration threads ran {:.2} CPUs (no attribution: {})",
            migration_cpus, m.host.attribution.reason
        ),
    };
    out.push(
        Finding::new("host.numa-balancing", Severity::Warning, format!("Automatic NUMA balancing is on (mode {mode}) on a {}-node host running VMs{cited}", h.nodes.len()))
            .evidence("migration_wait_share", migration_share.map(|s| round(s, 3)))
            .evidence("migration_run_cpus", round(migration_cpus, 3))
            .evidence("numa_balancing", mode)
            .evidence("nodes", h.nodes.len())
            .evidence("vms", h.vms.len())
            .files(&["/proc/sys/kernel/numa_balancing", "/sys/devices/system/node/node*/cpulist"])
            .remedy(
                "NUMA balancing unmaps guest memory periodically to sample accesses (hinting faults stall vCPUs) and \
                 migrates pages under the VM. Place VMs explicitly instead (pin each VM inside one node; `stealscope \
                 place`, planned, does it safely) and turn it off: `sysctl -w kernel.numa_balancing=0`, persisted in /etc/sysctl.d/.",
            )
            .reference("Documentation/admin-guide/sysctl/kernel.rst (numa_balancing)")
            .case("who-stole-my-cpu-talk.md"),
    );
}

pub fn vm_spans_nodes(m: &MachineModel, out: &mut Vec<Finding>) {
    let h = &m.t1.host;
    if h.nodes.len() < 2 {
        return;
    }
    let node_of = |cpu: u32| h.nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.id);
    for vm in &h.vms {
        let mut cpu_nodes: Vec<u32> = vm
            .vcpus
            .iter()
            .filter_map(|(_, t)| t.cpus_allowed.as_ref())
            .flatten()
            .filter_map(|&c| node_of(c))
            .collect();
        cpu_nodes.sort_unstable();
        cpu_nodes.dedup();
        let total: u64 = vm
            .numa_bytes
            .as_ref()
            .map(|b| b.values().sum())
            .unwrap_or(0);
        let mem_nodes: Vec<u32> = vm
            .numa_bytes
            .iter()
            .flatten()
            .filter(|(_, &b)| total > 0 && b as f64 / total as f64 >= SPAN_MEMORY_SHARE)
            .map(|(&n, _)| n)
            .collect();
        if cpu_nodes.len() < 2 && mem_nodes.len() < 2 {
            continue;
        }
        out.push(
            Finding::new("host.vm-spans-nodes", Severity::Warning, format!("VM {} spans NUMA nodes (vCPUs may run on nodes {cpu_nodes:?}, memory on {mem_nodes:?})", vm.name))
                .evidence("vm", vm.name.clone())
                .evidence("pid", vm.pid)
                .evidence("vcpu_nodes", Evidence::of(&cpu_nodes))
                .evidence("memory_nodes", Evidence::of(&mem_nodes))
                .evidence("memory_mib_per_node", Evidence::of(&vm.numa_bytes.as_ref().map(|b| b.iter().map(|(n, v)| (n.to_string(), v >> 20)).collect::<std::collections::BTreeMap<_, _>>())))
                .files(&["/proc/<pid>/task/<tid>/status (Cpus_allowed_list)", "/proc/<pid>/numa_maps", "/sys/devices/system/node/node*/cpulist"])
                .remedy(
                    "Remote memory accesses cost 30-100% more and cross-node vCPUs share caches badly. Keep the VM \
                     inside one node where it fits: pin its vCPUs to one node (virsh vcpupin / numatune, or cpusets) \
                     and move its memory there after checking the node's free memory (`stealscope place`, planned, \
                     automates this safely).",
                )
                .case("who-stole-my-cpu-talk.md"),
        );
    }
}

/// (major, minor, patch, is_rc) from "6.19.3-200.fc43.x86_64" or "7.1.0-rc4".
pub fn kernel_version(release: &str) -> Option<(u32, u32, u32, bool)> {
    let core = release
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()?;
    let mut it = core.split('.').map(|p| p.parse::<u32>().ok());
    let major = it.next()??;
    let minor = it.next()??;
    let patch = it.next().flatten().unwrap_or(0);
    Some((major, minor, patch, release.contains("-rc")))
}

pub fn kvmclock_ipi_storm(m: &MachineModel, out: &mut Vec<Finding>) {
    let o = &m.t1;
    if o.host.vms.is_empty() {
        return;
    }
    let Some(rel) = o.osrelease.as_deref() else {
        return;
    };
    let Some((maj, min, _, rc)) = kernel_version(rel) else {
        return;
    };
    // The rate limit was reverted for 6.19 (446fcce2a52b) and restored by
    // 8fe2e698fce4, expected in 7.1; 6.19.y/7.0.y stable may have backports.
    let in_range = (maj, min) == (6, 19) || (maj, min) == (7, 0) || ((maj, min) == (7, 1) && rc);
    if !in_range {
        return;
    }
    let rate = |name: &str| {
        m.irq
            .iter()
            .filter_map(|c| c.sources.iter().find(|s| s.name == name).map(|s| s.per_s))
            .fold(0.0, f64::max)
    };
    // kvm_vcpu_kick reaches other host CPUs as reschedule IPIs (RES) and
    // function calls (CAL); either one storming is the signature.
    let (cal_max, res_max) = (rate("CAL"), rate("RES"));
    let clock = o.clocksource.current.clone().unwrap_or_default();
    let no_master_clock = !clock.is_empty() && clock != "tsc";
    let storm = cal_max.max(res_max) >= KVMCLOCK_IPI_PER_S;
    if !storm && !no_master_clock {
        return;
    }
    let (sev, verdict) = match (storm, no_master_clock) {
        (true, true) => (Severity::Critical, "affected"),
        _ => (Severity::Warning, "possibly affected"),
    };
    out.push(
        Finding::new(
            "host.kvmclock-ipi-storm",
            sev,
            format!("Host kernel {rel} is in the kvmclock IPI storm range and looks {verdict} (IPIs up to {:.0}/s per CPU, clocksource {clock})", cal_max.max(res_max)),
        )
        .evidence("kernel", rel)
        .evidence("verdict", verdict)
        .evidence("cal_per_s_max", round(cal_max, 0))
        .evidence("res_per_s_max", round(res_max, 0))
        .evidence("host_clocksource", clock.clone())
        .evidence("vms_cannot_use_master_clock", no_master_clock)
        .evidence("threshold_ipi_per_s", KVMCLOCK_IPI_PER_S)
        .files(&["/proc/sys/kernel/osrelease", "/proc/interrupts", "/sys/devices/system/clocksource/clocksource0/current_clocksource"])
        .remedy(format!(
            "6.19 removed the rate limit on global kvmclock updates (446fcce2a52b): every vCPU that moves to another \
             pCPU without the master clock kicks all vCPUs of its VM. Fixed by 8fe2e698fce4 \"KVM: x86: Rate-limit \
             global clock updates on vCPU load\" (7.1); a stable kernel may carry the backport, which the version alone \
             cannot show. Upgrade to a kernel with the fix or run 6.18.{} Meanwhile keep VMs on the master clock (host \
             clocksource tsc{}) and pin vCPUs so they migrate less.",
            if no_master_clock { "" } else { " Confirm with the tracepoint kvm:kvm_update_master_clock (masterclock 0 = affected)." },
            if no_master_clock { format!("; it is {clock} now, so no VM can use the master clock") } else { String::new() }
        ))
        .reference("LKML 2026-03-21 [REGRESSION 6.19, BISECTED] kvmclock rate-limit removal causes IPI storm")
        .reference("commit 8fe2e698fce4a95a3ac2c25fe59832a3c22534c6")
        .case("kvmclock-ipi-storm-regression.txt"),
    );
}

/// What KVM uses decides: the kvm_intel `ept` / kvm_amd `npt` parameter
/// (KVM clears it itself when the CPU lacks the feature, and an admin can set
/// it to 0); where the module is not loaded, what the CPU offers (cpuinfo).
pub fn no_ept(m: &MachineModel, out: &mut Vec<Finding>) {
    let o = &m.t1;
    let p = &o.kvm_params;
    let ci = o.cpuinfo.as_ref();
    let cpu_has =
        |f: &str| ci.map(|c| c.has(f) || c.vmx_flags.as_ref().is_some_and(|v| v.contains(f)));
    let (missing, arch, module, param) = match (p.ept, p.npt) {
        (Some(false), _) => (
            "ept",
            "VT-x",
            "kvm_intel",
            stealscope_readers::kvm_params::EPT,
        ),
        (_, Some(false)) => (
            "npt",
            "AMD-V",
            "kvm_amd",
            stealscope_readers::kvm_params::NPT,
        ),
        (Some(true), _) | (_, Some(true)) => return,
        _ => {
            let Some(c) = ci else { return };
            if c.has("vmx") && cpu_has("ept") == Some(false) {
                (
                    "ept",
                    "VT-x",
                    "kvm_intel",
                    stealscope_readers::kvm_params::EPT,
                )
            } else if c.has("svm") && !c.has("npt") {
                (
                    "npt",
                    "AMD-V",
                    "kvm_amd",
                    stealscope_readers::kvm_params::NPT,
                )
            } else {
                return;
            }
        }
    };
    let param_value = if missing == "ept" { p.ept } else { p.npt };
    let cpu_feature = cpu_has(missing);
    // Turned off although the CPU has it: an admin's choice, undone by a reload.
    let by_param = param_value == Some(false) && cpu_feature == Some(true);
    let upper = missing.to_uppercase();
    let title = if by_param {
        format!("{upper} is turned off ({module} {missing}=N) although the CPU has it: KVM uses shadow paging")
    } else {
        format!("{arch} without {upper}: KVM uses shadow paging")
    };
    let remedy = if by_param {
        format!(
            "Without two-dimensional paging every guest page-table change and CR3 switch is a VM exit; guests with \
             KPTI (no PCID) become several times slower. The CPU supports {upper}: remove `{missing}=0` from \
             /etc/modprobe.d/*.conf (or `{}.{missing}=0` from the kernel command line), then reload {module} with \
             every VM stopped (`modprobe -r {module} && modprobe {module}`) or reboot; check that {param} reads Y.",
            module.replace('_', "-")
        )
    } else {
        format!(
            "Without two-dimensional paging every guest page-table change and CR3 switch is a VM exit; guests with \
             KPTI (no PCID) become several times slower. Enable {upper} in firmware, check that the {module} `{missing}` \
             module parameter is Y ({param}), and for nested hosts ask the outer hypervisor to expose it."
        )
    };
    out.push(
        Finding::new("host.no-ept", Severity::Critical, title)
            .evidence("missing_flag", missing)
            .evidence("module_parameter", Evidence::of(&param_value))
            .evidence("cpu_has_feature", Evidence::of(&cpu_feature))
            .evidence(
                "vmx_flags",
                Evidence::of(&ci.and_then(|c| c.vmx_flags.clone())),
            )
            .evidence("vms", m.t1.host.vms.len())
            .files(&["/proc/cpuinfo", param])
            .remedy(remedy)
            .case("kpti-shadow-paging-slow-vm.txt"),
    );
}

pub fn hlt_exits_dominant(m: &MachineModel, out: &mut Vec<Finding>) {
    let d = |name: &str| -> u64 {
        m.host
            .kvm
            .iter()
            .filter_map(|vm| vm.counters.get(name))
            .sum()
    };
    let (exits, halts) = (d("exits"), d("halt_exits"));
    if exits == 0 || (halts as f64 / exits as f64) < HLT_EXIT_SHARE {
        return;
    }
    let polls_ok = d("halt_successful_poll");
    let polls = d("halt_attempted_poll");
    let mut sources: Vec<&str> = m.host.kvm.iter().map(|k| k.source).collect();
    sources.sort_unstable();
    sources.dedup();
    out.push(
        Finding::new("host.hlt-exits-dominant", Severity::Info, format!("HLT exits are {:.0}% of all KVM exits: guests idle by halting", 100.0 * halts as f64 / exits as f64))
            .evidence("exits", exits)
            .evidence("halt_exits", halts)
            .evidence("halt_attempted_poll", polls)
            .evidence("halt_successful_poll", polls_ok)
            .evidence("exits_per_s", round(exits as f64 / m.wall_s, 0))
            .evidence("sources", Evidence::of(&sources))
            .files(&[
                "/sys/kernel/debug/kvm/<pid>-<fd>/{exits,halt_exits,halt_*_poll}",
                "KVM binary stats (stats fd or QMP query-stats)",
            ])
            .remedy(
                "Each HLT exit costs a VM exit and, unless host halt-polling catches the wake-up, a host reschedule. \
                 For latency-sensitive VMs on dedicated CPUs advertise KVM_HINTS_REALTIME (QEMU \
                 `kvm-hint-dedicated=on`) so guests use haltpoll, or raise /sys/module/kvm/parameters/halt_poll_ns.",
            )
            .reference("Documentation/virt/guest-halt-polling.rst")
            .case("haltpoll-hypervisor-cpuid.txt"),
    );
}

pub fn swap_pressure(m: &MachineModel, out: &mut Vec<Finding>) {
    let swapped: Vec<_> =
        m.t1.host
            .vms
            .iter()
            .filter_map(|v| {
                v.status
                    .as_ref()
                    .and_then(|s| s.vm_swap_kb)
                    .filter(|&k| k > 0)
                    .map(|k| (v, k))
            })
            .collect();
    if swapped.is_empty() {
        return;
    }
    let mem = m.t1.memory.clone();
    out.push(
        Finding::new("host.swap-pressure", Severity::Warning, format!("{} VM(s) have guest memory swapped out on the host", swapped.len()))
            .evidence("vms", Evidence::of(&swapped.iter().map(|(v, k)| evidence!{"vm" => v.name, "pid" => v.pid, "swap_mib" => k >> 10}).collect::<Vec<_>>()))
            .evidence("host_swap_free_mib", Evidence::of(&mem.as_ref().and_then(|m| m.swap_free_bytes).map(|b| b >> 20)))
            .evidence("host_mem_available_mib", Evidence::of(&mem.as_ref().and_then(|m| m.available_bytes).map(|b| b >> 20)))
            .files(&["/proc/<pid>/status (VmSwap)", "/proc/meminfo"])
            .remedy(
                "A vCPU touching swapped guest memory stalls for a disk read (guests see async page faults, HYP \
                 interrupts, and steal). Reduce host memory overcommit, and do not move such a VM's memory between \
                 NUMA nodes until it is back in RAM.",
            ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::host::busy;
    use crate::testing::TestMachine;

    fn one_vm() -> TestMachine {
        TestMachine::guest().vm(100, "web1", &[busy(1.0, 0.0)])
    }

    fn ids(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn a_light_vm_robbed_next_to_a_busy_one_fires() {
        let m = TestMachine::guest().vm(100, "batch", &[busy(4.0, 0.5)]).vm(
            200,
            "light",
            &[busy(0.5, 0.5)],
        );
        let f = m.run(idle_vm_penalty);
        assert_eq!(ids(&f), ["host.idle-vm-penalty"]);
        assert!(f[0].title.contains("light"), "{}", f[0].title);
    }

    #[test]
    fn a_light_vm_that_did_not_wait_is_silent() {
        let m = TestMachine::guest().vm(100, "batch", &[busy(4.0, 0.5)]).vm(
            200,
            "light",
            &[busy(0.5, 0.0)],
        );
        assert!(m.run(idle_vm_penalty).is_empty());
    }

    fn numa(mode: &str) -> TestMachine {
        one_vm()
            .nodes(&["0", "1"])
            .file("/proc/sys/kernel/numa_balancing", format!("{mode}\n"))
    }

    #[test]
    fn numa_balancing_on_two_nodes_fires_and_off_is_silent() {
        assert_eq!(ids(&numa("1").run(numa_balancing)), ["host.numa-balancing"]);
        assert!(numa("0").run(numa_balancing).is_empty());
        // One node: nothing to balance.
        let one = one_vm()
            .nodes(&["0-1"])
            .file("/proc/sys/kernel/numa_balancing", "1\n");
        assert!(one.run(numa_balancing).is_empty());
    }

    fn allowed(cpus: &str) -> TestMachine {
        one_vm()
            .nodes(&["0", "1"])
            .status(100, 101, &format!("Cpus_allowed_list:\t{cpus}\n"))
    }

    #[test]
    fn vcpus_allowed_on_two_nodes_fire_and_on_one_are_silent() {
        assert_eq!(
            ids(&allowed("0-1").run(vm_spans_nodes)),
            ["host.vm-spans-nodes"]
        );
        assert!(allowed("1").run(vm_spans_nodes).is_empty());
    }

    fn kernel(release: &str) -> TestMachine {
        one_vm()
            .file("/proc/sys/kernel/osrelease", format!("{release}\n"))
            .file(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
                "hpet\n",
            )
    }

    #[test]
    fn a_kernel_in_the_storm_range_without_master_clock_fires() {
        let f = kernel("6.19.2").run(kvmclock_ipi_storm);
        assert_eq!(ids(&f), ["host.kvmclock-ipi-storm"]);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(kernel("6.18.5").run(kvmclock_ipi_storm).is_empty());
    }

    #[test]
    fn ept_turned_off_fires_and_on_is_silent() {
        let ept = |v: &str| one_vm().file(stealscope_readers::kvm_params::EPT, format!("{v}\n"));
        let f = ept("N").run(no_ept);
        assert_eq!(ids(&f), ["host.no-ept"]);
        assert_eq!(f[0].severity, Severity::Critical);
        assert!(ept("Y").run(no_ept).is_empty());
    }

    #[test]
    fn hlt_exits_fire_when_most_exits_are_halts() {
        let exits = |halts: u64| {
            one_vm().kvm_debugfs(
                100,
                &[("exits", 1_000, 2_000), ("halt_exits", 100, 100 + halts)],
            )
        };
        assert_eq!(
            ids(&exits(800).run(hlt_exits_dominant)),
            ["host.hlt-exits-dominant"]
        );
        assert!(exits(100).run(hlt_exits_dominant).is_empty());
    }

    #[test]
    fn swapped_guest_memory_fires_and_none_is_silent() {
        let swap = |kb: u64| one_vm().status(100, 100, &format!("VmSwap:\t{kb} kB\n"));
        assert_eq!(ids(&swap(2048).run(swap_pressure)), ["host.swap-pressure"]);
        assert!(swap(0).run(swap_pressure).is_empty());
    }

    #[test]
    fn versions() {
        assert_eq!(
            kernel_version("6.19.3-200.fc43.x86_64"),
            Some((6, 19, 3, false))
        );
        assert_eq!(kernel_version("7.1.0-rc4"), Some((7, 1, 0, true)));
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18, 44, false)));
        assert_eq!(kernel_version("garbage"), None);
    }
}
