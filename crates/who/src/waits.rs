//! The collector's typed output: cumulative counters per watched thread since
//! it was first watched, so a view takes the difference of two samples for
//! an interval (like every other counter in stealscope).

use crate::hist::EpisodeHist;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which route produced a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    Bpf,
    Tracefs,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Bpf => "bpf",
            Route::Tracefs => "tracefs",
        }
    }
}

/// A thread that was current on a CPU while a watched thread waited there.
/// Raw identity only: the model decides whether it is a vCPU, a VMM thread,
/// a kernel thread class or a host process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Thread {
    /// Thread id (the kernel's pid).
    pub tid: u32,
    /// Thread group id (the process's pid); equals `tid` for kernel threads.
    pub tgid: u32,
    /// `comm` when it ran. Inline (a comm is at most 15 bytes): a reading
    /// at 10,000 threads clones every culprit of every thread, and as
    /// `String`s each was an allocation of its own.
    pub comm: CompactString,
    /// PF_KTHREAD was set.
    pub kthread: bool,
}

/// Cumulative wait of one watched thread, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ThreadWaits {
    pub tid: u32,
    /// Charged to each thread that ran while this one waited.
    pub by_thread: BTreeMap<Thread, u64>,
    /// Hard and soft interrupt time on the CPU while this one waited.
    pub irq_ns: u64,
    /// The CPU ran its idle task while this one was queued (wake-up latency).
    pub idle_ns: u64,
    /// Queued time no record covers (before the first event seen on that
    /// CPU, or older than the per-CPU record kept): counted, never hidden.
    pub unknown_ns: u64,
    /// One entry per wait episode (enqueue to switch-in).
    pub episodes: EpisodeHist,
}

impl ThreadWaits {
    /// All queued time charged so far.
    pub fn wait_ns(&self) -> u64 {
        self.by_thread.values().sum::<u64>() + self.irq_ns + self.idle_ns + self.unknown_ns
    }

    /// What accrued since `earlier` (a sample of the same thread).
    pub fn since(&self, earlier: &ThreadWaits) -> ThreadWaits {
        ThreadWaits {
            episodes: self.episodes.since(&earlier.episodes),
            ..self.charged_since(earlier)
        }
    }

    /// [`Self::since`] without the episodes (left empty), for a view that
    /// reads only what was charged: at 10,000 threads a scan saves as many
    /// histogram subtractions.
    pub fn charged_since(&self, earlier: &ThreadWaits) -> ThreadWaits {
        let by_thread = self
            .by_thread
            .iter()
            .filter_map(|(c, &ns)| {
                let d = ns.saturating_sub(earlier.by_thread.get(c).copied().unwrap_or(0));
                (d > 0).then(|| (c.clone(), d))
            })
            .collect();
        ThreadWaits {
            tid: self.tid,
            by_thread,
            irq_ns: self.irq_ns.saturating_sub(earlier.irq_ns),
            idle_ns: self.idle_ns.saturating_sub(earlier.idle_ns),
            unknown_ns: self.unknown_ns.saturating_sub(earlier.unknown_ns),
            episodes: EpisodeHist::default(),
        }
    }
}

/// Health of the collector; every loss is counted and reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SchedStats {
    /// Scheduler events handled.
    pub events: u64,
    /// Events the kernel dropped (tracefs buffer overrun) or the program
    /// could not record (a full map).
    pub lost_events: u64,
    /// Wait stretches older than the per-CPU record (charged as unknown).
    pub overflows: u64,
    /// Switches the trace left out, found when the next switch on a CPU
    /// names another prev (tracefs route), or arrivals of a watched thread
    /// whose wait the kernel counted without the program seeing them (bpf
    /// route). Their wait goes to unknown.
    pub missed_switches: u64,
    /// Threads asked to be watched that the route could not take (its
    /// map full): their wait has no attribution. Counted, never hidden.
    pub unwatched: u64,
}

/// One reading of every watched thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedSample {
    pub route: Route,
    /// CLOCK_MONOTONIC at the read, ns.
    pub monotonic_ns: u64,
    pub threads: BTreeMap<u32, ThreadWaits>,
    pub stats: SchedStats,
    /// The comm of each culprit's process (/proc/TGID/comm) at the read:
    /// a host process is named by its process, not by the thread that ran
    /// (rustc's "coordinator"), and by its name now, after an exec. A
    /// process that exited has none. Filled by the collector's `read`;
    /// not stored.
    #[serde(skip)]
    pub procs: BTreeMap<u32, String>,
}
