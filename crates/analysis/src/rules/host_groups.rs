//! Per-VM scheduling groups: a VM in a cpu cgroup of its own, or (in the
//! root cpu cgroup with autogroups on) in the autogroup of its session,
//! which every `qemu -daemonize` starts. CFS shares CPU between groups by
//! weight, not between threads, so a VM's vCPUs get its group's share
//! however many there are.

use super::fair_share::{thread_demand, Fair};
use super::host::{HOST_STEAL_WARN_PCT, WEIGHT_RATIO_UNFAIR};
use crate::finding::{evidence, round, Evidence, Finding, Severity};
use crate::hysteresis::{holding, SUBJECT};
use stealscope_model::host::observation::VmObs;
use stealscope_model::MachineModel;

/// One VM's scheduling group: (label, relative weight, is an autogroup).
pub(super) fn group_of(vm: &VmObs, autogroups_on: bool) -> Option<(String, f64, bool)> {
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

/// A VM loses when its vCPUs' mean steal exceeds their fair steal by this
/// many percentage points. Back-to-back 5 s runs of a steady host measured
/// VMs within 2.5 pp of fair (issue 28: 44.2 % against 44.6 %, 46.0 %
/// against 43.5 %); twice that is a loss, not noise.
pub const STEAL_MARGIN_PP: f64 = 5.0;
/// Clearing threshold of [`STEAL_MARGIN_PP`] where the rule runs repeatedly.
pub const STEAL_CLEAR_PP: f64 = 3.0;

/// Each VM with vCPUs: (name, vCPUs, measured steal %, fair steal %).
fn measured(m: &MachineModel, fair: &Fair) -> Vec<(String, usize, f64, f64)> {
    m.host
        .vms
        .iter()
        .filter(|v| !v.vcpus.is_empty())
        .map(|v| {
            let n = v.vcpus.len() as f64;
            let fair_pct = v
                .vcpus
                .iter()
                .map(|c| fair.wait_pct(thread_demand(c.util_pct, c.host_steal_pct)))
                .sum::<f64>()
                / n;
            (v.name.clone(), v.vcpus.len(), v.steal_pct, fair_pct)
        })
        .collect()
}

/// The per-VM groups, when there are at least two: (vm, group, vCPUs,
/// weight, is an autogroup).
fn vm_groups(m: &MachineModel) -> Vec<(&str, String, usize, f64, bool)> {
    let h = &m.t1.host;
    let autogroups_on = h.autogroups_on();
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
    groups
}

fn remedy(autogroups: bool) -> &'static str {
    if autogroups {
        "Every `qemu -daemonize` (setsid) starts a session, and with kernel.sched_autogroup_enabled=1 each session \
         is a CFS group with one VM's share however many vCPUs it has. Weigh each VM's autogroup by its vCPUs: \
         `stealscope place apply` with `fairness = \"weights\"` in place.toml sets each autogroup's nice to the one \
         whose weight is nearest vCPUs x 1024 (2 vCPUs: `echo -3 > /proc/<qemu pid>/autogroup`), journaled and \
         undoable; or with `fairness = \"shared-group\"` it puts the shared VMs into one cpu cgroup, where the \
         scheduler weighs their vCPU threads one by one. Alternatively start the VMs from one session or turn \
         autogroups off (`sysctl -w kernel.sched_autogroup_enabled=0`, which affects every session on the host)."
    } else {
        "Each VM's group gets the same share however many vCPUs it has, so under contention a 4-vCPU VM's \
         vCPUs each get half of what a 2-vCPU VM's get. Weights proportional to vCPUs help but are split per \
         CPU by where threads run, so measured fairness still varies; the measured-fair layout is one shared \
         group for shared VMs (`stealscope place apply`), or pinning that gives every CPU a balanced set of vCPUs."
    }
}

