//! What the probe tests check the system with: one probe test at a time
//! across processes, PM QoS, real-time probe threads and tracing instances
//! left behind.

use std::sync::{Mutex, MutexGuard};

/// The probes use every CPU they are given: one test at a time, also across
/// processes (another checkout's `cargo test` running the same tests).
pub struct Serial {
    _file: std::fs::File,
    _guard: MutexGuard<'static, ()>,
}

pub fn serial() -> Serial {
    use std::os::fd::AsRawFd;
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::temp_dir().join("stealscope-probe-tests.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor we own; released when the file closes.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
    Serial {
        _file: file,
        _guard: guard,
    }
}

/// PM QoS value when nobody holds a request (PM_QOS_DEFAULT_VALUE).
pub const PM_QOS_DEFAULT: i32 = 2_000_000_000;

pub fn probe_cpu() -> u32 {
    // The last CPU: CPU 0 takes most housekeeping.
    (std::thread::available_parallelism().map_or(1, |n| n.get()) - 1) as u32
}

pub fn pm_qos() -> Option<i32> {
    let b = std::fs::read("/dev/cpu_dma_latency").ok()?;
    Some(i32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

/// Threads of `pid` (or of every process when None) with SCHED_FIFO/RR
/// whose name starts with "ss-": the probes' threads.
pub fn rt_probe_threads(pid: Option<u32>) -> Vec<String> {
    let pids: Vec<String> = match pid {
        Some(p) => vec![p.to_string()],
        None => std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .collect(),
    };
    let mut out = Vec::new();
    for p in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            let Some((head, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let comm = head.split_once('(').map_or("", |x| x.1);
            // Field 41 (policy); `rest` starts at field 3.
            let policy: u32 = rest
                .split_whitespace()
                .nth(38)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if comm.starts_with("ss-") && (policy == 1 || policy == 2) {
                out.push(format!("{p}/{comm}"));
            }
        }
    }
    out
}

pub fn trace_instances() -> Vec<String> {
    // Where the probe finds tracefs: its own mount point, or debugfs'
    // automount when only that is there (a machine where something
    // unmounted /sys/kernel/tracing: the probe then used the other).
    [
        "/sys/kernel/tracing/instances",
        "/sys/kernel/debug/tracing/instances",
    ]
    .iter()
    .flat_map(|dir| {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("stealscope-probe-"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    })
    .collect::<std::collections::BTreeSet<_>>()
    .into_iter()
    .collect()
}

pub fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/kernel/tracing"))
}
