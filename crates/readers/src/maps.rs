//! A process's mappings: address ranges from /proc/<pid>/maps, and per
//! mapping the pages per node from /proc/<pid>/numa_maps (whose lines start
//! with the mapping's start address but carry no end).
//!
//! /proc/<pid>/maps is parsed here rather than with procfs-core's
//! `MemoryMaps`: that parser slices "/SYSV" names without a length check and
//! panics on a truncated line, and we need only the two addresses.

use crate::error::{ReadError, Result};
use crate::numa::parse_numa_maps;
use crate::Source;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    /// Backing file or pseudo-name ("[heap]"); None for anonymous memory.
    pub path: Option<String>,
}

pub fn maps_path(pid: u32) -> String {
    format!("/proc/{pid}/maps")
}

pub fn numa_maps_path(pid: u32) -> String {
    format!("/proc/{pid}/numa_maps")
}

/// "7f12a000-7f12b000 rw-p 00000000 00:00 0    [heap]" per line.
pub fn parse_maps(text: &str, path: &str) -> Result<Vec<Mapping>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| ReadError::parse(path, format!("line {}: {what}: {line:?}", n + 1));
        let mut it = line.split_whitespace();
        let range = it.next().ok_or_else(|| bad("empty"))?;
        let (s, e) = range
            .split_once('-')
            .ok_or_else(|| bad("no start-end range"))?;
        let hex = |v: &str| u64::from_str_radix(v, 16).map_err(|_| bad("address is not hex"));
        let (start, end) = (hex(s)?, hex(e)?);
        if end <= start {
            return Err(bad("end is not above start"));
        }
        // perms, offset, dev, inode, then the name (which may hold spaces).
        let name = it.skip(4).collect::<Vec<_>>().join(" ");
        out.push(Mapping {
            start,
            end,
            path: (!name.is_empty()).then_some(name),
        });
    }
    Ok(out)
}

pub fn maps(src: &dyn Source, pid: u32) -> Result<Option<Vec<Mapping>>> {
    let path = maps_path(pid);
    match src.read_text(&path)? {
        None => Ok(None),
        Some(t) => parse_maps(&t, &path).map(Some),
    }
}

/// One line of /proc/<pid>/numa_maps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmaNuma {
    pub start: u64,
    /// The mapping's page size ("kernelpagesize_kB", 4 KiB when absent;
    /// transparent huge pages are counted in 4 KiB pages by numa_maps).
    pub page_bytes: u64,
    /// Resident bytes per node.
    pub bytes: BTreeMap<u32, u64>,
}

/// Lines whose first word is not a hex address are skipped (numa_maps has
/// no header, but a fixture or a future kernel might).
pub fn parse_numa_maps_vmas(text: &str) -> Vec<VmaNuma> {
    text.lines()
        .filter_map(|line| {
            let start = u64::from_str_radix(line.split_whitespace().next()?, 16).ok()?;
            let page_kb = line
                .split_whitespace()
                .find_map(|t| t.strip_prefix("kernelpagesize_kB="))
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|kb| *kb > 0)
                .unwrap_or(4);
            Some(VmaNuma {
                start,
                page_bytes: page_kb.saturating_mul(1024),
                bytes: parse_numa_maps(line),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
7f2c0000-7f2e1000 rw-p 00000000 00:00 0
7ffd5000-7ffd6000 rw-p 00000000 00:00 0           [stack]
7ffe0000-7ffe1000 r--s 00000000 00:05 12          /SYSV0000 (deleted)
";

    #[test]
    fn maps_ranges_and_names() {
        let m = parse_maps(MAPS, "maps").unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!((m[0].start, m[0].end), (0x400000, 0x452000));
        assert_eq!(m[0].path.as_deref(), Some("/usr/bin/dbus-daemon"));
        assert_eq!(m[1].path, None);
        assert_eq!(m[2].path.as_deref(), Some("[stack]"));
        assert_eq!(m[3].path.as_deref(), Some("/SYSV0000 (deleted)"));
        let e = parse_maps("zz-10 rw-p 0 0:0 0\n", "/proc/1/maps").unwrap_err();
        assert!(e.to_string().starts_with("/proc/1/maps: line 1"), "{e}");
        assert!(parse_maps("10-10 rw-p 0 0:0 0\n", "m").is_err());
    }

    #[test]
    fn numa_maps_per_vma() {
        let v = parse_numa_maps_vmas(
            "7f00000 default anon=10 dirty=10 N0=8 N1=2 kernelpagesize_kB=4\n\
             7f200000 bind:1 huge N1=3 kernelpagesize_kB=2048\nnot a line\n",
        );
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].start, 0x7f00000);
        assert_eq!(v[0].page_bytes, 4096);
        assert_eq!(v[0].bytes[&0], 8 * 4096);
        assert_eq!(v[1].page_bytes, 2 << 20);
        assert_eq!(v[1].bytes[&1], 3 * (2 << 20));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse_maps(&s, "m");
            let _ = parse_numa_maps_vmas(&s);
        }
    }
}
