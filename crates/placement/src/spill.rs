//! Spilling: when a node's shared pool is overcommitted and another node's
//! has room, some of its VMs' vCPUs may also run on the other nodes' pools
//! while their memory stays home (none is moved while a VM spills). Why:
//! a node-bound VM waits behind its neighbours while CPUs idle on the
//! other node (the steal that binding adds over the kernel alone); a
//! spilled one loses only what its remote
//! accesses cost (`plan::REMOTE_PENALTY`) for the part of its time the
//! load balancer runs it there, which is far less than waiting. The VMs
//! with the most demand spill first (fewest placement changes for the load
//! that has to move). A spilled VM stays spilled until its node's pool is
//! back under `RELEASE` of its CPUs, so a pool near the edge does not flap.

use crate::input::HostInput;
use crate::nodes::NodeState;
use crate::target::{Class, VmPlan};
use stealscope_readers::cpulist::format as cpulist;

/// A node's pool spills above this demand per pool CPU...
const SPILL_ABOVE: f64 = 1.0;
/// ...and a VM spilled earlier comes home below this.
const RELEASE: f64 = 0.9;

/// Widens the vCPUs of the VMs that spill to every node's pool.
pub fn spill(plans: &mut [VmPlan], host: &HostInput, nodes: &[NodeState]) {
    if nodes.len() < 2 {
        return;
    }
    let all: Vec<u32> = {
        let mut v: Vec<u32> = nodes.iter().flat_map(|n| n.pool()).collect();
        v.sort_unstable();
        v
    };
    let node_of = host.topology.node_of_cpus();
    for node in nodes {
        let pressure = node.pressure_with(0.0);
        // Room elsewhere: CPUs of the other pools not used by their demand.
        let room: f64 = nodes
            .iter()
            .filter(|o| o.id != node.id)
            .map(|o| (o.free.len() as f64 - o.load).max(0.0))
            .sum();
        if pressure <= RELEASE || room < 0.5 {
            continue;
        }
        let excess = (node.load - node.free.len() as f64 * SPILL_ABOVE)
            .max(0.0)
            .min(room);
        let mut members: Vec<usize> = (0..plans.len())
            .filter(|&i| plans[i].class == Class::Shared && plans[i].node == Some(node.id))
            .collect();
        // Spilled now first (they stay), then the most demand first.
        let spilled: Vec<bool> = plans
            .iter()
            .map(|p| {
                host.vms
                    .iter()
                    .find(|v| v.pid == p.pid)
                    .is_some_and(|v| v.cpus_node(&node_of).is_none() && spans(v, &node_of))
            })
            .collect();
        let spilled_now = |i: usize| spilled[i];
        members.sort_by(|&a, &b| {
            spilled_now(b)
                .cmp(&spilled_now(a))
                .then(plans[b].demand.total_cmp(&plans[a].demand))
                .then(plans[a].pid.cmp(&plans[b].pid))
        });
        let mut moved = 0.0;
        for i in members {
            let keep = spilled_now(i) && pressure > RELEASE;
            let need = pressure > SPILL_ABOVE && moved < excess;
            if !(keep || need) {
                continue;
            }
            moved += plans[i].demand;
            let why = format!(
                "node {}'s pool is overcommitted ({:.2} CPUs of demand per pool CPU) while other nodes have {:.1} CPUs to spare: its vCPUs may also run on {} (the load balancer moves what it must); node {} stays its home, its memory is not moved while it spills",
                node.id,
                pressure,
                room,
                cpulist(&all),
                node.id
            );
            for v in &mut plans[i].vcpus {
                v.2 = all.clone();
            }
            plans[i].reasons.push(why.clone());
            plans[i].spill = Some(why);
        }
    }
}

/// Whether the VM's vCPU masks reach CPUs of more than one node.
fn spans(v: &crate::input::VmInput, node_of: &[Option<u32>]) -> bool {
    let mut seen = None;
    for (_, t) in &v.vcpus {
        for c in &t.cpus_allowed {
            let n = node_of.get(*c as usize).copied().flatten();
            if seen.is_some() && n != seen {
                return true;
            }
            seen = n;
        }
    }
    false
}
