//! Moves a process's memory to one NUMA node, in steps, without ever
//! risking an OOM: before each step the target node must keep a margin of
//! free memory after the step, swap headroom must hold, and memory pressure
//! (PSI) must be below the stop threshold; otherwise it refuses (before the
//! first step) or stops (after some) with the numbers that made it unsafe.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Safety limits of a move (from the placement config).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveLimits {
    /// Free memory the target node must keep after each step: the larger of
    /// this share of the node's total and `margin_min_bytes`.
    pub margin_pct: f64,
    pub margin_min_bytes: u64,
    /// Bytes moved per step.
    pub step_bytes: u64,
    /// Stop when /proc/pressure/memory "some avg10" exceeds this.
    pub psi_stop: f64,
    /// When swap is in use, free swap must stay above this share of the
    /// bytes still to move.
    pub swap_headroom: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoveReport {
    pub pid: u32,
    pub to_node: u32,
    /// Resident bytes per node before and after (numa_maps).
    pub before: BTreeMap<u32, u64>,
    pub after: BTreeMap<u32, u64>,
    pub moved_bytes: u64,
    pub steps: u32,
    /// Why it stopped before moving everything, with the numbers.
    pub stopped: Option<String>,
    /// Pages the kernel could not move (busy, pinned), per errno name.
    pub failed_pages: BTreeMap<String, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Unsafe: nothing was moved. The message has the numbers.
    #[error("refused: {0}")]
    Refused(String),
    /// The process exited.
    #[error("process {0} is gone")]
    Gone(u32),
    #[error("{path}: {msg}")]
    Sys { path: String, msg: String },
}

/// Moves the memory of `pid` to `to_node` (dry run: only the checks, and
/// the report says what would move).
pub fn move_memory(
    root: &Path,
    pid: u32,
    to_node: u32,
    limits: &MoveLimits,
    dry_run: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<MoveReport, MemoryError> {
    let _ = (root, pid, to_node, limits, dry_run, progress);
    Err(MemoryError::Refused(
        "memory moves are not implemented yet".into(),
    ))
}
