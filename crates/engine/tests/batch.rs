//! The sampler's batch mode (record's), on this machine: between the
//! subscriber's ticks the samples are taken without calling it (the quiet
//! loop), yet each one arrives, in order, on the rate's grid; every tick
//! comes on time; the duration ends with a last sample at its end; a stop
//! ends the loop within a period.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stealscope_engine::sampler::{Ended, Sample, Sampler, SamplerOptions, Subscriber};
use stealscope_engine::Rate;
use stealscope_readers::ReadError;

/// Keeps what the sampler hands over, and wants a tick every `every`.
struct Log {
    every: Duration,
    next: Instant,
    /// (t_ns, the aggregate row's user + nice + system) per sample.
    samples: Vec<(u64, u64)>,
    /// Sample count when each tick came, and how late after its due time.
    ticks: Vec<(usize, Duration)>,
    calls: usize,
}

impl Log {
    /// Ticks due at `first`, then every `every`.
    fn new(first: Instant, every: Duration) -> Log {
        Log {
            every,
            next: first,
            samples: Vec::new(),
            ticks: Vec::new(),
            calls: 0,
        }
    }
}

impl Subscriber for Log {
    fn sample(&mut self, s: Sample<'_>) -> Result<(), ReadError> {
        // Busy time only: idle may step back on a tickless kernel.
        let total = s
            .stat
            .total
            .as_ref()
            .map_or(0, |t| t.user + t.nice + t.system);
        self.samples.push((s.t_ns, total));
        Ok(())
    }

    fn tick(&mut self, now: Instant) -> Result<(), ReadError> {
        self.calls += 1;
        if now >= self.next {
            self.ticks.push((self.samples.len(), now - self.next));
            self.next += self.every;
        }
        Ok(())
    }

    fn next_tick(&self) -> Option<Instant> {
        Some(self.next)
    }
}

/// The batch period, and the subscriber's ticks (record flushes each
/// batch on the tick that comes with it).
const EVERY: Duration = Duration::from_millis(400);

fn opts(start: Instant, duration: Option<Duration>) -> SamplerOptions {
    SamplerOptions {
        from: Some(start),
        host_every: None,
        duration,
        last_at_end: true,
        batch: Some(EVERY),
        ..SamplerOptions::new("/".as_ref())
    }
}

#[test]
fn quiet_samples_arrive_in_order_and_every_tick_is_on_time() {
    let hz = 200.0;
    let secs = 2;
    let start = Instant::now();
    let mut log = Log::new(start + EVERY, EVERY);
    let ended = Sampler::open(opts(start, Some(Duration::from_secs(secs))), None)
        .unwrap()
        .run(&Rate::new(hz), &mut log, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(ended, Ended::Duration);
    let n = log.samples.len();
    // 400 periods and the sample at the end; a loaded machine may skip
    // a few deadlines (skipped, not caught up with).
    assert!((300..=401).contains(&n), "{n} samples");
    for w in log.samples.windows(2) {
        let gap = w[1].0 - w[0].0;
        // Apart (a late wake-up may be followed closely by an on-time one).
        assert!(gap > 0, "two samples {gap} ns apart");
        assert!(w[1].1 >= w[0].1, "the cpu row went back: {:?}", w);
    }
    // The last sample at the end itself, not a period early.
    let clock = stealscope_readers::clock::base();
    let end_ns = clock.ns(start + Duration::from_secs(secs));
    let last = log.samples[n - 1].0;
    assert!(last >= end_ns, "last sample {} ns early", end_ns - last);
    // Ticks due at 0.4, 0.8, 1.2, 1.6 and 2.0 s: each came, and within a
    // couple of periods of its time (20 ms allows for a loaded machine).
    assert_eq!(log.ticks.len(), 5, "{:?}", log.ticks);
    for (k, &(at, late)) in log.ticks.iter().enumerate() {
        assert!(late < Duration::from_millis(20), "tick {k} {late:?} late");
        // The samples before a tick were handed over by then (the batch
        // of the same period ends with the same sample).
        let due = clock.ns(start + log.every * (k as u32 + 1));
        let before = log.samples.iter().filter(|s| s.0 < due).count();
        assert!(at >= before, "tick {k}: {at} samples, {before} before it");
    }
    // The samples in between were taken without calling the subscriber:
    // a call per tick, delivery and the end, not one per sample.
    assert!(
        log.calls < n / 10,
        "{} tick calls for {n} samples",
        log.calls
    );
}

#[test]
fn a_stop_ends_the_quiet_loop_within_a_period() {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let mut log = Log::new(start + Duration::from_secs(60), Duration::from_secs(60));
    let stopped_at = std::thread::scope(|s| {
        let t = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            let at = Instant::now();
            stop.store(true, Ordering::Relaxed);
            at
        });
        let ended = Sampler::open(opts(start, None), None)
            .unwrap()
            .run(&Rate::new(100.0), &mut log, &stop)
            .unwrap();
        assert_eq!(ended, Ended::Stopped);
        let at = t.join().unwrap();
        assert!(
            at.elapsed() < Duration::from_millis(100),
            "ended {:?} after the stop",
            at.elapsed()
        );
        at
    });
    // Held samples were handed over at the end, the last after the stop.
    let n = log.samples.len();
    assert!(n >= 25, "{n} samples in 0.5 s at 100 Hz");
    let last = log.samples[n - 1].0;
    let stop_ns = stealscope_readers::clock::base().ns(stopped_at);
    assert!(last >= stop_ns, "no sample after the stop");
    assert!(log.ticks.is_empty(), "no tick was due: {:?}", log.ticks);
}

/// A tick due 1 µs after a sample's deadline: that sample wakes past it
/// (a wake-up takes longer), and is taken with the tick, not held quietly
/// with the tick left for the next period; the last such tick, at the end
/// of the duration, still comes.
#[test]
fn a_sample_woken_past_a_tick_comes_with_it() {
    let every = Duration::from_millis(200);
    let start = Instant::now();
    let late = Duration::from_micros(1);
    let mut log = Log::new(start + every + late, every);
    let ended = Sampler::open(opts(start, Some(Duration::from_secs(1) + late)), None)
        .unwrap()
        .run(&Rate::new(50.0), &mut log, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(ended, Ended::Duration);
    // Due at 0.2, 0.4, 0.6, 0.8 and 1.0 s (+1 µs): each within half a
    // period (20 ms), not a period late.
    assert_eq!(log.ticks.len(), 5, "{:?}", log.ticks);
    for (k, &(_, late)) in log.ticks.iter().enumerate() {
        assert!(late < Duration::from_millis(10), "tick {k} {late:?} late");
    }
}
