//! Issue 28's walk-through on real QEMU (TCG) VMs: VM web with 2 busy
//! vCPUs, db with 1, an idle VM, and a host shell loop `backup` pinned to
//! CPU 0. Three back-to-back `host --json` runs of this steady host give
//! the same verdict and the same noisy-neighbour set; the verdict names
//! the loop (with the CPU its own schedstat says it took); a
//! host.cgroup-weight-unfair finding appears only for a VM whose steal is
//! past its fair steal by the stated margin.
//!
//! The machine is shared: a run is valid only when other host work stayed
//! small and no other busy VM ran (common::who::quiet_run's checks); three
//! valid runs in a row are needed, a rejected run restarts the series
//! (printed), and under CI every series rejected fails.

mod common;
use common::testenv::*;
use common::who::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

/// host.cgroup-weight-unfair's margin (crates/analysis/src/rules/
/// host_groups.rs STEAL_MARGIN_PP), as the finding states it.
const MARGIN_PP: f64 = 5.0;
/// Other host work (CPUs) a valid run allows beside the test's own.
const OTHER_LIMIT: f64 = 0.25;
const SERIES_TRIES: usize = 4;
/// The loop ran at all (CPUs): the kernel gave it 0.13 to 0.62 CPU in
/// back-to-back 5 s runs of this steady host, all of which must agree.
const MIN_BACKUP: f64 = 0.05;

/// One valid run and backup's own run time over it (its schedstat), CPUs.
fn valid_run(backup: u32, vms: &[u64]) -> Option<(Value, f64)> {
    let run_ns = || schedstat(u64::from(backup), u64::from(backup)).0;
    let (t0, r0) = (boottime(), run_ns());
    let r = quiet_run("5s", &[backup], vms, OTHER_LIMIT, MIN_BACKUP)?;
    let own = (run_ns() - r0) as f64 / 1e9 / (boottime() - t0);
    Some((r, own))
}

fn noisy_set(r: &Value) -> BTreeSet<String> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "host.noisy-neighbor")
        .map(|f| {
            let c = &f["evidence"]["culprit"];
            format!("{} {}", c["kind"], c["name"])
        })
        .collect()
}

/// Three valid runs back to back, or None when no series stayed valid.
fn three_runs(backup: u32, vms: &[u64]) -> Option<Vec<(Value, f64)>> {
    'series: for s in 0..SERIES_TRIES {
        let mut runs = Vec::new();
        while runs.len() < 3 {
            match valid_run(backup, vms) {
                Some(x) => runs.push(x),
                None => {
                    eprintln!("series {}: a run was rejected; starting over", s + 1);
                    continue 'series;
                }
            }
        }
        return Some(runs);
    }
    assert!(!in_ci(), "no series of three undisturbed runs");
    eprintln!("SKIPPED (not CI): no series of three undisturbed runs");
    None
}

/// A host.cgroup-weight-unfair finding names only VMs past fair by the margin.
fn weight_finding_is_past_the_margin(r: &Value) {
    let Some(f) = finding(r, "host.cgroup-weight-unfair") else {
        return;
    };
    let measured = f["evidence"]["measured"].as_array().unwrap();
    let losers: Vec<&str> = f["evidence"]["losers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let worst = measured
        .iter()
        .map(|m| m["steal_pct"].as_f64().unwrap() - m["fair_steal_pct"].as_f64().unwrap())
        .fold(f64::MIN, f64::max);
    eprintln!("weight finding: {}", f["title"]);
    assert!(
        worst >= MARGIN_PP - 0.1,
        "fired with every VM within {MARGIN_PP} pp of fair: {measured:?}"
    );
    assert!(!losers.is_empty(), "{f}");
    // The steal it cites is the VM table's (schedstat), not a figure of its own.
    for l in losers {
        let m = measured.iter().find(|m| m["vm"] == l).unwrap();
        let table = r["vms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == l)
            .unwrap();
        assert!(
            (m["steal_pct"].as_f64().unwrap() - table["steal_pct"].as_f64().unwrap()).abs() < 0.2,
            "{m} vs {table}"
        );
    }
}

#[test]
#[ignore = "issue 28 open: the pinned loop ran 0.13-0.65 CPU in back-to-back 5 s runs (fair 0.5), \
            so it still crosses the 1.33x noisy threshold in some runs; run with --ignored"]
fn a_steady_messy_host_gives_the_same_verdict_run_after_run() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let web: u64 = testenv("start-vm.sh", &["web", "2", "--busy", "2"])
        .parse()
        .unwrap();
    let db: u64 = testenv("start-vm.sh", &["db", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let idle: u64 = testenv("start-vm.sh", &["idle", "1"]).parse().unwrap();
    for pid in [web, db, idle] {
        let st = Command::new("taskset")
            .args(["-a", "-p", "-c", "0-1", &pid.to_string()])
            .output()
            .unwrap();
        assert!(st.status.success());
    }
    let backup = Hog::start("backup", 0, Some("0"));
    // Let the guests' loops and the balancer settle.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let Some(runs) = three_runs(backup.pid(), &[web, db, idle]) else {
        return;
    };
    let verdicts: Vec<&Value> = runs.iter().map(|(r, _)| &r["verdict"]).collect();
    let sets: Vec<BTreeSet<String>> = runs.iter().map(|(r, _)| noisy_set(r)).collect();
    for (i, ((r, own), v)) in runs.iter().zip(&verdicts).enumerate() {
        eprintln!(
            "run {}: {} | fix: {} | noisy {:?} | backup {own:.2} CPU by its schedstat",
            i + 1,
            v["headline"],
            v["fix"],
            sets[i]
        );
        assert_eq!(r["schema"], "stealscope/host/1");
        weight_finding_is_past_the_margin(r);
    }
    for i in 1..3 {
        assert_eq!(
            verdicts[i]["finding"],
            verdicts[0]["finding"],
            "run {} vs 1: {verdicts:?}",
            i + 1
        );
        assert_eq!(sets[i], sets[0], "noisy-neighbour sets differ");
    }
    // The verdict names the loop: "host process `backup` (pid N) takes X CPU".
    let named = format!("`backup` (pid {})", backup.pid());
    for ((_, own), v) in runs.iter().zip(&verdicts) {
        let said = format!("{} {}", v["headline"], v["fix"]);
        assert!(said.contains(&named), "{said}");
        let took: f64 = said
            .split(&format!("{named} takes "))
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no CPU figure in {said}"));
        assert!(
            (took - own).abs() <= 0.1,
            "verdict says {took} CPU, backup's schedstat {own:.2}"
        );
    }
    // A noisy neighbour ran over its fair share: VMs merely sharing the
    // oversubscribed host are none.
    for (r, _) in &runs {
        for f in r["findings"].as_array().unwrap() {
            if f["id"] != "host.noisy-neighbor" {
                continue;
            }
            let e = &f["evidence"];
            let (ran, fair) = (e["ran_cpus"].as_f64(), e["fair_cpus"].as_f64());
            if let (Some(ran), Some(fair)) = (ran, fair) {
                assert!(ran >= 1.33 * fair - 0.01, "{f}");
            }
        }
    }
}
