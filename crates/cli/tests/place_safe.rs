//! `place` never makes a host worse, against real QEMU (TCG) VMs: `apply`
//! refuses a plan the simulator predicts worse (and applies it with
//! --force); `plan`'s prediction is within 5 pp of the steal the test then
//! measures itself (schedstat), on the layout now and after applying; the
//! daemon logs each batch's measured result beside its prediction; a forced
//! plan that starves a host loop pinned to CPU 0 is undone by the watchdog,
//! with the reason, and the loop gets CPU again. The walk-through's other
//! half: the plan keeps the loop's CPU light, vCPUs within 10 pp. A
//! daemon with nothing to do backs off and reads the host at pass ends only.
//!
//! The machine is shared: steal comparisons run three rounds and pass on
//! the median; every round is printed, and a rejected one says why.

mod common;
use common::place::*;
use common::testenv::{self, process_run_ns, qmp_tids, schedstat, testenv};
use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use stealscope_testkit::proc_stat::busy_ns_now;

/// The groups the starving plan puts web and db in.
const STARVE_GROUPS: [&str; 2] = [
    "/sys/fs/cgroup/cpu/stealscope-test.starve-a",
    "/sys/fs/cgroup/cpu/stealscope-test.starve-b",
];
/// Prediction and measurement are compared only while the host's other
/// work wants less than this many CPUs. Under the parallel builds of a
/// shared machine (5-8 CPUs of demand on 2 CPUs, measured) the real kernel
/// gave a cpu group at 3072 about twice the share the model gives it
/// against five busy autogroups (BENCHMARKS.md): a known gap of the model,
/// not what these tests check.
const BUSY_HOST: f64 = 1.0;
/// CPUs that work outside the VMs may take in the test's window of a daemon
/// round before the round measures another host than the one predicted.
const OTHERS_NOISE: f64 = 0.1;

/// The tests measure steal and share the CPUs: they take turns, whatever
/// `--test-threads` says.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The turn, for a test that needs root, a v1 cpu cgroup and QEMU; None
/// (the test returns) where `require` lets it skip.
fn qemu_turn() -> Option<std::sync::MutexGuard<'static, ()>> {
    let t = turn();
    require(
        have_qemu(),
        "root, a v1 cpu cgroup and qemu (testenv/setup.sh)",
    )
    .then_some(t)
}

fn have_qemu() -> bool {
    is_root()
        && Path::new("/sys/fs/cgroup/cpu/cgroup.procs").exists()
        && Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_ok()
}

/// Stops the VMs and the host loop, removes the test group, whatever happens.
struct Cleanup {
    children: Vec<Child>,
}
impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        drop(testenv::Vms);
        for g in STARVE_GROUPS {
            let _ = std::fs::remove_dir(g);
        }
    }
}

/// A VM of this run: name, qemu pid, vCPU tids.
struct Vm {
    name: String,
    pid: u64,
    vcpus: Vec<u64>,
}

fn start_vm(tag: &str, vcpus: u32, busy: u32) -> Vm {
    let name = format!("{tag}{}", std::process::id());
    let pid: u64 = testenv(
        "start-vm.sh",
        &[&name, &vcpus.to_string(), "--busy", &busy.to_string()],
    )
    .parse()
    .unwrap();
    let vcpus = qmp_tids(&name);
    Vm { name, pid, vcpus }
}

/// A config managing `vms`, in `dir`.
fn config(dir: &Path, vms: &[&Vm], extra: &str) -> PathBuf {
    let names: Vec<String> = vms.iter().map(|v| format!("\"{}\"", v.name)).collect();
    let p = dir.join("place.toml");
    std::fs::write(
        &p,
        format!(
            "manage = [{}]\nshared_group = \"/stealscope-test.safe\"\n{NO_MARGIN}{extra}",
            names.join(", ")
        ),
    )
    .unwrap();
    p
}

