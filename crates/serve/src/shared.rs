//! What the threads share: the metrics state with a generation number (so
//! that scrapes between two samples reuse one encoding), the raw /proc/stat
//! series the rule runner analyses, and the stop signal.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use stealscope_output::metrics::{Exporter, Format, MetricsState, SharedState};
use stealscope_readers::perf::{Counter, CounterCapture, CounterSample};
use stealscope_readers::snapshot::RawSample;

pub(crate) struct Shared {
    pub state: SharedState,
    generation: AtomicU64,
    /// /proc/stat samples, each with the counter reading taken right after.
    series: Mutex<VecDeque<(RawSample, Option<CounterSample>)>>,
    /// Bound on the series: twice a rule interval, in case a run is slow.
    series_cap: usize,
    /// The counters the sampler opened (those it could not are in the
    /// metrics state, `hw_missing`).
    counters_opened: std::sync::OnceLock<Vec<Counter>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked holder leaves plain data behind: keep serving it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub fn new(rate_hz: f64, findings_every: Duration) -> Shared {
        Shared {
            state: SharedState::default(),
            generation: AtomicU64::new(0),
            series: Mutex::new(VecDeque::new()),
            series_cap: (2.0 * rate_hz * findings_every.as_secs_f64()) as usize + 16,
            counters_opened: std::sync::OnceLock::new(),
        }
    }

    /// Changes the state and marks cached encodings stale.
    pub fn update(&self, f: impl FnOnce(&mut MetricsState)) {
        f(&mut lock(&self.state));
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn push_sample(&self, s: RawSample, counters: Option<CounterSample>) {
        let mut q = lock(&self.series);
        if q.len() >= self.series_cap {
            q.pop_front();
        }
        q.push_back((s, counters));
    }

    /// The series since the last call: samples and the counter readings.
    pub fn take_series(&self) -> (Vec<RawSample>, Vec<CounterSample>) {
        let mut samples = Vec::new();
        let mut counters = Vec::new();
        for (s, c) in lock(&self.series).drain(..) {
            samples.push(s);
            counters.extend(c);
        }
        (samples, counters)
    }

    /// Set once by the sampler: the counters it opened.
    pub fn set_counters_opened(&self, opened: Vec<Counter>) {
        let _ = self.counters_opened.set(opened);
    }

    /// What the sampler's counter readings hold; None before it started or
    /// off the live root.
    pub fn counter_capture(&self, samples: Vec<CounterSample>) -> Option<CounterCapture> {
        let opened = self.counters_opened.get()?;
        Some(CounterCapture {
            opened: opened.clone(),
            missing: lock(&self.state).hw_missing.clone(),
            samples,
        })
    }
}

/// Encodes on demand, at most once per state generation and format.
pub(crate) struct Scrapes {
    shared: std::sync::Arc<Shared>,
    exporter: Exporter,
    cache: Mutex<[Option<(u64, Bytes)>; 2]>,
}

impl Scrapes {
    pub fn new(shared: std::sync::Arc<Shared>) -> Scrapes {
        let exporter = Exporter::new(shared.state.clone(), env!("CARGO_PKG_VERSION"));
        Scrapes {
            shared,
            exporter,
            cache: Mutex::new([None, None]),
        }
    }

    pub fn body(&self, format: Format) -> Bytes {
        let slot = match format {
            Format::OpenMetrics => 0,
            Format::Text => 1,
        };
        let generation = self.shared.generation.load(Ordering::Acquire);
        if let Some((g, b)) = &lock(&self.cache)[slot] {
            if *g == generation {
                return b.clone();
            }
        }
        let body = Bytes::from(self.exporter.encode(format));
        lock(&self.cache)[slot] = Some((generation, body.clone()));
        body
    }
}

/// Stop flag the background threads sleep on, so they end promptly.
#[derive(Default)]
pub(crate) struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    pub fn stop(&self) {
        *lock(&self.stopped) = true;
        self.cv.notify_all();
    }

    /// Sleeps until `deadline`; true when told to stop meanwhile.
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let mut stopped = lock(&self.stopped);
        loop {
            if *stopped {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            stopped = self
                .cv
                .wait_timeout(stopped, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn raw(t_ns: u64) -> RawSample {
        RawSample {
            t_ns,
            stat: String::new(),
        }
    }

    #[test]
    fn series_is_bounded_to_two_rule_intervals() {
        let s = Shared::new(10.0, Duration::from_secs(1));
        for t in 0..100 {
            s.push_sample(raw(t), None);
        }
        let (kept, counters) = s.take_series();
        assert!(counters.is_empty());
        assert_eq!(kept.len(), 2 * 10 + 16);
        assert_eq!(kept.last().unwrap().t_ns, 99);
        assert!(s.take_series().0.is_empty());
    }

    #[test]
    fn counter_readings_travel_with_their_samples() {
        let s = Shared::new(10.0, Duration::from_secs(1));
        let reading = |t_ns| CounterSample {
            t_ns,
            cpus: Vec::new(),
        };
        assert!(s.counter_capture(vec![]).is_none(), "no sampler yet");
        s.set_counters_opened(vec![Counter::Tsc]);
        for t in 0..4 {
            // A failed /proc/stat read has no counter reading either.
            s.push_sample(raw(t), (t != 2).then(|| reading(t)));
        }
        let (samples, counters) = s.take_series();
        assert_eq!(samples.len(), 4);
        let times: Vec<u64> = counters.iter().map(|c| c.t_ns).collect();
        assert_eq!(times, [0, 1, 3]);
        let cap = s.counter_capture(counters).unwrap();
        assert_eq!(cap.opened, [Counter::Tsc]);
        assert_eq!(cap.samples.len(), 3);
    }

    #[test]
    fn encodings_are_reused_until_the_state_changes() {
        let shared = Arc::new(Shared::new(10.0, Duration::from_secs(30)));
        let scrapes = Scrapes::new(shared.clone());
        let a = scrapes.body(Format::Text);
        let b = scrapes.body(Format::Text);
        // The same allocation: encoded once.
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert!(!String::from_utf8_lossy(&a).contains("stealscope_finding"));
        shared.update(|s| s.findings = vec![("x.y".into(), stealscope_analysis::Severity::Info)]);
        let c = scrapes.body(Format::Text);
        assert!(String::from_utf8_lossy(&c).contains("stealscope_finding{id=\"x.y\""));
        let om = scrapes.body(Format::OpenMetrics);
        assert!(om.ends_with(b"# EOF\n"));
    }

    #[test]
    fn stop_wakes_a_sleeper() {
        let stop = Arc::new(Stop::default());
        let s2 = stop.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            let stopped = s2.wait_until(start + Duration::from_secs(30));
            (stopped, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        stop.stop();
        let (stopped, waited) = t.join().unwrap();
        assert!(stopped && waited < Duration::from_secs(5));
        assert!(!Stop::default().wait_until(Instant::now()));
    }
}
