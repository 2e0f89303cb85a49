//! `probe wakeup`: the cyclictest measurement. One thread per CPU, pinned,
//! SCHED_FIFO, memory locked, sleeping with `clock_nanosleep(TIMER_ABSTIME)`
//! to absolute deadlines `interval` apart; the latency of each wake-up is
//! now - deadline. Every sample goes into an HDR histogram (no cap).
//! Optionally holds a PM QoS CPU latency limit for the run.

use crate::counters::{self, Counters, CpuCounts};
use crate::error::ProbeError;
use crate::harness::{self, ThreadCtx};
use crate::round;
use crate::stats::{self, LatencyStats};
use crate::sys::{self, FifoGuard, MlockGuard, PmQosGuard};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct WakeupOptions {
    /// CPUs to measure; None = every CPU this process may use.
    pub cpus: Option<Vec<u32>>,
    pub duration: Duration,
    /// Period between deadlines (cyclictest -i); default 1000 µs.
    pub interval: Duration,
    /// SCHED_FIFO priority 1..=99; 0 = stay SCHED_OTHER. Default 95 (cyclictest -p95 habit).
    pub priority: u8,
    /// Hold /dev/cpu_dma_latency at this many µs for the run (0 = no deep C-states).
    pub pm_qos_us: Option<u32>,
    /// Change nothing on the system: no SCHED_FIFO, no mlock, no PM QoS.
    pub no_change: bool,
}

impl Default for WakeupOptions {
    fn default() -> Self {
        WakeupOptions {
            cpus: None,
            duration: Duration::from_secs(5),
            interval: Duration::from_micros(1000),
            priority: 95,
            pm_qos_us: None,
            no_change: false,
        }
    }
}