/// Mean steal (run-queue wait over wall time, percent) of `vms`' vCPUs
/// over `span`, read by the test from schedstat; per vCPU too.
fn measure_steal(vms: &[&Vm], span: Duration) -> (f64, Vec<f64>) {
    let read = || -> Vec<(u64, u64)> {
        vms.iter()
            .flat_map(|v| v.vcpus.iter().map(|t| schedstat(v.pid, *t)))
            .map(|(r, w, _)| (r, w))
            .collect()
    };
    let (t0, a) = (Instant::now(), read());
    std::thread::sleep(span);
    let (b, secs) = (read(), t0.elapsed().as_secs_f64());
    let per: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| 100.0 * (y.1 - x.1) as f64 / 1e9 / secs)
        .collect();
    (per.iter().sum::<f64>() / per.len().max(1) as f64, per)
}

fn affinity(vm: &Vm, vcpu: usize, cpus: &[u32]) -> Value {
    json!({
        "kind": "affinity", "vm": vm.name, "pid": vm.pid, "tid": vm.vcpus[vcpu],
        "vcpu": vcpu, "cpus": cpus, "from": [0, 1], "via": {"owner": "direct"},
        "reason": "test: a plan of the test's own"
    })
}

/// A v1 cpu group of the test's own, as a plan's actions name it.
fn v1_group(dir: &str) -> Value {
    json!({"v2": false, "dir": dir})
}

fn join_group(vm: &Vm, group: &Value, reason: &str) -> Value {
    json!({"kind": "join_group", "vm": vm.name, "pid": vm.pid, "group": group,
           "from": null, "reason": reason})
}

fn cpu_weight(vm: &Vm, group: &Value, value: u64, reason: &str) -> Value {
    json!({"kind": "cpu_weight", "vm": vm.name, "pid": vm.pid, "group": group,
           "value": value, "from": null, "via": {"owner": "direct"}, "reason": reason})
}

fn write_plan(dir: &Path, name: &str, actions: Vec<Value>) -> PathBuf {
    let p = dir.join(name);
    let plan = json!({"vms": [], "actions": actions, "warnings": [], "node_pressure": {}});
    std::fs::write(&p, plan.to_string()).unwrap();
    p
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn apply_refuses_a_plan_predicted_worse_and_force_applies_it() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let _c = Cleanup { children: vec![] };
    let (a, b) = (start_vm("psA", 2, 2), start_vm("psB", 1, 1));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[&a, &b], "");
    let journal = dir.path().join("place.journal");
    let before = masks(&[a.pid, b.pid]);
    // Every busy vCPU on CPU 0 in a group at cpu.shares 2 (the least v1
    // takes): against nice-0 work at 1024 the group gets under 1 % of the
    // CPU, so its vCPUs wait nearly all the time, however busy the rest
    // of the machine is.
    let g = v1_group(STARVE_GROUPS[0]);
    let mut actions: Vec<Value> = [&a, &b]
        .iter()
        .map(|v| join_group(v, &g, "test: worse"))
        .collect();
    actions.push(cpu_weight(&a, &g, 2, "test: worse"));
    actions.extend([
        affinity(&a, 0, &[0]),
        affinity(&a, 1, &[0]),
        affinity(&b, 0, &[0]),
    ]);
    let worse = write_plan(dir.path(), "worse.json", actions);
    let w = worse.to_str().unwrap();
    let out = place(
        &["apply", "--yes", "--plan", w, "--interval", "3s"],
        &cfg,
        &journal,
    );
    let groups = || [a.pid, b.pid].map(cpu_group);
    let groups_before = groups();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("refused: the simulator predicts this plan makes the host worse")
            && err.contains("mean steal")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(
        masks(&[a.pid, b.pid]),
        before,
        "a refused plan changes nothing"
    );
    assert!(journal_lines(&journal).is_empty());

    // With --force it is applied (the watchdog off: VMs only, nobody starves).
    let out = place(
        &["apply", "--yes", "--force", "--watch", "0s", "--plan", w],
        &cfg,
        &journal,
    );
    assert_ok(&out);
    for t in a
        .vcpus
        .iter()
        .map(|t| (a.pid, *t))
        .chain([(b.pid, b.vcpus[0])])
    {
        assert_eq!(mask(t.0, t.1), Some(vec![0]), "{t:?}");
    }
    assert_eq!(
        groups(),
        [a.pid, b.pid].map(|_| "/stealscope-test.starve-a".to_string())
    );
    assert_ok(&place(&["undo", "--yes"], &cfg, &journal));
    assert_eq!(masks(&[a.pid, b.pid]), before);
    assert_eq!(groups(), groups_before);
    assert_journal_consistent(&journal);
}

