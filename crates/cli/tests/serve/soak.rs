//! A week on a big host, scaled to fit CI (issue 29): `serve` scraped once
//! a second for `STEALSCOPE_SOAK_S` seconds (55 by default, one restart;
//! the 10-minute memory run is scripts/bench-serve-rss.sh, in
//! BENCHMARKS.md) while
//! - a stand-in VMM (bench/fakevmm.c, run as `qemu-system-x86_64 -name
//!   soakbig`) holds 10,000 threads named "CPU n/KVM" that sleep and wake,
//! - a real QEMU VM, soakV, its busy vCPU pinned to CPU 1, is stopped and
//!   started again under the same name every [`RESTART_S`],
//! - a busy loop pinned to CPU 1 execs under another name every
//!   [`EXEC_S`] (soakA, soakB, soakA...: one pid, a new comm each time).
//!
//! Checked against the test's own readings: serve's RSS, read every second,
//! grows by less than 5 MiB from its median over 30 s after the first
//! minute to its median over the last 30 s (medians: a rule run's
//! transient reads move single readings by tens of MB either way; judged
//! in runs of 120 s or more only, printed a minute at a time in shorter
//! ones); every thread is
//! watched and the lost-event and overflow counters are exported; every
//! host process charged for soakV's wait had that name on the host (read
//! from /proc and from every exec and rename), and both of the loop's
//! names are charged; over the last 15 s of the last VM's life its
//! culprits add up to its vCPU's wait (serve charges each scan's schedstat
//! wait), and each end's wait is the kernel's schedstat during that scan,
//! as the test's own readings around it bracket it.

use super::helpers::*;
use super::who::culprits;
use crate::common::testenv::{self, testenv};
use crate::common::who::pinned_busy_vm;
use crate::common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stealscope_readers::tracefs;

const THREADS: usize = 10_000;
/// soakV is stopped and started again this often.
const RESTART_S: f64 = 15.0;
/// The loop execs under its other name this often.
const EXEC_S: u32 = 4;
const RSS_GROWTH_KIB: u64 = 5 * 1024;
/// A culprit charged less than this may be a process too short-lived for
/// the test's /proc reading (every 100 ms) to have seen it.
const NAMED_MIN_S: f64 = 0.05;

