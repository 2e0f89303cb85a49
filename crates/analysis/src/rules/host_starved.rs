//! Open waits (issue 28): a runnable thread that has not run for over a
//! second, which interval deltas cannot show (its run_delay only moves when
//! it finally runs), named with its CPU, cgroup and who held that CPU; and
//! a capture whose interval overran what was asked, with its own threads'
//! wait for a CPU as the reason. Both read what the live capture's
//! starvation scanner stored (`stealscope_model::host::starve`).

use crate::finding::{round, Evidence, Finding, Severity};
use stealscope_model::host::starve::{StoredStarve, StoredWait, STARVE_FILE};
use stealscope_model::MachineModel;

/// A wait this long is critical: the task is, for its user, hung.
pub const STARVED_CRITICAL_S: f64 = 10.0;
/// A capture that took this much longer than asked (and this share more)
/// overran: reading /proc takes a few hundred ms on a busy host, not more.
pub const OVERRUN_MARGIN_S: f64 = 1.0;
pub const OVERRUN_MARGIN_SHARE: f64 = 0.2;
/// Waits named in the title and evidence.
const LISTED: usize = 5;

/// "`backup` (pid 812)", with the thread when it is not the main one, and
/// the VM when it is a VM's thread.
fn who(m: VmOf<'_>, pid: u32, tid: u32, comm: &str, process: &str) -> String {
    let thread = if tid != pid {
        format!(", thread `{comm}` {tid}")
    } else {
        String::new()
    };
    let vm = m(pid).map_or(String::new(), |v| format!(" of VM {v}"));
    format!("`{process}` (pid {pid}{thread}){vm}")
}

/// The largest holder of a wait's CPU (the rest are in the evidence).
fn holder(m: VmOf<'_>, w: &StoredWait) -> String {
    let Some(h) = w.holders.first() else {
        return "nobody the scan saw (its CPU may have run threads that ended)".into();
    };
    let more = match w.holders.len() - 1 {
        0 => String::new(),
        n => format!(" and {n} other{}", if n == 1 { "" } else { "s" }),
    };
    format!(
        "{} ({:.1} s of CPU){more}",
        who(m, h.pid, h.tid, &h.comm, &h.process),
        h.cpu_s
    )
}

fn wait_evidence(m: VmOf<'_>, w: &StoredWait) -> Evidence {
    let holders: Vec<Evidence> = w
        .holders
        .iter()
        .map(|h| {
            Evidence::map([
                ("pid", Evidence::from(h.pid)),
                ("tid", Evidence::from(h.tid)),
                ("process", Evidence::from(h.process.clone())),
                ("thread", Evidence::from(h.comm.clone())),
                ("cpu_s", round(h.cpu_s, 2)),
            ])
        })
        .collect();
    Evidence::map([
        ("pid", Evidence::from(w.pid)),
        ("tid", Evidence::from(w.tid)),
        ("process", Evidence::from(w.process.clone())),
        ("thread", Evidence::from(w.comm.clone())),
        ("vm", Evidence::from(m(w.pid))),
        ("cpu", Evidence::from(w.cpu)),
        ("cgroup", Evidence::from(w.cgroup.clone())),
        ("waited_s", round(w.waited_s, 2)),
        ("open", Evidence::from(w.open)),
        ("held_by", Evidence::List(holders)),
    ])
}

/// The VM a process is, by pid.
pub type VmOf<'a> = &'a dyn Fn(u32) -> Option<String>;

/// `host.starved`: runnable threads that did not run for over a second.
pub fn starved(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(s) = &m.t1.host.starved else {
        return;
    };
    let vms = &m.t1.host.vms;
    let vm_of = |pid: u32| vms.iter().find(|v| v.pid == pid).map(|v| v.name.clone());
    out.extend(starved_finding(s, &vm_of));
}

/// The `host.starved` finding of a scanner's reading (live in `top`, or a
/// capture's), None when nothing starved.
pub fn starved_finding(s: &StoredStarve, m: VmOf<'_>) -> Option<Finding> {
    let waits: Vec<&StoredWait> = s.waits.iter().take(LISTED).collect();
    let top = waits.first()?;
    let severity = if top.waited_s >= STARVED_CRITICAL_S {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let state = if top.open {
        "has not run for"
    } else {
        "did not run for"
    };
    let mut title = format!(
        "{} runnable on CPU {} {state} {:.1} s, behind {}",
        who(m, top.pid, top.tid, &top.comm, &top.process),
        top.cpu,
        top.waited_s,
        holder(m, top)
    );
    if s.waits.len() > 1 {
        title.push_str(&format!(
            "; {} more thread{} starved",
            s.waits.len() - 1,
            if s.waits.len() == 2 { "" } else { "s" }
        ));
    }
    Some(
        Finding::new("host.starved", severity, title)
            .evidence(
                "waits",
                Evidence::List(waits.iter().map(|w| wait_evidence(m, w)).collect()),
            )
            .evidence("threads_scanned", s.threads)
            .evidence("full_scan_cpu_max_ms", round(s.full_scan_max_ms, 1))
            .files(&["/proc/PID/task/TID/stat", "/proc/PID/task/TID/schedstat", STARVE_FILE])
            .remedy(
                "A runnable thread that gets no CPU for seconds is starved by what holds its CPU: \
                 give it a CPU of its own or move the holder (`taskset -pc CPUS PID`, a cpuset), \
                 raise its weight or lower the holder's (`renice`, cpu.weight of its cgroup), or \
                 undo a placement that confined it (`stealscope place undo`). A SCHED_IDLE or \
                 nice 19 thread behind busy work is starved by design.",
            )
            .reference("kernel/sched/stats.h (sched_info_arrive: run_delay grows only when a waiting task runs)"),
    )
}

/// `host.capture-overran`: the capture took longer than asked by more than
/// the margin; its own threads' wait for a CPU says why.
pub fn capture_overran(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(own) = m.t1.host.starved.as_ref().and_then(|s| s.own) else {
        return;
    };
    let over = own.took_s - own.asked_s;
    if over <= OVERRUN_MARGIN_S.max(OVERRUN_MARGIN_SHARE * own.asked_s) {
        return;
    }
    let why = if own.wait_s >= 0.5 * over {
        format!(
            "its own threads waited {:.1} s for a CPU (run-queue wait): the host is starving it too",
            own.wait_s
        )
    } else {
        format!(
            "its own threads waited {:.1} s for a CPU and ran {:.1} s: the rest went to reading /proc (slow files of a busy process)",
            own.wait_s, own.run_s
        )
    };
    out.push(
        Finding::new(
            "host.capture-overran",
            Severity::Info,
            format!(
                "This capture took {:.1} s for the {:.1} s asked: {why}",
                own.took_s, own.asked_s
            ),
        )
        .evidence("asked_s", round(own.asked_s, 2))
        .evidence("took_s", round(own.took_s, 2))
        .evidence("own_wait_s", round(own.wait_s, 2))
        .evidence("own_run_s", round(own.run_s, 2))
        .files(&["/proc/self/task/TID/schedstat", STARVE_FILE])
        .remedy(
            "The figures cover the interval as taken, not as asked. If its own wait explains it, \
             the host's CPUs are oversubscribed (see host.starved and host.steal.busy); run \
             stealscope with a higher weight (`nice -n -5`) to measure on time.",
        ),
    );
}
