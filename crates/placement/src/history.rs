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

/// Utilisation history: each thread's demand as an exponentially weighted
/// average over the daemon's passes, so one burst does not move a VM and a
/// lasting change does within a few passes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DemandHistory {
    ewma: BTreeMap<(u32, u32), f64>,
}

impl DemandHistory {
    /// Weight of the newest pass.
    pub const ALPHA: f64 = 0.3;

    /// Folds this pass's measurements in and replaces each thread's demand
    /// in `host` with the average; forgets threads that are gone.
    pub fn smooth(&mut self, host: &mut crate::input::HostInput) {
        let mut next = BTreeMap::new();
        for vm in &mut host.vms {
            let threads = vm
                .vcpus
                .iter_mut()
                .map(|(_, t)| t)
                .chain(vm.others.iter_mut());
            for t in threads {
                let key = (vm.pid, t.tid);
                let avg = match (self.ewma.get(&key), t.util) {
                    (Some(old), Some(new)) => Some(old + Self::ALPHA * (new - old)),
                    (None, Some(new)) => Some(new),
                    (Some(old), None) => Some(*old),
                    (None, None) => None,
                };
                if let Some(a) = avg {
                    next.insert(key, a);
                    t.util = Some(a);
                }
            }
        }
        self.ewma = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{host, vm};

    #[test]
    fn a_burst_is_damped_and_a_lasting_change_comes_through() {
        let mut d = DemandHistory::default();
        let mut pass = |u: f64| {
            let mut h = host(1, 2, false, 1 << 30, 0.5);
            h.vms.push(vm(1, 1, u, 1 << 20, 0, &[0, 1]));
            d.smooth(&mut h);
            h.vms[0].vcpus[0].1.util.unwrap()
        };
        assert_eq!(pass(0.1), 0.1);
        let burst = pass(1.0);
        assert!((burst - 0.37).abs() < 1e-9, "{burst}");
        let mut last = burst;
        for _ in 0..10 {
            last = pass(1.0);
        }
        assert!(last > 0.95, "{last}");
    }
}
