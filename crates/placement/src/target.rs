//! The target placement of one VM ([`VmPlan`]): what the planner decides
//! (plan.rs), what the vCPU mapping refines (mapping.rs) and what the diff
//! turns into actions (diff.rs), so that none of them depends on another
//! for it.

use crate::action::Knob;
use crate::config::{Config, Fairness};
use crate::input::VmInput;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Dedicated,
    Shared,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmPlan {
    pub pid: u32,
    pub name: String,
    pub class: Class,
    /// The node the VM lives on; None when it spans nodes.
    pub node: Option<u32>,
    /// Measured demand, CPUs.
    pub demand: f64,
    pub mem_bytes: Option<u64>,
    /// (vCPU index, tid, CPUs).
    pub vcpus: Vec<(u32, u32, Vec<u32>)>,
    /// CPUs for the emulator and I/O threads.
    pub other_cpus: Vec<u32>,
    pub reasons: Vec<String>,
    /// Why its vCPUs are pinned one per CPU, when they are (mapping.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapping: Option<String>,
    /// Why its vCPUs may also run on other nodes' pools, when they may
    /// (spill.rs): its node is overcommitted and another has room; its
    /// memory stays on `node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill: Option<String>,
}

/// Whether this VM's knobs belong to libvirt.
pub fn libvirt_domain(vm: &VmInput) -> Option<&str> {
    match &vm.knob {
        Knob::Libvirt { domain } => Some(domain),
        Knob::Direct => None,
    }
}

pub(crate) fn fairness_for(vm: &VmInput, cfg: &Config) -> Fairness {
    // libvirt owns the VM's cgroup placement: weights through libvirt instead.
    match (cfg.fairness, libvirt_domain(vm)) {
        (Fairness::SharedGroup, Some(_)) => Fairness::Weights,
        (f, _) => f,
    }
}
