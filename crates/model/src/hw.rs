//! Hardware counter arithmetic, separate from reading: per-window deltas of
//! perf group reads (wrap-safe, scaled for multiplexing), IPC and cache miss
//! rate, and turbostat's frequencies from the msr PMU (TSC_MHz, Avg_MHz,
//! Bzy_MHz, %Busy). Every ratio is None when its divisor is zero or missing.
//! The live side (open once, read per window) is the engine's
//! (crates/engine/src/hw_sampler.rs); [`windows`] pairs its readings.

use serde::Serialize;
use stealscope_readers::perf::{Counter, CounterSample, CpuRead, GroupRead};

/// perf reads are 64-bit cumulative counts.
pub const COUNTER_BITS: u32 = 64;
/// No counter here advances faster than this per ns of enabled time (8
/// instructions per cycle at 8 GHz); a larger delta is a reset (the counter
/// was re-created), not a wrap, and is dropped.
pub const MAX_EVENTS_PER_NS: u64 = 64;

/// `cur - prev` modulo 2^bits: a counter that wrapped past its width still
/// gives the events counted in between.
pub fn wrapping_delta(prev: u64, cur: u64, bits: u32) -> u64 {
    let d = cur.wrapping_sub(prev);
    if bits >= 64 {
        d
    } else {
        d & ((1u64 << bits) - 1)
    }
}

/// Group time deltas: (enabled, running) in ns; None when time went backwards
/// (a different group) or the group was never enabled in the window.
fn group_times(prev: &GroupRead, cur: &GroupRead) -> Option<(u64, u64)> {
    let en = cur.enabled_ns.checked_sub(prev.enabled_ns)?;
    let run = cur.running_ns.checked_sub(prev.running_ns)?;
    (en > 0).then_some((en, run.min(en)))
}

/// Events of `c` in the window, scaled by enabled/running when the kernel
/// multiplexed the group (perf stat's scaling). None when the counter is
/// absent, did not run in the window, or jumped implausibly.
pub fn scaled_delta(prev: &CpuRead, cur: &CpuRead, c: Counter) -> Option<f64> {
    let (p, pg) = prev.get(c)?;
    let (q, qg) = cur.get(c)?;
    let (en, run) = group_times(pg, qg)?;
    if run == 0 {
        return None;
    }
    let d = wrapping_delta(p, q, COUNTER_BITS);
    if d > MAX_EVENTS_PER_NS.saturating_mul(en) {
        return None;
    }
    Some(d as f64 * en as f64 / run as f64)
}

/// Share of the window the group holding `c` was actually counting.
pub fn running_share(prev: &CpuRead, cur: &CpuRead, c: Counter) -> Option<f64> {
    let (_, pg) = prev.get(c)?;
    let (_, qg) = cur.get(c)?;
    let (en, run) = group_times(pg, qg)?;
    Some(run as f64 / en as f64)
}

/// Enabled time of the group holding `c` in the window, seconds.
fn enabled_s(prev: &CpuRead, cur: &CpuRead, c: Counter) -> Option<f64> {
    let (_, pg) = prev.get(c)?;
    let (_, qg) = cur.get(c)?;
    group_times(pg, qg).map(|(en, _)| en as f64 / 1e9)
}

fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 && n.is_finite() && d.is_finite() => Some(n / d),
        _ => None,
    }
}

/// One CPU over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuHwWindow {
    pub cpu: u32,
    pub cycles: Option<f64>,
    pub instructions: Option<f64>,
    pub cache_references: Option<f64>,
    pub cache_misses: Option<f64>,
    /// Share of the window the cycles/instructions group counted (< 1 when
    /// multiplexed).
    pub hw_running_share: Option<f64>,
    pub tsc_mhz: Option<f64>,
    /// turbostat Avg_MHz: APERF per µs of the window.
    pub avg_mhz: Option<f64>,
    /// turbostat Bzy_MHz: TSC_MHz × APERF/MPERF.
    pub busy_mhz: Option<f64>,
    /// turbostat %Busy: MPERF/TSC (time in C0).
    pub busy_pct: Option<f64>,
    pub smi: Option<u64>,
}

impl CpuHwWindow {
    pub fn ipc(&self) -> Option<f64> {
        ratio(self.instructions, self.cycles)
    }
    pub fn miss_rate(&self) -> Option<f64> {
        ratio(self.cache_misses, self.cache_references)
    }
}

