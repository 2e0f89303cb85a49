//! The live starvation scanner: a thread that finds runnable threads which
//! have not run for over a second (`stealscope_model::host::starve` says
//! why run time and state show it, and keeps the waits).
//!
//! Cost: a full scan reads one small file per thread (`stat`, which takes
//! no lock a busy process holds) and `schedstat` only of the threads in
//! state R; it runs every [`FULL_EVERY`], or less often when a scan costs
//! more than a twentieth of that in CPU time (about 30 µs per thread in a
//! debug build here: ~800 threads), so the scanner stays under 5 % of a CPU. Between full scans only the
//! threads already waiting are read again ([`RECHECK_EVERY`]), usually a
//! handful. A wait starting at T is first seen by the next full scan
//! (T + 0.5 s at most) and named once a second has passed since that scan,
//! at a recheck: within T + 1.75 s. BENCHMARKS.md has the cost per thread.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stealscope_model::host::starve::{
    StarveTracker, StoredHolder, StoredStarve, StoredWait, TaskScan, Wait, OPEN_WAIT_NS, STARVE_NS,
};
use stealscope_readers::clock::monotonic_ns;
use stealscope_readers::own_threads;
use stealscope_readers::process::{parse_cgroup, parse_schedstat, parse_task_stat};

pub const FULL_EVERY: Duration = Duration::from_millis(500);
/// A full scan runs at most this share of the time on one CPU: on a host
/// with so many threads that a scan costs more than 25 ms of CPU, full
/// scans space out (and a wait is named later than 2 s) rather than the
/// scanner becoming load itself.
const MAX_CPU_SHARE: u32 = 20;
pub const RECHECK_EVERY: Duration = Duration::from_millis(250);
/// Holders named per waiting thread.
const HOLDERS: usize = 3;

#[derive(Default)]
struct State {
    tracker: StarveTracker,
    full_scans: u64,
    full_max: Duration,
    /// The longest period between full scans used.
    full_every: Duration,
}

/// A running scanner; [`StarveWatch::finish`] stops it and returns its reading.
pub struct StarveWatch {
    root: PathBuf,
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
    clk_tck: f64,
}

impl StarveWatch {
    /// Starts scanning `root`'s /proc on a thread of its own.
    pub fn start(root: &Path) -> std::io::Result<StarveWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(State::default()));
        let thread = {
            let (root, stop, state) = (root.to_path_buf(), stop.clone(), state.clone());
            own_threads::spawn("starve", move || run(&root, &stop, &state))?
        };
        Ok(StarveWatch {
            root: root.to_path_buf(),
            stop,
            state,
            thread: Some(thread),
            clk_tck: ticks_per_s(),
        })
    }

    /// Threads waiting for over a second now, named.
    pub fn open_now(&self) -> Vec<StoredWait> {
        let waits = lock(&self.state).tracker.open(STARVE_NS);
        waits.iter().map(|w| self.name(w)).collect()
    }

    /// Stops the scanner: open waits at the end (from a quarter second) and
    /// waits of over a second that ended during it, longest first.
    pub fn finish(mut self) -> StoredStarve {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        let st = lock(&self.state);
        let mut waits: Vec<StoredWait> = st
            .tracker
            .open(OPEN_WAIT_NS)
            .iter()
            .chain(st.tracker.ended())
            .map(|w| self.name(w))
            .collect();
        waits.sort_by(|a, b| b.waited_s.total_cmp(&a.waited_s));
        StoredStarve {
            threads: st.tracker.threads,
            full_scans: st.full_scans,
            full_every_s: st.full_every.max(FULL_EVERY).as_secs_f64(),
            recheck_every_s: RECHECK_EVERY.as_secs_f64(),
            full_scan_max_ms: st.full_max.as_secs_f64() * 1e3,
            waits,
            own: None,
        }
    }

    fn name(&self, w: &Wait) -> StoredWait {
        let comm = |pid: u32, tid: u32| {
            read_text(&self.root, &format!("proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_else(|| "?".into())
        };
        let holders = w
            .holders
            .iter()
            .take(HOLDERS)
            .map(|h| StoredHolder {
                tid: h.tid,
                pid: h.tgid,
                comm: comm(h.tgid, h.tid),
                process: comm(h.tgid, h.tgid),
                cpu_s: h.ticks as f64 / self.clk_tck,
            })
            .collect();
        StoredWait {
            tid: w.tid,
            pid: w.tgid,
            comm: comm(w.tgid, w.tid),
            process: comm(w.tgid, w.tgid),
            cpu: w.cpu,
            cgroup: cgroup(&self.root, w.tgid, w.tid),
            waited_s: w.waited_ns() as f64 / 1e9,
            since_s: Some(w.since_ns as f64 / 1e9),
            open: w.open,
            holders,
        }
    }
}

impl Drop for StarveWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run(root: &Path, stop: &AtomicBool, state: &Mutex<State>) {
    let mut r = ProcReader::new(root);
    let mut next_full = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        if began >= next_full {
            let cpu0 = thread_cpu();
            let tasks = r.full();
            let cost = thread_cpu().saturating_sub(cpu0);
            let mut st = lock(state);
            st.tracker.full(monotonic_ns(), &tasks);
            st.full_scans += 1;
            st.full_max = st.full_max.max(cost);
            let every = FULL_EVERY.max(cost * MAX_CPU_SHARE);
            st.full_every = st.full_every.max(every);
            next_full = began + every;
        } else {
            let waiting = lock(state).tracker.waiting();
            let tasks = r.some(&waiting);
            lock(state).tracker.recheck(monotonic_ns(), &tasks);
        }
        let next = (began + RECHECK_EVERY).min(next_full);
        std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
    }
}

