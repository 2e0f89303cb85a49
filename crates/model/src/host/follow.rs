//! Following a host's VMs over time, for long-running commands (serve, top):
//! discovery on the first scan, then each scan preads the schedstat of every
//! known thread ([`HostScanner`]), and discovery runs again only when
//! [`VmmWatch`] sees a VMM process start.

use super::scanner::{HostScanner, ThreadSample};
use super::vcpu_times::{vcpu_times, VcpuTimes};
use super::watch::VmmWatch;
use std::path::{Path, PathBuf};
use stealscope_readers::{ReadError, RootFs};

pub struct HostFollow {
    root: PathBuf,
    scanner: Option<HostScanner>,
    watch: VmmWatch,
    discovered: bool,
    samples: Vec<ThreadSample>,
}

impl HostFollow {
    pub fn new(root: &Path) -> HostFollow {
        HostFollow {
            root: root.to_path_buf(),
            scanner: None,
            watch: VmmWatch::default(),
            discovered: false,
            samples: Vec::new(),
        }
    }

    /// The cumulative run and wait times of every vCPU now, and the error
    /// of this scan if one part failed (the rest is still returned: a failed
    /// watch keeps the VMs known so far; a failed discovery leaves none until
    /// a VMM starts).
    pub fn scan(&mut self) -> (Vec<VcpuTimes>, Option<ReadError>) {
        let mut error = None;
        let started = match self.watch.check(&RootFs::new(&self.root)) {
            Ok(s) => s,
            Err(e) => {
                error = Some(e);
                false
            }
        };
        if started || !self.discovered {
            self.discovered = true;
            match HostScanner::discover(&self.root) {
                Ok(s) => self.scanner = Some(s),
                Err(e) => error = Some(e),
            }
        }
        let Some(sc) = self.scanner.as_mut() else {
            return (Vec::new(), error);
        };
        sc.scan(&mut self.samples);
        (vcpu_times(&sc.vms, &self.samples), error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root with one QEMU process whose vCPU threads are named.
    fn host(dir: &Path, vcpu_wait_ns: [u64; 2]) {
        let p = dir.join("proc/40");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("comm"), "qemu-system-x86\n").unwrap();
        std::fs::write(
            p.join("cmdline"),
            "qemu-system-x86_64\0-name\0guest=web,debug-threads=on\0",
        )
        .unwrap();
        std::fs::write(p.join("status"), "Name:\tqemu-system-x86\nTgid:\t40\n").unwrap();
        for (i, tid) in [41u32, 42].iter().enumerate() {
            let t = p.join(format!("task/{tid}"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("comm"), format!("CPU {i}/KVM\n")).unwrap();
            std::fs::write(t.join("schedstat"), format!("1000 {} 3\n", vcpu_wait_ns[i])).unwrap();
        }
    }

    #[test]
    fn finds_vms_then_rereads_their_threads() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = HostFollow::new(dir.path());
        let (v, err) = f.scan();
        assert!(v.is_empty(), "{v:?}");
        assert!(err.is_none(), "{err:?}");
        // A VMM that starts later is found by the watch.
        host(dir.path(), [5_000_000_000, 0]);
        let (v, err) = f.scan();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!((v[0].vm.as_str(), v[0].vcpu, v[0].wait_s), ("web", 0, 5.0));
        // The next scan rereads the kept-open files.
        host(dir.path(), [6_000_000_000, 1_000_000_000]);
        let (v, _) = f.scan();
        assert_eq!((v[0].wait_s, v[1].wait_s), (6.0, 1.0));
    }
}
