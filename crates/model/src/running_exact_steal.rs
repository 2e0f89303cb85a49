//! Exact guest steal for the long-running views (issue 30: `serve`, `top`):
//! the guest steal collector's readings, as the engine hands them over
//! ([`ExactReading`]), folded into running totals that never decrease, the
//! busy steal of the [`TOP_VICTIMS`] processes that lost the most (the
//! rest as `other`, [`crate::sticky_top`]), and the recent episodes with
//! their victims. Which route gives the steal, and why not the exact one,
//! is [`StealRoute`]. Pure: the engine reads the collector and /proc.

use crate::exact_steal::{EpisodeExact, TaskExact};
use crate::sticky_top::StickyTop;
use std::collections::{BTreeMap, HashMap, VecDeque};
use stealscope_who::{CpuSteal, GuestStealSample, StealVictim};

/// Processes whose busy steal is shown on its own; the rest are `other`.
pub const TOP_VICTIMS: usize = 10;
/// The span `top`'s exact steal line covers.
pub const RECENT_NS: u64 = 10_000_000_000;
/// Episodes over the threshold kept for `top`, by age and by number.
pub const EPISODES_KEPT_NS: u64 = 60_000_000_000;
pub const EPISODES_KEPT: usize = 1024;
/// Upper bounds (seconds) of the exported steal-episode buckets: a steal
/// clock advance of a busy vCPU is often a few µs, a host that
/// descheduled it for a tick or more 1-10 ms, a stall up to a second.
/// Episodes count under the first bound at or above their log bucket's
/// upper end (crates/sched `EpisodeHist`, 12.5 % wide).
pub const EPISODE_BOUNDS_S: [f64; 13] = [
    100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 200e-3, 500e-3, 1.0,
];
/// Why a collector that loaded is not used: a guest without paravirtual
/// steal time (or a bare-metal machine) has a steal clock stuck at 0.
pub const NO_STEAL_CLOCK: &str =
    "the steal clock reads 0 on every CPU: no paravirtual steal time here";

/// Where a view's guest steal comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StealRoute {
    /// The collector is loading (a fraction of a second): nothing said yet.
    #[default]
    Starting,
    /// The BPF collector: every steal-clock advance in ns, with its victim.
    Bpf,
    /// /proc/stat's steal only (10 ms units, polled); why not the collector.
    ProcStat { reason: String },
}

impl StealRoute {
    /// The metric label: `bpf` or `proc_stat` (`starting` is not exported).
    pub fn label(&self) -> &'static str {
        match self {
            StealRoute::Starting => "starting",
            StealRoute::Bpf => "bpf",
            StealRoute::ProcStat { .. } => "proc_stat",
        }
    }

    /// Why the exact route does not run; empty when it does.
    pub fn reason(&self) -> &str {
        match self {
            StealRoute::ProcStat { reason } => reason,
            _ => "",
        }
    }
}

/// What the engine read from the collector, in the order it read it.
#[derive(Debug, Clone, PartialEq)]
pub enum ExactReading {
    /// It loaded and its steal clock moves: the route is BPF from now.
    Running,
    /// It cannot run, or stopped: one line saying why.
    Unavailable(String),
    /// Per-CPU counters, cumulative since it loaded (cheap: every sample).
    Cpus { t_ns: u64, cpus: Vec<CpuSteal> },
    /// A whole reading (tasks and episodes, about once a second), with the
    /// name of each victim's process by pid where /proc had it.
    Full {
        sample: GuestStealSample,
        processes: BTreeMap<u32, String>,
    },
}

/// Steal over a recent span, every CPU together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecentSteal {
    pub span_s: f64,
    pub cpus: usize,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub episodes: u64,
}

impl RecentSteal {
    /// `ns` as % of the CPUs' time over the span.
    pub fn pct(&self, ns: u64) -> Option<f64> {
        let cpu_s = self.span_s * self.cpus as f64;
        (cpu_s > 0.0).then(|| 100.0 * ns as f64 / 1e9 / cpu_s)
    }
}

