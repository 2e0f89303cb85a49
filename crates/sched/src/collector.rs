//! Starts the best route this kernel allows and says why the others could
//! not run.

use crate::bpf_info::ProgStats;
use crate::error::Result;
use crate::route::RouteImpl;
use stealscope_who::waits::{Route, SchedSample};

/// Which route to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preference {
    /// tracefs, then BPF (see `try_routes`).
    #[default]
    Auto,
    Bpf,
    Tracefs,
}

/// Neither route could start: one reason per route tried, e.g.
/// `bpf: BPF_PROG_LOAD: Operation not permitted (needs CAP_BPF)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no scheduler events: {}", reasons.join("; "))]
pub struct Unavailable {
    pub reasons: Vec<String>,
}

/// The routes to try, best first.
fn try_routes(pref: Preference) -> &'static [Route] {
    match pref {
        // BPF first: it aggregates in the kernel, and its wait lengths are
        // the kernel's own (run_delay), so sums equal schedstat; tracefs
        // only approximates them from trace stamps. BPF's start-up cost
        // 0.2-0.4 s of verifier CPU (0.06 s since the charge walk became a
        // bpf_loop callback), so the one-interval commands load it before
        // their t0 (engine::host::sched_hook); started inside the
        // interval, the victims' wait behind the loader was in schedstat
        // but in no charge (host_who tests, 2026-11-27: cbN 0.998 charged
        // vs 0.852-0.874 of schedstat; 0.96-1.00 with the load moved out).
        Preference::Auto => &[Route::Bpf, Route::Tracefs],
        Preference::Bpf => &[Route::Bpf],
        Preference::Tracefs => &[Route::Tracefs],
    }
}

/// Starts one route or says in one line why it cannot run here.
fn start_route(route: Route) -> std::result::Result<Box<dyn RouteImpl>, String> {
    match route {
        Route::Bpf => Ok(Box::new(crate::bpf::BpfRoute::start()?)),
        Route::Tracefs => crate::tracefs_raw::start(),
    }
}

/// A running collector. Dropping it detaches programs / removes the
/// tracefs instance.
pub struct Collector {
    inner: Box<dyn RouteImpl>,
    fallbacks: Vec<String>,
}

impl Collector {
    /// Starts the preferred route, or the first that works with `Auto`.
    pub fn start(pref: Preference) -> std::result::Result<Collector, Unavailable> {
        let mut reasons = Vec::new();
        for &route in try_routes(pref) {
            match start_route(route) {
                Ok(inner) => {
                    return Ok(Collector {
                        inner,
                        fallbacks: reasons,
                    })
                }
                Err(why) => reasons.push(format!("{}: {why}", route.as_str())),
            }
        }
        Err(Unavailable { reasons })
    }

    pub fn route(&self) -> Route {
        self.inner.route()
    }

    /// The routes tried before this one and why each could not start
    /// (`bpf: ...`), so that a report says why it fell back.
    pub fn fallbacks(&self) -> &[String] {
        &self.fallbacks
    }

    /// The kernel's counters of each BPF program (`bpf_prog_info`; run
    /// count and time only with `kernel.bpf_stats_enabled`); empty for
    /// tracefs. Their `recursion_misses` are in `lost_events` already.
    pub fn program_stats(&self) -> Result<Vec<(&'static str, ProgStats)>> {
        self.inner.program_stats()
    }

    pub fn watch(&mut self, tids: &[u32]) -> Result<()> {
        self.inner.watch(tids)
    }

    /// Every watched thread's counters, with the name of each culprit's
    /// process as it is now ([`SchedSample::procs`]).
    pub fn read(&mut self) -> Result<SchedSample> {
        let mut s = self.inner.read()?;
        s.procs = process_names(&s);
        Ok(s)
    }

    /// Bounds the cumulative culprit totals of a collector that runs for
    /// weeks: a culprit that charged a victim nothing for `after` leaves
    /// that victim's totals, and starts from zero if it comes back. Only
    /// for readers that difference samples closer together than `after`
    /// (a live view's consecutive scans): across a longer span such a
    /// culprit reads less than it was charged. Off by default.
    pub fn retire_quiet(&mut self, after: std::time::Duration) {
        self.inner.retire_quiet(after.as_nanos() as u64)
    }
}

/// /proc/TGID/comm of every culprit's process. Read at each read, not
/// cached, so a process that execs is renamed at the next read (issue 29);
/// a pid reused within one read interval would name the old process's
/// charges after the new one. A few dozen processes on a busy host; kernel
/// threads are named by their own comm and not read.
fn process_names(s: &SchedSample) -> std::collections::BTreeMap<u32, String> {
    let tgids: std::collections::BTreeSet<u32> = s
        .threads
        .values()
        .flat_map(|w| w.by_thread.keys())
        .filter(|c| !c.kthread)
        .map(|c| c.tgid)
        .collect();
    let proc = stealscope_readers::RootFs::new("/");
    tgids
        .into_iter()
        .filter_map(|pid| {
            let comm = stealscope_readers::process::comm(&proc, pid).ok()??;
            Some((pid, comm))
        })
        .collect()
}