/// The v1 cpu group of `pid` (as in /proc/PID/cgroup).
fn cpu_group(pid: u64) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap()
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, c, p) = (f.next()?, f.next()?, f.next()?);
            c.split(',').any(|x| x == "cpu").then(|| p.to_string())
        })
        .unwrap()
}

/// Host work demand (CPUs) in a prediction's current layout.
fn host_demand(p: &Value) -> f64 {
    p["prediction"]["current"]["host_demand_cpus"]
        .as_f64()
        .unwrap()
}

/// `place plan --json` over 4 s.
fn plan_json(cfg: &Path, journal: &Path) -> Value {
    let out = place(&["plan", "--json", "--interval", "4s"], cfg, journal);
    assert_ok(&out);
    json(&out)
}

/// One round: the plan `p` (`plan --json`), then the steal measured on the
/// layout now, then the plan applied (--force: this compares, it does not
/// judge) and measured, then undone, then planned again. (predicted,
/// measured) for both layouts, or why the round does not count: the
/// host's own work (other builds on this machine) changed by more than
/// 0.3 CPUs between the prediction and the measurement. The plan made
/// after the undo is `p` of the next round (the layout is the same).
fn plan_round(
    vms: &[&Vm],
    cfg: &Path,
    journal: &Path,
    dir: &Path,
    p: &Value,
) -> (Result<[(f64, f64); 2], String>, Value) {
    let pred = &p["prediction"];
    let (now, _) = measure_steal(vms, Duration::from_secs(4));
    let file = dir.join("plan.json");
    std::fs::write(&file, p.to_string()).unwrap();
    let f = file.to_str().unwrap();
    // An empty plan applies nothing, so there is nothing to undo.
    let moves = !p["actions"].as_array().unwrap().is_empty();
    let out = place(
        &[
            "apply",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--plan",
            f,
            "--interval",
            "1s",
        ],
        cfg,
        journal,
    );
    assert_ok(&out);
    let (after, _) = measure_steal(vms, Duration::from_secs(4));
    if moves {
        assert_ok(&place(&["undo", "--yes"], cfg, journal));
    }
    let again = plan_json(cfg, journal);
    let (h0, h1) = (host_demand(p), host_demand(&again));
    let r = if (h0 - h1).abs() > 0.3 {
        Err(format!("host work changed {h0:.2} -> {h1:.2} CPUs"))
    } else if h0.max(h1) > BUSY_HOST {
        Err(format!(
            "other work on the host wants {:.2} CPUs",
            h0.max(h1)
        ))
    } else {
        let g = |k: &str| pred[k]["mean_steal_pct"].as_f64().unwrap();
        Ok([(g("current"), now), (g("planned"), after)])
    };
    (r, again)
}

#[test]
fn plan_prediction_is_within_5_pp_of_what_is_then_measured() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let _c = Cleanup { children: vec![] };
    let (a, b) = (start_vm("ppA", 2, 2), start_vm("ppB", 1, 1));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[&a, &b], "");
    let journal = dir.path().join("place.journal");
    let mut errs = [Vec::new(), Vec::new()];
    let mut p = plan_json(&cfg, &journal);
    for round in 1..=5 {
        let (r, next) = plan_round(&[&a, &b], &cfg, &journal, dir.path(), &p);
        p = next;
        let r = match r {
            Ok(r) => r,
            Err(why) => {
                eprintln!("round {round} rejected: {why}");
                continue;
            }
        };
        for (k, (pred, meas)) in r.iter().enumerate() {
            let e = (pred - meas).abs();
            eprintln!(
                "round {round} {}: predicted {pred:.1} %, measured {meas:.1} %{}",
                ["now", "planned"][k],
                if e > 5.0 {
                    " (off by more than 5 pp)"
                } else {
                    ""
                }
            );
            errs[k].push(e);
        }
        if errs[0].len() == 3 {
            break;
        }
    }
    if !require(
        errs[0].len() >= 2,
        "a host without other busy work (see the rejected rounds)",
    ) {
        return;
    }
    for (k, e) in errs.iter().enumerate() {
        assert!(median(e.clone()) <= 5.0, "{}: {e:?}", ["now", "planned"][k]);
    }
}

