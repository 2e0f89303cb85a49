//! Active probes: measurements that see what `/proc/stat` (10 ms steal ticks)
//! cannot.
//!
//! - [`wakeup`]: cyclictest-style timer wake-up latency, one pinned thread per
//!   CPU, SCHED_FIFO, memory locked, absolute-deadline `clock_nanosleep`,
//!   optional PM QoS hold; HDR histograms, no sample cap.
//! - [`preempt`]: osnoise-style spinner per CPU recording every gap above a
//!   threshold, each gap attributed from the kernel's own evidence (tracefs
//!   irq/softirq/sched events, or per-CPU counters as a fallback) to a guest
//!   hard IRQ, softirq, another guest thread, or unexplained time (the
//!   hypervisor took the vCPU), correlated with `/proc/stat` steal.
//! - [`throughput`]: a fixed compute kernel per CPU, ops/s per short window next
//!   to that window's steal.
//!
//! Every `run(opts, stop)` ends early and cleanly when `stop` becomes true (see
//! [`signals::stop_on_signals`]) and restores whatever it changed (thread
//! policy, memory lock, PM QoS, tracing instance, tracefs mount) on every path,
//! including panics: each change is held by a guard that undoes it on drop.
//! What could not be done (no SCHED_FIFO, no mlock, no tracefs, no PM QoS) is
//! said in the report's `notes`; `no_change` options change nothing at all.

pub mod error;
pub mod findings;
pub mod preempt;
pub mod signals;
pub mod stats;
pub mod throughput;
pub mod wakeup;

mod counters;
mod harness;
mod sys;
mod tracefs;

pub use error::ProbeError;
pub use stats::{Bucket, LatencyStats};

/// The CPUs to run on: `requested`, checked against the CPUs this process may
/// use (online and in its affinity mask), or all of those when None.
pub fn resolve_cpus(requested: Option<&[u32]>) -> Result<Vec<u32>, ProbeError> {
    let allowed = sys::allowed_cpus()?;
    let Some(req) = requested else {
        return Ok(allowed);
    };
    if req.is_empty() {
        return Err(ProbeError::Options("no CPU selected".into()));
    }
    let mut out = req.to_vec();
    out.sort_unstable();
    out.dedup();
    if let Some(bad) = out.iter().find(|c| !allowed.contains(c)) {
        return Err(ProbeError::Options(format!(
            "CPU {bad} is offline or not allowed for this process (allowed: {})",
            stealscope_readers::cpulist::format(&allowed)
        )));
    }
    Ok(out)
}

/// The system-wide PM QoS CPU latency limit now, µs, read from
/// /dev/cpu_dma_latency (2000000000 when nobody holds one); None if unreadable.
pub fn pm_qos_limit_us() -> Option<i32> {
    sys::read_pm_qos()
}

/// Tracing instances made by these probes that exist now: none may remain
/// once a probe has returned.
pub fn leftover_trace_instances() -> Vec<String> {
    tracefs::leftover_instances()
}

/// Every figure of a probe report is rounded the one way reports round.
pub(crate) use stealscope_findings::units::round;

/// Live unit tests run probes on the same CPUs: one at a time.
#[cfg(test)]
pub(crate) fn test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
