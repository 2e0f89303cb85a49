//! Processes and threads under /proc: names, command lines, cgroups, run
//! and wait time (schedstat), memory and swap. A process or thread that
//! exits while we read it is not an error: readers return `Ok(None)`.

use crate::error::{ReadError, Result};
use crate::Source;
use procfs_core::FromRead;
use serde::{Deserialize, Serialize};

/// Numeric entries of /proc (pids), ascending.
pub fn pids(src: &dyn Source) -> Result<Vec<u32>> {
    let mut v: Vec<u32> = src
        .list("/proc")?
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Thread ids of a process; None when it exited.
pub fn tids(src: &dyn Source, pid: u32) -> Result<Option<Vec<u32>>> {
    Ok(src.list(&format!("/proc/{pid}/task"))?.map(|names| {
        let mut v: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
        v.sort_unstable();
        v
    }))
}

pub fn comm(src: &dyn Source, pid: u32) -> Result<Option<String>> {
    vanished_ok(
        src.read_text(&format!("/proc/{pid}/comm"))
            .map(|o| o.map(|s| s.trim_end_matches('\n').to_string())),
    )
}

pub fn task_comm(src: &dyn Source, pid: u32, tid: u32) -> Result<Option<String>> {
    vanished_ok(
        src.read_text(&format!("/proc/{pid}/task/{tid}/comm"))
            .map(|o| o.map(|s| s.trim_end_matches('\n').to_string())),
    )
}

/// Command line split at NULs (empty for kernel threads).
pub fn cmdline(src: &dyn Source, pid: u32) -> Result<Option<Vec<String>>> {
    let r = src.read(&format!("/proc/{pid}/cmdline")).map(|o| {
        o.map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
    });
    vanished_ok(r)
}

/// Run and wait time of a task (CONFIG_SCHED_INFO): on a host, the wait of
/// a vCPU thread is exactly the steal its guest sees (record_steal_time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSchedstat {
    pub run_ns: u64,
    pub wait_ns: u64,
    pub slices: u64,
}

pub fn parse_schedstat(text: &str, path: &str) -> Result<TaskSchedstat> {
    let s = procfs_core::process::Schedstat::from_read(text.as_bytes())
        .map_err(|e| ReadError::parse(path, e))?;
    Ok(TaskSchedstat {
        run_ns: s.sum_exec_runtime,
        wait_ns: s.run_delay,
        slices: s.pcount,
    })
}

pub fn task_schedstat_path(pid: u32, tid: u32) -> String {
    format!("/proc/{pid}/task/{tid}/schedstat")
}

pub fn task_schedstat(src: &dyn Source, pid: u32, tid: u32) -> Result<Option<TaskSchedstat>> {
    read_schedstat(src, &task_schedstat_path(pid, tid))
}

/// A thread's schedstat by its id alone: /proc/TID answers for any thread
/// of any process (the scheduler-event collector knows only tids).
pub fn thread_schedstat(src: &dyn Source, tid: u32) -> Result<Option<TaskSchedstat>> {
    read_schedstat(src, &format!("/proc/{tid}/schedstat"))
}

fn read_schedstat(src: &dyn Source, path: &str) -> Result<Option<TaskSchedstat>> {
    match vanished_ok(src.read_text(path))? {
        None => Ok(None),
        Some(t) => parse_schedstat(&t, path).map(Some),
    }
}

/// One line of /proc/<pid>/cgroup: "hierarchy-id:controllers:path".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupMembership {
    pub hierarchy: u32,
    /// Empty for the v2 unified hierarchy.
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_cgroup(text: &str, path: &str) -> Result<Vec<CgroupMembership>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (Some(h), Some(c), Some(p)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ReadError::parse(
                path,
                format!("line {}: expected id:controllers:path", i + 1),
            ));
        };
        let hierarchy = h.parse().map_err(|_| {
            ReadError::parse(path, format!("line {}: bad hierarchy id {h:?}", i + 1))
        })?;
        out.push(CgroupMembership {
            hierarchy,
            controllers: c
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            path: p.to_string(),
        });
    }
    Ok(out)
}

pub fn task_cgroup(src: &dyn Source, pid: u32, tid: u32) -> Result<Option<Vec<CgroupMembership>>> {
    let path = format!("/proc/{pid}/task/{tid}/cgroup");
    match vanished_ok(src.read_text(&path))? {
        None => Ok(None),
        Some(t) => parse_cgroup(&t, &path).map(Some),
    }
}

/// Fields of /proc/<pid>/status we use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub cpus_allowed: Option<Vec<u32>>,
    pub mems_allowed: Option<Vec<u32>>,
    pub vm_rss_kb: Option<u64>,
    pub vm_swap_kb: Option<u64>,
}

