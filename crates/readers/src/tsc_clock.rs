//! CLOCK_MONOTONIC from the TSC, for the sampling loop's quiet path
//! (engine's `Sampler::quiet`): each sample there is stamped from one
//! `rdtsc` and a linear map, anchored on a real clock read at least once a
//! second by the loop's other iterations.
//!
//! Why: right after a 10 ms sleep, a vDSO clock_gettime touches the vDSO's
//! code and the vvar page on cold caches and TLBs; measured on the 2-vCPU
//! dev VM (rdtsc around it, medians) it cost ~3-6k cycles of the ~16k
//! that the quiet path spent in user space per sample; `rdtsc` costs ~40.
//! Why by hand: crates that read the TSC (quanta) calibrate it once against
//! a clock of their own and then drift from CLOCK_MONOTONIC, which every
//! other reading of a recording is stamped with; the map here is re-fitted
//! on CLOCK_MONOTONIC itself with each anchor, so NTP's slewing is followed.
//!
//! Used only where the kernel itself uses the TSC for CLOCK_MONOTONIC (the
//! current clocksource is `tsc`: stable, and synchronized across CPUs, or
//! the kernel would have switched away from it). An anchor whose real
//! reading is more than [`MAX_MISS_NS`] away from the map's prediction
//! (a TSC jump: the VM was paused or migrated, or the clocksource changed)
//! drops the rate until the next baseline; meanwhile `now_ns` says None
//! and the caller reads the real clock.

use crate::clock::monotonic_ns;
use crate::Source;

/// An anchor this long after the last fit fits the rate again: long enough
/// that the ~1 µs of uncertainty of one anchor is a few ppm of rate.
pub const MIN_BASELINE_NS: u64 = 400_000_000;
/// A prediction further than this from the real clock drops the rate:
/// with a stable TSC the map is within a few µs a second after its fit,
/// and 100 µs is 1 % of a 10 ms steal window.
pub const MAX_MISS_NS: u64 = 100_000;
/// An anchor whose two TSC reads are further apart than this (an
/// interrupt came between them) is taken again.
const MAX_ANCHOR_CYCLES: u64 = 20_000;

/// A TSC reading and the CLOCK_MONOTONIC ns read at the same moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Anchor {
    pub tsc: u64,
    pub ns: u64,
}

/// The map from TSC to CLOCK_MONOTONIC ns.
#[derive(Debug, Clone)]
pub struct TscClock {
    /// The last anchor: predictions extrapolate from it.
    last: Anchor,
    /// Where the current rate's baseline starts.
    fit_from: Anchor,
    /// ns per TSC cycle, times 2^32; None until a baseline is long enough.
    mult: Option<u64>,
}

impl TscClock {
    /// A clock anchored now, if the live kernel's clocksource (read from
    /// `src`) is the TSC on x86_64; None elsewhere.
    pub fn open(src: &dyn Source) -> Option<TscClock> {
        let current = crate::clocksource::read(src).ok()?.current?;
        if !cfg!(target_arch = "x86_64") || current != "tsc" {
            return None;
        }
        let a = anchor();
        Some(TscClock {
            last: a,
            fit_from: a,
            mult: None,
        })
    }

    /// Reads the real clock, re-fits the rate when the baseline is long
    /// enough, and returns the real clock's ns.
    pub fn anchor(&mut self) -> u64 {
        let a = anchor();
        if let Some(p) = self.predict(a.tsc) {
            if p.abs_diff(a.ns) > MAX_MISS_NS {
                (self.mult, self.fit_from) = (None, a);
            }
        }
        let (dt, dn) = (
            a.tsc.wrapping_sub(self.fit_from.tsc),
            a.ns.saturating_sub(self.fit_from.ns),
        );
        if (dt as i64) <= 0 {
            // A TSC behind the baseline's start: start a new baseline.
            (self.mult, self.fit_from) = (None, a);
        } else if dn >= MIN_BASELINE_NS {
            self.mult = Some((((dn as u128) << 32) / dt as u128) as u64);
            self.fit_from = a;
        }
        self.last = a;
        a.ns
    }

