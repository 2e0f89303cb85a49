//! Per-node bookkeeping while planning: which CPUs are still free for
//! dedicated cores, the shared pool, the shared load assigned so far and the
//! memory budget.

use crate::config::Config;
use crate::input::{HostInput, NodeInput, VmInput};
use std::collections::BTreeSet;

#[derive(Debug, Clone)]
pub struct NodeState {
    pub id: u32,
    /// Usable CPUs (online, not housekeeping) not given to dedicated VMs.
    pub free: BTreeSet<u32>,
    /// Whole SMT cores inside `free`, each ascending.
    pub cores: Vec<Vec<u32>>,
    pub housekeeping: Vec<u32>,
    /// Demand on the pool so far, CPUs: the host's other work there
    /// (`host_load`), then the shared VMs placed.
    pub load: f64,
    /// The host's other work on the pool CPUs, CPUs of demand: confined
    /// threads on them, and those allowed anywhere in proportion to the
    /// pool's share of the online CPUs.
    pub host_load: f64,
    /// Variance of the runnable count of `load` ([`crate::overflow`]).
    pub spread: f64,

    pub mem_total: Option<u64>,
    /// Free memory left after the moves planned so far (can go negative only
    /// through memory already on the node, which never needs room).
    pub mem_free: Option<i128>,
}

impl NodeState {
    /// Bytes a VM would bring to this node.
    pub fn incoming(&self, vm: &VmInput) -> Option<u64> {
        let m = vm.mem_by_node.as_ref()?;
        let here = m.get(&self.id).copied().unwrap_or(0);
        Some(m.values().sum::<u64>() - here)
    }

    /// Whether the VM's memory fits here with the margin; Ok(None) when
    /// memory is unknown (the applier re-checks live before any move).
    pub fn mem_fits(&self, vm: &VmInput, cfg: &Config) -> Result<Option<u64>, String> {
        // The VM's own memory policy decides where its pages go: a node it
        // excludes would get the vCPUs while new pages keep landing elsewhere.
        if let Some(c) = &vm.mem_policy {
            let against = c.against(self.id);
            if !against.is_empty() {
                return Err(format!(
                    "node {}: the VM's own memory policy keeps its memory off this node ({})",
                    self.id,
                    c.describe(&against)
                ));
            }
        }
        let (Some(incoming), Some(free), Some(total)) =
            (self.incoming(vm), self.mem_free, self.mem_total)
        else {
            return Ok(None);
        };
        let margin = cfg.mem_margin_bytes(total) as i128;
        if free - incoming as i128 >= margin {
            Ok(Some(incoming))
        } else {
            Err(format!(
                "node {} has {} MiB free, needs {} MiB plus a {} MiB margin",
                self.id,
                free.max(0) >> 20,
                incoming >> 20,
                margin >> 20
            ))
        }
    }

    pub fn take_mem(&mut self, bytes: u64) {
        if let Some(f) = &mut self.mem_free {
            *f -= bytes as i128;
        }
    }

    /// The whole cores that would hold `n` hardware threads, in CPU order
    /// (all cores of a host have the same width); None if too few are free.
    pub fn cores_for(&self, n: usize) -> Option<Vec<Vec<u32>>> {
        let mut got = Vec::new();
        let mut threads = 0;
        for c in &self.cores {
            if threads >= n {
                break;
            }
            threads += c.len();
            got.push(c.clone());
        }
        (threads >= n).then_some(got)
    }

    /// Takes the cores `cores_for(n)` names; None (nothing taken) if too few.
    pub fn take_cores(&mut self, n: usize) -> Option<Vec<Vec<u32>>> {
        let got = self.cores_for(n)?;
        self.cores.retain(|c| !got.contains(c));
        for c in &got {
            for cpu in c {
                self.free.remove(cpu);
            }
        }
        Some(got)
    }

    pub fn pool(&self) -> Vec<u32> {
        self.free.iter().copied().collect()
    }

    /// Adds `demand` CPUs of variance `spread` to the pool (negative:
    /// takes them off): load and spread always move together.
    pub fn add(&mut self, demand: f64, spread: f64) {
        self.load += demand;
        self.spread += spread;
    }

    /// Demand the pool leaves unserved (CPUs, [`crate::overflow`]) with
    /// `demand` of variance `spread` added (negative: taken off).
    pub fn unserved_with(&self, demand: f64, spread: f64) -> f64 {
        crate::overflow::unserved(
            self.load + demand,
            (self.spread + spread).max(0.0),
            self.free.len() as f64,
        )
    }

    /// Shared load per pool CPU if `demand` were added.
    pub fn pressure_with(&self, demand: f64) -> f64 {
        (self.load + demand) / self.free.len().max(1) as f64
    }
}

/// The nodes of the host with online, non-housekeeping CPUs. A kernel
/// without NUMA nodes gets one node 0 holding every online CPU.
pub fn node_states(host: &HostInput, housekeeping: &BTreeSet<u32>) -> Vec<NodeState> {
    let online: BTreeSet<u32> = host.topology.cpus.iter().copied().collect();
    let single = [NodeInput {
        id: 0,
        cpus: host.topology.cpus.clone(),
        mem_total_bytes: None,
        mem_free_bytes: None,
    }];
    let nodes: &[NodeInput] = if host.topology.nodes.is_empty() {
        &single
    } else {
        &host.topology.nodes
    };
    nodes
        .iter()
        .map(|n| {
            let mine: BTreeSet<u32> = n
                .cpus
                .iter()
                .copied()
                .filter(|c| online.contains(c))
                .collect();
            let usable: BTreeSet<u32> = mine.difference(housekeeping).copied().collect();
            let mut cores: Vec<Vec<u32>> = host
                .topology
                .cores
                .iter()
                .filter(|c| !c.is_empty() && c.iter().all(|x| usable.contains(x)))
                .cloned()
                .collect();
            // CPUs the sibling lists do not cover are cores of their own.
            let covered: BTreeSet<u32> = cores.iter().flatten().copied().collect();
            cores.extend(usable.difference(&covered).map(|c| vec![*c]));
            cores.sort();
            let host_load = host_work_on(host, &usable);
            NodeState {
                id: n.id,
                free: usable,
                cores,
                housekeeping: mine.intersection(housekeeping).copied().collect(),
                load: host_load,
                host_load,
                spread: host_load * crate::overflow::HOST_WORK_SPREAD,
                mem_total: n.mem_total_bytes,
                mem_free: n.mem_free_bytes.map(i128::from),
            }
        })
        .collect()
}

/// The host's other work that lands on `cpus` (see [`NodeState::host_load`]).
pub fn host_work_on(host: &HostInput, cpus: &BTreeSet<u32>) -> f64 {
    let w = &host.host_work;
    let online = host.topology.cpus.len().max(1) as f64;
    cpus.iter().map(|c| w.on(*c)).sum::<f64>() + w.anywhere * cpus.len() as f64 / online
}