/// (t_ns, busy_ns, idle_ns, episodes), every CPU together, at a reading.
type Point = (u64, u64, u64, u64);

#[derive(Debug, Clone)]
pub struct RunningExactSteal {
    pub route: StealRoute,
    /// Episodes at or over this many ns are listed one by one.
    pub threshold_ns: u64,
    /// Per CPU on which the collector ever ran, cumulative since it loaded.
    cpus: BTreeMap<u32, CpuSteal>,
    victims: StickyTop<String>,
    /// Each task's busy steal at the last whole reading, by (tid, start).
    tasks_seen: HashMap<(u32, u64), u64>,
    history: VecDeque<Point>,
    episodes: VecDeque<EpisodeExact>,
    /// The seq of the next episode not taken yet.
    next_seq: u64,
}

impl Default for RunningExactSteal {
    fn default() -> Self {
        RunningExactSteal {
            route: StealRoute::Starting,
            threshold_ns: 0,
            cpus: BTreeMap::new(),
            victims: StickyTop::new(TOP_VICTIMS),
            tasks_seen: HashMap::new(),
            history: VecDeque::new(),
            episodes: VecDeque::new(),
            next_seq: 0,
        }
    }
}

/// A task as the views name it: by its process (`processes`), its own
/// comm beside when it differs.
fn victim(t: &stealscope_who::StealTaskId, processes: &BTreeMap<u32, String>) -> TaskExact {
    let process = processes.get(&t.tgid).filter(|p| **p != t.comm);
    TaskExact {
        pid: t.tgid,
        tid: t.tid,
        comm: process.unwrap_or(&t.comm).clone(),
        thread: process.map(|_| t.comm.clone()),
        busy_ns: 0,
        episodes: 1,
    }
}

impl RunningExactSteal {
    /// Takes one reading. Counters keep their largest value, so a reading
    /// that went backwards (none should) is ignored rather than exported.
    pub fn apply(&mut self, r: ExactReading) {
        match r {
            ExactReading::Running => self.route = StealRoute::Bpf,
            // The series leave with the route: frozen counters would read
            // as no steal.
            ExactReading::Unavailable(reason) => {
                *self = RunningExactSteal {
                    route: StealRoute::ProcStat { reason },
                    ..RunningExactSteal::default()
                }
            }
            ExactReading::Cpus { t_ns, cpus } => self.cpus_at(t_ns, cpus),
            ExactReading::Full { sample, processes } => {
                self.threshold_ns = sample.threshold_ns;
                self.cpus_at(sample.monotonic_ns, sample.cpus.clone());
                self.tasks(&sample, &processes);
                self.episodes(&sample, &processes);
            }
        }
    }

    fn cpus_at(&mut self, t_ns: u64, cpus: Vec<CpuSteal>) {
        if self.route != StealRoute::Bpf {
            return;
        }
        for c in cpus.into_iter().filter(|c| c.hook_runs > 0) {
            match self.cpus.get_mut(&c.cpu) {
                Some(old) if c.busy_ns < old.busy_ns || c.idle_ns < old.idle_ns => {}
                Some(old) if c.episodes.count < old.episodes.count => {}
                Some(old) => *old = c,
                None => {
                    self.cpus.insert(c.cpu, c);
                }
            }
        }
        let point: Point = self.cpus.values().fold((t_ns, 0, 0, 0), |p: Point, c| {
            (
                p.0,
                p.1.saturating_add(c.busy_ns),
                p.2.saturating_add(c.idle_ns),
                p.3.saturating_add(c.episodes.count),
            )
        });
        if self.history.back().is_some_and(|b| b.0 >= t_ns) {
            return;
        }
        self.history.push_back(point);
        // Keep one point at or before the span's start.
        while self.history.len() > 2 && self.history[1].0 + RECENT_NS <= t_ns {
            self.history.pop_front();
        }
    }

