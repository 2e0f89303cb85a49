//! Interrupt storms: in a guest most IPIs and timer interrupts are VM exits,
//! so a high rate costs far more than on bare metal.

use crate::finding::{round, Finding, Severity};
use serde_json::json;
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

pub fn storm(m: &MachineModel, out: &mut Vec<Finding>) {
    for cpu in &m.irq {
        if cpu.total_per_s < IRQ_STORM_PER_S {
            continue;
        }
        let Some(top) = cpu.sources.first() else {
            continue;
        };
        let sev = if cpu.total_per_s >= IRQ_STORM_CRITICAL_PER_S {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let key = if top.name.bytes().all(|b| b.is_ascii_digit()) {
            "device"
        } else {
            top.name.as_str()
        };
        out.push(
            Finding::new(
                "irq.storm",
                sev,
                format!(
                    "CPU {} takes {:.0} interrupts/s, mostly {} ({:.0}/s)",
                    cpu.cpu, cpu.total_per_s, top.label, top.per_s
                ),
            )
            .evidence("cpu", cpu.cpu)
            .evidence("total_per_s", round(cpu.total_per_s, 0))
            .evidence("dominant", top.name.clone())
            .evidence("dominant_label", top.label.clone())
            .evidence("dominant_per_s", round(top.per_s, 0))
            .evidence(
                "top_sources",
                json!(cpu
                    .sources
                    .iter()
                    .take(5)
                    .map(|s| json!({"name": s.name, "label": s.label, "per_s": round(s.per_s, 0)}))
                    .collect::<Vec<_>>()),
            )
            .evidence("threshold_per_s", IRQ_STORM_PER_S)
            .files(&["/proc/interrupts"])
            .remedy(advice(key))
            .reference("arch/x86/kernel/irq.c (arch_show_interrupts)")
            .case(if key == "CAL" {
                "kvmclock-ipi-storm-regression.txt"
            } else {
                "guest-micro-jitter-case.txt"
            }),
        );
    }
}
