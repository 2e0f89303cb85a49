//! Interrupt storms: in a guest most IPIs and timer interrupts are VM exits,
//! so a high rate costs far more than on bare metal; on a host many of them
//! are caused by the VMs.

use crate::finding::{evidence, round, Evidence, Finding, Severity};
use crate::roles::Roles;
use stealscope_model::irq_rates::CpuIrqRates;
use stealscope_model::MachineModel;

/// Total interrupts per second on one CPU above which we call it a storm:
/// a busy guest CPU sees ~1-4k/s (HZ timer ticks, a few IPIs, device queues).
pub const IRQ_STORM_PER_S: f64 = 10_000.0;
pub const IRQ_STORM_CRITICAL_PER_S: f64 = 50_000.0;

fn advice(source: &str) -> &'static str {
    match source {
        "CAL" => "Function-call IPIs (smp_call_function): cross-CPU flushes and callbacks, each a VM exit. Look for \
                  membarrier/mprotect-heavy workloads and CPU-frequency or perf tools polling all CPUs. If steal rises \
                  at the same time on a 6.19/7.0 host, also suspect the host-side kvmclock IPI storm (its IPIs are \
                  host RES/CAL, invisible here; the guest sees steal): send this report to the provider.",
        "TLB" => "TLB shootdowns: a process changing mappings on many CPUs (munmap/mprotect/madvise churn, THP splitting). \
                  PV TLB flush (kvm-guest: KVM setup pv remote TLB flush) skips preempted vCPUs; check it is enabled.",
        "RES" => "Rescheduling IPIs: wake-ups across CPUs. Pin chatty threads together or reduce cross-CPU wake-ups; with \
                  haltpoll active a polling vCPU is woken without an IPI.",
        "LOC" => "Local timer interrupts: a high timer rate (many hrtimers, `nohz=off`, a high-HZ kernel or busy \
                  timerfd users). Each tick is a VM exit unless the host uses posted timer interrupts.",
        "HYP" => "Hypervisor callbacks: in a KVM guest these are async page faults ('page ready'): the host is faulting \
                  or swapping this VM's memory. Ask the provider about host memory overcommit.",
        _ => "A device interrupt: check the device's queue and interrupt-coalescing settings (ethtool -C for virtio-net), \
              spread queues over CPUs (irqbalance or /proc/irq/N/smp_affinity).",
    }
}

/// The same sources on a KVM host that is not itself a guest: interrupts are
/// not VM exits there, but many are caused by VMs.
fn host_advice(source: &str) -> &'static str {
    match source {
        "CAL" | "RES" => "On a KVM host most reschedule and function-call IPIs are vCPU kicks (kvm_vcpu_kick: waking \
                  or interrupting a vCPU thread on another CPU) and remote TLB flushes of VMM processes. If \
                  host.kvmclock-ipi-storm is reported too, that is the cause. Otherwise look for VMs whose idle vCPUs \
                  halt and are woken by IPIs (host.hlt-exits-dominant) and pin busy VMs so their vCPUs migrate less.",
        "TLB" => "TLB shootdowns on the host: VMM memory being remapped (balloon inflation, THP splits, KSM, page \
                  migration by NUMA balancing). Check host.numa-balancing and memory overcommit features.",
        "LOC" => "Local timer interrupts on the host: many high-resolution timers, e.g. the emulated LAPIC timers of \
                  many vCPUs (each guest timer becomes a host hrtimer without posted timer interrupts), or \
                  `nohz=off`.",
        "PIN" | "PIW" | "NPI" => "Posted-interrupt notifications: interrupts delivered to vCPUs that are running or \
                  being woken; the rate follows the guests' own interrupt load (run `stealscope doctor` in them).",
        _ => "A device interrupt on the host (NIC or NVMe queue): check interrupt coalescing (ethtool -C), spread \
              queues over CPUs (irqbalance or /proc/irq/N/smp_affinity) and keep them off the CPUs that run \
              latency-sensitive vCPUs.",
    }
}

fn source_key(name: &str) -> &str {
    if name.bytes().all(|b| b.is_ascii_digit()) {
        "device"
    } else {
        name
    }
}

