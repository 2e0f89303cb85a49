//! Readers for the kernel files stealscope uses. Every reader takes a
//! [`Source`] (the live machine, a root directory such as one side of a
//! snapshot, or a recording wrapper) and returns typed data in which a value
//! the kernel did not provide is `None`, never 0.

pub mod autogroup;
pub mod block;
pub mod cgroupfs;
pub mod clock;
pub mod clocksource;
pub mod cpu_topology;
pub mod cpufreq;
pub mod cpuid;
pub mod cpuidle;
pub mod cpuinfo;
pub mod cpulist;
pub mod damage;
pub mod error;
pub mod haltpoll;
pub mod interrupts;
pub mod kernel;
pub mod kmsg;
pub mod kvm_debugfs;
pub mod kvm_exits;
pub mod kvm_params;
pub mod kvm_stats;
pub mod kvmclock;
pub mod maps;
pub mod mempolicy;
pub use perf::msr_dev;
pub mod numa;
pub mod own_threads;
pub mod perf;
pub mod pread;
pub mod process;
pub mod psi;
pub mod qmp;
pub mod recording;
pub mod rule_records;
pub mod snapshot;
pub mod source;
pub mod stat;
pub mod tracefs;
pub mod tsc_clock;
pub mod vm_dirty;
pub mod vulnerabilities;

pub use error::{ReadError, Result};
pub use source::{MemFs, Recorder, RootFs, Source};
