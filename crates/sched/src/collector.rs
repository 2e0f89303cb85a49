//! Starts the best route this kernel allows and says why the others could
//! not run.

use crate::error::Result;
use crate::model::{Route, SchedSample};

/// Which route to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preference {
    /// BPF, then tracefs.
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

/// One route's running state.
pub(crate) trait RouteImpl: Send {
    fn route(&self) -> Route;
    /// Replaces the set of watched threads; threads that stay keep their
    /// counters.
    fn watch(&mut self, tids: &[u32]) -> Result<()>;
    /// Cumulative counters of every watched thread.
    fn read(&mut self) -> Result<SchedSample>;
}

/// A running collector. Dropping it detaches programs / removes the
/// tracefs instance.
pub struct Collector {
    inner: Box<dyn RouteImpl>,
}

impl Collector {
    /// Starts the preferred route, or the first that works with `Auto`.
    pub fn start(pref: Preference) -> std::result::Result<Collector, Unavailable> {
        let mut reasons = Vec::new();
        if pref == Preference::Bpf {
            reasons.push("bpf: not built yet".to_string());
        }
        // Auto: the BPF route first (wired with it), then this fallback.
        if pref != Preference::Bpf {
            match crate::tracefs_raw::start() {
                Ok(inner) => return Ok(Collector { inner }),
                Err(e) => reasons.push(format!("tracefs: {e}")),
            }
        }
        Err(Unavailable { reasons })
    }

    pub fn route(&self) -> Route {
        self.inner.route()
    }

    pub fn watch(&mut self, tids: &[u32]) -> Result<()> {
        self.inner.watch(tids)
    }

    pub fn read(&mut self) -> Result<SchedSample> {
        self.inner.read()
    }
}
