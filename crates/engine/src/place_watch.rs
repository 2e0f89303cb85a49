//! The watchdog after a batch: a task that is runnable (state R in
//! /proc/TID/stat) at every reading while its schedstat run time does not
//! advance for over [`STALL`] is starving, and the batch just applied is
//! the suspect. schedstat's wait only moves when a waiting task finally
//! runs, so a task that never runs is invisible in wait deltas: the run
//! time standing still is what shows it. Tasks already starving before
//! the batch are not the batch's doing and are left out, as are SCHED_IDLE
//! tasks (starving is their policy) and stealscope's own threads.
//!
//! On a host that is itself a guest, the hypervisor can take a CPU away
//! for a second or more: every task queued there then stands still too,
//! and no batch did it. A stall counts only when its CPU was not mostly
//! stolen over the stall (per-CPU steal in /proc/stat).

use crate::capture::clk_tck;
use crate::place_demand::{read_all, Reading};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};
use stealscope_model::cputime;
use stealscope_readers::stat::{self, ProcStat};
use stealscope_readers::RootFs;

/// Runnable this long without running is starving.
pub const STALL: Duration = Duration::from_secs(1);
/// Time between readings while watching.
pub const EVERY: Duration = Duration::from_millis(200);

/// A task found starving.
#[derive(Debug, Clone, PartialEq)]
pub struct Starved {
    pub pid: u32,
    pub tid: u32,
    /// Its process's name.
    pub name: String,
    /// The CPU it last ran on.
    pub cpu: Option<u32>,
    /// How long it was runnable without running, seconds.
    pub stalled_s: f64,
    /// Since when (to look up the CPU's own times over the stall).
    pub since: Instant,
}

impl fmt::Display for Starved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task `{}` (pid {}, tid {}) was runnable for {:.1} s without getting CPU{}",
            self.name,
            self.pid,
            self.tid,
            self.stalled_s,
            self.cpu.map(|c| format!(" (CPU {c})")).unwrap_or_default()
        )
    }
}

/// Tasks runnable at both readings whose run time did not move between
/// them (`a` taken at least [`STALL`] before `b`): starving before a batch.
pub fn stalled_between(a: &Reading, b: &Reading) -> BTreeSet<u32> {
    b.iter()
        .filter(|(tid, y)| {
            y.runnable
                && a.get(tid)
                    .is_some_and(|x| x.runnable && x.run_ns == y.run_ns)
        })
        .map(|(tid, _)| *tid)
        .collect()
}

/// Since when each runnable task has not run, updated with a new reading.
#[derive(Debug, Default)]
pub struct Stalls {
    since: BTreeMap<u32, (Instant, u64)>,
}

impl Stalls {
    /// Adds `r`, each thread timed by its own read; returns the tasks (not
    /// in `skip`) stalled for over [`STALL`], longest first.
    pub fn update(&mut self, r: &Reading, skip: &BTreeSet<u32>) -> Vec<Starved> {
        self.since.retain(|tid, _| r.contains_key(tid));
        let mut out = Vec::new();
        for (tid, t) in r {
            if !t.runnable || t.idle_policy || skip.contains(tid) {
                self.since.remove(tid);
                continue;
            }
            let e = self.since.entry(*tid).or_insert((t.at, t.run_ns));
            if e.1 != t.run_ns {
                *e = (t.at, t.run_ns);
                continue;
            }
            let s = t.at.saturating_duration_since(e.0).as_secs_f64();
            if s > STALL.as_secs_f64() {
                out.push(Starved {
                    pid: t.pid,
                    tid: *tid,
                    name: String::new(),
                    cpu: t.cpu,
                    stalled_s: s,
                    since: e.0,
                });
            }
        }
        out.sort_by(|a, b| b.stalled_s.total_cmp(&a.stalled_s));
        out
    }
}

/// The stall's CPU was mostly stolen over the stall: not the batch.
fn stolen_by_hypervisor(cpus: &CpuHistory, s: &Starved) -> bool {
    s.cpu
        .and_then(|c| cpus.stolen_share(c, s.since))
        .is_some_and(|x| x >= STOLEN_SHARE)
}

fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("pid {pid}"))
}

/// After the first task is found starving, watching goes on this long so
/// that every task the batch starves is named, not only the first.
const LINGER: Duration = Duration::from_millis(600);
/// Named in the reason at most.
const NAMED: usize = 3;

/// A stall whose CPU had at least this share of it stolen by the
/// hypervisor is the hypervisor's doing, not the batch's.
const STOLEN_SHARE: f64 = 0.5;

/// Per-CPU times read at each watch instant, oldest first.
#[derive(Default)]
struct CpuHistory(VecDeque<(Instant, ProcStat)>);

