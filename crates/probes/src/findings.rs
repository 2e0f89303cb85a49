//! The `jitter.*` findings from probe reports: the same [`Finding`] every
//! rule builds, so the doctor report ranks them with the rest.

use crate::preempt::PreemptReport;
use crate::wakeup::WakeupReport;
use stealscope_findings::{evidence, Evidence, Finding, Severity};

/// p99 wake-up latency that is worth a warning. A real-time thread on a
/// well-configured KVM guest wakes within a few tens of µs at p99; above
/// 100 µs a 1 kHz loop loses a tenth of its period once in a hundred wakeups.
pub const WAKEUP_P99_WARN_US: f64 = 100.0;
/// A wake-up this late is critical: a whole period of a 1 kHz loop is gone,
/// and it is the scale of the case's 18.4 ms stalls.
pub const WAKEUP_MAX_CRITICAL_US: f64 = 1_000.0;
/// Unexplained (hypervisor) time above this share of a CPU is worth a
/// warning: it is already more than /proc/stat steal below 1% would suggest
/// is harmless, and it arrives as stalls, not as a slower CPU.
pub const PREEMPT_UNEXPLAINED_WARN_PCT: f64 = 1.0;
/// Any single unexplained gap this long is worth a warning: it is longer than
/// a guest IRQ ever takes and longer than a request's budget for a syscall.
pub const PREEMPT_GAP_WARN_US: f64 = 1_000.0;
/// Critical: 5% of a CPU taken in stalls (the case's 4% steal spikes cost
/// 26% throughput)...
pub const PREEMPT_UNEXPLAINED_CRITICAL_PCT: f64 = 5.0;
/// ...or a single stall of 10 ms or more (the case saw 18.4 ms).
pub const PREEMPT_GAP_CRITICAL_US: f64 = 10_000.0;

const CASE: &str = "guest-micro-jitter-case.txt";

