//! Moves a process's memory to one NUMA node, in steps, without ever
//! risking an OOM: before each step the target node must keep a margin of
//! free memory after the step, swap headroom must hold, and memory pressure
//! (PSI) must be below the stop threshold; otherwise it refuses (before the
//! first step) or stops (after some) with the numbers that made it unsafe.
//!
//! The process exiting: before any page moved it is `MemoryError::Gone`;
//! after some steps it is a report with `exited` and `stopped` set, because
//! the caller (the journal) must learn what was already done.

mod pages;
mod safety;
mod scan;

pub use pages::{errno_name, Kernel, Page, PageMover};
pub use safety::{mib, Check, PSI_MEMORY};

use nix::errno::Errno;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use stealscope_readers::mempolicy::Confinement;
use stealscope_readers::{maps, numa, ReadError, RootFs, Source};

/// Safety limits of a move (from the placement config).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveLimits {
    /// Free memory the target node must keep after each step: the larger of
    /// this percentage of the node's total and `margin_min_bytes`.
    pub margin_pct: f64,
    pub margin_min_bytes: u64,
    /// Bytes moved per step.
    pub step_bytes: u64,
    /// Stop when /proc/pressure/memory "some avg10" exceeds this.
    pub psi_stop: f64,
    /// When swap is in use, free swap must stay at or above this multiple of
    /// the bytes still to move.
    pub swap_headroom: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoveReport {
    pub pid: u32,
    pub to_node: u32,
    pub dry_run: bool,
    /// Resident bytes per node before and after (numa_maps; after = before
    /// in a dry run, empty when the process exited or numa_maps could not
    /// be read after the move).
    pub before: BTreeMap<u32, u64>,
    pub after: BTreeMap<u32, u64>,
    /// Bytes on other nodes at the start: what had to move.
    pub to_move_bytes: u64,
    /// Bytes moved (in a dry run: that would move).
    pub moved_bytes: u64,
    /// Steps done (in a dry run: that it would take).
    pub steps: u32,
    /// Why it stopped before moving everything, with the numbers.
    pub stopped: Option<String>,
    /// The process exited during the move (after at least one step).
    pub exited: bool,
    /// Pages the kernel could not move (busy, shared, pinned), per errno
    /// name, or "not-migrated" when the kernel only counted them.
    pub failed_pages: BTreeMap<String, u64>,
    /// The numbers of the check before the first step.
    pub checked: Check,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Unsafe: nothing was moved. The message has the numbers.
    #[error("refused: {0}")]
    Refused(String),
    /// The process exited.
    #[error("process {0} is gone")]
    Gone(u32),
    /// No permission to read or move the process's memory.
    #[error("{0}")]
    Denied(String),
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
    move_with(
        &RootFs::new(root),
        &mut Kernel { pid },
        pid,
        to_node,
        limits,
        dry_run,
        progress,
    )
}

const PTRACE_HINT: &str = "reading and moving another process's memory needs ptrace read access \
                           to it: run as the same user, or as root (CAP_SYS_PTRACE)";

fn read_error(e: ReadError) -> MemoryError {
    match e {
        ReadError::Io { path, source } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            MemoryError::Denied(format!("{path}: permission denied: {PTRACE_HINT}"))
        }
        ReadError::Io { path, source } => MemoryError::Sys {
            path,
            msg: source.to_string(),
        },
        ReadError::Parse { path, msg } => MemoryError::Sys { path, msg },
    }
}

fn syscall_error(pid: u32, to_node: u32, e: Errno) -> MemoryError {
    match e {
        Errno::ESRCH => MemoryError::Gone(pid),
        Errno::EPERM => MemoryError::Denied(format!(
            "move_pages on pid {pid}: operation not permitted: {PTRACE_HINT}"
        )),
        Errno::EACCES => MemoryError::Refused(format!(
            "node {to_node} is not in the cpuset (cpuset.mems) of pid {pid} (move_pages: EACCES)"
        )),
        e => MemoryError::Sys {
            path: format!("move_pages(pid {pid}, node {to_node})"),
            msg: e.desc().to_string(),
        },
    }
}

/// numa_maps of the process, or Gone.
fn numa_maps(src: &dyn Source, pid: u32) -> Result<String, MemoryError> {
    src.read_text(&maps::numa_maps_path(pid))
        .map_err(read_error)?
        .ok_or(MemoryError::Gone(pid))
}

fn off_node_bytes(per_node: &BTreeMap<u32, u64>, to_node: u32) -> u64 {
    per_node
        .iter()
        .filter(|(n, _)| **n != to_node)
        .map(|(_, b)| *b)
        .sum()
}

