//! `stealscope fleet`: the fleet view, read from Prometheus (no database
//! of our own). `status` ranks hosts by busy and idle steal and names who
//! stole it; `plan` proposes live migrations that take busy steal away,
//! each checked in the simulator with the VMs' measured demand history
//! (stealscope_sim::measured), and prints the commands for libvirt,
//! OpenStack and KubeVirt. Nothing here migrates anything.
//!
//! Layering: analysis level; reads the simulator and placement types, and
//! nothing above (the CLI prints what this returns).

pub mod anchors;
pub mod commands;
pub mod error;
pub mod model;
pub mod plan;
pub mod predict;
pub mod prom;
pub mod read;
pub mod render;
pub mod status;
pub mod want;

pub use error::FleetError;
pub use model::{Fleet, FleetFigures, Host, Unseen, Vm};
pub use plan::{plan, Plan, PlanOptions, Planner};
pub use read::{read, ReadOptions};