/// One CPU's figures (the stats flattened into the object).
#[derive(Debug, Clone, Serialize)]
pub struct WakeupCpu {
    #[serde(flatten)]
    pub stats: LatencyStats,
    /// Deadlines skipped because the thread woke after the next one was due.
    pub overruns: u64,
    /// Steal on this CPU during the run (/proc/stat, 10 ms resolution).
    pub steal_pct: Option<f64>,
    /// Scheduling policy the thread actually ran with.
    pub policy: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct WakeupReport {
    pub probe: &'static str,
    pub duration_s: f64,
    pub interval_us: f64,
    /// Requested priority (0 = SCHED_OTHER).
    pub priority: u8,
    /// "fifo" when every thread got SCHED_FIFO, else "other".
    pub policy: String,
    pub memory_locked: bool,
    /// The PM QoS limit held during the run, if one was.
    pub pm_qos_us: Option<u32>,
    pub cpus: Vec<WakeupCpu>,
    pub overall: LatencyStats,
    /// User+system CPU time this process spent during the run (overhead).
    pub cpu_time_s: f64,
    /// Whether the run ended early because the stop flag was set.
    pub interrupted: bool,
    /// What could not be done as asked, and what that means for the figures.
    pub notes: Vec<String>,
}

struct ThreadOut {
    hist: Histogram<u64>,
    overruns: u64,
    policy: &'static str,
    fifo_error: Option<nix::Error>,
}

fn validate(o: &WakeupOptions) -> Result<(), ProbeError> {
    if o.duration.is_zero() {
        return Err(ProbeError::Options("duration must be above 0".into()));
    }
    let us = o.interval.as_micros();
    if !(10..=1_000_000).contains(&us) {
        return Err(ProbeError::Options(format!(
            "interval {us} µs: must be between 10 µs and 1 s"
        )));
    }
    if o.priority > 99 {
        return Err(ProbeError::Options(format!(
            "priority {}: SCHED_FIFO priorities are 1-99 (0 = SCHED_OTHER)",
            o.priority
        )));
    }
    Ok(())
}

/// The threads' results and the readings taken around them, with the
/// memory lock and PM QoS limit released.
struct Measured {
    outs: Vec<ThreadOut>,
    memory_locked: bool,
    before: Vec<CpuCounts>,
    after: Vec<CpuCounts>,
    wall_s: f64,
    cpu_time_s: f64,
}

/// Measures wake-up latency until `duration` passes or `stop` is set.
pub fn run(opts: &WakeupOptions, stop: &AtomicBool) -> Result<WakeupReport, ProbeError> {
    validate(opts)?;
    let cpus = crate::resolve_cpus(opts.cpus.as_deref())?;
    let mut notes = Vec::new();
    if opts.no_change {
        notes.push(
            "--no-change: ran SCHED_OTHER without memory lock or PM QoS; latencies include \
             guest scheduling and page faults"
                .to_string(),
        );
    } else if opts.priority == 0 {
        notes.push("priority 0: ran SCHED_OTHER as asked".to_string());
    }
    // PM QoS first: a failure is a note, and the guard releases it on every
    // path below, including `?` returns and panics.
    let pm_qos = hold_pm_qos(opts, &mut notes);
    let pm_qos_held = pm_qos.as_ref().and(opts.pm_qos_us);
    let m = measure(opts, &cpus, stop, pm_qos, &mut notes)?;
    if let Some(e) = m.outs.iter().find_map(|o| o.fifo_error) {
        notes.push(format!(
            "no SCHED_FIFO ({e}): ran SCHED_OTHER; latencies include guest scheduling \
             (run as root or with CAP_SYS_NICE for the real-time figure)"
        ));
    }
    let (per_cpu, all) = per_cpu(&m, &cpus);
    let policy = if m.outs.iter().all(|o| o.policy == "fifo") {
        "fifo"
    } else {
        "other"
    };
    Ok(WakeupReport {
        probe: "wakeup",
        duration_s: round(m.wall_s, 2),
        interval_us: opts.interval.as_nanos() as f64 / 1000.0,
        priority: opts.priority,
        policy: policy.to_string(),
        memory_locked: m.memory_locked,
        pm_qos_us: pm_qos_held,
        cpus: per_cpu,
        overall: LatencyStats::from_histogram(None, &all),
        cpu_time_s: round(m.cpu_time_s, 3),
        interrupted: stop.load(Ordering::Relaxed),
        notes,
    })
}

/// The PM QoS limit, held if asked and allowed; a note says when it is not.
fn hold_pm_qos(opts: &WakeupOptions, notes: &mut Vec<String>) -> Option<PmQosGuard> {
    match (opts.pm_qos_us, opts.no_change) {
        (Some(us), false) => match PmQosGuard::hold(us) {
            Ok(g) => Some(g),
            Err(e) => {
                notes.push(format!(
                    "PM QoS not held ({}: {e}); deep C-state exits may add latency",
                    sys::PM_QOS_PATH
                ));
                None
            }
        },
        (Some(_), true) => {
            notes.push("--no-change: PM QoS limit not held".to_string());
            None
        }
        _ => None,
    }
}

/// One measuring thread: SCHED_FIFO if asked and allowed, then sleep to
/// each deadline and record how late it woke.
fn measure_thread(
    opts: &WakeupOptions,
    want_fifo: bool,
    stop: &AtomicBool,
    ctx: &ThreadCtx,
) -> Option<ThreadOut> {
    let interval = opts.interval.as_nanos() as u64;
    let duration = opts.duration.as_nanos() as u64;
    let mut hist = stats::new_histogram();
    let (fifo, fifo_error) = FifoGuard::request(want_fifo.then_some(opts.priority));
    let policy = sys::current_policy();
    // One dry pass through the loop's calls, so their code is
    // mapped (and locked) before the first real deadline.
    let _ = sys::sleep_until(sys::now_ns());
    stats::record(&mut hist, 1);
    hist.reset();
    if !ctx.start() {
        return None;
    }
    let start = sys::now_ns();
    let end = start + duration;
    let mut next = start + interval;
    let mut overruns = 0;
    while next <= end && !stop.load(Ordering::Relaxed) {
        match sys::sleep_until(next) {
            Ok(()) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                ctx.fail(ProbeError::sys("clock_nanosleep", e));
                break;
            }
        }
        let now = sys::now_ns();
        stats::record(&mut hist, now.saturating_sub(next));
        next += interval;
        while next <= now {
            next += interval;
            overruns += 1;
        }
    }
    drop(fifo);
    Some(ThreadOut {
        hist,
        overruns,
        policy,
        fifo_error,
    })
}

