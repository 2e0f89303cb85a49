//! The raw /proc/stat series of the rule interval under way, each sample
//! with the counter reading taken right after it, kept for the rule runner
//! (which builds the doctor's snapshot of the interval from it).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use stealscope_readers::perf::{Counter, CounterCapture, CounterSample, Missing};
use stealscope_readers::snapshot::RawSample;

#[derive(Default, Debug)]
pub struct Series {
    inner: Mutex<Inner>,
    /// The counters the sampler opened, and those it could not.
    counters: OnceLock<(Vec<Counter>, Vec<Missing>)>,
}

#[derive(Default, Debug)]
struct Inner {
    q: VecDeque<(RawSample, Option<CounterSample>)>,
    cap: usize,
}

impl Series {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before the first interval starts only the newest sample is kept.
    pub fn push(&self, s: RawSample, counters: Option<CounterSample>) {
        let mut i = self.lock();
        while i.q.len() >= i.cap.max(1) {
            i.q.pop_front();
        }
        i.q.push_back((s, counters));
    }

    /// Starts the series of a new rule interval holding at most `cap`
    /// samples, and returns the previous one: samples and counter readings.
    pub fn take(&self, cap: usize) -> (Vec<RawSample>, Vec<CounterSample>) {
        let mut i = self.lock();
        i.cap = cap;
        let mut samples = Vec::new();
        let mut counters = Vec::new();
        for (s, c) in i.q.drain(..) {
            samples.push(s);
            counters.extend(c);
        }
        (samples, counters)
    }

    /// Set once by the sampler: the counters it opened and those it could not.
    pub fn set_counters(&self, opened: Vec<Counter>, missing: Vec<Missing>) {
        let _ = self.counters.set((opened, missing));
    }

    /// What the sampler's counter readings hold; None when it opened none.
    pub fn counter_capture(&self, samples: Vec<CounterSample>) -> Option<CounterCapture> {
        let (opened, missing) = self.counters.get()?;
        Some(CounterCapture {
            opened: opened.clone(),
            missing: missing.clone(),
            samples,
        })
    }
}

/// Samples kept for an interval of `every` at `rate_hz`: twice its length
/// (a slow rule run, or a faster rate chosen meanwhile, keeps the newest).
pub fn cap(rate_hz: f64, every: std::time::Duration) -> usize {
    (2.0 * rate_hz * every.as_secs_f64()) as usize + 16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(t_ns: u64) -> RawSample {
        RawSample {
            t_ns,
            stat: String::new(),
        }
    }

    #[test]
    fn series_is_bounded_and_taken_whole() {
        let s = Series::default();
        // Before the first interval only the newest sample is kept.
        s.push(raw(1), None);
        s.push(raw(2), None);
        assert_eq!(s.take(3).0.len(), 1);
        for t in 0..5 {
            s.push(raw(t), None);
        }
        let taken: Vec<u64> = s.take(3).0.iter().map(|s| s.t_ns).collect();
        assert_eq!(taken, [2, 3, 4]);
        assert!(s.take(3).0.is_empty());
        assert_eq!(cap(10.0, std::time::Duration::from_secs(1)), 2 * 10 + 16);
    }

    #[test]
    fn counter_readings_travel_with_their_samples() {
        let s = Series::default();
        let reading = |t_ns| CounterSample {
            t_ns,
            cpus: Vec::new(),
        };
        assert!(s.counter_capture(vec![]).is_none(), "no sampler yet");
        s.set_counters(vec![Counter::Tsc], vec![]);
        s.take(10);
        for t in 0..4 {
            // A failed /proc/stat read has no counter reading either.
            s.push(raw(t), (t != 2).then(|| reading(t)));
        }
        let (samples, counters) = s.take(10);
        assert_eq!(samples.len(), 4);
        let times: Vec<u64> = counters.iter().map(|c| c.t_ns).collect();
        assert_eq!(times, [0, 1, 3]);
        let cap = s.counter_capture(counters).unwrap();
        assert_eq!(cap.opened, [Counter::Tsc]);
        assert_eq!(cap.samples.len(), 3);
    }
}
