//! The tracefs route against real threads: a watched victim and culprit
//! spinners pinned together, the victim's own schedstat (run, wait, times
//! run) as the independent account of its wait, and the culprits' schedstat
//! for their run time. Needs root and tracefs: FAILS under CI (any value
//! but empty, 0 or false, `common::ci`), skips with a reason elsewhere.
//!
//! The victim and culprits run at nice -20 (and -15) so that the builds of
//! other checkouts sharing these 2 CPUs take a small part of CPU 1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use stealscope_sched::tracefs_raw::{Options, TracefsRoute};
use stealscope_sched::{Collector, Preference};
use stealscope_who::{SchedSample, ThreadWaits};

mod common;
use common::require;

/// The tests share CPU 1: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Root for tracefs; the test's own thread then runs at nice -20 like the
/// spinners, so its back-to-back reads are not split by them.
fn root() -> bool {
    if !require(unsafe { libc::geteuid() } == 0, "root (tracefs)") {
        return false;
    }
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as u32, -20) };
    true
}

/// Pins the calling thread to `cpus`.
fn pin_to(cpus: &[usize]) {
    // SAFETY: set is a valid cpu_set_t for the calls' duration.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
}

/// A spinning (or custom) thread: pinned, named, at a nice value.
struct Spinner {
    tid: u32,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    fn start(name: &str, cpus: &[usize], nice: i32) -> Spinner {
        Spinner::with(name, cpus, nice, |stop| {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    }

    fn with(
        name: &str,
        cpus: &[usize],
        nice: i32,
        body: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (cpus, name, s) = (cpus.to_vec(), name.to_string(), stop.clone());
        let handle = std::thread::spawn(move || {
            pin_to(&cpus);
            unsafe {
                let cname = std::ffi::CString::new(name).unwrap();
                libc::prctl(libc::PR_SET_NAME, cname.as_ptr());
                let tid = libc::gettid();
                assert_eq!(libc::setpriority(libc::PRIO_PROCESS, tid as u32, nice), 0);
                tx.send(tid as u32).unwrap();
            }
            body(&s);
        });
        Spinner {
            tid: rx.recv().unwrap(),
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// (run ns, wait ns, times run).
type Stat = (u64, u64, u64);

/// Schedstat of a thread of this process.
fn schedstat(tid: u32) -> Stat {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

fn charged_to(w: &ThreadWaits, tid: u32) -> u64 {
    w.by_thread
        .iter()
        .filter(|(c, _)| c.tid == tid)
        .map(|(_, &ns)| ns)
        .sum()
}

/// Busy time of every CPU but `ours` over an interval, from /proc/stat
/// (reported, so a failure can be told from a loaded machine).
fn cpu_busy() -> Vec<u64> {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    s.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            v.iter().sum::<u64>() - v[3] - v[4]
        })
        .collect()
}

struct Window {
    before: SchedSample,
    after: SchedSample,
    victim: (Stat, Stat),
    others: Vec<(Stat, Stat)>,
}

impl Window {
    fn waits(&self, tid: u32) -> ThreadWaits {
        self.after.threads[&tid].since(&self.before.threads[&tid])
    }
    fn wait_delta(&self) -> u64 {
        self.victim.1 .1 - self.victim.0 .1
    }
    fn runs_delta(&self) -> u64 {
        self.victim.1 .2 - self.victim.0 .2
    }
    fn run_delta(&self, i: usize) -> u64 {
        self.others[i].1 .0 - self.others[i].0 .0
    }
}

/// Reads the collector and the threads' schedstat back to back, `secs` apart.
fn measure(
    read: &mut dyn FnMut() -> SchedSample,
    victim: u32,
    others: &[u32],
    secs: f64,
) -> Window {
    std::thread::sleep(Duration::from_millis(300));
    let before = read();
    let v0 = schedstat(victim);
    let o0: Vec<_> = others.iter().map(|&t| schedstat(t)).collect();
    let busy0 = cpu_busy();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let after = read();
    let v1 = schedstat(victim);
    let o1: Vec<_> = others.iter().map(|&t| schedstat(t)).collect();
    let busy1 = cpu_busy();
    eprintln!(
        "cpu busy ticks over the window: {:?}; victim run {} wait {} runs {}",
        busy1
            .iter()
            .zip(&busy0)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
        v1.0 - v0.0,
        v1.1 - v0.1,
        v1.2 - v0.2
    );
    Window {
        before,
        after,
        victim: (v0, v1),
        others: o0.into_iter().zip(o1).collect(),
    }
}

fn report(w: &ThreadWaits) {
    for (c, ns) in &w.by_thread {
        eprintln!(
            "  {:>7} {:>7} {:<16} kthread={} {:>12} ns",
            c.tid, c.tgid, c.comm, c.kthread, ns
        );
    }
    eprintln!(
        "  irq {} idle {} unknown {} episodes {} (p50 {:?} max {})",
        w.irq_ns,
        w.idle_ns,
        w.unknown_ns,
        w.episodes.count,
        w.episodes.quantile(0.5),
        w.episodes.max_ns
    );
}

fn within(a: u64, b: u64, frac: f64) -> bool {
    (a as f64 - b as f64).abs() <= frac * b as f64
}

#[test]
fn one_culprit_takes_the_victims_wait_and_the_sum_matches_schedstat() {
    let _one = serial();
    if !root() {
        return;
    }
    let mut col = Collector::start(Preference::Tracefs).expect("tracefs route starts");
    let victim = Spinner::start("ss-victim", &[1], -20);
    let culprit = Spinner::start("ss-culprit", &[1], -20);
    col.watch(&[victim.tid]).unwrap();
    let w = measure(&mut || col.read().unwrap(), victim.tid, &[culprit.tid], 3.0);
    let d = w.waits(victim.tid);
    report(&d);
    let total = d.wait_ns();
    let to_culprit = charged_to(&d, culprit.tid);
    // The victim is always runnable on CPU 1: whenever the culprit runs,
    // the victim waits. Its own run time is the truth of its charge.
    let ran = w.run_delta(0);
    assert!(
        within(to_culprit, ran, 0.02),
        "culprit charged {to_culprit} vs its run time {ran}"
    );
    let share = to_culprit as f64 / total as f64;
    let truth = ran as f64 / w.wait_delta() as f64;
    if truth >= 0.95 {
        assert!(share >= 0.95, "culprit {to_culprit} of {total} ns");
    } else {
        // Validity: other work (builds beside us) ran on CPU 1 too; the
        // share is then judged against schedstat's.
        eprintln!("validity: the culprit ran {truth:.3} of the wait; share judged against it");
        assert!(
            (share - truth).abs() <= 0.02,
            "share {share:.3} vs {truth:.3}"
        );
    }
    let c = d.by_thread.keys().find(|c| c.tid == culprit.tid).unwrap();
    assert_eq!(c.comm, "ss-culprit");
    assert_eq!(c.tgid, std::process::id());
    assert!(!c.kthread);
    assert!(
        within(total, w.wait_delta(), 0.02),
        "charged {total} vs schedstat wait {}",
        w.wait_delta()
    );
    // The two reads are a few ms apart from schedstat's: one switch-in may
    // fall on either side.
    assert!(
        d.episodes.count <= w.runs_delta() + 1,
        "{} episodes, {} runs",
        d.episodes.count,
        w.runs_delta()
    );
    assert!(d.episodes.count > 0);
    assert_eq!(w.after.route.as_str(), "tracefs");
    assert!(w.after.stats.events > w.before.stats.events);
    drop(col);
    assert!(stealscope_readers::tracefs::leftover_instances("stealscope-sched-").is_empty());
}

#[test]
fn two_culprits_split_as_their_own_run_times() {
    let _one = serial();
    if !root() {
        return;
    }
    let mut col = Collector::start(Preference::Tracefs).expect("tracefs route starts");
    let victim = Spinner::start("ss-victim2", &[1], -20);
    let a = Spinner::start("ss-culprit-a", &[1], -20);
    let b = Spinner::start("ss-culprit-b", &[1], -15);
    col.watch(&[victim.tid]).unwrap();
    let w = measure(
        &mut || col.read().unwrap(),
        victim.tid,
        &[a.tid, b.tid],
        3.0,
    );
    let d = w.waits(victim.tid);
    report(&d);
    let (ca, cb) = (charged_to(&d, a.tid), charged_to(&d, b.tid));
    let (ra, rb) = (w.run_delta(0), w.run_delta(1));
    let charged_share = ca as f64 / (ca + cb) as f64;
    let run_share = ra as f64 / (ra + rb) as f64;
    eprintln!("a: charged {ca} run {ra}; b: charged {cb} run {rb}");
    assert!(
        (charged_share - run_share).abs() <= 0.05,
        "a's share charged {charged_share:.3} vs run {run_share:.3}"
    );
    // Nice -15 weighs a third of -20: the split is not even.
    assert!(run_share > 0.6, "run share {run_share:.3}");
    assert!(within(d.wait_ns(), w.wait_delta(), 0.02));
}

#[test]
fn a_migrating_victim_still_sums_to_schedstat() {
    let _one = serial();
    if !root() {
        return;
    }
    let mut col = Collector::start(Preference::Tracefs).expect("tracefs route starts");
    let victim = Spinner::start("ss-victim3", &[0, 1], -20);
    let c0 = Spinner::start("ss-culprit-0", &[0], -20);
    let c1 = Spinner::start("ss-culprit-1", &[1], -20);
    col.watch(&[victim.tid]).unwrap();
    let w = measure(
        &mut || col.read().unwrap(),
        victim.tid,
        &[c0.tid, c1.tid],
        4.0,
    );
    let d = w.waits(victim.tid);
    report(&d);
    let (w0, w1) = (charged_to(&d, c0.tid), charged_to(&d, c1.tid));
    eprintln!(
        "c0 charged {w0} ran {}; c1 charged {w1} ran {}",
        w.run_delta(0),
        w.run_delta(1)
    );
    assert!(
        within(d.wait_ns(), w.wait_delta(), 0.02),
        "charged {} vs schedstat wait {}",
        d.wait_ns(),
        w.wait_delta()
    );
    // Nobody is blamed for more than it ran.
    assert!(w0 as f64 <= w.run_delta(0) as f64 * 1.02);
    assert!(w1 as f64 <= w.run_delta(1) as f64 * 1.02);
    assert!(w0 > 0 && w1 > 0, "the victim waited on both CPUs");
}

#[test]
fn a_tiny_buffer_under_a_high_switch_rate_counts_its_losses() {
    let _one = serial();
    if !root() {
        return;
    }
    let opts = Options {
        buffer_kb: 8,
        buffer_percent: 100,
        poll_ms: 1000,
    };
    // The route's reader thread inherits CPU 1 from the thread that
    // starts it, and there the nice -20 ping-pong leaves it ~1 % of the
    // CPU: the 8 KB buffer overruns however idle CPU 0 is (from CPU 0 the
    // reader kept up with 190k events a second and some runs lost none).
    let mut route = std::thread::spawn(move || {
        pin_to(&[1]);
        TracefsRoute::start(opts)
    })
    .join()
    .unwrap()
    .expect("tracefs route starts");
    // Two threads on CPU 1 handing a byte back and forth: a switch each way.
    let (mut r1, mut w1) = std::io::pipe().unwrap();
    let (mut r2, mut w2) = std::io::pipe().unwrap();
    use std::io::{Read, Write};
    // pong is dropped after ping: ping's end closes the pipe pong reads.
    let pong = Spinner::with("ss-pong", &[1], -20, move |_| {
        let mut b = [0u8; 1];
        while r1.read_exact(&mut b).is_ok() {
            if w2.write_all(b"y").is_err() {
                break;
            }
        }
    });
    // Paused before the last reading, so that no wait of ping's is open
    // then: the route charges an open wait up to its read (R2 in
    // docs/who-stole.md), schedstat only once it ends, and on a loaded
    // machine that part alone was over the slack below.
    let pause = Arc::new(AtomicBool::new(false));
    let paused = pause.clone();
    let ping = Spinner::with("ss-ping", &[1], -20, move |stop| {
        let mut b = [0u8; 1];
        while !stop.load(Ordering::Relaxed) {
            if paused.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            if w1.write_all(b"x").is_err() || r2.read_exact(&mut b).is_err() {
                break;
            }
        }
    });
    route.watch(&[ping.tid, pong.tid]);
    let before = route.read().unwrap();
    let (_, wait0, _) = schedstat(ping.tid);
    std::thread::sleep(Duration::from_secs(2));
    pause.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(50));
    // The kernel's own count first: the route's read after it can only
    // have seen as many losses or more.
    let kernel: u64 = (0..64)
        .filter_map(|c| {
            std::fs::read_to_string(route.instance_dir().join(format!("per_cpu/cpu{c}/stats"))).ok()
        })
        .map(|s| stealscope_sched::tracefs_raw::stats_lost(&s))
        .sum();
    let after = route.read().unwrap();
    let (_, wait1, _) = schedstat(ping.tid);
    let (v0, v1) = (
        before.threads[&ping.tid].clone(),
        after.threads[&ping.tid].clone(),
    );
    let d = v1.since(&v0);
    let named = d.wait_ns() - d.unknown_ns;
    let wait = wait1 - wait0;
    eprintln!(
        "lost {} (kernel stats {kernel}), events {}, ping charged {} ({} unknown) of schedstat wait {wait}",
        after.stats.lost_events,
        after.stats.events,
        d.wait_ns(),
        d.unknown_ns
    );
    assert!(kernel > 0, "the 8 KB buffer overran");
    assert!(after.stats.lost_events >= kernel);
    assert!(after.stats.lost_events > before.stats.lost_events);
    // What the gaps hide goes to unknown, never to a culprit: what is
    // named is no more than the thread really waited, within the 2 % the
    // routes promise (docs/who-stole.md) plus a few ms for the reads'
    // offset from schedstat's. At ~95k waits a second each trace stamp
    // sits ~160 ns from the rq clock's (a loaded run: 943 ms named of
    // 928 ms), so a fixed slack alone does not hold.
    let slack = wait / 50 + 5_000_000;
    assert!(named <= wait + slack, "named {named} of {wait}");
}

/// A thread that sleeps most of the time (2 ms sleeps, 1 ms of work) and
/// parks while the test reads, so that no wait episode straddles a reading:
/// its charged wait matches its schedstat wait over the same interval, and
/// it has no more episodes than times run. On 6.18 the switch away from
/// the idle task is sometimes missing from the trace; a woken thread must
/// not look queued on an idle CPU until it next sleeps.
#[test]
fn a_mostly_sleeping_thread_sums_to_schedstat() {
    let _one = serial();
    if !root() {
        return;
    }
    let mut col = Collector::start(Preference::Tracefs).expect("tracefs route starts");
    let pause = Arc::new(AtomicBool::new(true));
    let parked = Arc::new(AtomicBool::new(false));
    let (p, k) = (pause.clone(), parked.clone());
    let sleeper = Spinner::with("ss-sleeper", &[0, 1], 0, move |stop| {
        while !stop.load(Ordering::Relaxed) {
            if p.load(Ordering::Acquire) {
                k.store(true, Ordering::Release);
                std::thread::park_timeout(Duration::from_millis(200));
                continue;
            }
            k.store(false, Ordering::Release);
            std::thread::sleep(Duration::from_millis(2));
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
        }
    });
    let handle = sleeper.handle.as_ref().unwrap().thread().clone();
    col.watch(&[sleeper.tid]).unwrap();
    // Parked and off every run queue: the reading and schedstat agree.
    let quiet = |col: &mut Collector| {
        pause.store(true, Ordering::Release);
        while !parked.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        let s = col.read().unwrap();
        (s, schedstat(sleeper.tid))
    };
    let mut runs = Vec::new();
    for _ in 0..3 {
        let (before, s0) = quiet(&mut col);
        pause.store(false, Ordering::Release);
        handle.unpark();
        std::thread::sleep(Duration::from_secs(3));
        let (after, s1) = quiet(&mut col);
        let d = after.threads[&sleeper.tid].since(&before.threads[&sleeper.tid]);
        report(&d);
        let lost = after.stats.lost_events - before.stats.lost_events;
        let (wait, times) = (s1.1 - s0.1, s1.2 - s0.2);
        eprintln!(
            "charged {} ns vs schedstat wait {wait} ns; {} episodes vs {times} runs; lost {lost}; missed {}",
            d.wait_ns(),
            d.episodes.count,
            after.stats.missed_switches - before.stats.missed_switches
        );
        assert!(times > 500, "the sleeper ran {times} times");
        assert!(
            d.episodes.count <= times,
            "{} episodes, {times} runs",
            d.episodes.count
        );
        if lost > 0 {
            eprintln!("run rejected: {lost} events lost");
            continue;
        }
        runs.push((d.wait_ns(), wait, d.episodes.count));
    }
    assert!(!runs.is_empty(), "every run lost events");
    // schedstat times a wait by the run queue's clock, read before the
    // scheduler picks; the trace stamps the switch after the pick: on this
    // loaded 2-CPU VM that is 6-22 us more per episode in the trace, which
    // a thread with many short waits adds up (27 ms over 1,325 episodes).
    // Allowed: 2%, plus 30 us an episode, plus 1 ms. A woken thread taken
    // as queued until it next sleeps would add its 1 ms of work per
    // episode: 30 times that allowance.
    for (charged, wait, episodes) in runs {
        let slack = 0.02 * wait as f64 + 30_000.0 * episodes as f64 + 1e6;
        assert!(
            (charged as f64 - wait as f64).abs() <= slack,
            "charged {charged} ns vs schedstat wait {wait} ns ({episodes} episodes)"
        );
    }
}