/// The keys of a status file [`parse_status`] reads: a recorded status
/// keeps these lines only ([`keep_status_lines`]; a test checks that a
/// live status file parses the same either way).
pub const STATUS_KEYS: [&str; 4] = ["Cpus_allowed_list", "Mems_allowed_list", "VmRSS", "VmSwap"];

/// Whether `path` is a task's status file (/proc/PID/task/TID/status).
pub fn is_task_status(path: &str) -> bool {
    let mut parts = path.split('/');
    matches!(
        (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next()
        ),
        (
            Some(""),
            Some("proc"),
            Some(_),
            Some("task"),
            Some(_),
            Some("status"),
            None
        )
    )
}

/// A status file with only the lines [`parse_status`] reads: what a
/// capture keeps of it (about 1.4 KiB a thread otherwise; serve captures
/// every vCPU thread's twice an interval, 28 MiB at 10,000 threads).
pub fn keep_status_lines(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in raw.split(|&b| b == b'\n') {
        let key = line.split(|&b| b == b':').next().unwrap_or_default();
        if line.contains(&b':') && STATUS_KEYS.iter().any(|k| k.as_bytes() == key) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

pub fn parse_status(text: &str, path: &str) -> Result<TaskStatus> {
    let mut st = TaskStatus::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        let kb = || {
            v.trim_end_matches(" kB")
                .trim()
                .parse::<u64>()
                .map_err(|_| ReadError::parse(path, format!("{k}: {v:?} is not a number of kB")))
        };
        match k {
            "Cpus_allowed_list" => st.cpus_allowed = Some(crate::cpulist::parse(v, path)?),
            "Mems_allowed_list" => st.mems_allowed = Some(crate::cpulist::parse(v, path)?),
            "VmRSS" => st.vm_rss_kb = Some(kb()?),
            "VmSwap" => st.vm_swap_kb = Some(kb()?),
            _ => {}
        }
    }
    Ok(st)
}

pub fn task_status(src: &dyn Source, pid: u32, tid: u32) -> Result<Option<TaskStatus>> {
    let path = format!("/proc/{pid}/task/{tid}/status");
    match vanished_ok(src.read_text(&path))? {
        None => Ok(None),
        Some(t) => parse_status(&t, &path).map(Some),
    }
}

/// PF_KTHREAD in include/linux/sched.h.
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether a process is a kernel thread: the `flags` field (9th) of
/// /proc/<pid>/stat has PF_KTHREAD. None when it exited.
pub fn is_kthread(src: &dyn Source, pid: u32) -> Result<Option<bool>> {
    let path = format!("/proc/{pid}/stat");
    let Some(text) = vanished_ok(src.read_text(&path))? else {
        return Ok(None);
    };
    parse_stat_flags(&text, &path).map(|f| Some(f & PF_KTHREAD != 0))
}

/// The flags field of a stat line; the comm in parentheses may hold spaces
/// and parentheses, so fields are counted after the last ')'.
pub fn parse_stat_flags(text: &str, path: &str) -> Result<u64> {
    text.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| ReadError::parse(path, "no flags field after the comm"))
}

/// The CPU a task last ran on: the `processor` field (39th) of a stat
/// line, counted after the last ')' like [`parse_stat_flags`].
pub fn parse_stat_processor(text: &str, path: &str) -> Result<u32> {
    text.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(36))
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| ReadError::parse(path, "no processor field after the comm"))
}

/// What a starvation scan needs of a task's stat line (fs/proc/array.c,
/// do_task_stat): its state letter (`R` = TASK_RUNNING: on a CPU or queued
/// for one), its user+system time in clock ticks (fields 14 and 15) and
/// the CPU it is on or queued on (`processor`, field 39: task_cpu()).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStat {
    pub state: u8,
    pub ticks: u64,
    pub cpu: u32,
}

impl TaskStat {
    /// Running or queued to run.
    pub fn runnable(&self) -> bool {
        self.state == b'R'
    }
}

/// Parses a task's stat line into a [`TaskStat`] (fields counted after the
/// last ')', as the comm may hold both).
pub fn parse_task_stat(text: &str, path: &str) -> Result<TaskStat> {
    let bad = || ReadError::parse(path, "not a stat line (state, times, processor)");
    let (_, rest) = text.rsplit_once(')').ok_or_else(bad)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    let state = f.first().and_then(|s| s.bytes().next()).ok_or_else(bad)?;
    let ticks = num(11).zip(num(12)).map(|(u, s)| u + s).ok_or_else(bad)?;
    let cpu = num(36)
        .and_then(|c| u32::try_from(c).ok())
        .ok_or_else(bad)?;
    Ok(TaskStat { state, ticks, cpu })
}

