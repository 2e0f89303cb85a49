//! `probe throughput`: a fixed compute kernel (a 48x48 f64 matrix multiply,
//! ~55 KB of data: L2-resident, so a neighbour that evicts caches shows up as
//! well as lost time) on one pinned SCHED_OTHER thread per CPU, counting
//! operations per short window next to that window's /proc/stat steal and the
//! thread's own "did not run" share (wall minus its CPU time; the kernel does
//! not charge stolen time to tasks). Seeing "4% reported steal cost 26%
//! throughput" for oneself is the point.
//!
//! Changes nothing on the system (no priority, no lock, no PM QoS).

use crate::error::ProbeError;
use crate::harness;
use crate::round;
use crate::sys;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use stealscope_readers::pread::PreadFile;
use stealscope_readers::stat::{self, ProcStat};

/// Matrix side: 3 matrices of 48x48 f64 = 55 KB, past L1, inside L2.
const N: usize = 48;
/// Windows whose ops/s are at or above this quantile of the CPU's windows
/// define its baseline ("what this CPU does when nothing gets in the way").
const BASELINE_QUANTILE: f64 = 0.9;

#[derive(Debug, Clone)]
pub struct ThroughputOptions {
    pub cpus: Option<Vec<u32>>,
    pub duration: Duration,
    /// Length of one window; default 100 ms.
    pub window: Duration,
}

