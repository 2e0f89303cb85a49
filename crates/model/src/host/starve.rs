//! Open waits: runnable threads that have not run since some moment and are
//! still queued. schedstat's run_delay only grows when a waiting task
//! finally runs (kernel/sched/stats.h, sched_info_arrive), so a task that
//! never runs is invisible in interval deltas; its run time
//! (`se.sum_exec_runtime`, the first field of /proc/TID/schedstat) standing
//! still while /proc/TID/stat says `R` is what shows it. A task on a CPU has
//! its run time advanced at every tick (update_curr, and sched_tick_remote
//! on a nohz_full CPU at least once a second), so a run time that stands
//! still over a second while the state stays R means queued, not running.
//!
//! [`StarveTracker`] is the pure part: scans in, open and ended waits out.
//! A full scan reads every thread's stat (state, CPU, tick times); a
//! recheck reads only the threads already waiting. Who held a waiting
//! thread's CPU is the thread whose tick times grew most on that CPU
//! between full scans. The live scanner is `stealscope_engine::host::starve`;
//! what it stores in a snapshot side is [`StoredStarve`].

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use stealscope_readers::process::TaskStat;

pub const STARVE_FILE: &str = "/stealscope/starved.json";
/// A runnable thread that has not run for this long is starving (issue 28:
/// "a runnable task that has not run for over a second").
pub const STARVE_NS: u64 = 1_000_000_000;
/// A runnable thread still queued at the end of a capture and not run for
/// this long is reported as an open wait (one recheck of the scanner: a
/// shorter wait cannot be told from a thread that just ran).
pub const OPEN_WAIT_NS: u64 = 250_000_000;

/// One thread as one scan read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskScan {
    pub tid: u32,
    pub tgid: u32,
    pub stat: TaskStat,
    /// Its schedstat run time, read for runnable threads only.
    pub run_ns: Option<u64>,
}

/// A thread that held a waiting thread's CPU: its tick times grown there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub tid: u32,
    pub tgid: u32,
    pub ticks: u64,
}

/// A wait: a runnable thread whose run time did not move from `since_ns`
/// to `seen_ns` (the last scan that found it still so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub tid: u32,
    pub tgid: u32,
    pub cpu: u32,
    pub since_ns: u64,
    pub seen_ns: u64,
    /// Still queued at the last scan.
    pub open: bool,
    /// Most ticks first.
    pub holders: Vec<Holder>,
}

impl StoredWait {
    /// Starving: runnable and not run for over [`STARVE_NS`].
    pub fn starving(&self) -> bool {
        self.waited_s * 1e9 >= STARVE_NS as f64
    }
}

impl Wait {
    pub fn waited_ns(&self) -> u64 {
        self.seen_ns.saturating_sub(self.since_ns)
    }
}

#[derive(Debug, Clone)]
struct Track {
    tgid: u32,
    cpu: u32,
    run_ns: u64,
    since_ns: u64,
    seen_ns: u64,
    holders: HashMap<u32, (u32, u64)>,
}

impl Track {
    fn wait(&self, tid: u32, open: bool) -> Wait {
        let mut holders: Vec<Holder> = self
            .holders
            .iter()
            .map(|(&tid, &(tgid, ticks))| Holder { tid, tgid, ticks })
            .filter(|h| h.ticks > 0)
            .collect();
        holders.sort_by(|a, b| b.ticks.cmp(&a.ticks).then(a.tid.cmp(&b.tid)));
        Wait {
            tid,
            tgid: self.tgid,
            cpu: self.cpu,
            since_ns: self.since_ns,
            seen_ns: self.seen_ns,
            open,
            holders,
        }
    }
}

#[derive(Debug, Default)]
pub struct StarveTracker {
    /// Every thread's (tgid, CPU, ticks) at the last full scan.
    ticks: HashMap<u32, (u32, u32, u64)>,
    tracks: HashMap<u32, Track>,
    /// Waits of at least [`STARVE_NS`] that ended (the thread ran or slept).
    ended: Vec<Wait>,
    /// Threads the last full scan read.
    pub threads: usize,
}

