//! What the planner remembers between passes, so it never flaps: each VM's
//! node and when it last changed. The daemon keeps it in memory and
//! rebuilds it from the journal on start.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VmHistory {
    /// Node the VM was placed on (None: spanning).
    pub node: Option<u32>,
    /// Seconds (any monotonic clock shared with `plan`'s `now_s`).
    pub changed_at_s: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Keyed by VMM pid (a restarted VM is a new VM).
    pub vms: BTreeMap<u32, VmHistory>,
}

impl History {
    pub fn record(&mut self, pid: u32, node: Option<u32>, now_s: f64) {
        let e = self.vms.entry(pid).or_insert(VmHistory {
            node,
            changed_at_s: now_s,
        });
        if e.node != node {
            *e = VmHistory {
                node,
                changed_at_s: now_s,
            };
        }
    }

    /// Forgets VMs that no longer exist.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.vms.retain(|pid, _| live(*pid));
    }
}
