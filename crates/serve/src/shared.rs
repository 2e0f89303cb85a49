//! What the engine's threads and the HTTP side share: the metrics state
//! with a generation number (so that scrapes between two samples reuse one
//! encoding).

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use stealscope_output::metrics::{Exporter, Format, MetricsState, SharedState};

#[derive(Default)]
pub(crate) struct Shared {
    pub state: SharedState,
    generation: AtomicU64,
    /// Set once the sampler has reported (a sample or an error), so the
    /// first scrape is not answered from an empty state.
    sampled: (Mutex<bool>, Condvar),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked holder leaves plain data behind: keep serving it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Changes the state and marks cached encodings stale.
    pub fn update(&self, f: impl FnOnce(&mut MetricsState)) {
        f(&mut lock(&self.state));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The sampler's first report is in.
    pub fn mark_sampled(&self) {
        let (done, cv) = &self.sampled;
        let mut d = lock(done);
        if !*d {
            *d = true;
            cv.notify_all();
        }
    }

    /// Waits for the sampler's first report, at most `limit`; true if it came.
    pub fn wait_sampled(&self, limit: Duration) -> bool {
        let (done, cv) = &self.sampled;
        let guard = lock(done);
        let (guard, _) = cv
            .wait_timeout_while(guard, limit, |d| !*d)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn encodings_are_reused_until_the_state_changes() {
        let shared = Arc::new(Shared::default());
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
}
