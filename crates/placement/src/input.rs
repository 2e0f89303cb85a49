//! What the planner is given: the host's topology and memory, and each VM
//! with its threads, measured demand, memory per node and how its knobs are
//! reached. Built from the live host by `place`, or by `sim`.

use crate::action::{CgroupRef, Knob};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stealscope_readers::mempolicy::Confinement;
use stealscope_readers::process::CgroupMembership;
use stealscope_who::Kind;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Online CPUs, ascending.
    pub cpus: Vec<u32>,
    /// SMT sibling groups (a core's hardware threads), each ascending.
    pub cores: Vec<Vec<u32>>,
    pub nodes: Vec<NodeInput>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInput {
    pub id: u32,
    /// Online CPUs of the node.
    pub cpus: Vec<u32>,
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInput {
    pub topology: Topology,
    pub swap_total_bytes: Option<u64>,
    pub swap_free_bytes: Option<u64>,
    /// /proc/sys/kernel/numa_balancing (None when absent).
    pub numa_balancing: Option<u32>,
    /// numad (or another placement tool) is running: it would fight us.
    pub numad_running: bool,
    /// Where the cpu controller is (None: no cpu controller mounted).
    pub cpu_controller: Option<CpuController>,
    pub vms: Vec<VmInput>,
    /// The weight of the config's shared group now; None when the group
    /// does not exist yet (the plan creates it).
    #[serde(default)]
    pub shared_group_weight: Option<u64>,
    /// Work on the host outside the VMs (processes, kernel threads), as
    /// measured: the mapping and the node loads count it where it runs.
    #[serde(default)]
    pub host_work: HostWork,
}

/// The host's other work in CPUs of demand (run plus run-queue wait over
/// the observed interval, at most 1 per thread), split by where it may
/// run: a thread confined to some CPUs (a pinned loop, a per-CPU kernel
/// thread) loads those CPUs, evenly; one allowed everywhere goes where the
/// load balancer puts it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostWork {
    /// Demand of confined threads, by CPU.
    #[serde(default)]
    pub by_cpu: BTreeMap<u32, f64>,
    /// Demand of threads allowed on every online CPU.
    #[serde(default)]
    pub anywhere: f64,
}

impl HostWork {
    /// Adds one thread's demand, allowed on `allowed` of the `online` CPUs.
    pub fn add(&mut self, demand: f64, allowed: &[u32], online: &[u32]) {
        let mine: Vec<u32> = allowed
            .iter()
            .copied()
            .filter(|c| online.contains(c))
            .collect();
        if demand <= 0.0 {
            return;
        }
        if mine.is_empty() || mine.len() == online.len() {
            self.anywhere += demand;
            return;
        }
        for c in &mine {
            *self.by_cpu.entry(*c).or_default() += demand / mine.len() as f64;
        }
    }

    /// Demand on `cpu` from confined threads.
    pub fn on(&self, cpu: u32) -> f64 {
        self.by_cpu.get(&cpu).copied().unwrap_or(0.0)
    }

    pub fn total(&self) -> f64 {
        self.anywhere + self.by_cpu.values().sum::<f64>()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuController {
    pub v2: bool,
    /// Mount point, e.g. /sys/fs/cgroup/cpu (v1) or /sys/fs/cgroup (v2).
    pub mount: String,
}

impl CpuController {
    /// The line of /proc/<pid>/cgroup that names the cpu group.
    pub fn membership<'a>(&self, cgs: &'a [CgroupMembership]) -> Option<&'a CgroupMembership> {
        cgs.iter().find(|c| {
            if self.v2 {
                c.hierarchy == 0 && c.controllers.is_empty()
            } else {
                c.controllers.iter().any(|x| x == "cpu")
            }
        })
    }

