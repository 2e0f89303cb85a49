//! The BPF route against real threads whose shape the test controls; ground
//! truth is each thread's own /proc schedstat (run ns, wait ns, times run).
//! Needs root and 2 CPUs: fails under CI (any value but empty, 0 or
//! false), skips otherwise (`common::require`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use stealscope_sched::{Collector, Preference};
use stealscope_who::{SchedSample, ThreadWaits};

mod common;

/// The cases share CPU 1; run them one at a time so one case's spinners
/// do not stretch another's reads apart.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// True when the test can run; panics in CI when it cannot. The test's own
/// thread then runs at nice -20, above its nice -19 spinners: otherwise it
/// is starved between reading schedstat and the collector, and the two
/// windows drift apart by whole episodes.
fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !common::require(root, "not root") || !common::require(cpus >= 2, "fewer than 2 CPUs") {
        return false;
    }
    // SAFETY: setpriority on the calling thread with valid arguments.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid(), -20) };
    true
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// A thread spinning until `stop`, named, on the given CPUs, at a nice value.
struct Spinner {
    tid: u32,
    handle: JoinHandle<()>,
}

fn spin(name: &str, cpus: &[usize], nice: i32, stop: &Arc<AtomicBool>) -> Spinner {
    spin_with(name, cpus, nice, stop, |stop| {
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    })
}

/// Sets the CPUs `tid` may run on.
fn pin(tid: u32, cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is empty; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus {
            libc::CPU_SET(*c, &mut set);
        }
        let r = libc::sched_setaffinity(tid as i32, std::mem::size_of_val(&set), &set);
        let err = std::io::Error::last_os_error();
        assert_eq!(r, 0, "sched_setaffinity {tid} {cpus:?}: {err}");
    }
}

/// A named thread on the given CPUs at a nice value, running `body`.
fn spin_with(
    name: &str,
    cpus: &[usize],
    nice: i32,
    stop: &Arc<AtomicBool>,
    body: fn(&AtomicBool),
) -> Spinner {
    let (tx, rx) = mpsc::channel();
    let stop = stop.clone();
    let cname = std::ffi::CString::new(name).unwrap();
    let cpus = cpus.to_vec();
    let handle = std::thread::spawn(move || {
        // SAFETY: plain syscalls on the calling thread with valid arguments.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, cname.as_ptr());
            assert_eq!(libc::setpriority(libc::PRIO_PROCESS, 0, nice), 0);
        }
        pin(gettid(), &cpus);
        tx.send(gettid()).unwrap();
        body(&stop);
    });
    Spinner {
        tid: rx.recv().unwrap(),
        handle,
    }
}