impl Default for ThroughputOptions {
    fn default() -> Self {
        ThroughputOptions {
            cpus: None,
            duration: Duration::from_secs(5),
            window: Duration::from_millis(100),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// Start, seconds since the run started.
    pub t_s: f64,
    pub ops_per_s: f64,
    /// /proc/stat steal of this CPU in the window (10 ms ticks: coarse).
    pub steal_pct: Option<f64>,
    /// Share of the window the thread did not run (steal, IRQs, other threads).
    pub not_running_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputCpu {
    pub cpu: u32,
    pub ops: u64,
    pub ops_per_s: f64,
    /// The p90 window: what this CPU does undisturbed.
    pub baseline_ops_per_s: f64,
    /// Throughput lost against the baseline over the whole run.
    pub loss_pct: f64,
    pub steal_pct: Option<f64>,
    pub not_running_pct: f64,
    /// Ops per second of CPU time the thread actually got: a drop here with
    /// little time lost means cache/TLB state lost to a neighbour.
    pub ops_per_cpu_s: f64,
    /// Windows with any reported steal, their mean steal and mean loss.
    pub steal_windows: u64,
    pub steal_window_steal_pct: Option<f64>,
    pub steal_window_loss_pct: Option<f64>,
    pub windows: Vec<Window>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputReport {
    pub probe: &'static str,
    pub kernel: String,
    pub duration_s: f64,
    pub window_ms: f64,
    pub cpus: Vec<ThroughputCpu>,
    /// One sentence: reported steal against throughput lost.
    pub summary: String,
    pub cpu_time_s: f64,
    pub interrupted: bool,
    pub notes: Vec<String>,
}

struct Kernel {
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
}

impl Kernel {
    fn new(seed: u64) -> Kernel {
        let mut x = seed | 1;
        let mut rnd = || {
            // xorshift: fixed, cheap, no dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 1000) as f64 / 1000.0
        };
        Kernel {
            a: (0..N * N).map(|_| rnd()).collect(),
            b: (0..N * N).map(|_| rnd()).collect(),
            c: vec![0.0; N * N],
        }
    }

    /// One op: C = A x B.
    #[inline(never)]
    fn op(&mut self) {
        let (a, b) = (std::hint::black_box(&self.a), std::hint::black_box(&self.b));
        self.c.fill(0.0);
        for i in 0..N {
            for k in 0..N {
                let aik = a[i * N + k];
                let row = &b[k * N..k * N + N];
                let out = &mut self.c[i * N..i * N + N];
                for j in 0..N {
                    out[j] += aik * row[j];
                }
            }
        }
        std::hint::black_box(&self.c);
    }
}

struct RawWindow {
    start: u64,
    end: u64,
    ops: u64,
    cpu_ns: u64,
    steal_ticks: Option<u64>,
}

fn steal_ticks(f: &mut Option<PreadFile>, parsed: &mut ProcStat, cpu: u32) -> Option<u64> {
    let text = f.as_mut()?.read_text().ok()?;
    stat::parse_into(text, stat::PATH, true, parsed).ok()?;
    parsed.cpu(cpu).and_then(|t| t.steal)
}

pub fn run(opts: &ThroughputOptions, stop: &AtomicBool) -> Result<ThroughputReport, ProbeError> {
    if opts.duration.is_zero() {
        return Err(ProbeError::Options("duration must be above 0".into()));
    }
    let win = opts.window.as_nanos() as u64;
    if !(10_000_000..=10_000_000_000).contains(&win) {
        return Err(ProbeError::Options(
            "window must be between 10 ms and 10 s".into(),
        ));
    }
    let cpus = crate::resolve_cpus(opts.cpus.as_deref())?;
    let mut notes = Vec::new();
    let duration = opts.duration.as_nanos() as u64;
    let mut cpu0 = 0.0;
    let stat_missing = AtomicBool::new(false);
    let outs = harness::run_per_cpu(
        "ss-tput",
        &cpus,
        |cpu, ctx| {
            let mut k = Kernel::new(0x5eed + cpu as u64);
            k.op(); // warm caches and pages
            let mut f = PreadFile::open(Path::new("/"), stat::PATH).ok();
            if f.is_none() {
                stat_missing.store(true, Ordering::Relaxed);
            }
            let mut parsed = ProcStat::default();
            let mut windows = Vec::with_capacity((duration / win + 2) as usize);
            if !ctx.start() {
                return None;
            }
            let start = sys::now_ns();
            let end = start + duration;
            let mut steal = steal_ticks(&mut f, &mut parsed, cpu);
            let mut w_start = sys::now_ns();
            let mut w_cpu = sys::thread_cputime_ns();
            let mut ops = 0u64;
            loop {
                k.op();
                ops += 1;
                let now = sys::now_ns();
                if now >= w_start + win || now >= end || stop.load(Ordering::Relaxed) {
                    let cpu_now = sys::thread_cputime_ns();
                    let st = steal_ticks(&mut f, &mut parsed, cpu);
                    windows.push(RawWindow {
                        start: w_start - start,
                        end: now - start,
                        ops,
                        cpu_ns: cpu_now.saturating_sub(w_cpu),
                        steal_ticks: match (steal, st) {
                            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                            _ => None,
                        },
                    });
                    steal = st;
                    ops = 0;
                    // Reading /proc/stat is not part of the next window.
                    w_start = sys::now_ns();
                    w_cpu = sys::thread_cputime_ns();
                    if now >= end || stop.load(Ordering::Relaxed) {
                        return Some(windows);
                    }
                }
            }
        },
        |control| {
            cpu0 = sys::process_cpu_s();
            control.open();
        },
    );
    let cpu_time_s = sys::process_cpu_s() - cpu0;
    let outs = outs?;
    if stat_missing.load(Ordering::Relaxed) {
        notes.push(format!("{} unreadable: no steal per window", stat::PATH));
    }
    let hz = sys::user_hz();
    let mut per_cpu = Vec::new();
    let mut wall_max = 0u64;
    for (raw, &cpu) in outs.into_iter().zip(&cpus) {
        per_cpu.push(summarize(cpu, &raw, hz));
        wall_max = wall_max.max(raw.last().map_or(0, |w| w.end));
    }
    let summary = summary_sentence(&per_cpu);
    Ok(ThroughputReport {
        probe: "throughput",
        kernel: format!("matrix multiply {N}x{N} f64 (one op = one product)"),
        duration_s: round(wall_max as f64 / 1e9, 3),
        window_ms: win as f64 / 1e6,
        cpus: per_cpu,
        summary,
        cpu_time_s: round(cpu_time_s, 3),
        interrupted: stop.load(Ordering::Relaxed),
        notes,
    })
}

fn summarize(cpu: u32, raw: &[RawWindow], hz: f64) -> ThroughputCpu {
    let windows: Vec<Window> = raw
        .iter()
        .map(|w| {
            let wall = (w.end - w.start).max(1) as f64;
            Window {
                t_s: round(w.start as f64 / 1e9, 3),
                ops_per_s: round(w.ops as f64 / (wall / 1e9), 1),
                steal_pct: w
                    .steal_ticks
                    .map(|t| round(100.0 * (t as f64 / hz * 1e9) / wall, 2)),
                not_running_pct: round((100.0 * (1.0 - w.cpu_ns as f64 / wall)).max(0.0), 2),
            }
        })
        .collect();
    let ops: u64 = raw.iter().map(|w| w.ops).sum();
    let wall: u64 = raw.iter().map(|w| w.end - w.start).sum::<u64>().max(1);
    let cpu_ns: u64 = raw.iter().map(|w| w.cpu_ns).sum::<u64>().max(1);
    let mut rates: Vec<f64> = windows.iter().map(|w| w.ops_per_s).collect();
    rates.sort_by(f64::total_cmp);
    let baseline = rates
        .get(((rates.len() as f64 - 1.0) * BASELINE_QUANTILE).round() as usize)
        .copied()
        .unwrap_or(0.0);
    let mean = ops as f64 / (wall as f64 / 1e9);
    let loss = |r: f64| {
        if baseline > 0.0 {
            (100.0 * (1.0 - r / baseline)).max(0.0)
        } else {
            0.0
        }
    };
    let steal_ticks: Option<u64> = raw.iter().map(|w| w.steal_ticks).sum();
    let sw: Vec<&Window> = windows
        .iter()
        .filter(|w| w.steal_pct.is_some_and(|s| s > 0.0))
        .collect();
    let avg = |f: &dyn Fn(&Window) -> f64| {
        (!sw.is_empty()).then(|| round(sw.iter().map(|w| f(w)).sum::<f64>() / sw.len() as f64, 2))
    };
    ThroughputCpu {
        cpu,
        ops,
        ops_per_s: round(mean, 1),
        baseline_ops_per_s: baseline,
        loss_pct: round(loss(mean), 2),
        steal_pct: steal_ticks.map(|t| round(100.0 * (t as f64 / hz * 1e9) / wall as f64, 2)),
        not_running_pct: round((100.0 * (1.0 - cpu_ns as f64 / wall as f64)).max(0.0), 2),
        ops_per_cpu_s: round(ops as f64 / (cpu_ns as f64 / 1e9), 1),
        steal_windows: sw.len() as u64,
        steal_window_steal_pct: avg(&|w| w.steal_pct.unwrap_or(0.0)),
        steal_window_loss_pct: avg(&|w| loss(w.ops_per_s)),
        windows,
    }
}

fn summary_sentence(cpus: &[ThroughputCpu]) -> String {
    let with_steal: Vec<&ThroughputCpu> = cpus.iter().filter(|c| c.steal_windows > 0).collect();
    if with_steal.is_empty() {
        let worst = cpus.iter().map(|c| c.loss_pct).fold(0.0, f64::max);
        return format!(
            "No steal reported during the run; throughput was {worst:.1}% below the best \
             windows at worst (guest-side variation)."
        );
    }
    let n: u64 = with_steal.iter().map(|c| c.steal_windows).sum();
    let wavg = |f: &dyn Fn(&ThroughputCpu) -> Option<f64>| {
        with_steal
            .iter()
            .map(|c| f(c).unwrap_or(0.0) * c.steal_windows as f64)
            .sum::<f64>()
            / n as f64
    };
    let steal = wavg(&|c| c.steal_window_steal_pct);
    let loss = wavg(&|c| c.steal_window_loss_pct);
    format!(
        "In the {n} windows with reported steal, {steal:.1}% reported steal cost {loss:.1}% \
         throughput against the best windows."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_is_deterministic_and_not_optimised_away() {
        let mut k = Kernel::new(7);
        k.op();
        let c1 = k.c.clone();
        k.op();
        assert_eq!(c1, k.c);
        // c[0][0] = sum_k a[0][k] * b[k][0]
        let want: f64 = (0..N).map(|i| k.a[i] * k.b[i * N]).sum();
        assert!((k.c[0] - want).abs() < 1e-9);
    }

    #[test]
    fn summary_of_known_windows() {
        // Nine undisturbed windows at 1000 ops/100 ms, one with 1 tick of
        // steal (10 ms at USER_HZ 100) and 740 ops: 10% steal, 26% loss.
        let mut raw: Vec<RawWindow> = (0..9)
            .map(|i| RawWindow {
                start: i * 100_000_000,
                end: (i + 1) * 100_000_000,
                ops: 1000,
                cpu_ns: 100_000_000,
                steal_ticks: Some(0),
            })
            .collect();
        raw.push(RawWindow {
            start: 900_000_000,
            end: 1_000_000_000,
            ops: 740,
            cpu_ns: 90_000_000,
            steal_ticks: Some(1),
        });
        let c = summarize(1, &raw, 100.0);
        assert_eq!(c.baseline_ops_per_s, 10_000.0);
        assert_eq!(c.steal_windows, 1);
        assert_eq!(c.steal_window_steal_pct, Some(10.0));
        assert_eq!(c.steal_window_loss_pct, Some(26.0));
        assert_eq!(c.steal_pct, Some(1.0));
        assert_eq!(c.windows[9].not_running_pct, 10.0);
        let s = summary_sentence(&[c]);
        assert!(
            s.contains("10.0% reported steal cost 26.0% throughput"),
            "{s}"
        );
    }

    #[test]
    fn short_live_run() {
        let _serial = crate::test_lock();
        let stop = AtomicBool::new(false);
        let r = run(
            &ThroughputOptions {
                cpus: Some(vec![0]),
                duration: Duration::from_millis(350),
                window: Duration::from_millis(100),
            },
            &stop,
        )
        .unwrap();
        let c = &r.cpus[0];
        assert!((3..=5).contains(&c.windows.len()), "{}", c.windows.len());
        assert!(c.ops > 0 && c.ops_per_s > 0.0);
        assert!(
            c.baseline_ops_per_s
                >= c.windows
                    .iter()
                    .map(|w| w.ops_per_s)
                    .fold(f64::MAX, f64::min)
        );
        assert!(c.windows.iter().all(|w| w.steal_pct.is_some()));
        assert!(!r.summary.is_empty());
    }
}