/// Waits for a line of `lines` containing `what`; all lines read go to `log`.
fn wait_line(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    what: &str,
    log: &mut String,
) -> Option<String> {
    for l in lines.by_ref() {
        let l = l.ok()?;
        log.push_str(&l);
        log.push('\n');
        if l.contains(what) {
            return Some(l);
        }
    }
    None
}

/// "... steal 40.1 % (predicted 38.0 %) ...": (measured, predicted).
fn logged_steal(line: &str) -> (f64, f64) {
    let rest = &line[line.find("measured: steal ").unwrap() + 16..];
    let num = |s: &str| s.split_whitespace().next().unwrap().parse::<f64>().unwrap();
    let measured = num(rest);
    let pred = &rest[rest.find("(predicted ").unwrap() + 11..];
    (measured, num(pred))
}

/// "... host work 1.20 CPUs (predicted from 1.10), of it most: ...":
/// (measured, predicted).
fn logged_host_work(line: &str) -> (f64, f64) {
    let rest = &line[line.find("host work ").unwrap()..];
    let rest = &rest[rest.rfind("host work ").unwrap() + 10..];
    let num = |s: &str| s.split([' ', ')']).next().unwrap().parse::<f64>().unwrap();
    let from = &rest[rest.find("predicted from ").unwrap() + 15..];
    (num(rest), num(from))
}

/// One daemon round: what it logged and what the test read beside it.
struct Round {
    /// The logged line measuring pass 1's batch.
    line: String,
    /// The test's own mean vCPU steal over that pass, in %.
    steal: f64,
    /// CPUs that everything but the vCPUs ran on in that window (the
    /// daemon and QEMU's other threads included), from /proc/stat.
    others: f64,
    /// Of `others`, the daemon's own (its threads' schedstat).
    daemon: f64,
    /// vCPUs read.
    vcpus: usize,
    log: String,
}

/// One daemon run of two passes, read by the test beside the daemon.
fn daemon_round(vms: &[&Vm], cfg: &Path, journal: &Path, c: &mut Cleanup) -> Round {
    let mut cmd = place_cmd(
        &[
            "daemon",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--passes",
            "2",
            "--interval",
            "4s",
        ],
        cfg,
        journal,
    );
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    c.children.push(child);
    let mut log = String::new();
    let batch = wait_line(&mut lines, ": batch ", &mut log);
    assert!(batch.is_some(), "pass 1 applied nothing:\n{log}");
    // The test's own reading over the pass that measures the batch.
    let read = || -> Vec<(u64, u64, u64)> {
        vms.iter()
            .flat_map(|v| v.vcpus.iter().map(|t| schedstat(v.pid, *t)))
            .collect()
    };
    let daemon = c.children.last().unwrap().id();
    let procs = || -> [u64; 2] {
        let vms_all: u64 = vms.iter().map(|v| process_run_ns(v.pid)).sum();
        [process_run_ns(daemon as u64), vms_all]
    };
    let (t0, b0, s0, p0) = (Instant::now(), busy_ns_now(), read(), procs());
    let line = wait_line(&mut lines, "measured: steal", &mut log)
        .unwrap_or_else(|| panic!("no measured line:\n{log}"));
    let (s1, b1, p1) = (read(), busy_ns_now(), procs());
    let secs = t0.elapsed().as_secs_f64();
    let per_vcpu = |f: fn(&(u64, u64, u64)) -> u64| -> Vec<f64> {
        s0.iter()
            .zip(&s1)
            .map(|(x, y)| (f(y) - f(x)) as f64 / 1e9 / secs)
            .collect()
    };
    let waits = per_vcpu(|t| t.1);
    let steal = 100.0 * waits.iter().sum::<f64>() / waits.len() as f64;
    let vcpus_ran: f64 = per_vcpu(|t| t.0).iter().sum();
    let others = (b1 - b0) as f64 / 1e9 / secs - vcpus_ran;
    let cpus = |i: usize| (p1[i] - p0[i]) as f64 / 1e9 / secs;
    eprintln!(
        "  of the others: the daemon {:.2} CPUs, the VMs' other threads {:.2}",
        cpus(0),
        cpus(1) - vcpus_ran
    );
    let daemon = cpus(0);
    for l in lines.by_ref() {
        let _ = l;
    }
    undo_all(cfg, journal);
    Round {
        line,
        steal,
        others,
        daemon,
        vcpus: waits.len(),
        log,
    }
}

