//! move_pages(2): where a process's pages are, and moving a list of them.
//!
//! Why move_pages and not migrate_pages(2): migrate_pages moves every page
//! of the process from a set of nodes to another in one call, with no way
//! to bound how much moves per call or to stop half-way, so it cannot be
//! stepped with a safety check between steps. move_pages takes an explicit
//! list of page addresses, so each step is a bounded list.
//!
//! Kernel semantics relied on (mm/migrate.c, v6.1, kernel_move_pages,
//! do_pages_stat_array, do_pages_move, add_page_for_migration):
//! - nodes == NULL only reports: status[i] is the page's node or a negative
//!   errno: -EFAULT when no mapping covers the address or for the zero page.
//!   A page never touched is -EFAULT in anonymous memory up to 6.11
//!   (follow_page with FOLL_DUMP: mm/gup.c no_page_table) and -ENOENT
//!   since the folio_walk conversion in 6.12, -ENOENT in file mappings.
//!   Any negative status means "nothing to move here".
//! - With nodes, each page is looked up and isolated; per-page failures are
//!   stored in status and do not fail the call: -EFAULT (no mapping, or not
//!   migratable, e.g. VM_IO), -ENOENT (not present), -EACCES (mapped by more
//!   than one process and MPOL_MF_MOVE_ALL not given), -EBUSY (could not be
//!   isolated). A page already on the node gets the node.
//! - A transparent huge page is isolated and moved whole through its head
//!   (compound_head); the next address inside the same THP then fails to
//!   isolate (-EBUSY) while the THP is queued, and addresses after the
//!   flush find it already on the node. So a status of -EBUSY is confirmed
//!   by asking again where the page is (see `move_step`).
//! - When the migration itself fails for some pages, the call returns the
//!   number of pages not migrated (plus those not yet tried) and leaves
//!   their status unwritten: we pre-fill status with a sentinel, ask again
//!   where every page is, and retry the unwritten ones while that helps.
//! - Returns -ESRCH when the process is gone, -EPERM without ptrace read
//!   access to it (find_mm_struct: ptrace_may_access with
//!   PTRACE_MODE_READ_REALCREDS; CAP_SYS_NICE is needed only for
//!   MPOL_MF_MOVE_ALL, which we do not use: pages shared with other
//!   processes stay put), -EACCES when the node is outside the process's
//!   cpuset, -ENOMEM when the node cannot take the pages.

use nix::errno::Errno;
use std::collections::BTreeMap;

/// Move only pages mapped by this process alone (include/uapi/linux/mempolicy.h).
const MPOL_MF_MOVE: libc::c_int = 1 << 1;
/// Never written by the kernel (node ids are >= 0, errnos > -4096).
const UNWRITTEN: i32 = i32::MIN;

/// Where pages are and moving them: the kernel, or a fake in tests.
pub trait PageMover {
    /// Fills `status` with each page's node or a negative errno.
    fn query(&mut self, addrs: &[usize], status: &mut [i32]) -> Result<(), Errno>;
    /// Moves the pages to `node`; returns how many were not migrated.
    fn move_to(&mut self, addrs: &[usize], node: u32, status: &mut [i32]) -> Result<usize, Errno>;
}

/// The live kernel, for one process.
pub struct Kernel {
    pub pid: u32,
}

impl Kernel {
    fn call(
        &self,
        addrs: &[usize],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno> {
        assert_eq!(addrs.len(), status.len());
        // SAFETY: the three arrays hold addrs.len() elements and outlive the
        // call; the kernel reads addresses as values (never dereferences
        // them in our address space) and writes only `status`.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                self.pid as libc::c_int,
                addrs.len() as libc::c_ulong,
                addrs.as_ptr() as *const *const libc::c_void,
                nodes.map_or(std::ptr::null(), |n| n.as_ptr()),
                status.as_mut_ptr(),
                MPOL_MF_MOVE,
            )
        };
        if ret < 0 {
            Err(Errno::last())
        } else {
            Ok(ret as usize)
        }
    }
}

impl PageMover for Kernel {
    fn query(&mut self, addrs: &[usize], status: &mut [i32]) -> Result<(), Errno> {
        self.call(addrs, None, status).map(|_| ())
    }

