//! Live collection on a host, next to the engine that drives it: the
//! periodic scan of every vCPU thread ([`scanner`], kept going by
//! [`tracker`], told of new VMMs by [`watch`]) and what only a live host can
//! answer during a capture ([`answers`]: QMP, KVM stats fds, the kvm:kvm_exit
//! sample). The model derives from what these read; it reads nothing live.

pub mod answers;
pub mod scanner;
pub mod sched_hook;
pub mod starve;
pub mod tracker;
pub mod watch;

pub use answers::HostLiveOptions;
pub use scanner::{HostScanner, ScannedThread, ScannedVm};
pub use tracker::HostTracker;
pub use watch::VmmWatch;