/// Undoes every batch of `journal`, newest first: pass 2 may apply a
/// batch of its own, and one undo restores only to before the last.
fn undo_all(cfg: &Path, journal: &Path) {
    for _ in 0..8 {
        let out = place(&["undo", "--yes"], cfg, journal);
        if stderr(&out).contains("nothing to undo") {
            return;
        }
        assert_ok(&out);
    }
    panic!("{}: still batches to undo after 8 undos", journal.display());
}

#[test]
fn the_daemon_logs_each_batch_measured_beside_its_prediction() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let mut c = Cleanup { children: vec![] };
    let (a, b) = (start_vm("pdA", 2, 2), start_vm("pdB", 1, 1));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[&a, &b], "vcpu_mapping = \"pinned\"\n");
    let start = masks(&[a.pid, b.pid]);
    for round in 1..=4 {
        let journal = dir.path().join(format!("place{round}.journal"));
        let Round {
            line,
            steal,
            others,
            daemon,
            vcpus,
            log,
        } = daemon_round(&[&a, &b], &cfg, &journal, &mut c);
        // The daemon never counts itself as host work (it predicts the host
        // it places), yet here it ran beside the VMs: 0.07-0.14 CPUs of a
        // debug build on this host. Three always-busy vCPUs on two CPUs
        // wait for every CPU-second it takes, so the test gives it back.
        let ours = steal - 100.0 * daemon / vcpus as f64;
        // Each round starts from the unplaced host.
        assert_eq!(masks(&[a.pid, b.pid]), start, "round {round}:\n{log}");
        let (measured, predicted) = logged_steal(&line);
        let (hw, hw_pred) = logged_host_work(&line);
        eprintln!(
            "round {round}: {line}\n  test's own reading: {steal:.1} %, {ours:.1} % without the daemon's {daemon:.2} CPUs; others ran {others:.2} CPUs"
        );
        if (hw - hw_pred).abs() > 0.3 || hw.max(hw_pred) > BUSY_HOST {
            eprintln!(
                "round {round} rejected: other work on the host {hw_pred:.2} -> {hw:.2} CPUs (whose: the line's `of it most`)"
            );
            continue;
        }
        // The prediction is for the VMs and the host work it read; a
        // window in which anything more than the daemon held the CPUs
        // measures another host than the one predicted.
        if others - daemon > hw_pred + OTHERS_NOISE {
            eprintln!(
                "round {round} rejected: others than the daemon ran {:.2} CPUs in the test's window (the prediction's host work {hw_pred:.2})",
                others - daemon
            );
            continue;
        }
        // The daemon's measurement is the test's (same VMs, nearly the same
        // window: the test's starts when the batch is logged).
        assert!(
            (measured - ours).abs() <= 5.0,
            "{line} vs ours {ours:.1}\n{log}"
        );
        assert!(
            (predicted - ours).abs() <= 5.0,
            "prediction {predicted:.1} vs measured {ours:.1}:\n{log}"
        );
        return;
    }
    require(
        false,
        "a host without other busy work (see the rejected rounds)",
    );
}

/// A busy shell loop named `backup` pinned to CPU 0 (the host job).
fn backup_loop(dir: &Path) -> Child {
    let script = dir.join("backup");
    std::fs::write(&script, "#!/bin/sh\nwhile :; do :; done\n").unwrap();
    let mut perm = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).unwrap();
    Command::new("taskset")
        .args(["-c", "0"])
        .arg(&script)
        .spawn()
        .unwrap()
}

fn run_ns(pid: u32) -> u64 {
    schedstat(pid as u64, pid as u64).0
}