/// (run ns, wait ns, times run) of a thread of this process.
fn schedstat(tid: u32) -> (u64, u64, u64) {
    let path = format!("/proc/self/task/{tid}/schedstat");
    let s = std::fs::read_to_string(&path).unwrap();
    let v: Vec<u64> = s.split_whitespace().map(|f| f.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

struct Interval {
    waits: ThreadWaits,
    sample: SchedSample,
    /// schedstat deltas per tid given, over a window enclosing the
    /// collector's.
    stat: Vec<(u64, u64, u64)>,
    /// The victim's schedstat wait over a window inside the collector's.
    inner_wait: u64,
}

/// Reads the collector and the threads' schedstat around `secs`.
fn measure(c: &mut Collector, victim: u32, tids: &[u32], secs: f64) -> Interval {
    std::thread::sleep(Duration::from_millis(300));
    // schedstat is read on both sides of each collector read: the outer
    // window encloses the collector's and the inner one lies within it. An
    // episode that ends between a schedstat read and a collector read
    // counts in one window and not the other, so an exact collector lies
    // between the two.
    let sa: Vec<_> = tids.iter().map(|&t| schedstat(t)).collect();
    let a = c.read().unwrap();
    let inner_a = schedstat(victim).1;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let inner_b = schedstat(victim).1;
    let b = c.read().unwrap();
    let sb: Vec<_> = tids.iter().map(|&t| schedstat(t)).collect();
    let stat = sa
        .iter()
        .zip(&sb)
        .map(|(x, y)| (y.0 - x.0, y.1 - x.1, y.2 - x.2))
        .collect();
    let waits = b.threads[&victim].since(&a.threads[&victim]);
    Interval {
        waits,
        sample: b,
        stat,
        inner_wait: inner_b - inner_a,
    }
}

fn charged_to(w: &ThreadWaits, tid: u32) -> u64 {
    w.by_thread
        .iter()
        .filter(|(c, _)| c.tid == tid)
        .map(|(_, &ns)| ns)
        .sum()
}

/// The checks every case shares: the split adds up to schedstat's wait
/// within 2 % (the bound) and has no more episodes than the thread
/// was switched in. The program takes each stretch's length from the
/// kernel's own run_delay accounting, so no per-episode allowance.
fn check_sums(iv: &Interval) {
    check_sums_over(iv, 100_000_000);
}

/// As [`check_sums`], for a victim that waited at least `min_wait` ns.
fn check_sums_over(iv: &Interval, min_wait: u64) {
    let (_, wait, runs) = iv.stat[0];
    let got = iv.waits.wait_ns();
    eprintln!(
        "wait_by sum {got} ns, schedstat wait {wait} ns (inner window {} ns), \
         episodes {} (runs {runs}), unknown {} ns, irq {} ns, idle {} ns, stats {:?}",
        iv.inner_wait,
        iv.waits.episodes.count,
        iv.waits.unknown_ns,
        iv.waits.irq_ns,
        iv.waits.idle_ns,
        iv.sample.stats
    );
    for (c, ns) in &iv.waits.by_thread {
        eprintln!("  {:>6} {:<16} {ns}", c.tid, c.comm);
    }
    // A victim woken on an idle CPU may wait 0 ns by schedstat (quiet
    // machine); the sum must then be 0 too.
    assert!(wait >= min_wait, "the victim barely waited: {wait} ns");
    // Within 2 % of the window nearest to it: below the outer (enclosing)
    // one and above the inner one.
    let (lo, hi) = (iv.inner_wait as f64 * 0.98, wait as f64 * 1.02);
    assert!(
        (lo..=hi).contains(&(got as f64)),
        "sum {got} outside schedstat's {} (inner) - {wait} (outer) +-2 %",
        iv.inner_wait
    );
    assert!(
        iv.waits.episodes.count <= runs,
        "{} episodes > {runs} runs",
        iv.waits.episodes.count
    );
    assert!(iv.waits.episodes.count > 0);
    assert_eq!(iv.sample.stats.lost_events, 0);
}

fn start() -> Collector {
    let c = Collector::start(Preference::Bpf).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.route().as_str(), "bpf");
    c
}

// Victim and culprits run at a strongly negative nice so the machine's
// other nice-0 work (builds sharing CPU 1) stays a few percent of the wait.

#[test]
fn one_culprit_on_a_pinned_cpu_takes_the_wait() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let victim = spin("stl-victim", &[1], -19, &stop);
    let hog = spin("stl-hog", &[1], -19, &stop);
    let mut c = start();
    c.watch(&[victim.tid]).unwrap();
    let iv = measure(&mut c, victim.tid, &[victim.tid, hog.tid], 2.0);
    stop.store(true, Ordering::Relaxed);
    check_sums(&iv);
    // Other sessions' work on this shared machine sits in other cgroups,
    // where our nice value does not reach; so the share is judged over the
    // wait not charged to other processes, and the hog's charge against its
    // own schedstat run time (the victim is runnable whenever it runs).
    let hog_ns = charged_to(&iv.waits, hog.tid);
    // Time older than the per-CPU record (a busy machine switches more
    // than it holds) is `unknown`, counted but blamed on no one.
    let others = foreign(&iv.waits) + iv.waits.unknown_ns;
    let share = hog_ns as f64 / (iv.waits.wait_ns() - others) as f64;
    assert!(
        share >= 0.95,
        "stl-hog has {:.1}% of the wait",
        share * 100.0
    );
    let run = iv.stat[1].0 as f64;
    assert!(
        (hog_ns as f64 - run).abs() <= 0.05 * run,
        "stl-hog charged {hog_ns} ns, ran {run} ns"
    );
    let named = iv
        .waits
        .by_thread
        .keys()
        .find(|c| c.tid == hog.tid)
        .unwrap();
    assert_eq!(named.comm, "stl-hog");
    assert!(!named.kthread);
    let h = &iv.waits.episodes;
    assert!(h.quantile(0.5).unwrap() <= h.quantile(0.99).unwrap());
    assert!(h.quantile(0.99).unwrap() <= h.max_ns);
    victim.handle.join().unwrap();
    hog.handle.join().unwrap();
}

