//! Applies placement actions to the live host through the owner of each
//! knob (libvirt's `virsh`, cgroup files, sched_setaffinity, move_pages),
//! with every action journaled before it is applied and marked after, so a
//! crash leaves a journal from which the state can be finished or rolled
//! back, and `undo` can restore what was there before.

pub mod affinity;
pub mod apply;
pub mod autogroup;
pub mod cgroup;
pub mod cpuset;
pub mod error;
pub mod journal;
pub mod live_state;
pub mod memory;
pub mod virsh;

pub use apply::{Applier, ApplyReport};
pub use error::ApplyError;
