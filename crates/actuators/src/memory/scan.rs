//! Finds the pages to move, one step at a time: only the mappings that
//! numa_maps shows with pages on other nodes are walked, each only until as
//! many bytes as numa_maps counted there have been found (a sparse mapping
//! of terabytes is not walked to its end for a few pages), and the kernel is
//! asked where each page is in batches.

use super::pages::{Page, PageMover};
use nix::errno::Errno;
use stealscope_readers::maps::{Mapping, VmaNuma};

/// Addresses asked about per move_pages(nodes=NULL) call.
const QUERY_BATCH: usize = 4096;

/// A mapping with resident pages on nodes other than the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub page_bytes: u64,
    /// Bytes numa_maps counted on other nodes.
    pub off_bytes: u64,
}

/// Joins numa_maps lines (start, pages per node) with maps (end) by start
/// address; a line without a mapping (unmapped between the two reads) is
/// skipped.
pub fn regions(vmas: &[VmaNuma], maps: &[Mapping], to_node: u32) -> Vec<Region> {
    let mut out: Vec<Region> = vmas
        .iter()
        .filter_map(|v| {
            let off_bytes = super::off_node_bytes(&v.bytes, to_node);
            if off_bytes == 0 {
                return None;
            }
            let m = maps.iter().find(|m| m.start == v.start)?;
            Some(Region {
                start: m.start,
                end: m.end,
                page_bytes: v.page_bytes,
                off_bytes,
            })
        })
        .collect();
    out.sort_by_key(|r| r.start);
    out
}

pub struct Scanner {
    regions: Vec<Region>,
    idx: usize,
    cursor: u64,
    found_in_region: u64,
}

impl Scanner {
    pub fn new(regions: Vec<Region>) -> Self {
        let cursor = regions.first().map_or(0, |r| r.start);
        Scanner {
            regions,
            idx: 0,
            cursor,
            found_in_region: 0,
        }
    }

    fn next_region(&mut self) {
        self.idx += 1;
        self.found_in_region = 0;
        self.cursor = self.regions.get(self.idx).map_or(0, |r| r.start);
    }

    /// The next pages not on `to_node`, up to `max_bytes` (at least one page
    /// while any remain); empty when the walk is done.
    pub fn next_step(
        &mut self,
        k: &mut dyn PageMover,
        to_node: u32,
        max_bytes: u64,
    ) -> Result<Vec<Page>, Errno> {
        let mut out = Vec::new();
        let mut bytes = 0u64;
        while let Some(r) = self.regions.get(self.idx).cloned() {
            let pb = r.page_bytes.max(1);
            if self.cursor >= r.end || self.found_in_region >= r.off_bytes {
                self.next_region();
                continue;
            }
            let n = ((r.end - self.cursor).div_ceil(pb) as usize).min(QUERY_BATCH);
            let addrs: Vec<usize> = (0..n as u64)
                .map(|i| (self.cursor + i * pb) as usize)
                .collect();
            let mut status = vec![0i32; n];
            k.query(&addrs, &mut status)?;
            self.cursor += n as u64 * pb;
            for (a, s) in addrs.iter().zip(&status) {
                if *s < 0 || *s == to_node as i32 {
                    continue;
                }
                out.push(Page {
                    addr: *a,
                    bytes: pb,
                });
                bytes += pb;
                self.found_in_region += pb;
                if bytes >= max_bytes || self.found_in_region >= r.off_bytes {
                    // Resume right after this page.
                    self.cursor = *a as u64 + pb;
                    break;
                }
            }
            if bytes >= max_bytes {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::pages::fake::FakeProcess;
    use super::*;
    use std::collections::BTreeMap;

    fn vma(start: u64, page_bytes: u64, nodes: &[(u32, u64)]) -> VmaNuma {
        VmaNuma {
            start,
            page_bytes,
            bytes: nodes.iter().copied().collect::<BTreeMap<_, _>>(),
        }
    }

    fn map(start: u64, end: u64) -> Mapping {
        Mapping {
            start,
            end,
            path: None,
        }
    }

    #[test]
    fn regions_join_and_skip() {
        let v = [
            vma(0x10000, 4096, &[(0, 8192)]),
            vma(0x20000, 4096, &[(1, 4096)]), // all on the target already
            vma(0x30000, 4096, &[(0, 4096)]), // no longer mapped
        ];
        let m = [map(0x10000, 0x14000), map(0x20000, 0x21000)];
        assert_eq!(
            regions(&v, &m, 1),
            vec![Region {
                start: 0x10000,
                end: 0x14000,
                page_bytes: 4096,
                off_bytes: 8192
            }]
        );
    }

    #[test]
    fn steps_cover_every_off_node_page_once() {
        let mut p = FakeProcess::default();
        // Region A: 10 pages, every other on node 0 (the rest on node 1 or absent).
        for i in 0..10u64 {
            if i % 2 == 0 {
                p.pages.insert((0x100000 + i * 4096) as usize, 0);
            } else if i % 3 == 0 {
                p.pages.insert((0x100000 + i * 4096) as usize, 1);
            }
        }
        // Region B: 3 pages on node 2.
        for i in 0..3u64 {
            p.pages.insert((0x900000 + i * 4096) as usize, 2);
        }
        let r = vec![
            Region {
                start: 0x100000,
                end: 0x100000 + 10 * 4096,
                page_bytes: 4096,
                off_bytes: 5 * 4096,
            },
            Region {
                start: 0x900000,
                end: 0x900000 + 3 * 4096,
                page_bytes: 4096,
                off_bytes: 3 * 4096,
            },
        ];
        let mut s = Scanner::new(r);
        let mut seen = Vec::new();
        loop {
            let step = s.next_step(&mut p, 1, 3 * 4096).unwrap();
            if step.is_empty() {
                break;
            }
            assert!(step.len() <= 3);
            seen.extend(step.iter().map(|pg| pg.addr));
        }
        let want: Vec<usize> = p
            .pages
            .iter()
            .filter(|(_, n)| **n != 1)
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn stops_walking_a_region_once_its_count_is_found() {
        let mut p = FakeProcess::default();
        p.pages.insert(0x100000, 0);
        let r = vec![Region {
            start: 0x100000,
            end: 0x100000 + (1u64 << 40),
            page_bytes: 4096,
            off_bytes: 4096,
        }];
        let mut s = Scanner::new(r);
        assert_eq!(s.next_step(&mut p, 1, 1 << 20).unwrap().len(), 1);
        assert!(s.next_step(&mut p, 1, 1 << 20).unwrap().is_empty());
    }
}
