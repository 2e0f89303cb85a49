//! `host.noisy-neighbor`: one culprit that takes more than its fair share
//! of the CPUs (by [`super::fair_share`], the model
//! `host.cgroup-weight-unfair` judges by) *and* causes a large share of the
//! wait of VMs other than its own. VMs that merely share an oversubscribed
//! host, each getting its fair share, are not noisy neighbours of each
//! other: that is `host.steal.busy`.
//!
//! Both measures have a firing and a lower clearing threshold
//! ([`crate::hysteresis`]): between them the finding holds where the rule
//! runs repeatedly and stays silent in a one-shot run.

use super::fair_share::Fair;
use super::host::{HOST_STEAL_CLEAR_PCT, HOST_STEAL_CRITICAL_PCT, HOST_STEAL_WARN_PCT};
use super::host_steal::mean_steal;
use super::host_who::{basis, culprits, Who};
use super::weight_fix::lower_weight;
use crate::finding::{round, Finding, Severity};
use crate::hysteresis::{holding, SUBJECT};
use crate::verdict::VERDICT_FIX;
use stealscope_model::MachineModel;

/// A culprit causing at least this share of all vCPU wait (of VMs other
/// than its own) harms its neighbours: a quarter is more than any one of
/// four equal competitors takes.
pub const NOISY_SHARE: f64 = 0.25;
/// Clearing threshold of [`NOISY_SHARE`]: across back-to-back 5 s runs of
/// a steady host one culprit's share moved by up to 0.04 (issue 28: 0.23
/// to 0.27), so a finding that fired holds down to 0.2.
pub const NOISY_CLEAR_SHARE: f64 = 0.2;
/// ...and Critical from this share when the steal is also critical.
pub const NOISY_CRITICAL_SHARE: f64 = 0.5;
/// It ran at least this many times its fair CPU: a third over. Threads of
/// equal weight in one contended 5 s interval get their fair share within
/// about 5 % (issue 28: VMs at 44.2 % and 46.0 % steal against 44.6 % and
/// 43.5 % fair), but a loop in a session (autogroup) of its own beside
/// per-VM autogroups swings further: on issue 28's walk-through host the
/// loop pinned to CPU 0 ran 0.13 to 0.62 CPU in back-to-back 5 s runs
/// against a fair 0.5 (1.24x at most), while a loop beside one VM that
/// fits the host ran 0.96 CPU against a fair 0.67 (1.43x).
pub const FAIR_EXCESS: f64 = 1.33;
/// Clearing threshold of [`FAIR_EXCESS`] (twice the noise).
pub const FAIR_CLEAR: f64 = 1.1;
/// A VM's vCPUs run in a group of their own (libvirt's scope, an
/// autogroup), and the kernel shares CPU between groups, under affinity,
/// not between threads: on the issue-28 walk-through host (web 2 busy
/// vCPUs, db 1, a loop pinned to CPU 0, each in its own autogroup) web ran
/// 1.28 CPUs against a per-thread fair 0.97, run after run, with nothing
/// wrong. So a VM is named only this far over the per-thread fair share.
pub const FAIR_EXCESS_VM: f64 = 1.5;
/// Clearing threshold of [`FAIR_EXCESS_VM`].
pub const FAIR_CLEAR_VM: f64 = 1.25;
/// ...and at least this many CPUs over: a tenth of a CPU is worth acting
/// on, less is the noise of a process that hardly ran.
pub const FAIR_EXCESS_CPUS: f64 = 0.1;

/// Where a culprit stands against the thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Level {
    Fires,
    Holds,
    Clear,
}

fn level(share: f64, over: Level) -> Level {
    match (over, share) {
        (Level::Clear, _) => Level::Clear,
        (_, s) if s < NOISY_CLEAR_SHARE => Level::Clear,
        (Level::Fires, s) if s >= NOISY_SHARE => Level::Fires,
        _ => Level::Holds,
    }
}

/// How far a culprit ran over its fair CPU; interrupts (fair share 0,
/// no run time of their own) by their share alone.
fn over_fair(fair: Option<(f64, f64)>, kind: &str) -> Level {
    let (excess, clear) = if kind == "vcpu" {
        (FAIR_EXCESS_VM, FAIR_CLEAR_VM)
    } else {
        (FAIR_EXCESS, FAIR_CLEAR)
    };
    match fair {
        None if kind == "irq" => Level::Fires,
        None => Level::Clear,
        Some((fair, ran)) if ran - fair < FAIR_EXCESS_CPUS => Level::Clear,
        Some((fair, ran)) if ran >= fair * excess => Level::Fires,
        Some((fair, ran)) if ran >= fair * clear => Level::Holds,
        _ => Level::Clear,
    }
}

