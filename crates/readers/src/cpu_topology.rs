//! /sys/devices/system/cpu: which CPUs exist, are online, isolated, nohz_full.

use crate::{cpulist, Result, Source};
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/sys/devices/system/cpu";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSets {
    pub online: Option<Vec<u32>>,
    pub possible: Option<Vec<u32>>,
    pub present: Option<Vec<u32>>,
    pub offline: Option<Vec<u32>>,
    pub isolated: Option<Vec<u32>>,
    /// Absent without CONFIG_NO_HZ_FULL.
    pub nohz_full: Option<Vec<u32>>,
}

pub fn read(src: &dyn Source) -> Result<CpuSets> {
    let f = |name: &str| cpulist::read(src, &format!("{DIR}/{name}"));
    Ok(CpuSets {
        online: f("online")?,
        possible: f("possible")?,
        present: f("present")?,
        offline: f("offline")?,
        isolated: f("isolated")?,
        nohz_full: f("nohz_full")?,
    })
}

/// SMT sibling groups (`cpuN/topology/thread_siblings_list`) of `cpus`, each
/// ascending and listed once; a CPU whose file is missing is its own core.
pub fn cores(src: &dyn Source, cpus: &[u32]) -> Result<Vec<Vec<u32>>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    for &c in cpus {
        if out.iter().any(|g| g.contains(&c)) {
            continue;
        }
        let path = format!("{DIR}/cpu{c}/topology/thread_siblings_list");
        let mut g = cpulist::read(src, &path)?.unwrap_or_else(|| vec![c]);
        // Offline siblings are not usable; the CPU itself always is.
        g.retain(|x| cpus.contains(x));
        if !g.contains(&c) {
            g.push(c);
            g.sort_unstable();
        }
        out.push(g);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemFs;

    #[test]
    fn sibling_groups() {
        let f = |c: u32| format!("{DIR}/cpu{c}/topology/thread_siblings_list");
        let fs = MemFs::new("t")
            .with(&f(0), "0,2\n")
            .with(&f(2), "0,2\n")
            .with(&f(1), "1,3\n");
        // CPU 3 offline: CPU 1 is a core of one; CPU 4 has no file.
        assert_eq!(
            cores(&fs, &[0, 1, 2, 4]).unwrap(),
            vec![vec![0, 2], vec![1], vec![4]]
        );
        let bad = MemFs::new("t").with(&f(0), "x");
        assert!(cores(&bad, &[0])
            .unwrap_err()
            .to_string()
            .contains("thread_siblings_list"));
    }
}
