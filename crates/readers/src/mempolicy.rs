//! A process's own NUMA memory policies, as /proc/<pid>/numa_maps prints
//! them: the second field of each line, `<mode>[=<flags>][:<nodelist>]`
//! (mm/mempolicy.c `mpol_to_str`). A line shows the mapping's policy, or the
//! task's when the mapping has none, so it is the policy new pages there
//! follow. Two modes hold a space ("weighted interleave", "prefer (many)").
//!
//! Why it matters for placement: `move_pages` ignores these policies, so
//! memory moved to a node its policy excludes is moved against the VM
//! owner's explicit binding (QEMU `host-nodes`, libvirt `<numatune>`,
//! numactl), and every page allocated afterwards lands back on the bound
//! node: the move fights the owner and is undone. [`Confinement`] says how
//! much memory a policy confines and to which nodes a move may go.

use crate::cpulist;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No policy of its own: the system default (local allocation).
    Default,
    /// Allocate on the CPU's node (MPOL_LOCAL).
    Local,
    /// One preferred node, others when it is full (MPOL_PREFERRED).
    Prefer,
    /// Preferred nodes, others when they are full (MPOL_PREFERRED_MANY).
    PreferMany,
    /// Only these nodes (MPOL_BIND).
    Bind,
    /// Round-robin over these nodes (MPOL_INTERLEAVE).
    Interleave,
    /// Interleave by per-node weights (MPOL_WEIGHTED_INTERLEAVE, 6.9+).
    WeightedInterleave,
}