/// Refuses to move memory that the process's own NUMA policy keeps off
/// `to_node`.
fn refuse_against_policy(text: &str, pid: u32, to_node: u32) -> Result<(), MemoryError> {
    // move_pages ignores the process's own policies: moving against them
    // overrides its owner's binding, and its next allocations go back.
    let against = Confinement::from_numa_maps(text);
    let against = against.against(to_node);
    if against.is_empty() {
        return Ok(());
    }
    let bytes: u64 = against.iter().map(|(_, b)| b).sum();
    Err(MemoryError::Refused(format!(
        "pid {pid} to node {to_node}: {} of its memory is under its own NUMA policy {}, which keeps it off node {to_node}; \
         moving it would override its owner's binding and new pages would go back: change the binding instead \
         (libvirt <numatune>, QEMU memory-backend host-nodes, numactl)",
        mib(bytes),
        against
            .iter()
            .map(|(t, b)| format!("{t} ({})", mib(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Records why a failed syscall stopped the move; an error if nothing has
/// moved yet (then there is nothing to report).
fn stop_on_error(report: &mut MoveReport, e: Errno) -> Result<(), MemoryError> {
    let (pid, to_node) = (report.pid, report.to_node);
    if report.moved_bytes == 0 {
        return Err(syscall_error(pid, to_node, e));
    }
    report.exited = e == Errno::ESRCH;
    report.stopped = Some(if report.exited {
        format!(
            "process {pid} exited after {} step(s), {} moved",
            report.steps,
            mib(report.moved_bytes)
        )
    } else {
        format!(
            "move_pages failed after {} step(s), {} moved: {}",
            report.steps,
            mib(report.moved_bytes),
            syscall_error(pid, to_node, e)
        )
    });
    Ok(())
}

/// Re-checks the safety limits before a later step; false (with the reason
/// in `report.stopped`) when the move must stop.
fn may_take_next_step(
    src: &dyn Source,
    limits: &MoveLimits,
    remaining: u64,
    report: &mut MoveReport,
) -> bool {
    // A check that cannot be made stops the move like a failed one.
    let why = match safety::read(src, report.to_node, remaining, limits) {
        Ok(c) => c.verdict(limits),
        Err(e) => Some(e.to_string()),
    };
    let Some(why) = why else {
        return true;
    };
    report.stopped = Some(format!(
        "stopped before step {} with {} moved: {why}",
        report.steps + 1,
        mib(report.moved_bytes)
    ));
    false
}

/// Moves the off-node pages step by step, checking the limits again
/// before each later step, until done, stopped or failed.
fn move_in_steps(
    src: &dyn Source,
    k: &mut dyn PageMover,
    text: &str,
    limits: &MoveLimits,
    report: &mut MoveReport,
    progress: &mut dyn FnMut(&str),
) -> Result<(), MemoryError> {
    let (pid, to_node, to_move) = (report.pid, report.to_node, report.to_move_bytes);
    let step = limits.step_bytes.max(1);
    let mappings = maps::maps(src, pid)
        .map_err(read_error)?
        .ok_or(MemoryError::Gone(pid))?;
    let regions = scan::regions(&maps::parse_numa_maps_vmas(text), &mappings, to_node);
    let mut scanner = scan::Scanner::new(regions);
    // Bytes handed to the kernel so far, moved or not: the rest is what the
    // next check must find room for.
    let mut attempted = 0u64;
    loop {
        if report.steps > 0
            && !may_take_next_step(src, limits, to_move.saturating_sub(attempted), report)
        {
            break;
        }
        let pages = match scanner.next_step(k, to_node, step) {
            Ok(p) => p,
            Err(e) => return stop_on_error(report, e),
        };
        if pages.is_empty() {
            break;
        }
        let outcome = match pages::move_step(k, &pages, to_node) {
            Ok(o) => o,
            Err(e) => return stop_on_error(report, e),
        };
        attempted += pages.iter().map(|p| p.bytes).sum::<u64>();
        report.steps += 1;
        report.moved_bytes += outcome.moved_bytes;
        for (name, n) in outcome.failed {
            *report.failed_pages.entry(name).or_insert(0) += n;
        }
        progress(&format!(
            "step {}: {} moved ({} of {})",
            report.steps,
            mib(outcome.moved_bytes),
            mib(report.moved_bytes),
            mib(to_move)
        ));
    }
    Ok(())
}

/// Where the process's memory is after the move; a process that exited or
/// a map that cannot be read leaves it empty, with the reason.
fn read_after(src: &dyn Source, report: &mut MoveReport) {
    let pid = report.pid;
    report.after = match src.read_text(&maps::numa_maps_path(pid)) {
        Ok(Some(t)) => numa::parse_numa_maps(&t),
        Ok(None) => {
            let steps = report.steps;
            report.exited = true;
            report
                .stopped
                .get_or_insert_with(|| format!("process {pid} exited after {steps} step(s)"));
            BTreeMap::new()
        }
        // Pages have moved: report them rather than fail.
        Err(e) => {
            report
                .stopped
                .get_or_insert_with(|| format!("after the move: {e}"));
            BTreeMap::new()
        }
    };
}

/// `move_memory` on any source of files and any page mover (tests use a
/// fixture directory and a fake process).
pub fn move_with(
    src: &dyn Source,
    k: &mut dyn PageMover,
    pid: u32,
    to_node: u32,
    limits: &MoveLimits,
    dry_run: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<MoveReport, MemoryError> {
    let text = numa_maps(src, pid)?;
    let before = numa::parse_numa_maps(&text);
    let to_move = off_node_bytes(&before, to_node);
    refuse_against_policy(&text, pid, to_node)?;
    let checked = safety::read(src, to_node, to_move, limits)?;
    if let Some(why) = checked.verdict(limits) {
        return Err(MemoryError::Refused(format!(
            "pid {pid} to node {to_node}: {why}"
        )));
    }
    let step = limits.step_bytes.max(1);
    let mut report = MoveReport {
        pid,
        to_node,
        dry_run,
        after: before.clone(),
        before,
        to_move_bytes: to_move,
        moved_bytes: 0,
        steps: 0,
        stopped: None,
        exited: false,
        failed_pages: BTreeMap::new(),
        checked,
    };
    progress(&format!(
        "pid {pid}: {} to move to node {to_node} in steps of {}; checks passed: {}",
        mib(to_move),
        mib(step),
        report.checked.summary(limits)
    ));
    if dry_run {
        report.moved_bytes = to_move;
        report.steps = to_move.div_ceil(step) as u32;
        return Ok(report);
    }
    if to_move == 0 {
        return Ok(report);
    }
    move_in_steps(src, k, &text, limits, &mut report, progress)?;
    read_after(src, &mut report);
    Ok(report)
}

#[cfg(test)]
mod tests;
