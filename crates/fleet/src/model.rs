//! The fleet as read from Prometheus: hosts with their CPUs, NUMA free
//! memory and VMs; each VM's demand history and mean wait over the window;
//! and what could not be seen.

use serde::Serialize;

/// A host as Prometheus names its target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct HostKey {
    pub instance: String,
    pub job: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeMem {
    pub node: u32,
    pub free_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Vm {
    pub name: String,
    /// Empty when the VMM's command line gave none.
    pub uuid: String,
    pub vcpus: u32,
    pub memory_bytes: Option<u64>,
    /// CPUs its vCPUs want, one value per step: [`crate::want`]'s estimate
    /// from what they ran and how long they were runnable.
    #[serde(skip)]
    pub demand: Vec<f64>,
    /// Mean run-queue wait of all its vCPUs over the window (CPU-s/s).
    pub wait: f64,
    /// Mean CPU time its vCPUs ran over the window (CPU-s/s): what a
    /// utilisation threshold sees.
    #[serde(skip)]
    pub run: f64,
}

impl Vm {
    pub fn mean_demand(&self) -> f64 {
        if self.demand.is_empty() {
            0.0
        } else {
            self.demand.iter().sum::<f64>() / self.demand.len() as f64
        }
    }
    /// Steal, percent of its vCPU time.
    pub fn steal_pct(&self) -> f64 {
        (100.0 * self.wait / self.vcpus.max(1) as f64).clamp(0.0, 100.0)
    }
}

/// A VM that took others' CPU time (host.noisy-neighbor's culprit).
#[derive(Debug, Clone, Serialize)]
pub struct Culprit {
    pub vm: String,
    /// Its share of all vCPU wait of the other VMs on the host.
    pub share: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub key: HostKey,
    /// Its hostname (stealscope_host_info), else the instance.
    pub name: String,
    pub cpus: u32,
    pub nodes: Vec<NodeMem>,
    pub vms: Vec<Vm>,
    /// Busy steal over the window (CPU-s/s): at each step of the history,
    /// the vCPU wait that the step's idle CPU time could not absorb.
    pub busy: f64,
    pub culprits: Vec<Culprit>,
}

impl Host {
    pub fn vcpus(&self) -> u32 {
        self.vms.iter().map(|v| v.vcpus).sum()
    }
    pub fn wait(&self) -> f64 {
        self.vms.iter().map(|v| v.wait).sum()
    }
    /// Wait idle CPUs could not have absorbed, CPU-s/s, split step by
    /// step (a host idle at night does not absorb its daytime wait).
    pub fn busy_steal(&self) -> f64 {
        self.busy.clamp(0.0, self.wait())
    }
    pub fn idle_steal(&self) -> f64 {
        self.wait() - self.busy_steal()
    }
    /// Busy steal per vCPU (the StealscopeHostBusySteal ratio).
    pub fn busy_per_vcpu(&self) -> f64 {
        self.busy_steal() / self.vcpus().max(1) as f64
    }
    pub fn idle_per_vcpu(&self) -> f64 {
        self.idle_steal() / self.vcpus().max(1) as f64
    }
    /// Most of its steal is idle steal: fixed on the host, not by moving.
    pub fn steal_is_idle(&self) -> bool {
        self.wait() > 0.0 && self.idle_steal() >= 0.5 * self.wait()
    }
}

/// What the fleet commands could not see, and so left out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Unseen {
    /// A target whose scrape fails (`up == 0`): no `serve` answering.
    TargetDown { instance: String, job: String },
    /// A target with vCPU series but no stealscope_host_cpus (an older
    /// serve, or a scrape that lost families): not planned for.
    NoHostFacts { instance: String, job: String },
    /// Host without NUMA memory series: nothing is moved onto it.
    NoNodeMemory { host: String },
    /// VM without vCPU count, memory size or demand history: not moved.
    VmPartial {
        host: String,
        vm: String,
        missing: String,
    },
}

impl std::fmt::Display for Unseen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unseen::TargetDown { instance, .. } => {
                write!(f, "{instance}: scrape failing (up 0): no serve")
            }
            Unseen::NoHostFacts { instance, .. } => {
                write!(f, "{instance}: no stealscope_host_cpus (old serve?)")
            }
            Unseen::NoNodeMemory { host } => write!(f, "{host}: no NUMA memory: takes no VM"),
            Unseen::VmPartial { host, vm, missing } => {
                write!(f, "{host}/{vm}: no {missing}: stays")
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    pub window_s: f64,
    pub step_s: f64,
    pub hosts: Vec<Host>,
    pub unseen: Vec<Unseen>,
}

/// Fleet-wide figures, before or after a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FleetFigures {
    /// Busy steal, percent of all vCPU time.
    pub busy_steal_pct: f64,
    /// 99th percentile of the VMs' steal, percent.
    pub vm_steal_p99: f64,
    pub vms_over_10pct: usize,
}

/// p-th quantile (nearest rank) of unsorted values.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

impl FleetFigures {
    /// From per-host (busy steal CPU-s/s, vCPUs, VM steal percents).
    pub fn of(hosts: impl Iterator<Item = (f64, u32, Vec<f64>)>) -> FleetFigures {
        let (mut busy, mut vcpus, mut steal) = (0.0, 0u64, Vec::new());
        for (b, v, s) in hosts {
            busy += b;
            vcpus += v as u64;
            steal.extend(s);
        }
        FleetFigures {
            busy_steal_pct: 100.0 * busy / vcpus.max(1) as f64,
            vms_over_10pct: steal.iter().filter(|s| **s > 10.0).count(),
            vm_steal_p99: quantile(&mut steal, 0.99),
        }
    }

    /// As measured: every host's own figures.
    pub fn measured(f: &Fleet) -> FleetFigures {
        FleetFigures::of(f.hosts.iter().map(|h| {
            (
                h.busy_steal(),
                h.vcpus(),
                h.vms.iter().map(Vm::steal_pct).collect(),
            )
        }))
    }
}

/// A host for unit tests: one NUMA node with `free_bytes` free, no
/// culprits, busy steal `busy` (CPU-seconds a second).
#[cfg(test)]
pub(crate) fn test_host(name: &str, cpus: u32, free_bytes: u64, busy: f64, vms: Vec<Vm>) -> Host {
    Host {
        key: HostKey {
            instance: name.into(),
            job: "j".into(),
        },
        name: name.into(),
        cpus,
        nodes: vec![NodeMem {
            node: 0,
            free_bytes,
        }],
        busy,
        vms,
        culprits: Vec::new(),
    }
}

/// A VM for unit tests: 4 GiB, the same demand at each of four steps, of
/// which `wait` waited.
#[cfg(test)]
pub(crate) fn test_vm(name: &str, vcpus: u32, demand: f64, wait: f64) -> Vm {
    Vm {
        name: name.into(),
        uuid: String::new(),
        vcpus,
        memory_bytes: Some(4 << 30),
        demand: vec![demand; 4],
        wait,
        run: (demand - wait).max(0.0),
    }
}

/// A fleet for unit tests: an hour in 15-minute steps, every host seen.
#[cfg(test)]
pub(crate) fn test_fleet(hosts: Vec<Host>) -> Fleet {
    Fleet {
        window_s: 3600.0,
        step_s: 900.0,
        hosts,
        unseen: Vec::new(),
    }
}