/// This thread's CPU time (a scan's cost without the wait for a CPU).
fn thread_cpu() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}

/// Reads /proc with one buffer (no allocation per thread but the paths).
struct ProcReader {
    proc_: PathBuf,
    buf: Vec<u8>,
}

impl ProcReader {
    fn new(root: &Path) -> ProcReader {
        ProcReader {
            proc_: root.join("proc"),
            buf: Vec::with_capacity(1024),
        }
    }

    /// Every thread of every process.
    fn full(&mut self) -> Vec<TaskScan> {
        let mut out = Vec::new();
        for pid in numeric_dirs(&self.proc_) {
            let task_dir = self.proc_.join(pid.to_string()).join("task");
            for tid in numeric_dirs(&task_dir) {
                if let Some(t) = self.task(pid, tid) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// The threads listed (tid, tgid) that still exist.
    fn some(&mut self, list: &[(u32, u32)]) -> Vec<TaskScan> {
        list.iter()
            .filter_map(|&(tid, pid)| self.task(pid, tid))
            .collect()
    }

    fn task(&mut self, pid: u32, tid: u32) -> Option<TaskScan> {
        let base = format!("{pid}/task/{tid}");
        let stat = {
            let text = self.read(&format!("{base}/stat"))?;
            parse_task_stat(text, "stat").ok()?
        };
        let run_ns = if stat.runnable() {
            let text = self.read(&format!("{base}/schedstat"))?;
            Some(parse_schedstat(text, "schedstat").ok()?.run_ns)
        } else {
            None
        };
        Some(TaskScan {
            tid,
            tgid: pid,
            stat,
            run_ns,
        })
    }

    /// A file under /proc; None when the thread is gone.
    fn read(&mut self, rel: &str) -> Option<&str> {
        self.buf.clear();
        let mut f = std::fs::File::open(self.proc_.join(rel)).ok()?;
        f.read_to_end(&mut self.buf).ok()?;
        std::str::from_utf8(&self.buf).ok()
    }
}

fn numeric_dirs(dir: &Path) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn read_text(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

/// The thread's cgroup: the v2 path, else the cpu controller's.
fn cgroup(root: &Path, pid: u32, tid: u32) -> Option<String> {
    let text = read_text(root, &format!("proc/{pid}/task/{tid}/cgroup"))?;
    let cgs = parse_cgroup(&text, "cgroup").ok()?;
    cgs.iter()
        .find(|c| c.hierarchy == 0 && c.controllers.is_empty())
        .or_else(|| {
            cgs.iter()
                .find(|c| c.controllers.iter().any(|x| x == "cpu"))
        })
        .map(|c| c.path.clone())
}

/// The run and run-queue wait of this process's threads so far, ns
/// (schedstat of the live ones, and of those that ended as they ended).
pub fn own_times(root: &Path) -> (u64, u64) {
    let pid = std::process::id();
    let dir = root.join(format!("proc/{pid}/task"));
    let (mut run, mut wait) = own_threads::ended();
    for tid in numeric_dirs(&dir) {
        let Some(text) = read_text(root, &format!("proc/{pid}/task/{tid}/schedstat")) else {
            continue;
        };
        if let Ok(s) = parse_schedstat(&text, "schedstat") {
            run += s.run_ns;
            wait += s.wait_ns;
        }
    }
    (run, wait)
}

/// USER_HZ, the unit of stat's utime and stime (read here rather than from
/// `capture`, which uses this module: no module cycle).
fn ticks_per_s() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |v| v as f64)
}