/// One finding per dominant source, however many CPUs it floods (a 64-CPU
/// host with a storm gets one finding, naming its CPUs).
pub fn storm(m: &MachineModel, out: &mut Vec<Finding>) {
    let host = Roles::of(m).host_only();
    let mut groups: Vec<(&str, Vec<&CpuIrqRates>)> = Vec::new();
    for cpu in &m.irq {
        if cpu.total_per_s < IRQ_STORM_PER_S {
            continue;
        }
        let Some(top) = cpu.sources.first() else {
            continue;
        };
        let key = source_key(&top.name);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(cpu),
            None => groups.push((key, vec![cpu])),
        }
    }
    for (key, cpus) in groups {
        // The worst CPU stands for the group in title and evidence.
        let Some(worst) = cpus
            .iter()
            .max_by(|a, b| a.total_per_s.total_cmp(&b.total_per_s))
        else {
            continue;
        };
        let Some(top) = worst.sources.first() else {
            continue;
        };
        let sev = if worst.total_per_s >= IRQ_STORM_CRITICAL_PER_S {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let title = if cpus.len() == 1 {
            format!(
                "CPU {} takes {:.0} interrupts/s, mostly {} ({:.0}/s)",
                worst.cpu, worst.total_per_s, top.label, top.per_s
            )
        } else {
            format!(
                "{} CPUs take over {:.0} interrupts/s each, mostly {} (up to {:.0}/s on CPU {})",
                cpus.len(),
                IRQ_STORM_PER_S,
                top.label,
                worst.total_per_s,
                worst.cpu
            )
        };
        let kvmclock = matches!(key, "CAL") || (host && key == "RES");
        out.push(
            Finding::new("irq.storm", sev, title)
                .evidence("cpu", worst.cpu)
                .evidence("cpus", Evidence::of(&cpus.iter().map(|c| c.cpu).collect::<Vec<_>>()))
                .evidence("total_per_s", round(worst.total_per_s, 0))
                .evidence("dominant", top.name.clone())
                .evidence("dominant_label", top.label.clone())
                .evidence("dominant_per_s", round(top.per_s, 0))
                .evidence(
                    "top_sources",
                    Evidence::of(&worst
                        .sources
                        .iter()
                        .take(5)
                        .map(|s| evidence!{"name" => s.name, "label" => s.label, "per_s" => round(s.per_s, 0)})
                        .collect::<Vec<_>>()),
                )
                .evidence(
                    "per_cpu",
                    Evidence::of(&cpus
                        .iter()
                        .map(|c| evidence!{"cpu" => c.cpu, "total_per_s" => round(c.total_per_s, 0)})
                        .collect::<Vec<_>>()),
                )
                .evidence("threshold_per_s", IRQ_STORM_PER_S)
                .files(&["/proc/interrupts"])
                .remedy(if host { host_advice(key) } else { advice(key) })
                .reference("arch/x86/kernel/irq.c (arch_show_interrupts)")
                .case(if kvmclock {
                    "kvmclock-ipi-storm-regression.txt"
                } else {
                    "guest-micro-jitter-case.txt"
                }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestMachine;

    fn machine(cal_t1: u64) -> TestMachine {
        let text = |cal: u64| {
            format!(
                "           CPU0       CPU1       \nNMI:          0          0   Non-maskable interrupts\nCAL: {cal:>10} {:>10}   Function call interrupts\n",
                10
            )
        };
        TestMachine::guest().files("/proc/interrupts", &text(0), &text(cal_t1))
    }

    #[test]
    fn a_function_call_storm_fires_by_rate() {
        // 100,000 CAL in 5 s: 20,000/s on CPU 0, a warning.
        let f = machine(100_000).run(storm);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "irq.storm");
        assert_eq!(f[0].severity, Severity::Warning);
        // 300,000 in 5 s: 60,000/s, critical.
        assert_eq!(machine(300_000).run(storm)[0].severity, Severity::Critical);
    }

    #[test]
    fn below_ten_thousand_per_second_is_silent() {
        assert!(machine(40_000).run(storm).is_empty());
    }
}
