//! Explaining one gap: which share of it a guest hard IRQ, a softirq or
//! another guest thread covers, from the trace of its CPU (exact) or from
//! per-CPU counters (inferred); the rest is unexplained, i.e. the
//! hypervisor's.

use super::{GapClass, IRQ_PLAUSIBLE_MAX_NS, UNEXPLAINED_DOMINANT_NS};
use crate::counters::CpuCounts;
use crate::tracefs::{CpuTrace, TraceData};
use std::collections::HashMap;

/// Trace timestamps are printed in whole µs (rounded down): events this much
/// before a gap's start may belong to it.
const TS_SLACK_NS: u64 = 2_000;

/// One gap as the spinner saw it: clock readings around the time it did not
/// run, and whether its context-switch count moved across it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawGap {
    pub start: u64,
    pub end: u64,
    pub switched: bool,
}

/// The time split of one gap.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Split {
    pub irq: u64,
    pub softirq: u64,
    pub thread: u64,
    pub unexplained: u64,
    pub class: GapClass,
    pub source: String,
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
pub(crate) fn attribute_traced(
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
pub(crate) fn attribute_counters(
    gaps: &[RawGap],
    windows: &[(u64, Vec<CpuCounts>)],
    i: usize,
) -> Vec<Split> {
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
    use crate::counters::CpuCounts;

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
}
