//! The NUMA cost model: remote memory slows a vCPU down; automatic NUMA
//! balancing scans a misplaced VM every scan period (hinting faults cost
//! the VM CPU time), moves its threads toward the node it prefers (where
//! most of its memory is, as its faults see it) and its pages toward the
//! nodes its threads run on, at a rate limit. A well-placed VM's scans back
//! off to once a minute. Memory moves asked for by a policy run at the same
//! rate and cost CPU on the VM's CPUs. The constants are assumptions
//! (scenarios/README.md), not measurements.

use crate::host::Host;
use crate::scenario::NumaSpec;
use stealscope_placement::synthetic::Rng;

/// The kernel's numa_balancing_scan_period_max_ms.
const SCAN_PERIOD_MAX_S: f64 = 60.0;
/// A VM with less than this share of its memory away from its threads is well placed.
const WELL_PLACED: f64 = 0.05;

/// Per-VM CPU time lost to hinting faults and page moves this tick
/// (CPU-seconds per second), indexed like `Host::vms`.
#[derive(Debug, Default, Clone)]
pub struct Overhead(pub Vec<f64>);

/// Share of a VM's threads' run time, per node.
fn cpu_spread(h: &Host, vm: usize) -> Vec<f64> {
    let mut v = vec![0.0; h.nodes.len()];
    let tasks = &h.vms[vm].tasks;
    for &t in tasks {
        v[h.node_of[h.tasks[t].cpu]] += 1.0 / tasks.len().max(1) as f64;
    }
    v
}

/// Share of a VM's memory that its threads reach remotely.
pub fn misplaced(h: &Host, vm: usize) -> f64 {
    let spread = cpu_spread(h, vm);
    spread
        .iter()
        .enumerate()
        .map(|(n, s)| s * (1.0 - h.vms[vm].mem_share(n)))
        .sum()
}

/// Moves up to `gib` of `vm`'s memory from other nodes to `to`; returns what moved.
fn move_mem(h: &mut Host, vm: usize, to: usize, gib: f64) -> f64 {
    let v = &mut h.vms[vm];
    let away: f64 = v
        .mem
        .iter()
        .enumerate()
        .filter(|(n, _)| *n != to)
        .map(|(_, m)| m)
        .sum();
    let moved = gib.min(away);
    if moved <= 0.0 {
        return 0.0;
    }
    for n in 0..v.mem.len() {
        if n != to {
            v.mem[n] -= v.mem[n] / away * moved;
        }
    }
    v.mem[to] += moved;
    moved
}

