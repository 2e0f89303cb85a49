//! Every snapshot fixture under fixtures/snapshots is analysed offline and
//! checked against its expect.json (what must fire, what must not, the
//! highest severity allowed); every malformed one under fixtures/bad must
//! give exit 2 and one line naming the file.

mod common;
use common::*;
use serde_json::Value;

fn fixture_dirs(kind: &str) -> Vec<std::path::PathBuf> {
    let dir = repo().join("fixtures").join(kind);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expect.json").exists())
        .collect();
    v.sort();
    v
}

/// What a fixture directory holds to analyse: its packed snapshot
/// (fixtures/gen/pack.py), or the directory itself (fixtures/bad).
fn snapshot_of(dir: &std::path::Path) -> std::path::PathBuf {
    let packed = dir.join("snapshot.tar.gz");
    if packed.exists() {
        packed
    } else {
        dir.to_path_buf()
    }
}

fn expect(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p.join("expect.json")).unwrap()).unwrap()
}

/// Phrases of the guest wording of guest rules (each occurs in some guest
/// finding); a host that is not itself a guest must never read them.
const GUEST_PHRASES: &[&str] = &[
    "the vcpu has",
    "this guest",
    "the provider",
    "guest kernel",
    "emulated by the hypervisor",
    "each a vm exit",
    "is a vm exit unless",
    "guest elevator",
    "a large vm buffers",
];

