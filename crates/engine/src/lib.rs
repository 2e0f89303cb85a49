//! The one live engine. Every command that reads the running machine over
//! time reads it here: one sampling loop ([`sampler`]: /proc/stat windows,
//! hardware counters, host scans of the vCPU threads, the scheduler-event
//! collector), one rule runner ([`rules`], the doctor's report of each
//! interval, built in [`report`]), and what each command subscribes with:
//! `serve` its metrics (crates/serve), `top` a [`view`], `record` a file
//! ([`record`]), `doctor` one interval ([`capture`]), `place daemon` its
//! passes ([`place`]); `place plan|apply|undo` run once ([`place_ops`]).

pub mod capture;
pub mod doctor_probe;
pub mod exact_steal_hook;
pub mod exact_steal_live;
pub mod host;
pub mod hw_sampler;
pub mod live;
pub mod place;
pub mod place_cadence;
pub mod place_daemon;
pub mod place_demand;
pub mod place_ops;
pub mod place_threads;
pub mod place_watch;
pub mod record;
pub mod record_probe;
pub mod record_steal;
pub mod report;
pub mod rules;
pub mod sample_batch;
pub mod sampler;
mod sched;
pub mod series;
pub mod stop;
pub mod view;

pub use live::{Live, Opened};
pub use sampler::{CounterReads, Ended, Sample, Sampler, SamplerOptions, Subscriber};
pub use stop::{Rate, Stop, Wait};
