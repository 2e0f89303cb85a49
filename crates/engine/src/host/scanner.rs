//! Periodic host scan for long-running commands (serve, record, place
//! daemon): discovery once, then each scan only preads the schedstat file of
//! every known thread, kept open. Threads or VMs that exit are dropped
//! quietly; a changed thread list triggers rediscovery of that VM.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use stealscope_model::host::{collect_host, HostObservation, ScannedVmId, ThreadRole};
use stealscope_model::observation::Side;
use stealscope_readers::pread::PreadFile;
use stealscope_readers::process::{parse_schedstat, task_schedstat_path};
use stealscope_readers::{ReadError, RootFs};

pub use stealscope_model::host::ThreadSample;

pub struct ScannedThread {
    pub tid: u32,
    pub role: ThreadRole,
    file: PreadFile,
}

pub struct ScannedVm {
    pub pid: u32,
    pub name: String,
    pub threads: Vec<ScannedThread>,
}

impl ScannedVmId for ScannedVm {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn name(&self) -> &str {
        &self.name
    }
}

pub struct HostScanner {
    root: PathBuf,
    pub vms: Vec<ScannedVm>,
}

impl HostScanner {
    /// Finds every VM and opens each thread's schedstat.
    pub fn discover(root: &Path) -> Result<Self, ReadError> {
        Ok(Self::from_observation(root, Self::observe(root)?))
    }

    /// What discovery reads: identity and threads only (memory placement
    /// is not scanned).
    pub fn observe(root: &Path) -> Result<HostObservation, ReadError> {
        collect_host(&RootFs::new(root), Side::Start)
    }

    /// As [`Self::discover`], from a host observation already read (a
    /// recording's start checkpoint: no second walk of /proc).
    pub fn from_observation(root: &Path, obs: HostObservation) -> Self {
        Self::reusing(root, obs, None)
    }

    /// As [`Self::from_observation`], taking over `old`'s open files of
    /// the threads still there: at 10,000 threads, opening a second set
    /// before the first was closed ran past RLIMIT_NOFILE (20,000 here)
    /// and left threads out of every later scan (issue 29's soak: 9,961 of
    /// 10,000 vCPU series after a VM restarted).
    pub fn reusing(root: &Path, obs: HostObservation, old: Option<HostScanner>) -> Self {
        raise_fd_limit();
        let mut open: HashMap<(u32, u32), PreadFile> = old
            .into_iter()
            .flat_map(|o| o.vms)
            .flat_map(|vm| {
                vm.threads
                    .into_iter()
                    .map(move |t| ((vm.pid, t.tid), t.file))
            })
            .collect();
        let mut vms = Vec::new();
        for vm in obs.vms {
            let mut threads = Vec::new();
            let all = vm.vcpus.into_iter().map(|(_, t)| t).chain(vm.others);
            for t in all {
                let file = match open.remove(&(vm.pid, t.tid)) {
                    Some(f) => f,
                    // A thread that exited since discovery is simply not kept.
                    None => match PreadFile::open(root, &task_schedstat_path(vm.pid, t.tid)) {
                        Ok(f) => f,
                        Err(_) => continue,
                    },
                };
                threads.push(ScannedThread {
                    tid: t.tid,
                    role: t.role,
                    file,
                });
            }
            vms.push(ScannedVm {
                pid: vm.pid,
                name: vm.name,
                threads,
            });
        }
        HostScanner {
            root: root.to_path_buf(),
            vms,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// One scan: run/wait time of every known thread, into `out`.
    pub fn scan(&mut self, out: &mut Vec<ThreadSample>) {
        out.clear();
        for vm in &mut self.vms {
            vm.threads.retain_mut(|t| {
                let Ok(text) = t.file.read_text() else {
                    return false;
                };
                match parse_schedstat(text, "schedstat") {
                    Ok(sched) => {
                        out.push(ThreadSample {
                            pid: vm.pid,
                            tid: t.tid,
                            role: t.role,
                            sched,
                        });
                        true
                    }
                    // An exited thread reads as empty: drop it.
                    Err(_) => false,
                }
            });
        }
        self.vms.retain(|v| !v.threads.is_empty());
    }
}

/// Long scans keep one fd per thread; lift the soft limit to the hard one.
pub(crate) fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
