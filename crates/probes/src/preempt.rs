//! `probe preempt`: an osnoise-style spinner per CPU reads CLOCK_MONOTONIC in
//! a tight loop and records every gap above a threshold: time when this
//! thread did not run. Each gap is then explained from the kernel's own
//! evidence:
//!
//! - tracefs (preferred): hard IRQ handlers (device IRQs and x86 vectors),
//!   softirqs and sched_switch on that CPU, timestamped on the same clock.
//!   The part of a gap that no guest event covers is *unexplained*: the guest
//!   did nothing, yet the vCPU did not run, i.e. the hypervisor had it.
//! - counters (fallback, or `no_change`): the spinner's own context-switch
//!   count (exact: another thread ran) and per-CPU /proc/interrupts and
//!   /proc/softirqs deltas per ~100 ms window (an interrupt could explain a
//!   short gap; a long gap with no context switch is unexplained).
//!
//! Unexplained time is reported next to the /proc/stat steal of the same CPU
//! over the same run.

use crate::counters::{self, Counters, CpuCounts};
use crate::error::ProbeError;
use crate::stats::{self, LatencyStats};
use crate::sys::{self, FifoGuard, MlockGuard};
use crate::tracefs::{CpuTrace, TraceData, Tracer};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const STACK: usize = 256 * 1024;
/// Gap records pre-touched per spinner, so recording the first ones takes no
/// page fault (which would itself be a gap).
const INITIAL_GAPS: usize = 1 << 16;
/// At most this many gaps are kept per CPU (24 MB); more are counted only.
const MAX_GAPS: usize = 1 << 20;
/// How often the coordinating thread drains the trace pipe or samples the
/// counters. It runs on the probed CPUs too (its gaps are labelled as this
/// probe's reader); 200 ms keeps that to a few interruptions per second.
const POLL: Duration = Duration::from_millis(200);
/// A guest event always leaves a few µs of its gap uncovered: entry/exit code
/// outside the trace points, the VM exits that an APIC timer or EOI costs,
/// and µs trace timestamps. More than this uncovered, and more than the guest
/// events cover, is the vCPU not running: the gap is classed unexplained.
pub const UNEXPLAINED_DOMINANT_NS: u64 = 10_000;
/// Trace timestamps are printed in whole µs (rounded down): events this much
/// before a gap's start may belong to it.
const TS_SLACK_NS: u64 = 2_000;
/// Uncovered time a guest-caused gap may hold without it counting as the
/// hypervisor's: scheduler and IRQ entry/exit paths outside the trace points
/// (and their VM exits). The ground-truth test measures 15-18 µs of it in a
/// gap made of a timer IRQ and two context switches on a KVM guest.
pub const GUEST_GAP_ALLOWANCE_NS: u64 = 20_000;
/// Counter fallback: an interrupt (handler plus the softirqs run on its exit)
/// is a plausible cause of a gap up to this long. Longer softirq work is
/// usually pushed to ksoftirqd, which is a context switch and counted as a
/// thread; a longer gap without one is classed unexplained.
pub const IRQ_PLAUSIBLE_MAX_NS: u64 = 100_000;

#[derive(Debug, Clone)]
pub struct PreemptOptions {
    /// CPUs to measure; None = every CPU this process may use.
    pub cpus: Option<Vec<u32>>,
    pub duration: Duration,
    /// Gaps at or below this are not recorded (osnoise tolerance); default 5 µs.
    pub threshold: Duration,
    /// SCHED_FIFO priority of the spinners, 1..=99; 0 (default) = SCHED_OTHER,
    /// which shares the CPU with other guest threads (they show as `thread`
    /// gaps) instead of starving them.
    pub priority: u8,
    /// Change nothing on the system: no SCHED_FIFO, no mlock, no tracing
    /// instance or tracefs mount (attribution from counters).
    pub no_change: bool,
    /// Use tracefs when available (default true); false forces counters.
    pub tracefs: bool,
    /// Gap records kept in the report (the longest, in time order); default 20000.
    pub max_gap_records: usize,
}

impl Default for PreemptOptions {
    fn default() -> Self {
        PreemptOptions {
            cpus: None,
            duration: Duration::from_secs(5),
            threshold: Duration::from_micros(5),
            priority: 0,
            no_change: false,
            tracefs: true,
            max_gap_records: 20_000,
        }
    }
}

/// What a gap is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GapClass {
    /// A guest hard IRQ handler (device IRQ, local timer, IPI).
    Irq,
    Softirq,
    /// Another guest thread (including the idle task and this probe's reader).
    Thread,
    /// No guest evidence: the hypervisor did not run the vCPU.
    Unexplained,
}

impl GapClass {
    pub fn as_str(self) -> &'static str {
        match self {
            GapClass::Irq => "irq",
            GapClass::Softirq => "softirq",
            GapClass::Thread => "thread",
            GapClass::Unexplained => "unexplained",
        }
    }
}