pub fn cpu_window(prev: &CpuRead, cur: &CpuRead) -> CpuHwWindow {
    let d = |c| scaled_delta(prev, cur, c);
    let tsc = d(Counter::Tsc);
    let aperf = d(Counter::Aperf);
    let mperf = d(Counter::Mperf);
    let tsc_s = enabled_s(prev, cur, Counter::Tsc);
    let aperf_s = enabled_s(prev, cur, Counter::Aperf);
    let tsc_mhz = ratio(tsc, tsc_s).map(|hz| hz / 1e6);
    CpuHwWindow {
        cpu: cur.cpu,
        cycles: d(Counter::Cycles),
        instructions: d(Counter::Instructions),
        cache_references: d(Counter::CacheReferences),
        cache_misses: d(Counter::CacheMisses),
        hw_running_share: running_share(prev, cur, Counter::Cycles)
            .or_else(|| running_share(prev, cur, Counter::Instructions)),
        tsc_mhz,
        avg_mhz: ratio(aperf, aperf_s).map(|hz| hz / 1e6),
        busy_mhz: ratio(aperf, mperf).and_then(|r| tsc_mhz.map(|t| t * r)),
        busy_pct: ratio(mperf, tsc).map(|r| 100.0 * r),
        smi: d(Counter::Smi).map(|v| v.round() as u64),
    }
}

/// One window across CPUs; `start_s` is relative to `origin_ns`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HwWindow {
    pub start_s: f64,
    pub wall_s: f64,
    pub cpus: Vec<CpuHwWindow>,
}

/// Windows between consecutive samples; samples whose clock does not advance
/// are skipped, CPUs present in only one of a pair are left out of it.
pub fn windows(samples: &[CounterSample], origin_ns: u64) -> Vec<HwWindow> {
    let mut out = Vec::new();
    let Some(mut prev) = samples.first() else {
        return out;
    };
    for s in &samples[1..] {
        if s.t_ns <= prev.t_ns {
            continue;
        }
        let cpus = s
            .cpus
            .iter()
            .filter_map(|c| {
                let p = prev.cpus.iter().find(|p| p.cpu == c.cpu)?;
                Some(cpu_window(p, c))
            })
            .collect();
        out.push(HwWindow {
            start_s: (prev.t_ns as f64 - origin_ns as f64) / 1e9,
            wall_s: (s.t_ns - prev.t_ns) as f64 / 1e9,
            cpus,
        });
        prev = s;
    }
    out
}

/// Sums over windows (cycle-weighted IPC, as perf stat over the span).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HwTotals {
    pub windows: usize,
    pub cycles: f64,
    pub instructions: f64,
    pub cache_references: f64,
    pub cache_misses: f64,
}

