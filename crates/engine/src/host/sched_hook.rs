//! The live end of attribution, in one place: starts the scheduler-event
//! collector at the start of an interval watching every vCPU thread, and
//! stores its cumulative reading in each side of the snapshot
//! ([`super::sched_store::SCHED_FILE`]), or why there is none. The
//! derivation (model::host::attribution) only ever sees the stored
//! readings: this live part sits in the engine, the model stays pure.
//!
//! Timing: the collector is loaded before t0 is read ([`SchedHook::load`])
//! so that its start-up (for the BPF route ~0.06 s of verifier CPU time,
//! 0.3 s before the charge walk became a `bpf_loop` callback) is not
//! inside the interval it measures: a vCPU waiting behind the
//! loader would be in schedstat's wait but not in any charge. Its first
//! reading follows t0's thread times by the time the rest of t0 took to
//! read, and the t1 reading is taken just before t1's thread times;
//! attribution therefore covers a few ms less than the schedstat interval
//! (the `host` report compares the two).

use std::collections::BTreeMap;
use std::path::Path;
use stealscope_model::host::discovery::{vmm_comm, vmm_of};
use stealscope_model::host::observation::VmObs;
use stealscope_model::host::sched_store::{StoredSched, SCHED_FILE};
use stealscope_readers::{process, MemFs, RootFs};
use stealscope_sched::{Collector, Preference};
use stealscope_who::SchedSample;

pub struct SchedHook {
    collector: Option<Collector>,
    unavailable: Vec<String>,
    /// The threads [`SchedHook::watch`] was given: whose schedstat each
    /// reading reads before the collector's.
    watched: Vec<u32>,
}

impl SchedHook {
    /// Loads the collector, watching nothing yet: call before reading t0,
    /// then [`SchedHook::watch`] its VMs.
    pub fn load() -> SchedHook {
        match Collector::start(Preference::Auto) {
            Ok(c) => SchedHook {
                collector: Some(c),
                unavailable: Vec::new(),
                watched: Vec::new(),
            },
            Err(e) => SchedHook {
                collector: None,
                unavailable: e.reasons,
                watched: Vec::new(),
            },
        }
    }

    /// Whether a route is running (it may have failed to load, or to
    /// watch, since).
    pub fn loaded(&self) -> bool {
        self.collector.is_some()
    }

    /// For a hook kept across intervals: see [`Collector::retire_quiet`].
    pub fn retire_quiet(&mut self, after: std::time::Duration) {
        if let Some(c) = self.collector.as_mut() {
            c.retire_quiet(after);
        }
    }

    /// Watches the vCPU threads of `vms`; the first reading (or why there
    /// is none).
    pub fn watch(&mut self, vms: &[VmObs]) -> StoredSched {
        let tids: Vec<u32> = vms
            .iter()
            .flat_map(|v| v.vcpus.iter().map(|(_, t)| t.tid))
            .collect();
        if let Some(c) = self.collector.as_mut() {
            if let Err(e) = c.watch(&tids) {
                self.unavailable = vec![format!("{}: {e}", c.route().as_str())];
                self.collector = None;
            }
        }
        let first = self.reading(&tids, End::Start);
        self.watched = tids;
        first
    }

    /// The collector's cumulative reading now (call right before reading
    /// t1, then [`put`] it into the t1 side).
    pub fn read(&mut self) -> StoredSched {
        let tids = std::mem::take(&mut self.watched);
        let r = self.reading(&tids, End::Later);
        self.watched = tids;
        r
    }

    fn reading(&mut self, tids: &[u32], end: End) -> StoredSched {
        let Some(c) = self.collector.as_mut() else {
            return StoredSched::Unavailable {
                unavailable: self.unavailable.clone(),
            };
        };
        let route = c.route();
        let fallbacks = c.fallbacks().to_vec();
        match store(tids, end, &fallbacks, || c.read()) {
            Ok(s) => s,
            Err(e) => StoredSched::Unavailable {
                unavailable: vec![format!("{}: {e}", route.as_str())],
            },
        }
    }
}

/// Which end of an interval a reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Start,
    Later,
}