/// One gap with its attribution.
#[derive(Debug, Clone, Serialize)]
pub struct Gap {
    pub cpu: u32,
    /// Start, seconds since the run started.
    pub t_s: f64,
    pub us: f64,
    pub class: GapClass,
    /// The main cause within the class ("local_timer", "softirq RCU", a
    /// thread's comm, ...).
    pub source: String,
    pub irq_us: f64,
    pub softirq_us: f64,
    pub thread_us: f64,
    pub unexplained_us: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassStats {
    /// Gaps classed so.
    pub count: u64,
    /// Their total length.
    pub total_us: f64,
    /// The longest of them.
    pub max_us: f64,
    /// Time of this class inside all gaps (a gap can be part IRQ, part
    /// unexplained): the figure for "how much time went where".
    pub time_us: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Classes {
    pub irq: ClassStats,
    pub softirq: ClassStats,
    pub thread: ClassStats,
    pub unexplained: ClassStats,
}

impl Classes {
    fn get_mut(&mut self, c: GapClass) -> &mut ClassStats {
        match c {
            GapClass::Irq => &mut self.irq,
            GapClass::Softirq => &mut self.softirq,
            GapClass::Thread => &mut self.thread,
            GapClass::Unexplained => &mut self.unexplained,
        }
    }
}

/// Gaps by their main cause.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStats {
    pub class: GapClass,
    pub name: String,
    pub gaps: u64,
    pub total_us: f64,
    pub p50_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PreemptCpu {
    pub cpu: u32,
    pub runtime_s: f64,
    pub gaps: u64,
    pub noise_us_per_s: f64,
    /// Share of the run the spinner actually ran (100 - noise).
    pub available_pct: f64,
    pub max_gap_us: f64,
    pub classes: Classes,
    /// The hypervisor's take as seen from inside, at µs resolution: the
    /// uncovered time of unexplained gaps, plus what other gaps hold beyond
    /// [`GUEST_GAP_ALLOWANCE_NS`], as a share of the run.
    pub unexplained_pct: f64,
    /// All time no guest event covers, as a share of the run (upper bound of
    /// `unexplained_pct`: includes entry/exit paths of guest events).
    pub uncovered_pct: f64,
    /// /proc/stat steal on this CPU over the run (10 ms resolution), to
    /// compare with `unexplained_pct`.
    pub steal_pct: Option<f64>,
    pub policy: String,
    /// Lengths of all gaps.
    pub gap_stats: LatencyStats,
    /// Lengths of the unexplained gaps.
    pub unexplained_stats: LatencyStats,
    /// Main causes, most time first (top 20).
    pub sources: Vec<SourceStats>,
    /// Gaps past the per-CPU record limit (counted, not attributed).
    pub dropped_gaps: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PreemptOverall {
    pub noise_us_per_s: f64,
    pub available_pct: f64,
    pub unexplained_pct: f64,
    pub max_gap_us: f64,
    pub max_unexplained_gap_us: f64,
    pub steal_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PreemptReport {
    pub probe: &'static str,
    pub duration_s: f64,
    pub threshold_us: f64,
    pub priority: u8,
    pub policy: String,
    pub memory_locked: bool,
    /// "tracefs" or "counters".
    pub attribution: String,
    /// The tracing instance used, when tracefs.
    pub trace_instance: Option<String>,
    pub trace_events: u64,
    pub trace_lost_events: u64,
    pub cpus: Vec<PreemptCpu>,
    pub overall: PreemptOverall,
    /// The longest gaps (at most `max_gap_records`), in time order.
    pub gaps: Vec<Gap>,
    pub gaps_total: u64,
    pub cpu_time_s: f64,
    pub interrupted: bool,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default)]
struct RawGap {
    start: u64,
    end: u64,
    switched: bool,
}

struct SpinOut {
    tid: i32,
    start: u64,
    end: u64,
    gaps: Vec<RawGap>,
    dropped: u64,
    policy: &'static str,
    fifo_error: Option<nix::Error>,
}

/// The time split of one gap.
#[derive(Debug, Clone, PartialEq)]
struct Split {
    irq: u64,
    softirq: u64,
    thread: u64,
    unexplained: u64,
    class: GapClass,
    source: String,
}

fn validate(o: &PreemptOptions) -> Result<(), ProbeError> {
    if o.duration.is_zero() {
        return Err(ProbeError::Options("duration must be above 0".into()));
    }
    let t = o.threshold.as_nanos();
    if !(100..=1_000_000_000).contains(&t) {
        return Err(ProbeError::Options(
            "threshold must be between 0.1 µs and 1 s".into(),
        ));
    }
    if o.priority > 99 {
        return Err(ProbeError::Options(format!(
            "priority {}: SCHED_FIFO priorities are 1-99 (0 = SCHED_OTHER)",
            o.priority
        )));
    }
    Ok(())
}

fn spin(
    duration: u64,
    threshold: u64,
    stop: &AtomicBool,
    gate: &sys::StartGate,
) -> Option<(u64, u64, Vec<RawGap>, u64)> {
    let mut gaps = vec![RawGap::default(); INITIAL_GAPS];
    gaps.clear();
    // Dry calls: the loop's code is mapped before the first measured gap.
    std::hint::black_box((sys::now_ns(), sys::thread_ctx_switches()));
    if !gate.arrive_and_wait() {
        return None;
    }
    let start = sys::now_ns();
    let end = start + duration;
    let mut csw = sys::thread_ctx_switches();
    let mut dropped = 0u64;
    let mut last = start;
    let mut n: u32 = 0;
    loop {
        let t = sys::now_ns();
        if t.saturating_sub(last) > threshold {
            let c = sys::thread_ctx_switches();
            if gaps.len() < MAX_GAPS {
                gaps.push(RawGap {
                    start: last,
                    end: t,
                    switched: c != csw,
                });
            } else {
                dropped += 1;
            }
            csw = c;
            // The bookkeeping above is not a gap: restart the clock after it.
            last = sys::now_ns();
        } else {
            last = t;
        }
        n = n.wrapping_add(1);
        if n & 0x3ff == 0 && (t >= end || stop.load(Ordering::Relaxed)) {
            return Some((start, last, gaps, dropped));
        }
    }
}

/// Runs the spinners until `duration` passes or `stop` is set, then
/// attributes every gap.
pub fn run(opts: &PreemptOptions, stop: &AtomicBool) -> Result<PreemptReport, ProbeError> {
    validate(opts)?;
    let cpus = crate::resolve_cpus(opts.cpus.as_deref())?;
    let mut notes = Vec::new();
    let want_fifo = opts.priority > 0 && !opts.no_change;
    if opts.no_change {
        notes.push(
            "--no-change: spinners ran SCHED_OTHER without memory lock; no tracing instance \
             was created, so gaps are attributed from counters"
                .to_string(),
        );
    }
    let mut tracer = if opts.no_change || !opts.tracefs {
        None
    } else {
        match Tracer::start(&cpus, true) {
            Ok(t) => Some(t),
            Err(reason) => {
                notes.push(format!(
                    "tracefs unavailable ({reason}): gaps attributed from counters (the spinner's \
                     context switches; per-CPU /proc/interrupts and /proc/softirqs per window) - \
                     threads are exact, IRQ vs hypervisor is inferred"
                ));
                None
            }
        }
    };
    let fallback = tracer.is_none();
    let (mut counters, open_notes) = Counters::open(fallback);
    notes.extend(open_notes);
    let duration = opts.duration.as_nanos() as u64;
    let threshold = opts.threshold.as_nanos() as u64;
    let gate = sys::StartGate::default();
    let setup_error: Mutex<Option<ProbeError>> = Mutex::new(None);
    let mut mlock: Option<MlockGuard> = None;
    let mut memory_locked = false;
    let mut windows: Vec<(u64, Vec<CpuCounts>)> = Vec::new();
    let mut before = Vec::new();
    let mut cpu0 = 0.0;
    let reader_tid = sys::gettid();

    let outs: Vec<Option<SpinOut>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for &cpu in &cpus {
            let (gate, setup_error) = (&gate, &setup_error);
            let h = std::thread::Builder::new()
                .name(format!("ss-preempt/{cpu}"))
                .stack_size(STACK)
                .spawn_scoped(s, move || {
                    let tid = sys::gettid();
                    if let Err(e) = sys::pin_current_thread(cpu) {
                        *setup_error.lock().unwrap() = Some(e);
                        gate.arrive_and_wait();
                        return None;
                    }
                    let (fifo, fifo_error) = FifoGuard::request(want_fifo.then_some(opts.priority));
                    let policy = sys::current_policy();
                    let (start, end, gaps, dropped) = spin(duration, threshold, stop, gate)?;
                    drop(fifo);
                    Some(SpinOut {
                        tid,
                        start,
                        end,
                        gaps,
                        dropped,
                        policy,
                        fifo_error,
                    })
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    *setup_error.lock().unwrap() = Some(ProbeError::spawn(cpu, e));
                    break;
                }
            }
        }
        if gate.settle(handles.len(), cpus.len(), || {
            setup_error.lock().unwrap().is_some()
        }) {
            (mlock, memory_locked) = sys::lock_memory(
                opts.no_change,
                "page faults of the probe may show as gaps",
                &mut notes,
            );
            before = counters.sample(&cpus).unwrap_or_default();
            if fallback {
                windows.push((sys::now_ns(), before.clone()));
            }
            cpu0 = sys::process_cpu_s();
            gate.open();
            while !handles.iter().all(|h| h.is_finished()) {
                std::thread::sleep(POLL);
                if let Some(t) = tracer.as_mut() {
                    t.drain();
                }
                if fallback {
                    if let Ok(c) = counters.sample(&cpus) {
                        windows.push((sys::now_ns(), c));
                    }
                }
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(None))
            .collect()
    });
    let cpu_time_s = sys::process_cpu_s() - cpu0;
    let after = counters.sample(&cpus).unwrap_or_default();
    if fallback {
        windows.push((sys::now_ns(), after.clone()));
    }
    drop(mlock);
    let end_ns = sys::now_ns();
    let trace_instance = tracer.as_ref().map(Tracer::describe);
    let trace: Option<TraceData> = tracer.take().map(|t| t.finish(end_ns));
    if let Some(e) = setup_error.into_inner().unwrap() {
        return Err(e);
    }
    if outs.len() != cpus.len() || outs.iter().any(Option::is_none) {
        return Err(ProbeError::Thread("a probe thread panicked".into()));
    }
    let outs: Vec<SpinOut> = outs.into_iter().flatten().collect();
    if let Some(e) = outs.iter().find_map(|o| o.fifo_error) {
        notes.push(format!(
            "no SCHED_FIFO ({e}): spinners ran SCHED_OTHER, so other guest threads take turns \
             with them (shown as thread gaps)"
        ));
    }
    if let Some(t) = &trace {
        if t.lost > 0 {
            notes.push(format!(
                "the trace lost {} events (buffer overrun): some gaps may be unexplained for \
                 want of evidence",
                t.lost
            ));
        }
    }
    let run_start = outs.iter().map(|o| o.start).min().unwrap_or(0);
    let empty = CpuTrace::default();
    let mut per_cpu = Vec::new();
    let mut all_gaps: Vec<Gap> = Vec::new();
    for (i, (o, &cpu)) in outs.iter().zip(&cpus).enumerate() {
        let runtime_ns = o.end.saturating_sub(o.start).max(1);
        let mut classes = Classes::default();
        let mut hist_all = stats::new_histogram();
        let mut hist_unexpl = stats::new_histogram();
        let mut by_source: HashMap<(GapClass, String), Vec<u64>> = HashMap::new();
        let mut noise = 0u64;
        let mut hypervisor_ns = 0u64;
        let mut counted = if trace.is_none() {
            attribute_counters(&o.gaps, &windows, i).into_iter()
        } else {
            Vec::new().into_iter()
        };
        for g in &o.gaps {
            let len = g.end - g.start;
            let split = match &trace {
                Some(t) => {
                    attribute_traced(g, t.cpus.get(&cpu).unwrap_or(&empty), t, o.tid, reader_tid)
                }
                None => counted.next().expect("one split per gap"),
            };
            noise += len;
            hypervisor_ns += if split.class == GapClass::Unexplained {
                split.unexplained
            } else {
                split.unexplained.saturating_sub(GUEST_GAP_ALLOWANCE_NS)
            };
            stats::record(&mut hist_all, len);
            let c = classes.get_mut(split.class);
            c.count += 1;
            c.total_us += len as f64 / 1e3;
            c.max_us = c.max_us.max(len as f64 / 1e3);
            classes.irq.time_us += split.irq as f64 / 1e3;
            classes.softirq.time_us += split.softirq as f64 / 1e3;
            classes.thread.time_us += split.thread as f64 / 1e3;
            classes.unexplained.time_us += split.unexplained as f64 / 1e3;
            if split.class == GapClass::Unexplained {
                stats::record(&mut hist_unexpl, len);
            }
            by_source
                .entry((split.class, split.source.clone()))
                .or_default()
                .push(len);
            all_gaps.push(Gap {
                cpu,
                t_s: round(g.start.saturating_sub(run_start) as f64 / 1e9, 6),
                us: round(len as f64 / 1e3, 3),
                class: split.class,
                source: split.source,
                irq_us: round(split.irq as f64 / 1e3, 3),
                softirq_us: round(split.softirq as f64 / 1e3, 3),
                thread_us: round(split.thread as f64 / 1e3, 3),
                unexplained_us: round(split.unexplained as f64 / 1e3, 3),
            });
        }
        for c in [
            &mut classes.irq,
            &mut classes.softirq,
            &mut classes.thread,
            &mut classes.unexplained,
        ] {
            c.total_us = round(c.total_us, 3);
            c.max_us = round(c.max_us, 3);
            c.time_us = round(c.time_us, 3);
        }
        let mut sources: Vec<SourceStats> = by_source
            .into_iter()
            .map(|((class, name), mut v)| {
                v.sort_unstable();
                SourceStats {
                    class,
                    name,
                    gaps: v.len() as u64,
                    total_us: round(v.iter().sum::<u64>() as f64 / 1e3, 3),
                    p50_us: round(v[v.len() / 2] as f64 / 1e3, 3),
                    max_us: round(*v.last().unwrap_or(&0) as f64 / 1e3, 3),
                }
            })
            .collect();
        sources.sort_by(|a, b| b.total_us.total_cmp(&a.total_us));
        sources.truncate(20);
        let runtime_s = runtime_ns as f64 / 1e9;
        let steal_pct = match (before.get(i), after.get(i)) {
            (Some(a), Some(b)) => {
                counters::steal_us(a, b).map(|us| round(100.0 * us / 1e6 / runtime_s, 3))
            }
            _ => None,
        };
        let unexplained_ns = classes.unexplained.time_us * 1e3;
        per_cpu.push(PreemptCpu {
            cpu,
            runtime_s: round(runtime_s, 3),
            gaps: o.gaps.len() as u64 + o.dropped,
            noise_us_per_s: round(noise as f64 / 1e3 / runtime_s, 3),
            available_pct: round(100.0 * (1.0 - noise as f64 / runtime_ns as f64), 4),
            max_gap_us: round(
                o.gaps.iter().map(|g| g.end - g.start).max().unwrap_or(0) as f64 / 1e3,
                3,
            ),
            classes,
            unexplained_pct: round(100.0 * hypervisor_ns as f64 / runtime_ns as f64, 4),
            uncovered_pct: round(100.0 * unexplained_ns / runtime_ns as f64, 4),
            steal_pct,
            policy: o.policy.to_string(),
            gap_stats: LatencyStats::from_histogram(Some(cpu), &hist_all),
            unexplained_stats: LatencyStats::from_histogram(Some(cpu), &hist_unexpl),
            sources,
            dropped_gaps: o.dropped,
        });
        if o.dropped > 0 {
            notes.push(format!(
                "CPU {cpu}: {} gaps past the record limit were counted but not attributed",
                o.dropped
            ));
        }
    }
    let gaps_total = all_gaps.len() as u64;
    if all_gaps.len() > opts.max_gap_records {
        all_gaps.sort_by(|a, b| b.us.total_cmp(&a.us));
        all_gaps.truncate(opts.max_gap_records);
    }
    all_gaps.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let n = per_cpu.len().max(1) as f64;
    let mean = |f: &dyn Fn(&PreemptCpu) -> f64| per_cpu.iter().map(f).sum::<f64>() / n;
    let steal: Vec<f64> = per_cpu.iter().filter_map(|c| c.steal_pct).collect();
    let overall = PreemptOverall {
        noise_us_per_s: round(mean(&|c| c.noise_us_per_s), 3),
        available_pct: round(mean(&|c| c.available_pct), 4),
        unexplained_pct: round(mean(&|c| c.unexplained_pct), 4),
        max_gap_us: per_cpu.iter().map(|c| c.max_gap_us).fold(0.0, f64::max),
        max_unexplained_gap_us: per_cpu
            .iter()
            .map(|c| c.classes.unexplained.max_us)
            .fold(0.0, f64::max),
        steal_pct: (steal.len() == per_cpu.len() && !steal.is_empty())
            .then(|| round(steal.iter().sum::<f64>() / steal.len() as f64, 3)),
    };
    let policy = if outs.iter().all(|o| o.policy == "fifo") {
        "fifo"
    } else {
        "other"
    };
    Ok(PreemptReport {
        probe: "preempt",
        duration_s: round(
            outs.iter()
                .map(|o| o.end.saturating_sub(o.start))
                .max()
                .unwrap_or(0) as f64
                / 1e9,
            3,
        ),
        threshold_us: opts.threshold.as_nanos() as f64 / 1e3,
        priority: opts.priority,
        policy: policy.to_string(),
        memory_locked,
        attribution: if trace.is_some() {
            "tracefs"
        } else {
            "counters"
        }
        .to_string(),
        trace_instance,
        trace_events: trace.as_ref().map_or(0, |t| t.events),
        trace_lost_events: trace.as_ref().map_or(0, |t| t.lost),
        cpus: per_cpu,
        overall,
        gaps: all_gaps,
        gaps_total,
        cpu_time_s: round(cpu_time_s, 3),
        interrupted: stop.load(Ordering::Relaxed),
        notes,
    })
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// Total length of the union of intervals (sorted in place).
fn union_len(v: &mut [(u64, u64)]) -> u64 {
    v.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for &(a, b) in v.iter() {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    if let Some((a, b)) = cur {
        total += b - a;
    }
    total
}

/// Spans of a time-ordered, non-overlapping list that overlap [a, b),
/// clipped to it, with their name.
fn clipped<T: Copy>(
    list: &[T],
    a: u64,
    b: u64,
    bounds: impl Fn(&T) -> (u64, u64),
    out: &mut Vec<(u64, u64, T)>,
) {
    let first = list.partition_point(|s| bounds(s).1 <= a);
    for s in &list[first..] {
        let (sa, sb) = bounds(s);
        if sa >= b {
            break;
        }
        let (ca, cb) = (sa.max(a), sb.min(b));
        if cb > ca {
            out.push((ca, cb, *s));
        }
    }
}

/// Splits one gap by the trace of its CPU: hard IRQ first, then softirq,
/// then other tasks; the rest is unexplained.
fn attribute_traced(
    g: &RawGap,
    t: &CpuTrace,
    data: &TraceData,
    spinner: i32,
    reader: i32,
) -> Split {
    let (a, b) = (g.start, g.end);
    let mut irq = Vec::new();
    clipped(&t.irq, a, b, |s| (s.start, s.end), &mut irq);
    let mut soft = Vec::new();
    clipped(&t.softirq, a, b, |s| (s.start, s.end), &mut soft);
    // Likewise for a handler whose exit was lost (spans end at the next exit).
    irq.retain(|(_, _, s)| s.start + TS_SLACK_NS >= a);
    soft.retain(|(_, _, s)| s.start + TS_SLACK_NS >= a);
    let mut tasks = Vec::new();
    clipped(&t.tasks, a, b, |s| (s.start, s.end), &mut tasks);
    // The spinner ran at `a` (it read the clock), so another task's span
    // can only explain this gap if it starts in it; one that starts earlier
    // overran its real end because a switch was not recorded.
    tasks.retain(|(_, _, s)| s.pid != spinner && s.start + TS_SLACK_NS >= a);

    let mut v: Vec<(u64, u64)> = irq.iter().map(|&(x, y, _)| (x, y)).collect();
    let hard = union_len(&mut v);
    v.extend(soft.iter().map(|&(x, y, _)| (x, y)));
    let hs = union_len(&mut v);
    v.extend(tasks.iter().map(|&(x, y, _)| (x, y)));
    let all = union_len(&mut v);
    let len = b - a;
    let split_irq = hard;
    let split_soft = hs - hard;
    let split_thread = all - hs;
    let unexplained = len.saturating_sub(all);
    let explained = all;
    let class =
        if explained == 0 || (unexplained > explained && unexplained >= UNEXPLAINED_DOMINANT_NS) {
            GapClass::Unexplained
        } else if split_thread >= split_irq && split_thread >= split_soft {
            GapClass::Thread
        } else if split_irq >= split_soft {
            GapClass::Irq
        } else {
            GapClass::Softirq
        };
    let top = |items: Vec<(u32, u64)>| -> Option<u32> {
        let mut m: HashMap<u32, u64> = HashMap::new();
        for (n, d) in items {
            *m.entry(n).or_default() += d;
        }
        m.into_iter()
            .max_by_key(|&(n, d)| (d, u32::MAX - n))
            .map(|(n, _)| n)
    };
    let source = match class {
        GapClass::Irq => top(irq.iter().map(|&(x, y, s)| (s.name, y - x)).collect())
            .map(|n| data.name(n).to_string()),
        GapClass::Softirq => top(soft.iter().map(|&(x, y, s)| (s.name, y - x)).collect())
            .map(|n| data.name(n).to_string()),
        GapClass::Thread => {
            let pid_of: HashMap<u32, i32> = tasks.iter().map(|(_, _, s)| (s.name, s.pid)).collect();
            top(tasks.iter().map(|&(x, y, s)| (s.name, y - x)).collect()).map(|n| {
                if pid_of.get(&n) == Some(&reader) {
                    format!("{} (this probe's reader)", data.name(n))
                } else {
                    data.name(n).to_string()
                }
            })
        }
        GapClass::Unexplained => Some("hypervisor (no guest event)".to_string()),
    }
    .unwrap_or_else(|| "?".to_string());
    Split {
        irq: split_irq,
        softirq: split_soft,
        thread: split_thread,
        unexplained,
        class,
        source,
    }
}

fn whole(len: u64, class: GapClass, source: &str) -> Split {
    let mut s = Split {
        irq: 0,
        softirq: 0,
        thread: 0,
        unexplained: 0,
        class,
        source: source.to_string(),
    };
    match class {
        GapClass::Irq => s.irq = len,
        GapClass::Softirq => s.softirq = len,
        GapClass::Thread => s.thread = len,
        GapClass::Unexplained => s.unexplained = len,
    }
    s
}

/// Counter fallback for the gaps of the CPU at index `i` of the windows:
/// a context switch across the gap means another thread (exact). Otherwise
/// each hard IRQ counted in the gap's window can explain at most one gap no
/// longer than [`IRQ_PLAUSIBLE_MAX_NS`] (softirqs on IRQ exit ride in the
/// same gap; with no hard IRQ counted, softirqs take that role). Gaps beyond
/// that budget, and longer gaps, are unexplained. The shortest gaps get the
/// budget first: guest handlers are short, hypervisor stalls are not.
fn attribute_counters(gaps: &[RawGap], windows: &[(u64, Vec<CpuCounts>)], i: usize) -> Vec<Split> {
    let mut out: Vec<Option<Split>> = vec![None; gaps.len()];
    // Candidates per window: (window, len, gap index).
    let mut cand: Vec<(usize, u64, usize)> = Vec::new();
    for (j, g) in gaps.iter().enumerate() {
        let len = g.end - g.start;
        if g.switched {
            out[j] = Some(whole(
                len,
                GapClass::Thread,
                "another thread (context-switch counter)",
            ));
        } else if len > IRQ_PLAUSIBLE_MAX_NS {
            out[j] = Some(whole(
                len,
                GapClass::Unexplained,
                "hypervisor (no context switch; too long for an interrupt)",
            ));
        } else {
            // The window holding the gap's end: the first sample at or after it.
            cand.push((windows.partition_point(|w| w.0 < g.end), len, j));
        }
    }
    cand.sort_unstable();
    let delta = |k: usize, f: fn(&CpuCounts) -> Option<u64>| -> Option<u64> {
        if k == 0 || k >= windows.len() {
            return None;
        }
        let (a, b) = (windows[k - 1].1.get(i)?, windows[k].1.get(i)?);
        Some(f(b)?.saturating_sub(f(a)?))
    };
    let mut start = 0;
    while start < cand.len() {
        let k = cand[start].0;
        let end = start + cand[start..].iter().take_while(|c| c.0 == k).count();
        let (irqs, softs) = (delta(k, |c| c.irqs), delta(k, |c| c.softirqs));
        let (budget, class, source) = match (irqs, softs) {
            (Some(n), _) if n > 0 => (n, GapClass::Irq, "interrupt (counter-inferred)"),
            (Some(0), Some(n)) => (n, GapClass::Softirq, "softirq (counter-inferred)"),
            // Counters unavailable: cannot bound, give the guest the benefit.
            (None, _) => (u64::MAX, GapClass::Irq, "interrupt (counter-inferred)"),
            _ => (0, GapClass::Irq, ""),
        };
        for (n, &(_, len, j)) in cand[start..end].iter().enumerate() {
            out[j] = Some(if (n as u64) < budget {
                whole(len, class, source)
            } else if budget == 0 {
                whole(
                    len,
                    GapClass::Unexplained,
                    "hypervisor (no context switch, no interrupt in the window)",
                )
            } else {
                whole(
                    len,
                    GapClass::Unexplained,
                    "hypervisor (more gaps than interrupts in the window)",
                )
            });
        }
        start = end;
    }
    out.into_iter()
        .map(|s| s.expect("every gap is classified"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(lines: &[&str]) -> TraceData {
        let mut d = TraceData::default();
        for l in lines {
            d.line(l);
        }
        d.close(10_000_000_000);
        d
    }

    fn gap(start_us: u64, end_us: u64) -> RawGap {
        RawGap {
            start: start_us * 1000,
            end: end_us * 1000,
            switched: false,
        }
    }

    #[test]
    fn union_of_overlaps() {
        assert_eq!(union_len(&mut [(0, 10), (5, 15), (20, 30)]), 25);
        assert_eq!(union_len(&mut []), 0);
        assert_eq!(union_len(&mut [(5, 6), (0, 10)]), 10);
    }

    #[test]
    fn thread_burst_is_a_thread_gap() {
        // Spinner pid 100 switched out at 1.000010 for a 200 µs burst of pid 7.
        let d = trace(&[
            "s-100 [001] d..2. 1.000010: sched_switch: prev_comm=s prev_pid=100 prev_prio=120 prev_state=R ==> next_comm=gt-burst next_pid=7 next_prio=0",
            "gt-burst-7 [001] d..2. 1.000210: sched_switch: prev_comm=gt-burst prev_pid=7 prev_prio=0 prev_state=S ==> next_comm=s next_pid=100 next_prio=120",
        ]);
        let s = attribute_traced(&gap(1_000_009, 1_000_212), &d.cpus[&1], &d, 100, 1);
        assert_eq!(s.class, GapClass::Thread);
        assert_eq!(s.source, "gt-burst");
        assert_eq!(s.thread, 200_000);
        assert_eq!(s.unexplained, 3_000);
    }

    #[test]
    fn timer_irq_gap_and_hypervisor_gap() {
        let d = trace(&[
            "s-100 [000] d.h.. 2.000100: local_timer_entry: vector=236",
            "s-100 [000] d.h.. 2.000104: local_timer_exit: vector=236",
            "s-100 [000] ..s.. 2.000105: softirq_entry: vec=1 [action=TIMER]",
            "s-100 [000] ..s.. 2.000107: softirq_exit: vec=1 [action=TIMER]",
            "s-100 [000] d.h.. 2.018500: local_timer_entry: vector=236",
            "s-100 [000] d.h.. 2.018503: local_timer_exit: vector=236",
        ]);
        let c = &d.cpus[&0];
        // 9 µs gap: 4 µs IRQ, 2 µs softirq, 3 µs uncovered -> IRQ.
        let s = attribute_traced(&gap(2_000_099, 2_000_108), c, &d, 100, 1);
        assert_eq!(s.class, GapClass::Irq);
        assert_eq!(s.source, "local_timer");
        assert_eq!((s.irq, s.softirq, s.unexplained), (4_000, 2_000, 3_000));
        // 18.4 ms gap that ends with the pending timer being delivered: the
        // guest explains 3 µs of it, so it is the hypervisor's.
        let s = attribute_traced(&gap(2_000_110, 2_018_510), c, &d, 100, 1);
        assert_eq!(s.class, GapClass::Unexplained);
        assert_eq!(s.irq, 3_000);
        assert_eq!(s.unexplained, 18_400_000 - 3_000);
        // Nothing at all in the gap: unexplained even when short.
        let s = attribute_traced(&gap(3_000_000, 3_000_006), c, &d, 100, 1);
        assert_eq!(s.class, GapClass::Unexplained);
    }

    #[test]
    fn a_span_that_overran_a_lost_switch_explains_nothing_later() {
        // Spinner 100 blocks (gate) at 1.000010 and the idle task runs; the
        // switch back to the spinner is not in the trace (as on 6.18).
        // A later gap with no event is the hypervisor's, not swapper's.
        let d = trace(&[
            "s-100 [001] d..2. 1.000010: sched_switch: prev_comm=s prev_pid=100 prev_prio=49 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
            "s-100 [001] d..2. 1.900000: sched_switch: prev_comm=s prev_pid=100 prev_prio=49 prev_state=R ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        ]);
        let c = &d.cpus[&1];
        let s = attribute_traced(&gap(1_500_000, 1_500_030), c, &d, 100, 1);
        assert_eq!(s.class, GapClass::Unexplained);
        // The gap that starts with the recorded switch is the idle task's.
        let s = attribute_traced(&gap(1_899_999, 1_950_000), c, &d, 100, 1);
        assert_eq!(s.class, GapClass::Thread);
        assert_eq!(s.source, "swapper/1");
    }

    #[test]
    fn the_readers_own_gaps_are_labelled() {
        let d = trace(&[
            "s-100 [000] d..2. 1.000010: sched_switch: prev_comm=s prev_pid=100 prev_prio=120 prev_state=R ==> next_comm=stealscope next_pid=55 next_prio=120",
            "x-55 [000] d..2. 1.000050: sched_switch: prev_comm=stealscope prev_pid=55 prev_prio=120 prev_state=S ==> next_comm=s next_pid=100 next_prio=120",
        ]);
        let s = attribute_traced(&gap(1_000_009, 1_000_051), &d.cpus[&0], &d, 100, 55);
        assert_eq!(s.source, "stealscope (this probe's reader)");
    }

    #[test]
    fn counter_fallback() {
        let w = |t: u64, irqs: u64, softirqs: u64| {
            (
                t,
                vec![CpuCounts {
                    steal_ticks: Some(0),
                    irqs: Some(irqs),
                    softirqs: Some(softirqs),
                }],
            )
        };
        // Window 1 (0-100 ms): no interrupt. Window 2: 2 IRQs. Window 3:
        // softirqs only.
        let windows = vec![
            w(0, 10, 5),
            w(100_000_000, 10, 5),
            w(200_000_000, 12, 9),
            w(300_000_000, 12, 10),
        ];
        let mut switched = gap(50_000, 50_500);
        switched.switched = true;
        let gaps = [
            gap(50_000, 50_020),   // no IRQ in window 1
            switched,              // another thread
            gap(150_000, 150_020), // 20 µs: IRQ
            gap(160_000, 160_030), // 30 µs: IRQ (budget 2)
            gap(170_000, 170_040), // 40 µs: over budget
            gap(180_000, 182_000), // 2 ms: too long for an IRQ
            gap(250_000, 250_010), // softirq only in window 3
        ];
        let s: Vec<GapClass> = attribute_counters(&gaps, &windows, 0)
            .iter()
            .map(|s| s.class)
            .collect();
        use GapClass::*;
        assert_eq!(
            s,
            [
                Unexplained,
                Thread,
                Irq,
                Irq,
                Unexplained,
                Unexplained,
                Softirq
            ]
        );
        let s = attribute_counters(&gaps[5..6], &windows, 0);
        assert_eq!(s[0].unexplained, 2_000_000);
    }

    #[test]
    fn no_change_run_with_counters() {
        let _serial = crate::test_lock();
        let stop = AtomicBool::new(false);
        let r = run(
            &PreemptOptions {
                cpus: Some(vec![0]),
                duration: Duration::from_millis(300),
                no_change: true,
                ..Default::default()
            },
            &stop,
        )
        .unwrap();
        assert_eq!(r.attribution, "counters");
        assert!(r.trace_instance.is_none());
        let c = &r.cpus[0];
        assert!(c.runtime_s >= 0.29 && c.runtime_s < 1.0, "{}", c.runtime_s);
        assert!(c.available_pct <= 100.0 && c.available_pct > 0.0);
        let classed = c.classes.irq.count
            + c.classes.softirq.count
            + c.classes.thread.count
            + c.classes.unexplained.count;
        assert_eq!(classed, c.gaps);
        assert_eq!(r.gaps.len() as u64, r.gaps_total.min(20_000));
        assert!(r.gaps.iter().all(|g| g.us > 5.0));
        assert!(r.notes.iter().any(|n| n.contains("--no-change")));
    }
}
