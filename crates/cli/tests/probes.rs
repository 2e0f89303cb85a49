//! `stealscope probe` against ground truth made here: a SCHED_FIFO thread
//! that this test starts on the probed CPU, running known bursts. Also the
//! unprivileged run and interruption by SIGTERM/SIGINT leaving the system as
//! it was. Tests that need root fail under CI=true and skip otherwise.

mod common;
use common::probes::*;
use common::*;
use serde_json::Value;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BURST_US: u64 = 200;
/// The preempt test's burst period: ~10 ms. Not a multiple of the 1000 µs
/// wake-up interval, so bursts meet every phase of it.
const PERIOD_US: u64 = 9_973;
/// The wakeup test's: ~1 ms, drifting 9 µs a cycle against the 1000 µs
/// wake-ups, so ~20% of them fall inside a burst. At 10 ms only 2% would, and
/// on a shared VM the baseline's own tail moves by more than that.
const WAKEUP_PERIOD_US: u64 = 1_009;
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A thread named "gt-burst", pinned to `cpu`, SCHED_FIFO 99, busy for
/// BURST_US every `period_us` (absolute deadlines).
struct Burster {
    stop: Arc<AtomicBool>,
    bursts: Arc<AtomicU64>,
    /// The thread's CPU time (CLOCK_THREAD_CPUTIME_ID) per cycle.
    cpu_ns: Arc<Mutex<Vec<u64>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Burster {
    fn start(cpu: u32, period_us: u64) -> Burster {
        let stop = Arc::new(AtomicBool::new(false));
        let bursts = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(Mutex::new(Vec::with_capacity(1 << 16)));
        let (s, b, cpu_out) = (stop.clone(), bursts.clone(), cpu_ns.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("gt-burst".into())
            .spawn(move || {
                // SAFETY: plain syscalls on the calling thread with valid arguments.
                let ok = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    let a = libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                    let p = libc::sched_param { sched_priority: 99 };
                    let f = libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &p);
                    a == 0 && f == 0
                };
                tx.send(ok).unwrap();
                let mut cycles = Vec::with_capacity(1 << 16);
                let mut cpu0 = thread_cpu_ns();
                let mut next = now_ns() + period_us * 1000;
                while !s.load(Ordering::Relaxed) {
                    let ts = libc::timespec {
                        tv_sec: (next / 1_000_000_000) as _,
                        tv_nsec: (next % 1_000_000_000) as _,
                    };
                    // SAFETY: valid timespec; a null remainder is allowed with TIMER_ABSTIME.
                    unsafe {
                        libc::clock_nanosleep(
                            libc::CLOCK_MONOTONIC,
                            libc::TIMER_ABSTIME,
                            &ts,
                            std::ptr::null_mut(),
                        )
                    };
                    // CPU time of the previous cycle: its burst plus its
                    // own sleep and wake-up paths.
                    let c = thread_cpu_ns();
                    cycles.push(c - cpu0);
                    cpu0 = c;
                    let t0 = now_ns();
                    while now_ns() - t0 < BURST_US * 1000 {
                        std::hint::spin_loop();
                    }
                    b.fetch_add(1, Ordering::Relaxed);
                    next += period_us * 1000;
                    while next < now_ns() {
                        next += period_us * 1000;
                    }
                }
                *cpu_out.lock().unwrap() = cycles;
            })
            .unwrap();
        assert!(rx.recv().unwrap(), "burster: affinity or SCHED_FIFO failed");
        Burster {
            stop,
            bursts,
            cpu_ns,
            handle: Some(handle),
        }
    }

    fn bursts(&self) -> u64 {
        self.bursts.load(Ordering::Relaxed)
    }

    /// Stops the thread; returns its median CPU time per cycle, µs: the spin
    /// plus its own sleep and wake-up paths, i.e. how long it really held the
    /// CPU each time (the median ignores the cycles a long stall hit).
    fn finish(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        let mut v = std::mem::take(&mut *self.cpu_ns.lock().unwrap());
        v.remove(0); // the first one is the setup
        median(v.into_iter().map(|ns| ns as f64 / 1e3).collect())
    }
}