pub fn noisy_neighbor(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(mean) = mean_steal(m) else { return };
    if mean < HOST_STEAL_CLEAR_PCT {
        return;
    }
    let attributed = m.host.attribution.available();
    // An estimate from run times holds only when CPUs were busy.
    if !attributed && m.host.split.busy_share().unwrap_or(0.0) < 0.5 {
        return;
    }
    let fair = Fair::of(m);
    for w in culprits(m) {
        if w.kind == "unknown" {
            continue;
        }
        let ran = fair.of_culprit(m, &w);
        let mut lvl = level(w.neighbor_share, over_fair(ran, w.kind));
        if lvl == Level::Fires && mean < HOST_STEAL_WARN_PCT {
            lvl = Level::Holds;
        }
        let victims: Vec<String> = w
            .victims
            .iter()
            .filter(|v| w.vm.as_ref() != Some(*v))
            .cloned()
            .collect();
        if lvl == Level::Clear || victims.is_empty() {
            continue;
        }
        let f = finding(m, &w, mean, ran, &victims);
        out.push(if lvl == Level::Holds { holding(f) } else { f });
    }
}

fn finding(
    m: &MachineModel,
    w: &Who,
    mean: f64,
    fair: Option<(f64, f64)>,
    victims: &[String],
) -> Finding {
    let attributed = m.host.attribution.available();
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
    let took = match fair {
        Some((f, r)) if w.kind != "irq" => format!(" ran {r:.2} CPUs (fair {f:.2}) and"),
        _ => String::new(),
    };
    Finding::new(
        "host.noisy-neighbor",
        sev,
        format!(
            "{}{took} {verb} {:.0}% of all vCPU wait (victims: {})",
            w.label(),
            100.0 * w.neighbor_share,
            victims.join(", ")
        ),
    )
    .evidence(SUBJECT, w.label())
    .evidence("culprit", w.json())
    .evidence("share_of_vcpu_wait", round(w.neighbor_share, 3))
    .evidence("victims", victims.to_vec())
    .evidence("ran_cpus", fair.map(|f| round(f.1, 3)))
    .evidence("fair_cpus", fair.map(|f| round(f.0, 3)))
    .evidence("mean_vcpu_steal_pct", round(mean, 2))
    .evidence("basis", basis(m))
    .evidence("threshold_share", NOISY_SHARE)
    .evidence("threshold_fair_excess", FAIR_EXCESS)
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
    .evidence(VERDICT_FIX, verdict_fix(m, w, fair))
    .remedy(fix(m, w))
    .case("who-stole-my-cpu-talk.md")
}

/// The verdict's fix: what the culprit took against its fair share, then
/// the first thing to do.
fn verdict_fix(m: &MachineModel, w: &Who, fair: Option<(f64, f64)>) -> Option<String> {
    let (f, r) = fair.filter(|_| w.kind != "irq")?;
    let what = match (w.kind, w.pid) {
        ("host-process", Some(pid)) => format!("host process `{}` (pid {pid})", w.name),
        ("host-kthread", _) => format!("kernel threads `{}`", w.name),
        ("vcpu", _) => format!("VM {}'s vCPUs", w.name),
        ("vmm", _) => format!("VM {}'s emulator threads", w.name),
        _ => return None,
    };
    let first = fix(m, w);
    let first = first
        .split(". ")
        .next()
        .unwrap_or(&first)
        .trim_end_matches('.');
    let verb = if w.kind == "host-process" {
        "takes"
    } else {
        "take"
    };
    Some(format!("{what} {verb} {r:.2} CPU (fair {f:.2}): {first}"))
}

fn fix(m: &MachineModel, w: &Who) -> String {
    match (w.kind, w.name.as_str()) {
        ("host-process", _) => format!(
            "Give {} CPUs of its own away from the vCPUs (`taskset -apc CPUS {pid}` or a cpuset), lower its weight \
             ({}), or move it to another host.",
            w.label(),
            lower_weight(m, w.pid),
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
