//! What a first-time user reads (issue 19): a verdict first that names the
//! top finding, the host's numbers first on a host, notes that share a
//! reason on one line, and text that fits the terminal without splitting a
//! word or a value. Every snapshot fixture is read; the expected values
//! come from the same report's JSON.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> Vec<PathBuf> {
    let dir = repo().join("fixtures/snapshots");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("snapshot.tar.gz"))
        .filter(|p| p.exists())
        .collect();
    v.sort();
    assert!(v.len() >= 10, "fixtures: {}", v.len());
    v
}

/// The text report of `cmd` on a snapshot at a given $COLUMNS.
fn text(cmd: &str, snap: &Path, columns: usize, extra: &[&str]) -> String {
    let out = bin()
        .args([cmd, "--snapshot", snap.to_str().unwrap()])
        .args(extra)
        .env("COLUMNS", columns.to_string())
        .output()
        .unwrap();
    assert_ok(&out);
    String::from_utf8(out.stdout).unwrap()
}

fn report(snap: &Path) -> Value {
    json(&run(&[
        "doctor",
        "--json",
        "--snapshot",
        snap.to_str().unwrap(),
    ]))
}

fn is_host(r: &Value) -> bool {
    r["roles"].as_array().unwrap().iter().any(|x| x == "host")
}

