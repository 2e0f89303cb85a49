//! Who took the vCPUs' CPU time, for the host rules: the collector's
//! culprits when attribution ran, else an estimate from run times (every
//! thread's schedstat), which the findings label as such.

use stealscope_model::host::attribution::CulpritShare;
use stealscope_model::MachineModel;
use stealscope_who::{Culprit, Kind};

use crate::finding::{evidence, round, Evidence};

/// A culprit as the rules see it: attributed or estimated.
#[derive(Debug, Clone)]
pub struct Who {
    pub culprit: Culprit,
    /// Share of all vCPU wait on the host.
    pub share: f64,
    /// Share of the wait of VMs other than its own (a VM's own vCPUs and
    /// VMM threads taking its time is not a neighbour's doing).
    pub neighbor_share: f64,
    pub victims: Vec<String>,
    /// CPUs it ran on average (estimates only).
    pub run_cpus: Option<f64>,
    /// Part of `share` that is displacement (see `displaced`).
    pub displaced_share: f64,
}

impl Who {
    /// "bash (pid 123)", "VM vmB's vCPUs", "kernel threads kworker".
    pub fn label(&self) -> String {
        let c = &self.culprit;
        match c.kind {
            Kind::Vcpu => format!("VM {}'s vCPUs", c.name),
            Kind::Vmm => format!("VM {}'s emulator threads", c.name),
            Kind::HostKthread => format!("kernel threads {}", c.name),
            Kind::HostProcess => match c.pid {
                Some(p) => format!("{} (pid {p})", c.name),
                None => c.name.clone(),
            },
            _ => c.name.clone(),
        }
    }

    pub fn json(&self) -> Evidence {
        let c = &self.culprit;
        evidence!({"kind": c.kind.as_str(), "name": c.name, "vm": c.vm, "pid": c.pid,
               "share": round(self.share, 3), "victims": self.victims,
               "run_cpus": self.run_cpus.map(|r| round(r, 2)),
               "displaced_share": round(self.displaced_share, 3)})
    }
}

/// "attributed" or "estimated from run times (attribution: none: why)".
pub fn basis(m: &MachineModel) -> String {
    let a = &m.host.attribution;
    if a.available() {
        format!("attributed by the scheduler-event collector ({})", a.route)
    } else {
        format!(
            "estimated from run times: no scheduler-event attribution ({})",
            a.reason
        )
    }
}

/// The same culprit, its VM aside (a per-vCPU row and a host row name a
/// culprit alike).
pub(super) fn same_culprit(a: &Culprit, b: &Culprit) -> bool {
    a.kind == b.kind && a.name == b.name && a.pid == b.pid
}

fn from_culprit(c: &CulpritShare, m: &MachineModel) -> Who {
    // Wait of VMs other than the culprit's own, from the per-vCPU rows.
    let all: f64 = m.host.culprits.iter().map(|c| c.charge.seconds).sum();
    let foreign: f64 = m
        .host
        .vms
        .iter()
        .filter(|v| c.charge.culprit.vm.as_deref() != Some(v.name.as_str()))
        .flat_map(|v| &v.vcpus)
        .flat_map(|v| &v.wait_by)
        .filter(|w| same_culprit(&w.culprit, &c.charge.culprit))
        .map(|w| w.seconds)
        .sum();
    Who {
        culprit: c.charge.culprit.clone(),
        share: c.charge.share,
        neighbor_share: if all > 0.0 { foreign / all } else { 0.0 },
        victims: c.victims.clone(),
        run_cpus: None,
        displaced_share: 0.0,
    }
}