/// Longest first, so "prefer (many)" is not read as "prefer".
const MODES: [(&str, Mode); 7] = [
    ("weighted interleave", Mode::WeightedInterleave),
    ("prefer (many)", Mode::PreferMany),
    ("interleave", Mode::Interleave),
    ("default", Mode::Default),
    ("prefer", Mode::Prefer),
    ("local", Mode::Local),
    ("bind", Mode::Bind),
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemPolicy {
    pub mode: Mode,
    /// The policy's nodes (empty for default and local).
    pub nodes: Vec<u32>,
    /// As the kernel printed it, e.g. "bind=static:0-1".
    pub text: String,
}

impl MemPolicy {
    /// Parses the policy at the start of `s` (a numa_maps line without its
    /// address); returns it and the rest of the line. None when `s` does not
    /// start with a known mode or its node list is malformed.
    pub fn parse_prefix(s: &str) -> Option<(MemPolicy, &str)> {
        let s = s.trim_start();
        let (name, mode) = MODES.iter().find(|(name, _)| s.starts_with(name))?;
        let rest = &s[name.len()..];
        // The policy ends at the first space after the mode.
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (tail, after) = rest.split_at(end);
        if !(tail.is_empty() || tail.starts_with('=') || tail.starts_with(':')) {
            return None;
        }
        let nodes = match tail.split_once(':') {
            Some((_, list)) => cpulist::parse(list, "numa_maps").ok()?,
            None => Vec::new(),
        };
        Some((
            MemPolicy {
                mode: *mode,
                nodes,
                text: format!("{name}{tail}"),
            },
            after,
        ))
    }

    /// Whether moving this memory to `node` agrees with the policy: a bind
    /// or preferred-many set that holds it, a preference or interleave set
    /// that is exactly it. Moving interleaved memory onto one node would
    /// undo the interleaving its owner asked for.
    pub fn allows(&self, node: u32) -> bool {
        match self.mode {
            Mode::Default | Mode::Local => true,
            Mode::Bind | Mode::PreferMany => self.nodes.contains(&node),
            Mode::Prefer | Mode::Interleave | Mode::WeightedInterleave => self.nodes == [node],
        }
    }

    /// Whether the policy places pages by itself (not by where the thread runs).
    pub fn confines(&self) -> bool {
        !matches!(self.mode, Mode::Default | Mode::Local)
    }
}

/// The memory a process's own policies place, summed per policy text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    /// Each confining policy, by its text, with the resident bytes under it.
    pub by_policy: BTreeMap<String, Confined>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confined {
    pub policy: MemPolicy,
    pub bytes: u64,
}

impl Confinement {
    /// From numa_maps text: every line with resident pages under a policy
    /// that confines them. Lines that do not parse are skipped (the page
    /// counts are read elsewhere, and a process may exit mid-read).
    pub fn from_numa_maps(text: &str) -> Confinement {
        let mut out = Confinement::default();
        for line in text.lines() {
            let Some((_, rest)) = line.trim_start().split_once(char::is_whitespace) else {
                continue;
            };
            let Some((pol, _)) = MemPolicy::parse_prefix(rest) else {
                continue;
            };
            if !pol.confines() {
                continue;
            }
            let bytes: u64 = crate::numa::parse_numa_maps(line).values().sum();
            if bytes == 0 {
                continue;
            }
            out.by_policy
                .entry(pol.text.clone())
                .or_insert(Confined {
                    policy: pol,
                    bytes: 0,
                })
                .bytes += bytes;
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.by_policy.is_empty()
    }

    /// Every confining policy with its bytes, by text.
    pub fn all(&self) -> Vec<(&str, u64)> {
        self.by_policy
            .iter()
            .map(|(t, c)| (t.as_str(), c.bytes))
            .collect()
    }

    /// The policies that keep memory off `node`, with their bytes, largest first.
    pub fn against(&self, node: u32) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self
            .by_policy
            .iter()
            .filter(|(_, c)| !c.policy.allows(node))
            .map(|(t, c)| (t.as_str(), c.bytes))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }

    /// Of `nodes`, those every confining policy allows the memory to move to.
    pub fn allowed(&self, nodes: &[u32]) -> Vec<u32> {
        nodes
            .iter()
            .copied()
            .filter(|n| self.by_policy.values().all(|c| c.policy.allows(*n)))
            .collect()
    }

    /// "bind:0 on 3900 MiB, interleave:0-1 on 12 MiB".
    pub fn describe(&self, policies: &[(&str, u64)]) -> String {
        policies
            .iter()
            .map(|(t, b)| format!("{t} on {} MiB", b >> 20))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> MemPolicy {
        MemPolicy::parse_prefix(s).unwrap().0
    }

    #[test]
    fn every_mode_the_kernel_prints() {
        assert_eq!(p("default anon=3").mode, Mode::Default);
        assert_eq!(p("local N0=1").mode, Mode::Local);
        let b = p("bind:0-1,3 anon=2 N0=2");
        assert_eq!(
            (b.mode, b.nodes.clone(), b.text.as_str()),
            (Mode::Bind, vec![0, 1, 3], "bind:0-1,3")
        );
        let s = p("bind=static:1 N1=4");
        assert_eq!(
            (s.mode, s.nodes.clone(), s.text.as_str()),
            (Mode::Bind, vec![1], "bind=static:1")
        );
        let m = p("prefer (many):0,2 N0=1");
        assert_eq!((m.mode, m.nodes.clone()), (Mode::PreferMany, vec![0, 2]));
        let pr = p("prefer=relative:1 N1=1");
        assert_eq!((pr.mode, pr.nodes.clone()), (Mode::Prefer, vec![1]));
        let w = p("weighted interleave:0-1 anon=5");
        assert_eq!(
            (w.mode, w.nodes.clone(), w.text.as_str()),
            (
                Mode::WeightedInterleave,
                vec![0, 1],
                "weighted interleave:0-1"
            )
        );
        assert_eq!(p("interleave:0-1").mode, Mode::Interleave);
        let (_, rest) = MemPolicy::parse_prefix("bind:0 anon=2 N0=2").unwrap();
        assert_eq!(rest.trim(), "anon=2 N0=2");
    }

    #[test]
    fn garbage_is_not_a_policy() {
        for s in ["", "bogus:0", "bindx:0", "bind:zz", "bind:3-1", "N0=5"] {
            assert!(MemPolicy::parse_prefix(s).is_none(), "{s:?}");
        }
    }

    #[test]
    fn what_a_move_may_do() {
        assert!(p("default").allows(1));
        assert!(p("local").allows(1));
        assert!(p("bind:0-1").allows(1));
        assert!(!p("bind:0").allows(1));
        assert!(p("prefer (many):0-1").allows(0));
        assert!(!p("prefer:0").allows(1));
        assert!(p("prefer:1").allows(1));
        // Interleaved memory moved onto one node is no longer interleaved.
        assert!(!p("interleave:0-1").allows(1));
        assert!(p("interleave:1").allows(1));
        assert!(!p("weighted interleave:0-1").allows(0));
    }

    #[test]
    fn confinement_from_numa_maps() {
        let text = "\
7f0000000000 bind:0 anon=1000 dirty=1000 N0=1000 kernelpagesize_kB=4
7f1000000000 default anon=10 N0=6 N1=4 kernelpagesize_kB=4
7f2000000000 bind:0 file=/x N0=2 kernelpagesize_kB=2048
7f3000000000 interleave:0-1 anon=4 N0=2 N1=2 kernelpagesize_kB=4
7f4000000000 bind:1
not a line
7f5000000000 weird:0 N0=9
";
        let c = Confinement::from_numa_maps(text);
        assert_eq!(c.by_policy["bind:0"].bytes, 1000 * 4096 + 2 * (2 << 20));
        assert_eq!(c.by_policy["interleave:0-1"].bytes, 4 * 4096);
        // No pages under bind:1: nothing it confines.
        assert!(!c.by_policy.contains_key("bind:1"));
        assert_eq!(c.against(0), vec![("interleave:0-1", 4 * 4096)]);
        assert_eq!(c.against(1).len(), 2);
        assert_eq!(c.against(1)[0].0, "bind:0");
        assert_eq!(c.allowed(&[0, 1]), Vec::<u32>::new());
        let only_bind = Confinement::from_numa_maps("7f00 bind:0 N0=5\n7f01 default N1=5\n");
        assert_eq!(only_bind.allowed(&[0, 1]), vec![0]);
        assert!(Confinement::from_numa_maps("7f00 default N0=5\n").is_empty());
    }
}
