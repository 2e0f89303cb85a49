//! NUMA topology: /sys/devices/system/node/nodeN/{cpulist,meminfo,distance}
//! and the automatic NUMA balancing switch.

use crate::error::{ReadError, Result};
use crate::{cpulist, Source};
use serde::{Deserialize, Serialize};

pub const NODE_DIR: &str = "/sys/devices/system/node";
pub const NUMA_BALANCING: &str = "/proc/sys/kernel/numa_balancing";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub mem_total_kb: Option<u64>,
    pub mem_free_kb: Option<u64>,
    pub distances: Option<Vec<u32>>,
}

pub fn parse_node_meminfo(text: &str, path: &str) -> Result<(Option<u64>, Option<u64>)> {
    let (mut total, mut free) = (None, None);
    for line in text.lines() {
        // "Node 0 MemTotal:       32000000 kB"
        let mut it = line.split_whitespace();
        let (Some("Node"), Some(_), Some(key), Some(val)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let v = || {
            val.parse::<u64>()
                .map_err(|_| ReadError::parse(path, format!("{key} {val:?} is not a number")))
        };
        match key {
            "MemTotal:" => total = Some(v()?),
            "MemFree:" => free = Some(v()?),
            _ => {}
        }
    }
    Ok((total, free))
}

pub fn nodes(src: &dyn Source) -> Result<Vec<Node>> {
    let mut out = Vec::new();
    for name in src.list(NODE_DIR)?.unwrap_or_default() {
        let Some(id) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = format!("{NODE_DIR}/{name}");
        let cpus = cpulist::read(src, &format!("{dir}/cpulist"))?.unwrap_or_default();
        let mpath = format!("{dir}/meminfo");
        let (mem_total_kb, mem_free_kb) = match src.read_text(&mpath)? {
            Some(t) => parse_node_meminfo(&t, &mpath)?,
            None => (None, None),
        };
        let dpath = format!("{dir}/distance");
        let distances = match src.read_value(&dpath)? {
            Some(t) => Some(
                t.split_whitespace()
                    .map(|d| {
                        d.parse()
                            .map_err(|_| ReadError::parse(&dpath, format!("{d:?} is not a number")))
                    })
                    .collect::<Result<Vec<u32>>>()?,
            ),
            None => None,
        };
        out.push(Node {
            id,
            cpus,
            mem_total_kb,
            mem_free_kb,
            distances,
        });
    }
    out.sort_by_key(|n| n.id);
    Ok(out)
}

/// 0 off, 1 normal, 2 memory tiering (a bitmask since 5.19).
pub fn numa_balancing(src: &dyn Source) -> Result<Option<u32>> {
    match src.read_value(NUMA_BALANCING)? {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ReadError::parse(NUMA_BALANCING, format!("{v:?} is not a number"))),
    }
}

/// Pages per node from /proc/<pid>/numa_maps, in bytes (mixed page sizes).
pub fn parse_numa_maps(text: &str) -> std::collections::BTreeMap<u32, u64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let page_kb = line
            .split_whitespace()
            .find_map(|t| t.strip_prefix("kernelpagesize_kB="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(4);
        for tok in line.split_whitespace() {
            let Some(rest) = tok.strip_prefix('N') else {
                continue;
            };
            let Some((node, pages)) = rest.split_once('=') else {
                continue;
            };
            if let (Ok(node), Ok(pages)) = (node.parse::<u32>(), pages.parse::<u64>()) {
                *out.entry(node).or_insert(0) += pages.saturating_mul(page_kb * 1024);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_maps_and_meminfo() {
        let m = parse_numa_maps("7f00 default anon=10 dirty=10 N0=8 N1=2 kernelpagesize_kB=4\n7f01 default N1=1 kernelpagesize_kB=2048\n");
        assert_eq!(m[&0], 8 * 4096);
        assert_eq!(m[&1], 2 * 4096 + 2048 * 1024);
        let (t, f) = parse_node_meminfo(
            "Node 0 MemTotal:       32000000 kB\nNode 0 MemFree:        1000 kB\n",
            "p",
        )
        .unwrap();
        assert_eq!((t, f), (Some(32000000), Some(1000)));
    }
}
