//! From attributed gaps to the report's figures: per CPU (classes, sources,
//! noise, the hypervisor's share next to /proc/stat steal) and overall.

use super::attribution::{attribute_counters, attribute_traced, RawGap, Split};
use super::{
    ClassStats, Classes, Gap, GapClass, PreemptCpu, PreemptOverall, SourceStats,
    GUEST_GAP_ALLOWANCE_NS,
};
use crate::counters::{self, CpuCounts};
use crate::round;
use crate::stats::{self, LatencyStats};
use crate::tracefs::{CpuTrace, TraceData};
use std::collections::HashMap;

/// What one spinner brought back.
pub(super) struct SpinOut {
    pub tid: i32,
    pub start: u64,
    pub end: u64,
    pub gaps: Vec<RawGap>,
    pub dropped: u64,
    pub policy: &'static str,
    pub fifo_error: Option<nix::Error>,
}

/// Everything the run saw besides the spinners' gaps.
pub(super) struct Evidence<'a> {
    pub trace: Option<&'a TraceData>,
    /// Counter samples ~every poll (counter attribution only).
    pub windows: &'a [(u64, Vec<CpuCounts>)],
    pub before: &'a [CpuCounts],
    pub after: &'a [CpuCounts],
    /// The coordinating thread, whose own gaps are labelled as such.
    pub reader_tid: i32,
    /// Earliest spinner start: gap times are relative to it.
    pub run_start: u64,
}

/// The CPU at index `i`: its figures and its gaps, attributed.
pub(super) fn cpu(i: usize, cpu: u32, o: &SpinOut, ev: &Evidence) -> (PreemptCpu, Vec<Gap>) {
    let empty = CpuTrace::default();
    let runtime_ns = o.end.saturating_sub(o.start).max(1);
    let mut classes = Classes::default();
    let mut hist_all = stats::new_histogram();
    let mut hist_unexpl = stats::new_histogram();
    let mut by_source: HashMap<(GapClass, String), Vec<u64>> = HashMap::new();
    let mut noise = 0u64;
    let mut hypervisor_ns = 0u64;
    let mut gaps = Vec::with_capacity(o.gaps.len());
    let mut counted = if ev.trace.is_none() {
        attribute_counters(&o.gaps, ev.windows, i).into_iter()
    } else {
        Vec::new().into_iter()
    };
    for g in &o.gaps {
        let len = g.end - g.start;
        let split: Split = match ev.trace {
            Some(t) => attribute_traced(
                g,
                t.cpus.get(&cpu).unwrap_or(&empty),
                t,
                o.tid,
                ev.reader_tid,
            ),
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
        gaps.push(Gap {
            cpu,
            t_s: round(g.start.saturating_sub(ev.run_start) as f64 / 1e9, 6),
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
        round_class(c);
    }
    let runtime_s = runtime_ns as f64 / 1e9;
    let steal_pct = match (ev.before.get(i), ev.after.get(i)) {
        (Some(a), Some(b)) => {
            counters::steal_us(a, b).map(|us| round(100.0 * us / 1e6 / runtime_s, 3))
        }
        _ => None,
    };
    let unexplained_ns = classes.unexplained.time_us * 1e3;
    let c = PreemptCpu {
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
        sources: sources(by_source),
        dropped_gaps: o.dropped,
    };
    (c, gaps)
}

fn round_class(c: &mut ClassStats) {
    c.total_us = round(c.total_us, 3);
    c.max_us = round(c.max_us, 3);
    c.time_us = round(c.time_us, 3);
}

/// Main causes, most time first (top 20).
fn sources(by_source: HashMap<(GapClass, String), Vec<u64>>) -> Vec<SourceStats> {
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
    sources
}

/// Means over the CPUs; steal only when every CPU has it.
pub(super) fn overall(per_cpu: &[PreemptCpu]) -> PreemptOverall {
    let n = per_cpu.len().max(1) as f64;
    let mean = |f: &dyn Fn(&PreemptCpu) -> f64| per_cpu.iter().map(f).sum::<f64>() / n;
    let steal: Vec<f64> = per_cpu.iter().filter_map(|c| c.steal_pct).collect();
    PreemptOverall {
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
    }
}
