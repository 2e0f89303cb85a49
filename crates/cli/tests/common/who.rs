//! Helpers of the who-stole-it tests (host_who.rs, host_who_collector.rs):
//! host JSON runs, busy loops of a known name, load checks, pinning and
//! the schedstat sums the collector's charges are judged against.

use super::testenv::*;
use super::*;
use serde_json::Value;
use std::process::{Child, Command};

/// The tests of this file share one testenv run dir (per test process),
/// and each stops every VM of it when done: they take turns.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Other host work (CPUs) above which a run that judges steal levels is
/// rejected.
pub const MAX_OTHER_CPUS: f64 = 0.3;
/// ...and a run that only needs the test's loop to be the largest other
/// work (a whole-CPU loop beside builds that each take a fraction).
pub const MAX_OTHER_CPUS_NAMING: f64 = 1.0;
pub const TRIES: usize = 3;

/// A busy shell loop under a known name; killed on drop.
pub struct Hog {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Hog {
    pub fn start(name: &str, nice: i32, cpu: Option<&str>) -> Hog {
        let mut cmd = Command::new("nice");
        cmd.args(["-n", &nice.to_string()]);
        if let Some(c) = cpu {
            cmd.args(["taskset", "-c", c]);
        }
        // `nice` and `taskset` exec the loop: the child's pid is the loop's.
        Hog::launch(name, cmd)
    }

    /// As [`Hog::start`] at nice 0, in a session of its own (`setsid`), so
    /// its autogroup is its own: changing that group's nice touches no
    /// other process (the test's session holds the test harness).
    pub fn in_own_session(name: &str, cpu: &str) -> Hog {
        let mut cmd = Command::new("setsid");
        cmd.args(["taskset", "-c", cpu]);
        // The child is not a process-group leader, so setsid execs in place:
        // the child's pid is the loop's.
        Hog::launch(name, cmd)
    }

    /// `cmd` (which execs what follows it) runs a shell busy loop under
    /// `name` (a copy of /bin/sh).
    fn launch(name: &str, mut cmd: Command) -> Hog {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join(name);
        std::fs::copy("/bin/sh", &exe).unwrap();
        let child = cmd
            .arg(&exe)
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        Hog { child, _dir: dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `host --json` over `interval` (no KVM exit sample), with `extra` flags.
fn host_json_with(interval: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "host",
        "--json",
        "--interval",
        interval,
        "--exit-sample",
        "0",
    ];
    args.extend(extra);
    json(&run(&args))
}

pub fn host_json(interval: &str) -> Value {
    host_json_with(interval, &[])
}

/// `host --json`, also saving the snapshot in `dir`.
pub fn host_json_saved(interval: &str, dir: &std::path::Path) -> Value {
    let snap = dir.join("snap");
    host_json_with(interval, &["--save-snapshot", snap.to_str().unwrap()])
}

/// schedstat (run, wait, slices) of a thread as a side of the saved
/// snapshot recorded it: the interval the report itself measured.
pub fn snap_schedstat(dir: &std::path::Path, side: &str, pid: u64, tid: u64) -> (u64, u64, u64) {
    let p = dir.join(format!("snap/{side}/proc/{pid}/task/{tid}/schedstat"));
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

pub fn finding<'a>(r: &'a Value, id: &str) -> Option<&'a Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
}

/// Host work the test did not start and what it did, in CPUs.
pub fn other_load(r: &Value, ours: &[u32]) -> (f64, f64) {
    let hw = &r["host_work"];
    let mine: f64 = hw["top"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| {
            w["pid"]
                .as_u64()
                .is_some_and(|p| ours.contains(&(p as u32)))
        })
        .map(|w| w["run_cpus"].as_f64().unwrap())
        .sum();
    (hw["run_cpus"].as_f64().unwrap_or(0.0) - mine, mine)
}

/// Busy VMs on this machine that are not the test's (other sessions' VMs).
pub fn foreign_busy_vms(r: &Value, ours: &[u64]) -> Vec<String> {
    r["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| !ours.contains(&v["pid"].as_u64().unwrap()))
        .filter(|v| v["util_pct"].as_f64().unwrap_or(0.0) > 5.0)
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `host` until a run is not disturbed by other load (at most `limit`
/// CPUs of other work, and the test's own processes ran at least
/// `min_ours` CPUs); None when every try was (printed; a failure under CI).
pub fn quiet_run(
    interval: &str,
    our_pids: &[u32],
    our_vms: &[u64],
    limit: f64,
    min_ours: f64,
) -> Option<Value> {
    for i in 0..TRIES {
        let before = cpu_busy();
        let r = host_json(interval);
        let after = cpu_busy();
        let (listed, ours) = other_load(&r, our_pids);
        // Work that ended within the interval is in no schedstat: judge
        // by /proc/stat too (all busy CPU minus the VMs' and ours).
        let busy = (after.0 - before.0) / (after.1 - before.1) * ncpus();
        let vms: f64 = r["vms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                let n = v["vcpus"].as_array().unwrap().len() as f64;
                let emu: f64 = v["others"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o["util_pct"].as_f64())
                    .sum();
                (v["util_pct"].as_f64().unwrap_or(0.0) * n + emu) / 100.0
            })
            .sum();
        let load = listed.max(busy - vms - ours);
        let foreign = foreign_busy_vms(&r, our_vms);
        if load <= limit && ours >= min_ours && foreign.is_empty() {
            return Some(r);
        }
        eprintln!(
            "run {} rejected: other host work {load:.2} CPUs (limit {limit}), ours {ours:.2} (at least {min_ours}), other busy VMs {foreign:?}",
            i + 1
        );
    }
    super::skip(&format!(
        "every run was disturbed by other load ({TRIES} tries)"
    ));
    None
}

/// (busy, total) jiffies of all CPUs (/proc/stat "cpu" line).
pub fn cpu_busy() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    let v: Vec<f64> = s
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap())
        .collect();
    let total: f64 = v.iter().sum();
    (total - v[3] - v[4], total)
}

pub fn ncpus() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

pub fn autogroup_id(pid: u64) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap();
    s.split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches('/')
        .to_string()
}

/// Pins a VM's vCPU 0 to `vcpu_cpu` and every other thread of it to `rest`.
pub fn pin_vm(pid: u64, vcpu_cpu: &str, rest: &str) -> u64 {
    let tid = qmp_tids_by_pid(pid)[0];
    pin_thread(pid, tid, vcpu_cpu, rest);
    tid
}

/// One test's turn with real VMs (the tests of a file take turns, see
/// [`SERIAL`]): its VMs stop when it ends. None where QEMU is missing
/// (`require` printed why, or failed under CI).
pub struct QemuTurn {
    _vms: Vms,
    _serial: std::sync::MutexGuard<'static, ()>,
}

pub fn qemu_turn() -> Option<QemuTurn> {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return None;
    }
    let serial = serial();
    Some(QemuTurn {
        _vms: Vms,
        _serial: serial,
    })
}

