//! Derived data, separate from reading and from rendering: deltas between
//! readings with hostile-counter handling, short windows and the busy/idle
//! steal split, interrupt rates.

pub mod bursts;
pub mod cputime;
pub mod exact_steal;
pub mod hardware;
pub mod hw;
pub mod irq_rates;
pub mod windows;

pub use cputime::{delta, Anomaly, CpuInterval, IntervalDelta, ModeSecs, Shares};
pub use windows::{classify, split, Sample, StealSplit, WindowClass};
pub mod machine;
pub mod observation;

pub use machine::MachineModel;
pub use observation::{collect, Observation};
pub mod host;
pub mod recent;
pub mod recording;
pub mod redact;
pub mod running;
pub mod running_exact_steal;
pub mod running_hw;
pub mod side;
pub mod sticky_top;
pub mod timeline;
