//! Who stole it, against real QEMU (TCG) VMs from testenv/ and real host
//! busy loops: the two cases of issue 17 (a host shell loop beside a busy
//! 2-vCPU VM; a 2-vCPU and a 1-vCPU VM each in its own autogroup) get the
//! right verdict and fix without a collector, and with the scheduler-event
//! collector the culprit of a pinned vCPU's wait is named (a host loop,
//! another VM's vCPU, both at once at different nice values) against the
//! culprits' own schedstat run times.
//!
//! Timing runs share this machine with other work: each run checks that
//! the other host work stayed small (the report's own host_work, minus what
//! the test started) and retries a few times before giving up; a run
//! rejected for load is printed.

mod common;
use common::testenv::*;
use common::*;
use serde_json::Value;
use std::process::{Child, Command};

/// The tests of this file share one testenv run dir (per test process),
/// and each stops every VM of it when done: they take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Other host work (CPUs) above which a run that judges steal levels is
/// rejected.
const MAX_OTHER_CPUS: f64 = 0.3;
/// ...and a run that only needs the test's loop to be the largest other
/// work (a whole-CPU loop beside builds that each take a fraction).
const MAX_OTHER_CPUS_NAMING: f64 = 1.0;
const TRIES: usize = 3;

/// A busy shell loop under a known name; killed on drop.
struct Hog {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Hog {
    fn start(name: &str, nice: i32, cpu: Option<&str>) -> Hog {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join(name);
        std::fs::copy("/bin/sh", &exe).unwrap();
        let mut cmd = Command::new("nice");
        cmd.args(["-n", &nice.to_string()]);
        if let Some(c) = cpu {
            cmd.args(["taskset", "-c", c]);
        }
        let child = cmd
            .arg(&exe)
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        // `nice` and `taskset` exec the loop: the child's pid is the loop's.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Hog { child, _dir: dir }
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn host_json(interval: &str) -> Value {
    let out = run(&[
        "host",
        "--json",
        "--interval",
        interval,
        "--exit-sample",
        "0",
    ]);
    assert_ok(&out);
    json(&out)
}

/// `host --json`, also saving the snapshot in `dir`.
fn host_json_saved(interval: &str, dir: &std::path::Path) -> Value {
    let snap = dir.join("snap");
    let out = run(&[
        "host",
        "--json",
        "--interval",
        interval,
        "--exit-sample",
        "0",
        "--save-snapshot",
        snap.to_str().unwrap(),
    ]);
    assert_ok(&out);
    json(&out)
}

/// schedstat (run, wait, slices) of a thread as a side of the saved
/// snapshot recorded it: the interval the report itself measured.
fn snap_schedstat(dir: &std::path::Path, side: &str, pid: u64, tid: u64) -> (u64, u64, u64) {
    let p = dir.join(format!("snap/{side}/proc/{pid}/task/{tid}/schedstat"));
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

fn finding<'a>(r: &'a Value, id: &str) -> Option<&'a Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
}

/// Host work the test did not start and what it did, in CPUs.
fn other_load(r: &Value, ours: &[u32]) -> (f64, f64) {
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
fn foreign_busy_vms(r: &Value, ours: &[u64]) -> Vec<String> {
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
fn quiet_run(
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
    assert!(
        !in_ci(),
        "every run was disturbed by other load ({TRIES} tries)"
    );
    None
}

/// (busy, total) jiffies of all CPUs (/proc/stat "cpu" line).
fn cpu_busy() -> (f64, f64) {
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

fn ncpus() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

fn autogroup_id(pid: u64) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap();
    s.split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches('/')
        .to_string()
}

/// Issue 17, second case: VMs started with -daemonize are each in their own
/// autogroup; weights per vCPU then differ 2x and the fix is one shared group.
#[test]
fn autogroup_vms_get_cgroup_weight_unfair_with_place_apply() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled");
    if !require(
        enabled.as_deref().map(str::trim).ok() == Some("1"),
        "autogroups enabled (kernel.sched_autogroup_enabled=1)",
    ) {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let a: u64 = testenv("start-vm.sh", &["agA", "2", "--busy", "2"])
        .parse()
        .unwrap();
    let b: u64 = testenv("start-vm.sh", &["agB", "1", "--busy", "1"])
        .parse()
        .unwrap();
    // Both VMs on the same two CPUs, as on the 2-CPU machine.
    for pid in [a, b] {
        let st = Command::new("taskset")
            .args(["-a", "-p", "-c", "0-1", &pid.to_string()])
            .output()
            .unwrap();
        assert!(st.status.success());
    }
    let (ga, gb) = (autogroup_id(a), autogroup_id(b));
    assert_ne!(ga, gb, "each -daemonize is its own session");
    let r = host_json("4s");
    assert_valid_host(&r);
    let f = finding(&r, "host.cgroup-weight-unfair")
        .unwrap_or_else(|| panic!("no host.cgroup-weight-unfair: {}", r["findings"]));
    let groups = f["evidence"]["groups"].as_array().unwrap();
    for (name, g, n) in [("agA", &ga, 2), ("agB", &gb, 1)] {
        let e = groups
            .iter()
            .find(|x| x["vm"] == name)
            .unwrap_or_else(|| panic!("{name} not in {groups:?}"));
        assert_eq!(&e["group"], g, "{name}: /proc/<pid>/autogroup says {g}");
        assert_eq!(e["autogroup"], true);
        assert_eq!(e["vcpus"], n);
    }
    assert!(
        f["remedy"]
            .as_str()
            .unwrap()
            .contains("stealscope place apply"),
        "{f}"
    );
    assert!(f["title"].as_str().unwrap().contains("autogroups"), "{f}");
    // The measured steal is in the evidence, next to the fair share.
    let measured = f["evidence"]["measured"].as_array().unwrap();
    let steal = |name: &str| {
        measured.iter().find(|m| m["vm"] == name).unwrap()["steal_pct"]
            .as_f64()
            .unwrap()
    };
    eprintln!(
        "autogroups: agA steal {}%, agB {}%",
        steal("agA"),
        steal("agB")
    );
    // On a quiet 2-CPU machine the 2-vCPU VM waits more (50% vs 2% in the
    // issue; where the group weights land per CPU decides how much, so only
    // the direction with a margin is asserted); judged only when nothing
    // else disturbed the run.
    if let Some(r) = quiet_run("4s", &[], &[a, b], MAX_OTHER_CPUS, 0.0) {
        let vs = |name: &str, pid: u64| {
            r["vms"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == name && v["pid"].as_u64() == Some(pid))
                .unwrap()["steal_pct"]
                .as_f64()
                .unwrap()
        };
        let (sa, sb) = (vs("agA", a), vs("agB", b));
        eprintln!("quiet run: agA steal {sa:.1}%, agB {sb:.1}%");
        if std::thread::available_parallelism().map_or(0, |n| n.get()) == 2 {
            assert!(
                sa > sb + 5.0,
                "agA {sa} vs agB {sb}: per-VM groups are unfair here"
            );
        }
    }
}

fn assert_valid_host(r: &Value) {
    assert_eq!(r["schema"], "stealscope/host/1");
    assert!(
        r["attribution"]["route"].is_string(),
        "{}",
        r["attribution"]
    );
}

/// Issue 17, first case: a busy 2-vCPU VM and a host shell loop on two CPUs.
/// The VMs alone fit; the verdict names the loop and the fix is about it.
#[test]
fn host_loop_beside_a_busy_vm_is_named_not_oversubscription() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["hlA", "2", "--busy", "2"])
        .parse()
        .unwrap();
    let st = Command::new("taskset")
        .args(["-a", "-p", "-c", "0-1", &pid.to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
    let hog = Hog::start("whohog", 0, Some("0-1"));
    let Some(r) = quiet_run("4s", &[hog.pid()], &[pid], MAX_OTHER_CPUS_NAMING, 0.5) else {
        return;
    };
    let busy = finding(&r, "host.steal.busy")
        .unwrap_or_else(|| panic!("no host.steal.busy: {}", r["findings"]));
    let title = busy["title"].as_str().unwrap();
    assert!(title.contains("the VMs alone fit"), "{title}");
    assert!(
        title.contains(&format!("whohog (pid {})", hog.pid())),
        "{title}"
    );
    let remedy = busy["remedy"].as_str().unwrap();
    assert!(!remedy.contains("Only moving VMs"), "{remedy}");
    let nn = finding(&r, "host.noisy-neighbor")
        .unwrap_or_else(|| panic!("no host.noisy-neighbor: {}", r["findings"]));
    eprintln!("noisy-neighbor culprit: {}", nn["evidence"]["culprit"]);
    assert_eq!(nn["evidence"]["culprit"]["name"], "whohog", "{nn}");
    assert_eq!(nn["evidence"]["culprit"]["pid"], hog.pid(), "{nn}");
    assert!(nn["remedy"]
        .as_str()
        .unwrap()
        .contains(&format!("renice -n 10 -p {}", hog.pid())));
    // The loop's run time in the report against its own schedstat is the
    // whole-CPU share a shell loop takes: at least a third of a CPU here.
    let w = r["host_work"]["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["pid"] == hog.pid())
        .unwrap();
    assert!(w["run_cpus"].as_f64().unwrap() > 0.33, "{w}");
}

// ---- with the scheduler-event collector ----------------------------------

/// Pins a VM's vCPU 0 to `vcpu_cpu` and every other thread of it to `rest`.
fn pin_vm(pid: u64, vcpu_cpu: &str, rest: &str) -> u64 {
    let tids = qmp_tids_by_pid(pid);
    let st = Command::new("taskset")
        .args(["-a", "-p", "-c", rest, &pid.to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
    let st = Command::new("taskset")
        .args(["-p", "-c", vcpu_cpu, &tids[0].to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
    tids[0]
}

fn qmp_tids_by_pid(pid: u64) -> Vec<u64> {
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
fn attributed(r: &Value) -> bool {
    let a = &r["attribution"];
    require(
        a["route"] != "none",
        &format!("scheduler-event attribution: {}", a["reason"]),
    )
}

fn vcpu(r: &Value, pid: u64, tid: u64) -> &Value {
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

fn wait_by_share(c: &Value, kind: &str, name: &str) -> f64 {
    c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == kind && w["name"] == name)
        .map(|w| w["share"].as_f64().unwrap())
        .sum()
}

fn wait_by_seconds(c: &Value, kind: &str, name: &str) -> f64 {
    c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == kind && w["name"] == name)
        .map(|w| w["seconds"].as_f64().unwrap())
        .sum()
}

/// wait_by adds up to the schedstat wait of the same interval (read right
/// after each collector reading) within 2% (+1 ms: the collector applies
/// events up to 2 ms before a read), and the episode count stays within
/// the times-run delta.
fn check_sums(c: &Value, before: (u64, u64, u64), after: (u64, u64, u64)) {
    let sum: f64 = c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["seconds"].as_f64().unwrap())
        .sum();
    let wait = (after.1 - before.1) as f64 / 1e9;
    eprintln!(
        "wait_by {sum:.4} s vs schedstat wait {wait:.4} s; {} episodes vs {} runs",
        c["wait_episodes"]["count"],
        after.2 - before.2
    );
    assert!(
        (sum - wait).abs() <= 0.02 * wait + 0.001,
        "wait_by {sum} s vs schedstat wait {wait} s"
    );
    let episodes = c["wait_episodes"]["count"].as_u64().unwrap();
    assert!(
        episodes <= after.2 - before.2,
        "{episodes} episodes vs {} runs",
        after.2 - before.2
    );
}

/// Without a collector (BPF refused, no tracefs, or not built) the report
/// still has every VM from /proc and says why in one note; with one, no
/// such note.
#[test]
fn attribution_status_is_said_once() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["anV", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let r = host_json("2s");
    assert!(r["vms"].as_array().unwrap().iter().any(|v| v["pid"] == pid));
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.starts_with("attribution: none"))
        .collect();
    let a = &r["attribution"];
    if a["route"] == "none" {
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains(a["reason"].as_str().unwrap()),
            "{notes:?} vs {a}"
        );
        let out = run(&["host", "--interval", "1s", "--exit-sample", "0"]);
        assert_ok(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Who stole it: estimated from run times"),
            "{text}"
        );
    } else {
        assert!(notes.is_empty(), "{notes:?}");
        assert!(a["events"].as_u64().unwrap() > 0, "{a}");
    }
}

/// One `host` run with the collector, and its snapshot: the schedstat of
/// the threads judged comes from the sides the report itself measured.
struct Measured {
    r: Value,
    dir: tempfile::TempDir,
    wall_ns: f64,
}

impl Measured {
    fn take(interval: &str) -> Measured {
        let dir = tempfile::tempdir().unwrap();
        let r = host_json_saved(interval, dir.path());
        let snap = dir.path().join("snap");
        let wall_ns = (snapshot_uptime(&snap, "t1") - snapshot_uptime(&snap, "t0")) * 1e9;
        Measured { r, dir, wall_ns }
    }
    /// schedstat (run, wait, times run) of a thread at t0 and t1.
    fn sides(&self, pid: u64, tid: u64) -> ((u64, u64, u64), (u64, u64, u64)) {
        (
            snap_schedstat(self.dir.path(), "t0", pid, tid),
            snap_schedstat(self.dir.path(), "t1", pid, tid),
        )
    }
    /// schedstat of a watched thread at the two collector readings (the
    /// hook reads it right after each): exactly the attributed interval.
    fn at_readings(&self, tid: u64) -> ((u64, u64, u64), (u64, u64, u64)) {
        let side = |side: &str| {
            let p = self
                .dir
                .path()
                .join(format!("snap/{side}/stealscope/sched.json"));
            let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            let t = v["threads"]
                .as_array()
                .and_then(|ts| ts.iter().find(|t| t["tid"] == tid))
                .unwrap_or_else(|| panic!("{tid} not in {}", p.display()));
            let s = &t["schedstat"];
            let n = |i: usize| s[i].as_u64().unwrap_or_else(|| panic!("schedstat in {t}"));
            (n(0), n(1), n(2))
        };
        (side("t0"), side("t1"))
    }
    /// Run and wait of a thread over the interval, ns.
    fn run_wait(&self, pid: u64, tid: u64) -> (f64, f64) {
        let (a, b) = self.sides(pid, tid);
        ((b.0 - a.0) as f64, (b.1 - a.1) as f64)
    }
}

/// What a run is good for.
enum Verdict {
    /// Not a test of the claim (printed, retried).
    Reject(String),
    /// Valid, but the claim's premise did not hold (other work shared the
    /// CPU): judged against schedstat instead if no better run comes.
    Approximate(String),
    /// Valid and the premise held.
    Exact,
}

/// Validity of a collector run around a pinned victim vCPU that is busy
/// (runnable throughout, so whatever ran on its CPU it waited for) and
/// culprits pinned to that CPU: no events lost, the victim runnable >= 90%
/// of the interval and waiting >= 20%, each culprit running >= 5%.
fn valid(m: &Measured, victim: (u64, u64), culprits: &[(&str, u64, u64)]) -> Option<String> {
    let lost = m.r["attribution"]["lost_events"].as_u64().unwrap_or(0);
    if lost > 0 {
        return Some(format!("the collector lost {lost} events"));
    }
    let (run, wait) = m.run_wait(victim.0, victim.1);
    if run + wait < 0.9 * m.wall_ns {
        return Some(format!(
            "the victim vCPU was runnable only {:.0}% of the interval",
            100.0 * (run + wait) / m.wall_ns
        ));
    }
    if wait < 0.2 * m.wall_ns {
        return Some(format!(
            "the victim waited only {:.0}%",
            100.0 * wait / m.wall_ns
        ));
    }
    for (name, pid, tid) in culprits {
        let (crun, _) = m.run_wait(*pid, *tid);
        if crun < 0.05 * m.wall_ns {
            return Some(format!(
                "{name} ran only {:.0}% of the interval",
                100.0 * crun / m.wall_ns
            ));
        }
    }
    None
}

/// Up to TRIES collector runs until one is Exact; else the last
/// Approximate one (printed why); None when every run was rejected (a
/// failure under CI) or the collector is unavailable (likewise).
fn collector_run(interval: &str, judge: impl Fn(&Measured) -> Verdict) -> Option<Measured> {
    let mut fallback = None;
    for i in 0..TRIES + 1 {
        let m = Measured::take(interval);
        if !attributed(&m.r) {
            return None;
        }
        match judge(&m) {
            Verdict::Exact => return Some(m),
            Verdict::Reject(why) => eprintln!("run {} rejected: {why}", i + 1),
            Verdict::Approximate(why) => {
                eprintln!("run {} valid but not exact: {why}", i + 1);
                fallback = Some((m, why));
            }
        }
    }
    match fallback {
        Some((m, why)) => {
            eprintln!(
                "no exact run in {} tries; judged against schedstat: {why}",
                TRIES + 1
            );
            Some(m)
        }
        None => {
            assert!(!in_ci(), "every collector run was rejected");
            None
        }
    }
}

/// A culprit pinned to the victim's CPU: the share of the victim's wait it
/// really took is its run time over the victim's wait (the victim waits
/// whenever it runs), at most 1.
fn true_share(m: &Measured, victim: (u64, u64), culprit: (u64, u64)) -> f64 {
    let (_, wait) = m.run_wait(victim.0, victim.1);
    let (run, _) = m.run_wait(culprit.0, culprit.1);
    (run / wait).min(1.0)
}

/// The judge of (a) and (b): Exact when the culprit really took >= 95%.
fn one_culprit(m: &Measured, victim: (u64, u64), culprit: (&str, u64, u64)) -> Verdict {
    if let Some(why) = valid(m, victim, &[culprit]) {
        return Verdict::Reject(why);
    }
    let t = true_share(m, victim, (culprit.1, culprit.2));
    if t >= 0.95 {
        Verdict::Exact
    } else {
        let c = vcpu(&m.r, victim.0, victim.1);
        let others: Vec<String> = c["wait_by"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["name"] != culprit.0)
            .take(3)
            .map(|w| format!("{} {:.0}%", w["name"], 100.0 * w["share"].as_f64().unwrap()))
            .collect();
        Verdict::Approximate(format!(
            "{} ran only {:.1}% of the victim's wait (schedstat): other work shared the CPU ({})",
            culprit.0,
            100.0 * t,
            others.join(", ")
        ))
    }
}

/// The charged share against the true one: >= 95% when the culprit really
/// took >= 95%, and within 3 pp of the truth always.
fn assert_share(m: &Measured, victim: (u64, u64), culprit: (u64, u64), kind: &str, name: &str) {
    let c = vcpu(&m.r, victim.0, victim.1);
    let share = wait_by_share(c, kind, name);
    let truth = true_share(m, victim, culprit);
    eprintln!("{name}: charged {share:.3} of the wait, schedstat says {truth:.3}");
    if truth >= 0.95 {
        assert!(
            share >= 0.95,
            "{name} {share} of the wait: {}",
            c["wait_by"]
        );
    }
    assert!(
        (share - truth).abs() <= 0.03,
        "{name} charged {share:.3} vs {truth:.3} from schedstat: {}",
        c["wait_by"]
    );
    let (before, after) = m.at_readings(victim.1);
    check_sums(c, before, after);
}

/// (a) a host busy loop on the CPU of a pinned 1-vCPU VM: >= 95% its.
#[test]
fn collector_names_a_host_loop_on_a_pinned_vcpu() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["caV", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let tid = pin_vm(pid, "1", "0");
    let hog = Hog::start("whohog", 0, Some("1"));
    let hp = hog.pid() as u64;
    let Some(m) = collector_run("4s", |m| one_culprit(m, (pid, tid), ("whohog", hp, hp))) else {
        return;
    };
    assert_share(&m, (pid, tid), (hp, hp), "host-process", "whohog");
    drop(hog);
}

/// (b) another VM's busy vCPU on the same CPU: >= 95% that VM's.
#[test]
fn collector_names_another_vms_vcpu() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["cbV", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let other: u64 = testenv("start-vm.sh", &["cbN", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let tid = pin_vm(pid, "1", "0");
    let otid = pin_vm(other, "1", "0");
    let Some(m) = collector_run("4s", |m| one_culprit(m, (pid, tid), ("cbN", other, otid))) else {
        return;
    };
    assert_share(&m, (pid, tid), (other, otid), "vcpu", "cbN");
    let culprit = m.r["culprits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "vcpu" && k["name"] == "cbN")
        .unwrap();
    assert!(culprit["victims"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v == "cbV"));
}

/// (c) both at once at different nice values: the split between them is
/// within 5 pp of what their own schedstat run times give. (The VMs are in
/// autogroups of their own and the loop in the test's, so nice weighs the
/// loop only inside its group: the split is whatever the groups give, and
/// the run times say what it was.)
#[test]
fn collector_splits_wait_like_the_culprits_run_times() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["ccV", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let other: u64 = testenv("start-vm.sh", &["ccN", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let tid = pin_vm(pid, "1", "0");
    let otid = pin_vm(other, "1", "0");
    let hog = Hog::start("whohog", 5, Some("1"));
    let hp = hog.pid() as u64;
    let judge =
        |m: &Measured| match valid(m, (pid, tid), &[("whohog", hp, hp), ("ccN", other, otid)]) {
            Some(why) => Verdict::Reject(why),
            None => Verdict::Exact,
        };
    let Some(m) = collector_run("4s", judge) else {
        return;
    };
    let c = vcpu(&m.r, pid, tid);
    let (hog_s, vm_s) = (
        wait_by_seconds(c, "host-process", "whohog"),
        wait_by_seconds(c, "vcpu", "ccN"),
    );
    let attributed_share = hog_s / (hog_s + vm_s);
    let (hog_run, _) = m.run_wait(hp, hp);
    let (vm_run, _) = m.run_wait(other, otid);
    let run_share = hog_run / (hog_run + vm_run);
    eprintln!(
        "hog share of the wait {attributed_share:.3}, of the run time {run_share:.3}; \
         the two took {:.1}% of the victim's wait",
        100.0 * (hog_s + vm_s) / (m.run_wait(pid, tid).1 / 1e9)
    );
    assert!(
        (attributed_share - run_share).abs() <= 0.05,
        "attributed {attributed_share:.3} vs run times {run_share:.3}"
    );
    let (b, a) = m.at_readings(tid);
    check_sums(c, b, a);
}

/// An idle vCPU (issue 17's fresh-clone find, README's host quickstart): a
/// 2-vCPU VM with one busy loop, so one vCPU sleeps in the guest's idle
/// loop and is woken by its timers and its busy sibling, often on an idle
/// host CPU. The trace on 6.18 lacks some switches away from the idle
/// task; the woken vCPU must not look queued there until it next sleeps
/// (1.31 s of `idle` wait against 0.004 s in schedstat before the fix).
/// wait_by adds up to schedstat's wait of the same interval, episodes stay
/// within times run, and the report raises no disagreement about it.
#[test]
fn collector_charges_an_idle_vcpu_what_schedstat_says() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["ciV", "2", "--busy", "1"])
        .parse()
        .unwrap();
    // Let the guest settle after boot; the idle vCPU is the one that ran
    // least since.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let run = |tid: u64| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let tids = qmp_tids_by_pid(pid);
    let r0: Vec<u64> = tids.iter().map(|&t| run(t)).collect();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let tid = *tids
        .iter()
        .zip(&r0)
        .min_by_key(|(&t, &r)| run(t) - r)
        .unwrap()
        .0;
    let judge = |m: &Measured| {
        let lost = m.r["attribution"]["lost_events"].as_u64().unwrap_or(0);
        if lost > 0 {
            return Verdict::Reject(format!("the collector lost {lost} events"));
        }
        let (run, _) = m.run_wait(pid, tid);
        if run > 0.5 * m.wall_ns {
            return Verdict::Reject(format!(
                "the idle vCPU was busy {:.0}% of the interval",
                100.0 * run / m.wall_ns
            ));
        }
        Verdict::Exact
    };
    let Some(m) = collector_run("4s", judge) else {
        return;
    };
    let c = vcpu(&m.r, pid, tid);
    eprintln!("idle vCPU wait_by: {}", c["wait_by"]);
    let (before, after) = m.at_readings(tid);
    assert!(
        after.2 - before.2 > 20,
        "the idle vCPU was woken: {after:?}"
    );
    check_sums(c, before, after);
    // (The busy sibling may be named there: its long waits straddle the
    // readings, which schedstat counts only once they end.)
    let reason = m.r["attribution"]["reason"].as_str().unwrap();
    assert!(!reason.contains(&format!("tid {tid}:")), "{reason}");
}
