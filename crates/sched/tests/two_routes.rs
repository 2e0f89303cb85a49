//! Issue 29, point 4: the BPF and tracefs routes at once on one live
//! workload. Both collectors watch the same threads over the same windows;
//! every culprit's share of the watched threads' wait (threads, `irq`,
//! `idle`, `unknown`) must agree within 2 pp, and each route's per-thread
//! sum must match the /proc/TID/schedstat this test reads itself around
//! the collectors' reads, and each named thief's charge to each vCPU must
//! stay within its own schedstat run time. The rules both follow:
//! docs/who-stole.md, "Rules". Needs root, BPF and tracefs (mounted by the route through
//! readers' `tracefs::Instance` if it is not): fails under CI (any value
//! but empty, 0 or false), skips otherwise (`common::require`).
//!
//! Workload, all pinned to the CPU that takes the disk's interrupts, at
//! nice 0: two vCPU-like threads (`CPU 0/KVM`, `CPU 1/KVM`) that run 3 ms
//! and sleep 1 ms (timer wake-ups: R1, R5), a busy host thread of this
//! process (`ss-hostloop`), a busy second process (`yes`), and O_DIRECT
//! reads issued from the other CPU whose completions interrupt this one
//! (R5). Other sessions' work on this shared machine is seen by both
//! routes alike and printed as `foreign`. The vCPU threads are parked
//! (blocked) at every reading, so no wait is open across one (`Gate`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stealscope_sched::{Collector, Preference};
use stealscope_who::{SchedSample, SchedStats};

mod common;

/// Windows measured, and the length of each.
const WINDOWS: usize = 3;
const WINDOW_S: f64 = 4.0;
/// The bound on a culprit's share between the routes.
const SHARE_PP: f64 = 0.02;

/// Root and 2 CPUs, or fail (CI) / skip. The test's thread then runs at
/// nice -20 so its back-to-back reads are not split by the workload.
fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !common::require(root, "not root (BPF, tracefs)")
        || !common::require(cpus >= 2, "fewer than 2 CPUs")
    {
        return false;
    }
    // SAFETY: setpriority on the calling thread with valid arguments.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as u32, -20) };
    true
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        set
    }
}

/// A named thread pinned to `cpu` at nice 0, running `body` until `stop`.
fn thread(
    name: &str,
    cpu: usize,
    stop: &Arc<AtomicBool>,
    body: impl FnOnce(&AtomicBool) + Send + 'static,
) -> (u32, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let stop = stop.clone();
    let cname = std::ffi::CString::new(name).unwrap();
    let handle = std::thread::spawn(move || {
        let set = cpu_set(&[cpu]);
        // SAFETY: plain syscalls on the calling thread with valid arguments.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, cname.as_ptr());
            assert_eq!(libc::setpriority(libc::PRIO_PROCESS, 0, 0), 0);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                0
            );
            tx.send(libc::gettid() as u32).unwrap();
        }
        body(&stop);
    });
    (rx.recv().unwrap(), handle)
}

/// A child process pinned to `cpu` at nice 0.
fn child(mut cmd: Command, cpu: usize) -> Child {
    // SAFETY: setpriority and sched_setaffinity are async-signal-safe and
    // touch only the child.
    unsafe {
        cmd.pre_exec(move || {
            let set = cpu_set(&[cpu]);
            libc::setpriority(libc::PRIO_PROCESS, 0, 0);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            Ok(())
        });
    }
    cmd.stdout(Stdio::null()).spawn().expect("spawn")
}

/// The CPU the disk's completions interrupt (`virtio*-req*` in
/// /proc/interrupts, its effective affinity), else CPU 1.
fn disk_irq_cpu() -> usize {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("-req") || l.contains("nvme"))
        .filter_map(|l| l.split(':').next()?.trim().parse::<u32>().ok())
        .filter_map(|irq| {
            let p = format!("/proc/irq/{irq}/effective_affinity_list");
            let s = std::fs::read_to_string(p).ok()?;
            s.trim().split([',', '-']).next()?.parse().ok()
        })
        .next()
        .unwrap_or(1)
}

