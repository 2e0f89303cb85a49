//! A week on a big host, scaled to fit CI (issue 29): `serve` scraped once
//! a second for `STEALSCOPE_SOAK_S` seconds (90 by default; the 10-minute
//! memory run is scripts/bench-serve-rss.sh, in BENCHMARKS.md) while
//! - a stand-in VMM (bench/fakevmm.c, run as `qemu-system-x86_64 -name
//!   soakbig`) holds 10,000 threads named "CPU n/KVM" that sleep and wake,
//! - a real QEMU VM, soakV, its busy vCPU pinned to CPU 1, is stopped and
//!   started again under the same name every [`RESTART_S`],
//! - a busy loop pinned to CPU 1 execs under another name every
//!   [`EXEC_S`] (soakA, soakB, soakA...: one pid, a new comm each time).
//!
//! Checked against the test's own readings: serve's RSS, read every second,
//! grows by less than 5 MiB from its median over 30 s once settled (after
//! the first minute, or the first third of a shorter run) to its median over
//! the last 30 s (medians: a rule run's transient reads move single readings
//! by tens of MB either way); every thread is
//! watched and the lost-event and overflow counters are exported; every
//! host process charged for soakV's wait had that name when the test read
//! /proc, and both of the loop's names are charged; over the last VM's
//! life its culprits add up to its vCPU's wait within 2 %, and that wait is
//! the test's own schedstat reading.

use super::helpers::*;
use super::who::{culprits, fresh};
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

const THREADS: usize = 10_000;
/// soakV is stopped and started again this often.
const RESTART_S: f64 = 20.0;
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
        .unwrap_or(90.0)
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

/// Every process name on the host, read every 100 ms until `stop`.
fn watch_names(
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<BTreeSet<String>>>, std::thread::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let out = seen.clone();
    let h = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let names: Vec<String> = std::fs::read_dir("/proc")
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
                .collect();
            out.lock().unwrap().extend(names);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    (seen, h)
}

fn rss_kib(pid: u32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    st.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

fn restart_vm() -> (u64, u64) {
    testenv("stop-vm.sh", &["soakV"]);
    pinned_busy_vm("soakV")
}

/// What the soak saw: serve's RSS each second (elapsed s, KiB), every
/// culprit of soakV with the most it was charged in one VM's life.
struct Soaked {
    rss: Vec<(f64, u64)>,
    charged: BTreeMap<(String, String), f64>,
    vm: (u64, u64),
}

/// Median RSS over 30 s from `from` (elapsed s), KiB.
fn median_rss(rss: &[(f64, u64)], from: f64) -> u64 {
    let mut w: Vec<u64> = rss
        .iter()
        .filter(|(t, _)| (from..from + 30.0).contains(t))
        .map(|&(_, k)| k)
        .collect();
    assert!(w.len() >= 10, "RSS readings from {from} s: {}", w.len());
    w.sort_unstable();
    w[w.len() / 2]
}

fn soak(s: &Serve, mut vm: (u64, u64)) -> Soaked {
    let (t0, total) = (Instant::now(), soak_s());
    let mut last_restart = Instant::now();
    let (mut rss, mut charged) = (Vec::new(), BTreeMap::new());
    while t0.elapsed().as_secs_f64() < total {
        std::thread::sleep(Duration::from_secs(1));
        let m = s.metrics();
        for (k, v) in culprits(&m, "soakV") {
            let e = charged.entry(k).or_insert(0.0f64);
            *e = e.max(v);
        }
        rss.push((t0.elapsed().as_secs_f64(), rss_kib(s.pid())));
        if last_restart.elapsed().as_secs_f64() >= RESTART_S
            && t0.elapsed().as_secs_f64() + RESTART_S / 2.0 < total
        {
            vm = restart_vm();
            last_restart = Instant::now();
        }
    }
    Soaked { rss, charged, vm }
}

/// Over 15 s of the last VM's life: its culprits add up to its vCPU's
/// wait, and that wait is the test's own schedstat reading.
fn assert_sums(s: &Serve, (pid, tid): (u64, u64)) {
    let key = "stealscope_vcpu_wait_seconds_total{vm=\"soakV\",vcpu=\"0\"}";
    let own = || testenv::schedstat(pid, tid).1 as f64 / 1e9;
    let own0 = own();
    let (m0, _) = fresh(s, key, tid);
    std::thread::sleep(Duration::from_secs(15));
    let (m1, _) = fresh(s, key, tid);
    let own1 = own();
    let (c0, c1) = (culprits(&m0, "soakV"), culprits(&m1, "soakV"));
    let sum: f64 = c1
        .iter()
        .map(|(k, v)| v - c0.get(k).copied().unwrap_or(0.0))
        .sum();
    let (w0, w1) = (m0.get(key).unwrap(), m1.get(key).unwrap());
    let wait = w1 - w0;
    eprintln!(
        "soakV: culprits {sum:.3} s, serve's wait {wait:.3} s, schedstat {:.3} s",
        own1 - own0
    );
    assert!(wait > 2.0, "soakV's vCPU hardly waited: {wait} s");
    assert!(
        own0 <= w0 && w1 <= own1 && (own1 - own0) - wait <= 0.02 * wait + 1.5,
        "serve's schedstat {w0}..{w1} vs the test's {own0}..{own1}"
    );
    assert!(
        (sum - wait).abs() <= 0.02 * wait,
        "culprits {sum} s vs schedstat {wait} s"
    );
}

#[test]
#[ignore = "issue 29, open: the sums miss the 2 % (2026-12-04, debug, 90 s: culprits \
            4.971 s vs serve's wait 5.155 s). serve's culprit series advance to the \
            collector's read just before a host scan, its wait series to the scan's \
            schedstat read of that thread, up to a scan of 10,000 threads later; the \
            names, counts and RSS checks passed in that run"]
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
    let total = soak_s();
    let settled = median_rss(&soaked.rss, (total / 3.0).min(60.0));
    let last = median_rss(&soaked.rss, total - 30.0);
    let m = s.metrics();
    stop.store(true, Ordering::Relaxed);
    names.join().unwrap();

    eprintln!("serve RSS (medians over 30 s): {settled} KiB settled, {last} KiB at the end");
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
                "{name} charged {v} s, never seen in /proc"
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
    assert_sums(&s, soaked.vm);
    assert!(
        last <= settled + RSS_GROWTH_KIB,
        "serve's RSS grew from {settled} to {last} KiB"
    );
}