#[test]
fn two_culprits_at_different_nice_split_like_their_run_times() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let victim = spin("stl-victim2", &[1], -19, &stop);
    let a = spin("stl-hog-a", &[1], -19, &stop);
    let b = spin("stl-hog-b", &[1], -14, &stop);
    let mut c = start();
    c.watch(&[victim.tid]).unwrap();
    let iv = measure(&mut c, victim.tid, &[victim.tid, a.tid, b.tid], 2.0);
    stop.store(true, Ordering::Relaxed);
    check_sums(&iv);
    let (ca, cb) = (charged_to(&iv.waits, a.tid), charged_to(&iv.waits, b.tid));
    let (ra, rb) = (iv.stat[1].0, iv.stat[2].0);
    let split = ca as f64 / (ca + cb) as f64;
    let truth = ra as f64 / (ra + rb) as f64;
    eprintln!("a/(a+b): charged {split:.3}, schedstat run {truth:.3}");
    assert!(
        (split - truth).abs() <= 0.05,
        "split {split:.3} vs run times {truth:.3}"
    );
    // Different nice values must give visibly different shares.
    assert!(
        truth > 0.6,
        "nice did not separate the culprits: {truth:.3}"
    );
    for s in [victim, a, b] {
        s.handle.join().unwrap();
    }
}

/// Wait charged to threads of other processes (other sessions' work on this
/// shared machine, in other autogroups that our nice values do not reach).
fn foreign(w: &ThreadWaits) -> u64 {
    w.by_thread
        .iter()
        .filter(|(c, _)| c.tgid != std::process::id())
        .map(|(_, &ns)| ns)
        .sum()
}