/// Parks the vCPU threads (blocked, on no run queue) while the test reads,
/// so that no wait episode straddles a reading: schedstat and the BPF
/// route count a wait when it ends, the tracefs route charges the open
/// part too (R2), so at a reading inside a wait they differ by that part
/// (up to 280 ms here under other sessions' builds).
#[derive(Default)]
struct Gate {
    paused: Mutex<bool>,
    changed: Condvar,
    parked: AtomicUsize,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, bool> {
        self.paused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks while paused.
    fn pass(&self, stop: &AtomicBool) {
        let mut g = self.lock();
        if !*g {
            return;
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
        while *g && !stop.load(Ordering::Relaxed) {
            g = self.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        self.parked.fetch_sub(1, Ordering::AcqRel);
    }

    /// Pauses and waits until `n` threads are parked, then 20 ms more.
    fn pause(&self, n: usize) {
        *self.lock() = true;
        while self.parked.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    /// Resumes and waits until every parked thread has left the gate: one
    /// woken but not yet run would still be parked at the next pause while
    /// it waits for the CPU, a wait open across the next reading.
    fn resume(&self) {
        *self.lock() = false;
        self.changed.notify_all();
        while self.parked.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

struct Workload {
    cpu: usize,
    vcpus: Vec<u32>,
    host_loop: u32,
    yes: u32,
    stop: Arc<AtomicBool>,
    gate: Arc<Gate>,
    threads: Vec<JoinHandle<()>>,
    children: Vec<Child>,
}

fn spin(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// Runs 3 ms, sleeps 1 ms: a vCPU that halts now and then.
fn vcpu(stop: &AtomicBool, gate: &Gate) {
    while !stop.load(Ordering::Relaxed) {
        gate.pass(stop);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(3) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Workload {
    fn start() -> Workload {
        let cpu = disk_irq_cpu();
        let other = 1 - cpu.min(1);
        let stop = Arc::new(AtomicBool::new(false));
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        let (v0, t0) = thread("CPU 0/KVM", cpu, &stop, move |s| vcpu(s, &g));
        let g = gate.clone();
        let (v1, t1) = thread("CPU 1/KVM", cpu, &stop, move |s| vcpu(s, &g));
        let (host_loop, t2) = thread("ss-hostloop", cpu, &stop, spin);
        let yes = child(Command::new("yes"), cpu);
        let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("two-routes.img");
        let script = format!(
            "dd if=/dev/zero of={f} bs=1M count=64 oflag=direct status=none; \
             while :; do dd if={f} of=/dev/null bs=4k iflag=direct status=none; done",
            f = file.display()
        );
        let mut dd = Command::new("bash");
        dd.args(["-c", &script]).process_group(0);
        let dd = child(dd, other);
        Workload {
            cpu,
            vcpus: vec![v0, v1],
            host_loop,
            yes: yes.id(),
            stop,
            gate,
            threads: vec![t0, t1, t2],
            children: vec![yes, dd],
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.gate.resume();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for c in &mut self.children {
            // The dd loop runs in its own process group: end it and its dd.
            // SAFETY: signals our own child's process group (and the child).
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a waited nanosecond was charged to, as both routes name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Thread(u32, String),
    Irq,
    Idle,
    Unknown,
}

impl Key {
    fn label(&self) -> String {
        match self {
            Key::Thread(tid, comm) => format!("{comm} ({tid})"),
            Key::Irq => "irq".into(),
            Key::Idle => "idle".into(),
            Key::Unknown => "unknown".into(),
        }
    }
}

/// One route over one window, summed over the watched threads.
struct Side {
    by: BTreeMap<Key, u64>,
    /// Per watched thread (in `tids` order): charged ns.
    sums: Vec<u64>,
    /// Per watched thread: ns charged to each culprit tid.
    per_victim: Vec<BTreeMap<u32, u64>>,
    /// Culprit tid -> (tgid, kthread), to tell other sessions' work.
    who: BTreeMap<u32, (u32, bool)>,
    stats: SchedStats,
}

impl Side {
    fn new(a: &SchedSample, b: &SchedSample, tids: &[u32]) -> Side {
        let mut by = BTreeMap::new();
        let mut who = BTreeMap::new();
        let mut sums = Vec::new();
        let mut per_victim = Vec::new();
        for tid in tids {
            let w = b.threads[tid].since(&a.threads[tid]);
            sums.push(w.wait_ns());
            let mut mine = BTreeMap::new();
            for (c, ns) in &w.by_thread {
                *mine.entry(c.tid).or_insert(0) += ns;
                *by.entry(Key::Thread(c.tid, c.comm.to_string()))
                    .or_insert(0) += ns;
                who.insert(c.tid, (c.tgid, c.kthread));
            }
            *by.entry(Key::Irq).or_insert(0) += w.irq_ns;
            *by.entry(Key::Idle).or_insert(0) += w.idle_ns;
            *by.entry(Key::Unknown).or_insert(0) += w.unknown_ns;
            per_victim.push(mine);
        }
        let (s, t) = (&a.stats, &b.stats);
        let stats = SchedStats {
            events: t.events - s.events,
            lost_events: t.lost_events - s.lost_events,
            overflows: t.overflows - s.overflows,
            missed_switches: t.missed_switches - s.missed_switches,
            unwatched: t.unwatched,
        };
        Side {
            by,
            sums,
            per_victim,
            who,
            stats,
        }
    }

    fn total(&self) -> u64 {
        self.by.values().sum()
    }

    fn share(&self, k: &Key) -> f64 {
        self.by.get(k).copied().unwrap_or(0) as f64 / self.total().max(1) as f64
    }
}

/// (run ns, wait ns, times run) of a thread.
type Stat = (u64, u64, u64);

fn schedstat(tid: u32) -> Stat {
    let s = std::fs::read_to_string(format!("/proc/{tid}/schedstat")).unwrap();
    let v: Vec<u64> = s.split_whitespace().map(|f| f.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

fn deltas(a: &[Stat], b: &[Stat]) -> Vec<Stat> {
    a.iter()
        .zip(b)
        .map(|(x, y)| (y.0 - x.0, y.1 - x.1, y.2 - x.2))
        .collect()
}

struct Window {
    bpf: Side,
    tracefs: Side,
    /// schedstat over a window enclosing both collectors' windows, whose
    /// edges are quiet (the vCPUs parked).
    stat: Vec<Stat>,
    /// (tid, run ns) of the two named thieves over the same window.
    thieves: Vec<(u32, u64)>,
}

/// With the vCPUs parked: schedstat, BPF, tracefs; `secs` of workload;
/// parked again: tracefs, BPF, schedstat.
fn window(bpf: &mut Collector, tf: &mut Collector, load: &Workload, secs: f64) -> Window {
    let tids = &load.vcpus;
    let thieves = [load.host_loop, load.yes];
    let all: Vec<u32> = tids.iter().chain(&thieves).copied().collect();
    let stats = || all.iter().map(|&t| schedstat(t)).collect::<Vec<_>>();
    load.gate.pause(tids.len());
    let s0 = stats();
    let b0 = bpf.read().unwrap();
    let t0 = tf.read().unwrap();
    load.gate.resume();
    std::thread::sleep(Duration::from_secs_f64(secs));
    load.gate.pause(tids.len());
    let t1 = tf.read().unwrap();
    let b1 = bpf.read().unwrap();
    let s1 = stats();
    load.gate.resume();
    Window {
        bpf: Side::new(&b0, &b1, tids),
        tracefs: Side::new(&t0, &t1, tids),
        stat: deltas(&s0, &s1)[..tids.len()].to_vec(),
        thieves: thieves
            .iter()
            .zip(&deltas(&s0, &s1)[tids.len()..])
            .map(|(&t, d)| (t, d.0))
            .collect(),
    }
}

impl Window {
    /// Why this window cannot compare the rules: a loss, which each route
    /// handles its own way (R8).
    fn disturbed(&self) -> Option<String> {
        let (b, t) = (&self.bpf.stats, &self.tracefs.stats);
        (b.lost_events + b.overflows + t.lost_events > 0).then(|| {
            format!(
                "losses: bpf lost {} overflows {}, tracefs lost {}",
                b.lost_events, b.overflows, t.lost_events
            )
        })
    }

    /// Every culprit's shares in both routes, largest first.
    fn rows(&self) -> Vec<(Key, f64, f64)> {
        let keys: BTreeSet<&Key> = self.bpf.by.keys().chain(self.tracefs.by.keys()).collect();
        let mut rows: Vec<_> = keys
            .into_iter()
            .map(|k| (k.clone(), self.bpf.share(k), self.tracefs.share(k)))
            .collect();
        rows.sort_by(|a, b| b.1.max(b.2).total_cmp(&a.1.max(a.2)));
        rows
    }

    /// The share of wait behind other sessions' user threads (neither
    /// this process, nor `yes`, nor a kernel thread), per route.
    fn foreign(&self, load: &Workload) -> (f64, f64) {
        let ours = |s: &Side, k: &Key| match k {
            Key::Thread(tid, _) => s.who.get(tid).is_some_and(|&(tgid, kthread)| {
                !kthread && tgid != std::process::id() && tgid != load.yes
            }),
            _ => false,
        };
        // A fold from +0.0: an empty f64 sum is -0.0.
        let f = |s: &Side| {
            let shares = s.by.keys().filter(|k| ours(s, k)).map(|k| s.share(k));
            shares.fold(0.0, |a, b| a + b)
        };
        (f(&self.bpf), f(&self.tracefs))
    }

    fn print(&self, n: usize, load: &Workload) {
        let (fb, ft) = self.foreign(load);
        eprintln!(
            "window {n}: wait bpf {:.3} s tracefs {:.3} s; foreign {:.1} % / {:.1} %; \
             bpf {:?}; tracefs {:?}",
            self.bpf.total() as f64 / 1e9,
            self.tracefs.total() as f64 / 1e9,
            fb * 100.0,
            ft * 100.0,
            self.bpf.stats,
            self.tracefs.stats
        );
        let rows = self.rows();
        let (big, small): (Vec<_>, Vec<_>) = rows
            .iter()
            .partition(|r| r.1.max(r.2) >= 0.005 || !matches!(r.0, Key::Thread(..)));
        for (k, b, t) in big {
            let d = (b - t) * 100.0;
            eprintln!(
                "  {:<28} bpf {:>6.2} %  tracefs {:>6.2} %  {d:+.2} pp",
                k.label(),
                b * 100.0,
                t * 100.0
            );
        }
        let worst = small.iter().map(|r| (r.1 - r.2).abs()).fold(0.0, f64::max);
        eprintln!(
            "  {} others under 0.5 %, largest difference {:.2} pp",
            small.len(),
            worst * 100.0
        );
    }
}

/// Each route's per-thread sum against the schedstat this test read over
/// a window with quiet edges (no wait open at either end), within 2 % (the
/// issue's bound). The tracefs route stamps a switch after the pick and
/// cannot take that back (R7): it may add up to 30 µs per episode (6-22 µs
/// measured, TRACEFS.md) plus 1 ms.
fn check_sums(w: &Window, tids: &[u32]) {
    for (i, tid) in tids.iter().enumerate() {
        let (wait, runs) = (w.stat[i].1 as f64, w.stat[i].2 as f64);
        let (b, t) = (w.bpf.sums[i] as f64, w.tracefs.sums[i] as f64);
        eprintln!(
            "  tid {tid}: schedstat wait {:.1} ms over {runs} runs; bpf {:.1} ms, tracefs {:.1} ms",
            wait / 1e6,
            b / 1e6,
            t / 1e6
        );
        assert!(wait > 2e8, "tid {tid} barely waited: {wait} ns");
        assert!(
            (b - wait).abs() <= 0.02 * wait,
            "bpf: tid {tid} sum {b} vs schedstat {wait} +-2 %"
        );
        let slack = 0.02 * wait + 30e3 * runs + 1e6;
        assert!(
            (t - wait).abs() <= slack,
            "tracefs: tid {tid} sum {t} vs schedstat {wait} (+-{slack} ns)"
        );
    }
}

/// The two thieves against their own run time (schedstat, this test's
/// read): each was charged some of each vCPU's wait, and never more than it
/// ran (a vCPU waits behind it only while it runs), in both routes.
fn check_thieves(w: &Window) {
    for &(tid, run) in &w.thieves {
        let per = |s: &Side| -> Vec<f64> {
            let v = s
                .per_victim
                .iter()
                .map(|m| m.get(&tid).copied().unwrap_or(0));
            v.map(|ns| (ns as f64 / 1e5).round() / 10.0).collect()
        };
        eprintln!(
            "  thief {tid}: ran {:.1} ms; charged per vCPU (ms) bpf {:?} tracefs {:?}",
            run as f64 / 1e6,
            per(&w.bpf),
            per(&w.tracefs)
        );
        for side in [&w.bpf, &w.tracefs] {
            for mine in &side.per_victim {
                let got = mine.get(&tid).copied().unwrap_or(0);
                assert!(got > 0, "thief {tid} not charged");
                assert!(
                    got as f64 <= run as f64 * 1.02 + 1e6,
                    "thief {tid} charged {got} ns, ran {run} ns"
                );
            }
        }
    }
}

fn check_shares(w: &Window) {
    for (k, b, t) in w.rows() {
        assert!(
            (b - t).abs() <= SHARE_PP,
            "{}: bpf {:.2} % vs tracefs {:.2} %",
            k.label(),
            b * 100.0,
            t * 100.0
        );
    }
}

#[test]
fn both_routes_at_once_agree_on_every_culprit_and_with_schedstat() {
    if !can_run() {
        return;
    }
    let load = Workload::start();
    // Both at once: nothing in the kernel stops a tp_btf program and a
    // tracefs instance from taking the same tracepoints.
    let mut bpf = Collector::start(Preference::Bpf).unwrap_or_else(|e| panic!("{e}"));
    let mut tf = Collector::start(Preference::Tracefs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (bpf.route().as_str(), tf.route().as_str()),
        ("bpf", "tracefs")
    );
    let tids = load.vcpus.clone();
    bpf.watch(&tids).unwrap();
    tf.watch(&tids).unwrap();
    eprintln!(
        "workload on CPU {}: vCPUs {tids:?}, ss-hostloop {}, yes {}",
        load.cpu, load.host_loop, load.yes
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut compared = 0;
    for n in 0..WINDOWS {
        let w = window(&mut bpf, &mut tf, &load, WINDOW_S);
        w.print(n, &load);
        if let Some(why) = w.disturbed() {
            eprintln!("window {n} rejected: {why}");
            continue;
        }
        check_sums(&w, &tids);
        check_shares(&w);
        check_thieves(&w);
        compared += 1;
    }
    assert!(compared > 0, "every window lost events");
}
