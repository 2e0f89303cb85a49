//! The one clock every reading is stamped with.

/// CLOCK_MONOTONIC in ns (samples.jsonl, counter reads, recordings).
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// An `Instant` and the CLOCK_MONOTONIC ns it stands for. std's `Instant`
/// is CLOCK_MONOTONIC on Linux, so one clock read gives both: the 100 Hz
/// sampling loop reads the clock once per sample and derives the rest.
#[derive(Debug, Clone, Copy)]
pub struct ClockBase {
    at: Instant,
    ns: u64,
}

impl ClockBase {
    /// The time now, as ns and as an `Instant`, from one clock read.
    pub fn now(&self) -> (u64, Instant) {
        let ns = monotonic_ns();
        (ns, self.instant(ns))
    }

    pub fn instant(&self, ns: u64) -> Instant {
        self.at + Duration::from_nanos(ns.saturating_sub(self.ns))
    }

    pub fn ns(&self, i: Instant) -> u64 {
        self.ns + i.saturating_duration_since(self.at).as_nanos() as u64
    }
}

/// The process's clock base, taken on first use.
pub fn base() -> &'static ClockBase {
    static BASE: OnceLock<ClockBase> = OnceLock::new();
    // ns read first: a derived Instant is then never earlier than one
    // std read before it (the few ns between the reads err late).
    BASE.get_or_init(|| {
        let ns = monotonic_ns();
        ClockBase {
            ns,
            at: Instant::now(),
        }
    })
}

/// Sleeps until `deadline` (absolute, CLOCK_MONOTONIC): no clock read to
/// work out how long, and no drift from one; returns at once when passed.
pub fn sleep_until(deadline: Instant) {
    sleep_until_ns(base().ns(deadline));
}

/// [`sleep_until`] a CLOCK_MONOTONIC ns: libc's call itself, inline, for
/// the sampler's quiet loop (each wrapper on the way back from a 10 ms
/// sleep is more cold code: nix's and this crate's showed in its profile).
#[inline]
pub fn sleep_until_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // An absolute deadline: after a signal, the same call sleeps the rest.
    // SAFETY: a valid timespec; no remainder is asked for.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_maps_instants_to_the_monotonic_clock() {
        let b = base();
        let before = monotonic_ns();
        let (ns, i) = b.now();
        let after = monotonic_ns();
        assert!(before <= ns && ns <= after);
        // Round trip, and the mapping agrees with a fresh Instant to 1 ms.
        assert_eq!(b.ns(i), ns);
        let gap = b.ns(Instant::now()).abs_diff(monotonic_ns());
        assert!(gap < 1_000_000, "{gap} ns apart");
    }

    #[test]
    fn sleep_until_sleeps_to_the_deadline_and_not_for_a_past_one() {
        let start = Instant::now();
        sleep_until(start + Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
        let t = Instant::now();
        sleep_until(start);
        assert!(t.elapsed() < Duration::from_millis(20));
    }
}
