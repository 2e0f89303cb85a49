//! Real QEMU VMs from testenv/ for the host tests: the run dir, the scripts,
//! QMP through testenv/qmp.py (an independent client), and schedstat.

use super::repo;
use serde_json::Value;
use std::process::Command;

/// $STEALSCOPE_TESTENV_RUN when set, else a run dir of this test process:
/// two checkouts (or a CI run beside a developer's) testing at once must
/// not start, stop or lock each other's VMs.
pub fn run_dir() -> String {
    std::env::var("STEALSCOPE_TESTENV_RUN")
        .unwrap_or_else(|_| format!("/run/stealscope-test-{}", std::process::id()))
}

pub fn testenv(script: &str, args: &[&str]) -> String {
    let out = Command::new(repo().join("testenv").join(script))
        .args(args)
        .env("STEALSCOPE_TESTENV_RUN", run_dir())
        .output()
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Stops every VM of the run dir even when an assertion fails.
pub struct Vms;
impl Drop for Vms {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("testenv/stop-all.sh"))
            .env("STEALSCOPE_TESTENV_RUN", run_dir())
            .output();
        if std::env::var_os("STEALSCOPE_TESTENV_RUN").is_none() {
            let _ = std::fs::remove_dir_all(run_dir());
        }
    }
}

/// `return` of one QMP command (VM name in the run dir, or a socket path).
pub fn qmp(vm: &str, cmd: &str, args: Option<&str>) -> Value {
    let mut a = vec![vm, cmd];
    a.extend(args);
    let v: Value = serde_json::from_str(&testenv("qmp.py", &a)).unwrap();
    v["return"].clone()
}

/// (cpu-index, thread-id) of each vCPU in a query-cpus-fast `return`.
pub fn vcpu_threads(ret: &Value) -> Vec<(u64, u64)> {
    ret.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["cpu-index"].as_u64().unwrap(),
                c["thread-id"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// vCPU thread ids QEMU reports, sorted.
pub fn qmp_tids(vm: &str) -> Vec<u64> {
    let mut t: Vec<u64> = vcpu_threads(&qmp(vm, "query-cpus-fast", None))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    t.sort_unstable();
    t
}

/// schedstat (run, wait, times run) of a thread, ns; zeros once it is gone.
pub fn schedstat(pid: u64, tid: u64) -> (u64, u64, u64) {
    let s =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap_or_default();
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let f = |i: usize| v.get(i).copied().unwrap_or(0);
    (f(0), f(1), f(2))
}

/// Run time of every thread of a process, ns (its tasks' schedstat).
pub fn process_run_ns(pid: u64) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| t.file_name().to_str()?.parse::<u64>().ok())
                .map(|tid| schedstat(pid, tid).0)
                .sum()
        })
        .unwrap_or(0)
}

/// Run-queue wait of a thread, ns (0 once it is gone).
pub fn wait_ns(pid: u64, tid: u64) -> u64 {
    schedstat(pid, tid).1
}

/// Pins every thread of `pid` to CPUs `rest`, then thread `tid` alone to
/// `cpu` (taskset lists).
pub fn pin_thread(pid: u64, tid: u64, cpu: &str, rest: &str) {
    let (pid, tid) = (pid.to_string(), tid.to_string());
    for args in [
        vec!["-a", "-p", "-c", rest, &pid],
        vec!["-p", "-c", cpu, &tid],
    ] {
        let st = Command::new("taskset").args(&args).output().unwrap();
        assert!(st.status.success(), "taskset {args:?}");
    }
}

/// CLOCK_BOOTTIME, the clock of /proc/uptime, s.
pub fn boottime() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
}

/// /proc/uptime as a snapshot side recorded it.
pub fn snapshot_uptime(snap: &std::path::Path, side: &str) -> f64 {
    std::fs::read_to_string(snap.join(side).join("proc/uptime"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn have_qemu() -> bool {
    super::is_root()
        && repo().join("testenv/start-vm.sh").exists()
        && Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_ok()
}

/// A VM's vCPU thread ids as a host report lists them, sorted.
pub fn report_vcpu_tids(vm: &Value) -> Vec<u64> {
    let mut t: Vec<u64> = vm["vcpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tid"].as_u64().unwrap())
        .collect();
    t.sort_unstable();
    t
}
