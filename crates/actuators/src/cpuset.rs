//! The cpuset that bounds a libvirt domain's pins. On cgroup v1 a CPU that
//! goes offline leaves every cpuset and does not come back when it is
//! online again, so libvirt's partition (/machine) and the domains started
//! since can lack CPUs the host has; `virsh vcpupin` to such a CPU fails
//! with a bare "Permission denied" from the kernel.

use crate::error::ApplyError;
use std::path::Path;
use stealscope_model::host::discovery::libvirt_scope_path;
use stealscope_readers::{cgroupfs, cpulist, RootFs};

/// CPUs of `wanted` outside the cpuset `allowed`.
pub fn outside(wanted: &[u32], allowed: &[u32]) -> Vec<u32> {
    wanted
        .iter()
        .copied()
        .filter(|c| !allowed.contains(c))
        .collect()
}

/// The domain's machine group in the v1 cpuset hierarchy and its CPUs;
/// None without a v1 cpuset hierarchy, a libvirt scope or the process.
pub fn domain_cpus(pid: u32) -> Result<Option<(String, Vec<u32>)>, ApplyError> {
    let mounts = cgroupfs::mounts(&RootFs::new(Path::new("/")))
        .map_err(|e| ApplyError::Other(e.to_string()))?;
    let Some(mnt) = mounts.v1_controller("cpuset") else {
        return Ok(None);
    };
    let Ok(own) = std::fs::read_to_string(format!("/proc/{pid}/cpuset")) else {
        return Ok(None);
    };
    let Some(scope) = libvirt_scope_path(own.trim()) else {
        return Ok(None);
    };
    let dir = format!("{}{scope}", mnt.trim_end_matches('/'));
    let file = format!("{dir}/cpuset.cpus");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ApplyError::io(&file, e)),
    };
    let cpus = cpulist::parse(text.trim(), &file).map_err(|e| ApplyError::Other(e.to_string()))?;
    Ok(Some((dir, cpus)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_the_cpuset() {
        assert_eq!(outside(&[0, 1, 3], &[0, 2, 3]), vec![1]);
        assert!(outside(&[2], &[0, 1, 2]).is_empty());
    }
}
