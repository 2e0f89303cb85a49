//! Who stole it with the scheduler-event collector, against real QEMU
//! (TCG) VMs from testenv/ and real host busy loops: the culprit of a
//! pinned vCPU's wait is named (a host loop, another VM's vCPU, both at
//! once at different nice values) against the culprits' own schedstat
//! run times, and the charges add up to schedstat's wait.
//!
//! Timing runs share this machine with other work: each run checks that
//! the other host work stayed small and retries a few times before giving
//! up; a run rejected for load is printed.

mod common;
use common::testenv::*;
use common::who::*;
use common::*;
use serde_json::Value;

/// Without a collector (BPF refused, no tracefs, or not built) the report
/// still has every VM from /proc and says why in one note; with one, no
/// such note.
#[test]
fn attribution_status_is_said_once() {
    let Some(_turn) = qemu_turn() else { return };
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
    /// schedstat of a watched thread at the two collector readings, as the
    /// hook read it on either side of each: the attributed interval lies
    /// between the inside and the outside reads.
    fn at_readings(&self, tid: u64) -> AtReadings {
        let side = |side: &str, key: &str| {
            let p = self
                .dir
                .path()
                .join(format!("snap/{side}/stealscope/sched.json"));
            let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            let t = v["threads"]
                .as_array()
                .and_then(|ts| ts.iter().find(|t| t["tid"] == tid))
                .unwrap_or_else(|| panic!("{tid} not in {}", p.display()));
            let s = &t[key];
            let n = |i: usize| s[i].as_u64().unwrap_or_else(|| panic!("{key} in {t}"));
            (n(0), n(1), n(2))
        };
        AtReadings {
            outside: (side("t0", "schedstat"), side("t1", "schedstat")),
            inside: (
                side("t0", "schedstat_inside"),
                side("t1", "schedstat_inside"),
            ),
        }
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
            skip("every collector run was rejected");
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

/// The `field` of the wait_by entries of one culprit: its kind, name and
/// pid (the process, or the VM's for a vCPU). By pid too because other
/// sessions' tests on this machine start culprits of the same names
/// (`whohog`, VMs named alike) on the same CPU, which a name alone would
/// add to this test's culprit.
fn charged(c: &Value, kind: &str, name: &str, pid: u64, field: &str) -> f64 {
    c["wait_by"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == kind && w["name"] == name && w["pid"] == pid)
        .map(|w| w[field].as_f64().unwrap())
        .sum()
}

/// The charged share against the true one: >= 95% when the culprit really
/// took >= 95%, and within 3 pp of the truth always.
fn assert_share(m: &Measured, victim: (u64, u64), culprit: (u64, u64), kind: &str, name: &str) {
    let c = vcpu(&m.r, victim.0, victim.1);
    let share = charged(c, kind, name, culprit.0, "share");
    let by_name = wait_by_share(c, kind, name);
    if by_name > share {
        eprintln!(
            "{name}: others of that name took {:.3} more",
            by_name - share
        );
    }
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
    check_sums(c, &m.at_readings(victim.1), &m.r["attribution"]["route"]);
}

/// (a) a host busy loop on the CPU of a pinned 1-vCPU VM: >= 95% its.
#[test]
fn collector_names_a_host_loop_on_a_pinned_vcpu() {
    let Some(_turn) = qemu_turn() else { return };
    let (pid, tid) = pinned_busy_vm("caV");
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
    let Some(_turn) = qemu_turn() else { return };
    let (pid, tid) = pinned_busy_vm("cbV");
    let (other, otid) = pinned_busy_vm("cbN");
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
    let Some(_turn) = qemu_turn() else { return };
    let (pid, tid) = pinned_busy_vm("ccV");
    let (other, otid) = pinned_busy_vm("ccN");
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
        charged(c, "host-process", "whohog", hp, "seconds"),
        charged(c, "vcpu", "ccN", other, "seconds"),
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
    check_sums(c, &m.at_readings(tid), &m.r["attribution"]["route"]);
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
    let Some(_turn) = qemu_turn() else { return };
    let pid: u64 = testenv("start-vm.sh", &["ciV", "2", "--busy", "1"])
        .parse()
        .unwrap();
    // Let the guest settle after boot; the idle vCPU is the one that ran
    // least since.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let run = |tid: u64| schedstat(pid, tid).0;
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
    let r = m.at_readings(tid);
    let (before, after) = r.outside;
    assert!(
        after.2 - before.2 > 20,
        "the idle vCPU was woken: {after:?}"
    );
    check_sums(c, &r, &m.r["attribution"]["route"]);
    // (The busy sibling may be named there: its long waits straddle the
    // readings, which schedstat counts only once they end.)
    let reason = m.r["attribution"]["reason"].as_str().unwrap();
    assert!(!reason.contains(&format!("tid {tid}:")), "{reason}");
}