/// Culprits most first. With attribution: the collector's. Without: each
/// runner's share of a vCPU's wait estimated as its run time over the run
/// time of everything else that ran (what a fully busy host gives), for
/// non-VM work and emulator threads only: between VMs the estimate cannot
/// tell a sibling vCPU from a neighbour.
pub fn culprits(m: &MachineModel) -> Vec<Who> {
    if m.host.attribution.available() {
        let mut who: Vec<Who> = m.host.culprits.iter().map(|c| from_culprit(c, m)).collect();
        displaced(m, &mut who);
        who.sort_by(|a, b| b.share.total_cmp(&a.share));
        return who;
    }
    let wall = m.wall_s.max(1e-9);
    let vcpus: Vec<(&str, f64, f64)> = m
        .host
        .vms
        .iter()
        .flat_map(|v| {
            v.vcpus.iter().map(|c| {
                (
                    v.name.as_str(),
                    c.util_pct / 100.0,
                    c.host_steal_pct / 100.0 * wall,
                )
            })
        })
        .collect();
    let total_wait: f64 = vcpus.iter().map(|v| v.2).sum();
    if total_wait <= 0.0 {
        return Vec::new();
    }
    let mut runners: Vec<Who> = m
        .host
        .host_work
        .top
        .iter()
        .map(|w| Who {
            culprit: w.culprit.clone(),
            share: 0.0,
            neighbor_share: 0.0,
            victims: Vec::new(),
            run_cpus: Some(w.run_cpus),
            displaced_share: 0.0,
        })
        .collect();
    for v in &m.host.vms {
        let run: f64 = v.others.iter().filter_map(|o| o.util_pct).sum::<f64>() / 100.0;
        if run >= stealscope_model::host::host_work::LIST_MIN_CPUS {
            runners.push(Who {
                culprit: Culprit {
                    vm: Some(v.name.clone()),
                    pid: Some(v.pid),
                    ..Culprit::new(Kind::Vmm, v.name.clone())
                },
                share: 0.0,
                neighbor_share: 0.0,
                victims: Vec::new(),
                run_cpus: Some(run),
                displaced_share: 0.0,
            });
        }
    }
    let vcpu_run: f64 = vcpus.iter().map(|v| v.1).sum();
    let total_run = vcpu_run
        + m.host.host_work.run_cpus
        + runners
            .iter()
            .filter(|r| r.culprit.kind == Kind::Vmm)
            .filter_map(|r| r.run_cpus)
            .sum::<f64>();
    for r in &mut runners {
        let run = r.run_cpus.unwrap_or(0.0);
        let mut by_vm: Vec<(String, f64)> = Vec::new();
        let (mut s, mut foreign) = (0.0, 0.0);
        for (vm, vrun, wait) in &vcpus {
            let others = (total_run - vrun).max(1e-9);
            let x = wait * (run / others).min(1.0);
            s += x;
            if r.culprit.vm.as_deref() != Some(*vm) {
                foreign += x;
            }
            match by_vm.iter_mut().find(|b| b.0 == *vm) {
                Some(b) => b.1 += x,
                None => by_vm.push((vm.to_string(), x)),
            }
        }
        by_vm.sort_by(|a, b| b.1.total_cmp(&a.1));
        r.share = s / total_wait;
        r.neighbor_share = foreign / total_wait;
        r.victims = by_vm
            .into_iter()
            .filter(|b| b.1 > 0.0)
            .map(|b| b.0)
            .collect();
    }
    runners.sort_by(|a, b| b.share.total_cmp(&a.share));
    runners
}

/// [`culprits`] and, after them, the listed host work that no wait was
/// charged to: a rule judging by the host's structure needs to see a loop
/// the balancer kept apart from the vCPUs in this run.
pub fn culprits_and_host_work(m: &MachineModel) -> Vec<Who> {
    let mut who = culprits(m);
    for t in &m.host.host_work.top {
        if who.iter().any(|w| same_culprit(&w.culprit, &t.culprit)) {
            continue;
        }
        who.push(Who {
            culprit: t.culprit.clone(),
            share: 0.0,
            neighbor_share: 0.0,
            victims: Vec::new(),
            run_cpus: Some(t.run_cpus),
            displaced_share: 0.0,
        });
    }
    who
}

/// A VM's vCPUs waiting for each other while all VMs' runnable vCPUs fit on
/// the CPUs is displacement: other host work held CPUs the vCPUs would have
/// used, and the balancer stacked them (per-VM groups make it do so: a
/// host loop in one autogroup keeps a CPU while a VM's two vCPUs share the
/// other). The collector sees only the sibling on the CPU; that wait is
/// charged to the host work in proportion to its run time, and counts as
/// a neighbour's doing.
fn displaced(m: &MachineModel, who: &mut Vec<Who>) {
    use super::host_steal::{OTHER_WORK_CPUS, VCPUS_FIT_FACTOR};
    let cpus = m.interval.cpus.len() as f64;
    let runnable = super::host_steal::vcpu_demand(m);
    let work = &m.host.host_work.top;
    let work_run: f64 = work.iter().map(|w| w.run_cpus).sum();
    let all: f64 = m.host.culprits.iter().map(|c| c.charge.seconds).sum();
    if runnable > cpus * VCPUS_FIT_FACTOR || work_run < OTHER_WORK_CPUS || all <= 0.0 {
        return;
    }
    for vm in &m.host.vms {
        let own: f64 = vm
            .vcpus
            .iter()
            .flat_map(|v| &v.wait_by)
            .filter(|w| w.culprit.kind == Kind::Vcpu && w.culprit.name == vm.name)
            .map(|w| w.seconds)
            .sum();
        if own <= 0.0 {
            continue;
        }
        if let Some(w) = who
            .iter_mut()
            .find(|w| w.culprit.kind == Kind::Vcpu && w.culprit.name == vm.name)
        {
            w.share = (w.share - own / all).max(0.0);
        }
        for h in work {
            let x = own / all * h.run_cpus / work_run;
            let i = match who
                .iter()
                .position(|w| same_culprit(&w.culprit, &h.culprit))
            {
                Some(i) => i,
                None => {
                    who.push(Who {
                        culprit: h.culprit.clone(),
                        share: 0.0,
                        neighbor_share: 0.0,
                        victims: Vec::new(),
                        run_cpus: Some(h.run_cpus),
                        displaced_share: 0.0,
                    });
                    who.len() - 1
                }
            };
            let w = &mut who[i];
            w.share += x;
            w.neighbor_share += x;
            w.displaced_share += x;
            if !w.victims.contains(&vm.name) {
                w.victims.push(vm.name.clone());
            }
        }
    }
}

/// "bash (pid 123) 48%, VM vmB's vCPUs 30%" for the top few.
pub fn summary(who: &[Who], n: usize) -> String {
    who.iter()
        .filter(|w| w.share >= 0.01)
        .take(n)
        .map(|w| format!("{} {:.0}%", w.label(), 100.0 * w.share))
        .collect::<Vec<_>>()
        .join(", ")
}