/// On host fixtures: the role is host only, findings of guest rules use the
/// host wording, and a storm is one finding per source, not one per CPU.
fn host_wording_failures(name: &str, report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if report["roles"] != serde_json::json!(["host"]) {
        out.push(format!(
            "{name}: roles {} (expected [\"host\"])",
            report["roles"]
        ));
    }
    let findings = report["findings"].as_array().unwrap();
    for f in findings {
        let id = f["id"].as_str().unwrap();
        if id.starts_with("host.") {
            continue;
        }
        let text = format!("{} {}", f["title"], f["remedy"]).to_lowercase();
        for p in GUEST_PHRASES {
            if text.contains(p) {
                out.push(format!("{name}: {id} speaks of a guest on a host: {p:?}"));
            }
        }
    }
    let mut storms: Vec<&str> = findings
        .iter()
        .filter(|f| f["id"] == "irq.storm")
        .map(|f| f["evidence"]["dominant"].as_str().unwrap())
        .collect();
    let n = storms.len();
    storms.sort_unstable();
    storms.dedup();
    if storms.len() != n {
        out.push(format!("{name}: several irq.storm findings for one source"));
    }
    out
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn snapshot_fixtures_meet_expectations() {
    let dirs = fixture_dirs("snapshots");
    assert!(
        dirs.len() >= 10,
        "expected the fixture set, found {}",
        dirs.len()
    );
    let mut failures = Vec::new();
    let mut fired_somewhere = std::collections::BTreeSet::new();
    let mut silent_somewhere = std::collections::BTreeSet::new();
    let mut guest_worded = std::collections::BTreeSet::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let exp = expect(dir);
        let snap = snapshot_of(dir);
        let out = run(&["doctor", "--json", "--snapshot", snap.to_str().unwrap()]);
        if !out.status.success() {
            failures.push(format!(
                "{name}: exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_valid(&report);
        let ids = finding_ids(&report);
        if exp["role"] == "host" {
            failures.extend(host_wording_failures(&name, &report));
        } else {
            // The guest wording is what the host check looks for: prove it is there.
            for f in report["findings"].as_array().unwrap() {
                let text = format!("{} {}", f["title"], f["remedy"]).to_lowercase();
                if GUEST_PHRASES.iter().any(|p| text.contains(p)) {
                    guest_worded.insert(f["id"].as_str().unwrap().to_string());
                }
            }
        }
        for id in strs(&exp["fires"]) {
            if ids.contains(&id) {
                fired_somewhere.insert(id);
            } else {
                failures.push(format!("{name}: expected {id} to fire; got {ids:?}"));
            }
        }
        for id in strs(&exp["not_fires"]) {
            if ids.contains(&id) {
                failures.push(format!("{name}: {id} must not fire"));
            } else {
                silent_somewhere.insert(id);
            }
        }
        let rank = |s: &str| ["info", "warning", "critical"].iter().position(|x| *x == s);
        let worst = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| rank(f["severity"].as_str().unwrap()))
            .max();
        match (&exp["max_severity"], worst) {
            (Value::Null, Some(_)) if exp.get("max_severity").is_some() => {
                failures.push(format!("{name}: expected no findings, got {ids:?}"))
            }
            (Value::String(s), Some(w)) if rank(s).is_some_and(|m| w > m) => {
                failures.push(format!("{name}: severity above {s}: {ids:?}"))
            }
            _ => {}
        }
        // Evidence the fixture pins down: {"finding id": {"key": value}} (numbers within 1e-3).
        if let Some(ev) = exp["evidence"].as_object() {
            for (id, want) in ev {
                let Some(f) = report["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["id"] == id.as_str())
                else {
                    failures.push(format!("{name}: no {id} to check evidence on"));
                    continue;
                };
                for (k, v) in want.as_object().unwrap() {
                    let got = &f["evidence"][k];
                    let same = match (got.as_f64(), v.as_f64()) {
                        (Some(a), Some(b)) => (a - b).abs() <= 1e-3,
                        _ => got == v,
                    };
                    if !same {
                        failures.push(format!("{name}: {id} evidence {k} = {got}, expected {v}"));
                    }
                }
            }
        }
        // Values the fixture pins down: [JSON pointer, value].
        for pair in exp["report_has"].as_array().into_iter().flatten() {
            let (ptr, want) = (pair[0].as_str().unwrap(), &pair[1]);
            if report.pointer(ptr) != Some(want) {
                failures.push(format!(
                    "{name}: {ptr} is {:?}, expected {want}",
                    report.pointer(ptr)
                ));
            }
        }
        let notes = report["notes"].to_string();
        for frag in strs(&exp["notes_contain"]) {
            if !notes.contains(&frag) {
                failures.push(format!("{name}: notes should mention {frag}: {notes}"));
            }
        }
        // Text output must render too, and never be empty.
        let text = run(&["doctor", "--snapshot", snap.to_str().unwrap()]);
        assert!(
            text.status.success() && text.stdout.len() > 100,
            "{name}: text report"
        );
        // On a host the text report shows the VM table, every VM by name.
        if let Some(vms) = report["host"]["vms"].as_array() {
            let t = String::from_utf8_lossy(&text.stdout);
            assert!(
                t.contains("\nHost: "),
                "{name}: host table missing from text"
            );
            for vm in vms {
                let vm_name = vm["name"].as_str().unwrap();
                let shown: String = vm_name.chars().take(18).collect();
                assert!(t.contains(&shown), "{name}: VM {vm_name} missing from text");
            }
        }
    }
    assert!(
        failures.is_empty(),
        "fixture failures:\n{}",
        failures.join("\n")
    );
    // The phrases the host check forbids do occur in guest findings of rules
    // that also fire on host fixtures (else the check would prove nothing).
    for id in [
        "irq.storm",
        "clock.unstable",
        "mitigation.kpti-without-pcid",
        "tuning.cpufreq-governor",
        "tuning.dirty-writeback",
    ] {
        assert!(
            guest_worded.contains(id),
            "no guest fixture shows the guest wording of {id}: {guest_worded:?}"
        );
    }
    // Every guest rule (except those that need probes or a PMU) is seen both firing and silent.
    for id in [
        "steal.busy",
        "steal.idle",
        "steal.bursty",
        "steal.ipc-collapse",
        "steal.counter-anomaly",
        "idle.haltpoll-inactive",
        "idle.deep-cstates",
        "clock.unstable",
        "mitigation.kpti-without-pcid",
        "irq.storm",
        "tuning.io-scheduler",
        "tuning.cpufreq-governor",
        "tuning.dirty-writeback",
        "host.steal.busy",
        "host.steal.idle",
        "host.idle-vm-penalty",
        "host.numa-balancing",
        "host.vm-spans-nodes",
        "host.cgroup-weight-unfair",
        "host.kvmclock-ipi-storm",
        "host.no-ept",
        "host.hlt-exits-dominant",
        "host.swap-pressure",
    ] {
        assert!(fired_somewhere.contains(id), "no fixture makes {id} fire");
        assert!(
            silent_somewhere.contains(id),
            "no fixture checks that {id} stays silent"
        );
    }
}

#[test]
fn malformed_snapshots_exit_2_with_one_line_naming_the_file() {
    let dirs = fixture_dirs("bad");
    assert!(
        dirs.len() >= 5,
        "expected malformed fixtures, found {}",
        dirs.len()
    );
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let exp = expect(&dir);
        let out = run(&["doctor", "--json", "--snapshot", dir.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{name}: exit code, stderr {err}"
        );
        assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: one line: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        for frag in strs(&exp["error_contains"]) {
            assert!(
                err.contains(&frag),
                "{name}: error should contain {frag:?}: {err}"
            );
        }
    }
}

#[test]
fn missing_snapshot_path_and_non_snapshot_file() {
    let out = run(&["doctor", "--snapshot", "/nonexistent/snap"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/snap"));
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("x.tar.gz");
    std::fs::write(&f, b"not gzip at all").unwrap();
    let out = run(&["doctor", "--snapshot", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("x.tar.gz") && err.lines().count() == 1,
        "{err}"
    );
}