fn sev(critical: bool) -> Severity {
    if critical {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// The findings these reports support (none when their conditions do not hold).
pub fn jitter_findings(
    wakeup: Option<&WakeupReport>,
    preempt: Option<&PreemptReport>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(w) = wakeup {
        if let Some(f) = wakeup_finding(w) {
            out.push(f);
        }
    }
    if let Some(p) = preempt {
        if let Some(f) = preempt_finding(p) {
            out.push(f);
        }
    }
    out
}

fn wakeup_finding(w: &WakeupReport) -> Option<Finding> {
    let o = &w.overall;
    if o.samples == 0 || (o.p99_us <= WAKEUP_P99_WARN_US && o.max_us <= WAKEUP_MAX_CRITICAL_US) {
        return None;
    }
    // Without SCHED_FIFO the figure includes guest scheduling; never call
    // that critical on its own.
    let critical = o.max_us > WAKEUP_MAX_CRITICAL_US && w.policy == "fifo";
    let worst = w
        .cpus
        .iter()
        .max_by(|a, b| a.stats.max_us.total_cmp(&b.stats.max_us))?;
    let title = format!(
        "Timer wake-ups late: p99 {:.0} µs, max {:.1} ms (CPU {}){}",
        o.p99_us,
        o.max_us / 1000.0,
        worst.stats.cpu.unwrap_or(0),
        if w.policy == "fifo" {
            ""
        } else {
            " - measured without SCHED_FIFO"
        }
    );
    Some(
        Finding::new("jitter.wakeup-latency", sev(critical), title)
            .evidence("interval_us", w.interval_us)
            .evidence("duration_s", w.duration_s)
            .evidence("policy", &w.policy)
            .evidence("priority", w.priority)
            .evidence("memory_locked", w.memory_locked)
            .evidence("pm_qos_us", w.pm_qos_us)
            .evidence("p50_us", o.p50_us)
            .evidence("p99_us", o.p99_us)
            .evidence("p999_us", o.p999_us)
            .evidence("max_us", o.max_us)
            .evidence("p99_warn_us", WAKEUP_P99_WARN_US)
            .evidence("max_critical_us", WAKEUP_MAX_CRITICAL_US)
            .evidence("per_cpu", Evidence::of(&w.cpus))
            .evidence("histogram", Evidence::of(&o.buckets))
            .evidence("notes", w.notes.clone())
            .files(&["probe:wakeup", "/proc/stat"])
            .remedy(
                "A real-time thread woke late. If `stealscope probe preempt` shows unexplained gaps \
                 of the same size, the hypervisor is descheduling the vCPU: ask the provider for \
                 dedicated or pinned vCPUs and send this evidence; nothing inside the guest removes it. \
                 If the gaps are guest IRQs or threads, move them off the latency-critical CPUs \
                 (irqaffinity=, isolcpus=/nohz_full= with rcu_nocbs=) and hold a PM QoS limit \
                 (`stealscope probe wakeup --pm-qos-us 0` shows the gain) while the service runs.",
            )
            .reference("rt-tests cyclictest(8)")
            .reference("Documentation/power/pm_qos_interface.rst (/dev/cpu_dma_latency)")
            .reference(
                "Documentation/admin-guide/kernel-parameters.txt (nohz_full, isolcpus, rcu_nocbs)",
            )
            .case(CASE),
    )
}

fn preempt_finding(p: &PreemptReport) -> Option<Finding> {
    let worst_pct = p
        .cpus
        .iter()
        .max_by(|a, b| a.unexplained_pct.total_cmp(&b.unexplained_pct))?;
    let max_gap = p.overall.max_unexplained_gap_us;
    if worst_pct.unexplained_pct <= PREEMPT_UNEXPLAINED_WARN_PCT && max_gap <= PREEMPT_GAP_WARN_US {
        return None;
    }
    // Counter attribution infers IRQ vs hypervisor; keep it at warning.
    let critical = p.attribution == "tracefs"
        && (worst_pct.unexplained_pct >= PREEMPT_UNEXPLAINED_CRITICAL_PCT
            || max_gap >= PREEMPT_GAP_CRITICAL_US);
    let per_cpu: Vec<Evidence> = p
        .cpus
        .iter()
        .map(|c| {
            evidence! {
                "cpu" => c.cpu,
                "unexplained_pct" => c.unexplained_pct,
                "uncovered_pct" => c.uncovered_pct,
                "steal_pct" => c.steal_pct,
                "noise_us_per_s" => c.noise_us_per_s,
                "available_pct" => c.available_pct,
                "unexplained_gaps" => c.classes.unexplained.count,
                "max_unexplained_gap_us" => c.classes.unexplained.max_us,
                "irq_gaps" => c.classes.irq.count,
                "softirq_gaps" => c.classes.softirq.count,
                "thread_gaps" => c.classes.thread.count,
                "unexplained_histogram" => c.unexplained_stats.buckets,
            }
        })
        .collect();
    let mut longest: Vec<&crate::preempt::Gap> = p
        .gaps
        .iter()
        .filter(|g| g.class == crate::preempt::GapClass::Unexplained)
        .collect();
    longest.sort_by(|a, b| b.us.total_cmp(&a.us));
    longest.truncate(10);
    let files: Vec<&str> = if p.attribution == "tracefs" {
        vec![
            "/sys/kernel/tracing (irq, irq_vectors, softirq, sched_switch events)",
            "/proc/stat",
        ]
    } else {
        vec!["/proc/interrupts", "/proc/softirqs", "/proc/stat"]
    };
    let title = format!(
        "The vCPU stopped for spans no guest event explains: {:.2}% of CPU {} (longest {:.2} ms)",
        worst_pct.unexplained_pct,
        worst_pct.cpu,
        max_gap / 1000.0
    );
    Some(
        Finding::new("jitter.hypervisor-preemption", sev(critical), title)
            .evidence("attribution", &p.attribution)
            .evidence("duration_s", p.duration_s)
            .evidence("threshold_us", p.threshold_us)
            .evidence("policy", &p.policy)
            .evidence("unexplained_pct", p.overall.unexplained_pct)
            .evidence("steal_pct", p.overall.steal_pct)
            .evidence("max_unexplained_gap_us", max_gap)
            .evidence("unexplained_warn_pct", PREEMPT_UNEXPLAINED_WARN_PCT)
            .evidence("gap_warn_us", PREEMPT_GAP_WARN_US)
            .evidence("per_cpu", per_cpu)
            .evidence("longest_unexplained_gaps", Evidence::of(&longest))
            .evidence("notes", p.notes.clone())
            .files(&files)
            .remedy(
                "These stalls are the hypervisor running something else on this vCPU's physical CPU: the \
                 guest took no interrupt and ran no other thread meanwhile. /proc/stat steal shows them only \
                 as 10 ms ticks. Nothing inside the guest fixes them: ask the provider for dedicated or \
                 pinned vCPUs or a less loaded host, and send this evidence (`stealscope probe preempt \
                 --json`). Inside the guest, keep latency-critical work on the CPUs with the least \
                 unexplained time and size for the lost capacity.",
            )
            .reference("Documentation/trace/osnoise-tracer.rst")
            .reference("Documentation/virt/kvm/x86/msr.rst (MSR_KVM_STEAL_TIME)")
            .case(CASE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preempt::{Classes, PreemptCpu, PreemptOverall};
    use crate::stats::LatencyStats;
    use crate::wakeup::WakeupCpu;

    fn stats(p99: f64, max: f64) -> LatencyStats {
        LatencyStats {
            cpu: Some(1),
            samples: 1000,
            min_us: 2.0,
            mean_us: 5.0,
            p50_us: 4.0,
            p90_us: 8.0,
            p99_us: p99,
            p999_us: p99 * 2.0,
            max_us: max,
            buckets: vec![],
        }
    }

    fn wakeup(p99: f64, max: f64, policy: &str) -> WakeupReport {
        WakeupReport {
            probe: "wakeup",
            duration_s: 5.0,
            interval_us: 1000.0,
            priority: 95,
            policy: policy.into(),
            memory_locked: true,
            pm_qos_us: None,
            cpus: vec![WakeupCpu {
                stats: stats(p99, max),
                overruns: 0,
                steal_pct: Some(0.1),
                policy: policy.into(),
            }],
            overall: LatencyStats {
                cpu: None,
                ..stats(p99, max)
            },
            cpu_time_s: 0.01,
            interrupted: false,
            notes: vec![],
        }
    }

    fn preempt(unexpl_pct: f64, max_gap_us: f64, attribution: &str) -> PreemptReport {
        let mut classes = Classes::default();
        classes.unexplained.max_us = max_gap_us;
        classes.unexplained.count = 3;
        PreemptReport {
            probe: "preempt",
            start_monotonic_ns: 0,
            duration_s: 5.0,
            threshold_us: 5.0,
            priority: 0,
            policy: "other".into(),
            memory_locked: true,
            attribution: attribution.into(),
            trace_instance: None,
            trace_events: 0,
            trace_lost_events: 0,
            cpus: vec![PreemptCpu {
                cpu: 1,
                runtime_s: 5.0,
                gaps: 10,
                noise_us_per_s: 100.0,
                available_pct: 99.0,
                max_gap_us,
                classes,
                unexplained_pct: unexpl_pct,
                uncovered_pct: unexpl_pct,
                steal_pct: Some(0.5),
                policy: "other".into(),
                gap_stats: stats(10.0, max_gap_us),
                unexplained_stats: stats(10.0, max_gap_us),
                sources: vec![],
                dropped_gaps: 0,
            }],
            overall: PreemptOverall {
                noise_us_per_s: 100.0,
                available_pct: 99.0,
                unexplained_pct: unexpl_pct,
                max_gap_us,
                max_unexplained_gap_us: max_gap_us,
                steal_pct: Some(0.5),
            },
            gaps: vec![],
            gaps_total: 10,
            cpu_time_s: 5.0,
            interrupted: false,
            notes: vec![],
        }
    }

    fn valid_shape(f: &Finding) {
        assert!(!f.title.is_empty() && !f.remedy.is_empty() && !f.references.is_empty());
        assert!(!f.file_list().is_empty());
    }

    #[test]
    fn wakeup_thresholds() {
        assert!(jitter_findings(Some(&wakeup(40.0, 300.0, "fifo")), None).is_empty());
        let f = &jitter_findings(Some(&wakeup(150.0, 300.0, "fifo")), None)[0];
        valid_shape(f);
        assert_eq!(f.id, "jitter.wakeup-latency");
        assert_eq!(f.severity, Severity::Warning);
        let f = &jitter_findings(Some(&wakeup(40.0, 18_400.0, "fifo")), None)[0];
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.title.contains("18.4 ms"));
        let f = &jitter_findings(Some(&wakeup(40.0, 18_400.0, "other")), None)[0];
        assert_eq!(f.severity, Severity::Warning);
    }

    #[test]
    fn preemption_thresholds() {
        assert!(jitter_findings(None, Some(&preempt(0.5, 400.0, "tracefs"))).is_empty());
        let f = &jitter_findings(None, Some(&preempt(1.5, 400.0, "tracefs")))[0];
        valid_shape(f);
        assert_eq!(f.id, "jitter.hypervisor-preemption");
        assert_eq!(f.severity, Severity::Warning);
        let f = &jitter_findings(None, Some(&preempt(0.2, 1_500.0, "tracefs")))[0];
        assert_eq!(f.severity, Severity::Warning);
        let f = &jitter_findings(None, Some(&preempt(0.2, 18_400.0, "tracefs")))[0];
        assert_eq!(f.severity, Severity::Critical);
        let f = &jitter_findings(None, Some(&preempt(0.2, 18_400.0, "counters")))[0];
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.file_list()[0], "/proc/interrupts");
        let both = jitter_findings(
            Some(&wakeup(150.0, 300.0, "fifo")),
            Some(&preempt(6.0, 400.0, "tracefs")),
        );
        assert_eq!(both.len(), 2);
        assert_eq!(both[1].severity, Severity::Critical);
    }
}
