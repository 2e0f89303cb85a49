//! The system-facing pieces: clocks, affinity, scheduling policy, memory lock
//! and PM QoS. Every change is held by a guard that undoes it on drop, so a
//! probe restores the system on every path (normal end, error, panic, stop
//! flag set by SIGINT/SIGTERM).

use crate::error::ProbeError;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::sys::mman::{mlockall, munlockall, MlockAllFlags};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeValLike;
use nix::time::{clock_gettime, clock_nanosleep, ClockId, ClockNanosleepFlags};
use nix::unistd::Pid;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

pub const PM_QOS_PATH: &str = "/dev/cpu_dma_latency";

/// CLOCK_MONOTONIC in ns: the clock of the probes and of the trace events
/// (trace_clock "mono" is the same clock), which is the readers' one clock.
pub use stealscope_readers::clock::monotonic_ns as now_ns;

/// CPU time of the calling thread in ns. With paravirt steal accounting the
/// kernel does not charge stolen time to the task, so wall minus this is the
/// time the thread did not run (other threads, IRQs, the hypervisor).
pub fn thread_cputime_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Sleeps until the absolute CLOCK_MONOTONIC time `deadline_ns`. Returns
/// early (Err(EINTR)) when a signal arrives, so callers re-check their stop flag.
#[inline]
pub fn sleep_until(deadline_ns: u64) -> nix::Result<()> {
    let ts = nix::sys::time::TimeSpec::new(
        (deadline_ns / 1_000_000_000) as libc::time_t,
        (deadline_ns % 1_000_000_000) as libc::c_long,
    );
    clock_nanosleep(
        ClockId::CLOCK_MONOTONIC,
        ClockNanosleepFlags::TIMER_ABSTIME,
        &ts,
    )
    .map(|_| ())
}

/// User+system CPU time of this process so far, seconds (overhead figure).
pub fn process_cpu_s() -> f64 {
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| {
            (u.user_time().num_microseconds() + u.system_time().num_microseconds()) as f64 / 1e6
        })
        .unwrap_or(0.0)
}

/// Voluntary + involuntary context switches of the calling thread: a change
/// across a gap means another thread ran on the CPU meanwhile.
#[inline]
pub fn thread_ctx_switches() -> u64 {
    getrusage(UsageWho::RUSAGE_THREAD)
        .map(|u| (u.voluntary_context_switches() + u.involuntary_context_switches()) as u64)
        .unwrap_or(0)
}

/// Linux thread id of the caller (what sched_switch reports as pid).
pub fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// CPUs this process may run on (online CPUs in its affinity mask).
pub fn allowed_cpus() -> Result<Vec<u32>, ProbeError> {
    let set =
        sched_getaffinity(Pid::from_raw(0)).map_err(|e| ProbeError::sys("sched_getaffinity", e))?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .map(|c| c as u32)
        .collect())
}

/// Pins the calling thread to one CPU. Not a system change: it concerns our
/// own thread only, and goes with it.
pub fn pin_current_thread(cpu: u32) -> Result<(), ProbeError> {
    let mut set = CpuSet::new();
    set.set(cpu as usize)
        .map_err(|e| ProbeError::sys(format!("CPU {cpu}"), e))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| ProbeError::sys(format!("pin thread to CPU {cpu}"), e))
}

fn set_policy(policy: libc::c_int, prio: libc::c_int) -> nix::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pthread_self() is always a valid handle for the caller and
    // `param` outlives the call. nix has no sched_setscheduler wrapper.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(nix::errno::Errno::from_raw(rc))
    }
}

/// SCHED_FIFO for the calling thread while alive; SCHED_OTHER again on drop.
/// The thread is ours, so its priority also disappears when it exits; the
/// guard covers the thread living on after the probe (never in this crate,
/// but cheap insurance).
pub struct FifoGuard(());

impl FifoGuard {
    pub fn new(priority: u8) -> nix::Result<FifoGuard> {
        set_policy(libc::SCHED_FIFO, priority as libc::c_int)?;
        Ok(FifoGuard(()))
    }

    /// SCHED_FIFO at `priority` when one is asked for. A refusal is handed
    /// back beside no guard: the probe then runs SCHED_OTHER and reports why.
    pub fn request(priority: Option<u8>) -> (Option<FifoGuard>, Option<nix::Error>) {
        match priority.map(FifoGuard::new) {
            Some(Ok(g)) => (Some(g), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        }
    }
}

impl Drop for FifoGuard {
    fn drop(&mut self) {
        let _ = set_policy(libc::SCHED_OTHER, 0);
    }
}

/// Name of the calling thread's policy as the kernel has it now.
pub fn current_policy() -> &'static str {
    // SAFETY: sched_getscheduler(0) only reads the caller's policy.
    match unsafe { libc::sched_getscheduler(0) } {
        libc::SCHED_FIFO => "fifo",
        libc::SCHED_RR => "rr",
        libc::SCHED_BATCH => "batch",
        libc::SCHED_IDLE => "idle",
        _ => "other",
    }
}

