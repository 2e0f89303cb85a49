//! `place` against real QEMU (TCG) VMs: plan → apply --yes leaves every
//! thread with the planned CPUs, undo restores the exact previous masks and
//! groups; a SIGKILL between journaling and applying (failpoint) and a
//! restart leave every thread old-or-new and the journal consistent; bad
//! input (malformed config, CPU gone offline, VM exited, cgroup vanished)
//! changes nothing half-way. Before all that, both VMs shared and pinned:
//! `plan` twice gives one plan, and `apply` without --yes prints that plan.

mod common;
use common::place::*;
use common::testenv::{self, testenv};
use common::*;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

const SHARED: &str = "/stealscope-test.shared";

/// Stops the VMs, brings CPU 1 back and removes the test groups, whatever happens.
struct Cleanup;
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/devices/system/cpu/cpu1/online", "1");
        drop(testenv::Vms);
        for g in [SHARED, "/stealscope-test.own"] {
            let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/cpu{g}"));
        }
    }
}

/// Text with every measured figure (a number with a decimal point, e.g.
/// "demand 0.98 CPUs") blanked and without the warnings (a load near 100 %
/// is warned about in one run and not the next): two runs measure
/// differently, the plan they print must not differ otherwise.
fn same_but_measurements(s: &str) -> String {
    let s: String = s
        .lines()
        .filter(|l| !l.starts_with("warning: "))
        // Who stole the VM's time is evidence measured anew each run.
        .filter(|l| !l.trim_start().starts_with("why: its vCPUs waited"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut out = String::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        if cs[i].is_ascii_digit() {
            let start = i;
            while i < cs.len() && (cs[i].is_ascii_digit() || cs[i] == '.') {
                i += 1;
            }
            let num: String = cs[start..i].iter().collect();
            let num = num.trim_end_matches('.');
            if num.contains('.') {
                out.push('#');
            } else {
                out.push_str(num);
            }
            if cs[start..i].ends_with(&['.']) {
                out.push('.');
            }
        } else {
            out.push(cs[i]);
            i += 1;
        }
    }
    // A measured change near zero prints as +0.0 or -0.0.
    out.replace("+#", "#").replace("-#", "#")
}

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

#[test]
fn place_on_real_qemu_vms() {
    let have = is_root()
        && Path::new("/sys/fs/cgroup/cpu/cgroup.procs").exists()
        && Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_ok();
    if !require(
        have,
        "root, a v1 cpu cgroup and qemu-system-x86_64 (run testenv/setup.sh)",
    ) {
        return;
    }
    let _c = Cleanup;
    // Names unique to this run: `manage` must not pick up another run's VMs.
    let (ded_name, shr_name) = (
        format!("plDed{}", std::process::id()),
        format!("plShr{}", std::process::id()),
    );
    let ded: u64 = testenv("start-vm.sh", &[&ded_name, "1", "--busy", "1"])
        .parse()
        .unwrap();
    let shr: u64 = testenv("start-vm.sh", &[&shr_name, "2", "--busy", "1"])
        .parse()
        .unwrap();
    let pids = [ded, shr];
    // A mask of our own on one thread, so undo has something exact to restore.
    let shr_vcpu0 = threads(shr)[2];
    assert!(Command::new("taskset")
        .args(["-p", "-c", "0", &shr_vcpu0.to_string()])
        .output()
        .unwrap()
        .status
        .success());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("place.toml");
    let journal = dir.path().join("place.journal");
    std::fs::write(
        &cfg,
        // MemFree, not page cache, counts as room: on a build machine it can
        // sit below the default margin (5 % of RAM), which would keep the
        // small test VMs off the node.
        // The whole plan (never_worse off): this test drives every
        // actuator; which part of a plan is offered is place_safe's test.
        format!("manage = [\"{ded_name}\", \"{shr_name}\"]\ndedicated = [\"{ded_name}\"]\nfairness = \"shared-group\"\nshared_group = \"{SHARED}\"\n{NO_MARGIN}{WHOLE_PLAN}"),
    )
    .unwrap();

    // 0. Both VMs shared and pinned one vCPU per CPU (the host):
    // two measurements plan the same map and actions, and a dry run of
    // apply shows that plan (text and JSON). Dry runs change nothing.
    let pinned_cfg = dir.path().join("pinned.toml");
    std::fs::write(
        &pinned_cfg,
        format!(
            "manage = [\"{ded_name}\", \"{shr_name}\"]\nfairness = \"shared-group\"\nshared_group = \"{SHARED}\"\nvcpu_mapping = \"pinned\"\n{NO_MARGIN}{WHOLE_PLAN}"
        ),
    )
    .unwrap();
    let untouched = masks(&pids);
    let plan_of = |args: &[&str]| json(&place(args, &pinned_cfg, &journal));
    let first = plan_of(&["plan", "--json", "--interval", "1s"]);
    let second = plan_of(&["plan", "--json", "--interval", "1s"]);
    let dry = plan_of(&["apply", "--json", "--interval", "1s"]);
    assert_eq!(planned(&first), planned(&second), "{first}\n{second}");
    assert_eq!(first["actions"], second["actions"]);
    assert_eq!(planned(&dry["plan"]), planned(&first), "{dry}");
    assert_eq!(dry["plan"]["actions"], first["actions"]);
    let would: Vec<&Value> = dry["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["action"])
        .collect();
    assert_eq!(
        would,
        first["actions"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>()
    );
    // The map pins every vCPU to one CPU, spread over both CPUs.
    let vcpu_cpus: Vec<u32> = first["vms"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["vcpus"].as_array().unwrap().iter())
        .map(|t| {
            let c = t[2].as_array().unwrap();
            assert_eq!(c.len(), 1, "{t}");
            c[0].as_u64().unwrap() as u32
        })
        .collect();
    assert!(
        vcpu_cpus.contains(&0) && vcpu_cpus.contains(&1),
        "{vcpu_cpus:?}"
    );
    let text = |args: &[&str]| {
        let out = place(args, &pinned_cfg, &journal);
        assert_ok(&out);
        same_but_measurements(&String::from_utf8_lossy(&out.stdout))
    };
    let plan_text = text(&["plan", "--interval", "1s"]);
    let dry_text = text(&["apply", "--interval", "1s"]);
    assert!(
        dry_text.starts_with(&plan_text),
        "plan:\n{plan_text}\ndry run:\n{dry_text}"
    );
    assert!(dry_text[plan_text.len()..].contains("Dry run (add --yes to apply)"));
    // The mapping's why once, not once per VM or action.
    assert_eq!(
        plan_text.matches("left to the load balancer").count(),
        1,
        "{plan_text}"
    );
    assert_eq!(masks(&pids), untouched, "dry runs change nothing");

    // 1. plan, apply --yes, undo --yes.
    let before = masks(&pids);
    let groups_before = (cpu_group(ded), cpu_group(shr));
    let plan = json(&place(
        &["plan", "--json", "--interval", "1s"],
        &cfg,
        &journal,
    ));
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, serde_json::to_vec(&plan).unwrap()).unwrap();
    let apply_plan = || {
        json(&place(
            &[
                "apply",
                "--yes",
                // Mechanics, not policy: the prediction and the watchdog
                // have their own tests (place_safe.rs).
                "--force",
                "--watch",
                "0s",
                "--json",
                "--plan",
                plan_file.to_str().unwrap(),
            ],
            &cfg,
            &journal,
        ))
    };
    let want = planned(&plan);
    assert!(
        want.len() >= before.len() - 2,
        "every thread planned: {want:?}"
    );
    let d = plan["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["pid"] == ded)
        .unwrap();
    assert_eq!(d["class"], "dedicated");
    let r = apply_plan();
    assert!(
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["outcome"] == "done" || x["outcome"] == "already"),
        "{r}"
    );
    for ((pid, tid), cpus) in &want {
        assert_eq!(
            mask(*pid, *tid).as_ref(),
            Some(cpus),
            "thread {tid} of {pid}"
        );
    }
    assert_eq!(cpu_group(shr), SHARED);
    assert_eq!(
        cpu_group(ded),
        groups_before.0,
        "dedicated VMs stay out of the shared group"
    );
    json(&place(&["undo", "--yes", "--json"], &cfg, &journal));
    assert_eq!(masks(&pids), before, "undo restores the exact masks");
    assert_eq!((cpu_group(ded), cpu_group(shr)), groups_before);
    assert_journal_consistent(&journal);

    // 2. Crash between journaling and applying, then restart.
    let before = masks(&pids);
    let crashed = Command::new(env!("CARGO_BIN_EXE_stealscope"))
        .args([
            "place",
            "daemon",
            "--yes",
            "--force",
            "--passes",
            "1",
            "--interval",
            "1s",
        ])
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ])
        .env("STEALSCOPE_FAILPOINT", "after-journal:2")
        .output()
        .unwrap();
    assert_eq!(
        crashed.status.signal(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&crashed.stderr)
    );
    let recs = journal_lines(&journal);
    let last_batch = recs.iter().rev().find(|r| r["type"] == "batch").unwrap()["batch"]
        .as_u64()
        .unwrap();
    let begun: Vec<&Value> = recs
        .iter()
        .filter(|r| r["type"] == "begin" && r["batch"] == last_batch)
        .collect();
    assert_eq!(begun.len(), 2);
    let settled: Vec<u64> = recs
        .iter()
        .filter(|r| r["type"] == "outcome" && r["batch"] == last_batch)
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(settled, vec![1], "action 2 was journaled and never marked");
    // Every thread: old or new placement, never anything else.
    let now = masks(&pids);
    for (k, m) in &now {
        let journaled: Vec<Vec<u32>> = begun
            .iter()
            .filter(|b| b["action"]["tid"].as_u64() == Some(k.1))
            .map(|b| {
                b["action"]["cpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect();
        assert!(
            Some(m) == before.get(k) || journaled.contains(m),
            "thread {k:?}: {m:?} is neither old {:?} nor new {journaled:?}",
            before.get(k)
        );
    }
    let restart = place(
        &[
            "daemon",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--passes",
            "1",
            "--interval",
            "1s",
        ],
        &cfg,
        &journal,
    );
    let err = String::from_utf8_lossy(&restart.stderr);
    assert!(restart.status.success(), "{err}");
    assert!(
        err.contains(&format!("recovered batch {last_batch} action 2")),
        "{err}"
    );
    assert_journal_consistent(&journal);
    let dry = json(&place(
        &["apply", "--json", "--interval", "1s"],
        &cfg,
        &journal,
    ));
    let pending: Vec<&Value> = dry["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["outcome"] == "would_apply" && x["action"]["kind"] != "cpu_weight")
        .collect();
    assert!(
        pending.is_empty(),
        "after restart the placement is complete: {pending:?}"
    );

    // 3a. Malformed config: one line naming the file.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "dedicated = 3\n").unwrap();
    let out = place(&["plan"], &bad, &journal);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.trim().lines().count() == 1 && err.contains("bad.toml") && err.contains("dedicated"),
        "{err}"
    );

    // 3b. Undo the daemon's batch, then: a CPU goes offline after the plan.
    json(&place(&["undo", "--yes", "--json"], &cfg, &journal));
    let plan = place(&["plan", "--json", "--interval", "1s"], &cfg, &journal);
    std::fs::write(&plan_file, &plan.stdout).unwrap();
    let n_batches = journal_lines(&journal)
        .iter()
        .filter(|r| r["type"] == "batch")
        .count();
    std::fs::write("/sys/devices/system/cpu/cpu1/online", "0").unwrap();
    let before = masks(&pids);
    let out = place(
        &[
            "apply",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--plan",
            plan_file.to_str().unwrap(),
        ],
        &cfg,
        &journal,
    );
    std::fs::write("/sys/devices/system/cpu/cpu1/online", "1").unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("went offline") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(masks(&pids), before);
    assert_eq!(
        journal_lines(&journal)
            .iter()
            .filter(|r| r["type"] == "batch")
            .count(),
        n_batches
    );

    // 3c. A cgroup that vanished between plan and apply.
    let own = "/sys/fs/cgroup/cpu/stealscope-test.own";
    std::fs::create_dir_all(own).unwrap();
    std::fs::write(format!("{own}/cgroup.procs"), shr.to_string()).unwrap();
    std::fs::write(
        &cfg,
        // The whole plan: on a busy host the prediction may leave the
        // weight out, and this step needs it in the plan.
        format!("manage = [\"{ded_name}\", \"{shr_name}\"]\nfairness = \"weights\"\n{WHOLE_PLAN}"),
    )
    .unwrap();
    let plan = json(&place(
        &["plan", "--json", "--interval", "1s"],
        &cfg,
        &journal,
    ));
    assert!(
        plan["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["kind"] == "cpu_weight" && a["group"]["dir"] == own),
        "{plan}"
    );
    std::fs::write(&plan_file, serde_json::to_vec(&plan).unwrap()).unwrap();
    std::fs::write("/sys/fs/cgroup/cpu/cgroup.procs", shr.to_string()).unwrap();
    std::fs::remove_dir(own).unwrap();
    let before = masks(&pids);
    let out = place(
        &[
            "apply",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--plan",
            plan_file.to_str().unwrap(),
        ],
        &cfg,
        &journal,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stealscope-test.own") && err.contains("vanished"),
        "{err}"
    );
    assert_eq!(masks(&pids), before);

    // 3d. A VM that exits between plan and apply: its actions are "gone",
    // the others are done, the journal is consistent.
    std::fs::write(
        &cfg,
        // MemFree, not page cache, counts as room: on a build machine it can
        // sit below the default margin (5 % of RAM), which would keep the
        // small test VMs off the node.
        // The whole plan (never_worse off): this test drives every
        // actuator; which part of a plan is offered is place_safe's test.
        format!("manage = [\"{ded_name}\", \"{shr_name}\"]\ndedicated = [\"{ded_name}\"]\nfairness = \"shared-group\"\nshared_group = \"{SHARED}\"\n{NO_MARGIN}{WHOLE_PLAN}"),
    )
    .unwrap();
    for p in pids {
        assert!(Command::new("taskset")
            .args(["-a", "-p", "-c", "0-1", &p.to_string()])
            .output()
            .unwrap()
            .status
            .success());
    }
    let plan = json(&place(
        &["plan", "--json", "--interval", "1s"],
        &cfg,
        &journal,
    ));
    std::fs::write(&plan_file, serde_json::to_vec(&plan).unwrap()).unwrap();
    testenv("stop-vm.sh", &[&shr_name]);
    let r = apply_plan();
    let res = r["results"].as_array().unwrap();
    assert!(
        res.iter()
            .filter(|x| x["action"]["pid"] == shr)
            .all(|x| x["outcome"] == "gone"),
        "{r}"
    );
    assert!(
        res.iter()
            .any(|x| x["action"]["pid"] == ded && x["outcome"] == "done"),
        "{r}"
    );
    assert_journal_consistent(&journal);
}