impl StarveTracker {
    /// A full scan at `now_ns`: every thread, run times of runnable ones.
    pub fn full(&mut self, now_ns: u64, tasks: &[TaskScan]) {
        // Who ran where since the last full scan: tick times grown, by CPU.
        let mut by_cpu: HashMap<u32, Vec<(u32, u32, u64)>> = HashMap::new();
        let mut ticks = HashMap::with_capacity(tasks.len());
        for t in tasks {
            if let Some(&(_, _, before)) = self.ticks.get(&t.tid) {
                let d = t.stat.ticks.saturating_sub(before);
                if d > 0 {
                    by_cpu
                        .entry(t.stat.cpu)
                        .or_default()
                        .push((t.tid, t.tgid, d));
                }
            }
            ticks.insert(t.tid, (t.tgid, t.stat.cpu, t.stat.ticks));
        }
        self.ticks = ticks;
        self.threads = tasks.len();
        let seen: std::collections::HashSet<u32> = tasks.iter().map(|t| t.tid).collect();
        self.close_missing(&seen);
        for t in tasks {
            self.update(now_ns, t);
        }
        for (tid, tr) in &mut self.tracks {
            for &(h, tgid, d) in by_cpu.get(&tr.cpu).into_iter().flatten() {
                if h != *tid {
                    tr.holders.entry(h).or_insert((tgid, 0)).1 += d;
                }
            }
        }
    }

    /// A recheck at `now_ns` of the threads already waiting (what
    /// [`Self::waiting`] lists); `tasks` holds those still there.
    pub fn recheck(&mut self, now_ns: u64, tasks: &[TaskScan]) {
        let seen: std::collections::HashSet<u32> = tasks.iter().map(|t| t.tid).collect();
        self.close_missing(&seen);
        for t in tasks {
            self.update(now_ns, t);
        }
    }

    /// Threads being tracked (runnable, run time unmoved since a scan).
    pub fn waiting(&self) -> Vec<(u32, u32)> {
        self.tracks.iter().map(|(&t, tr)| (t, tr.tgid)).collect()
    }

    /// Open waits of at least `min_ns`, longest first.
    pub fn open(&self, min_ns: u64) -> Vec<Wait> {
        let mut out: Vec<Wait> = self
            .tracks
            .iter()
            .map(|(&tid, tr)| tr.wait(tid, true))
            .filter(|w| w.waited_ns() >= min_ns)
            .collect();
        out.sort_by(|a, b| b.waited_ns().cmp(&a.waited_ns()).then(a.tid.cmp(&b.tid)));
        out
    }

    /// Waits of at least [`STARVE_NS`] that ended, oldest first.
    pub fn ended(&self) -> &[Wait] {
        &self.ended
    }

    fn close_missing(&mut self, seen: &std::collections::HashSet<u32>) {
        let gone: Vec<u32> = self
            .tracks
            .keys()
            .filter(|t| !seen.contains(t))
            .copied()
            .collect();
        for tid in gone {
            self.close(tid);
        }
    }

    fn close(&mut self, tid: u32) {
        if let Some(tr) = self.tracks.remove(&tid) {
            if tr.seen_ns.saturating_sub(tr.since_ns) >= STARVE_NS {
                self.ended.push(tr.wait(tid, false));
            }
        }
    }

    fn update(&mut self, now_ns: u64, t: &TaskScan) {
        let (true, Some(run_ns)) = (t.stat.runnable(), t.run_ns) else {
            self.close(t.tid);
            return;
        };
        if let Some(tr) = self.tracks.get_mut(&t.tid) {
            if tr.run_ns == run_ns {
                tr.seen_ns = now_ns;
                tr.cpu = t.stat.cpu;
                return;
            }
            self.close(t.tid);
        }
        // It ran at some moment before this scan: its wait (if it waits)
        // counts from here, never longer than it was.
        self.tracks.insert(
            t.tid,
            Track {
                tgid: t.tgid,
                cpu: t.stat.cpu,
                run_ns,
                since_ns: now_ns,
                seen_ns: now_ns,
                holders: HashMap::new(),
            },
        );
    }
}