    fn move_to(&mut self, addrs: &[usize], node: u32, status: &mut [i32]) -> Result<usize, Errno> {
        let nodes = vec![node as i32; addrs.len()];
        self.call(addrs, Some(&nodes), status)
    }
}

/// A page to move: its address and size (huge pages of hugetlbfs mappings
/// are moved by their first address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub addr: usize,
    pub bytes: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    pub moved_bytes: u64,
    /// Pages that did not move, by errno name ("EBUSY"), or "not-migrated"
    /// when the kernel only counted them.
    pub failed: BTreeMap<String, u64>,
}

pub fn errno_name(status: i32) -> String {
    format!("{:?}", Errno::from_raw(status.saturating_neg()))
}

/// Moves one step's pages, then asks the kernel where each page is: that
/// answer, not the move's status, decides what moved.
pub fn move_step(k: &mut dyn PageMover, pages: &[Page], node: u32) -> Result<StepOutcome, Errno> {
    let mut out = StepOutcome::default();
    let mut pending: Vec<Page> = pages.to_vec();
    while !pending.is_empty() {
        let addrs: Vec<usize> = pending.iter().map(|p| p.addr).collect();
        let mut status = vec![UNWRITTEN; addrs.len()];
        k.move_to(&addrs, node, &mut status)?;
        let mut now = vec![UNWRITTEN; addrs.len()];
        k.query(&addrs, &mut now)?;
        let mut retry = Vec::new();
        for ((page, st), at) in pending.iter().zip(&status).zip(&now) {
            if *at == node as i32 {
                out.moved_bytes += page.bytes;
            } else if *st == UNWRITTEN {
                retry.push(*page);
            } else {
                let name = if *st < 0 {
                    errno_name(*st)
                } else {
                    "not-migrated".to_string()
                };
                *out.failed.entry(name).or_insert(0) += 1;
            }
        }
        if retry.len() == pending.len() {
            // No progress: the kernel failed these pages without a status.
            *out.failed.entry("not-migrated".into()).or_insert(0) += retry.len() as u64;
            break;
        }
        pending = retry;
    }
    Ok(out)
}

#[cfg(test)]
pub mod fake {
    //! A process's pages in memory: address -> node, with pages that refuse
    //! to move and pages that belong to one huge page (moved together).
    use super::*;

    #[derive(Debug, Default, Clone)]
    pub struct FakeProcess {
        pub pages: BTreeMap<usize, i32>,
        /// Pages that fail with this errno (as the status) when moved.
        pub refuse: BTreeMap<usize, i32>,
        /// Pages the migration fails without a status (the call returns a count).
        pub silent_fail: Vec<usize>,
        /// Groups of addresses forming one huge page: moving any moves all,
        /// and the second address of a group reports EBUSY like the kernel.
        pub huge: Vec<Vec<usize>>,
        pub gone: bool,
        pub moves: usize,
    }

    impl PageMover for FakeProcess {
        fn query(&mut self, addrs: &[usize], status: &mut [i32]) -> Result<(), Errno> {
            if self.gone {
                return Err(Errno::ESRCH);
            }
            for (a, s) in addrs.iter().zip(status.iter_mut()) {
                *s = self.pages.get(a).copied().unwrap_or(-libc::ENOENT);
            }
            Ok(())
        }

