//! The guest steal collector's typed output: cumulative counters since the
//! collector started (take [`GuestStealSample::since`] for an interval),
//! plus the recent episodes over the threshold.

use crate::hist::EpisodeHist;
use serde::Serialize;
use std::collections::HashMap;

/// A task as the kernel knew it when it was charged: a reused tid has
/// another start time, an exec another comm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StealTaskId {
    pub tid: u32,
    /// Thread group id (the process's pid).
    pub tgid: u32,
    /// `task_struct.start_time` (monotonic ns at fork).
    pub start_ns: u64,
    /// `comm` at its last charge.
    pub comm: String,
}

/// What a CPU had current while its steal accrued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StealVictim {
    /// The idle task: the vCPU was woken and waited on the host.
    Idle,
    /// A task lost the time (busy steal).
    Task(StealTaskId),
}

/// One advance of a CPU's steal clock at or over the threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StealEpisode {
    /// Its place among all episodes drained since the start (0, 1, ...).
    pub seq: u64,
    /// CLOCK_MONOTONIC when the advance was seen (at the switch or timer
    /// after the vCPU came back: within a tick of its end while busy).
    pub monotonic_ns: u64,
    pub cpu: u32,
    pub ns: u64,
    pub victim: StealVictim,
}

/// One CPU's steal, cumulative.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuSteal {
    pub cpu: u32,
    /// Charged to tasks that were current (busy steal).
    pub busy_ns: u64,
    /// Charged to the idle task (idle steal).
    pub idle_ns: u64,
    pub busy_episodes: u64,
    pub idle_episodes: u64,
    /// Every episode, busy and idle (an episode is one advance seen).
    pub episodes: EpisodeHist,
    /// The steal clock at the last reading (not differenced by `since`).
    pub steal_clock_ns: u64,
    /// Hook runs on this CPU.
    pub hook_runs: u64,
    /// Episodes over the threshold the ring had no room for (counted in
    /// every total above, missing from the episode list).
    pub ring_lost: u64,
}

impl CpuSteal {
    /// A CPU's steal from its totals and the length of each episode (ns):
    /// what a reading would hold, for the views' tests and fixtures.
    pub fn from_episodes(cpu: u32, busy_ns: u64, idle_ns: u64, episodes: &[u64]) -> CpuSteal {
        let mut h = EpisodeHist::default();
        for &ns in episodes {
            h.record(ns);
        }
        CpuSteal {
            cpu,
            busy_ns,
            idle_ns,
            episodes: h,
            ..CpuSteal::default()
        }
    }

    pub fn total_ns(&self) -> u64 {
        self.busy_ns + self.idle_ns
    }

    /// What accrued since `earlier` (the same CPU).
    pub fn since(&self, earlier: &CpuSteal) -> CpuSteal {
        CpuSteal {
            cpu: self.cpu,
            busy_ns: self.busy_ns.saturating_sub(earlier.busy_ns),
            idle_ns: self.idle_ns.saturating_sub(earlier.idle_ns),
            busy_episodes: self.busy_episodes.saturating_sub(earlier.busy_episodes),
            idle_episodes: self.idle_episodes.saturating_sub(earlier.idle_episodes),
            episodes: self.episodes.since(&earlier.episodes),
            steal_clock_ns: self.steal_clock_ns,
            hook_runs: self.hook_runs.saturating_sub(earlier.hook_runs),
            ring_lost: self.ring_lost.saturating_sub(earlier.ring_lost),
        }
    }
}

/// Busy steal one task took, cumulative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskSteal {
    pub task: StealTaskId,
    pub busy_ns: u64,
    pub episodes: u64,
}

