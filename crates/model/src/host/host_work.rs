//! The host's runnable work that is not a VM: every other thread's run and
//! run-queue wait (/proc/<pid>/task/<tid>/schedstat) between two readings,
//! so that busy steal is judged against all runnable work, not only vCPUs,
//! and the processes and kernel-thread classes that used the CPUs are named
//! even when no scheduler-event collector ran. Pure: no I/O.

use super::attribution::kthread_class;
use super::observation::HostObservation;
use serde::Serialize;
use std::collections::BTreeMap;
use stealscope_who::{Culprit, Kind};

/// Work at least this share of one CPU is listed by name.
pub const LIST_MIN_CPUS: f64 = 0.01;
/// At most this many entries are listed.
pub const LIST_MAX: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkItem {
    /// A host process, or kernel threads by class.
    #[serde(flatten)]
    pub culprit: Culprit,
    /// Run time over the interval, in CPUs (1.0 = one whole CPU).
    pub run_cpus: f64,
    /// Run-queue wait over the interval, in CPUs.
    pub wait_cpus: f64,
    /// The CPUs it may run on, when the capture read them (processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_allowed: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostWork {
    /// Run time of every thread that is not a VM's (nor stealscope's), in
    /// CPUs.
    pub run_cpus: f64,
    /// Their run-queue wait, in CPUs (run + wait = runnable).
    pub wait_cpus: f64,
    /// The largest, run time first.
    pub top: Vec<WorkItem>,
    /// stealscope's own threads, counted here once and nowhere else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnCost>,
}

/// What the capturing stealscope cost the host over the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OwnCost {
    pub pid: u32,
    /// Its run time, in CPUs.
    pub run_cpus: f64,
    /// vCPU wait the collector charged to its threads, seconds (None
    /// without attribution).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpu_wait_s: Option<f64>,
}

impl HostWork {
    pub fn runnable_cpus(&self) -> f64 {
        self.run_cpus + self.wait_cpus
    }
}

/// The span between a process's two readings, s: its own read instants
/// when both sides have them ([`HostObservation::read_ns`]), else the
/// interval's `wall_s`.
fn span_s(t0: &HostObservation, t1: &HostObservation, pid: u32, wall_s: f64) -> f64 {
    match (t0.read_ns.get(&pid), t1.read_ns.get(&pid)) {
        (Some(&a), Some(&b)) if b > a => (b - a) as f64 / 1e9,
        _ => wall_s,
    }
}

