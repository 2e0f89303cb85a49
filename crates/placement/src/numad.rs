//! numad's placement rule, the reference the planner is compared with (the
//! planner benchmark) and a policy of `sim`. Reduced from numad.c
//! pick_numa_nodes to node choice: each process, biggest (CPU demand x
//! memory) first, goes to the node with the largest free-CPU x free-memory
//! "magnitude", which then shrinks by what the process takes. No dedicated
//! cores, fairness or actions.

use crate::input::HostInput;

/// The node numad would bind each VM to, in `h.vms` order (None for a host
/// without nodes).
pub fn choose_nodes(h: &HostInput) -> Vec<Option<u32>> {
    let nodes = &h.topology.nodes;
    if nodes.is_empty() {
        return vec![None; h.vms.len()];
    }
    let mut cpu_free: Vec<f64> = nodes.iter().map(|x| x.cpus.len() as f64).collect();
    let mut mem_free: Vec<f64> = nodes
        .iter()
        .map(|x| x.mem_free_bytes.unwrap_or(0) as f64)
        .collect();
    let mut order: Vec<(f64, usize)> = h
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| (v.demand() * v.mem_bytes().unwrap_or(0) as f64, i))
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = vec![None; h.vms.len()];
    for (_, i) in order {
        let v = &h.vms[i];
        let best = (0..nodes.len())
            .max_by(|&a, &b| {
                (cpu_free[a].max(0.0) * mem_free[a].max(0.0))
                    .total_cmp(&(cpu_free[b].max(0.0) * mem_free[b].max(0.0)))
                    .then(b.cmp(&a))
            })
            .expect("nodes is not empty");
        cpu_free[best] -= v.demand();
        mem_free[best] -= v.mem_bytes().unwrap_or(0) as f64;
        out[i] = Some(nodes[best].id);
    }
    out
}

/// Demand per CPU of each node (in `h.topology.nodes` order) after numad's choice.
pub fn node_load_per_cpu(h: &HostInput) -> Vec<f64> {
    let choice = choose_nodes(h);
    h.topology
        .nodes
        .iter()
        .map(|n| {
            let load: f64 = h
                .vms
                .iter()
                .zip(&choice)
                .filter(|(_, c)| **c == Some(n.id))
                .map(|(v, _)| v.demand())
                .sum();
            load / n.cpus.len().max(1) as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{host, vm};

    #[test]
    fn biggest_first_to_the_roomiest_node() {
        let mut h = host(2, 4, false, 16 << 30, 1.0);
        let all = h.topology.cpus.clone();
        h.vms.push(vm(1, 4, 1.0, 8 << 30, 0, &all));
        h.vms.push(vm(2, 2, 1.0, 1 << 30, 0, &all));
        h.vms.push(vm(3, 2, 1.0, 1 << 30, 0, &all));
        let c = choose_nodes(&h);
        // The big VM takes node 0 (tie: lowest id); the next goes to the
        // emptier node 1; the third then finds node 1 (2 CPUs, 15 GiB free)
        // roomier than node 0 (0 CPUs free).
        assert_eq!(c, vec![Some(0), Some(1), Some(1)]);
        let load = node_load_per_cpu(&h);
        assert_eq!(load, vec![1.0, 1.0]);
    }
}
