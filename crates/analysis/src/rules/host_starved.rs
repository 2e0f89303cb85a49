//! Open waits (issue 28): a runnable thread that has not run for over a
//! second, which interval deltas cannot show (its run_delay only moves when
//! it finally runs), named with its CPU, cgroup and who held that CPU; and
//! a capture whose interval overran what was asked, with its own threads'
//! wait for a CPU as the reason. Both read what the live capture's
//! starvation scanner stored (`stealscope_model::host::starve`).

use crate::finding::{round, Evidence, Finding, Severity};
use stealscope_model::host::starve::{OwnWait, StoredStarve, StoredWait, STARVE_FILE};
use stealscope_model::MachineModel;

/// A wait this long is a warning: far beyond any scheduling latency
/// (CFS/EEVDF slices are milliseconds), where a second or two happens to
/// threads of a build on a busy host (rust-lld 1.5 s measured here), which
/// is named but, as info, does not take the verdict.
pub const STARVED_WARNING_S: f64 = 5.0;
/// A wait this long is critical: the task is, for its user, hung.
pub const STARVED_CRITICAL_S: f64 = 30.0;
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
    // Open waits under a second are the report's, not starvation.
    let starving: Vec<&StoredWait> = s.waits.iter().filter(|w| w.starving()).collect();
    let waits: Vec<&StoredWait> = starving.iter().take(LISTED).copied().collect();
    let top = waits.first()?;
    // Waits are longest first; one that ended counts as long as it was.
    let severity = if top.waited_s >= STARVED_CRITICAL_S {
        Severity::Critical
    } else if top.waited_s >= STARVED_WARNING_S {
        Severity::Warning
    } else {
        Severity::Info
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
    if starving.len() > 1 {
        title.push_str(&format!(
            "; {} more thread{} starved",
            starving.len() - 1,
            if starving.len() == 2 { "" } else { "s" }
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
                 raise its weight or lower the holder's (`renice` within one session; with \
                 autogroups on, the session's nice in /proc/PID/autogroup; cpu.weight of its cgroup), or \
                 undo a placement that confined it (`stealscope place undo`). A SCHED_IDLE or \
                 nice 19 thread behind busy work is starved by design.",
            )
            .reference("kernel/sched/stats.h (sched_info_arrive: run_delay grows only when a waiting task runs)"),
    )
}

/// `host.capture-overran`: the capture took longer than asked by more than
/// the margin; its own threads' wait for a CPU says why.
pub fn capture_overran(m: &MachineModel, out: &mut Vec<Finding>) {
    if let Some(own) = m.t1.host.starved.as_ref().and_then(|s| s.own) {
        out.extend(overran_finding(own));
    }
}

fn overran_finding(own: OwnWait) -> Option<Finding> {
    let over = own.took_s - own.asked_s;
    if over <= OVERRUN_MARGIN_S.max(OVERRUN_MARGIN_SHARE * own.asked_s) {
        return None;
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
    Some(
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
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_model::host::starve::StoredHolder;

    fn wait(pid: u32, waited_s: f64, open: bool) -> StoredWait {
        StoredWait {
            tid: pid + 1,
            pid,
            comm: "worker".into(),
            process: "backup".into(),
            cpu: 0,
            cgroup: Some("/user.slice".into()),
            waited_s,
            since_s: None,
            open,
            holders: vec![StoredHolder {
                tid: 700,
                pid: 700,
                comm: "CPU 0/TCG".into(),
                process: "qemu-system-x86".into(),
                cpu_s: 2.5,
            }],
        }
    }

    /// The longest wait leads, named with its thread, CPU and holder (a VM's
    /// vCPU named by its VM); ten seconds make it critical.
    #[test]
    fn names_the_longest_wait_its_cpu_and_who_held_it() {
        let s = StoredStarve {
            waits: vec![wait(812, 3.2, true), wait(900, 1.1, false)],
            ..Default::default()
        };
        let vm_of = |pid: u32| (pid == 700).then(|| "web".to_string());
        let f = starved_finding(&s, &vm_of).unwrap();
        assert_eq!(f.severity, Severity::Info, "3.2 s is named, not a verdict");
        assert!(
            f.title.starts_with(
                "`backup` (pid 812, thread `worker` 813) runnable on CPU 0 has not run for 3.2 s, behind `qemu-system-x86` (pid 700) of VM web"
            ),
            "{}",
            f.title
        );
        assert!(f.title.ends_with("; 1 more thread starved"), "{}", f.title);
        let sev = |w: StoredWait| {
            let s = StoredStarve {
                waits: vec![w],
                ..Default::default()
            };
            starved_finding(&s, &vm_of).unwrap().severity
        };
        assert_eq!(sev(wait(812, 12.0, true)), Severity::Warning);
        assert_eq!(sev(wait(812, 40.0, true)), Severity::Critical);
        assert_eq!(sev(wait(812, 40.0, false)), Severity::Critical, "ended");
        assert!(starved_finding(&StoredStarve::default(), &vm_of).is_none());
        // An open wait under a second is the report's, not starvation.
        let short = StoredStarve {
            waits: vec![wait(812, 0.6, true)],
            ..Default::default()
        };
        assert!(starved_finding(&short, &vm_of).is_none());
        let both = StoredStarve {
            waits: vec![wait(812, 1.5, true), wait(900, 0.4, true)],
            ..Default::default()
        };
        let f = starved_finding(&both, &vm_of).unwrap();
        assert!(!f.title.contains("more thread"), "{}", f.title);
    }

    /// 18.8 s for 5 s asked, 12 s of it waiting: overran, because it waited.
    /// Within 1 s (or 20 %) of what was asked: nothing.
    #[test]
    fn an_overrun_says_how_long_its_own_threads_waited() {
        let own = |took_s, wait_s| OwnWait {
            asked_s: 5.0,
            took_s,
            wait_s,
            run_s: 0.1,
        };
        let f = overran_finding(own(18.8, 12.0)).unwrap();
        assert!(
            f.title.contains("took 18.8 s for the 5.0 s asked"),
            "{}",
            f.title
        );
        assert!(f.title.contains("waited 12.0 s for a CPU"), "{}", f.title);
        assert!(overran_finding(own(5.9, 0.0)).is_none());
        let slow = overran_finding(own(9.0, 0.2)).unwrap();
        assert!(slow.title.contains("reading /proc"), "{}", slow.title);
    }
}
