//! Who took the vCPUs' CPU time, for the host rules: the collector's
//! culprits when attribution ran, else an estimate from run times (every
//! thread's schedstat), which the findings label as such.

use stealscope_model::host::attribution::CulpritShare;
use stealscope_model::MachineModel;

use crate::finding::{evidence, round, Evidence};

/// A culprit as the rules see it: attributed or estimated.
#[derive(Debug, Clone)]
pub struct Who {
    pub kind: &'static str,
    pub name: String,
    pub vm: Option<String>,
    pub pid: Option<u32>,
    /// Share of all vCPU wait on the host.
    pub share: f64,
    /// Share of the wait of VMs other than its own (a VM's own vCPUs and
    /// VMM threads taking its time is not a neighbour's doing).
    pub neighbor_share: f64,
    pub victims: Vec<String>,
    /// CPUs it ran on average (estimates only).
    pub run_cpus: Option<f64>,
}

impl Who {
    /// "bash (pid 123)", "VM vmB's vCPUs", "kernel threads kworker".
    pub fn label(&self) -> String {
        match self.kind {
            "vcpu" => format!("VM {}'s vCPUs", self.name),
            "vmm" => format!("VM {}'s emulator threads", self.name),
            "host-kthread" => format!("kernel threads {}", self.name),
            "host-process" => match self.pid {
                Some(p) => format!("{} (pid {p})", self.name),
                None => self.name.clone(),
            },
            _ => self.name.clone(),
        }
    }

    pub fn json(&self) -> Evidence {
        evidence!({"kind": self.kind, "name": self.name, "vm": self.vm, "pid": self.pid,
               "share": round(self.share, 3), "victims": self.victims,
               "run_cpus": self.run_cpus.map(|r| round(r, 2))})
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

fn from_culprit(c: &CulpritShare, m: &MachineModel) -> Who {
    // Wait of VMs other than the culprit's own, from the per-vCPU rows.
    let all: f64 = m.host.culprits.iter().map(|c| c.seconds).sum();
    let foreign: f64 = m
        .host
        .vms
        .iter()
        .filter(|v| c.vm.as_deref() != Some(v.name.as_str()))
        .flat_map(|v| &v.vcpus)
        .flat_map(|v| &v.wait_by)
        .filter(|w| w.kind == c.kind && w.name == c.name && w.pid == c.pid)
        .map(|w| w.seconds)
        .sum();
    Who {
        kind: c.kind,
        name: c.name.clone(),
        vm: c.vm.clone(),
        pid: c.pid,
        share: c.share,
        neighbor_share: if all > 0.0 { foreign / all } else { 0.0 },
        victims: c.victims.clone(),
        run_cpus: None,
    }
}

/// Culprits most first. With attribution: the collector's. Without: each
/// runner's share of a vCPU's wait estimated as its run time over the run
/// time of everything else that ran (what a fully busy host gives), for
/// non-VM work and emulator threads only: between VMs the estimate cannot
/// tell a sibling vCPU from a neighbour.
pub fn culprits(m: &MachineModel) -> Vec<Who> {
    if m.host.attribution.available() {
        return m.host.culprits.iter().map(|c| from_culprit(c, m)).collect();
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
            kind: w.kind,
            name: w.name.clone(),
            vm: None,
            pid: w.pid,
            share: 0.0,
            neighbor_share: 0.0,
            victims: Vec::new(),
            run_cpus: Some(w.run_cpus),
        })
        .collect();
    for v in &m.host.vms {
        let run: f64 = v.others.iter().filter_map(|o| o.util_pct).sum::<f64>() / 100.0;
        if run >= stealscope_model::host::host_work::LIST_MIN_CPUS {
            runners.push(Who {
                kind: "vmm",
                name: v.name.clone(),
                vm: Some(v.name.clone()),
                pid: Some(v.pid),
                share: 0.0,
                neighbor_share: 0.0,
                victims: Vec::new(),
                run_cpus: Some(run),
            });
        }
    }
    let vcpu_run: f64 = vcpus.iter().map(|v| v.1).sum();
    let total_run = vcpu_run
        + m.host.host_work.run_cpus
        + runners
            .iter()
            .filter(|r| r.kind == "vmm")
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
            if r.vm.as_deref() != Some(*vm) {
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

/// "bash (pid 123) 48%, VM vmB's vCPUs 30%" for the top few.
pub fn summary(who: &[Who], n: usize) -> String {
    who.iter()
        .filter(|w| w.share >= 0.01)
        .take(n)
        .map(|w| format!("{} {:.0}%", w.label(), 100.0 * w.share))
        .collect::<Vec<_>>()
        .join(", ")
}
