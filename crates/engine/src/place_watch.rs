//! The watchdog after a batch: a task that is runnable (state R in
//! /proc/TID/stat) at every reading for [`WINDOW`] while its schedstat run
//! time advances by less than [`SHARE`] of that span is starving, and the
//! batch just applied is the suspect. schedstat's wait only moves when a
//! waiting task finally runs, so a task that never runs is invisible in
//! wait deltas: the run time standing (nearly) still is what shows it.
//! Tasks already starving before the batch are not the batch's doing and
//! are left out, as are SCHED_IDLE tasks (starving is their policy) and
//! stealscope's own threads.
//!
//! Why a share over seconds and not "no CPU for a second": the kernel
//! alone leaves a runnable task without CPU for 0.5 to 2.5 s at a time
//! beside busy vCPUs in other autogroups (measured on the 2-CPU test host
//! with no plan applied: 41 % of a CPU over 6 s, 0 ms in a 2 s window once
//! in five runs), so a 1 s trigger could undo a harmless plan. A starving
//! plan leaves a task a tick every few seconds (0.2 %), far under 2 %.
//!
//! On a host that is itself a guest, the hypervisor can take a CPU away
//! for a second or more: every task queued there then stands still too,
//! and no batch did it. A stall counts only when its CPU was not mostly
//! stolen over the stall (per-CPU steal in /proc/stat).

use crate::capture::clk_tck;
use crate::place_threads::{Reading, Threads};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};
use stealscope_model::cputime;
use stealscope_readers::stat::{self, ProcStat};
use stealscope_readers::RootFs;

/// Runnable at every reading this long, getting under [`SHARE`] of a
/// CPU, is starving.
pub const WINDOW: Duration = Duration::from_secs(4);
/// Share of a CPU under which a task runnable over [`WINDOW`] starves.
pub const SHARE: f64 = 0.02;
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
    /// How long it was runnable at every reading, seconds.
    pub stalled_s: f64,
    /// The CPU time it got meanwhile, seconds.
    pub ran_s: f64,
    /// Since when (to look up the CPU's own times over the stall).
    pub since: Instant,
}

impl fmt::Display for Starved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task `{}` (pid {}, tid {}) was runnable for {:.1} s and got {:.0} ms of CPU{}",
            self.name,
            self.pid,
            self.tid,
            self.stalled_s,
            self.ran_s * 1e3,
            self.cpu.map(|c| format!(" (CPU {c})")).unwrap_or_default()
        )
    }
}

/// Runnable at `a` and `b`, having run under [`SHARE`] of the time between.
fn starving(a: (Instant, u64), b: (Instant, u64)) -> bool {
    let span = b.0.saturating_duration_since(a.0).as_secs_f64();
    (b.1.saturating_sub(a.1) as f64) < SHARE * span * 1e9
}

/// Tasks runnable at both readings (`a` taken at least a second before
/// `b`) that got under [`SHARE`] of a CPU between them: starving before a
/// batch.
pub fn stalled_between(a: &Reading, b: &Reading) -> BTreeSet<u32> {
    b.iter()
        .filter(|(tid, y)| {
            y.runnable
                && a.get(tid)
                    .is_some_and(|x| x.runnable && starving((x.at, x.run_ns), (y.at, y.run_ns)))
        })
        .map(|(tid, _)| *tid)
        .collect()
}

/// Each runnable task's readings since it last was not runnable, the
/// oldest kept being the newest at least [`WINDOW`] old.
#[derive(Debug, Default)]
pub struct Stalls {
    runs: BTreeMap<u32, VecDeque<(Instant, u64)>>,
}