/// A reading as a side stores it, with each thread's schedstat (for the
/// check of attributed wait and episodes against schedstat) read on both
/// sides of the collector's read: the outside one (before it at the
/// interval's start, after it later) makes schedstat's interval hold the
/// collector's, and an episode the collector counted is in its count too
/// (read after at both ends, one that ended between the first read and
/// its schedstat was counted by the collector alone: a CI run had 102
/// episodes against 101 runs); the inside one is held by the collector's
/// interval. `record`'s checkpoints store theirs the same way.
/// `fallbacks`: the routes tried before this one and why they could not
/// start, kept with the reading for the report.
pub(crate) fn store<E>(
    tids: &[u32],
    end: End,
    fallbacks: &[String],
    read: impl FnOnce() -> Result<SchedSample, E>,
) -> Result<StoredSched, E> {
    let before: BTreeMap<u32, [u64; 3]> = tids
        .iter()
        .filter_map(|&t| Some((t, schedstat(t)?)))
        .collect();
    let mut stored = StoredSched::from(&read()?);
    if let StoredSched::Sample(x) = &mut stored {
        x.fallbacks = fallbacks.to_vec();
        for t in &mut x.threads {
            let (b, a) = (before.get(&t.tid).copied(), schedstat(t.tid));
            (t.schedstat, t.schedstat_inside) = match end {
                End::Start => (b, a),
                End::Later => (a, b),
            };
        }
    }
    Ok(stored)
}

/// /proc/TID/schedstat: (run ns, wait ns, times run); None once it is gone.
fn schedstat(tid: u32) -> Option<[u64; 3]> {
    let s = process::thread_schedstat(&RootFs::live(), tid).ok()??;
    Some([s.run_ns, s.wait_ns, s.slices])
}

/// Whether a VMM process runs under `root`: a cheap look at each
/// process's name (the same first filter discovery uses), so that a
/// machine with no VM never pays for loading the collector; then, for a
/// name that passes, discovery's own test of the command line
/// ([`vmm_of`]): a stopped QEMU its parent has not reaped yet (a zombie
/// keeps its comm, not its command line; this machine's init reaps every
/// ~2 s) runs no VM, and must not make the next command take the machine
/// for a host.
pub fn vmm_running(root: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return false;
    };
    let src = RootFs::new(root);
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| runs_vm(&src, pid))
}

/// Whether process `pid` is a VMM by discovery's rules ([`vmm_of`]).
fn runs_vm(src: &RootFs, pid: u32) -> bool {
    let Ok(Some(comm)) = process::comm(src, pid) else {
        return false;
    };
    if !vmm_comm(&comm) {
        return false;
    }
    matches!(process::cmdline(src, pid), Ok(Some(cmd)) if vmm_of(&comm, &cmd).is_some())
}

/// Stores a reading in a snapshot side.
pub fn put(side: &mut MemFs, s: &StoredSched) {
    side.insert(SCHED_FILE, serde_json::to_vec(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A VMM-named process runs a VM while it lives; once it exited and
    /// was not waited for (a zombie), it does not.
    #[test]
    fn a_zombie_vmm_runs_no_vm_and_a_live_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let named = |bin: &str| {
            let p = dir.path().join("qemu-system-x86_64");
            let _ = std::fs::remove_file(&p);
            std::fs::copy(bin, &p).unwrap();
            p
        };
        let mut live = Command::new(named("/bin/sleep")).arg("5").spawn().unwrap();
        let mut dead = Command::new(named("/bin/true")).spawn().unwrap();
        let src = RootFs::live();
        let stat = |c: &std::process::Child| {
            std::fs::read_to_string(format!("/proc/{}/stat", c.id())).unwrap_or_default()
        };
        // Not waited for: it stays a zombie until wait() below.
        for _ in 0..500 {
            if stat(&dead)
                .rsplit(") ")
                .next()
                .is_some_and(|s| s.starts_with('Z'))
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(runs_vm(&src, live.id()), "{}", stat(&live));
        assert!(!runs_vm(&src, dead.id()), "{}", stat(&dead));
        live.kill().unwrap();
        let _ = (live.wait(), dead.wait());
    }
}
