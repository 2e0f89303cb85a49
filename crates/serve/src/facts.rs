//! The fleet families' inputs (output::metrics::fleet): this machine's
//! name and NUMA nodes, read at start and every [`NODES_EVERY_NS`] at a
//! host scan, and each VM's UUID and memory, read once per VMM pid from its
//! command line (a VM does not change them while it runs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use stealscope_engine::host::HostTracker;
use stealscope_model::host::identity::{vm_memory_bytes, vm_uuid};
use stealscope_model::host::{vm_labels, ThreadRole};
use stealscope_output::metrics::{HostFacts, VmFacts};
use stealscope_readers::{numa, process, RootFs, Source};

/// Free memory changes slowly next to a 15 s scrape; a tenth of a scan
/// rate keeps the reads of every node's meminfo off the 1 s host scan.
pub(crate) const NODES_EVERY_NS: u64 = 10_000_000_000;

pub(crate) struct Facts {
    root: PathBuf,
    /// (uuid, memory) by VMM pid.
    by_pid: BTreeMap<u32, (String, Option<u64>)>,
    nodes_read_ns: Option<u64>,
}

/// Hostname and nodes; what cannot be read is left out (absent series).
pub(crate) fn host_facts(src: &dyn Source) -> HostFacts {
    HostFacts {
        hostname: src
            .read_value("/proc/sys/kernel/hostname")
            .ok()
            .flatten()
            .filter(|h| !h.is_empty()),
        nodes: numa::nodes(src).unwrap_or_default(),
    }
}

impl Facts {
    pub fn new(root: PathBuf) -> Facts {
        Facts {
            root,
            by_pid: BTreeMap::new(),
            nodes_read_ns: None,
        }
    }

    /// New host facts when due at this scan (`t_ns`, CLOCK_MONOTONIC).
    pub fn host_due(&mut self, t_ns: u64) -> Option<HostFacts> {
        if self
            .nodes_read_ns
            .is_some_and(|t| t_ns.saturating_sub(t) < NODES_EVERY_NS)
        {
            return None;
        }
        self.nodes_read_ns = Some(t_ns);
        Some(host_facts(&RootFs::new(&self.root)))
    }

    /// Each VM the tracker follows, named as `vcpu_times` names it.
    pub fn vms(&mut self, h: &HostTracker) -> Vec<VmFacts> {
        let labels = vm_labels(h.vms());
        let src = RootFs::new(&self.root);
        self.by_pid.retain(|pid, _| labels.contains_key(pid));
        h.vms()
            .iter()
            .map(|vm| {
                let (uuid, memory_bytes) = self
                    .by_pid
                    .entry(vm.pid)
                    .or_insert_with(|| {
                        let cmd = process::cmdline(&src, vm.pid)
                            .ok()
                            .flatten()
                            .unwrap_or_default();
                        (vm_uuid(&cmd).unwrap_or_default(), vm_memory_bytes(&cmd))
                    })
                    .clone();
                VmFacts {
                    vm: labels[&vm.pid].clone(),
                    uuid,
                    vcpus: vm
                        .threads
                        .iter()
                        .filter(|t| matches!(t.role, ThreadRole::Vcpu(_)))
                        .count() as u32,
                    memory_bytes,
                }
            })
            .filter(|v| v.vcpus > 0)
            .collect()
    }
}