/// Fires when per-VM groups are weighted unevenly per vCPU *and* a VM's
/// measured steal exceeds its fair steal by [`STEAL_MARGIN_PP`]: the
/// finding names the VMs that lose. Silent on a host without steal (an
/// interval of zeros has nothing to judge).
pub fn cgroup_weight_unfair(m: &MachineModel, out: &mut Vec<Finding>) {
    let groups = vm_groups(m);
    if groups.len() < 2 || super::host_steal::mean_steal(m).unwrap_or(0.0) < HOST_STEAL_WARN_PCT {
        return;
    }
    let per_vcpu: Vec<f64> = groups.iter().map(|g| g.3 / g.2 as f64).collect();
    let (lo, hi) = per_vcpu
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    if lo <= 0.0 || hi / lo < WEIGHT_RATIO_UNFAIR {
        return;
    }
    let fair = Fair::of(m);
    let rows = measured(m, &fair);
    let losers: Vec<&(String, usize, f64, f64)> = rows
        .iter()
        .filter(|r| r.2 >= r.3 + STEAL_CLEAR_PP)
        .collect();
    let Some(worst) = losers
        .iter()
        .max_by(|a, b| (a.2 - a.3).total_cmp(&(b.2 - b.3)))
    else {
        return;
    };
    let fires = worst.2 >= worst.3 + STEAL_MARGIN_PP;
    let autogroups = groups.iter().any(|g| g.4);
    // Figures as JSON prints them (48.0, not 48).
    let figure = |v: f64| crate::finding::round(v, 1).to_string();
    let said = rows
        .iter()
        .map(|r| format!("{} {}% (fair {}%)", r.0, figure(r.2), figure(r.3)))
        .collect::<Vec<_>>()
        .join(", ");
    let names: Vec<String> = losers.iter().map(|r| r.0.clone()).collect();
    let why = if autogroups {
        format!("each VM is its own scheduling group (autogroups), so CPU is shared per VM, not per vCPU: weight per vCPU differs {:.1}x", hi / lo)
    } else {
        format!("per-VM cpu cgroup weights are not proportional to vCPUs (weight per vCPU differs {:.1}x)", hi / lo)
    };
    let title = format!(
        "VM {} gets less than its fair CPU: its vCPUs waited {}% against a fair {}%; {why}; vCPU steal {said}",
        worst.0,
        figure(worst.2),
        figure(worst.3)
    );
    let f = Finding::new("host.cgroup-weight-unfair", Severity::Warning, title)
        .evidence(SUBJECT, groups.iter().map(|g| g.1.as_str()).collect::<Vec<_>>().join(", "))
        .evidence("losers", names)
        .evidence("groups", groups.iter().map(|g| evidence!({"vm": g.0, "group": g.1, "autogroup": g.4, "vcpus": g.2, "relative_weight": round(g.3, 3)})).collect::<Evidence>())
        .evidence("ratio", round(hi / lo, 2))
        .evidence("measured", rows.iter().map(|r| evidence!({"vm": r.0, "vcpus": r.1, "steal_pct": round(r.2, 1), "fair_steal_pct": round(r.3, 1)})).collect::<Evidence>())
        .evidence("fair_basis", format!("equal CPU per runnable thread: {:.2} runnable threads' demand on {:.0} CPUs, at most {:.2} CPU each", fair.demand, fair.cpus, fair.level))
        .evidence("threshold_margin_pp", STEAL_MARGIN_PP)
        .files(&["/proc/<pid>/cgroup", "/proc/<pid>/autogroup", "/proc/sys/kernel/sched_autogroup_enabled", "cpu.shares (v1) / cpu.weight (v2)", "/proc/<pid>/task/<tid>/schedstat"])
        .remedy(remedy(autogroups))
        .reference("Documentation/admin-guide/cgroup-v2.rst (cpu.weight)")
        .reference("kernel/sched/autogroup.c (task_wants_autogroup)")
        .case("who-stole-my-cpu-talk.md");
    out.push(if fires { f } else { holding(f) });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hysteresis::HYSTERESIS;
    use crate::testing::host::busy;
    use crate::testing::{ticks, TestMachine};

    /// A 4-vCPU VM and a 1-vCPU VM, all vCPUs busy on 2 busy CPUs over 5 s:
    /// 10 CPU-s for 5 threads, 2 s each when shared fairly (60 % steal).
    /// `big_run` is what each of big's vCPUs ran; small took the rest.
    fn two_vms(big_run: f64) -> TestMachine {
        let small = 10.0 - 4.0 * big_run;
        TestMachine::guest()
            .cpus(&[ticks(500, 0, 0); 2])
            .vm(100, "big", &[busy(big_run, 5.0 - big_run); 4])
            .vm(200, "small", &[busy(small, 5.0 - small)])
    }

    /// Equal group weights: big's group gets half, 1.25 s per vCPU (75 %
    /// steal against a fair 60 %), small gets a whole CPU.
    fn unequal() -> TestMachine {
        two_vms(1.25)
    }

    #[test]
    fn equal_group_weights_for_unequal_vms_fire_and_name_the_loser() {
        let m = unequal()
            .cpu_group(100, "/machine/big", 100)
            .cpu_group(200, "/machine/small", 100);
        let f = m.run(cgroup_weight_unfair);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "host.cgroup-weight-unfair");
        assert!(
            f[0].title.starts_with(
                "VM big gets less than its fair CPU: its vCPUs waited 75.0% against a fair 60.0%"
            ),
            "{}",
            f[0].title
        );
        assert!(f[0].title.contains("cgroup weights"), "{}", f[0].title);
        assert_eq!(f[0].evidence["losers"].to_string(), r#"["big"]"#);
        assert!(!f[0].evidence.contains_key(HYSTERESIS));
    }

    #[test]
    fn weights_in_proportion_to_vcpus_are_silent() {
        let m = unequal()
            .cpu_group(100, "/machine/big", 400)
            .cpu_group(200, "/machine/small", 100);
        assert!(m.run(cgroup_weight_unfair).is_empty());
    }

    #[test]
    fn one_autogroup_per_vm_fires() {
        let m = unequal().autogroup(100, 7, true).autogroup(200, 8, true);
        let f = m.run(cgroup_weight_unfair);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].title.contains("autogroups"), "{}", f[0].title);
    }

    #[test]
    fn autogroups_turned_off_are_silent() {
        let m = unequal().autogroup(100, 7, false).autogroup(200, 8, false);
        assert!(m.run(cgroup_weight_unfair).is_empty());
    }

    fn autogrouped(big_run: f64) -> TestMachine {
        two_vms(big_run)
            .autogroup(100, 7, true)
            .autogroup(200, 8, true)
    }

    #[test]
    fn steal_within_the_margin_of_fair_is_silent() {
        // 2.0 s each is exactly fair; 1.9 s is 62 % against 60 %.
        assert!(autogrouped(2.0).run(cgroup_weight_unfair).is_empty());
        assert!(autogrouped(1.9).run(cgroup_weight_unfair).is_empty());
    }

    #[test]
    fn between_clearing_and_firing_margins_the_finding_holds() {
        // 1.8 s: 64 % against 60 %, 4 pp over.
        let f = autogrouped(1.8).run(cgroup_weight_unfair);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].evidence.contains_key(HYSTERESIS));
    }

    #[test]
    fn an_interval_of_zeros_is_silent() {
        let m = TestMachine::guest()
            .cpus(&[ticks(0, 0, 0); 2])
            .vm(100, "big", &[busy(0.0, 0.0); 4])
            .vm(200, "small", &[busy(0.0, 0.0)])
            .autogroup(100, 7, true)
            .autogroup(200, 8, true);
        assert!(m.run(cgroup_weight_unfair).is_empty());
    }
}