/// A waiting thread as stored in a snapshot side, named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredWait {
    pub tid: u32,
    pub pid: u32,
    /// The thread's comm and its process's (the tgid's) comm.
    pub comm: String,
    pub process: String,
    pub cpu: u32,
    /// Its cgroup (v2 path, else the cpu controller's), when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Seconds it was seen runnable without running (a lower bound).
    pub waited_s: f64,
    /// CLOCK_MONOTONIC seconds of the scan after which it did not run
    /// again: queued since then (older readings lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_s: Option<f64>,
    /// Still waiting when the reading was taken.
    pub open: bool,
    /// Who ran on its CPU meanwhile, most first (at most three).
    pub holders: Vec<StoredHolder>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredHolder {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub process: String,
    /// CPU seconds it took on that CPU meanwhile (tick times).
    pub cpu_s: f64,
}

/// The scanner's reading over a capture, at /stealscope/starved.json.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredStarve {
    /// Threads of the last full scan, full scans and their period.
    pub threads: usize,
    pub full_scans: u64,
    pub full_every_s: f64,
    pub recheck_every_s: f64,
    /// The most CPU time one full scan took, ms (its cost on this host:
    /// the scanner thread's CPU time, not wall time, which a busy host
    /// stretches with run-queue wait).
    pub full_scan_max_ms: f64,
    /// Open waits at the end (from [`OPEN_WAIT_NS`]) and waits of over a
    /// second ([`STARVE_NS`]) that ended, longest first.
    pub waits: Vec<StoredWait>,
    /// The capture's own threads: how long they waited for a CPU during it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnWait>,
}

/// The capture itself: the interval asked and taken, and its own threads'
/// run-queue wait (schedstat run_delay) over it, which says why it overran.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OwnWait {
    pub asked_s: f64,
    pub took_s: f64,
    pub wait_s: f64,
    pub run_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn task(tid: u32, state: u8, cpu: u32, ticks: u64, run_ns: u64) -> TaskScan {
        TaskScan {
            tid,
            tgid: tid,
            stat: TaskStat { state, ticks, cpu },
            run_ns: (state == b'R').then_some(run_ns),
        }
    }

    /// A queued thread whose run time stands still is open from the first
    /// scan that saw it; the busy thread on its CPU is its holder; a
    /// thread on another CPU is not; when it runs, the wait ends.
    #[test]
    fn a_queued_thread_is_open_until_it_runs_and_names_its_holder() {
        let mut t = StarveTracker::default();
        let scan = |tk: &mut StarveTracker, i: u64, victim_run: u64| {
            tk.full(
                i * S / 2,
                &[
                    task(10, b'R', 0, 0, victim_run),
                    task(20, b'R', 0, 50 * i, 1000 + i),
                    task(30, b'R', 1, 10 * i, 2000 + i),
                    task(40, b'S', 0, 0, 0),
                ],
            )
        };
        for i in 0..=3 {
            scan(&mut t, i, 7);
        }
        let open = t.open(STARVE_NS);
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!((open[0].tid, open[0].cpu), (10, 0));
        assert_eq!(open[0].waited_ns(), 3 * S / 2);
        assert_eq!(open[0].holders[0].tid, 20);
        assert_eq!(open[0].holders[0].ticks, 150);
        assert!(open[0].holders.iter().all(|h| h.tid != 30));
        // The busy threads' run times move: never open for a second.
        assert!(t.open(0).iter().all(|w| w.tid == 10 || w.waited_ns() == 0));
        scan(&mut t, 4, 8);
        assert!(t.open(STARVE_NS).is_empty());
        assert_eq!(t.ended().len(), 1);
        assert!(!t.ended()[0].open);
    }

    /// A recheck that finds the thread asleep ends a short wait without a record.
    #[test]
    fn a_short_wait_that_ends_leaves_nothing() {
        let mut t = StarveTracker::default();
        t.full(0, &[task(10, b'R', 0, 0, 5)]);
        t.recheck(S / 4, &[task(10, b'R', 0, 0, 5)]);
        assert_eq!(t.waiting(), vec![(10, 10)]);
        t.recheck(S / 2, &[task(10, b'S', 0, 0, 5)]);
        assert!(t.waiting().is_empty() && t.ended().is_empty());
    }
}