#[test]
fn a_forced_starving_plan_is_undone_by_the_watchdog_and_the_loop_runs_again() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cleanup { children: vec![] };
    let (web, db) = (start_vm("pwWeb", 2, 2), start_vm("pwDb", 1, 1));
    let _idle = start_vm("pwIdle", 1, 0);
    c.children.push(backup_loop(dir.path()));
    let backup = c.children[0].id();
    let cfg = config(dir.path(), &[&web, &db], "");
    let journal = dir.path().join("place.journal");
    let before = masks(&[web.pid, db.pid]);
    // Starving by construction: web and db each in a group of its own at
    // the largest weight cpu.shares takes, every busy vCPU on backup's CPU:
    // 2 x 262144 against backup's 1024 (its session's autogroup) leaves it
    // a tick (4 ms) about every 2 s.
    let mut actions = Vec::new();
    for (v, dir) in [(&web, STARVE_GROUPS[0]), (&db, STARVE_GROUPS[1])] {
        let g = v1_group(dir);
        actions.push(join_group(v, &g, "test: starve"));
        actions.push(cpu_weight(v, &g, 262144, "test: starve"));
    }
    actions.extend([
        affinity(&web, 0, &[0]),
        affinity(&web, 1, &[0]),
        affinity(&db, 0, &[0]),
    ]);
    let plan = write_plan(dir.path(), "starve.json", actions);
    let out = place(
        &[
            "apply",
            "--yes",
            "--force",
            "--watch",
            "8s",
            "--interval",
            "2s",
            "--plan",
            plan.to_str().unwrap(),
        ],
        &cfg,
        &journal,
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "the watchdog did not act:\n{err}");
    assert!(
        err.contains("watchdog: after batch 1, ")
            && err.contains(&format!("task `backup` (pid {backup}"))
            && err.contains("undoing batch 1"),
        "{err}"
    );
    eprintln!("{err}");
    // Undone: the masks as before, and the journal says batch 2 undid 1.
    assert_eq!(masks(&[web.pid, db.pid]), before, "{err}");
    let recs = journal_lines(&journal);
    assert!(
        recs.iter()
            .any(|r| r["type"] == "batch" && r["undoes"] == 1),
        "{recs:?}"
    );
    assert_journal_consistent(&journal);
    // The loop gets CPU again (its own schedstat, read by the test). The
    // plan left it about 4 ms in 2 s (0.2 %). Without any plan the kernel
    // itself gives it nothing for 0.5 to 2.5 s at a time beside these
    // three busy vCPUs (measured: 0 ms in a 2 s window once in about five
    // runs, which failed one CI run), so the window is 6 s and the bar 5 %:
    // 25 times what the plan left, an eighth of the 41 % it got without one.
    let r0 = run_ns(backup);
    std::thread::sleep(Duration::from_secs(6));
    let ran = (run_ns(backup) - r0) as f64 / 1e9;
    assert!(ran > 0.3, "backup ran {ran:.3} s of 6 s after the undo");

    // A harmless batch beside the same busy vCPUs is kept: the kernel's own
    // gaps of up to 2.5 s in backup's CPU are not starving (a 1 s trigger
    // could undo this). The batch sets web's vCPU 0 to the mask it has.
    let cpus = &before[&(web.pid, web.vcpus[0])];
    let plan = write_plan(dir.path(), "same.json", vec![affinity(&web, 0, cpus)]);
    let out = place(
        &["apply", "--yes", "--force", "--watch", "8s", "--plan"]
            .into_iter()
            .chain([plan.to_str().unwrap()])
            .collect::<Vec<_>>(),
        &cfg,
        &journal,
    );
    assert!(out.status.success(), "a harmless batch:\n{}", stderr(&out));
    assert!(!stderr(&out).contains("watchdog"), "{}", stderr(&out));
}