impl CpuHistory {
    fn push(&mut self, now: Instant) {
        if let Ok(Some(s)) = stat::read(&RootFs::new(Path::new("/"))) {
            self.0.push_back((now, s));
        }
    }

    /// Share of `cpu`'s time from `since` to the newest reading that the
    /// hypervisor stole; None when /proc/stat has no steal or no readings.
    fn stolen_share(&self, cpu: u32, since: Instant) -> Option<f64> {
        let (t0, first) = self.0.iter().find(|(t, _)| *t >= since)?;
        let (t1, last) = self.0.back()?;
        let tck = clk_tck().unwrap_or(100) as f64;
        let d = cputime::delta(first, last, (*t1 - *t0).as_secs_f64(), tck);
        let shares = d.cpus.iter().find(|c| c.cpu == cpu)?.accounted_shares()?;
        Some(shares.steal? / 100.0)
    }
}

/// Watches every task for `span`: the tasks found starving (longest
/// first, at most [`NAMED`]); empty when none did.
pub fn watch(span: Duration, skip: &BTreeSet<u32>) -> Vec<Starved> {
    let mut end = Instant::now() + span;
    let mut stalls = Stalls::default();
    let mut cpus = CpuHistory::default();
    let mut found: Vec<Starved> = Vec::new();
    loop {
        let now = Instant::now();
        cpus.push(now);
        let mut got = stalls.update(&read_all(), skip);
        got.retain(|s| !stolen_by_hypervisor(&cpus, s));
        if found.is_empty() && !got.is_empty() {
            end = now + LINGER;
        }
        if !got.is_empty() {
            found = got;
        }
        if now >= end {
            break;
        }
        std::thread::sleep(EVERY.min(end.saturating_duration_since(Instant::now())));
    }
    found.truncate(NAMED);
    for s in &mut found {
        s.name = process_name(s.pid);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place_demand::ThreadNow;

    fn t(run_ns: u64, runnable: bool) -> ThreadNow {
        at_t(run_ns, runnable, Instant::now())
    }

    fn at_t(run_ns: u64, runnable: bool, at: Instant) -> ThreadNow {
        ThreadNow {
            pid: 7,
            run_ns,
            wait_ns: 0,
            at,
            runnable,
            cpu: Some(0),
            idle_policy: false,
        }
    }

    #[test]
    fn runnable_and_not_running_for_over_a_second_is_starving() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = Stalls::default();
        let none = BTreeSet::new();
        let r = |run, runnable, ms| Reading::from([(8, at_t(run, runnable, at(ms)))]);
        assert!(s.update(&r(10, true, 0), &none).is_empty());
        assert!(s.update(&r(10, true, 900), &none).is_empty());
        let got = s.update(&r(10, true, 1200), &none);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tid, 8);
        assert!((got[0].stalled_s - 1.2).abs() < 1e-6);
        // It ran: the clock starts again.
        assert!(s.update(&r(11, true, 1300), &none).is_empty());
        assert!(s.update(&r(11, true, 2200), &none).is_empty());
        // Asleep is not starving.
        assert!(s.update(&r(11, false, 2500), &none).is_empty());
        assert!(s.update(&r(11, true, 3000), &none).is_empty());
        // Skipped: already starving before the batch.
        let skip = BTreeSet::from([8]);
        assert!(s.update(&r(11, true, 9000), &skip).is_empty());
    }

    #[test]
    fn a_stall_on_a_mostly_stolen_cpu_is_the_hypervisors() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let history = |rows: [&str; 2]| {
            let mut h = CpuHistory::default();
            for (i, r) in rows.iter().enumerate() {
                let text = format!("cpu  {r}\ncpu0 {r}\n");
                h.0.push_back((at(i as u64), stat::parse(&text, "test").unwrap()));
            }
            h
        };
        // 100 ticks went by, 80 stolen.
        let h = history(["100 0 0 0 0 0 0 0", "100 0 0 20 0 0 0 80"]);
        assert_eq!(h.stolen_share(0, t0), Some(0.8));
        let h = history(["100 0 0 0 0 0 0 0", "100 0 0 100 0 0 0 0"]);
        assert_eq!(h.stolen_share(0, t0), Some(0.0));
        let no_steal = history(["100 0 0 0", "100 0 0 100"]);
        assert_eq!(no_steal.stolen_share(0, t0), None);
    }

    #[test]
    fn starving_before_the_batch_is_runnable_at_both_ends_without_running() {
        let a = Reading::from([(1, t(5, true)), (2, t(5, true)), (3, t(5, false))]);
        let b = Reading::from([(1, t(5, true)), (2, t(6, true)), (3, t(5, false))]);
        assert_eq!(stalled_between(&a, &b), BTreeSet::from([1]));
    }
}
