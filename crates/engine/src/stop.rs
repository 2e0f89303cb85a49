//! What the engine's loops sleep on: a stop flag set by the owner
//! ([`Stop`], a condition variable, so the loops end promptly) or by a
//! signal handler (an `AtomicBool`, polled).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Stop flag the background threads sleep on, so they end promptly.
#[derive(Default)]
pub struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked holder leaves plain data behind: keep going.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stop {
    pub fn stop(&self) {
        *lock(&self.stopped) = true;
        self.cv.notify_all();
    }
}

impl Wait for Stop {
    fn wait_until(&self, deadline: Instant) -> bool {
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

/// Sleeps until a deadline unless told to stop.
pub trait Wait: Sync {
    /// Sleeps until `deadline`; true when told to stop (before or meanwhile).
    fn wait_until(&self, deadline: Instant) -> bool;
    /// The flag alone, when this waits by checking it and sleeping on the
    /// clock: the sampler's quiet loop then does both itself, inline.
    fn flag(&self) -> Option<&AtomicBool> {
        None
    }
}

/// A flag a signal handler sets (`signals::stop_on_signals`): checked
/// before the sleep, which is not cut short (a sample period at most).
impl Wait for AtomicBool {
    fn wait_until(&self, deadline: Instant) -> bool {
        if self.load(Ordering::Relaxed) {
            return true;
        }
        stealscope_readers::clock::sleep_until(deadline);
        false
    }

    fn flag(&self) -> Option<&AtomicBool> {
        Some(self)
    }
}

/// The sampling rate, changeable while the engine runs (top's + and -).
#[derive(Debug)]
pub struct Rate(std::sync::atomic::AtomicU64);

impl Rate {
    pub fn new(hz: f64) -> Rate {
        Rate(std::sync::atomic::AtomicU64::new(hz.to_bits()))
    }

    pub fn hz(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    pub fn set_hz(&self, hz: f64) {
        self.0.store(hz.to_bits(), Ordering::Relaxed);
    }

    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.hz())
    }
}

/// When a periodic task is due next: `period` after `prev`, on the same
/// grid; deadlines already past (a stall, a loaded machine) are skipped,
/// not caught up with back-to-back reads.
pub fn next_due(prev: Instant, period: Duration, now: Instant) -> Instant {
    let behind = now.saturating_duration_since(prev).as_nanos() as u64;
    prev + Duration::from_nanos(next_due_ns(0, period.as_nanos() as u64, behind))
}

/// [`next_due`]'s rule on CLOCK_MONOTONIC ns, which the sampler's quiet
/// loop keeps its times in.
#[inline]
pub fn next_due_ns(prev: u64, period: u64, now: u64) -> u64 {
    let n = prev + period;
    if n > now {
        return n;
    }
    n + period * ((now - n) / period.max(1) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    #[test]
    fn missed_deadlines_are_skipped_on_the_grid() {
        let t = Instant::now();
        let p = Duration::from_millis(10);
        assert_eq!(next_due(t, p, t + Duration::from_millis(3)), t + p);
        // 25 ms late: the deadlines at 10 and 20 ms are gone, 30 ms is next.
        assert_eq!(next_due(t, p, t + Duration::from_millis(25)), t + 3 * p);
        assert_eq!(next_due(t, p, t + p), t + 2 * p);
        let ms = 1_000_000;
        assert_eq!(next_due_ns(100 * ms, 10 * ms, 103 * ms), 110 * ms);
        assert_eq!(next_due_ns(100 * ms, 10 * ms, 125 * ms), 130 * ms);
        assert_eq!(next_due_ns(100 * ms, 10 * ms, 110 * ms), 120 * ms);
    }

    #[test]
    fn a_signal_flag_stops_before_sleeping() {
        let flag = AtomicBool::new(true);
        let start = Instant::now();
        assert!(flag.wait_until(start + Duration::from_secs(30)));
        assert!(start.elapsed() < Duration::from_secs(5));
        let r = Rate::new(10.0);
        r.set_hz(20.0);
        assert_eq!(r.period(), Duration::from_millis(50));
    }
}