fn soak_s() -> f64 {
    std::env::var("STEALSCOPE_SOAK_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(55.0)
}

/// A child killed and reaped on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stand-in VMM, built from bench/fakevmm.c, once all its threads are named.
fn fake_vmm(dir: &Path) -> Killed {
    let exe = dir.join("qemu-system-x86_64");
    let src = repo().join("bench/fakevmm.c");
    let st = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cc (builds bench/fakevmm.c)");
    assert!(st.success(), "cc {} failed", src.display());
    let mut child = Command::new(&exe)
        .args(["-name", "soakbig", &THREADS.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "fakevmm did not start");
    Killed(child)
}

/// A busy loop pinned to CPU 1 that execs soakA and soakB in turn (copies
/// of bash, so the comm is the file's name).
fn exec_loop(dir: &Path) -> Killed {
    for name in ["soakA", "soakB"] {
        std::fs::copy("/bin/bash", dir.join(name)).unwrap();
    }
    let script = dir.join("loop.sh");
    std::fs::write(
        &script,
        format!(
            "SECONDS=0; while [ $SECONDS -lt {EXEC_S} ]; do :; done\n\
             exec \"$SOAK_DIR/$1\" \"$0\" \"$2\" \"$1\"\n"
        ),
    )
    .unwrap();
    // taskset execs the loop: the child's pid is the loop's.
    let child = Command::new("taskset")
        .args(["-c", "1"])
        .arg(dir.join("soakA"))
        .arg(&script)
        .args(["soakB", "soakA"])
        .env("SOAK_DIR", dir)
        .spawn()
        .unwrap();
    Killed(child)
}

/// Every name a task had on the host until `stop`: /proc's comms every
/// 100 ms for the tasks that were there before, and each exec's and
/// rename's new name from a tracing instance, so a shim that lives for
/// 10 ms is seen too (2026-12-06: pyenv, charged 0.07 s, missed by the
/// /proc reading alone).
fn watch_names(
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<BTreeSet<String>>>, std::thread::JoinHandle<()>) {
    let mut trace = name_trace();
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let out = seen.clone();
    let h = std::thread::spawn(move || {
        let mut lost = 0;
        loop {
            // The last pass after `stop` drains what the pipe still holds.
            let last = stop.load(Ordering::Relaxed);
            let mut names = proc_comms();
            trace.drain(|l| {
                lost += tracefs::lost_events(l).unwrap_or(0);
                names.extend(new_comm(l));
            });
            out.lock().unwrap().extend(names);
            if last {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(lost, 0, "the name trace lost events");
    });
    (seen, h)
}

/// A tracing instance of every exec and rename on the host.
fn name_trace() -> tracefs::Instance {
    let mut t = tracefs::Instance::create("stealscope-soak-names-", true).unwrap();
    t.write("buffer_size_kb", "1024").unwrap();
    for ev in ["sched/sched_process_exec", "task/task_rename"] {
        t.write(&format!("events/{ev}/enable"), "1").unwrap();
    }
    t.start().unwrap();
    t
}

/// The comm of every task in /proc now.
fn proc_comms() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|c| c.trim_end().to_string())
        .collect()
}

/// The comm a trace line gave a task: an exec's is its file's base name
/// (the kernel's begin_new_exec), cut to 15 bytes; a rename's is newcomm.
fn new_comm(line: &str) -> Option<String> {
    let l = tracefs::parse_line(line)?;
    let name = match l.name {
        "sched_process_exec" => {
            let f = l.fields.strip_prefix("filename=")?;
            let path = &f[..f.rfind(" pid=")?];
            path.rsplit('/').next()?
        }
        "task_rename" => {
            let f = &l.fields[l.fields.find("newcomm=")? + 8..];
            &f[..f.rfind(" oom_score_adj=").unwrap_or(f.len())]
        }
        _ => return None,
    };
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    Some(name[..end].to_string())
}

/// One reading of serve's memory, with the load average beside it (a
/// run under other load is told apart by it).
#[derive(Debug, Clone, Copy)]
struct MemReading {
    /// Elapsed s.
    at: f64,
    /// VmRSS, KiB: what the issue judges.
    rss: u64,
    /// RssAnon and RssFile, KiB: the heap's pages and the binary's (a
    /// debug build faults in text as new paths run), told apart.
    anon: u64,
    file: u64,
    load: f64,
}

/// None once serve is gone or a zombie (whose status has no memory lines):
/// the sampler stops there, and the soak's own checks say why.
fn mem_reading(pid: u32, at: f64) -> Option<MemReading> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        st.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some(MemReading {
        at,
        rss: kib("VmRSS:")?,
        anon: kib("RssAnon:")?,
        file: kib("RssFile:")?,
        load: load1(),
    })
}

fn load1() -> f64 {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap();
    l.split_whitespace().next().unwrap().parse().unwrap()
}

/// Reads serve's RSS and the load average once a second in a thread of
/// its own: the soak's loop blocks for up to tens of seconds in a VM's
/// restart or a wait for a scan, which left whole RSS windows unread.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<MemReading>>,
}

impl RssSampler {
    fn start(pid: u32, t0: Instant) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut rss = Vec::new();
            // Stops by itself when serve is gone (a failed soak unwinding).
            while !halt.load(Ordering::Relaxed) {
                let Some(r) = mem_reading(pid, t0.elapsed().as_secs_f64()) else {
                    break;
                };
                rss.push(r);
                std::thread::sleep(Duration::from_secs(1));
            }
            rss
        });
        RssSampler { stop, thread }
    }

    fn stop(self) -> Vec<MemReading> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn restart_vm() -> (u64, u64) {
    testenv("stop-vm.sh", &["soakV"]);
    pinned_busy_vm("soakV")
}