#[test]
fn text_at_80_columns_fits_and_splits_no_word() {
    let mut failures = Vec::new();
    for snap in fixtures() {
        let name = snap.file_name().unwrap().to_string_lossy().to_string();
        let mut cmds = vec![("doctor", vec![]), ("doctor", vec!["-v"])];
        if is_host(&report(&snap)) {
            cmds.push(("host", vec![]));
        }
        for (cmd, extra) in cmds {
            let narrow = text(cmd, &snap, 80, &extra);
            let wide = text(cmd, &snap, 1000, &extra);
            // Wrapping may only move line breaks: the same words in order.
            let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
            if words(&narrow) != words(&wide) {
                let (a, b) = (words(&narrow), words(&wide));
                let i = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
                failures.push(format!(
                    "{name} {cmd} {extra:?}: a word was split at 80 columns: {:?} vs {:?}",
                    &a[i..(i + 3).min(a.len())],
                    &b[i..(i + 3).min(b.len())]
                ));
            }
            // Every line fits, unless it holds a value wider than any line's
            // room after the indent.
            for l in narrow.lines() {
                let n = l.chars().count();
                if n > 80 && l.split_whitespace().all(|w| w.chars().count() <= 66) {
                    failures.push(format!("{name} {cmd} {extra:?}: {n} columns: {l}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_verdict_names_the_top_finding_and_opens_the_report() {
    let mut seen = std::collections::BTreeSet::new();
    for snap in fixtures() {
        let name = snap.file_name().unwrap().to_string_lossy().to_string();
        let r = report(&snap);
        let v = &r["verdict"];
        let top = &r["findings"][0];
        let t = text("doctor", &snap, 80, &[]);
        // The title, a blank line, then the verdict up to the next blank line.
        let head: Vec<&str> = t
            .lines()
            .skip_while(|l| !l.is_empty())
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        let head = head.join(" ").trim_start().to_string();
        seen.insert(v["status"].as_str().unwrap().to_string());
        match top["severity"].as_str() {
            None => {
                assert_eq!(v["status"], "ok", "{name}");
                assert!(head.starts_with("OK: No problem found"), "{name}: {head}");
            }
            Some("info") => {
                assert_eq!(v["status"], "info", "{name}");
                assert!(
                    head.starts_with("OK: Nothing needs action"),
                    "{name}: {head}"
                );
            }
            Some(sev) => {
                let id = top["id"].as_str().unwrap();
                assert_eq!(v["status"], sev, "{name}");
                assert_eq!(v["finding"], id, "{name}");
                assert!(
                    head.trim_start().starts_with(&sev.to_uppercase()) && head.contains(id),
                    "{name}: the verdict should name {id}: {head}"
                );
                // The top finding's title, as the verdict's headline says it.
                let title_start: String = top["title"]
                    .as_str()
                    .unwrap()
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(head.contains(&title_start), "{name}: {head}");
                assert!(v["fix"].as_str().is_some_and(|f| !f.is_empty()), "{name}");
                let fix_line = t.lines().find(|l| l.trim_start().starts_with("Fix: "));
                assert!(fix_line.is_some(), "{name}: no Fix line:\n{t}");
            }
        }
    }
    assert!(
        seen.contains("critical") && seen.contains("warning") && seen.contains("ok"),
        "fixtures should cover several verdicts: {seen:?}"
    );
}

#[test]
fn doctor_on_a_host_shows_the_critical_host_finding_and_the_vms_first() {
    let mut checked = 0;
    for snap in fixtures() {
        let name = snap.file_name().unwrap().to_string_lossy().to_string();
        let r = report(&snap);
        let top = &r["findings"][0];
        if !is_host(&r) || top["severity"] != "critical" {
            continue;
        }
        let id = top["id"].as_str().unwrap();
        if !id.starts_with("host.") {
            continue;
        }
        checked += 1;
        let t = text("doctor", &snap, 80, &[]);
        let first: String = t.lines().take(6).collect::<Vec<_>>().join("\n");
        assert!(
            first.contains("CRITICAL") && first.contains(id),
            "{name}: {id} not in the first lines:\n{first}"
        );
        let pos = |s: &str| {
            t.find(s)
                .unwrap_or_else(|| panic!("{name}: no {s:?}:\n{t}"))
        };
        // The VM table before this machine's own (guest) steal and CPUs.
        assert!(pos("\nHost: ") < pos("\nSteal"), "{name}:\n{t}");
        assert!(pos("\nHost: ") < pos("  CPU   busy%"), "{name}:\n{t}");
        // A steal of zero is "none", never a split of nothing.
        if r["summary"]["steal_pct"].as_f64().unwrap_or(0.0) < 0.05 {
            let l = t.lines().find(|l| l.starts_with("Steal")).unwrap();
            assert!(l.contains("none") && !l.contains("while"), "{name}: {l}");
        }
    }
    assert!(
        checked >= 3,
        "host fixtures with a critical host finding: {checked}"
    );
}

/// A copy of a fixture whose four hardware counters could not be opened
/// (no PMU: ENOENT), as in a VM without a virtual PMU.
fn no_pmu_fixture(tmp: &Path) -> PathBuf {
    let src = repo().join("fixtures/snapshots/6.x-ipc-steady/snapshot.tar.gz");
    let dst = tmp.join("no-pmu");
    std::fs::create_dir_all(&dst).unwrap();
    let cp = std::process::Command::new("tar")
        .args(["-xzf", src.to_str().unwrap(), "-C", dst.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(cp.success());
    let path = dst.join("counters.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let hw = ["cycles", "instructions", "cache-references", "cache-misses"];
    c["opened"] = serde_json::json!(["tsc", "aperf", "mperf"]);
    let missing = c["missing"].as_array_mut().unwrap();
    for h in hw {
        missing.push(serde_json::json!({"counter": h,
            "reason": {"kind": "open", "errno": 2, "error": "No such file or directory"}}));
    }
    for s in c["samples"].as_array_mut().unwrap() {
        for cpu in s["cpus"].as_array_mut().unwrap() {
            cpu["groups"]
                .as_array_mut()
                .unwrap()
                .retain(|g| g["counts"].get("cycles").is_none());
        }
    }
    std::fs::write(&path, c.to_string()).unwrap();
    dst
}

#[test]
fn notes_sharing_a_reason_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let snap = no_pmu_fixture(tmp.path());
    let r = report(&snap);
    // The JSON keeps one note per counter, in full.
    let pmu: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| n.contains("no hardware PMU"))
        .collect();
    assert_eq!(pmu.len(), 4, "{:#?}", r["notes"]);
    let t = text("doctor", &snap, 80, &[]);
    let notes = t.split("\nNotes").nth(1).expect("a Notes section");
    let mentions: Vec<&str> = notes.lines().filter(|l| l.contains("no PMU")).collect();
    assert_eq!(mentions.len(), 1, "one line for one reason:\n{notes}");
    let grouped = notes.replace("\n    ", " ");
    assert!(
        grouped.contains("cycles, instructions, cache-references, cache-misses: no PMU in this VM"),
        "{notes}"
    );
    // -v gives every note in full.
    let v = text("doctor", &snap, 80, &["-v"]);
    let vnotes = v.split("\nNotes").nth(1).unwrap().replace("\n    ", " ");
    for n in pmu {
        assert!(vnotes.contains(n), "-v should print {n}:\n{vnotes}");
    }
}