/// mlockall(MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT) while alive, munlockall on
/// drop. ONFAULT locks what is resident (everything the probe threads have
/// touched: stacks, histograms, code) and whatever is touched later, without
/// faulting in the whole binary first: that costs ~4 ms of CPU per run on a
/// KVM guest and buys the measurement nothing. Kernels before 4.4 reject
/// ONFAULT; then plain MCL_CURRENT|MCL_FUTURE (what cyclictest -m does).
/// Skipped (Ok(None)) when memory is already locked by the caller, whose
/// lock we must not undo.
pub struct MlockGuard(());

impl MlockGuard {
    pub fn new() -> nix::Result<Option<MlockGuard>> {
        if already_locked() {
            return Ok(None);
        }
        // SAFETY: mlockall has no memory effects on the Rust side. nix has no
        // MCL_ONFAULT.
        let rc =
            unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) };
        if rc != 0 {
            match nix::errno::Errno::last() {
                nix::errno::Errno::EINVAL => {
                    mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE)?
                }
                e => return Err(e),
            }
        }
        Ok(Some(MlockGuard(())))
    }
}

/// Locks memory for a measurement unless `no_change`: (guard to keep alive,
/// whether memory is locked). A failure becomes a note ending with
/// `consequence` (what the unlocked run may show).
pub fn lock_memory(
    no_change: bool,
    consequence: &str,
    notes: &mut Vec<String>,
) -> (Option<MlockGuard>, bool) {
    if no_change {
        return (None, false);
    }
    match MlockGuard::new() {
        Ok(g) => (g, true),
        Err(e) => {
            notes.push(format!("memory not locked (mlockall: {e}); {consequence}"));
            (None, false)
        }
    }
}

impl Drop for MlockGuard {
    fn drop(&mut self) {
        let _ = munlockall();
    }
}

fn already_locked() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmLck:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .is_some_and(|kb| kb > 0)
}

/// A PM QoS CPU latency request: `/dev/cpu_dma_latency` opened, the limit in
/// µs written as a 4-byte binary integer, the fd kept open. The kernel drops
/// the request when the fd closes, which Drop does (and process exit does
/// even on SIGKILL).
pub struct PmQosGuard {
    file: Option<File>,
}

impl PmQosGuard {
    pub fn hold(us: u32) -> std::io::Result<PmQosGuard> {
        let value = i32::try_from(us).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "limit above i32::MAX")
        })?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(PM_QOS_PATH)?;
        file.write_all(&value.to_ne_bytes())?;
        Ok(PmQosGuard { file: Some(file) })
    }
}

impl Drop for PmQosGuard {
    fn drop(&mut self) {
        drop(self.file.take());
    }
}

/// The current system-wide CPU latency limit (4 bytes from
/// /dev/cpu_dma_latency), for tests and reports; None if unreadable.
pub fn read_pm_qos() -> Option<i32> {
    let bytes = std::fs::read(PM_QOS_PATH).ok()?;
    let arr: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
    Some(i32::from_ne_bytes(arr))
}

/// Start line for probe threads: each thread arrives when set up and waits;
/// the coordinator waits for all of them, then opens (or aborts, e.g. when a
/// thread could not be spawned). Unlike `Barrier` it cannot deadlock when a
/// participant never arrives.
#[derive(Default)]
pub struct StartGate {
    ready: std::sync::atomic::AtomicUsize,
    state: std::sync::atomic::AtomicU8,
}

impl StartGate {
    const OPEN: u8 = 1;
    const ABORT: u8 = 2;

    /// Thread side: true = go, false = abort.
    pub fn arrive_and_wait(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.ready.fetch_add(1, SeqCst);
        loop {
            match self.state.load(SeqCst) {
                Self::OPEN => return true,
                Self::ABORT => return false,
                _ => std::thread::sleep(std::time::Duration::from_micros(500)),
            }
        }
    }

    /// Coordinator side: waits until `n` threads arrived.
    pub fn wait_ready(&self, n: usize) {
        while self.ready.load(std::sync::atomic::Ordering::SeqCst) < n {
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }

    /// Coordinator side, after spawning: waits for the `started` threads,
    /// then aborts unless all `wanted` threads started and none `failed` its
    /// setup. True when the caller may finish its own setup and `open`.
    pub fn settle(&self, started: usize, wanted: usize, failed: impl FnOnce() -> bool) -> bool {
        self.wait_ready(started);
        if started < wanted || failed() {
            self.abort();
            false
        } else {
            true
        }
    }

    pub fn open(&self) {
        self.state
            .store(Self::OPEN, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn abort(&self) {
        self.state
            .store(Self::ABORT, std::sync::atomic::Ordering::SeqCst);
    }
}

/// USER_HZ: the unit of /proc/stat.
pub fn user_hz() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance() {
        let a = now_ns();
        let c0 = thread_cputime_ns();
        let mut x = 0u64;
        for i in 0..200_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(now_ns() > a);
        assert!(thread_cputime_ns() > c0);
    }

    #[test]
    fn sleep_until_past_deadline_returns_at_once() {
        let t = now_ns();
        sleep_until(t.saturating_sub(1_000_000)).unwrap();
        assert!(now_ns() - t < 50_000_000);
    }

    #[test]
    fn allowed_cpus_contains_current() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        // SAFETY: no arguments.
        let cur = unsafe { libc::sched_getcpu() };
        assert!(cpus.contains(&(cur as u32)));
    }
}