/// The walk-through's first half: the plan keeps backup's CPU light, is
/// not predicted worse, and what the kernel then does with it is no worse
/// than what it did before: the spread between busy vCPUs, their mean
/// steal and backup's run time, each measured before and after apply by
/// the test. (Under --force the planner's whole plan here, with the shared
/// v1 group, left backup 0.12 s of 6 s: the prediction leaves it out.)
#[test]
fn the_plan_keeps_the_pinned_loops_cpu_light_and_is_measured_no_worse() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cleanup { children: vec![] };
    let (web, db) = (start_vm("pkWeb", 2, 2), start_vm("pkDb", 1, 1));
    let idle = start_vm("pkIdle", 1, 0);
    c.children.push(backup_loop(dir.path()));
    let backup = c.children[0].id();
    let cfg = config(dir.path(), &[&web, &db, &idle], "");
    let journal = dir.path().join("place.journal");
    let out = place(&["plan", "--json", "--interval", "4s"], &cfg, &journal);
    assert_ok(&out);
    let p = json(&out);
    // No busy vCPU pinned to CPU 0 alone (backup holds it).
    for (pid, tid) in web
        .vcpus
        .iter()
        .map(|t| (web.pid, *t))
        .chain([(db.pid, db.vcpus[0])])
    {
        if let Some(cpus) = planned(&p).get(&(pid, tid)) {
            assert_ne!(cpus, &vec![0], "{pid}/{tid} pinned to backup's CPU: {p}");
        }
    }
    // A plan made now is never one predicted worse: what the prediction
    // would refuse is left out, with a warning that says so.
    if let Some(why) = p["prediction"]["worse"]
        .as_array()
        .filter(|w| !w.is_empty())
    {
        panic!("a plan predicted worse was offered ({why:?}): {p}");
    }
    // Two windows before: how far the unchanged layout moves on its own.
    let before = layout_measured(&[&web, &db], backup);
    let again = layout_measured(&[&web, &db], backup);
    let out = place(&["apply", "--yes", "--interval", "4s"], &cfg, &journal);
    assert_ok(&out);
    if journal_lines(&journal).is_empty() {
        // Nothing applied: the layout is the one measured before.
        eprintln!("nothing applied; plan: {}", p["warnings"]);
        return;
    }
    // `apply` plans again: what it applied is the journal, not `p`.
    let applied: Vec<String> = journal_lines(&journal)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let after = layout_measured(&[&web, &db], backup);
    let _ = place(&["undo", "--yes"], &cfg, &journal);
    eprintln!(
        "before {before:?}\nagain  {again:?}\nafter  {after:?}\nplan {p}\napplied {applied:#?}"
    );
    // The unchanged layout's own drift between windows, plus 5 pp.
    let drift = |f: fn(&Measured) -> f64| (f(&before) - f(&again)).abs() + 5.0;
    let worst = |f: fn(&Measured) -> f64| f(&before).max(f(&again));
    assert!(
        after.spread <= worst(|m| m.spread).max(10.0) + drift(|m| m.spread),
        "vCPU spread widened: before {before:?} / {again:?}, after {after:?}, applied {applied:?}"
    );
    assert!(
        after.mean <= worst(|m| m.mean) + drift(|m| m.mean),
        "vCPU steal rose: before {before:?} / {again:?}, after {after:?}, applied {applied:?}"
    );
    assert!(
        after.backup_ran_s > 0.3 && after.backup_ran_s >= 0.5 * before.backup_ran_s,
        "backup starved: before {before:?}, after {after:?}, applied {applied:?}"
    );
}

/// What the kernel did over 6 s: the busy vCPUs' mean steal and spread
/// (pp) and how long backup ran (s).
#[derive(Debug)]
struct Measured {
    mean: f64,
    spread: f64,
    backup_ran_s: f64,
}

fn layout_measured(vms: &[&Vm], backup: u32) -> Measured {
    let r0 = run_ns(backup);
    let (mean, per) = measure_steal(vms, Duration::from_secs(6));
    let backup_ran_s = (run_ns(backup) - r0) as f64 / 1e9;
    let spread =
        per.iter().copied().fold(f64::MIN, f64::max) - per.iter().copied().fold(f64::MAX, f64::min);
    Measured {
        mean,
        spread,
        backup_ran_s,
    }
}

