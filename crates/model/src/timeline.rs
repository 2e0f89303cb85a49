//! The series a recording holds beyond what a snapshot holds: per-CPU
//! interrupt windows, per-vCPU run-queue wait windows (host) and probe
//! latency windows. A snapshot's own series (the /proc/stat samples and the
//! hardware counter windows) stay in [`crate::MachineModel`]; `report`
//! draws from both, so a snapshot and a recording go through the same model
//! code and a snapshot simply has an empty `Timeline`.

use crate::irq_rates::CpuIrqRates;
use serde::Serialize;
use stealscope_who::Charge;

/// Interrupts per CPU over one window (rates per second, highest source
/// first), from two /proc/interrupts readings ([`crate::irq_rates::rates`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IrqWindow {
    /// Offset from the first /proc/stat sample, seconds.
    pub start_s: f64,
    pub wall_s: f64,
    pub cpus: Vec<CpuIrqRates>,
}

/// One vCPU thread over one window: how long it ran and how long it waited
/// runnable on a host run queue (schedstat), i.e. host-side steal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VcpuWindow {
    pub start_s: f64,
    pub wall_s: f64,
    /// VM name as discovery reports it.
    pub vm: String,
    pub vcpu: u32,
    pub run_s: f64,
    pub wait_s: f64,
}

/// Latency distribution of one probe over one window (e.g. a second of the
/// wakeup probe on one CPU).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeWindow {
    pub start_s: f64,
    pub wall_s: f64,
    /// "wakeup", "preempt", ...
    pub probe: String,
    /// None: all CPUs together.
    pub cpu: Option<u32>,
    pub samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Non-empty buckets (upper bound in µs, count), for histograms.
    pub buckets: Vec<(f64, u64)>,
}

/// One VM's vCPU wait by culprit over the host scan that ended at `t_s`:
/// its largest culprits and `other`, most first (shares: of the VM's wait
/// in the scan).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CulpritWindow {
    pub t_s: f64,
    pub vm: String,
    pub culprits: Vec<Charge>,
}

/// One exact guest steal episode at or over the recording's threshold
/// (issue 30), timed from the time line's origin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StealMark {
    pub t_s: f64,
    /// kvm-clock when it was seen (ns since the VM was created, the host's
    /// clock for this VM), to join a host recording; None: not anchored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvmclock_ns: Option<u64>,
    pub cpu: u32,
    pub ns: u64,
    /// The thread that had the CPU; None: idle steal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub victim: Option<crate::exact_steal::TaskExact>,
}

/// How a recording measured steal (`None` in [`Timeline::steal`]: not a
/// recording).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "route", rename_all = "kebab-case")]
pub enum StealRoute {
    /// The guest steal collector; episodes at or over `threshold_ns` are
    /// listed in [`Timeline::steal_episodes`].
    Exact { threshold_ns: u64, stat_hz: f64 },
    /// /proc/stat polled at `stat_hz`, and why not the collector.
    ProcStat { stat_hz: f64, reason: String },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timeline {
    pub irq: Vec<IrqWindow>,
    pub vcpu: Vec<VcpuWindow>,
    pub probes: Vec<ProbeWindow>,
    /// Who stole each VM's vCPU time, per host scan (recordings on a host
    /// with the scheduler-event collector; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub culprits: Vec<CulpritWindow>,
    /// How the recording measured steal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steal: Option<StealRoute>,
    /// Exact steal episodes in time order (exact route only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steal_episodes: Vec<StealMark>,
    /// What the source said about itself (e.g. "recording cut off after
    /// 1234 records; read up to the last complete one").
    pub notes: Vec<String>,
}

/// A threshold as people write it: 0 ns, 250 ns, 100 µs, 1.5 ms.
pub fn short_ns(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{} µs", ns as f64 / 1e3),
        _ => format!("{} ms", ns as f64 / 1e6),
    }
}

impl StealRoute {
    /// One line: the route and its /proc/stat rate, or why it polled.
    pub fn describe(&self) -> String {
        match self {
            StealRoute::Exact {
                threshold_ns,
                stat_hz,
            } => format!(
                "exact, from the guest steal collector (every episode in the totals, those from {} listed; /proc/stat at {stat_hz} Hz for its other columns)",
                short_ns(*threshold_ns)
            ),
            StealRoute::ProcStat { stat_hz, reason } => {
                format!("/proc/stat polled at {stat_hz} Hz (not exact: {reason})")
            }
        }
    }
}

impl Timeline {
    /// The `n` longest steal episodes, longest first (ties: earliest).
    pub fn largest_steal(&self, n: usize) -> Vec<&StealMark> {
        let mut v: Vec<&StealMark> = self.steal_episodes.iter().collect();
        v.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.t_s.total_cmp(&b.t_s)));
        v.truncate(n);
        v
    }

    pub fn is_empty(&self) -> bool {
        self.irq.is_empty()
            && self.vcpu.is_empty()
            && self.probes.is_empty()
            && self.steal_episodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_say_what_ran_and_the_largest_come_first() {
        let exact = StealRoute::Exact {
            threshold_ns: 100_000,
            stat_hz: 1.0,
        };
        assert!(
            exact.describe().contains("from 100 µs listed"),
            "{}",
            exact.describe()
        );
        let polled = StealRoute::ProcStat {
            stat_hz: 100.0,
            reason: "not root".into(),
        };
        assert_eq!(
            polled.describe(),
            "/proc/stat polled at 100 Hz (not exact: not root)"
        );
        let mark = |t_s, ns| StealMark {
            t_s,
            kvmclock_ns: None,
            cpu: 0,
            ns,
            victim: None,
        };
        let t = Timeline {
            steal_episodes: vec![mark(0.1, 5), mark(0.2, 9), mark(0.3, 9), mark(0.4, 1)],
            ..Default::default()
        };
        let top: Vec<f64> = t.largest_steal(3).iter().map(|m| m.t_s).collect();
        assert_eq!(top, [0.2, 0.3, 0.1]);
        assert_eq!(short_ns(0), "0 ns");
        assert_eq!(short_ns(1_500_000), "1.5 ms");
    }
}
