//! Every thread of the host, read each 0.5 s by `place`'s close passes
//! and its watchdog: run and run-queue wait (/proc/PID/task/TID/schedstat)
//! and state (stat). Each thread's two files stay open and are read again
//! with pread, as the vCPU scan does (`host::scanner`): an open, two reads
//! and a close of each file, with the path walked each time, cost the
//! daemon 2.7x the read syscalls, the opens and closes besides, and a
//! quarter more CPU (BENCHMARKS.md, issue 27). /proc is listed on each
//! read, so a thread started since is read from then on. A kept file of a
//! thread that exited reads an error and is dropped, and the tid opened
//! again at once (a new thread under a reused tid is read, never through
//! the old task). Past [`MAX_KEPT`] threads, or a quarter of the open-file
//! limit (two descriptors each; the watchdog keeps a set of its own), the
//! rest are read by path.
//! Hand-written: no crate keeps per-thread /proc files open (`procfs`
//! opens each file per read).

use crate::host::scanner::raise_fd_limit;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;
use stealscope_readers::pread::PreadFile;

/// Threads whose files stay open (two descriptors each): 10,000 vCPU
/// threads and their VMMs' with room to spare, within common hard limits.
pub const MAX_KEPT: usize = 32_768;

/// One thread at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadNow {
    pub pid: u32,
    /// Run and run-queue wait so far, ns.
    pub run_ns: u64,
    pub wait_ns: u64,
    /// When its schedstat was read. Why per thread: a walk of every thread
    /// takes from milliseconds to, on a loaded host where the walker waits
    /// behind busy vCPUs, seconds; timed by one clock read per walk, a
    /// thread read late in one walk and early in the next showed 3.00 CPUs
    /// of work on 2 CPUs (and 1.02 the other way round).
    pub at: Instant,
    /// State R (running or runnable).
    pub runnable: bool,
    /// The CPU it last ran on.
    pub cpu: Option<u32>,
    /// SCHED_IDLE: it runs only when nothing else wants the CPU, so going
    /// without CPU is what it asked for.
    pub idle_policy: bool,
}

/// Every thread of the host now, by tid, but ours.
pub type Reading = BTreeMap<u32, ThreadNow>;

/// SCHED_IDLE in include/uapi/linux/sched.h.
const SCHED_IDLE: u32 = 5;

/// State R, the CPU it last ran on, and whether it is SCHED_IDLE, from a
/// stat line (proc_pid_stat(5)).
fn parse_stat(text: &str) -> Option<(bool, Option<u32>, bool)> {
    // Fields after the comm, which may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // state is field 3 (f[0]), processor field 39 (f[36]), policy field 41 (f[38]).
    let num = |i: usize| f.get(i).and_then(|c| c.parse::<u32>().ok());
    Some((
        f.first() == Some(&"R"),
        num(36),
        num(38) == Some(SCHED_IDLE),
    ))
}

/// The kept files of one thread.
struct Kept {
    pid: u32,
    schedstat: PreadFile,
    stat: PreadFile,
}

/// Reads every thread but ours, keeping their files open between reads.
pub struct Threads {
    kept: HashMap<u32, Kept>,
    /// Threads whose files may stay open.
    most: usize,
}

impl Default for Threads {
    fn default() -> Threads {
        Threads::new()
    }
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("kept", &self.kept.len())
            .finish()
    }
}

impl Threads {
    pub fn new() -> Threads {
        raise_fd_limit();
        Threads {
            kept: HashMap::new(),
            most: most_kept(),
        }
    }

    /// Every thread's schedstat and state now; threads that exit
    /// meanwhile are skipped.
    pub fn read(&mut self) -> Reading {
        let mut out = Reading::new();
        for (pid, tid) in all_threads() {
            if let Some(now) = self.read_one(pid, tid) {
                out.insert(tid, now);
            }
        }
        self.kept.retain(|tid, _| out.contains_key(tid));
        out
    }

    fn read_one(&mut self, pid: u32, tid: u32) -> Option<ThreadNow> {
        if self.kept.get(&tid).is_some_and(|k| k.pid != pid) {
            self.kept.remove(&tid);
        }
        let fresh = !self.kept.contains_key(&tid);
        if fresh && self.kept.len() < self.most {
            if let Some(k) = open(pid, tid) {
                self.kept.insert(tid, k);
            }
        }
        let Some(k) = self.kept.get_mut(&tid) else {
            return read_by_path(pid, tid);
        };
        let Some(times) = k.schedstat.read_text().ok().and_then(parse_schedstat) else {
            // Gone, or a new thread under a reused tid: that one is read
            // afresh (once: a file just opened that fails is gone).
            self.kept.remove(&tid);
            return if fresh { None } else { self.read_one(pid, tid) };
        };
        let at = Instant::now();
        Some(thread_now(pid, times, at, k.stat.read_text().ok()))
    }
}

