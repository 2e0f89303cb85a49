//! cgroup file systems: where the v1 controllers and the v2 hierarchy are
//! mounted (from /proc/mounts), and the CPU weight of a group.

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

pub const MOUNTS: &str = "/proc/mounts";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupMounts {
    /// v1 mount point of each controller ("cpu" -> "/sys/fs/cgroup/cpu").
    pub v1: Vec<(String, String)>,
    /// The v2 (unified) mount point, if any.
    pub v2: Option<String>,
}

impl CgroupMounts {
    pub fn v1_controller(&self, name: &str) -> Option<&str> {
        self.v1
            .iter()
            .find(|(c, _)| c == name)
            .map(|(_, m)| m.as_str())
    }
}

pub fn parse_mounts(text: &str) -> CgroupMounts {
    let mut m = CgroupMounts::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        // Mount points escape spaces as \040; cgroup mounts never have them.
        match f[2] {
            "cgroup2" => m.v2 = Some(f[1].to_string()),
            "cgroup" => {
                for opt in f[3].split(',') {
                    if matches!(
                        opt,
                        "cpu"
                            | "cpuacct"
                            | "cpuset"
                            | "memory"
                            | "pids"
                            | "blkio"
                            | "devices"
                            | "freezer"
                    ) {
                        m.v1.push((opt.to_string(), f[1].to_string()));
                    }
                }
            }
            _ => {}
        }
    }
    m
}

pub fn mounts(src: &dyn Source) -> Result<CgroupMounts> {
    Ok(src
        .read_text(MOUNTS)?
        .map(|t| parse_mounts(&t))
        .unwrap_or_default())
}

/// CPU weight of a group, in its own hierarchy's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum CpuWeight {
    /// v1 cpu.shares, range [2, 262144], default 1024.
    Shares(u64),
    /// v2 cpu.weight, range [1, 10000], default 100.
    Weight(u64),
}

impl CpuWeight {
    /// Relative to the hierarchy default (1.0 = default weight).
    pub fn relative(self) -> f64 {
        match self {
            CpuWeight::Shares(v) => v as f64 / 1024.0,
            CpuWeight::Weight(v) => v as f64 / 100.0,
        }
    }
}

fn num(src: &dyn Source, path: &str) -> Result<Option<u64>> {
    match src.read_value(path)? {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ReadError::parse(path, format!("{v:?} is not a number"))),
    }
}

/// Weight of the group at `cg_path` (as in /proc/<pid>/cgroup): v1 cpu.shares
/// when the task is in a v1 cpu hierarchy, else v2 cpu.weight.
pub fn cpu_weight(
    src: &dyn Source,
    mounts: &CgroupMounts,
    v1_path: Option<&str>,
    v2_path: Option<&str>,
) -> Result<Option<(String, CpuWeight)>> {
    if let (Some(mnt), Some(p)) = (mounts.v1_controller("cpu"), v1_path) {
        let file = format!(
            "{}{}/cpu.shares",
            mnt.trim_end_matches('/'),
            p.trim_end_matches('/')
        );
        if let Some(v) = num(src, &file)? {
            return Ok(Some((file, CpuWeight::Shares(v))));
        }
    }
    if let (Some(mnt), Some(p)) = (mounts.v2.as_deref(), v2_path) {
        let file = format!(
            "{}{}/cpu.weight",
            mnt.trim_end_matches('/'),
            p.trim_end_matches('/')
        );
        if let Some(v) = num(src, &file)? {
            return Ok(Some((file, CpuWeight::Weight(v))));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_mounts() {
        let m = parse_mounts("tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\ncgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n");
        assert_eq!(m.v1_controller("cpu"), Some("/sys/fs/cgroup/cpu"));
        assert_eq!(m.v2.as_deref(), Some("/sys/fs/cgroup/unified"));
        assert_eq!(CpuWeight::Shares(2048).relative(), 2.0);
    }
}
