//! Short windows from the sample series, each classified by what the vCPU
//! wanted while steal happened: busy steal (the vCPU wanted the whole window:
//! the host is oversubscribed) vs idle steal (the guest was mostly idle yet
//! lost time: host scheduling or configuration).

use crate::cputime::{delta, CpuInterval, IntervalDelta};
use serde::{Deserialize, Serialize};
use stealscope_readers::stat::ProcStat;

/// util+steal at or above this share of a window means the vCPU wanted the
/// whole window: whatever was stolen was taken from work.
pub const BUSY_WINDOW_PCT: f64 = 90.0;
/// util+steal at or below this share means the vCPU was mostly idle: steal
/// here is host-side scheduling/configuration, not competition for work.
pub const IDLE_WINDOW_PCT: f64 = 60.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowClass {
    Busy,
    Idle,
    Mixed,
}

pub fn classify(ci: &CpuInterval) -> WindowClass {
    if ci.wall_s <= 0.0 {
        return WindowClass::Mixed;
    }
    let occupied = 100.0 * (ci.secs.util() + ci.secs.steal) / ci.wall_s;
    if occupied >= BUSY_WINDOW_PCT {
        WindowClass::Busy
    } else if occupied <= IDLE_WINDOW_PCT {
        WindowClass::Idle
    } else {
        WindowClass::Mixed
    }
}

/// One reading of the series: monotonic time and the parsed cpu rows.
#[derive(Debug, Clone)]
pub struct Sample {
    pub t_ns: u64,
    pub stat: ProcStat,
}

/// Deltas between consecutive samples. Samples whose clock does not advance
/// are skipped (a window of zero length says nothing).
pub fn series_windows(samples: &[Sample], clk_tck: f64) -> Vec<(f64, IntervalDelta)> {
    let mut out = Vec::new();
    let Some(first) = samples.first() else {
        return out;
    };
    let mut prev = first;
    for s in &samples[1..] {
        if s.t_ns <= prev.t_ns {
            continue;
        }
        let wall = (s.t_ns - prev.t_ns) as f64 / 1e9;
        let start = (prev.t_ns - first.t_ns) as f64 / 1e9;
        out.push((start, delta(&prev.stat, &s.stat, wall, clk_tck)));
        prev = s;
    }
    out
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StealSplit {
    pub total_s: f64,
    pub busy_s: f64,
    pub idle_s: f64,
    pub mixed_s: f64,
    pub windows: usize,
}

impl StealSplit {
    fn share(&self, v: f64) -> Option<f64> {
        (self.total_s > 0.0).then(|| v / self.total_s)
    }
    pub fn busy_share(&self) -> Option<f64> {
        self.share(self.busy_s)
    }
    pub fn idle_share(&self) -> Option<f64> {
        self.share(self.idle_s)
    }
}

pub fn split<'a>(windows: impl IntoIterator<Item = &'a IntervalDelta>) -> StealSplit {
    let mut s = StealSplit::default();
    for w in windows {
        s.windows += 1;
        for c in &w.cpus {
            let steal = c.secs.steal;
            s.total_s += steal;
            match classify(c) {
                WindowClass::Busy => s.busy_s += steal,
                WindowClass::Idle => s.idle_s += steal,
                WindowClass::Mixed => s.mixed_s += steal,
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cputime::ModeSecs;

    fn ci(util: f64, steal: f64) -> CpuInterval {
        CpuInterval {
            cpu: 0,
            secs: ModeSecs {
                user: util,
                steal,
                idle: 1.0 - util - steal,
                ..Default::default()
            },
            wall_s: 1.0,
            has_steal: true,
        }
    }

    #[test]
    fn classification_edges() {
        assert_eq!(classify(&ci(0.85, 0.05)), WindowClass::Busy);
        assert_eq!(classify(&ci(0.10, 0.05)), WindowClass::Idle);
        assert_eq!(classify(&ci(0.60, 0.10)), WindowClass::Mixed);
    }

    #[test]
    fn split_shares() {
        let w1 = IntervalDelta {
            wall_s: 1.0,
            cpus: vec![ci(0.8, 0.2), ci(0.1, 0.1)],
            anomalies: vec![],
        };
        let s = split([&w1]);
        assert!((s.busy_share().unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert!((s.idle_share().unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(split([]).busy_share(), None);
    }
}
