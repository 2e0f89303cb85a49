//! What a route (BPF or tracefs) offers the collector: its own module so
//! that the collector, which starts routes, and the routes, which implement
//! this, do not depend on each other.

use crate::bpf_info::ProgStats;
use crate::error::Result;
use stealscope_who::waits::{Route, SchedSample};

/// One route's running state.
pub(crate) trait RouteImpl: Send {
    fn route(&self) -> Route;
    /// Replaces the set of watched threads; threads that stay keep their
    /// counters.
    fn watch(&mut self, tids: &[u32]) -> Result<()>;
    /// Cumulative counters of every watched thread.
    fn read(&mut self) -> Result<SchedSample>;
    /// Drops a culprit from a victim's totals once it has charged it
    /// nothing for `after_ns` (BPF; tracefs keeps every total).
    fn retire_quiet(&mut self, _after_ns: u64) {}
    /// The kernel's counters of each BPF program (none for tracefs).
    fn program_stats(&self) -> Result<Vec<(&'static str, ProgStats)>> {
        Ok(Vec::new())
    }
}