/// A quarter of the open-file limit, at most [`MAX_KEPT`].
fn most_kept() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(s, _)| s);
    (soft / 4 / 2).min(MAX_KEPT as u64) as usize
}

/// (pid, tid) of every thread but ours, from listing /proc.
fn all_threads() -> Vec<(u32, u32)> {
    let own = std::process::id();
    let num = |e: std::fs::DirEntry| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok());
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for pid in procs.flatten().filter_map(num).filter(|&p| p != own) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        out.extend(tasks.flatten().filter_map(num).map(|tid| (pid, tid)));
    }
    out
}

fn open(pid: u32, tid: u32) -> Option<Kept> {
    let dir = format!("/proc/{pid}/task/{tid}");
    Some(Kept {
        pid,
        schedstat: PreadFile::open(Path::new("/"), &format!("{dir}/schedstat")).ok()?,
        stat: PreadFile::open(Path::new("/"), &format!("{dir}/stat")).ok()?,
    })
}

/// One thread read by path (open, read, close): past the cap of kept files.
fn read_by_path(pid: u32, tid: u32) -> Option<ThreadNow> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let times = parse_schedstat(&std::fs::read_to_string(format!("{dir}/schedstat")).ok()?)?;
    let at = Instant::now();
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok();
    Some(thread_now(pid, times, at, stat.as_deref()))
}

/// A thread from its schedstat times (read at `at`) and its stat line; a
/// stat that could not be read leaves it not runnable, on no known CPU.
fn thread_now(
    pid: u32,
    (run_ns, wait_ns): (u64, u64),
    at: Instant,
    stat: Option<&str>,
) -> ThreadNow {
    let (runnable, cpu, idle_policy) = stat.and_then(parse_stat).unwrap_or((false, None, false));
    ThreadNow {
        pid,
        run_ns,
        wait_ns,
        at,
        runnable,
        cpu,
        idle_policy,
    }
}

/// Run and run-queue wait, ns, from a schedstat line.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_state_and_cpu_after_a_comm_with_parentheses() {
        let mut line = "42 (a) b) R 1 42 42 0 -1 4194304".to_string();
        // Fields 10 to 38, then the processor (field 39).
        for _ in 10..=38 {
            line.push_str(" 0");
        }
        line.push_str(" 1 0 5\n");
        assert_eq!(parse_stat(&line), Some((true, Some(1), true)));
        assert_eq!(parse_stat("1 (x) S 0").map(|s| s.0), Some(false));
    }

    #[test]
    fn a_reading_sees_this_test_threads_but_not_our_own_process() {
        let r = Threads::new().read();
        assert!(!r.values().any(|t| t.pid == std::process::id()));
        // pid 1 is always there.
        assert!(r.values().any(|t| t.pid == 1));
    }

    #[test]
    fn files_stay_open_across_reads_and_an_exited_thread_lets_go_of_its_own() {
        use std::os::fd::AsRawFd;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut t = Threads::new();
        // This reader's descriptors on the child's files.
        let fds = |t: &Threads| {
            t.kept
                .get(&pid)
                .map(|k| (k.schedstat.as_raw_fd(), k.stat.as_raw_fd()))
        };
        let first = t.read();
        assert!(first.contains_key(&pid), "the child is read");
        let (ss, st) = fds(&t).expect("its files kept open");
        let link = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(
            link(ss),
            Path::new(&format!("/proc/{pid}/task/{pid}/schedstat"))
        );
        assert_eq!(link(st), Path::new(&format!("/proc/{pid}/task/{pid}/stat")));
        let again = t.read();
        assert_eq!(fds(&t), Some((ss, st)), "read again through the same files");
        assert!(again[&pid].run_ns >= first[&pid].run_ns);
        child.kill().unwrap();
        child.wait().unwrap();
        let after = t.read();
        assert!(!after.contains_key(&pid));
        assert_eq!(fds(&t), None, "its files are let go");
    }
}