// Each stretch of a victim moved between two busy CPUs is charged on the
// CPU it was queued on, and the stretches add up to schedstat's wait.
#[test]
fn migrating_victim_still_adds_up() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let victim = spin("stl-victim3", &[0, 1], -19, &stop);
    let h0 = spin("stl-hog0", &[0], -19, &stop);
    let h1 = spin("stl-hog1", &[1], -19, &stop);
    // Moves the victim every 20 ms, queued or running, besides whatever
    // the balancer does: both kernel paths (move_queued_task and the
    // stopper) then run many times in the window.
    let flip = {
        let (stop, tid) = (stop.clone(), victim.tid);
        std::thread::spawn(move || {
            // SAFETY: setpriority on the calling thread.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid(), -20) };
            let mut cpu = 0;
            while !stop.load(Ordering::Relaxed) {
                cpu ^= 1;
                pin(tid, &[cpu]);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut c = start();
    c.watch(&[victim.tid]).unwrap();
    let iv = measure(&mut c, victim.tid, &[victim.tid, h0.tid, h1.tid], 3.0);
    stop.store(true, Ordering::Relaxed);
    flip.join().unwrap();
    check_sums(&iv);
    let (c0, c1) = (charged_to(&iv.waits, h0.tid), charged_to(&iv.waits, h1.tid));
    // Unknown time (a stretch whose switch away was never seen, mostly
    // other processes' threads) is blamed on no one, so left out too.
    let ours = iv.waits.wait_ns() - foreign(&iv.waits) - iv.waits.unknown_ns;
    eprintln!("hog0 {c0} ns, hog1 {c1} ns, of {ours} ns not charged to other processes or unknown");
    assert!(
        (c0 + c1) as f64 >= 0.8 * ours as f64,
        "the hogs have {} of {ours} ns",
        c0 + c1
    );
    // Queued on both CPUs in turn, so each hog took a fair part.
    assert!(
        c0.min(c1) as f64 >= 0.2 * ours as f64,
        "hog0 {c0}, hog1 {c1}"
    );
    for s in [victim, h0, h1] {
        s.handle.join().unwrap();
    }
}

// A victim that sleeps most of the time, woken about 100 times a second
// (10 ms asleep, 1 ms of work):
// each wait is the short stretch from its wake-up to its switch-in (often
// from the idle task). The tracefs route once charged an idle VM's vCPU
// 1.31 s against schedstat's 0.004 s by missing switches out of idle; the
// sum and the episode count must still match schedstat here.
#[test]
fn sleepy_victim_adds_up_and_never_outnumbers_its_runs() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let victim = spin_with("stl-sleepy", &[1], -19, &stop, |stop| {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
        }
    });
    let mut c = start();
    c.watch(&[victim.tid]).unwrap();
    let iv = measure(&mut c, victim.tid, &[victim.tid], 3.0);
    stop.store(true, Ordering::Relaxed);
    let (_, wait, runs) = iv.stat[0];
    assert!(runs >= 200, "woken only {runs} times in 3 s");
    // schedstat ends a wait at the rq clock of the switch, which the kernel
    // does not refresh after a wake-up that preempts the current task
    // (rq_clock_skip_update in wakeup_preempt); the program's own stamps
    // lag it by the preemption latency, 6-44 µs per episode here, which
    // once put this sum 2-3 % over schedstat. It now takes each stretch's
    // length from the kernel's run_delay accounting, so the 2 % holds with
    // no per-episode allowance. The failure this also guards against (a
    // switch-in missed, so the victim counts as queued while it runs)
    // would add the 1 ms it runs per wake-up to each episode.
    check_sums_over(&iv, 0);
    eprintln!(
        "sleepy: {runs} runs, schedstat wait {wait} ns, {} ns per run",
        wait / runs
    );
    victim.handle.join().unwrap();
}

/// Re-runs this test binary as nobody: the child asserts the refusal.
#[test]
fn unprivileged_start_is_unavailable_with_a_reason() {
    if std::env::var("STEALSCOPE_UNPRIV_CHILD").is_ok() {
        let e = match Collector::start(Preference::Bpf) {
            Ok(_) => panic!("BPF route started unprivileged"),
            Err(e) => e,
        };
        eprintln!("child: {e}");
        assert_eq!(e.reasons.len(), 1);
        assert!(e.reasons[0].starts_with("bpf: "), "{e}");
        assert!(e.reasons[0].contains("needs root"), "{e}");
        let auto = Collector::start(Preference::Auto).err().expect("auto");
        assert!(auto.reasons.iter().any(|r| r.starts_with("bpf: ")));
        assert!(auto.reasons.iter().any(|r| r.starts_with("tracefs: ")));
        return;
    }
    if !can_run() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["--inh-caps=-all", "--bounding-set=-all"])
        .arg(&exe)
        .args([
            "--exact",
            "unprivileged_start_is_unavailable_with_a_reason",
            "--nocapture",
        ])
        .env("STEALSCOPE_UNPRIV_CHILD", "1")
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert!(out.status.success(), "child failed: {err}");
    assert!(err.contains("child: no scheduler events: bpf: "), "{err}");
}

/// Builds bench/pingpong.c into the test's scratch directory.
fn build_pingpong() -> std::path::PathBuf {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/pingpong.c");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pingpong");
    let st = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .expect("cc (needed to build bench/pingpong.c)");
    assert!(st.success(), "cc {src} failed");
    out
}

/// A file of `mb` MiB on /work's disk (the test's scratch directory), for
/// O_DIRECT reads that reach the block device and its interrupts.
fn disk_file(mb: u32) -> std::path::PathBuf {
    let f = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("odirect.img");
    let st = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "oflag=direct", "status=none"])
        .arg(format!("of={}", f.display()))
        .arg(format!("count={mb}"))
        .status()
        .expect("dd");
    assert!(st.success());
    f
}

/// The command at nice 0 (this test's thread runs at -20, see `can_run`):
/// the load competes with the nice-0 victim as equals.
fn at_nice_0(mut cmd: std::process::Command) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpriority is async-signal-safe; it touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpriority(libc::PRIO_PROCESS, 0, 0);
            Ok(())
        });
    }
    cmd
}

