//! The host side: VM discovery, per-vCPU host steal, hypervisor split.

pub mod attribution;
pub mod derived;
pub mod discovery;
pub mod host_work;
pub mod kvm;
pub mod live;
pub mod live_rows;
pub mod live_sched;
pub mod observation;
pub mod running_wait_by;
pub mod scanner;
pub mod sched_store;
pub mod tracker;
pub mod vcpu_times;
pub mod vm_rates;
pub mod watch;

pub use derived::{host_model, HostModel, HypervisorSplit, VcpuSteal, VmSteal};
pub use discovery::{ThreadRole, VmKind};
pub use live_rows::{LiveHost, Placement, VcpuLive, VmLive};
pub use observation::{
    collect_host, collect_host_with, thread_times, HostObservation, ThreadTimes, VcpuSource, VmObs,
};
pub use tracker::HostTracker;
pub use vcpu_times::{vcpu_times, vm_labels, VcpuTimes};
pub use vm_rates::{vm_rates, VmRate, VmRateTracker};
pub use watch::VmmWatch;