/// What the soak saw: serve's memory each second, every
/// culprit of soakV with the most it was charged in one VM's life, and
/// serve's metrics with the test's own schedstat wait of the last VM's
/// vCPU at the start and the end of [`SUMS_S`].
struct Soaked {
    rss: Vec<MemReading>,
    /// (elapsed s, series in serve's exposition) at each scrape: what
    /// serve holds grows with the charge pairs active, so a memory rise
    /// is told apart from a workload that grew.
    series: Vec<(f64, usize)>,
    charged: BTreeMap<(String, String), f64>,
    sums: [Bracketed; 2],
}

/// The span the sums are checked over: the end of the soak, at least
/// `RESTART_S` after the last restart ([`soak`] restarts no VM later).
const SUMS_S: f64 = 15.0;
const VCPU_WAIT: &str = "stealscope_vcpu_wait_seconds_total{vm=\"soakV\",vcpu=\"0\"}";

/// When serve's memory counts as settled (elapsed s): after the first
/// minute, as the issue asks.
const SETTLE_S: f64 = 60.0;

/// The RSS windows, as the issue has them.
const RSS_WINDOW_S: f64 = 30.0;

/// Whether the run is long enough to judge RSS growth: over shorter
/// windows a rule run's transient (tens of MB for seconds) outweighs
/// 5 MiB either way (2026-12-06, 10 s windows at 60-80 s: +6.3 MiB, then
/// -0.1 MiB).
fn judges_rss() -> bool {
    soak_s() >= SETTLE_S + 2.0 * RSS_WINDOW_S
}

/// Median RSS over [`RSS_WINDOW_S`] from `from` (elapsed s), KiB.
fn median_rss(rss: &[MemReading], from: f64) -> u64 {
    let mut w: Vec<u64> = rss
        .iter()
        .filter(|m| (from..from + RSS_WINDOW_S).contains(&m.at))
        .map(|m| m.rss)
        .collect();
    assert!(
        w.len() as f64 >= RSS_WINDOW_S / 2.0,
        "RSS readings from {from} s: {}",
        w.len()
    );
    w.sort_unstable();
    w[w.len() / 2]
}

/// serve's memory a minute at a time: RSS median and range, the medians
/// of its anonymous and file-backed parts, and of its series.
fn print_minutes(rss: &[MemReading], series: &[(f64, usize)]) {
    let median = |w: &[MemReading], f: fn(&MemReading) -> u64| {
        let mut k: Vec<u64> = w.iter().map(f).collect();
        k.sort_unstable();
        (k[k.len() / 2], k[0], k[k.len() - 1])
    };
    for w in rss.chunk_by(|a, b| (a.at / 60.0) as u32 == (b.at / 60.0) as u32) {
        let m = (w[0].at / 60.0) as usize;
        let (kib, lo, hi) = median(w, |x| x.rss);
        let load = w.iter().map(|x| x.load);
        let mut n: Vec<usize> = series
            .iter()
            .filter(|(t, _)| (*t / 60.0) as usize == m)
            .map(|x| x.1)
            .collect();
        n.sort_unstable();
        eprintln!(
            "minute {m}: serve RSS median {kib} KiB (min {lo}, max {hi}; anon {}, file {}), \
             series {}, n={}, load {:.1}-{:.1}",
            median(w, |x| x.anon).0,
            median(w, |x| x.file).0,
            n.get(n.len() / 2).copied().unwrap_or(0),
            w.len(),
            load.clone().fold(f64::MAX, f64::min),
            load.fold(0.0, f64::max)
        );
    }
}

