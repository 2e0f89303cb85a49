//! Scheduler-event collector (reader level): for every watched thread (the
//! vCPU threads of the VMs on a host), its run-queue wait split by **who ran
//! on its CPU while it waited**, plus a histogram of its wait episodes.
//!
//! Two routes feed the same typed counters (`stealscope_who::waits`):
//! - `bpf`: a CO-RE eBPF program on the scheduler tracepoints that aggregates
//!   in the kernel; user space reads its maps once per interval.
//! - `tracefs`: a private tracefs instance streaming the same events in
//!   binary (per-CPU `trace_pipe_raw`), aggregated in user space by
//!   [`aggregate`], for kernels without BTF or BPF ([`tracefs_raw`]).
//!
//! Both routes charge time by the rules of docs/who-stole.md, section
//! "Rules" (tests/two_routes.rs runs both at once and compares). Inside a KVM guest, [`guest_steal`]
//! charges each advance of a CPU's paravirtual steal clock to the task it
//! had current, or to idle (issue 30). Naming (which VM a thread belongs to,
//! kernel-thread classes) is the model crate's job, not this one's.

pub mod aggregate;
mod bpf;
mod bpf_charges;
mod bpf_info;
mod bpf_ksym;
mod bpf_slots;
pub mod collector;
pub mod error;
pub mod event;
pub mod evformat;
pub mod guest_steal;
pub mod guest_steal_clock;
pub mod guest_steal_fold;
pub mod guest_steal_ring;
pub mod merge;
pub mod ringbuf;
mod route;
pub mod tracefs_raw;
pub mod tracefs_text;

pub use bpf_info::{enable_run_stats, ProgStats};
pub use collector::{Collector, Preference, Unavailable};
pub use error::{CollectError, Result};
pub use guest_steal::{GuestSteal, StealOptions, StealUnavailable};