/// /proc/TID/schedstat of any thread: (run ns, wait ns, times run).
fn any_schedstat(tid: u32) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{tid}/schedstat")).unwrap();
    let v: Vec<u64> = s.split_whitespace().map(|f| f.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

// Issue 29: one pair of programs timed hard and soft interrupts with one
// per-CPU depth; a hardirq inside a softirq run of the same program was
// skipped by the kernel (recursion_misses 6-8 under 25 s of O_DIRECT
// reads), the depth stuck above zero and no interrupt on that CPU was
// timed again. Here: 25 s of O_DIRECT reads (the disk's interrupt is on
// CPU 1) and a ping-pong on CPU 1 beside a watched spinner. Checked: no
// interrupt program was skipped, whatever was skipped is in lost_events,
// every watched thread's charges add up to the schedstat this test reads
// (2 %), and interrupt time still reaches a waiter after the load.
#[test]
fn direct_io_and_a_ping_pong_keep_irq_time_and_sums() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cc = std::process::Command::new("cc").arg("--version").output();
    if !common::require(
        cc.is_ok_and(|o| o.status.success()),
        "cc (builds bench/pingpong.c)",
    ) {
        return;
    }
    let pingpong = build_pingpong();
    let file = disk_file(64);
    let stop = Arc::new(AtomicBool::new(false));
    let victim = spin("stl-iovictim", &[1], 0, &stop);
    let mut pp = at_nice_0(std::process::Command::new(&pingpong))
        .args(["1", "0", "27", "2000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("pingpong");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(pp.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let pids: Vec<u32> = line
        .split_whitespace()
        .skip(1)
        .map(|p| p.parse().unwrap())
        .collect();
    let script = format!(
        "end=$((SECONDS+26)); while [ $SECONDS -lt $end ]; do \
         dd if={} of=/dev/null bs=4k iflag=direct status=none; done",
        file.display()
    );
    let mut io = at_nice_0(std::process::Command::new("bash"))
        .args(["-c", &script])
        .spawn()
        .expect("sh");
    let mut c = start();
    let watched = [victim.tid, pids[0], pids[1]];
    c.watch(&watched).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let sa: Vec<_> = watched.iter().map(|&t| any_schedstat(t)).collect();
    let a = c.read().unwrap();
    std::thread::sleep(Duration::from_secs(23));
    let b = c.read().unwrap();
    let sb: Vec<_> = watched.iter().map(|&t| any_schedstat(t)).collect();
    let progs = c.program_stats().unwrap();
    let _ = io.wait();
    let _ = pp.wait();
    eprintln!("stats {:?}", b.stats);
    for (name, p) in &progs {
        eprintln!("  {name}: recursion_misses {}", p.recursion_misses);
    }
    let misses: u64 = progs.iter().map(|(_, p)| p.recursion_misses).sum();
    assert!(progs.len() >= 8, "every program's counters: {progs:?}");
    assert!(b.stats.lost_events >= misses, "misses are lost events");
    for (name, p) in progs.iter().filter(|(n, _)| n.contains("irq")) {
        assert_eq!(p.recursion_misses, 0, "{name} was re-entered");
    }
    for (i, &t) in watched.iter().enumerate() {
        let w = b.threads[&t].since(&a.threads[&t]);
        let wait = sb[i].1 - sa[i].1;
        let got = w.wait_ns();
        eprintln!(
            "tid {t}: charged {got} ns (irq {}, unknown {}), schedstat {wait} ns",
            w.irq_ns, w.unknown_ns
        );
        eprintln!(
            "  episodes {} max {} ns, over 10 ms {}",
            w.episodes.count, w.episodes.max_ns, w.episodes.over_10ms
        );
        assert!(wait > 100_000_000, "tid {t} barely waited: {wait} ns");
        // The route tops up from the kernel's run_delay into unknown, so
        // the sum alone cannot catch a shortfall: bound the unknown.
        assert!(w.unknown_ns <= wait / 20, "tid {t}: {w:?}");
        let diff = (got as f64 - wait as f64).abs();
        assert!(diff <= 0.02 * wait as f64, "tid {t}: {got} vs {wait}");
    }
    // After the load: a hog beside the victim, so it waits while the
    // timer ticks on CPU 1; its irq share must still grow.
    let hog = spin("stl-iohog", &[1], 0, &stop);
    let a = c.read().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let b = c.read().unwrap();
    stop.store(true, Ordering::Relaxed);
    let w = b.threads[&victim.tid].since(&a.threads[&victim.tid]);
    eprintln!(
        "after the load: wait {} ns, irq {} ns",
        w.wait_ns(),
        w.irq_ns
    );
    assert!(
        w.wait_ns() > 100_000_000,
        "the victim waited behind the hog"
    );
    assert!(w.irq_ns > 0, "no interrupt timed on CPU 1 after the load");
    victim.handle.join().unwrap();
    hog.handle.join().unwrap();
}