fn soak(s: &Serve, mut vm: (u64, u64)) -> Soaked {
    let (t0, total) = (Instant::now(), soak_s());
    // One restart at least: the first comes after RESTART_S, and the sums
    // need RESTART_S and SUMS_S after the last.
    assert!(
        total >= 2.0 * RESTART_S + SUMS_S + 5.0,
        "STEALSCOPE_SOAK_S={total}: too short for one restart"
    );
    let mut last_restart = Instant::now();
    let (mut charged, mut first, mut series) = (BTreeMap::new(), None, Vec::new());
    let rss = RssSampler::start(s.pid(), t0);
    // Whether serve shows the current VM's vCPU (a restarted VM is the same
    // VM by name: its series is back within a few scans).
    let (mut found, mut restarts) = (false, 0);
    while t0.elapsed().as_secs_f64() < total {
        std::thread::sleep(Duration::from_secs(1));
        let m = s.metrics();
        series.push((t0.elapsed().as_secs_f64(), m.len()));
        for (k, v) in culprits(&m, "soakV") {
            let e = charged.entry(k).or_insert(0.0f64);
            *e = e.max(v);
        }
        // The stopped VM's series left with its threads: this is the new one's.
        if m.get(VCPU_WAIT).is_some() {
            found = true;
        }
        // serve's own start (BPF load, first discovery of 10,000 threads)
        // gets until the first restart; a restart 5 s.
        let grace = if restarts == 0 { RESTART_S } else { 5.0 };
        assert!(
            found || last_restart.elapsed().as_secs_f64() < grace,
            "soakV (pid {}) restarted {:.0} s ago: no vCPU series yet",
            vm.0,
            last_restart.elapsed().as_secs_f64()
        );
        if last_restart.elapsed().as_secs_f64() >= RESTART_S
            && t0.elapsed().as_secs_f64() + RESTART_S + SUMS_S < total
        {
            vm = restart_vm();
            (last_restart, found) = (Instant::now(), false);
            restarts += 1;
        }
        if first.is_none() && t0.elapsed().as_secs_f64() >= total - SUMS_S {
            first = Some(fresh_wait(s, vm));
        }
    }
    let sums = [first.expect("the sums' start"), fresh_wait(s, vm)];
    let rss = rss.stop();
    Soaked {
        rss,
        series,
        charged,
        sums,
    }
}

/// What every host scan moves: the stand-in VMM's vCPU run times (a few
/// of its 10,000 threads run between any two scans), whether or not soakV's
/// vCPU ran.
fn scan_mark(m: &Exposition) -> f64 {
    let runs = m.starting("stealscope_vcpu_run_seconds_total{vm=\"soakbig\",");
    runs.iter().map(|x| x.1).sum()
}

/// Serve's metrics from a host scan, with the test's own schedstat wait
/// of the thread (s) bracketing that scan's read of it. Scans run one
/// after another in one loop, so a scan that starts after a published one
/// read the thread after the low reading (taken before a scrape that did
/// not yet show the earlier scan) and before the high one (taken after the
/// scrape that showed it). The span is about a scan period: on a loaded
/// host serve's read trails its publication by up to a second (debug
/// build, 10,000 threads), so a single reading with the scrape was off by
/// 0.4 s of wait (2026-12-06).
fn fresh_wait(s: &Serve, (pid, tid): (u64, u64)) -> Bracketed {
    let own = || testenv::schedstat(pid, tid).1 as f64 / 1e9;
    let mut lo = own();
    let v0 = scan_mark(&s.metrics());
    // A scan is due every second, but on a loaded host one collector
    // reading of 10,000 threads alone took up to 4.7 s (debug build).
    let v1 = wait_for("a host scan", Duration::from_secs(15), || {
        std::thread::sleep(Duration::from_millis(20));
        let o = own();
        let v = scan_mark(&s.metrics());
        if v == v0 {
            lo = o;
        }
        (v != v0).then_some(v)
    });
    wait_for("the next host scan", Duration::from_secs(15), || {
        std::thread::sleep(Duration::from_millis(20));
        let m = s.metrics();
        (scan_mark(&m) != v1).then(|| Bracketed {
            own: (lo, own()),
            m,
        })
    })
}

/// A scrape and the test's own schedstat wait (s) before and after the
/// scan behind it read the vCPU.
struct Bracketed {
    m: Exposition,
    own: (f64, f64),
}

