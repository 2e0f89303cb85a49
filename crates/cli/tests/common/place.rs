//! Helpers of the `place` tests: thread masks from /proc, running `place`
//! with a config and journal, the journal's consistency, planned CPUs.

use super::bin;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

/// Config lines for the planner's whole plan, unchosen: for tests that
/// drive the actuators with it (which part is offered is place_safe's).
pub const WHOLE_PLAN: &str = "never_worse = false\n";
/// Config lines that let a node with little free memory take the small
/// test VMs (the default margin is 5 % of RAM, which MemFree on a build
/// machine can sit below).
pub const NO_MARGIN: &str = "mem_margin_pct = 0\nmem_margin_min_mib = 0\n";

pub fn cpulist(s: &str) -> Vec<u32> {
    stealscope_readers::cpulist::parse(s.trim(), "test").unwrap()
}

pub fn mask(pid: u64, tid: u64) -> Option<Vec<u32>> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    st.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(cpulist)
}

pub fn threads(pid: u64) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// Every thread's mask, keyed by (pid, tid).
pub fn masks(pids: &[u64]) -> BTreeMap<(u64, u64), Vec<u32>> {
    pids.iter()
        .flat_map(|&p| {
            threads(p)
                .into_iter()
                .filter_map(move |t| Some(((p, t), mask(p, t)?)))
        })
        .collect()
}

/// `stealscope place ARGS --config CFG --journal JOURNAL`, not yet run.
pub fn place_cmd(args: &[&str], cfg: &Path, journal: &Path) -> Command {
    let mut c = bin();
    // Wide: these tests look for phrases the 80-column layout may break.
    c.env("COLUMNS", "1000");
    c.arg("place").args(args).args([
        "--config",
        cfg.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
    ]);
    c
}

pub fn place(args: &[&str], cfg: &Path, journal: &Path) -> Output {
    place_cmd(args, cfg, journal)
        .output()
        .expect("run stealscope")
}

pub fn journal_lines(j: &Path) -> Vec<Value> {
    std::fs::read_to_string(j)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every begun action has an outcome and every batch an end.
pub fn assert_journal_consistent(j: &Path) {
    let recs = journal_lines(j);
    let mut open: BTreeMap<(u64, u64), bool> = BTreeMap::new();
    let mut batches: BTreeMap<u64, bool> = BTreeMap::new();
    for r in &recs {
        let b = r["batch"].as_u64().unwrap();
        match r["type"].as_str().unwrap() {
            "batch" => {
                batches.insert(b, false);
            }
            "begin" => {
                open.insert((b, r["seq"].as_u64().unwrap()), false);
            }
            "outcome" => {
                *open
                    .get_mut(&(b, r["seq"].as_u64().unwrap()))
                    .expect("outcome of a begun action") = true;
            }
            "end" => {
                batches.insert(b, true);
            }
            t => panic!("unknown record {t}"),
        }
    }
    assert!(open.values().all(|v| *v), "begun without outcome: {open:?}");
    assert!(
        batches.values().all(|v| *v),
        "batch without end: {batches:?}"
    );
}

/// The planned CPUs of each thread: (pid, tid) -> CPUs.
pub fn planned(plan: &Value) -> BTreeMap<(u64, u64), Vec<u32>> {
    let mut m = BTreeMap::new();
    for v in plan["vms"].as_array().unwrap() {
        let pid = v["pid"].as_u64().unwrap();
        for t in v["vcpus"].as_array().unwrap() {
            let cpus = t[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_u64().unwrap() as u32)
                .collect();
            m.insert((pid, t[1].as_u64().unwrap()), cpus);
        }
        let others: Vec<u32> = v["other_cpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as u32)
            .collect();
        for tid in threads(pid) {
            m.entry((pid, tid)).or_insert_with(|| others.clone());
        }
    }
    m
}
