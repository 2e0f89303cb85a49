//! Tells a long-running scan when a VM may have started: one readdir of
//! /proc per check, and the name of new processes only, so it can run every
//! second where a full discovery (every process, every thread) cannot.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use stealscope_model::host::discovery::vmm_comm;
use stealscope_readers::process as proc_;
use stealscope_readers::{ReadError, Source};

/// How long after a VMM process appears it is looked at again while it
/// has no vCPU thread ([`VmmWatch::again`]).
pub const YOUNG: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct VmmWatch {
    seen: BTreeSet<u32>,
    /// When each VMM process was first seen.
    born: BTreeMap<u32, Instant>,
}

impl VmmWatch {
    /// True when a process whose name looks like a VMM appeared since the
    /// last check (on the first check: when any exists).
    pub fn check(&mut self, src: &dyn Source) -> Result<bool, ReadError> {
        let pids: BTreeSet<u32> = proc_::pids(src)?.into_iter().collect();
        let mut started = false;
        for pid in pids.difference(&self.seen) {
            // A process that exited meanwhile reads as None: nothing started.
            if let Some(comm) = proc_::comm(src, *pid)? {
                if vmm_comm(&comm) {
                    started = true;
                    self.born.entry(*pid).or_insert_with(Instant::now);
                }
            }
        }
        self.born.retain(|p, _| pids.contains(p));
        self.seen = pids;
        Ok(started)
    }

    /// Makes the next check see `pid` as new, while it is younger than
    /// [`YOUNG`]: a VMM found before it started its vCPU threads (QEMU
    /// creates them after it forks to daemonize; Firecracker at
    /// InstanceStart), else never looked at again, kept its VM without
    /// vCPUs: a restarted VM lost its vCPU series (issue 29's soak).
    pub fn again(&mut self, pid: u32) {
        if self.born.get(&pid).is_some_and(|t| t.elapsed() < YOUNG) {
            self.seen.remove(&pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::MemFs;

    fn fs(procs: &[(u32, &str)]) -> MemFs {
        let mut m = MemFs::new("test");
        for (pid, comm) in procs {
            m.files.insert(
                format!("/proc/{pid}/comm"),
                format!("{comm}\n").into_bytes(),
            );
        }
        m
    }

    #[test]
    fn reports_new_vmm_processes_once() {
        let mut w = VmmWatch::default();
        assert!(!w.check(&fs(&[(1, "init"), (7, "bash")])).unwrap());
        assert!(w
            .check(&fs(&[(1, "init"), (7, "bash"), (9, "qemu-system-x86")]))
            .unwrap());
        assert!(!w
            .check(&fs(&[(1, "init"), (9, "qemu-system-x86")]))
            .unwrap());
        assert!(w.check(&fs(&[(1, "init"), (12, "firecracker")])).unwrap());
    }

    #[test]
    fn a_young_vmm_without_vcpus_is_looked_at_again() {
        let mut w = VmmWatch::default();
        let host = fs(&[(1, "init"), (9, "qemu-system-x86")]);
        assert!(w.check(&host).unwrap());
        w.again(9);
        assert!(w.check(&host).unwrap(), "seen as new once more");
        assert!(!w.check(&host).unwrap(), "only when asked");
        w.again(1);
        assert!(!w.check(&host).unwrap(), "not a VMM: never");
        w.born.insert(9, Instant::now() - YOUNG);
        w.again(9);
        assert!(!w.check(&host).unwrap(), "too old: no longer");
    }
}
