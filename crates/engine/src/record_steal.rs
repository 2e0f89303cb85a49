//! `record`'s steal route (issue 30): the guest steal collector when it
//! loads here, else /proc/stat polled at [`POLL_STAT_HZ`]. With the
//! collector the BPF program writes an episode only for an advance at or
//! over the threshold, user space drains its ring once a flush (the
//! recorder wakes once a second anyway), each checkpoint stores what
//! accrued since the start checkpoint, and /proc/stat is sampled at
//! [`EXACT_STAT_HZ`] only for its other columns: the cost follows the
//! steal, not the time. Which route ran, and why, goes in the header.

use crate::exact_steal_hook;
use stealscope_model::exact_steal::StoredExactSteal;
use stealscope_model::running_exact_steal::NO_STEAL_CLOCK;
use stealscope_readers::recording::{StealEpisodeRecord, StealSource, StealVictimRecord};
use stealscope_sched::{GuestSteal, StealOptions};
use stealscope_who::{GuestStealSample, StealEpisode, StealVictim};

/// /proc/stat samples per second when the collector runs: steal is exact
/// without it; user, system, idle and the rest need no 10 ms resolution
/// (and 100 Hz is what cost ~0.7 % of a CPU, issue 4).
pub const EXACT_STAT_HZ: f64 = 1.0;
/// ... and when it does not: 10 ms windows are as fine as the counter's
/// unit, the resolution steal bursts need (issue 19).
pub const POLL_STAT_HZ: f64 = 100.0;
/// The ring is drained with each flush of the file: 256 KiB holds 4,096
/// episodes, more than a second of 100 µs episodes on two CPUs at 20 %
/// steal; what does not fit is counted (`ring_lost`), and the totals
/// stay exact either way.
pub const DRAIN_MS: u64 = 1000;

/// Which steal route `record` is asked to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StealWanted {
    /// The collector when it loads, /proc/stat otherwise.
    Auto,
    /// /proc/stat only (to compare, or where BPF is unwelcome).
    ProcStat,
}

/// The running collector and its reading at the start checkpoint.
pub struct ExactRecorder {
    g: GuestSteal,
    first: GuestStealSample,
    drained: Vec<StealEpisode>,
}

/// The route: the collector loaded and read (right before the start
/// checkpoint, which the caller takes next), or why not.
pub fn open(
    wanted: StealWanted,
    threshold_ns: u64,
    live: bool,
    vmm_running: bool,
) -> (Option<ExactRecorder>, StealSource) {
    let polled = |reason: &str| {
        let reason = reason.to_string();
        (None, StealSource::ProcStat { reason })
    };
    if wanted == StealWanted::ProcStat {
        return polled("asked for (--steal proc-stat)");
    }
    if !live {
        return polled("not the live root: the collector reads this machine's kernel");
    }
    // As doctor: its loader's CPU would be in the VMs' steal, and a
    // host's own steal is not what a recording of its VMs is about.
    if vmm_running {
        return polled("VMs run here: a host records their wait, not its own steal");
    }
    let mut g = match GuestSteal::start(StealOptions { threshold_ns }) {
        Ok(g) => g,
        Err(e) => return polled(&e.to_string()),
    };
    let first = match g.read() {
        Ok(s) => s,
        Err(e) => return polled(&format!("the collector's first reading: {e}")),
    };
    if !steal_clock_moved(&g) {
        return polled(NO_STEAL_CLOCK);
    }
    let source = StealSource::Exact {
        threshold_ns,
        drain_ms: DRAIN_MS,
    };
    let rec = ExactRecorder {
        g,
        first,
        drained: Vec::new(),
    };
    (Some(rec), source)
}

/// Whether the steal clock has moved since boot, judged on the CPUs whose
/// hook has run: right after attaching, a CPU reads 0 until its first
/// switch or tick (a release build read all zeros 1 time in 3), so this
/// waits up to 100 ms for one. A guest without paravirt steal time reads
/// 0 for good: its zeros would read as no steal.
fn steal_clock_moved(g: &GuestSteal) -> bool {
    for _ in 0..20 {
        let cpus = g.read_cpus().unwrap_or_default();
        let ran: Vec<_> = cpus.iter().filter(|c| c.hook_runs > 0).collect();
        if !ran.is_empty() {
            return ran.iter().any(|c| c.steal_clock_ns > 0);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

impl ExactRecorder {
    /// The episodes waiting in the ring, for the file.
    pub fn drain(&mut self) -> Vec<StealEpisodeRecord> {
        self.g.drain_into(Some(&mut self.drained));
        self.take()
    }

    /// What accrued since the start checkpoint (for the checkpoint about
    /// to be taken), and the episodes this reading drained.
    pub fn reading(&mut self) -> (StoredExactSteal, Vec<StealEpisodeRecord>) {
        let stored =
            exact_steal_hook::measured_keeping(&mut self.g, &self.first, Some(&mut self.drained));
        (stored, self.take())
    }

    /// Drained episodes in the file's form; those seen before the start
    /// reading are in its totals, not the recording's.
    fn take(&mut self) -> Vec<StealEpisodeRecord> {
        let from = self.first.monotonic_ns;
        self.drained
            .drain(..)
            .filter(|e| e.monotonic_ns >= from)
            .map(record_of)
            .collect()
    }
}

fn record_of(e: StealEpisode) -> StealEpisodeRecord {
    StealEpisodeRecord {
        t_ns: e.monotonic_ns,
        cpu: e.cpu,
        ns: e.ns,
        victim: match e.victim {
            StealVictim::Idle => None,
            StealVictim::Task(t) => Some(StealVictimRecord {
                tid: t.tid,
                pid: t.tgid,
                comm: t.comm,
            }),
        },
    }
}

/// The /proc/stat rate of a route, unless the user set one.
pub fn stat_hz(asked: Option<f64>, source: &StealSource) -> f64 {
    asked.unwrap_or(match source {
        StealSource::Exact { .. } => EXACT_STAT_HZ,
        StealSource::ProcStat { .. } => POLL_STAT_HZ,
    })
}

/// One line for the user: the route and its rate, or why it polled.
pub fn describe(source: &StealSource, stat_hz: f64) -> String {
    match source {
        StealSource::Exact { threshold_ns, .. } => format!(
            "exact (guest steal collector, episodes from {} µs listed; /proc/stat at {stat_hz} Hz)",
            threshold_ns / 1000
        ),
        StealSource::ProcStat { reason } => {
            format!("/proc/stat polled at {stat_hz} Hz: {reason}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_or_not_live_polls_at_100_hz_with_the_reason() {
        let (r, s) = open(StealWanted::ProcStat, 100_000, true, false);
        assert!(r.is_none());
        assert_eq!(stat_hz(None, &s), POLL_STAT_HZ);
        assert_eq!(stat_hz(Some(20.0), &s), 20.0);
        assert!(describe(&s, 100.0).contains("--steal proc-stat"));
        let (r, s) = open(StealWanted::Auto, 100_000, false, false);
        assert!(r.is_none());
        assert!(describe(&s, 100.0).contains("not the live root"), "{s:?}");
        let (r, s) = open(StealWanted::Auto, 100_000, true, true);
        assert!(r.is_none());
        assert!(describe(&s, 100.0).contains("VMs run here"), "{s:?}");
        let exact = StealSource::Exact {
            threshold_ns: 100_000,
            drain_ms: DRAIN_MS,
        };
        assert_eq!(stat_hz(None, &exact), EXACT_STAT_HZ);
        assert!(describe(&exact, 1.0).contains("from 100 µs"));
    }
}
