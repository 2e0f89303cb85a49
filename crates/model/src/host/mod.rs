//! The host side: VM discovery, per-vCPU host steal, hypervisor split. The
//! periodic live scan of a host (scanner, tracker, watch) and the live
//! questions to QMP and KVM are the engine's (stealscope_engine::host).

pub mod attribution;
pub mod derived;
pub mod discovery;
pub mod host_work;
pub mod identity;
pub mod kvm;
pub mod live_rows;
pub mod observation;
pub mod running_wait_by;
pub mod sched_store;
pub mod starve;
pub mod stored;
pub mod vcpu_times;
pub mod vm_rates;

pub use derived::{host_model, HostModel, HypervisorSplit, VcpuSteal, VmSteal};
pub use discovery::{ThreadRole, VmKind};
pub use live_rows::{LiveHost, Placement, VcpuLive, VmLive};
pub use observation::{
    collect_host, collect_host_with, thread_times, HostObservation, ThreadTimes, VcpuSource, VmObs,
};
pub use vcpu_times::{vcpu_times, vm_labels, ScannedVmId, ThreadSample, VcpuTimes};
pub use vm_rates::{vm_rates, VmRate, VmRateTracker};
