//! Per-VM scheduling groups: a VM in a cpu cgroup of its own, or (in the
//! root cpu cgroup with autogroups on) in the autogroup of its session,
//! which every `qemu -daemonize` starts. CFS shares CPU between groups by
//! weight, not between threads, so a VM's vCPUs get its group's share
//! however many there are.

use super::host::WEIGHT_RATIO_UNFAIR;
use crate::finding::{evidence, round, Evidence, Finding, Severity};
use stealscope_model::host::observation::VmObs;
use stealscope_model::MachineModel;

/// One VM's scheduling group: (label, relative weight, is an autogroup).
fn group_of(vm: &VmObs, autogroups_on: bool) -> Option<(String, f64, bool)> {
    let cpu_path = vm
        .cgroups
        .iter()
        .find(|c| c.controllers.iter().any(|x| x == "cpu"))
        .or_else(|| vm.cgroups.iter().find(|c| c.hierarchy == 0))
        .map(|c| c.path.as_str());
    // In the root group, or in a group without the cpu controller (no
    // weight file: approximated as the root task group).
    let in_root = cpu_path.is_none_or(|p| p == "/") || vm.cpu_weight.is_none();
    // task_wants_autogroup: only tasks of the root task group use one.
    if in_root {
        if let (true, Some(ag)) = (autogroups_on, vm.autogroup) {
            return Some((format!("autogroup-{}", ag.id), ag.relative_weight(), true));
        }
        return None; // the root group: weighed thread by thread with the rest
    }
    vm.cpu_weight
        .as_ref()
        .map(|(file, w)| (file.clone(), w.relative(), false))
}

