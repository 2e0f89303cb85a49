//! Synthetic hosts for tests, the planner benchmark and `sim`: N nodes of
//! C CPUs with SMT pairs, VMs with given vCPU counts, demand and memory.
//! A small deterministic generator, so no RNG crate is needed.

use crate::action::Knob;
use crate::input::{CpuController, HostInput, NodeInput, ThreadInput, Topology, VmInput};
use std::collections::BTreeMap;

/// SplitMix64: deterministic, good enough to spread test inputs.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A host of `nodes` nodes × `cpus_per_node` CPUs (SMT pairs when `smt`),
/// `mem_per_node` bytes each with `free_share` of it free.
pub fn host(
    nodes: u32,
    cpus_per_node: u32,
    smt: bool,
    mem_per_node: u64,
    free_share: f64,
) -> HostInput {
    let total = nodes * cpus_per_node;
    let cpus: Vec<u32> = (0..total).collect();
    // Linux numbers siblings n and n + total/2 on x86; keep both in one node:
    // within each node, CPU k pairs with k + cpus_per_node/2.
    let mut cores = Vec::new();
    let mut node_inputs = Vec::new();
    for n in 0..nodes {
        let base = n * cpus_per_node;
        let node_cpus: Vec<u32> = (base..base + cpus_per_node).collect();
        if smt && cpus_per_node >= 2 {
            let half = cpus_per_node / 2;
            for k in 0..half {
                cores.push(vec![base + k, base + k + half]);
            }
            if cpus_per_node % 2 == 1 {
                cores.push(vec![base + cpus_per_node - 1]);
            }
        } else {
            cores.extend(node_cpus.iter().map(|c| vec![*c]));
        }
        node_inputs.push(NodeInput {
            id: n,
            cpus: node_cpus,
            mem_total_bytes: Some(mem_per_node),
            mem_free_bytes: Some((mem_per_node as f64 * free_share) as u64),
        });
    }
    HostInput {
        topology: Topology {
            cpus,
            cores,
            nodes: node_inputs,
        },
        swap_total_bytes: Some(0),
        swap_free_bytes: Some(0),
        numa_balancing: Some(0),
        numad_running: false,
        cpu_controller: Some(CpuController {
            v2: false,
            mount: "/sys/fs/cgroup/cpu".into(),
        }),
        vms: Vec::new(),
        shared_group_weight: None,
        host_work: Default::default(),
    }
}

/// A VM with `vcpus` threads at `util` each, `mem` bytes on `mem_node`,
/// currently allowed on `allowed`, in its own cpu group.
pub fn vm(pid: u32, vcpus: u32, util: f64, mem: u64, mem_node: u32, allowed: &[u32]) -> VmInput {
    let t = |tid| ThreadInput {
        tid,
        util: Some(util),
        cpus_allowed: allowed.to_vec(),
    };
    VmInput {
        pid,
        name: format!("vm{pid}"),
        knob: Knob::Direct,
        vcpus: (0..vcpus).map(|i| (i, t(pid * 1000 + 1 + i))).collect(),
        others: vec![ThreadInput {
            util: Some(0.01),
            ..t(pid * 1000)
        }],
        mem_by_node: Some(BTreeMap::from([(mem_node, mem)])),
        mem_policy: None,
        cpu_group: Some(crate::action::CgroupRef {
            v2: false,
            dir: format!("/sys/fs/cgroup/cpu/machine/vm{pid}"),
        }),
        cpu_weight: Some(1024),
        autogroup: None,
        wait: None,
    }
}

/// A fleet-like host: `vms` VMs of 1-8 vCPUs with random demand and memory
/// spread over the nodes, all allowed everywhere (a fresh, unplaced host).
pub fn random_host(seed: u64, nodes: u32, cpus_per_node: u32, vms: u32) -> HostInput {
    let mut rng = Rng(seed);
    let mem_per_node = 512u64 << 30;
    let mut h = host(nodes, cpus_per_node, true, mem_per_node, 0.9);
    let all = h.topology.cpus.clone();
    for i in 0..vms {
        let vcpus = 1 << rng.below(4); // 1, 2, 4, 8
        let util = rng.unit();
        let mem = (1 + rng.below(8)) << 30;
        let node = rng.below(nodes as u64) as u32;
        h.vms.push(vm(1000 + i, vcpus, util, mem, node, &all));
    }
    h
}