/// Over the last [`SUMS_S`] of the last VM's life: its culprits add up to
/// its vCPU's wait, and each end's wait is the kernel's schedstat at some
/// moment of the test's bracket around that scan's read.
fn assert_sums([b0, b1]: &[Bracketed; 2]) {
    let key = VCPU_WAIT;
    let (c0, c1) = (culprits(&b0.m, "soakV"), culprits(&b1.m, "soakV"));
    // Totals, not per-series differences: a culprit shown at the start may
    // have moved into `other` by the end (2026-12-06: python3's 0.19 s
    // counted twice that way).
    let sum = c1.values().sum::<f64>() - c0.values().sum::<f64>();
    let (w0, w1) = (b0.m.get(key).unwrap(), b1.m.get(key).unwrap());
    let wait = w1 - w0;
    eprintln!(
        "soakV: culprits {sum:.3} s, serve's wait {wait:.3} s, schedstat {:.3}..{:.3} s at the start, {:.3}..{:.3} s at the end",
        b0.own.0, b0.own.1, b1.own.0, b1.own.1
    );
    let run = |m: &Exposition| m.get(&VCPU_WAIT.replace("wait", "run")).unwrap();
    // Enough wait that the 1 ms sum check below means something. Not
    // more: a clean CI run (load 213-571 beside the 10,000 threads) gave
    // the restarted TCG guest, still booting, 3.1 s of run and 1.62 s of
    // wait over the window, its culprits equal to it to the ms.
    assert!(
        wait > 0.5,
        "soakV's vCPU hardly waited: {wait} s (it ran {:.3} s)",
        run(&b1.m) - run(&b0.m)
    );
    // 1 µs: the exposition rounds to the microsecond (a vCPU that stood
    // still between the reads: 31.332731 against 31.332730583).
    for (w, b) in [(w0, b0), (w1, b1)] {
        assert!(
            b.own.0 - 1e-6 <= w && w <= b.own.1 + 1e-6,
            "serve's schedstat wait {w} s is not the kernel's during the scan: {:?}",
            b.own
        );
    }
    // Serve charges each scan's schedstat wait: the sums are equal.
    assert!(
        (sum - wait).abs() <= 1e-3,
        "culprits {sum} s vs serve's wait {wait} s"
    );
}

#[test]
fn serve_soaks_with_10000_threads_restarts_and_execs() {
    if !require(testenv::have_qemu(), "root and qemu (testenv/setup.sh)") {
        return;
    }
    let _turn = vm_turn();
    let _vms = testenv::Vms;
    let dir = tempfile::tempdir().unwrap();
    let _big = fake_vmm(dir.path());
    let vm = pinned_busy_vm("soakV");
    let _loop = exec_loop(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, names) = watch_names(stop.clone());
    let s = Serve::start(&[]);
    let soaked = soak(&s, vm);
    let m = s.metrics();
    stop.store(true, Ordering::Relaxed);
    names.join().unwrap();

    print_minutes(&soaked.rss, &soaked.series);
    for k in [
        "stealscope_sched_events_lost_total",
        "stealscope_sched_overflows_total",
    ] {
        let v = m.get(k).unwrap_or_else(|| panic!("{k} not exported"));
        eprintln!("{k} {v}");
    }
    assert_eq!(m.get("stealscope_sched_unwatched_threads"), Some(0.0));
    let vcpus = m.starting("stealscope_vcpu_wait_seconds_total{vm=\"soakbig\",");
    assert_eq!(vcpus.len(), THREADS, "soakbig's vCPU series");

    let seen = seen.lock().unwrap();
    eprintln!("soakV's culprits: {:?}", soaked.charged);
    for ((kind, name), v) in &soaked.charged {
        if kind == "host-process" && name != "other" && *v >= NAMED_MIN_S {
            assert!(
                seen.contains(name),
                "{name} charged {v} s, never a task's name on the host"
            );
        }
    }
    for name in ["soakA", "soakB"] {
        let k = ("host-process".to_string(), name.to_string());
        assert!(
            soaked.charged.get(&k).is_some_and(|v| *v > 1.0),
            "{name} not charged: {:?}",
            soaked.charged
        );
    }
    assert_sums(&soaked.sums);
    if judges_rss() {
        let settled = median_rss(&soaked.rss, SETTLE_S);
        let last = median_rss(&soaked.rss, soak_s() - RSS_WINDOW_S);
        eprintln!(
            "serve RSS (medians over {RSS_WINDOW_S} s): {settled} KiB settled, {last} KiB at the end"
        );
        assert!(
            last <= settled + RSS_GROWTH_KIB,
            "serve's RSS grew from {settled} to {last} KiB"
        );
    }
}
