//! Who ran while a thread waited: the types every layer shares, so that
//! the model, the output and the server read the scheduler-event
//! collector's readings without depending on the BPF loader
//! (`stealscope-sched`), which produces them.
//!
//! - [`waits`]: cumulative wait per watched thread, split by the threads
//!   that ran while it waited (host side).
//! - [`guest_steal`]: steal charged to the task a guest CPU had current.
//! - [`hist`]: the wait-episode histogram both fill.
//! - [`Culprit`] (with its [`Kind`]) and [`Charge`]: what the model names
//!   a thread that ran, and the wait charged to it, in every report.

pub mod culprit;
pub mod guest_steal;
pub mod hist;
pub mod kind;
pub mod waits;

pub use culprit::{Charge, Culprit};
pub use guest_steal::{
    CpuSteal, GuestStealSample, StealEpisode, StealTaskId, StealVictim, TaskSteal,
};
pub use hist::EpisodeHist;
pub use kind::Kind;
pub use waits::{Route, SchedSample, SchedStats, Thread, ThreadWaits};
