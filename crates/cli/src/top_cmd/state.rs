//! What the sampler and the rule runner hand the screen: the recent windows,
//! the VM rates, the latest findings ([`View`], copied whole when the user
//! pauses), and the raw series of the rule interval under way. One mutex;
//! every holder only copies, pushes or draws.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use stealscope_analysis::Finding;
use stealscope_model::host::VmRateTracker;
use stealscope_model::recent::RecentWindows;
use stealscope_readers::snapshot::RawSample;

/// Windows kept: wider than the sparkline of any usual terminal, and a
/// second of bars even at 1000 Hz; about 90 bytes per CPU each.
pub const HISTORY: usize = 1024;

#[derive(Clone)]
pub struct View {
    pub windows: RecentWindows,
    pub vms: VmRateTracker,
    /// A host scan has found a VM at some point: show the VM table.
    pub host: bool,
    pub findings: Vec<Finding>,
    pub findings_at: Option<Instant>,
    pub findings_error: Option<String>,
    /// The latest sampling error, shown until a sample succeeds.
    pub sample_error: Option<String>,
    /// The latest host scan's error, if it had one.
    pub host_error: Option<String>,
}

pub struct Live {
    pub view: View,
    /// /proc/stat text of the rule interval under way.
    series: VecDeque<RawSample>,
    series_cap: usize,
}

pub struct Shared {
    live: Mutex<Live>,
    rate_bits: AtomicU64,
}

impl Shared {
    pub fn new(clk_tck: f64, rate_hz: f64) -> Shared {
        Shared {
            live: Mutex::new(Live {
                view: View {
                    windows: RecentWindows::new(clk_tck, HISTORY),
                    vms: VmRateTracker::default(),
                    host: false,
                    findings: Vec::new(),
                    findings_at: None,
                    findings_error: None,
                    sample_error: None,
                    host_error: None,
                },
                series: VecDeque::new(),
                series_cap: 0,
            }),
            rate_bits: AtomicU64::new(rate_hz.to_bits()),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Live> {
        // A panicked holder leaves plain data behind: keep showing it.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sampling rate the user chose (the + and - keys).
    pub fn rate_hz(&self) -> f64 {
        f64::from_bits(self.rate_bits.load(Ordering::Relaxed))
    }

    pub fn set_rate_hz(&self, hz: f64) {
        self.rate_bits.store(hz.to_bits(), Ordering::Relaxed);
    }
}

impl Live {
    pub fn push_sample(&mut self, s: RawSample) {
        while self.series.len() >= self.series_cap.max(1) {
            self.series.pop_front();
        }
        self.series.push_back(s);
    }

    /// Starts the series of a new rule interval holding at most `cap`
    /// samples, and returns the previous one.
    pub fn take_series(&mut self, cap: usize) -> Vec<RawSample> {
        self.series_cap = cap;
        self.series.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_is_bounded_and_taken_whole() {
        let s = Shared::new(100.0, 10.0);
        let mut live = s.lock();
        let sample = |t_ns| RawSample {
            t_ns,
            stat: String::new(),
        };
        // Before the first interval only the newest sample is kept.
        live.push_sample(sample(1));
        live.push_sample(sample(2));
        assert_eq!(live.take_series(3).len(), 1);
        for t in 0..5 {
            live.push_sample(sample(t));
        }
        let taken: Vec<u64> = live.take_series(3).iter().map(|s| s.t_ns).collect();
        assert_eq!(taken, [2, 3, 4]);
        assert!(live.take_series(3).is_empty());
        drop(live);
        s.set_rate_hz(20.0);
        assert_eq!(s.rate_hz(), 20.0);
    }
}
