//! Derived data, separate from reading and from rendering: deltas between
//! readings with hostile-counter handling, short windows and the busy/idle
//! steal split, interrupt rates.

pub mod cputime;
pub mod irq_rates;
pub mod windows;

pub use cputime::{delta, Anomaly, CpuInterval, IntervalDelta, ModeSecs};
pub use windows::{classify, split, Sample, StealSplit, WindowClass};
pub mod guest;
pub mod observation;

pub use guest::GuestModel;
pub use observation::{collect, Observation};
pub mod capture;