impl HwTotals {
    pub fn add(&mut self, w: &CpuHwWindow) {
        if let (Some(c), Some(i)) = (w.cycles, w.instructions) {
            self.windows += 1;
            self.cycles += c;
            self.instructions += i;
            if let (Some(r), Some(m)) = (w.cache_references, w.cache_misses) {
                self.cache_references += r;
                self.cache_misses += m;
            }
        }
    }
    pub fn ipc(&self) -> Option<f64> {
        ratio(Some(self.instructions), Some(self.cycles))
    }
    pub fn miss_rate(&self) -> Option<f64> {
        ratio(Some(self.cache_misses), Some(self.cache_references))
    }
    /// Cache misses per 1000 instructions.
    pub fn mpki(&self) -> Option<f64> {
        ratio(Some(self.cache_misses), Some(self.instructions)).map(|r| 1000.0 * r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read(cpu: u32, en: u64, run: u64, counts: &[(Counter, u64)]) -> CpuRead {
        CpuRead {
            cpu,
            groups: vec![GroupRead {
                enabled_ns: en,
                running_ns: run,
                counts: counts.iter().copied().collect::<BTreeMap<_, _>>(),
            }],
        }
    }

    #[test]
    fn wrap_gives_the_events_in_between() {
        assert_eq!(wrapping_delta(u64::MAX - 9, 5, 64), 15);
        assert_eq!(wrapping_delta(0xffff_fff0, 0x10, 32), 0x20);
        assert_eq!(wrapping_delta(10, 25, 48), 15);
    }

    #[test]
    fn multiplexed_counts_scale_by_enabled_over_running() {
        use Counter::*;
        let a = read(
            0,
            1_000_000,
            400_000,
            &[(Cycles, 1000), (Instructions, 500)],
        );
        let b = read(
            0,
            101_000_000,
            50_400_000,
            &[
                (Cycles, 1000 + 100_000_000),
                (Instructions, 500 + 80_000_000),
            ],
        );
        let w = cpu_window(&a, &b);
        assert_eq!(w.hw_running_share, Some(0.5));
        assert_eq!(w.cycles, Some(200_000_000.0));
        assert_eq!(w.instructions, Some(160_000_000.0));
        assert_eq!(w.ipc(), Some(0.8), "scaling cancels in the ratio");
        assert_eq!(w.miss_rate(), None, "no cache counters");
    }

    #[test]
    fn not_running_and_resets_give_none_not_zero_or_garbage() {
        use Counter::*;
        let a = read(0, 1000, 1000, &[(Cycles, 5_000), (Instructions, 1)]);
        // Group never scheduled in the window (running unchanged).
        let b = read(0, 2000, 1000, &[(Cycles, 5_000), (Instructions, 1)]);
        assert_eq!(cpu_window(&a, &b).cycles, None);
        assert_eq!(cpu_window(&a, &b).ipc(), None);
        // Counter re-created: its value dropped, the wrap would be absurd.
        let c = read(0, 3000, 2000, &[(Cycles, 10), (Instructions, 5)]);
        assert_eq!(cpu_window(&b, &c).cycles, None);
        // Time went backwards: another group; nothing is computed.
        assert_eq!(cpu_window(&c, &a), cpu_window(&c, &a));
        assert_eq!(cpu_window(&c, &a).instructions, None);
    }

    #[test]
    fn turbostat_frequencies_from_tsc_aperf_mperf() {
        use Counter::*;
        // 1 s window: TSC 2.2 GHz, C0 40 % of it, running at 2.85 GHz in C0.
        let a = read(0, 0, 0, &[(Tsc, 0), (Aperf, 0), (Mperf, 0), (Smi, 7)]);
        let mperf = 0.4 * 2.2e9;
        let aperf = mperf * 2850.0 / 2200.0;
        let b = read(
            0,
            1_000_000_000,
            1_000_000_000,
            &[
                (Tsc, 2_200_000_000),
                (Aperf, aperf as u64),
                (Mperf, mperf as u64),
                (Smi, 7),
            ],
        );
        let w = cpu_window(&a, &b);
        let close = |x: Option<f64>, y: f64| (x.unwrap() - y).abs() < 1e-3 * y.abs().max(1.0);
        assert!(close(w.tsc_mhz, 2200.0), "{w:?}");
        assert!(close(w.busy_pct, 40.0), "{w:?}");
        assert!(close(w.busy_mhz, 2850.0), "{w:?}");
        assert!(close(w.avg_mhz, 0.4 * 2850.0), "{w:?}");
        assert_eq!(w.smi, Some(0));
    }

    #[test]
    fn windows_pair_cpus_and_skip_stuck_clocks() {
        use Counter::*;
        let s = |t, cpus: Vec<CpuRead>| CounterSample { t_ns: t, cpus };
        let samples = vec![
            s(
                1_000,
                vec![read(0, 0, 0, &[(Tsc, 0)]), read(1, 0, 0, &[(Tsc, 0)])],
            ),
            s(1_000, vec![read(0, 1, 1, &[(Tsc, 1)])]),
            s(101_000, vec![read(1, 100_000, 100_000, &[(Tsc, 300_000)])]),
        ];
        let w = windows(&samples, 0);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].cpus.len(), 1, "cpu0 left the second sample");
        assert_eq!(w[0].cpus[0].cpu, 1);
        assert!((w[0].start_s - 1e-6).abs() < 1e-12);
        assert!((w[0].cpus[0].tsc_mhz.unwrap() - 3000.0).abs() < 1e-6);
        assert!(windows(&[], 0).is_empty());
    }

    #[test]
    fn totals_weight_ipc_by_cycles() {
        let mut t = HwTotals::default();
        for (c, i) in [(1e9, 2e9), (3e9, 1e9)] {
            t.add(&CpuHwWindow {
                cpu: 0,
                cycles: Some(c),
                instructions: Some(i),
                cache_references: Some(100.0),
                cache_misses: Some(10.0),
                hw_running_share: Some(1.0),
                tsc_mhz: None,
                avg_mhz: None,
                busy_mhz: None,
                busy_pct: None,
                smi: None,
            });
        }
        assert_eq!(t.ipc(), Some(0.75));
        assert_eq!(t.miss_rate(), Some(0.1));
        assert_eq!(HwTotals::default().ipc(), None);
    }

    proptest::proptest! {
        #[test]
        fn arithmetic_never_panics_and_ratios_are_finite(
            v in proptest::collection::vec((proptest::num::u64::ANY, proptest::num::u64::ANY, proptest::num::u64::ANY, proptest::num::u64::ANY), 2..6)
        ) {
            use Counter::*;
            let samples: Vec<CounterSample> = v.iter().enumerate().map(|(i, (en, run, a, b))| CounterSample {
                t_ns: (i as u64) * 1000 + (a % 3),
                cpus: vec![read(0, *en, *run, &[(Cycles, *a), (Instructions, *b), (Tsc, *a ^ *b), (Aperf, *b), (Mperf, *a), (CacheReferences, *en), (CacheMisses, *run), (Smi, *b)])],
            }).collect();
            for w in windows(&samples, u64::MAX) {
                for c in &w.cpus {
                    let all = [c.ipc(), c.miss_rate(), c.tsc_mhz, c.avg_mhz, c.busy_mhz, c.busy_pct, c.cycles];
                    for x in all.into_iter().flatten() {
                        proptest::prop_assert!(x.is_finite() && x >= 0.0);
                    }
                }
            }
        }
    }
}