/// The CPU a thread last ran on; None when it exited.
pub fn task_cpu(src: &dyn Source, pid: u32, tid: u32) -> Result<Option<u32>> {
    let path = format!("/proc/{pid}/task/{tid}/stat");
    match vanished_ok(src.read_text(&path))? {
        None => Ok(None),
        Some(t) => parse_stat_processor(&t, &path).map(Some),
    }
}

/// ESRCH/ENOENT from a task that exited between listing and reading.
fn vanished_ok<T>(r: Result<Option<T>>) -> Result<Option<T>> {
    match r {
        Err(ReadError::Io { source, .. }) if matches!(source.raw_os_error(), Some(3) | Some(2)) => {
            Ok(None)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_stat_of_a_real_line() {
        let line = "3025 (CPU 0/TCG) R 1 3021 3021 0 -1 4194368 3 0 0 0 59424 1 0 0 20 0 4 0 1180 1068 164 18446744073709551615 1 1 0 0 0 0 268444163 4096 17987 0 0 0 -1 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let s = parse_task_stat(line, "stat").unwrap();
        assert_eq!(
            s,
            TaskStat {
                state: b'R',
                ticks: 59425,
                cpu: 1
            }
        );
        assert!(s.runnable());
        assert!(parse_task_stat("12 (x) S 1", "p").is_err());
    }

    #[test]
    fn processor_of_a_stat_line_with_a_tricky_comm() {
        // Field 39 of a real line (comm with a space and a parenthesis).
        let line = "3025 (CPU 0/TCG) R 1 3021 3021 0 -1 4194368 3 0 0 0 59424 1 0 0 20 0 4 0 1180 1068 164 18446744073709551615 1 1 0 0 0 0 268444163 4096 17987 0 0 0 -1 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse_stat_processor(line, "p").unwrap(), 1);
        assert_eq!(parse_stat_processor("1 (a) b) R 2", "p").ok(), None);
        let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        assert!(parse_stat_processor(&own, "p").unwrap() < n.max(1024));
    }

    #[test]
    fn a_live_status_parses_the_same_from_the_lines_kept() {
        let path = format!("/proc/{0}/task/{0}/status", std::process::id());
        let full = std::fs::read(&path).unwrap();
        let kept = keep_status_lines(&full);
        assert!(
            kept.len() * 4 < full.len(),
            "{}",
            String::from_utf8_lossy(&kept)
        );
        let parse = |b: &[u8]| parse_status(&String::from_utf8_lossy(b), &path).unwrap();
        let st = parse(&full);
        // Every field set from a live file, so a key parse_status reads
        // and STATUS_KEYS lacks would show as a difference.
        assert!(st.cpus_allowed.is_some() && st.mems_allowed.is_some());
        assert!(st.vm_rss_kb.is_some() && st.vm_swap_kb.is_some());
        assert_eq!(parse(&kept), st);
        assert!(is_task_status(&path));
        for p in [
            "/proc/1/status",
            "/proc/1/task/1/stat",
            "/proc/1/task/1/status/x",
        ] {
            assert!(!is_task_status(p), "{p}");
        }
    }

    #[test]
    fn schedstat_and_cgroup_and_status() {
        let s = parse_schedstat("123 456 7\n", "p").unwrap();
        assert_eq!((s.run_ns, s.wait_ns, s.slices), (123, 456, 7));
        assert!(parse_schedstat("12 x\n", "p").is_err());
        let c = parse_cgroup("12:cpu,cpuacct:/machine.slice/a\n0::/x\n", "p").unwrap();
        assert_eq!(c[0].controllers, vec!["cpu", "cpuacct"]);
        assert!(c[1].controllers.is_empty());
        assert!(parse_cgroup("garbage\n", "p").is_err());
        let st = parse_status(
            "Name:\tx\nVmRSS:\t  1024 kB\nVmSwap:\t       0 kB\nCpus_allowed_list:\t0-1\n",
            "p",
        )
        .unwrap();
        assert_eq!(st.cpus_allowed, Some(vec![0, 1]));
        assert_eq!(st.vm_rss_kb, Some(1024));
    }

    #[test]
    fn a_thread_schedstat_by_tid_alone() {
        let mut fs = crate::MemFs::new("t");
        fs.files
            .insert("/proc/42/schedstat".into(), b"10 20 3\n".to_vec());
        let s = thread_schedstat(&fs, 42).unwrap().unwrap();
        assert_eq!((s.run_ns, s.wait_ns, s.slices), (10, 20, 3));
        assert_eq!(thread_schedstat(&fs, 43).unwrap(), None, "gone");
    }

    proptest::proptest! {
        #[test]
        fn never_panic(s in "\\PC{0,200}") {
            let _ = parse_schedstat(&s, "p");
            let _ = parse_cgroup(&s, "p");
            let _ = parse_status(&s, "p");
        }
    }
}