/// Advances memory moves and NUMA balancing by one tick at `t`. Sets the
/// kernel's CPU use per CPU and each VM's overhead; returns the threads
/// NUMA balancing moved and whether anything is still in motion.
pub fn tick(
    h: &mut Host,
    spec: &NumaSpec,
    t: f64,
    dt: f64,
    rng: &mut Rng,
    over: &mut Overhead,
) -> (usize, bool) {
    for k in h.kernel.iter_mut() {
        *k = 0.0;
    }
    over.0.clear();
    over.0.resize(h.vms.len(), 0.0);
    let rate = spec.migrate_mib_per_s.0 / 1024.0;
    let cost_per_gib = spec.migrate_ms_per_gib.0 / 1000.0;
    let mut busy = false;
    let mut moved_threads = 0;
    for vm in 0..h.vms.len() {
        if !h.vms[vm].alive {
            continue;
        }
        // A policy's memory move: CPU on the VM's CPUs (move_pages runs for it).
        if let Some((to, left)) = h.vms[vm].moving {
            let moved = move_mem(h, vm, to, (rate * dt).min(left));
            let left = left - moved;
            h.vms[vm].moving = (left > 1e-9 && moved > 0.0).then_some((to, left));
            let cpus: Vec<usize> = h.vms[vm].tasks.iter().map(|&i| h.tasks[i].cpu).collect();
            for c in &cpus {
                h.kernel[*c] =
                    (h.kernel[*c] + moved * cost_per_gib / dt / cpus.len() as f64).min(0.9);
            }
            busy = true;
        }
        if !(h.numa_balancing && h.nodes.len() > 1) || h.vms[vm].next_scan_s > t + 1e-9 {
            continue;
        }
        let v = &h.vms[vm];
        let mis = misplaced(h, vm);
        // Hinting faults of this scan, spread over the scan period.
        let scan_gib = (spec.scan_mib.0 / 1024.0).min(v.mem_total());
        let mut cpu_s = scan_gib * spec.fault_ms_per_gib.0 / 1000.0;
        // Pages follow the threads, within the rate limit.
        let spread = cpu_spread(h, vm);
        let budget = rate * h.vms[vm].scan_period_s * mis.min(1.0);
        for (n, s) in spread.iter().enumerate() {
            if *s > 0.0 {
                let m = move_mem(h, vm, n, budget * s * (1.0 - h.vms[vm].mem_share(n)));
                cpu_s += m * cost_per_gib;
            }
        }
        // Threads go to the node they prefer: one their faults point at,
        // in proportion to where the memory is.
        let tasks = h.vms[vm].tasks.clone();
        for i in tasks {
            let u = rng.unit();
            let mut acc = 0.0;
            let mut pref = h.vms[vm].home_node();
            for n in 0..h.nodes.len() {
                acc += h.vms[vm].mem_share(n);
                if u < acc {
                    pref = n;
                    break;
                }
            }
            let t = &h.tasks[i];
            if h.node_of[t.cpu] == pref {
                continue;
            }
            let dst = h.nodes[pref]
                .iter()
                .copied()
                .filter(|&c| t.allowed.contains(c))
                .min_by_key(|&c| h.tasks.iter().filter(|x| x.alive && x.cpu == c).count());
            if let Some(d) = dst {
                h.tasks[i].cpu = d;
                moved_threads += 1;
            }
        }
        let v = &mut h.vms[vm];
        v.scan_period_s = if mis < WELL_PLACED {
            (v.scan_period_s * 2.0).min(SCAN_PERIOD_MAX_S)
        } else {
            spec.scan_period_s.0
        };
        over.0[vm] += cpu_s / v.scan_period_s;
        v.next_scan_s = t + v.scan_period_s;
    }
    (moved_threads, busy)
}

/// When the policy memory moves under way will be done (infinity: none).
pub fn moves_done(h: &Host, spec: &NumaSpec, from: f64) -> f64 {
    let rate = spec.migrate_mib_per_s.0 / 1024.0;
    h.vms
        .iter()
        .filter(|v| v.alive)
        .filter_map(|v| v.moving.map(|(_, left)| from + left / rate))
        .fold(f64::INFINITY, f64::min)
}

/// Advances policy memory moves by `secs` (ticks summed at once: their CPU
/// cost was the same in each).
pub fn advance_moves(h: &mut Host, secs: f64, spec: &NumaSpec) {
    let rate = spec.migrate_mib_per_s.0 / 1024.0;
    for vm in 0..h.vms.len() {
        if let (true, Some((to, left))) = (h.vms[vm].alive, h.vms[vm].moving) {
            let moved = move_mem(h, vm, to, (rate * secs).min(left));
            let left = left - moved;
            h.vms[vm].moving = (left > 1e-9 && moved > 0.0).then_some((to, left));
        }
    }
}

/// Useful work per unit of run time of thread `i`: remote memory is slower,
/// and the VM's own fault and page-move time is not guest work.
pub fn speed(h: &Host, spec: &NumaSpec, over: &Overhead, i: usize) -> f64 {
    let t = &h.tasks[i];
    let Some(vm) = t.vm else { return 1.0 };
    let v = &h.vms[vm];
    let remote = 1.0 - v.mem_share(h.node_of[t.cpu]);
    let lost = over.0.get(vm).copied().unwrap_or(0.0) / v.vcpus.max(1) as f64;
    ((1.0 - spec.remote_penalty.0 * remote) * (1.0 - lost.min(1.0))).max(0.0)
}

/// Starts NUMA balancing scans for a VM (at a random phase).
pub fn start_scans(h: &mut Host, vm: usize, spec: &NumaSpec, now: f64, rng: &mut Rng) {
    let v = &mut h.vms[vm];
    v.scan_period_s = spec.scan_period_s.0;
    v.next_scan_s = now + rng.unit() * spec.scan_period_s.0;
}