pub fn cgroup_weight_unfair(m: &MachineModel, out: &mut Vec<Finding>) {
    let h = &m.t1.host;
    let autogroups_on = h.autogroup_enabled == Some(true);
    // (vm, group, vCPUs, weight, autogroup)
    let mut groups: Vec<(&str, String, usize, f64, bool)> = Vec::new();
    for vm in &h.vms {
        if vm.vcpus.is_empty() {
            continue;
        }
        if let Some((g, w, ag)) = group_of(vm, autogroups_on) {
            if !groups.iter().any(|x| x.1 == g) {
                groups.push((vm.name.as_str(), g, vm.vcpus.len(), w, ag));
            }
        }
    }
    if groups.len() < 2 {
        return;
    }
    let per_vcpu: Vec<f64> = groups.iter().map(|g| g.3 / g.2 as f64).collect();
    let (lo, hi) = per_vcpu
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    if lo <= 0.0 || hi / lo < WEIGHT_RATIO_UNFAIR {
        return;
    }
    let autogroups = groups.iter().any(|g| g.4);
    // Fair share: every runnable vCPU gets the same CPU, what the host has
    // left after its other work; each vCPU's wait is then its demand times
    // the shortfall.
    let cpus = m.interval.cpus.len() as f64;
    let capacity = (cpus - m.host.host_work.run_cpus).max(0.0);
    let demand = super::host_steal::vcpu_demand(m);
    let short = if demand > capacity && demand > 0.0 {
        1.0 - capacity / demand
    } else {
        0.0
    };
    // (vm, vCPUs, measured steal %, fair steal %)
    let rows: Vec<(&str, usize, Evidence, Evidence)> = m
        .host
        .vms
        .iter()
        .filter(|v| !v.vcpus.is_empty())
        .map(|v| {
            let d: f64 = v
                .vcpus
                .iter()
                .map(|c| (c.util_pct + c.host_steal_pct) / 100.0)
                .sum::<f64>()
                / v.vcpus.len() as f64;
            (
                v.name.as_str(),
                v.vcpus.len(),
                round(v.steal_pct, 1),
                round(100.0 * d * short, 1),
            )
        })
        .collect();
    let measured: Evidence = rows
        .iter()
        .map(|r| evidence!({"vm": r.0, "vcpus": r.1, "steal_pct": r.2, "fair_steal_pct": r.3}))
        .collect();
    // Figures as JSON prints them (48.0, not 48).
    let said = rows
        .iter()
        .map(|r| format!("{} {}% (fair {}%)", r.0, r.2, r.3))
        .collect::<Vec<_>>()
        .join(", ");
    let (title, remedy) = if autogroups {
        (
            format!("Each VM is its own scheduling group (autogroups), so CPU is shared per VM, not per vCPU: weight per vCPU differs {:.1}x; vCPU steal {said}", hi / lo),
            "Every `qemu -daemonize` (setsid) starts a session, and with kernel.sched_autogroup_enabled=1 each session \
             is a CFS group with one VM's share however many vCPUs it has. Put the shared VMs into one cpu cgroup, \
             where the scheduler weighs their vCPU threads one by one: `stealscope place apply` creates that shared \
             group (measured spread 0-2 pp). Alternatively start the VMs from one session or turn autogroups off \
             (`sysctl -w kernel.sched_autogroup_enabled=0`, which affects every session on the host).".to_string(),
        )
    } else {
        (
            format!("Per-VM cpu cgroup weights are not proportional to vCPUs (weight per vCPU differs {:.1}x); vCPU steal {said}", hi / lo),
            "Each VM's group gets the same share however many vCPUs it has, so under contention a 4-vCPU VM's \
             vCPUs each get half of what a 2-vCPU VM's get. Weights proportional to vCPUs help but are split per \
             CPU by where threads run, so measured fairness still varies; the measured-fair layout is one shared \
             group for shared VMs (`stealscope place apply`), or pinning that gives every CPU a balanced set of vCPUs.".to_string(),
        )
    };
    out.push(
        Finding::new("host.cgroup-weight-unfair", Severity::Warning, title)
            .evidence("groups", groups.iter().map(|g| evidence!({"vm": g.0, "group": g.1, "autogroup": g.4, "vcpus": g.2, "relative_weight": round(g.3, 3)})).collect::<Evidence>())
            .evidence("ratio", round(hi / lo, 2))
            .evidence("measured", measured)
            .evidence("fair_basis", format!("equal CPU per runnable vCPU: {capacity:.1} CPUs left by other host work for {demand:.1} runnable vCPUs"))
            .files(&["/proc/<pid>/cgroup", "/proc/<pid>/autogroup", "/proc/sys/kernel/sched_autogroup_enabled", "cpu.shares (v1) / cpu.weight (v2)", "/proc/<pid>/task/<tid>/schedstat"])
            .remedy(remedy)
            .reference("Documentation/admin-guide/cgroup-v2.rst (cpu.weight)")
            .reference("kernel/sched/autogroup.c (task_wants_autogroup)")
            .case("who-stole-my-cpu-talk.md"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::host::busy;
    use crate::testing::TestMachine;

    /// A 4-vCPU VM and a 1-vCPU VM, all vCPUs busy on 2 CPUs.
    fn two_vms() -> TestMachine {
        TestMachine::guest()
            .vm(100, "big", &[busy(1.0, 4.0); 4])
            .vm(200, "small", &[busy(1.0, 1.0)])
    }

    #[test]
    fn equal_group_weights_for_unequal_vms_fire() {
        let m = two_vms()
            .cpu_group(100, "/machine/big", 100)
            .cpu_group(200, "/machine/small", 100);
        let f = m.run(cgroup_weight_unfair);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "host.cgroup-weight-unfair");
        assert!(f[0].title.contains("cgroup weights"), "{}", f[0].title);
    }

    #[test]
    fn weights_in_proportion_to_vcpus_are_silent() {
        let m = two_vms()
            .cpu_group(100, "/machine/big", 400)
            .cpu_group(200, "/machine/small", 100);
        assert!(m.run(cgroup_weight_unfair).is_empty());
    }

    #[test]
    fn one_autogroup_per_vm_fires() {
        let m = two_vms().autogroup(100, 7, true).autogroup(200, 8, true);
        let f = m.run(cgroup_weight_unfair);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].title.contains("autogroups"), "{}", f[0].title);
    }

    #[test]
    fn autogroups_turned_off_are_silent() {
        let m = two_vms().autogroup(100, 7, false).autogroup(200, 8, false);
        assert!(m.run(cgroup_weight_unfair).is_empty());
    }
}
