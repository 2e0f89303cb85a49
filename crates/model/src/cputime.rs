//! Per-CPU time deltas between two /proc/stat readings, treating counters as
//! hostile: a counter that goes backwards or advances more than wall time is
//! clamped and recorded as an anomaly instead of producing a negative or
//! >100 % figure (node_exporter#742, psutil#1210, sysstat#95).

use serde::{Deserialize, Serialize};
use stealscope_readers::stat::{CpuTimes, ProcStat};

/// A column may exceed wall time by this factor before we call it broken:
/// tick accounting is sampled, so one extra tick per window is normal, and
/// NO_HZ idle comes from a different clock than the other columns.
pub const WALL_SLACK_FACTOR: f64 = 1.5;
/// Absolute slack in ticks on top of the factor (tick quantisation).
pub const WALL_SLACK_TICKS: f64 = 2.0;

/// Seconds spent in each mode during an interval. `guest`/`guest_nice` are
/// not here: the kernel already counts them in user/nice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ModeSecs {
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
}

/// Mode names in /proc/stat column order (the `mode` label of exporters).
pub const MODES: [&str; 8] = [
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

impl ModeSecs {
    /// Absolute seconds since boot of one /proc/stat row (missing columns are 0;
    /// [`modes_present`] says which they are).
    pub fn from_ticks(t: &CpuTimes, clk_tck: f64) -> ModeSecs {
        let s = |v: Option<u64>| v.unwrap_or(0) as f64 / clk_tck;
        ModeSecs {
            user: s(Some(t.user)),
            nice: s(Some(t.nice)),
            system: s(Some(t.system)),
            idle: s(Some(t.idle)),
            iowait: s(t.iowait),
            irq: s(t.irq),
            softirq: s(t.softirq),
            steal: s(t.steal),
        }
    }

    /// Values in [`MODES`] order.
    pub fn values(&self) -> [f64; 8] {
        [
            self.user,
            self.nice,
            self.system,
            self.idle,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
        ]
    }

    /// Time the CPU ran guest work (what "busy" means from inside the VM).
    pub fn util(&self) -> f64 {
        self.user + self.nice + self.system + self.irq + self.softirq
    }
    pub fn idle_all(&self) -> f64 {
        self.idle + self.iowait
    }
    pub fn total(&self) -> f64 {
        self.util() + self.idle_all() + self.steal
    }
    pub fn add(&mut self, o: &ModeSecs) {
        self.user += o.user;
        self.nice += o.nice;
        self.system += o.system;
        self.idle += o.idle;
        self.iowait += o.iowait;
        self.irq += o.irq;
        self.softirq += o.softirq;
        self.steal += o.steal;
    }
}

/// Which of [`MODES`] the kernel prints for this row (older kernels lack
/// the trailing columns).
pub fn modes_present(t: &CpuTimes) -> [bool; 8] {
    [
        true,
        true,
        true,
        true,
        t.iowait.is_some(),
        t.irq.is_some(),
        t.softirq.is_some(),
        t.steal.is_some(),
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Anomaly {
    /// A cumulative counter decreased (clamped to 0).
    Backwards {
        cpu: u32,
        column: String,
        from: u64,
        to: u64,
    },
    /// A column advanced more than wall time allows (clamped to wall time).
    ExceedsWall {
        cpu: u32,
        column: String,
        delta_s: f64,
        wall_s: f64,
    },
    /// CPU row present at the start but not at the end of the interval.
    WentOffline { cpu: u32 },
    /// CPU row present at the end only.
    CameOnline { cpu: u32 },
}

impl Anomaly {
    /// True for counter anomalies; hotplug is a fact about the machine.
    pub fn is_counter(&self) -> bool {
        matches!(
            self,
            Anomaly::Backwards { .. } | Anomaly::ExceedsWall { .. }
        )
    }
    pub fn cpu(&self) -> u32 {
        match self {
            Anomaly::Backwards { cpu, .. }
            | Anomaly::ExceedsWall { cpu, .. }
            | Anomaly::WentOffline { cpu }
            | Anomaly::CameOnline { cpu } => *cpu,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuInterval {
    pub cpu: u32,
    pub secs: ModeSecs,
    pub wall_s: f64,
    /// The kernel reports steal for this CPU (2.6.11+).
    pub has_steal: bool,
}

impl CpuInterval {
    fn pct(&self, v: f64) -> f64 {
        if self.wall_s > 0.0 {
            100.0 * v / self.wall_s
        } else {
            0.0
        }
    }
    pub fn steal_pct(&self) -> f64 {
        self.pct(self.secs.steal)
    }
    pub fn busy_pct(&self) -> f64 {
        self.pct(self.secs.util())
    }
    pub fn idle_pct(&self) -> f64 {
        self.pct(self.secs.idle_all())
    }
    /// Busy, steal and idle as shares of the time the kernel accounted to
    /// the CPU (the sum of its columns), as top and mpstat print them: they
    /// add up to 100 however late the reader woke up, which a live view of
    /// 100 ms windows on a loaded machine needs (a reading 20 ms late would
    /// be 20 % off against wall time). None when nothing was accounted.
    pub fn accounted_shares(&self) -> Option<Shares> {
        let t = self.secs.total();
        (t > 0.0 && t.is_finite()).then(|| Shares {
            busy: 100.0 * self.secs.util() / t,
            steal: self.has_steal.then(|| 100.0 * self.secs.steal / t),
            idle: 100.0 * self.secs.idle_all() / t,
        })
    }
    /// Adds another interval of the same CPU (or another CPU, for a total):
    /// seconds and wall time add, steal is known only if known in both.
    pub fn add(&mut self, o: &CpuInterval) {
        self.secs.add(&o.secs);
        self.wall_s += o.wall_s;
        self.has_steal &= o.has_steal;
    }
}

/// See [`CpuInterval::accounted_shares`]; steal is None when the kernel has
/// no steal column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub busy: f64,
    pub steal: Option<f64>,
    pub idle: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalDelta {
    pub wall_s: f64,
    pub cpus: Vec<CpuInterval>,
    pub anomalies: Vec<Anomaly>,
}

/// What one interval allows a column to advance.
struct Bounds {
    max_ticks: f64,
    clk_tck: f64,
    wall_s: f64,
}

fn column_delta(
    cpu: u32,
    name: &str,
    a: Option<u64>,
    b: Option<u64>,
    lim: &Bounds,
    anomalies: &mut Vec<Anomaly>,
) -> f64 {
    let (Some(a), Some(b)) = (a, b) else {
        return 0.0;
    };
    if b < a {
        anomalies.push(Anomaly::Backwards {
            cpu,
            column: name.to_string(),
            from: a,
            to: b,
        });
        return 0.0;
    }
    let d = (b - a) as f64;
    if d > lim.max_ticks {
        anomalies.push(Anomaly::ExceedsWall {
            cpu,
            column: name.to_string(),
            delta_s: d / lim.clk_tck,
            wall_s: lim.wall_s,
        });
        return lim.wall_s;
    }
    d / lim.clk_tck
}

fn cpu_delta(
    cpu: u32,
    a: &CpuTimes,
    b: &CpuTimes,
    wall_s: f64,
    clk_tck: f64,
    anomalies: &mut Vec<Anomaly>,
) -> CpuInterval {
    let lim = Bounds {
        max_ticks: wall_s * clk_tck * WALL_SLACK_FACTOR + WALL_SLACK_TICKS,
        clk_tck,
        wall_s,
    };
    let mut d =
        |name: &str, x: Option<u64>, y: Option<u64>| column_delta(cpu, name, x, y, &lim, anomalies);
    let secs = ModeSecs {
        user: d("user", Some(a.user), Some(b.user)),
        nice: d("nice", Some(a.nice), Some(b.nice)),
        system: d("system", Some(a.system), Some(b.system)),
        idle: d("idle", Some(a.idle), Some(b.idle)),
        iowait: d("iowait", a.iowait, b.iowait),
        irq: d("irq", a.irq, b.irq),
        softirq: d("softirq", a.softirq, b.softirq),
        steal: d("steal", a.steal, b.steal),
    };
    CpuInterval {
        cpu,
        secs,
        wall_s,
        has_steal: a.steal.is_some() && b.steal.is_some(),
    }
}

/// Deltas for every CPU present in both readings; hotplug noted as anomalies.
pub fn delta(t0: &ProcStat, t1: &ProcStat, wall_s: f64, clk_tck: f64) -> IntervalDelta {
    let mut out = IntervalDelta {
        wall_s,
        ..Default::default()
    };
    if !wall_s.is_finite() || wall_s <= 0.0 || !clk_tck.is_finite() || clk_tck <= 0.0 {
        return out;
    }
    for row in &t0.cpus {
        let Some(cpu) = row.cpu else { continue };
        match t1.cpu(cpu) {
            Some(b) => out.cpus.push(cpu_delta(
                cpu,
                &row.times,
                b,
                wall_s,
                clk_tck,
                &mut out.anomalies,
            )),
            None => out.anomalies.push(Anomaly::WentOffline { cpu }),
        }
    }
    for row in &t1.cpus {
        if let Some(cpu) = row.cpu {
            if t0.cpu(cpu).is_none() {
                out.anomalies.push(Anomaly::CameOnline { cpu });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::stat::parse;

    fn st(s: &str) -> ProcStat {
        parse(s, "/proc/stat").unwrap()
    }

    #[test]
    fn plain_delta() {
        let a = st("cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 50 800 0 0 0 50 0 0\nintr 0\n");
        let b = st("cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 200 0 100 1000 0 0 0 150 30 0\nintr 0\n");
        let d = delta(&a, &b, 5.0, 100.0);
        let c = d.cpus[0];
        assert!((c.steal_pct() - 20.0).abs() < 1e-9);
        assert!((c.busy_pct() - 30.0).abs() < 1e-9);
        assert!((c.idle_pct() - 40.0).abs() < 1e-9);
        assert!(d.anomalies.is_empty());
        // 150 + 200 + 100 ticks accounted: shares of those, not of 5 s.
        let s = c.accounted_shares().unwrap();
        assert!((s.busy - 100.0 * 150.0 / 450.0).abs() < 1e-9);
        assert!((s.steal.unwrap() - 100.0 * 100.0 / 450.0).abs() < 1e-9);
        assert!((s.busy + s.steal.unwrap() + s.idle - 100.0).abs() < 1e-9);
        let none = delta(&a, &a, 5.0, 100.0).cpus[0];
        assert_eq!(none.accounted_shares(), None);
    }

    #[test]
    fn backwards_and_overflowing_counters_are_clamped() {
        let a = st("cpu  0 0 0 0 0 0 0 500 0 0\ncpu0 0 0 0 0 0 0 0 500 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\nintr 0\n");
        let b = st("cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 0 0 0 500 0 0 0 100 0 0\ncpu1 0 0 0 0 0 0 0 99999 0 0\nintr 0\n");
        let d = delta(&a, &b, 5.0, 100.0);
        assert_eq!(d.cpus[0].secs.steal, 0.0);
        assert!(matches!(d.anomalies[0], Anomaly::Backwards { cpu: 0, .. }));
        assert_eq!(d.cpus[1].secs.steal, 5.0);
        assert!(matches!(
            d.anomalies[1],
            Anomaly::ExceedsWall { cpu: 1, .. }
        ));
    }

    #[test]
    fn hotplug() {
        let a = st("cpu  0 0 0 0\ncpu0 0 0 0 0\ncpu1 0 0 0 0\nintr 0\n");
        let b = st("cpu  0 0 0 0\ncpu0 0 0 0 100\ncpu2 0 0 0 0\nintr 0\n");
        let d = delta(&a, &b, 1.0, 100.0);
        assert_eq!(d.cpus.len(), 1);
        assert!(d.anomalies.contains(&Anomaly::WentOffline { cpu: 1 }));
        assert!(d.anomalies.contains(&Anomaly::CameOnline { cpu: 2 }));
        assert!(!d.anomalies.iter().any(Anomaly::is_counter));
    }

    #[test]
    fn zero_wall_is_harmless() {
        let a = st("cpu  0 0 0 0\ncpu0 0 0 0 0\nintr 0\n");
        let d = delta(&a, &a, 0.0, 100.0);
        assert!(d.cpus.is_empty());
        let d = delta(&a, &a, f64::NAN, 100.0);
        assert!(d.cpus.is_empty());
    }
}