/// Non-VM work between the two sides; `wall_s` is the interval length.
pub fn host_work(t0: &HostObservation, t1: &HostObservation, wall_s: f64) -> HostWork {
    let mut w = HostWork::default();
    // No process read at the start (no VMM ran then: thread_times): every
    // thread would count from zero, its whole life as this interval's.
    if wall_s <= 0.0 || t0.procs.is_empty() {
        return w;
    }
    // (run, wait) in CPUs, each process over its own span.
    let mut items: BTreeMap<Culprit, (f64, f64)> = BTreeMap::new();
    let own = t1.own_pid.or(t0.own_pid);
    let mut own_run = 0.0;
    for p in &t1.procs {
        // By pid only: an exec keeps the pid and the threads' counters. A
        // process or thread started during the interval counts from zero;
        // one that ended before t1 is not seen (its time is lost).
        let before = t0.procs.iter().find(|q| q.pid == p.pid);
        let (mut run, mut wait) = (0u64, 0u64);
        for (tid, s1) in &p.threads {
            let s0 = before
                .and_then(|b| b.threads.get(tid).copied())
                .unwrap_or_default();
            run += s1.run_ns.saturating_sub(s0.run_ns);
            wait += s1.wait_ns.saturating_sub(s0.wait_ns);
        }
        let span = span_s(t0, t1, p.pid, wall_s);
        let (run, wait) = (run as f64 / 1e9 / span, wait as f64 / 1e9 / span);
        if Some(p.pid) == own {
            own_run += run;
            continue;
        }
        let key = if p.kthread == Some(true) {
            Culprit::new(Kind::HostKthread, kthread_class(&p.comm))
        } else {
            Culprit {
                pid: Some(p.pid),
                ..Culprit::new(Kind::HostProcess, p.comm.clone())
            }
        };
        let e = items.entry(key).or_default();
        e.0 += run;
        e.1 += wait;
    }
    w.own = own.map(|pid| OwnCost {
        pid,
        run_cpus: own_run,
        vcpu_wait_s: None,
    });
    w.run_cpus = items.values().map(|v| v.0).sum();
    w.wait_cpus = items.values().map(|v| v.1).sum();
    let mut top: Vec<WorkItem> = items
        .into_iter()
        .map(|(culprit, (run, wait))| WorkItem {
            cpus_allowed: culprit.pid.and_then(|p| t1.affinity.get(&p).cloned()),
            culprit,
            run_cpus: run,
            wait_cpus: wait,
        })
        .filter(|i| i.run_cpus >= LIST_MIN_CPUS)
        .collect();
    top.sort_by(|a, b| b.run_cpus.total_cmp(&a.run_cpus));
    top.truncate(LIST_MAX);
    w.top = top;
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::observation::HostProc;
    use stealscope_readers::process::TaskSchedstat;

    fn proc_(pid: u32, comm: &str, kthread: Option<bool>, t: &[(u32, u64, u64)]) -> HostProc {
        HostProc {
            pid,
            comm: comm.into(),
            kthread,
            threads: t
                .iter()
                .map(|&(tid, run, wait)| {
                    (
                        tid,
                        TaskSchedstat {
                            run_ns: run,
                            wait_ns: wait,
                            slices: 0,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn sums_threads_classes_kthreads_and_counts_new_work_from_zero() {
        let t0 = HostObservation {
            procs: vec![
                proc_(10, "bash", None, &[(10, 1_000_000_000, 0)]),
                proc_(20, "kworker/0:1", None, &[(20, 0, 0)]),
                proc_(21, "kworker/1:0", None, &[(21, 0, 0)]),
            ],
            ..Default::default()
        };
        let t1 = HostObservation {
            procs: vec![
                // Exec'd to another comm: same pid, counters continue.
                proc_(
                    10,
                    "stress",
                    Some(false),
                    &[(10, 3_000_000_000, 1_000_000_000), (11, 500_000_000, 0)],
                ),
                proc_(20, "kworker/0:1", Some(true), &[(20, 100_000_000, 0)]),
                proc_(21, "kworker/1:0", Some(true), &[(21, 100_000_000, 0)]),
                // Started during the interval: from zero.
                proc_(30, "make", Some(false), &[(30, 40_000_000, 0)]),
            ],
            ..Default::default()
        };
        let w = host_work(&t0, &t1, 2.0);
        assert!(
            (w.run_cpus - (2.5 + 0.2 + 0.04) / 2.0).abs() < 1e-9,
            "{w:?}"
        );
        assert!((w.wait_cpus - 0.5).abs() < 1e-9);
        assert_eq!(w.top[0].culprit.name, "stress");
        assert_eq!(w.top[0].culprit.pid, Some(10));
        assert!((w.top[0].run_cpus - 1.25).abs() < 1e-9);
        let kw = w
            .top
            .iter()
            .find(|i| i.culprit.kind == Kind::HostKthread)
            .unwrap();
        assert_eq!(
            (kw.culprit.name.as_str(), kw.culprit.pid),
            ("kworker", None)
        );
        assert!((kw.run_cpus - 0.1).abs() < 1e-9);
        assert_eq!(w.top.len(), 3);
    }

    /// Each process over the span between its own two readings: a loop
    /// read 0.5 s later in the end side's walk than in the start side's
    /// ran 2.5 s in 2.5 s, one whole CPU, not 1.25 over the 2 s interval.
    #[test]
    fn each_process_over_its_own_span() {
        let mut t0 = HostObservation {
            procs: vec![
                proc_(10, "loop", None, &[(10, 0, 0)]),
                proc_(20, "other", None, &[(20, 0, 0)]),
            ],
            ..Default::default()
        };
        let mut t1 = HostObservation {
            procs: vec![
                proc_(10, "loop", Some(false), &[(10, 2_500_000_000, 0)]),
                proc_(20, "other", Some(false), &[(20, 1_000_000_000, 0)]),
            ],
            ..Default::default()
        };
        t0.read_ns.insert(10, 1_000_000_000);
        t1.read_ns.insert(10, 3_500_000_000);
        let w = host_work(&t0, &t1, 2.0);
        let cpus = |n: &str| w.top.iter().find(|i| i.culprit.name == n).unwrap().run_cpus;
        assert!((cpus("loop") - 1.0).abs() < 1e-9, "{w:?}");
        // Not stamped on both sides: the interval's length.
        assert!((cpus("other") - 0.5).abs() < 1e-9, "{w:?}");
        assert!((w.run_cpus - 1.5).abs() < 1e-9);
    }

    /// A start side that read no process (no VMM ran then) measures no
    /// host work: counted from zero, a process's whole life would be put
    /// in the interval.
    #[test]
    fn nothing_without_a_start_reading() {
        let t1 = HostObservation {
            procs: vec![proc_(10, "bash", Some(false), &[(10, 9_000_000_000, 0)])],
            ..Default::default()
        };
        let w = host_work(&HostObservation::default(), &t1, 2.0);
        assert_eq!(w, HostWork::default());
        let t0 = HostObservation {
            procs: vec![proc_(10, "bash", None, &[(10, 0, 0)])],
            ..Default::default()
        };
        assert!((host_work(&t0, &t1, 2.0).run_cpus - 4.5).abs() < 1e-9);
    }
}
