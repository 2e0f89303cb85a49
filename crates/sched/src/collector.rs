//! Starts the best route this kernel allows and says why the others could
//! not run.

use crate::bpf_info::ProgStats;
use crate::error::Result;
use crate::model::{Route, SchedSample};
use crate::route::RouteImpl;

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

    pub fn read(&mut self) -> Result<SchedSample> {
        self.inner.read()
    }
}
