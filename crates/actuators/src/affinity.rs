//! Thread CPU affinity through sched_getaffinity/sched_setaffinity.

use crate::error::ApplyError;
use nix::errno::Errno;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

fn what(tid: u32) -> String {
    format!("thread {tid}")
}

fn map(tid: u32, e: Errno, cpus: Option<&[u32]>) -> ApplyError {
    match (e, cpus) {
        (Errno::ESRCH, _) => ApplyError::Gone { what: what(tid) },
        // EINVAL: no CPU of the mask is both online and in the thread's cpuset.
        (Errno::EINVAL, Some(c)) => ApplyError::Other(format!(
            "thread {tid}: CPUs {} are offline or outside its cgroup's cpuset",
            stealscope_readers::cpulist::format(c)
        )),
        (e, _) => ApplyError::Other(format!("thread {tid}: sched_setaffinity: {e}")),
    }
}

pub fn get(tid: u32) -> Result<Vec<u32>, ApplyError> {
    let set = sched_getaffinity(Pid::from_raw(tid as i32)).map_err(|e| map(tid, e, None))?;
    Ok((0..CpuSet::count() as u32)
        .filter(|c| set.is_set(*c as usize).unwrap_or(false))
        .collect())
}

pub fn set(tid: u32, cpus: &[u32]) -> Result<(), ApplyError> {
    let mut set = CpuSet::new();
    for c in cpus {
        set.set(*c as usize).map_err(|_| {
            ApplyError::Other(format!(
                "thread {tid}: CPU {c} beyond the affinity mask size"
            ))
        })?;
    }
    sched_setaffinity(Pid::from_raw(tid as i32), &set).map_err(|e| map(tid, e, Some(cpus)))
}

/// Whether `tid` is still a thread of `pid` (tids are reused after exit).
pub fn belongs(pid: u32, tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}
