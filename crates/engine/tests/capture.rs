//! doctor's one-interval capture on the engine's sampler, on this machine:
//! the series ends with one sample at t1 = start + interval (none doubled),
//! a stop ends it early with a last sample, progress ticks at any rate, and
//! the series' steal and busy ticks are those of an independent /proc/stat
//! reading over the same interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stealscope_engine::capture::{capture, CaptureOptions, Captured};
use stealscope_engine::host::HostLiveOptions;
use stealscope_engine::Stop;
use stealscope_readers::snapshot::RawSample;

fn opts(interval: Duration, sample_hz: f64) -> CaptureOptions {
    CaptureOptions {
        root: "/".into(),
        interval,
        sample_hz,
    }
}

fn t_ns(s: &[RawSample]) -> Vec<u64> {
    s.iter().map(|s| s.t_ns).collect()
}

#[test]
fn the_series_ends_with_one_sample_at_t1() {
    let interval = Duration::from_secs(2);
    let interval_ns = interval.as_nanos() as u64;
    let period_ns = 100_000_000;
    let stop = Stop::default();
    let mut ticks = 0;
    let before = stealscope_readers::clock::monotonic_ns();
    let c = capture(
        &opts(interval, 10.0),
        &HostLiveOptions::default(),
        &stop,
        &mut |_| ticks += 1,
    )
    .unwrap();
    assert!(c.stopped_after.is_none());
    let t = t_ns(&c.snapshot.samples);
    assert!(t.len() >= 3, "{} samples", t.len());
    let last = t[t.len() - 1];
    // t1 = start + interval, and the start lies between `before` and the
    // first sample: the last sample is not early, and at most a wake-up
    // late (50 ms allows for a loaded machine).
    assert!(
        last >= before + interval_ns,
        "{} ns early",
        before + interval_ns - last
    );
    assert!(
        last - t[0] <= interval_ns + 50_000_000,
        "{} ns",
        last - t[0]
    );
    // How late, for the record: sample k is due k periods after the start
    // and is late by its wake-up; the least late one dates the start.
    let grid = |ns: u64| ((ns - t[1]) + period_ns / 2) / period_ns + 1;
    let start = t[1..t.len() - 1]
        .iter()
        .map(|&ns| ns - grid(ns) * period_ns)
        .min()
        .unwrap();
    println!(
        "last sample {:.3} ms after t1",
        (last as f64 - (start + interval_ns) as f64) / 1e6
    );
    // No sample doubled at the end: the old loop took one more ~0.2 ms
    // after the one at t1. Only a wake-up 90 ms late comes this close.
    let min_gap = t.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(min_gap > period_ns / 10, "two samples {min_gap} ns apart");
    // 20 windows of 100 ms; a loaded machine may skip a few deadlines.
    assert!((12..=21).contains(&t.len()), "{} samples", t.len());
    assert!(ticks >= t.len(), "{ticks} ticks for {} samples", t.len());
    let m = &c.snapshot.meta;
    assert!(
        m.interval_s >= 2.0 && m.interval_s < 2.5,
        "{}",
        m.interval_s
    );
    assert_eq!(m.sample_hz, Some(10.0));
}

/// Per-CPU (busy, steal) ticks of an independent /proc/stat read: busy is
/// user+nice+system+irq+softirq.
fn per_cpu() -> Vec<(u64, (u64, u64))> {
    std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let mut f = l.split_whitespace();
            let cpu = f.next().unwrap()[3..].parse().unwrap();
            let v: Vec<u64> = f.map(|x| x.parse().unwrap()).collect();
            let g = |i: usize| v.get(i).copied().unwrap_or(0);
            (cpu, (g(0) + g(1) + g(2) + g(5) + g(6), g(7)))
        })
        .collect()
}