        fn move_to(
            &mut self,
            addrs: &[usize],
            node: u32,
            status: &mut [i32],
        ) -> Result<usize, Errno> {
            if self.gone {
                return Err(Errno::ESRCH);
            }
            self.moves += 1;
            let mut failed = 0;
            let mut queued_huge: Vec<usize> = Vec::new();
            for (i, a) in addrs.iter().enumerate() {
                if let Some(e) = self.refuse.get(a) {
                    status[i] = *e;
                } else if self.silent_fail.contains(a) {
                    failed += 1;
                } else if let Some(g) = self.huge.iter().position(|g| g.contains(a)) {
                    if queued_huge.contains(&g) {
                        status[i] = -libc::EBUSY;
                    } else {
                        queued_huge.push(g);
                        for p in self.huge[g].clone() {
                            self.pages.insert(p, node as i32);
                        }
                        status[i] = node as i32;
                    }
                } else if self.pages.contains_key(a) {
                    self.pages.insert(*a, node as i32);
                    status[i] = node as i32;
                } else {
                    status[i] = -libc::ENOENT;
                }
            }
            if failed > 0 {
                // Like the kernel: statuses of the batch stay unwritten.
                for s in status.iter_mut() {
                    if *s >= 0 {
                        *s = UNWRITTEN;
                    }
                }
            }
            Ok(failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeProcess;
    use super::*;

    fn pages(addrs: &[usize]) -> Vec<Page> {
        addrs
            .iter()
            .map(|a| Page {
                addr: *a,
                bytes: 4096,
            })
            .collect()
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(-libc::EBUSY), "EBUSY");
        assert_eq!(errno_name(-libc::EACCES), "EACCES");
        assert_eq!(errno_name(-libc::EFAULT), "EFAULT");
    }

    #[test]
    fn huge_page_busy_tail_counts_as_moved() {
        let mut p = FakeProcess::default();
        for a in [0x1000, 0x2000, 0x3000] {
            p.pages.insert(a, 0);
        }
        p.huge = vec![vec![0x1000, 0x2000]];
        let o = move_step(&mut p, &pages(&[0x1000, 0x2000, 0x3000]), 1).unwrap();
        assert_eq!(o.moved_bytes, 3 * 4096);
        assert!(o.failed.is_empty(), "{:?}", o.failed);
    }

    #[test]
    fn refused_and_silent_failures_are_counted() {
        let mut p = FakeProcess::default();
        for a in [0x1000, 0x2000, 0x3000, 0x4000] {
            p.pages.insert(a, 0);
        }
        p.refuse.insert(0x1000, -libc::EACCES);
        p.silent_fail.push(0x3000);
        let o = move_step(&mut p, &pages(&[0x1000, 0x2000, 0x3000, 0x4000, 0x5000]), 1).unwrap();
        // 0x2000 and 0x4000 moved; the retry pass gives up on 0x3000.
        assert_eq!(o.moved_bytes, 2 * 4096);
        assert_eq!(o.failed.get("EACCES"), Some(&1));
        assert_eq!(o.failed.get("ENOENT"), Some(&1));
        assert_eq!(o.failed.get("not-migrated"), Some(&1));
        assert_eq!(p.pages[&0x3000], 0);
    }

    #[test]
    fn gone_is_esrch() {
        let mut p = FakeProcess {
            gone: true,
            ..Default::default()
        };
        assert_eq!(move_step(&mut p, &pages(&[0x1000]), 1), Err(Errno::ESRCH));
    }

    /// The real syscall on this test process: touched pages report a node,
    /// untouched ones -ENOENT (6.12+) or -EFAULT (older), an unmapped
    /// address -EFAULT; moving to the node they are on keeps them there.
    #[test]
    fn kernel_query_own_pages() {
        let page = 4096usize;
        let len = 8 * page;
        // SAFETY: plain anonymous mapping, unmapped at the end of the test.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base as usize;
        // Touch the first four pages.
        for i in 0..4 {
            // SAFETY: inside the mapping.
            unsafe { ((base + i * page) as *mut u8).write_volatile(1) };
        }
        let mut k = Kernel {
            pid: std::process::id(),
        };
        let addrs: Vec<usize> = (0..8).map(|i| base + i * page).collect();
        let mut st = vec![UNWRITTEN; 8];
        k.query(&addrs, &mut st).unwrap();
        let node = st[0];
        assert!(node >= 0, "{st:?}");
        assert!(st[..4].iter().all(|s| *s == node), "{st:?}");
        assert!(
            st[4..]
                .iter()
                .all(|s| *s == -libc::ENOENT || *s == -libc::EFAULT),
            "{st:?}"
        );
        let o = move_step(&mut k, &pages(&addrs[..4]), node as u32).unwrap();
        assert_eq!(o.moved_bytes, 4 * 4096);
        // SAFETY: the mapping created above.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
        let mut st = vec![UNWRITTEN; 1];
        k.query(&addrs[..1], &mut st).unwrap();
        assert_eq!(st[0], -libc::EFAULT);
    }
}
