//! The placement planner (the "Octopus" of the who-stole-my-cpu talk) as
//! pure code: from the host's topology, its VMs with their measured demand
//! and memory per node, a config and the placement history, to a target
//! placement and the actions that reach it, each with a reason in words.
//! No I/O here: `place` feeds it from the live host and applies the actions
//! through `stealscope-actuators`; `sim` feeds it simulated hosts.

pub mod action;
pub mod config;
mod diff;
pub mod history;
pub mod input;
pub mod live;
mod mapping;
mod nodes;
pub mod numad;
pub mod overflow;
pub mod plan;
mod spill;
pub mod synthetic;
mod target;

pub use action::{Action, CgroupRef, Knob};
pub use config::{Config, ConfigError, Fairness, VcpuMapping};
pub use history::History;
pub use input::{
    CulpritEvidence, HostInput, HostWork, NodeInput, ThreadInput, Topology, VmInput, WaitEvidence,
};
pub use plan::{plan, Plan};
pub use target::VmPlan;