/// A busy 1-vCPU VM started under `name`, its vCPU 0 pinned alone to CPU
/// 1 and its other threads to CPU 0: (pid, vCPU tid).
pub fn pinned_busy_vm(name: &str) -> (u64, u64) {
    let pid: u64 = testenv("start-vm.sh", &[name, "1", "--busy", "1"])
        .parse()
        .unwrap();
    (pid, pin_vm(pid, "1", "0"))
}

pub fn qmp_tids_by_pid(pid: u64) -> Vec<u64> {
    let run = run_dir();
    for e in std::fs::read_dir(&run).unwrap().flatten() {
        let p = e.path().join("qemu.pid");
        if std::fs::read_to_string(&p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            == Some(pid)
        {
            return qmp_tids(e.file_name().to_str().unwrap());
        }
    }
    panic!("VM pid {pid} not in {run}")
}

/// The collector ran (else the reason, failing under CI).
pub fn attributed(r: &Value) -> bool {
    let a = &r["attribution"];
    require(
        a["route"] != "none",
        &format!("scheduler-event attribution: {}", a["reason"]),
    )
}

pub fn vcpu(r: &Value, pid: u64, tid: u64) -> &Value {
    r["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["pid"].as_u64() == Some(pid))
        .and_then(|v| {
            v["vcpus"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["tid"].as_u64() == Some(tid))
        })
        .unwrap_or_else(|| panic!("vCPU {tid} of {pid} not in report"))
}

pub fn wait_by_share(c: &Value, kind: &str, name: &str) -> f64 {
    c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == kind && w["name"] == name)
        .map(|w| w["share"].as_f64().unwrap())
        .sum()
}

pub fn wait_by_seconds(c: &Value, kind: &str, name: &str) -> f64 {
    c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == kind && w["name"] == name)
        .map(|w| w["seconds"].as_f64().unwrap())
        .sum()
}

/// A thread's schedstat (run ns, wait ns, times run) at the two collector
/// readings, read on the outside of each (before the first, after the
/// second) and on the inside (after the first, before the second).
pub struct AtReadings {
    pub outside: ((u64, u64, u64), (u64, u64, u64)),
    pub inside: ((u64, u64, u64), (u64, u64, u64)),
}

/// wait_by adds up to the schedstat wait of the collector's interval,
/// which lies between the wait inside the two readings and the wait
/// outside them (a wait that ends while the collector is read is in one
/// only): for the BPF route exactly (its lengths are the kernel's
/// run_delay; 0.1 % + 50 µs for its fixed-point scaling), for tracefs
/// within 2 % + 1 ms (it applies events up to 2 ms before a read); and the
/// episode count stays within the times-run delta outside.
pub fn check_sums(c: &Value, r: &AtReadings, route: &Value) {
    let sum: f64 = c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["seconds"].as_f64().unwrap())
        .sum();
    let wait = |(b, a): ((u64, u64, u64), (u64, u64, u64))| (a.1 - b.1) as f64 / 1e9;
    let (lo, hi) = (wait(r.inside), wait(r.outside));
    let runs = r.outside.1 .2 - r.outside.0 .2;
    eprintln!(
        "wait_by {sum:.4} s vs schedstat wait {lo:.4}-{hi:.4} s (inside-outside the readings); \
         {} episodes vs {runs} runs",
        c["wait_episodes"]["count"],
    );
    let (rel, abs) = if route == "bpf" {
        (0.001, 50e-6)
    } else {
        (0.02, 0.001)
    };
    assert!(
        sum >= (1.0 - rel) * lo - abs && sum <= (1.0 + rel) * hi + abs,
        "{route} route: wait_by {sum} s vs schedstat wait {lo}-{hi} s"
    );
    let episodes = c["wait_episodes"]["count"].as_u64().unwrap();
    assert!(episodes <= runs, "{episodes} episodes vs {runs} runs");
}
