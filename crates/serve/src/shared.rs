//! What the threads share: the metrics state with a generation number (so
//! that scrapes between two samples reuse one encoding), the raw /proc/stat
//! series the rule runner analyses, and the stop signal.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use stealscope_output::metrics::{Exporter, Format, MetricsState, SharedState};
use stealscope_readers::snapshot::RawSample;

pub(crate) struct Shared {
    pub state: SharedState,
    generation: AtomicU64,
    series: Mutex<VecDeque<RawSample>>,
    /// Bound on the series: twice a rule interval, in case a run is slow.
    series_cap: usize,
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
        }
    }

    /// Changes the state and marks cached encodings stale.
    pub fn update(&self, f: impl FnOnce(&mut MetricsState)) {
        f(&mut lock(&self.state));
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn push_sample(&self, s: RawSample) {
        let mut q = lock(&self.series);
        if q.len() >= self.series_cap {
            q.pop_front();
        }
        q.push_back(s);
    }

    pub fn take_series(&self) -> Vec<RawSample> {
        lock(&self.series).drain(..).collect()
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