    /// CLOCK_MONOTONIC now from the TSC alone, or None while no rate is
    /// fitted (the caller reads the real clock).
    #[inline]
    pub fn now_ns(&self) -> Option<u64> {
        self.predict(rdtsc())
    }

    /// ns at `tsc`, never before the last anchor (a thread that moved to a
    /// CPU whose TSC reads a few cycles behind).
    #[inline]
    fn predict(&self, tsc: u64) -> Option<u64> {
        let m = self.mult?;
        let dt = tsc.saturating_sub(self.last.tsc) as u128;
        Some(self.last.ns + ((dt * m as u128) >> 32) as u64)
    }

    /// Whether a rate is fitted.
    pub fn fitted(&self) -> bool {
        self.mult.is_some()
    }
}

/// A real clock read between two TSC reads, stamped with their midpoint;
/// taken again (three times at most) when the two are far apart, keeping
/// the narrowest. A pair that reads backwards (the thread moved to a CPU
/// whose TSC reads a little behind) is stamped with its first read.
pub(crate) fn anchor() -> Anchor {
    let mut best: Option<(u64, Anchor)> = None;
    for _ in 0..3 {
        let t0 = rdtsc();
        let ns = monotonic_ns();
        let t1 = rdtsc();
        let spread = t1.saturating_sub(t0);
        let a = Anchor {
            tsc: t0 + spread / 2,
            ns,
        };
        if spread <= MAX_ANCHOR_CYCLES {
            return a;
        }
        if best.is_none_or(|(s, _)| spread < s) {
            best = Some((spread, a));
        }
    }
    best.expect("three tries").1
}

#[inline]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RootFs;

    fn live() -> Option<TscClock> {
        let c = TscClock::open(&RootFs::live());
        if c.is_none() {
            println!("skipped: the clocksource here is not the TSC");
        }
        c
    }

    /// After a baseline, the TSC's reading lies between two real reads
    /// around it (to a few µs), for a second of extrapolation.
    #[test]
    fn agrees_with_clock_monotonic_between_anchors() {
        let Some(mut c) = live() else { return };
        assert!(!c.fitted() && c.now_ns().is_none());
        std::thread::sleep(std::time::Duration::from_millis(450));
        c.anchor();
        assert!(c.fitted(), "a 450 ms baseline fits the rate");
        let start = monotonic_ns();
        let mut worst = 0i64;
        while monotonic_ns() - start < 1_000_000_000 {
            let before = monotonic_ns();
            let t = c.now_ns().unwrap();
            let after = monotonic_ns();
            let off = if t < before {
                t as i64 - before as i64
            } else if t > after {
                t as i64 - after as i64
            } else {
                0
            };
            if off.abs() > worst.abs() {
                worst = off;
            }
            std::thread::sleep(std::time::Duration::from_millis(7));
        }
        assert!(worst.abs() < 20_000, "{worst} ns outside the real reads");
    }

    /// A prediction far from the real clock drops the rate: a TSC that
    /// jumped is not trusted until the next baseline.
    #[test]
    fn a_jump_drops_the_rate() {
        let Some(mut c) = live() else { return };
        std::thread::sleep(std::time::Duration::from_millis(450));
        c.anchor();
        assert!(c.fitted());
        // As if the TSC had run at twice the rate since the last anchor.
        c.mult = c.mult.map(|m| m * 2);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ns = c.anchor();
        assert!(!c.fitted(), "kept a rate 2x off");
        assert!(ns.abs_diff(monotonic_ns()) < 10_000_000);
    }

    /// A baseline whose start reads ahead of the TSC now (a move to a CPU
    /// whose TSC reads behind) starts again instead of never fitting.
    #[test]
    fn a_backwards_baseline_starts_again() {
        let Some(mut c) = live() else { return };
        c.fit_from.tsc = u64::MAX / 2 + rdtsc();
        c.anchor();
        assert!(!c.fitted());
        assert!((c.fit_from.tsc as i64) > 0 && c.fit_from.tsc <= rdtsc());
        std::thread::sleep(std::time::Duration::from_millis(450));
        c.anchor();
        assert!(c.fitted(), "fits again after a baseline");
    }
}
