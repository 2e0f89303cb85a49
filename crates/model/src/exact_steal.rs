//! Exact guest steal over an interval (issue 30), as a snapshot side keeps
//! it: the guest steal collector's reading at the end less its first one
//! (stealscope_who::GuestStealSample::since), cut to what the reports
//! show, or why the collector did not run. The live part (loading and
//! reading the collector) is the engine's; the model only reads this back,
//! so a saved snapshot reports what the live run printed.

use serde::{Deserialize, Serialize};
use stealscope_who::{GuestStealSample, StealVictim};

/// t1 only: a [`StoredExactSteal`].
pub const EXACT_STEAL_FILE: &str = "/stealscope/exact-steal.json";
/// Tasks and episodes kept (the largest).
pub const KEEP: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum StoredExactSteal {
    Measured(ExactSteal),
    /// One line naming what failed (not root, no BTF, no steal clock).
    Unavailable {
        reason: String,
    },
}

/// One CPU's steal over the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuExact {
    pub cpu: u32,
    /// Steal while a task ran (busy steal) and while the CPU idled (the
    /// vCPU was woken and waited on the host: idle steal), ns.
    pub busy_ns: u64,
    pub idle_ns: u64,
    /// Advances of the steal clock: every episode, whatever its size.
    pub episodes: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
    pub max_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
}

/// A task's busy steal over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskExact {
    pub pid: u32,
    pub tid: u32,
    /// The process's name (its main thread's comm, read at the capture;
    /// the thread's own when that was not readable).
    pub comm: String,
    /// The thread's comm, when it differs from the process's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    pub busy_ns: u64,
    pub episodes: u64,
}

/// One listed episode (at or over the threshold).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeExact {
    /// CLOCK_MONOTONIC when it was seen, ns.
    pub monotonic_ns: u64,
    pub cpu: u32,
    pub ns: u64,
    /// The task it hit (None: the CPU was idle, idle steal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim: Option<TaskExact>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExactSteal {
    /// Between the collector's two readings, s.
    pub span_s: f64,
    pub threshold_ns: u64,
    pub cpus: Vec<CpuExact>,
    /// Most busy steal first, at most [`KEEP`].
    pub tasks: Vec<TaskExact>,
    /// Longest first, at most [`KEEP`].
    pub largest: Vec<EpisodeExact>,
    /// Episodes over the threshold that are not listed (a full ring).
    pub unlisted: u64,
    /// CLOCK_MONOTONIC of the two readings, taken before each read its
    /// counters: an episode listed between them is in the totals above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readings_ns: Option<(u64, u64)>,
}

impl ExactSteal {
    /// From an interval's reading (`d = end.since(start)`), `span_s` long;
    /// `unlisted` from [`GuestStealSample::episodes_unlisted`].
    pub fn of(d: &GuestStealSample, span_s: f64, unlisted: u64) -> ExactSteal {
        let cpus = d
            .cpus
            .iter()
            .map(|c| CpuExact {
                cpu: c.cpu,
                busy_ns: c.busy_ns,
                idle_ns: c.idle_ns,
                episodes: c.busy_episodes + c.idle_episodes,
                over_1ms: c.episodes.over_1ms,
                over_10ms: c.episodes.over_10ms,
                max_ns: c.episodes.max_ns,
                p50_ns: c.episodes.quantile(0.5),
                p99_ns: c.episodes.quantile(0.99),
            })
            .collect();
        let task = |t: &stealscope_who::StealTaskId, busy_ns: u64, episodes: u64| TaskExact {
            pid: t.tgid,
            tid: t.tid,
            comm: t.comm.clone(),
            thread: None,
            busy_ns,
            episodes,
        };
        ExactSteal {
            span_s,
            threshold_ns: d.threshold_ns,
            cpus,
            tasks: d
                .tasks
                .iter()
                .take(KEEP)
                .map(|t| task(&t.task, t.busy_ns, t.episodes))
                .collect(),
            largest: d
                .largest_episodes(KEEP)
                .into_iter()
                .map(|e| EpisodeExact {
                    monotonic_ns: e.monotonic_ns,
                    cpu: e.cpu,
                    ns: e.ns,
                    victim: match &e.victim {
                        StealVictim::Idle => None,
                        StealVictim::Task(t) => Some(task(t, e.ns, 1)),
                    },
                })
                .collect(),
            unlisted,
            readings_ns: None,
        }
    }

    /// Names each victim by its process (`comm_of(pid)`, read live at the
    /// capture), keeping the thread's comm beside it when it differs.
    pub fn name_processes(&mut self, comm_of: impl Fn(u32) -> Option<String>) {
        let tasks = self.tasks.iter_mut();
        let hit = self.largest.iter_mut().filter_map(|e| e.victim.as_mut());
        for t in tasks.chain(hit) {
            if let Some(c) = comm_of(t.pid).filter(|c| *c != t.comm) {
                t.thread = Some(std::mem::replace(&mut t.comm, c));
            }
        }
    }

    pub fn busy_ns(&self) -> u64 {
        self.cpus.iter().map(|c| c.busy_ns).sum()
    }

    pub fn idle_ns(&self) -> u64 {
        self.cpus.iter().map(|c| c.idle_ns).sum()
    }

    /// Steal as % of the CPUs' time over the span.
    pub fn pct(&self) -> Option<f64> {
        let cpu_s = self.span_s * self.cpus.len() as f64;
        (cpu_s > 0.0).then(|| 100.0 * (self.busy_ns() + self.idle_ns()) as f64 / 1e9 / cpu_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_named_by_their_process_with_the_thread_beside() {
        let t = |pid, tid, comm: &str| TaskExact {
            pid,
            tid,
            comm: comm.into(),
            thread: None,
            busy_ns: 1,
            episodes: 1,
        };
        let mut e = ExactSteal {
            tasks: vec![t(10, 11, "opt 51jq"), t(20, 20, "cron"), t(30, 31, "gone")],
            largest: vec![EpisodeExact {
                monotonic_ns: 0,
                cpu: 0,
                ns: 1,
                victim: Some(t(10, 12, "coordinator")),
            }],
            ..Default::default()
        };
        e.name_processes(|pid| match pid {
            10 => Some("rustc".into()),
            20 => Some("cron".into()),
            _ => None,
        });
        let names: Vec<(&str, Option<&str>)> = e
            .tasks
            .iter()
            .map(|t| (t.comm.as_str(), t.thread.as_deref()))
            .collect();
        assert_eq!(
            names,
            [("rustc", Some("opt 51jq")), ("cron", None), ("gone", None)]
        );
        let hit = e.largest[0].victim.as_ref().unwrap();
        assert_eq!(
            (hit.comm.as_str(), hit.thread.as_deref()),
            ("rustc", Some("coordinator"))
        );
    }
}