    /// The group at `path` (as in /proc/<pid>/cgroup) under this mount.
    pub fn group(&self, path: &str) -> CgroupRef {
        CgroupRef {
            v2: self.v2,
            dir: format!(
                "{}{}",
                self.mount.trim_end_matches('/'),
                path.trim_end_matches('/')
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadInput {
    pub tid: u32,
    /// Measured demand in CPUs: run plus run-queue wait (1.0 = wants a whole
    /// CPU); None when not measured.
    pub util: Option<f64>,
    /// Current affinity (Cpus_allowed_list).
    pub cpus_allowed: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmInput {
    pub pid: u32,
    pub name: String,
    /// Who owns the VM's knobs (libvirt keeps its domain XML true).
    pub knob: Knob,
    /// vCPU threads by index.
    pub vcpus: Vec<(u32, ThreadInput)>,
    /// Emulator and I/O threads.
    pub others: Vec<ThreadInput>,
    /// Resident bytes per node (numa_maps); None when unreadable.
    pub mem_by_node: Option<BTreeMap<u32, u64>>,
    /// Memory the VM's own NUMA policies place (bind, preferred, interleave):
    /// its memory may only go where they allow. None when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_policy: Option<Confinement>,
    /// The cpu group the VM process is in now (any group, even the root).
    pub cpu_group: Option<CgroupRef>,
    /// Its current weight there, in the group's own units.
    pub cpu_weight: Option<u64>,
    /// The autogroup the kernel schedules the VM in, when that is in
    /// effect: autogroups on and the VM in the root cpu group. Its weight
    /// is set through its nice (/proc/PID/autogroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autogroup: Option<VmAutogroup>,
    /// How much its vCPUs waited and who ran meanwhile (scheduler events),
    /// when attribution ran: plan reasons cite it as evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitEvidence>,
}

/// A VM's autogroup (a session's scheduling group, so every
/// `qemu -daemonize` has one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmAutogroup {
    /// N of /autogroup-N.
    pub id: u64,
    pub nice: i32,
    /// Other processes in the same autogroup: its nice weighs them too, so
    /// it is a per-VM weight only while this is empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<u32>,
}

impl VmAutogroup {
    /// How the simulator and the host views name the group.
    pub fn name(&self) -> String {
        stealscope_readers::autogroup::group_name(self.id)
    }
}

/// A VM's vCPU run-queue wait over the observed interval, by culprit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitEvidence {
    /// Mean share of wall time its vCPUs waited (0..1).
    pub wait_share: f64,
    /// The largest culprits, most wait first (at most three).
    pub culprits: Vec<CulpritEvidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CulpritEvidence {
    /// As in `host --json`'s `wait_by`. Kind, name and pid rather than a
    /// whole [`stealscope_who::Culprit`]: stored plans write `"pid": null`.
    pub kind: Kind,
    pub name: String,
    pub pid: Option<u32>,
    /// Of the VM's vCPU wait (0..1).
    pub share: f64,
}

impl WaitEvidence {
    /// "its vCPUs waited 48% of the time, 97% of it behind host process
    /// `burn` (pid 812)"; None when it hardly waited (under 5%) or no
    /// culprit holds a tenth of the wait.
    pub fn reason(&self) -> Option<String> {
        if self.wait_share < 0.05 {
            return None;
        }
        let who: Vec<String> = self
            .culprits
            .iter()
            .filter(|c| c.share >= 0.1)
            .take(2)
            .map(|c| format!("{:.0}% of it behind {}", 100.0 * c.share, c.describe()))
            .collect();
        (!who.is_empty()).then(|| {
            format!(
                "its vCPUs waited {:.0}% of the time, {}",
                100.0 * self.wait_share,
                who.join(", ")
            )
        })
    }
}

impl CulpritEvidence {
    fn describe(&self) -> String {
        let pid = self.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        match self.kind {
            Kind::Vcpu => format!("VM {}'s vCPUs", self.name),
            Kind::Vmm => format!("VM {}'s emulator threads", self.name),
            Kind::HostKthread => format!("kernel threads `{}`", self.name),
            Kind::HostProcess => format!("host process `{}`{pid}", self.name),
            Kind::Irq => "interrupts".to_string(),
            _ => format!("{} ({})", self.name, self.kind),
        }
    }
}

impl Topology {
    /// Node of each CPU, indexed by CPU number (None: offline or in no
    /// node). A host without NUMA information is one node, 0.
    pub fn node_of_cpus(&self) -> Vec<Option<u32>> {
        let max = self.cpus.iter().max().map_or(0, |m| *m as usize + 1);
        let mut v = vec![None; max];
        if self.nodes.is_empty() {
            for c in &self.cpus {
                v[*c as usize] = Some(0);
            }
        }
        for n in &self.nodes {
            for c in &n.cpus {
                if let Some(slot) = v.get_mut(*c as usize) {
                    *slot = Some(n.id);
                }
            }
        }
        v
    }
}

impl VmInput {
    /// The node whose CPUs hold every vCPU's allowed CPUs; None when the
    /// masks span nodes, name a CPU of no node, or are empty.
    pub fn cpus_node(&self, node_of: &[Option<u32>]) -> Option<u32> {
        // vCPUs of a VM usually share one mask: check each distinct one once,
        // stopping at the first CPU of another node.
        let mut node = None;
        let mut last: Option<&Vec<u32>> = None;
        for (_, t) in &self.vcpus {
            if last == Some(&t.cpus_allowed) {
                continue;
            }
            last = Some(&t.cpus_allowed);
            for c in &t.cpus_allowed {
                let n = node_of.get(*c as usize).copied().flatten();
                if n.is_none() || (node.is_some() && node != n) {
                    return None;
                }
                node = n;
            }
        }
        node
    }

    pub fn mem_bytes(&self) -> Option<u64> {
        self.mem_by_node.as_ref().map(|m| m.values().sum())
    }

    /// The node holding most of the VM's memory (where it is cheapest to keep it).
    pub fn home_node(&self) -> Option<u32> {
        self.mem_by_node
            .as_ref()?
            .iter()
            .max_by_key(|(n, b)| (**b, std::cmp::Reverse(**n)))
            .filter(|(_, b)| **b > 0)
            .map(|(n, _)| *n)
    }

    /// Measured demand in CPUs; a vCPU never measured counts as one busy CPU
    /// (the safe assumption for capacity).
    pub fn demand(&self) -> f64 {
        self.vcpus
            .iter()
            .map(|(_, t)| t.util.unwrap_or(1.0).clamp(0.0, 1.0))
            .sum()
    }

    /// Variance of how many of its vCPUs are runnable at once
    /// ([`crate::overflow`]): each runnable with the chance of its demand.
    pub fn spread(&self) -> f64 {
        self.vcpus
            .iter()
            .map(|(_, t)| crate::overflow::thread_spread(t.util.unwrap_or(1.0)))
            .sum()
    }
}
