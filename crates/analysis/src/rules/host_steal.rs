//! Host steal verdicts: busy or idle steal judged against ALL runnable work
//! on the host (vCPUs, emulator threads, every other thread's schedstat run
//! and wait), saying who took the time; and `host.noisy-neighbor`, which
//! names one culprit that causes a large share of all vCPU wait.

use super::host::{HOST_STEAL_CRITICAL_PCT, HOST_STEAL_WARN_PCT};
use super::host_who::{basis, culprits, summary, Who};
use crate::finding::{evidence, round, Evidence, Finding, Severity};
use stealscope_model::MachineModel;

/// The VMs' runnable vCPUs fit on the CPUs within this factor: the steal
/// then comes from other work, not from oversubscription by VMs.
pub const VCPUS_FIT_FACTOR: f64 = 1.05;
/// Other host work of at least this many CPUs is worth naming as the cause.
pub const OTHER_WORK_CPUS: f64 = 0.2;
/// A culprit causing at least this share of all vCPU wait (of VMs other
/// than its own) is a noisy neighbour: a quarter is more than any one of
/// four equal competitors takes, so it stands out on any host with a
/// handful of busy VMs, while the steal itself must pass HOST_STEAL_WARN_PCT.
pub const NOISY_SHARE: f64 = 0.25;
/// ...and Critical from this share when the steal is also critical.
pub const NOISY_CRITICAL_SHARE: f64 = 0.5;

fn vm_table(m: &MachineModel) -> Evidence {
    m.host.vms.iter().map(|v| evidence!{"name" => v.name, "pid" => v.pid, "vcpus" => v.vcpus.len(), "steal_pct" => round(v.steal_pct, 2), "util_pct" => round(v.util_pct, 2)}).collect()
}

fn mean_steal(m: &MachineModel) -> Option<f64> {
    let vcpus: Vec<_> = m.host.vms.iter().flat_map(|v| &v.vcpus).collect();
    (!vcpus.is_empty())
        .then(|| vcpus.iter().map(|c| c.host_steal_pct).sum::<f64>() / vcpus.len() as f64)
}

/// The vCPUs' demand in CPUs: run plus run-queue wait of every vCPU thread.
pub(super) fn vcpu_demand(m: &MachineModel) -> f64 {
    m.host
        .vms
        .iter()
        .flat_map(|v| &v.vcpus)
        .map(|c| (c.util_pct + c.host_steal_pct) / 100.0)
        .sum()
}

/// Runnable work in CPUs: (vCPUs, emulator threads, other host work).
fn runnable(m: &MachineModel) -> (f64, f64, f64) {
    let vcpus = vcpu_demand(m);
    let vmm: f64 = m
        .host
        .vms
        .iter()
        .flat_map(|v| &v.others)
        .filter_map(|o| o.util_pct)
        .sum::<f64>()
        / 100.0;
    (vcpus, vmm, m.host.host_work.runnable_cpus())
}

