//! The actions a plan is made of. Each names its target, the value it
//! sets, the value the planner saw (the applier journals the live value it
//! replaces), the owner of the knob, and the reason in words.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The pseudo-VM name of actions on the shared group itself.
pub const SHARED_GROUP_VM: &str = "(shared group)";

/// Who owns a VM's knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "owner", rename_all = "snake_case")]
pub enum Knob {
    /// libvirt runs the VM: changes go through `virsh` so the domain XML
    /// stays true (a direct write would be undone at the next restart).
    Libvirt { domain: String },
    /// Nobody else: cgroup files and sched_setaffinity.
    Direct,
}

/// A cgroup directory on the live system.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CgroupRef {
    /// true: cgroup v2 (cpu.weight, cgroup.procs); false: v1 (cpu.shares).
    pub v2: bool,
    /// Absolute directory, e.g. /sys/fs/cgroup/cpu/machine/vm1.
    pub dir: String,
}

impl CgroupRef {
    pub fn weight_file(&self) -> String {
        format!(
            "{}/{}",
            self.dir,
            if self.v2 { "cpu.weight" } else { "cpu.shares" }
        )
    }

    /// The hierarchy's default weight and range (cgroup v1 cpu.shares
    /// [2, 262144] default 1024; v2 cpu.weight [1, 10000] default 100).
    pub fn weight_unit(&self) -> (u64, u64, u64) {
        if self.v2 {
            (100, 1, 10_000)
        } else {
            (1024, 2, 262_144)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Set a thread's CPU affinity.
    Affinity {
        vm: String,
        pid: u32,
        tid: u32,
        /// vCPU index, or None for an emulator/I/O thread.
        vcpu: Option<u32>,
        cpus: Vec<u32>,
        from: Vec<u32>,
        via: Knob,
        reason: String,
    },
    /// Set a group's CPU weight (cpu.shares or cpu.weight).
    CpuWeight {
        vm: String,
        pid: u32,
        group: CgroupRef,
        value: u64,
        from: Option<u64>,
        via: Knob,
        reason: String,
    },
    /// Move a VM process (all its threads) into a cpu group.
    JoinGroup {
        vm: String,
        pid: u32,
        group: CgroupRef,
        from: Option<CgroupRef>,
        reason: String,
    },
    /// Set the nice of the VM's autogroup (/proc/PID/autogroup): the
    /// weight of the scheduling group the kernel runs it in when it has no
    /// cpu group of its own.
    AutogroupNice {
        vm: String,
        pid: u32,
        /// N of /autogroup-N: a VM that is in another autogroup by the
        /// time this is applied is not changed.
        autogroup: u64,
        value: i32,
        from: Option<i32>,
        reason: String,
    },
    /// Move a VM's memory to one node (in steps, after safety checks).
    MigrateMemory {
        vm: String,
        pid: u32,
        to_node: u32,
        bytes: u64,
        from_nodes: BTreeMap<u32, u64>,
        via: Knob,
        reason: String,
    },
}

impl Action {
    /// The change alone: without its reason and the state it read before
    /// (the same change asked again reads other numbers).
    pub fn change(&self) -> Action {
        let mut a = self.clone();
        match &mut a {
            Action::Affinity { reason, from, .. } => {
                reason.clear();
                from.clear();
            }
            Action::CpuWeight { reason, from, .. } => {
                reason.clear();
                *from = None;
            }
            Action::JoinGroup { reason, from, .. } => {
                reason.clear();
                *from = None;
            }
            Action::AutogroupNice { reason, from, .. } => {
                reason.clear();
                *from = None;
            }
            Action::MigrateMemory {
                reason,
                bytes,
                from_nodes,
                ..
            } => {
                reason.clear();
                *bytes = 0;
                from_nodes.clear();
            }
        }
        a
    }

    pub fn vm(&self) -> &str {
        match self {
            Action::Affinity { vm, .. }
            | Action::CpuWeight { vm, .. }
            | Action::JoinGroup { vm, .. }
            | Action::AutogroupNice { vm, .. }
            | Action::MigrateMemory { vm, .. } => vm,
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Action::Affinity { pid, .. }
            | Action::CpuWeight { pid, .. }
            | Action::JoinGroup { pid, .. }
            | Action::AutogroupNice { pid, .. }
            | Action::MigrateMemory { pid, .. } => *pid,
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Action::Affinity { reason, .. }
            | Action::CpuWeight { reason, .. }
            | Action::JoinGroup { reason, .. }
            | Action::AutogroupNice { reason, .. }
            | Action::MigrateMemory { reason, .. } => reason,
        }
    }
}

use stealscope_readers::cpulist::format as cpulist;

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1024.0 * 1024.0))
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Affinity {
                vm,
                tid,
                vcpu,
                cpus,
                from,
                via,
                ..
            } => {
                let who = match vcpu {
                    Some(i) => format!("vCPU {i}"),
                    None => "thread".to_string(),
                };
                let how = match (via, vcpu) {
                    (Knob::Libvirt { .. }, Some(_)) => " (virsh vcpupin)",
                    (Knob::Libvirt { .. }, None) => " (virsh emulatorpin)",
                    (Knob::Direct, _) => "",
                };
                write!(
                    f,
                    "{vm}: pin {who} (tid {tid}) to CPUs {} (was {}){how}",
                    cpulist(cpus),
                    cpulist(from)
                )
            }
            Action::CpuWeight {
                vm,
                group,
                value,
                from,
                via,
                ..
            } => write!(
                f,
                "{vm}: {} = {value} ({}){}",
                group.weight_file(),
                match from {
                    Some(v) => format!("was {v}"),
                    // Only the shared group is read before planning; it
                    // has no weight when it does not exist yet.
                    None if vm == SHARED_GROUP_VM => "new group".to_string(),
                    None => "was unknown".to_string(),
                },
                match via {
                    Knob::Libvirt { .. } => " (virsh schedinfo cpu_shares)",
                    Knob::Direct => "",
                }
            ),
            Action::JoinGroup {
                vm,
                pid,
                group,
                from,
                ..
            } => write!(
                f,
                "{vm}: move process {pid} into {} (from {})",
                group.dir,
                from.as_ref().map_or("unknown", |g| g.dir.as_str())
            ),
            Action::AutogroupNice {
                vm,
                pid,
                autogroup,
                value,
                from,
                ..
            } => write!(
                f,
                "{vm}: /proc/{pid}/autogroup nice = {value} (was {}; autogroup-{autogroup}, weight {})",
                from.map_or("unknown".to_string(), |n| n.to_string()),
                stealscope_readers::autogroup::nice_weight(*value)
            ),
            Action::MigrateMemory {
                vm,
                to_node,
                bytes,
                from_nodes,
                ..
            } => {
                let from: Vec<String> = from_nodes
                    .iter()
                    .map(|(n, b)| format!("node {n}: {}", mib(*b)))
                    .collect();
                write!(
                    f,
                    "{vm}: move {} of memory to node {to_node} ({})",
                    mib(*bytes),
                    from.join(", ")
                )
            }
        }
    }
}