/// Runs a measuring thread per CPU, with memory locked and the counters
/// read around the run; releases the lock and `pm_qos` at the end.
fn measure(
    opts: &WakeupOptions,
    cpus: &[u32],
    stop: &AtomicBool,
    pm_qos: Option<PmQosGuard>,
    notes: &mut Vec<String>,
) -> Result<Measured, ProbeError> {
    let want_fifo = opts.priority > 0 && !opts.no_change;
    let (mut counters, _) = Counters::open(false);
    let mut mlock: Option<MlockGuard> = None;
    let mut memory_locked = false;
    let mut before = Vec::new();
    let mut cpu0 = 0.0;
    let mut wall = 0u64;

    let outs = harness::run_per_cpu(
        "ss-wakeup",
        cpus,
        |_, ctx| measure_thread(opts, want_fifo, stop, ctx),
        |control| {
            // Every thread has its histogram and stack: lock it all now, so
            // the measurement takes no page faults.
            (mlock, memory_locked) =
                sys::lock_memory(opts.no_change, "page faults may add latency", notes);
            before = counters.sample(cpus).unwrap_or_default();
            cpu0 = sys::process_cpu_s();
            wall = sys::now_ns();
            control.open();
        },
    );
    let wall_s = sys::now_ns().saturating_sub(wall) as f64 / 1e9;
    let cpu_time_s = sys::process_cpu_s() - cpu0;
    let after = counters.sample(cpus).unwrap_or_default();
    drop(mlock);
    drop(pm_qos);
    Ok(Measured {
        outs: outs?,
        memory_locked,
        before,
        after,
        wall_s,
        cpu_time_s,
    })
}

/// Each CPU's figures with its steal over the run, and all samples merged.
fn per_cpu(m: &Measured, cpus: &[u32]) -> (Vec<WakeupCpu>, Histogram<u64>) {
    let mut all = stats::new_histogram();
    let mut per_cpu = Vec::new();
    for (i, (o, &cpu)) in m.outs.iter().zip(cpus).enumerate() {
        let _ = all.add(&o.hist);
        let steal_pct = match (m.before.get(i), m.after.get(i)) {
            (Some(a), Some(b)) if m.wall_s > 0.0 => {
                counters::steal_us(a, b).map(|us| round(100.0 * us / 1e6 / m.wall_s, 2))
            }
            _ => None,
        };
        per_cpu.push(WakeupCpu {
            stats: LatencyStats::from_histogram(Some(cpu), &o.hist),
            overruns: o.overruns,
            steal_pct,
            policy: o.policy.to_string(),
        });
    }
    (per_cpu, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_options() {
        let stop = AtomicBool::new(false);
        let bad = [
            WakeupOptions {
                duration: Duration::ZERO,
                ..Default::default()
            },
            WakeupOptions {
                interval: Duration::from_micros(1),
                ..Default::default()
            },
            WakeupOptions {
                priority: 100,
                ..Default::default()
            },
            WakeupOptions {
                cpus: Some(vec![4096]),
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(matches!(run(&o, &stop), Err(ProbeError::Options(_))));
        }
    }

    #[test]
    fn no_change_run_counts_every_wakeup() {
        let _serial = crate::test_lock();
        let stop = AtomicBool::new(false);
        let o = WakeupOptions {
            cpus: Some(vec![0]),
            duration: Duration::from_millis(300),
            interval: Duration::from_micros(1000),
            no_change: true,
            pm_qos_us: Some(0),
            ..Default::default()
        };
        let r = run(&o, &stop).unwrap();
        assert_eq!(r.cpus.len(), 1);
        let c = &r.cpus[0];
        assert_eq!(c.stats.cpu, Some(0));
        // 300 deadlines minus the ones skipped as overruns.
        let deadlines = c.stats.samples + c.overruns;
        assert!((300..=302).contains(&deadlines), "{c:?}");
        assert!(c.stats.samples >= 200);
        assert!(c.stats.p50_us > 0.0 && c.stats.p50_us <= c.stats.p99_us);
        assert!(c.stats.p99_us <= c.stats.max_us);
        assert_eq!(r.policy, "other");
        assert!(!r.memory_locked);
        assert_eq!(r.pm_qos_us, None);
        assert!(r.notes.iter().any(|n| n.contains("--no-change")));
        assert_eq!(r.overall.samples, c.stats.samples);
        let v = stealscope_findings::Evidence::of(&r);
        let Some(stealscope_findings::Evidence::List(cpus)) = v.get("cpus") else {
            panic!("no cpus list in {v}");
        };
        for k in ["cpu", "samples", "p50_us", "p99_us", "p999_us", "max_us"] {
            assert!(cpus[0].get(k).is_some(), "missing {k}");
        }
    }

    #[test]
    fn stop_flag_ends_the_run_at_once() {
        let _serial = crate::test_lock();
        let stop = AtomicBool::new(true);
        let o = WakeupOptions {
            duration: Duration::from_secs(30),
            no_change: true,
            ..Default::default()
        };
        let t = std::time::Instant::now();
        let r = run(&o, &stop).unwrap();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(r.interrupted);
    }
}
