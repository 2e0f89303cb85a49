//! The model of one machine (guest, host or both): two observations and the sample series of one interval,
//! turned into the derived numbers the rules and reports use.

use crate::cputime::{delta, IntervalDelta, ModeSecs};
use crate::irq_rates::{rates, CpuIrqRates};
use crate::observation::{collect, Observation, Side};
use crate::windows::{series_windows, split, Sample, StealSplit};
use serde::Serialize;
use stealscope_readers::snapshot::Snapshot;
use stealscope_readers::{stat, ReadError};

/// USER_HZ when a snapshot does not say (it is 100 on every mainstream arch).
pub const DEFAULT_CLK_TCK: u64 = 100;

#[derive(Debug, Clone, Serialize)]
pub struct MachineModel {
    pub t0: Observation,
    pub t1: Observation,
    pub clk_tck: u64,
    /// Wall time of the interval: /proc/uptime delta, else meta.interval_s.
    pub wall_s: f64,
    pub interval: IntervalDelta,
    /// Short windows (start offset s, delta) from samples.jsonl; empty if none.
    #[serde(skip)]
    pub windows: Vec<(f64, IntervalDelta)>,
    pub split: StealSplit,
    pub irq: Vec<CpuIrqRates>,
    /// VMs on this machine, if it is a host.
    pub host: crate::host::HostModel,
    /// CPUID and per-window hardware counters, when the snapshot has them.
    pub hardware: crate::hardware::HardwareModel,
    /// Problems with optional inputs (from both sides, deduplicated).
    pub notes: Vec<String>,
    /// The snapshot or recording was cut off: its figures are partial.
    #[serde(skip)]
    pub damage: Option<stealscope_readers::damage::Damage>,
}

impl MachineModel {
    pub fn build(snap: &Snapshot) -> Result<MachineModel, ReadError> {
        let t0 = collect(&snap.t0, Side::Start).map_err(|e| side_err(e, &snap.t0.name))?;
        let t1 = collect(&snap.t1, Side::End).map_err(|e| side_err(e, &snap.t1.name))?;
        let clk_tck = snap.meta.clk_tck.unwrap_or(DEFAULT_CLK_TCK);
        let wall_s = match (t0.uptime_s, t1.uptime_s) {
            (Some(a), Some(b)) if b > a => b - a,
            _ => snap.meta.interval_s,
        };
        let interval = delta(&t0.stat, &t1.stat, wall_s, clk_tck as f64);
        let mut samples = Vec::with_capacity(snap.samples.len());
        let mut notes = Vec::new();
        let mut bad = Vec::new();
        for (i, raw) in snap.samples.iter().enumerate() {
            // Samples hold only the cpu rows; a missing final newline there
            // is not truncation (the JSON line itself was complete).
            let text = if raw.stat.ends_with('\n') {
                raw.stat.clone()
            } else {
                format!("{}\n", raw.stat)
            };
            match stat::parse(&text, "samples.jsonl") {
                Ok(s) => samples.push(Sample {
                    t_ns: raw.t_ns,
                    stat: s,
                }),
                Err(e) => bad.push((i + 1, e)),
            }
        }
        if let Some((line, e)) = bad.first() {
            notes.push(format!(
                "skipped {} of {} samples (first: line {line}: {e})",
                bad.len(),
                snap.samples.len()
            ));
        }
        let windows = series_windows(&samples, clk_tck as f64);
        notes.extend(hotplug_notes(&windows, &interval));
        // Busy/idle split from the short windows when we have them (that is
        // where the distinction lives), else from the whole interval.
        let split = if windows.is_empty() {
            split([&interval])
        } else {
            split(windows.iter().map(|(_, w)| w))
        };
        let irq = match (&t0.interrupts, &t1.interrupts) {
            (Some(a), Some(b)) => rates(a, b, wall_s),
            _ => Vec::new(),
        };
        let host = crate::host::host_model(&t0.host, &t1.host, &interval);
        for n in t0
            .notes
            .iter()
            .chain(t1.notes.iter())
            .chain(t1.host.notes.iter())
            .chain(host.notes.iter())
        {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
        Ok(MachineModel {
            t0,
            t1,
            clk_tck,
            wall_s,
            interval,
            windows,
            split,
            irq,
            host,
            hardware: crate::hardware::HardwareModel::build(snap),
            notes,
            damage: snap.damage.clone(),
        })
    }

    /// Mean over CPUs present for the whole interval.
    pub fn mean(&self) -> Option<ModeSecs> {
        let n = self.interval.cpus.len();
        if n == 0 {
            return None;
        }
        let mut m = ModeSecs::default();
        for c in &self.interval.cpus {
            m.add(&c.secs);
        }
        let k = 1.0 / n as f64;
        Some(ModeSecs {
            user: m.user * k,
            nice: m.nice * k,
            system: m.system * k,
            idle: m.idle * k,
            iowait: m.iowait * k,
            irq: m.irq * k,
            softirq: m.softirq * k,
            steal: m.steal * k,
        })
    }

    /// Steal as % of wall time, averaged over CPUs.
    pub fn steal_pct(&self) -> Option<f64> {
        self.mean().map(|m| {
            if self.wall_s > 0.0 {
                100.0 * m.steal / self.wall_s
            } else {
                0.0
            }
        })
    }

    /// Whether the kernel reports steal at all (2.6.11+ and a PV clock).
    pub fn has_steal_column(&self) -> bool {
        self.interval.cpus.iter().any(|c| c.has_steal)
    }
}

/// Says when CPUs left or joined, so per-CPU figures can be read correctly
/// (they are of wall time, and an offline CPU accrues nothing).
fn hotplug_notes(windows: &[(f64, IntervalDelta)], interval: &IntervalDelta) -> Vec<String> {
    use crate::cputime::Anomaly;
    let mut out = Vec::new();
    let events = windows
        .iter()
        .flat_map(|(start, w)| w.anomalies.iter().map(move |a| (*start + w.wall_s, a)));
    let events: Vec<_> = if windows.is_empty() {
        interval
            .anomalies
            .iter()
            .map(|a| (interval.wall_s, a))
            .collect()
    } else {
        events.collect()
    };
    for (at, a) in events {
        match a {
            Anomaly::WentOffline { cpu } => out.push(format!("cpu{cpu} went offline at +{at:.1} s; its figures cover only the time it was online")),
            Anomaly::CameOnline { cpu } => out.push(format!("cpu{cpu} came online at +{at:.1} s")),
            _ => {}
        }
    }
    out
}

fn side_err(e: ReadError, side: &str) -> ReadError {
    match e {
        ReadError::Parse { path, msg } => ReadError::Parse {
            path: format!("{side}{path}"),
            msg,
        },
        ReadError::Io { path, source } => ReadError::Io {
            path: format!("{side}{path}"),
            source,
        },
    }
}