impl Drop for Burster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cpu_entry(v: &Value, cpu: u32) -> &Value {
    v["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cpu"] == cpu)
        .unwrap_or_else(|| panic!("no CPU {cpu} in {v}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn preempt_measures_a_known_fifo_burst_and_blames_the_thread() {
    let _s = serial();
    if !require(is_root(), "root (SCHED_FIFO burster, tracefs)") {
        return;
    }
    let cpu = probe_cpu();
    let burster = Burster::start(cpu, PERIOD_US);
    std::thread::sleep(Duration::from_millis(50));
    let b0 = burster.bursts();
    let out = run(&[
        "probe",
        "preempt",
        "--cpus",
        &cpu.to_string(),
        "--duration",
        "3s",
        "--priority",
        "50",
        "--json",
    ]);
    let bursts = burster.bursts() - b0;
    let held_us = burster.finish();
    let v = json(&out);
    assert_eq!(v["attribution"], "tracefs", "notes: {}", v["notes"]);
    assert_eq!(v["policy"], "fifo");
    let c = cpu_entry(&v, cpu);
    let gaps = v["gaps"].as_array().unwrap();
    let f = |g: &Value, k: &str| g[k].as_f64().unwrap();
    // Every burst of the thread is found as a gap caused by it, except those
    // that fell inside a longer gap of something else (the kernel's fair
    // server gives SCHED_OTHER tasks ~50 ms a second even against FIFO
    // threads; the burster waits through it like the spinner).
    let src = c["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "gt-burst")
        .unwrap_or_else(|| panic!("no gt-burst source: {}", c["sources"]));
    assert_eq!(src["class"], "thread");
    let n = src["gaps"].as_u64().unwrap();
    let swallowed: u64 = gaps
        .iter()
        .filter(|g| g["source"] != "gt-burst" && f(g, "us") > 1000.0)
        .map(|g| (f(g, "us") / PERIOD_US as f64).ceil() as u64)
        .sum();
    // Bursts while the spinner ran (the counter also covers start-up and
    // tear-down of the probe process).
    let expected = (f(c, "runtime_s") * 1e6 / PERIOD_US as f64).floor() as u64;
    assert!(bursts >= expected, "burster ran {bursts} bursts");
    assert!(
        n as f64 >= 0.95 * expected.saturating_sub(swallowed) as f64 && n <= expected + 2,
        "{n} burst gaps for {expected} bursts ({swallowed} inside other gaps)"
    );
    // Their length is the burst's: the time the thread ran in each gap is
    // within 10% of the CPU time it took per burst (the 200 µs spin plus its
    // own sleep and wake-up paths, as the kernel accounts it to the thread).
    // The rest of the gap is the timer IRQ that woke the burster and the
    // scheduler paths around the two switches (printed; on a noisy host the
    // latter grow with the VM exits in them).
    let mine: Vec<&Value> = gaps.iter().filter(|g| g["source"] == "gt-burst").collect();
    assert_eq!(mine.len() as u64, n);
    let thread_us = median(mine.iter().map(|g| f(g, "thread_us")).collect());
    let gap_us = median(mine.iter().map(|g| f(g, "us")).collect());
    let irq_us = median(
        mine.iter()
            .map(|g| f(g, "irq_us") + f(g, "softirq_us"))
            .collect(),
    );
    let unexpl_us = median(mine.iter().map(|g| f(g, "unexplained_us")).collect());
    eprintln!(
        "ground truth {BURST_US} us spin ({held_us:.1} us on CPU per burst) x {expected} \
         ({swallowed} inside other gaps): {n} gaps; median gap {gap_us:.1} us = thread \
         {thread_us:.1} + irq {irq_us:.1} + unexplained {unexpl_us:.1}"
    );
    assert!(
        (thread_us - held_us).abs() <= 0.1 * held_us,
        "thread part {thread_us} us, thread held the CPU {held_us} us per burst"
    );
    assert!(thread_us >= BURST_US as f64, "thread part {thread_us} us");
    // ...and none of them is blamed on the hypervisor. This VM has real
    // steal of every size, so a burst-sized unexplained gap is a burst only
    // when it starts where bursts start: the burster keeps a fixed phase
    // (absolute deadlines), which its own gaps show.
    let phase = |g: &Value| (f(g, "t_s") * 1e6).rem_euclid(PERIOD_US as f64);
    let circ = |a: f64, b: f64| {
        let d = (a - b).abs();
        d.min(PERIOD_US as f64 - d)
    };
    let phases: Vec<f64> = mine.iter().map(|g| phase(g)).collect();
    let centre = *phases
        .iter()
        .min_by(|a, b| {
            let sum = |x: f64| phases.iter().map(|&p| circ(x, p)).sum::<f64>();
            sum(**a).total_cmp(&sum(**b))
        })
        .unwrap();
    // Window holding 90% of the burster's own gaps (at least 20 µs).
    let mut spread: Vec<f64> = phases.iter().map(|&p| circ(p, centre)).collect();
    spread.sort_by(f64::total_cmp);
    let window = spread[spread.len() * 9 / 10].max(20.0);
    let burst_sized = |g: &&Value| (f(g, "us") - BURST_US as f64).abs() <= 0.2 * BURST_US as f64;
    let unexplained: Vec<&Value> = gaps
        .iter()
        .filter(|g| g["class"] == "unexplained")
        .filter(burst_sized)
        .collect();
    let at_burst_phase = unexplained
        .iter()
        .filter(|g| circ(phase(g), centre) <= window)
        .count();
    eprintln!(
        "bursts start at phase {centre:.0} us of {PERIOD_US} (90% within {window:.0} us); \
         burst-sized unexplained gaps: {} in all, {at_burst_phase} at that phase",
        unexplained.len()
    );
    assert!(
        at_burst_phase as u64 <= bursts / 50,
        "{at_burst_phase} burst-sized gaps at the bursts' phase blamed on the hypervisor"
    );
    assert!(trace_instances().is_empty(), "{:?}", trace_instances());
}

/// Share of samples in buckets lying inside (lo, hi] µs.
fn share(c: &Value, lo: f64, hi: f64) -> f64 {
    c["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| {
            let le = x["le_us"].as_f64().unwrap();
            le / 1.25 >= lo && le <= hi
        })
        .map(|x| x["count"].as_f64().unwrap())
        .sum::<f64>()
        / c["samples"].as_f64().unwrap().max(1.0)
}

/// One baseline run and one with the burster, back to back, or why the
/// pair does not count: the hypervisor took the probe's CPU (steal
/// stretches wake-up paths and lands whole wake-ups past the burst's
/// range), or the burster missed periods (it was held off the CPU, so
/// fewer wake-ups met a burst than the arithmetic says).
fn wakeup_pair(cpu: u32, args: &[&str]) -> Result<(Value, Value), String> {
    let steal0 = stealscope_testkit::proc_stat::steal_now();
    let base = json(&run(args));
    let burster = Burster::start(cpu, WAKEUP_PERIOD_US);
    std::thread::sleep(Duration::from_millis(50));
    let (b0, t0) = (burster.bursts(), Instant::now());
    let with = json(&run(args));
    let (b1, t1) = (burster.bursts(), Instant::now());
    burster.finish();
    let steal1 = stealscope_testkit::proc_stat::steal_now();
    let stolen = steal1.get(&cpu).unwrap_or(&0) - steal0.get(&cpu).unwrap_or(&0);
    let stolen_ms = (stolen * stealscope_testkit::proc_stat::unit_ns()) as f64 / 1e6;
    if stolen_ms > 10.0 {
        return Err(format!(
            "the hypervisor took {stolen_ms:.0} ms of CPU {cpu}"
        ));
    }
    let periods = (t1 - t0).as_micros() as f64 / WAKEUP_PERIOD_US as f64;
    if ((b1 - b0) as f64) < 0.95 * periods {
        return Err(format!(
            "the burster ran {} of {periods:.0} periods",
            b1 - b0
        ));
    }
    Ok((base, with))
}

/// What a baseline-and-burster pair shows on `cpu`: the growth of the share
/// of wake-ups delayed 100-265 µs, what the burst arithmetic expects of it,
/// the growth beyond 340 µs and the p99 with the burster.
struct WakeupShift {
    grew: f64,
    expected: f64,
    beyond: f64,
    p99: f64,
}

fn wakeup_shift(base: &Value, with: &Value, cpu: u32) -> WakeupShift {
    let (b, w) = (cpu_entry(base, cpu), cpu_entry(with, cpu));
    let wake_path = b["p50_us"].as_f64().unwrap();
    let s = WakeupShift {
        // Delays in (100, 265] µs: bucket edges near 108 and 265.
        grew: share(w, 100.0, 265.0) - share(b, 100.0, 265.0),
        expected: (BURST_US as f64 + wake_path - 108.4) / WAKEUP_PERIOD_US as f64,
        beyond: share(w, 340.0, 5_000.0) - share(b, 340.0, 5_000.0),
        p99: w["p99_us"].as_f64().unwrap(),
    };
    eprintln!(
        "wake-ups delayed 100-265 us: +{:.2}% with the burster (expected {:.2}%); \
         340 us-5 ms: {:+.2}%; p99 {} -> {} us, max {} -> {} us",
        100.0 * s.grew,
        100.0 * s.expected,
        100.0 * s.beyond,
        b["p99_us"],
        w["p99_us"],
        b["max_us"],
        w["max_us"]
    );
    s
}

/// A SCHED_FIFO burster spinning BURST_US every WAKEUP_PERIOD_US on the
/// probe's CPU: a wake-up due inside a burst waits for its end, so
/// BURST_US/WAKEUP_PERIOD_US of the wake-ups are delayed by U(0, BURST_US]
/// plus the usual wake-up path (more when the burster's own timer IRQ is
/// counted in: hence the wide upper bound). Three pairs of 2 s runs, each
/// pair back to back and judged valid on its own; the claim is on their
/// median, since the machine's other work moves one 2 s baseline by a few
/// percent of its wake-ups (a CI run's single pair: +5.4 % against
/// 13.2 % expected, while pairs here give 12.6-14.6 %).
#[test]
fn wakeup_latency_shows_the_known_bursts() {
    let _s = serial();
    if !require(is_root(), "root (SCHED_FIFO burster)") {
        return;
    }
    let cpu = probe_cpu();
    let cpu_s = cpu.to_string();
    let args = [
        "probe",
        "wakeup",
        "--cpus",
        &cpu_s,
        "--duration",
        "2s",
        "--priority",
        "50",
        "--json",
    ];
    let mut shifts = Vec::new();
    let mut last = None;
    for attempt in 1..=6 {
        match wakeup_pair(cpu, &args) {
            Ok((base, with)) => {
                shifts.push(wakeup_shift(&base, &with, cpu));
                last = Some(with);
            }
            Err(why) => eprintln!("pair {attempt} rejected: {why}"),
        }
        if shifts.len() == 3 {
            break;
        }
    }
    if !require(
        shifts.len() == 3,
        "three pairs without steal or missed bursts",
    ) {
        return;
    }
    let mid = |f: fn(&WakeupShift) -> f64| median(shifts.iter().map(f).collect());
    let (grew, expected) = (mid(|s| s.grew), mid(|s| s.expected));
    assert!(
        grew >= 0.6 * expected && grew <= 1.6 * expected,
        "share of 100-265 us wake-ups grew by {grew} (median of 3), expected {expected}"
    );
    // The bursts delay nothing by much more than their length.
    let beyond = mid(|s| s.beyond);
    assert!(beyond < 0.2 * expected, "{beyond}");
    // p99 moved into the burst range: ~10% of the samples are there.
    let p99 = mid(|s| s.p99);
    assert!(p99 >= 0.75 * BURST_US as f64, "p99 {p99}");
    let with = last.unwrap();
    assert!(with["policy"] == "fifo" && with["memory_locked"] == true);
}

#[test]
fn unprivileged_runs_and_says_what_it_could_not_do() {
    let _s = serial();
    if !require(is_root(), "root (to drop to uid 65534)") {
        return;
    }
    let (_dir, bin) = world_runnable_binary();
    let qos0 = pm_qos();

    let w = json(&as_nobody(
        &bin,
        &[
            "probe",
            "wakeup",
            "--duration",
            "1s",
            "--pm-qos-us",
            "0",
            "--json",
        ],
    ));
    assert_eq!(w["policy"], "other");
    assert_eq!(w["memory_locked"], false);
    assert!(w["pm_qos_us"].is_null());
    let notes = w["notes"].to_string();
    for needle in ["no SCHED_FIFO", "memory not locked", "PM QoS not held"] {
        assert!(notes.contains(needle), "{needle} missing in {notes}");
    }
    assert!(cpu_entry(&w, 0)["samples"].as_u64().unwrap() > 500);

    let p = json(&as_nobody(
        &bin,
        &[
            "probe",
            "preempt",
            "--duration",
            "1s",
            "--priority",
            "10",
            "--json",
        ],
    ));
    assert_eq!(p["attribution"], "counters");
    let notes = p["notes"].to_string();
    assert!(notes.contains("tracefs unavailable"), "{notes}");
    assert!(notes.contains("no SCHED_FIFO"), "{notes}");
    assert!(cpu_entry(&p, 0)["runtime_s"].as_f64().unwrap() > 0.9);

    let t = json(&as_nobody(
        &bin,
        &["probe", "throughput", "--duration", "500ms", "--json"],
    ));
    assert!(cpu_entry(&t, 0)["ops"].as_u64().unwrap() > 0);

    // The text form says it too, and exits 0.
    let out = as_nobody(&bin, &["probe", "wakeup", "--duration", "300ms"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SCHED_OTHER") && text.contains("note: no SCHED_FIFO"),
        "{text}"
    );
    assert_eq!(pm_qos(), qos0);
}

fn spawn(args: &[&str]) -> Child {
    bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop_and_check(mut child: Child, sig: i32) -> Value {
    let pid = child.id();
    // SAFETY: kill on a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
    let t = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().unwrap() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "probe did not stop within 5 s of signal {sig}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    json(&out)
}

#[test]
fn sigterm_and_sigint_leave_the_system_as_it_was() {
    let _s = serial();
    if !require(is_root(), "root (PM QoS, SCHED_FIFO, tracefs)") {
        return;
    }
    let qos0 = pm_qos().expect("read /dev/cpu_dma_latency");
    let mounted0 = tracefs_mounted();
    let cpu = probe_cpu().to_string();

    // SIGTERM while wakeup holds PM QoS at 0 with SCHED_FIFO threads.
    let child = spawn(&[
        "probe",
        "wakeup",
        "--cpus",
        &cpu,
        "--duration",
        "60s",
        "--pm-qos-us",
        "0",
        "--json",
    ]);
    let pid = child.id();
    wait_until("PM QoS held and FIFO threads", || {
        pm_qos() == Some(0) && !rt_probe_threads(Some(pid)).is_empty()
    });
    // The threads exist before they sample: they first wait for the memory
    // lock and the counters' first reading (a fresh-clone CI run signalled
    // in between and got 0 samples). Half a second of a 60 s run.
    std::thread::sleep(Duration::from_millis(500));
    let v = stop_and_check(child, libc::SIGTERM);
    assert_eq!(v["interrupted"], true);
    assert_eq!(v["pm_qos_us"], 0);
    assert!(
        cpu_entry(&v, cpu.parse().unwrap())["samples"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(pm_qos(), Some(qos0), "PM QoS request left behind");
    if qos0 == PM_QOS_DEFAULT {
        // 4 bytes, nobody holds a request.
        assert_eq!(std::fs::read("/dev/cpu_dma_latency").unwrap().len(), 4);
    }
    assert!(
        rt_probe_threads(None).is_empty(),
        "{:?}",
        rt_probe_threads(None)
    );

    // SIGINT while preempt has its tracing instance and FIFO spinners.
    let child = spawn(&[
        "probe",
        "preempt",
        "--cpus",
        &cpu,
        "--duration",
        "60s",
        "--priority",
        "10",
        "--json",
    ]);
    let pid = child.id();
    wait_until("tracing instance and FIFO spinner", || {
        !trace_instances().is_empty() && !rt_probe_threads(Some(pid)).is_empty()
    });
    let v = stop_and_check(child, libc::SIGINT);
    assert_eq!(v["interrupted"], true);
    assert_eq!(v["attribution"], "tracefs");
    assert!(trace_instances().is_empty(), "{:?}", trace_instances());
    assert_eq!(tracefs_mounted(), mounted0, "tracefs mount state changed");
    assert!(
        rt_probe_threads(None).is_empty(),
        "{:?}",
        rt_probe_threads(None)
    );
    assert_eq!(pm_qos(), Some(qos0));
}

#[test]
fn bad_options_are_one_line_errors_with_exit_2() {
    for args in [
        vec!["probe", "wakeup", "--cpus", "4096", "--no-change"],
        vec!["probe", "wakeup", "--interval-us", "1", "--no-change"],
        vec!["probe", "preempt", "--threshold-us", "0", "--no-change"],
        vec!["probe", "throughput", "--window-ms", "1"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("stealscope: "), "{err}");
    }
}

/// `doctor --probe`: the probe reports land in the doctor JSON (schema-valid,
/// every online CPU measured for about the asked time), and the jitter.*
/// findings present are exactly those the measured figures call for. With the
/// burster delaying a tenth of the wake-ups on one CPU by up to BURST_US, the
/// wake-up finding must be among them.
#[test]
fn doctor_probe_adds_the_findings_the_measurements_support() {
    let _s = serial();
    if !require(is_root(), "root (SCHED_FIFO probes and burster)") {
        return;
    }
    let cpu = probe_cpu();
    let burster = Burster::start(cpu, WAKEUP_PERIOD_US);
    let r = json(&run(&[
        "doctor",
        "--interval",
        "1s",
        "--probe",
        "--probe-duration",
        "2s",
        "--json",
    ]));
    burster.finish();
    assert_valid(&r);
    let w = &r["probes"]["wakeup"];
    let online = stealscope_readers::cpulist::parse(
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .unwrap()
            .trim(),
        "online",
    )
    .unwrap();
    let measured: Vec<u64> = w["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cpu"].as_u64().unwrap())
        .collect();
    assert_eq!(
        measured,
        online.iter().map(|&c| c as u64).collect::<Vec<_>>()
    );
    for c in w["cpus"].as_array().unwrap() {
        let n = c["samples"].as_f64().unwrap();
        // 2 s at the default 1000 µs period.
        assert!(
            (1400.0..=2100.0).contains(&n),
            "cpu {}: {n} samples",
            c["cpu"]
        );
    }
    let ids = finding_ids(&r);
    use stealscope_probes::findings::*;
    let o = &w["overall"];
    let wake_expected = o["p99_us"].as_f64().unwrap() > WAKEUP_P99_WARN_US
        || o["max_us"].as_f64().unwrap() > WAKEUP_MAX_CRITICAL_US;
    assert!(
        wake_expected,
        "the burster must push p99 over the limit: {o}"
    );
    assert!(
        ids.contains(&"jitter.wakeup-latency".to_string()),
        "{ids:?}"
    );
    // The preempt finding looks at the worst CPU's share and the longest gap.
    let p = &r["probes"]["preempt"];
    let worst = p["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["unexplained_pct"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let preempt_expected = worst > PREEMPT_UNEXPLAINED_WARN_PCT
        || p["overall"]["max_unexplained_gap_us"].as_f64().unwrap() > PREEMPT_GAP_WARN_US;
    assert_eq!(
        ids.contains(&"jitter.hypervisor-preemption".to_string()),
        preempt_expected,
        "{ids:?} vs {p}"
    );
    // Probe findings are ranked with the rest: severities never rise down the list.
    let sev = |s: &str| {
        ["info", "warning", "critical"]
            .iter()
            .position(|x| *x == s)
            .unwrap()
    };
    let sevs: Vec<usize> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| sev(f["severity"].as_str().unwrap()))
        .collect();
    assert!(sevs.windows(2).all(|p| p[0] >= p[1]), "{sevs:?}");
}