pub fn steal(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(mean) = mean_steal(m) else { return };
    if mean < HOST_STEAL_WARN_PCT {
        return;
    }
    let s = m.host.split;
    let sev = if mean >= HOST_STEAL_CRITICAL_PCT {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let (vcpus, vmm, other) = runnable(m);
    let cpus = m.interval.cpus.len();
    let who = culprits(m);
    let named = summary(&who, 3);
    let by = if named.is_empty() {
        String::new()
    } else {
        format!("; who ran: {named}")
    };
    let work = format!(
        "{:.1} runnable threads on {cpus} CPUs ({vcpus:.1} vCPUs, {:.1} other host work)",
        vcpus + vmm + other,
        vmm + other
    );
    let idle = s.idle_share().unwrap_or(0.0) >= 0.5;
    let vms_fit = vcpus <= cpus as f64 * VCPUS_FIT_FACTOR;
    let f = if idle {
        Finding::new(
            "host.steal.idle",
            sev,
            format!("vCPUs waited {mean:.1}% of the time while host CPUs sat idle ({:.1} CPU-s idle): {work}{by}", s.host_idle_s),
        )
        .remedy(
            "Idle CPUs could have run the waiting vCPUs: this steal is fixable in software. Check vCPU affinity (pinned \
             VMs crowded onto few CPUs while others idle), per-VM cgroup weights and cpusets, and NUMA placement; \
             `stealscope place` proposes and applies a placement reversibly.",
        )
    } else if vms_fit && vmm + other >= OTHER_WORK_CPUS {
        let top = who
            .iter()
            .find(|w| w.kind != "vcpu")
            .map(Who::label)
            .unwrap_or_else(|| "other host work".into());
        Finding::new(
            "host.steal.busy",
            sev,
            format!("vCPUs waited {mean:.1}% of the time with no idle CPU: {work}; the VMs alone fit, {top} took the rest{by}"),
        )
        .remedy(format!(
            "This is not oversubscription by VMs: their {vcpus:.1} runnable vCPUs fit on {cpus} CPUs, and host work \
             ({:.1} CPUs, mostly {top}) competes with them. Give it CPUs of its own away from the vCPUs (taskset or a \
             cpuset), lower its weight (renice, or a cpu cgroup with a lower cpu.weight), or move it off the host; \
             moving VMs is not needed. See host.noisy-neighbor.",
            vmm + other
        ))
    } else {
        // Oversubscribed by VMs; host work on top is named with its own fix.
        let also = who
            .iter()
            .find(|w| w.kind != "vcpu")
            .filter(|_| vmm + other >= OTHER_WORK_CPUS)
            .map(|w| {
                format!(
                    " Host work adds to it ({:.1} runnable CPUs, mostly {}): see host.noisy-neighbor for its own fix.",
                    vmm + other,
                    w.label()
                )
            })
            .unwrap_or_default();
        Finding::new(
            "host.steal.busy",
            sev,
            format!("vCPUs waited {mean:.1}% of the time with no idle CPU: {work}{by}"),
        )
        .remedy(format!(
            "The host is oversubscribed at these moments: more vCPUs want to run than there are CPUs. Only moving VMs \
             (or load) to another host, or reducing vCPU counts of busy VMs, removes this steal. Prefer moving the \
             busiest VMs; re-check with `stealscope host`.{also} How the steal is shared between VMs is a separate \
             matter: see host.cgroup-weight-unfair when it fires."
        ))
    };
    out.push(
        f.evidence("mean_vcpu_steal_pct", round(mean, 2))
            .evidence("vcpu_wait_cpu_s", round(s.vcpu_wait_s, 3))
            .evidence("host_idle_cpu_s", round(s.host_idle_s, 3))
            .evidence("idle_steal_share", round(s.idle_share().unwrap_or(0.0), 3))
            .evidence("busy_steal_share", round(s.busy_share().unwrap_or(0.0), 3))
            .evidence("runnable_vcpus", round(vcpus, 2))
            .evidence("runnable_vmm_threads", round(vmm, 2))
            .evidence("runnable_other_host_work", round(other, 2))
            .evidence("host_cpus", cpus)
            .evidence(
                "who",
                who.iter().take(5).map(Who::json).collect::<Evidence>(),
            )
            .evidence("who_basis", basis(m))
            .evidence("vms", vm_table(m))
            .files(&[
                "/proc/<pid>/task/<tid>/schedstat (every thread)",
                "/proc/stat",
            ])
            .reference("arch/x86/kvm/x86.c record_steal_time (guest steal = host run_delay)")
            .case("who-stole-my-cpu-talk.md"),
    );
}

fn fix(w: &Who) -> String {
    match (w.kind, w.name.as_str()) {
        ("host-process", _) => format!(
            "Give {} CPUs of its own away from the vCPUs (`taskset -apc CPUS {pid}` or a cpuset), lower its weight \
             (`renice -n 10 -p {pid}`, or a cpu cgroup with a lower cpu.weight), or move it to another host.",
            w.label(),
            pid = w.pid.map(|p| p.to_string()).unwrap_or_else(|| "PID".into())
        ),
        ("vcpu", _) => format!(
            "Give VM {} CPUs of its own (pin it apart from its victims), a lower weight for its group, or move it to \
             another host; `stealscope place` plans and applies this reversibly.",
            w.name
        ),
        ("vmm", _) => format!(
            "Keep VM {}'s emulator and I/O threads on housekeeping CPUs away from the vCPUs (`stealscope place` \
             reserves them), and look at why they are busy (I/O, live migration).",
            w.name
        ),
        (_, "ksoftirqd" | "irq-thread" | "irq") => "Move interrupt affinity (/proc/irq/*/smp_affinity_list) and \
             RPS/XPS away from the vCPUs' CPUs, or keep those CPUs for housekeeping.".into(),
        (_, "kswapd" | "kcompactd" | "khugepaged") => "Memory reclaim and compaction run on the vCPUs' CPUs: reduce \
             host memory pressure and overcommit, back guests with preallocated huge pages, and set THP defrag to \
             `madvise`.".into(),
        (_, "migration") => "The stopper threads move tasks between CPUs: pin vCPUs so the balancer moves them less, \
             and see host.numa-balancing.".into(),
        (_, "kworker") => "Keep unbound workqueues off the vCPUs' CPUs (/sys/devices/virtual/workqueue/cpumask) and \
             find the busy work item (`perf record -e workqueue:workqueue_execute_start`).".into(),
        (_, "rcu") => "Offload RCU callbacks from the vCPUs' CPUs (`rcu_nocbs=` and `rcu_nocb_poll` on the host \
             kernel command line).".into(),
        _ => "Keep this work on CPUs the vCPUs do not use (housekeeping CPUs), or lower its priority.".into(),
    }
}

pub fn noisy_neighbor(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(mean) = mean_steal(m) else { return };
    if mean < HOST_STEAL_WARN_PCT {
        return;
    }
    let attributed = m.host.attribution.available();
    // An estimate from run times holds only when CPUs were busy.
    if !attributed && m.host.split.busy_share().unwrap_or(0.0) < 0.5 {
        return;
    }
    for w in culprits(m) {
        if w.neighbor_share < NOISY_SHARE || matches!(w.kind, "unknown") {
            continue;
        }
        let sev = if w.neighbor_share >= NOISY_CRITICAL_SHARE && mean >= HOST_STEAL_CRITICAL_PCT {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let verb = if attributed {
            "caused"
        } else {
            "likely caused"
        };
        let victims = w
            .victims
            .iter()
            .filter(|v| w.vm.as_ref() != Some(*v))
            .cloned()
            .collect::<Vec<_>>();
        out.push(
            Finding::new(
                "host.noisy-neighbor",
                sev,
                format!(
                    "{} {verb} {:.0}% of all vCPU wait (victims: {})",
                    w.label(),
                    100.0 * w.neighbor_share,
                    victims.join(", ")
                ),
            )
            .evidence("culprit", w.json())
            .evidence("share_of_vcpu_wait", round(w.neighbor_share, 3))
            .evidence("victims", victims)
            .evidence("mean_vcpu_steal_pct", round(mean, 2))
            .evidence("basis", basis(m))
            .evidence("threshold_share", NOISY_SHARE)
            .files(if attributed {
                &[
                    "scheduler events (sched_switch, sched_wakeup, sched_migrate_task)",
                    "/proc/<pid>/task/<tid>/schedstat",
                ]
            } else {
                &[
                    "/proc/<pid>/task/<tid>/schedstat (every thread)",
                    "/proc/stat",
                ]
            })
            .remedy(fix(&w))
            .case("who-stole-my-cpu-talk.md"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::host::{busy, Ran};
    use crate::testing::{ticks, TestMachine};

    /// Two CPUs that never idled over the 5 s.
    fn busy_host() -> TestMachine {
        TestMachine::guest().cpus(&[ticks(500, 0, 0); 2])
    }

    #[test]
    fn more_vcpus_than_cpus_is_busy_steal() {
        let m = busy_host().vm(100, "web1", &[busy(3.3, 1.5); 3]);
        let f = m.run(steal);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "host.steal.busy");
        assert_eq!(f[0].severity, Severity::Critical);
    }

    #[test]
    fn waiting_while_cpus_idle_is_idle_steal() {
        // The default machine idles three quarters of each CPU.
        let f = TestMachine::guest()
            .vm(100, "web1", &[busy(0.5, 0.5); 2])
            .run(steal);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "host.steal.idle");
    }

    #[test]
    fn little_vcpu_wait_is_silent() {
        let m = busy_host().vm(100, "web1", &[busy(4.9, 0.05); 2]);
        assert!(m.run(steal).is_empty());
        assert!(m.run(noisy_neighbor).is_empty());
    }

    /// The VM's two vCPUs fit on the two CPUs; a host process takes one.
    fn neighbour(run_s: f64) -> TestMachine {
        busy_host().vm(100, "web1", &[busy(2.5, 2.5); 2]).process(
            900,
            "stress-ng",
            busy(run_s, 0.0),
        )
    }

    #[test]
    fn a_busy_host_process_is_the_noisy_neighbour() {
        let m = neighbour(5.0);
        let f = m.run(noisy_neighbor);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "host.noisy-neighbor");
        assert!(f[0].title.contains("stress-ng"), "{}", f[0].title);
        // The steal finding names it too: the VMs alone fit.
        let s = m.run(steal);
        assert!(s[0].title.contains("the VMs alone fit"), "{}", s[0].title);
    }

    #[test]
    fn the_collector_names_the_neighbour_even_on_idle_cpus() {
        // Without attribution an estimate from run times needs busy CPUs;
        // the collector saw zstd run while each vCPU waited.
        let zstd: &[Ran] = &[(901, 900, "zstd", 0.9)];
        let m = TestMachine::guest()
            .vm(100, "web1", &[busy(1.0, 1.0); 2])
            .process(900, "zstd", busy(1.0, 0.0))
            .thread(900, 901, "zstd", busy(1.0, 0.0));
        assert!(
            m.clone().run(noisy_neighbor).is_empty(),
            "no estimate on idle CPUs"
        );
        let f = m
            .sched_reading(&[(101, zstd), (102, zstd)])
            .run(noisy_neighbor);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].title.contains("zstd") && f[0].title.contains(" caused "),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn a_process_that_hardly_ran_is_no_neighbour() {
        assert!(neighbour(0.001).run(noisy_neighbor).is_empty());
    }
}