#[test]
fn steal_and_busy_agree_with_proc_stat_read_around_it() {
    // One CPU kept busy, so busy is not trivially 0 everywhere.
    let spin = Arc::new(AtomicBool::new(false));
    let s2 = spin.clone();
    let spinner = std::thread::spawn(move || {
        while !s2.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    let a = per_cpu();
    let t0 = Instant::now();
    let c = capture(
        &opts(Duration::from_secs(3), 10.0),
        &HostLiveOptions::default(),
        &Stop::default(),
        &mut |_| {},
    )
    .unwrap();
    let wall = t0.elapsed().as_secs_f64();
    let b = per_cpu();
    spin.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let s = &c.snapshot.samples;
    let span = (s[s.len() - 1].t_ns - s[0].t_ns) as f64 / 1e9;
    let hz = c.snapshot.meta.clk_tck.unwrap_or(100) as f64;
    // They may differ by what the outside reading adds (the two sides'
    // reads) and by a tick at each end of either reading.
    let tol = 100.0 * ((wall - span) + 2.0 / hz) / wall + 0.5;
    let report = stealscope_engine::report::of(&c.snapshot).unwrap();
    let j = serde_json::to_value(&report).unwrap();
    let cpus = j["summary"]["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), a.len());
    let mut busiest: f64 = 0.0;
    for c in cpus {
        let cpu = c["cpu"].as_u64().unwrap();
        let x = a.iter().find(|r| r.0 == cpu).unwrap().1;
        let y = b.iter().find(|r| r.0 == cpu).unwrap().1;
        for (key, d) in [("busy_pct", y.0 - x.0), ("steal_pct", y.1 - x.1)] {
            let ours = c[key].as_f64().unwrap();
            let theirs = 100.0 * d as f64 / hz / wall;
            assert!(
                (ours - theirs).abs() <= tol,
                "cpu{cpu} {key}: {ours:.2} vs /proc/stat {theirs:.2} (within {tol:.2})"
            );
        }
        busiest = busiest.max(c["busy_pct"].as_f64().unwrap());
    }
    assert!(busiest > 50.0, "the spinner's CPU shows {busiest:.1}% busy");
}

#[test]
fn a_stop_ends_it_early_with_a_last_sample() {
    let stop = Arc::new(Stop::default());
    let s2 = stop.clone();
    let began = Instant::now();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        s2.stop();
        Instant::now()
    });
    let c: Captured = capture(
        &opts(Duration::from_secs(30), 10.0),
        &HostLiveOptions::default(),
        &*stop,
        &mut |_| {},
    )
    .unwrap();
    let returned = Instant::now();
    let sent = t.join().unwrap();
    assert!(
        returned - sent < Duration::from_secs(1),
        "{:?}",
        returned - sent
    );
    let after = c.stopped_after.expect("stopped early");
    // Counted from the start side, read after the stop's clock started.
    assert!(
        after <= returned - began,
        "{after:?} of {:?}",
        returned - began
    );
    assert!(after >= Duration::from_millis(200), "{after:?}");
    assert!(c
        .note(Duration::from_secs(30))
        .unwrap()
        .contains("ended early"));
    // The last sample is the stop's, not the last one of the grid.
    let t = t_ns(&c.snapshot.samples);
    let gap = t[t.len() - 1] - t[t.len() - 2];
    assert!(gap < 100_000_000, "last two samples {gap} ns apart");
}

#[test]
fn a_slow_rate_still_ticks_and_stops_within_a_tick() {
    // 0.1 Hz: one sample in 10 s, yet progress and Ctrl-C every 100 ms.
    let flag = Arc::new(AtomicBool::new(false));
    let f2 = flag.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        f2.store(true, Ordering::Relaxed);
    });
    let start = Instant::now();
    let mut seen = Vec::new();
    let c = capture(
        &opts(Duration::from_secs(30), 0.1),
        &HostLiveOptions::default(),
        &*flag,
        &mut |d| seen.push(d),
    )
    .unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(c.stopped_after.is_some());
    assert!(seen.len() >= 3, "{} ticks in {took:?}", seen.len());
    assert_eq!(c.snapshot.samples.len(), 2, "start and stop");
}

#[test]
fn rate_zero_keeps_no_series_but_counters_at_both_ends() {
    let c = capture(
        &opts(Duration::from_millis(500), 0.0),
        &HostLiveOptions::default(),
        &Stop::default(),
        &mut |_| {},
    )
    .unwrap();
    assert!(c.snapshot.samples.is_empty());
    assert_eq!(c.snapshot.meta.sample_hz, None);
    if let Some(k) = &c.snapshot.hardware.counters {
        if !k.opened.is_empty() {
            let n = k.samples.len();
            assert_eq!(n, 2, "{n} counter readings");
            let span = k.samples[1].t_ns - k.samples[0].t_ns;
            assert!((400_000_000..700_000_000).contains(&span), "{span} ns");
        }
    }
}