/// One reading of the guest steal collector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuestStealSample {
    /// CLOCK_MONOTONIC at the read, ns.
    pub monotonic_ns: u64,
    /// Episodes at or over this many ns are listed one by one.
    pub threshold_ns: u64,
    /// By CPU number.
    pub cpus: Vec<CpuSteal>,
    /// Tasks with busy steal, most first (the kernel map keeps 8,192).
    pub tasks: Vec<TaskSteal>,
    /// The most recent episodes over the threshold, oldest first (at most
    /// the guest steal collector's `RECENT`).
    pub episodes: Vec<StealEpisode>,
    /// Episodes over the threshold drained so far (the next one's seq).
    pub episodes_seen: u64,
}

impl GuestStealSample {
    pub fn busy_ns(&self) -> u64 {
        self.cpus.iter().map(|c| c.busy_ns).sum()
    }

    pub fn idle_ns(&self) -> u64 {
        self.cpus.iter().map(|c| c.idle_ns).sum()
    }

    pub fn total_ns(&self) -> u64 {
        self.busy_ns() + self.idle_ns()
    }

    /// The CPU numbered `cpu`, if the sample has it.
    pub fn cpu(&self, cpu: u32) -> Option<&CpuSteal> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    /// Every CPU's episodes in one histogram.
    pub fn episode_hist(&self) -> EpisodeHist {
        let mut h = EpisodeHist::default();
        for c in &self.cpus {
            h.add(&c.episodes);
        }
        h
    }

    /// Episodes over the threshold since `earlier` that are not listed
    /// (the recent list or the kernel's ring was full).
    pub fn episodes_unlisted(&self, earlier: &GuestStealSample) -> u64 {
        let lost = |s: &GuestStealSample| s.cpus.iter().map(|c| c.ring_lost).sum::<u64>();
        let drained = self.episodes_seen.saturating_sub(earlier.episodes_seen);
        let listed = self
            .episodes
            .iter()
            .filter(|e| e.seq >= earlier.episodes_seen)
            .count() as u64;
        drained.saturating_sub(listed) + lost(self).saturating_sub(lost(earlier))
    }

    /// The `n` longest listed episodes, longest first.
    pub fn largest_episodes(&self, n: usize) -> Vec<&StealEpisode> {
        let mut v: Vec<&StealEpisode> = self.episodes.iter().collect();
        v.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.seq.cmp(&b.seq)));
        v.truncate(n);
        v
    }

    /// What accrued since `earlier` (a sample of the same collector):
    /// per-CPU differences, tasks that grew, episodes drained after it.
    pub fn since(&self, earlier: &GuestStealSample) -> GuestStealSample {
        let cpus = self
            .cpus
            .iter()
            .map(|c| match earlier.cpu(c.cpu) {
                Some(e) => c.since(e),
                None => c.clone(),
            })
            .collect();
        let before: HashMap<(u32, u64), (u64, u64)> = earlier
            .tasks
            .iter()
            .map(|t| ((t.task.tid, t.task.start_ns), (t.busy_ns, t.episodes)))
            .collect();
        let mut tasks: Vec<TaskSteal> = self
            .tasks
            .iter()
            .filter_map(|t| {
                let (ns0, eps0) = before
                    .get(&(t.task.tid, t.task.start_ns))
                    .copied()
                    .unwrap_or((0, 0));
                let ns = t.busy_ns.saturating_sub(ns0);
                (ns > 0).then(|| TaskSteal {
                    task: t.task.clone(),
                    busy_ns: ns,
                    episodes: t.episodes.saturating_sub(eps0),
                })
            })
            .collect();
        sort_tasks(&mut tasks);
        GuestStealSample {
            monotonic_ns: self.monotonic_ns,
            threshold_ns: self.threshold_ns,
            cpus,
            tasks,
            episodes: self
                .episodes
                .iter()
                .filter(|e| e.seq >= earlier.episodes_seen)
                .cloned()
                .collect(),
            episodes_seen: self.episodes_seen,
        }
    }
}

/// Most busy steal first; ties by tid (a stable order for output).
pub fn sort_tasks(tasks: &mut [TaskSteal]) {
    tasks.sort_by(|a, b| b.busy_ns.cmp(&a.busy_ns).then(a.task.cmp(&b.task)));
}