impl Stalls {
    /// Adds `r`, each thread timed by its own read; returns the tasks (not
    /// in `skip`) starving over the last [`WINDOW`] or more, longest first.
    pub fn update(&mut self, r: &Reading, skip: &BTreeSet<u32>) -> Vec<Starved> {
        self.runs.retain(|tid, _| r.contains_key(tid));
        let mut out = Vec::new();
        for (tid, t) in r {
            if !t.runnable || t.idle_policy || skip.contains(tid) {
                self.runs.remove(tid);
                continue;
            }
            let runs = self.runs.entry(*tid).or_default();
            runs.push_back((t.at, t.run_ns));
            while runs.len() > 1 && t.at.saturating_duration_since(runs[1].0) >= WINDOW {
                runs.pop_front();
            }
            let first = runs[0];
            let span = t.at.saturating_duration_since(first.0);
            if span >= WINDOW && starving(first, (t.at, t.run_ns)) {
                out.push(Starved {
                    pid: t.pid,
                    tid: *tid,
                    name: String::new(),
                    cpu: t.cpu,
                    stalled_s: span.as_secs_f64(),
                    ran_s: t.run_ns.saturating_sub(first.1) as f64 / 1e9,
                    since: first.0,
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
    let mut threads = Threads::new();
    loop {
        let now = Instant::now();
        cpus.push(now);
        let mut got = stalls.update(&threads.read(), skip);
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
    use crate::place_threads::ThreadNow;

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
    fn runnable_for_the_window_with_under_the_share_of_a_cpu_is_starving() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = Stalls::default();
        let none = BTreeSet::new();
        let ms = 1_000_000;
        let r = |run, runnable, t| Reading::from([(8, at_t(run, runnable, at(t)))]);
        // No CPU for 2.5 s, then its share again: the kernel alone does
        // that beside busy vCPUs; not starving.
        assert!(s.update(&r(0, true, 0), &none).is_empty());
        assert!(s.update(&r(0, true, 2500), &none).is_empty());
        assert!(s.update(&r(600 * ms, true, 4000), &none).is_empty());
        assert!(s.update(&r(600 * ms, true, 6000), &none).is_empty());
        // A tick every 2 s (4 ms in 4 s, 0.1 %): starving once 4 s went by.
        let mut s = Stalls::default();
        assert!(s.update(&r(0, true, 0), &none).is_empty());
        assert!(s.update(&r(4 * ms, true, 2000), &none).is_empty());
        assert!(s.update(&r(4 * ms, true, 3900), &none).is_empty());
        let got = s.update(&r(8 * ms, true, 4200), &none);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tid, 8);
        assert!((got[0].stalled_s - 4.2).abs() < 1e-6);
        assert!((got[0].ran_s - 0.008).abs() < 1e-9);
        // Judged over the last window only: the oldest readings drop out.
        let got = s.update(&r(8 * ms, true, 9000), &none);
        assert!((got[0].stalled_s - 4.8).abs() < 1e-6, "{got:?}");
        // Asleep is not starving, and the window starts again.
        assert!(s.update(&r(8 * ms, false, 9500), &none).is_empty());
        assert!(s.update(&r(8 * ms, true, 10000), &none).is_empty());
        assert!(s.update(&r(8 * ms, true, 13000), &none).is_empty());
        // Skipped: already starving before the batch.
        let skip = BTreeSet::from([8]);
        assert!(s.update(&r(8 * ms, true, 19000), &skip).is_empty());
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
    fn starving_before_the_batch_is_runnable_at_both_ends_with_under_the_share() {
        let (t0, ms) = (Instant::now(), 1_000_000);
        let t1 = t0 + Duration::from_secs(2);
        let a = Reading::from([
            (1, at_t(5, true, t0)),
            (2, at_t(5, true, t0)),
            (3, at_t(5, false, t0)),
        ]);
        // 1 got 30 ms of 2 s (1.5 %), 2 got 50 ms (2.5 %), 3 slept.
        let b = Reading::from([
            (1, at_t(5 + 30 * ms, true, t1)),
            (2, at_t(5 + 50 * ms, true, t1)),
            (3, at_t(5, false, t1)),
        ]);
        assert_eq!(stalled_between(&a, &b), BTreeSet::from([1]));
    }
}