    fn tasks(&mut self, s: &GuestStealSample, processes: &BTreeMap<u32, String>) {
        if self.route != StealRoute::Bpf {
            return;
        }
        let mut seen = HashMap::with_capacity(s.tasks.len());
        for t in &s.tasks {
            let key = (t.task.tid, t.task.start_ns);
            // A task the kernel's LRU map dropped and charged again starts
            // over from 0: all of its new total is new.
            let before = self.tasks_seen.get(&key).copied().unwrap_or(0);
            let d = if t.busy_ns >= before {
                t.busy_ns - before
            } else {
                t.busy_ns
            };
            if d > 0 {
                self.victims.add(victim(&t.task, processes).comm, d);
            }
            seen.insert(key, t.busy_ns);
        }
        // The map's own tasks only: bounded by its 8,192 entries.
        self.tasks_seen = seen;
    }

    fn episodes(&mut self, s: &GuestStealSample, processes: &BTreeMap<u32, String>) {
        if self.route != StealRoute::Bpf {
            return;
        }
        for e in s.episodes.iter().filter(|e| e.seq >= self.next_seq) {
            self.episodes.push_back(EpisodeExact {
                monotonic_ns: e.monotonic_ns,
                cpu: e.cpu,
                ns: e.ns,
                victim: match &e.victim {
                    StealVictim::Idle => None,
                    StealVictim::Task(t) => Some(TaskExact {
                        busy_ns: e.ns,
                        ..victim(t, processes)
                    }),
                },
            });
        }
        self.next_seq = self.next_seq.max(s.episodes_seen);
        let now = s.monotonic_ns;
        while self.episodes.len() > EPISODES_KEPT
            || self
                .episodes
                .front()
                .is_some_and(|e| e.monotonic_ns + EPISODES_KEPT_NS < now)
        {
            self.episodes.pop_front();
        }
    }

    /// Each CPU's totals (route BPF only; empty otherwise).
    pub fn cpus(&self) -> impl Iterator<Item = &CpuSteal> {
        self.cpus.values()
    }

    /// Busy steal by process, seconds: the shown ones in name order, then
    /// `None` for every other process.
    pub fn victims(&self) -> Vec<(Option<&str>, f64)> {
        if self.route != StealRoute::Bpf {
            return Vec::new();
        }
        let mut v: Vec<(Option<&str>, f64)> = self
            .victims
            .shown()
            .into_iter()
            .map(|(l, ns)| (Some(l.as_str()), ns as f64 / 1e9))
            .collect();
        v.push((None, self.victims.other() as f64 / 1e9));
        v
    }

    /// Steal over about the last [`RECENT_NS`], or since the first
    /// reading; None before two readings.
    pub fn recent(&self) -> Option<RecentSteal> {
        let (a, b) = (self.history.front()?, self.history.back()?);
        (b.0 > a.0).then(|| RecentSteal {
            span_s: (b.0 - a.0) as f64 / 1e9,
            cpus: self.cpus.len(),
            busy_ns: b.1.saturating_sub(a.1),
            idle_ns: b.2.saturating_sub(a.2),
            episodes: b.3.saturating_sub(a.3),
        })
    }

    /// The `n` longest episodes kept (at most a minute old), longest
    /// first; the later first among equals.
    pub fn largest(&self, n: usize) -> Vec<&EpisodeExact> {
        let mut v: Vec<&EpisodeExact> = self.episodes.iter().collect();
        v.sort_by(|a, b| b.ns.cmp(&a.ns).then(b.monotonic_ns.cmp(&a.monotonic_ns)));
        v.truncate(n);
        v
    }

    /// CLOCK_MONOTONIC of the latest reading, ns.
    pub fn newest_ns(&self) -> Option<u64> {
        self.history.back().map(|p| p.0)
    }
}

#[cfg(test)]
#[path = "running_exact_steal_tests.rs"]
mod tests;