#[test]
fn unprivileged_plan_reads_and_writing_commands_name_the_journal() {
    let _turn = turn();
    if !require(is_root(), "root (to run as nobody)") {
        return;
    }
    let (_bin_dir, exe) = world_runnable_binary();
    let dir = tempfile::Builder::new()
        .prefix("place-priv")
        .tempdir()
        .unwrap();
    let jdir = dir.path().join("lib");
    std::fs::create_dir(&jdir).unwrap();
    let journal = jdir.join("place.journal");
    std::fs::write(&journal, "").unwrap();
    // The journal root's own: a directory nobody may enter.
    let mut perm = std::fs::metadata(&jdir).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o700);
    std::fs::set_permissions(&jdir, perm).unwrap();
    let cfg = dir.path().join("place.toml");
    std::fs::write(&cfg, "").unwrap();
    let mut perm = std::fs::metadata(dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(dir.path(), perm).unwrap();
    let args = |v: &[&str]| {
        let mut a: Vec<String> = vec!["place".into()];
        a.extend(v.iter().map(|s| s.to_string()));
        a.extend([
            "--config".into(),
            cfg.display().to_string(),
            "--journal".into(),
            journal.display().to_string(),
        ]);
        a
    };
    let run = |v: &[&str]| {
        let a = args(v);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        as_nobody(&exe, &a)
    };
    let out = run(&["plan", "--interval", "1s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("cannot read the journal") && text.contains(&journal.display().to_string()),
        "{text}"
    );
    let out = run(&["apply", "--yes", "--interval", "1s"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&journal.display().to_string()) && err.contains("permission denied"),
        "{err}"
    );
}

/// A dry-run daemon's read syscalls a second (`/proc/PID/io` syscr, the
/// kernel's count) from its pass-2 line to its pass-4 line, the seconds in
/// between, and its log.
fn daemon_reads(cfg: &Path, journal: &Path, c: &mut Cleanup) -> (f64, f64, String) {
    let mut cmd = place_cmd(
        &["daemon", "--interval", "1s", "--passes", "5"],
        cfg,
        journal,
    );
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let pid = child.id();
    c.children.push(child);
    let syscr = || -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
        let line = io.lines().find(|l| l.starts_with("syscr:")).unwrap();
        line[6..].trim().parse().unwrap()
    };
    let mut log = String::new();
    let mut at = |pass: u32, log: &mut String| {
        let what = format!("pass {pass}: 1 VM(s)");
        wait_line(&mut lines, &what, log).unwrap_or_else(|| panic!("no {what:?}:\n{log}"));
        (Instant::now(), syscr())
    };
    let (t2, r2) = at(2, &mut log);
    let (t4, r4) = at(4, &mut log);
    let secs = (t4 - t2).as_secs_f64();
    ((r4 - r2) as f64 / secs, secs, log)
}

#[test]
fn a_daemon_with_nothing_to_do_backs_off_and_reads_the_host_only_at_pass_ends() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let mut c = Cleanup { children: vec![] };
    // One busy vCPU on a host with more CPUs: nothing to place.
    let a = start_vm("pcA", 1, 1);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let steady = config(d1.path(), &[&a], "max_interval_s = 1\n");
    let backing = config(d2.path(), &[&a], "max_interval_s = 4\n");
    let (steady_rate, steady_s, log) = daemon_reads(&steady, &d1.path().join("j"), &mut c);
    assert!(log.contains("placement holds"), "{log}");
    assert!(!log.contains("next pass in"), "{log}");
    let (back_rate, back_s, log) = daemon_reads(&backing, &d2.path().join("j"), &mut c);
    eprintln!(
        "  read syscalls a second: {steady_rate:.0} each 1 s pass, {back_rate:.0} backing off ({steady_s:.1} s and {back_s:.1} s from pass 2 to 4)"
    );
    // Passes 3 and 4 last 4 s each once backed off (1, 2, 4, 4), 1 s without.
    assert!(
        log.contains("next pass in 4.0 s, reading the host at its ends only"),
        "{log}"
    );
    assert!(
        back_s > 7.0 && steady_s < 3.5,
        "{back_s} s, {steady_s} s:\n{log}"
    );
    // Every 0.5 s a close pass reads each thread's schedstat and stat;
    // a quiet one reads the host twice a pass.
    assert!(
        back_rate * 4.0 < steady_rate,
        "{back_rate:.0} reads/s backing off against {steady_rate:.0}:\n{log}"
    );
}
