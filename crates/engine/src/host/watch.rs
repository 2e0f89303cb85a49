//! Tells a long-running scan when a VM may have started: one readdir of
//! /proc per check, and the name of new processes only, so it can run every
//! second where a full discovery (every process, every thread) cannot.

use std::collections::BTreeSet;
use stealscope_model::host::discovery::vmm_comm;
use stealscope_readers::process as proc_;
use stealscope_readers::{ReadError, Source};

#[derive(Debug, Default)]
pub struct VmmWatch {
    seen: BTreeSet<u32>,
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
                started |= vmm_comm(&comm);
            }
        }
        self.seen = pids;
        Ok(started)
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
}
