//! A real Prometheus scraping serve with the shipped rules.

use super::helpers::*;
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub(super) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn api(addr: SocketAddr, path: &str) -> Value {
    let r = get(addr, path, None);
    let v: Value = serde_json::from_str(&r.body)
        .unwrap_or_else(|e| panic!("{path}: {e}: {} {}", r.status, r.body));
    assert_eq!(v["status"], "success", "{path}: {v}");
    v["data"].clone()
}

pub(super) fn query(addr: SocketAddr, q: &str) -> Vec<Value> {
    api(addr, &format!("/api/v1/query?query={}", urlencode(q)))["result"]
        .as_array()
        .unwrap()
        .clone()
}

pub(super) fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// A real Prometheus scraping `target` every second with the shipped rules
/// evaluated every second; stopped on drop.
pub(super) fn start_prometheus(dir: &Path, target: SocketAddr) -> (Reaped, SocketAddr) {
    let rules = repo().join("deploy/prometheus/rules.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
         scrape_configs:\n  - job_name: stealscope\n    static_configs:\n      - targets: ['{target}']\n",
        rules.display(),
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let prom: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={prom}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus");
    (Reaped(child), prom)
}

#[test]
fn prometheus_scrapes_serve_and_loads_the_rules() {
    if !require(
        have("prometheus") && have("promtool"),
        "prometheus and promtool (apt install prometheus)",
    ) {
        return;
    }
    // Not beside the tests that pin busy VMs and hogs on both CPUs: a
    // starved sampler or scrape skews a 10 s rate() by over 10 % (a CI run
    // saw 1.149 s/s per CPU).
    let _turn = vm_turn();
    let s = Serve::start(&["--findings-interval", "2s"]);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = start_prometheus(dir.path(), s.addr);
    wait_for("prometheus up", Duration::from_secs(30), || {
        let r = try_get(prom, "/api/v1/query?query=up%3D%3D1")?;
        r.body.contains("\"job\":\"stealscope\"").then_some(())
    });
    let start = proc_stat(Path::new("/"));
    std::thread::sleep(Duration::from_secs(12));
    let end = proc_stat(Path::new("/"));

    // Every CPU of this machine, each accounting for one second per second.
    let per_cpu = query(
        prom,
        "sum by (cpu) (rate(stealscope_cpu_seconds_total[10s]))",
    );
    assert_eq!(per_cpu.len(), end.len(), "{per_cpu:?}");
    for c in &per_cpu {
        let v = value(c);
        assert!(
            (v - 1.0).abs() < 0.1,
            "CPU {} sums to {v} s/s",
            c["metric"]["cpu"]
        );
    }
    // Steal as Prometheus sees it against the test's own /proc/stat reading
    // of the same 12 s (both in CPU-seconds per second).
    let ours: f64 = end.iter().map(|(c, v)| v[7] - start[c][7]).sum::<f64>() / 12.0;
    let steal = query(
        prom,
        "sum(rate(stealscope_cpu_seconds_total{mode=\"steal\"}[10s]))",
    );
    assert!(
        (value(&steal[0]) - ours).abs() < 0.05,
        "steal {} vs /proc/stat {ours}",
        value(&steal[0])
    );
    // Recording rules evaluated over the served series.
    let rec = query(prom, "instance:stealscope_steal_ratio:rate1m");
    assert_eq!(rec.len(), 1, "{rec:?}");
    assert!((0.0..=1.0).contains(&value(&rec[0])));
    assert_eq!(
        query(prom, "count(cpu:stealscope_steal_ratio:rate1m)").len(),
        1
    );
    let busy = value(&query(prom, "instance:stealscope_busy_ratio:rate1m")[0]);
    assert!((0.0..=1.0).contains(&busy));
    let info = query(prom, "stealscope_build_info");
    assert_eq!(info[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));

    // Every rule group of the shipped file loaded and healthy.
    let shipped = std::fs::read_to_string(repo().join("deploy/prometheus/rules.yml")).unwrap();
    let want: BTreeSet<&str> = shipped
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .map(|n| n.trim_matches('"'))
        .collect();
    assert!(want.len() >= 2, "{want:?}");
    let groups = api(prom, "/api/v1/rules")["groups"].clone();
    let names: BTreeSet<&str> = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, want);
    for g in groups.as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_eq!(r["health"], "ok", "{r}");
        }
    }

    // Findings of the periodic rule runs reach Prometheus: the configuration
    // findings that `doctor` reports on this machine (they do not depend on
    // the moment) are among them.
    let doctor = json(&run(&["doctor", "--json", "--interval", "1s"]));
    let stable: BTreeSet<String> = finding_ids(&doctor)
        .into_iter()
        .filter(|id| id.starts_with("tuning.") || id.starts_with("mitigation."))
        .collect();
    let served: BTreeSet<String> = query(prom, "stealscope_finding == 1")
        .iter()
        .map(|f| f["metric"]["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        stable.is_subset(&served),
        "doctor {stable:?} vs served {served:?}"
    );

    // Every dashboard expression parses and runs; the drill-down of this
    // machine's CPUs has data; every value a panel draws fits its unit.
    let instance = s.addr.to_string();
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard(), &mut exprs);
    assert!(exprs.len() >= 15);
    for e in &exprs {
        if e.starts_with("label_values(") {
            continue;
        }
        let q = e
            .replace("$instance", &instance)
            .replace("$__rate_interval", "10s");
        let r = query(prom, &q);
        let guest_panel = q.contains("cpu:stealscope_steal_ratio")
            || q.contains("sum by (mode)")
            || q.contains("stealscope_build_info");
        assert!(!guest_panel || !r.is_empty(), "no data for {q}");
    }
    let mut checked = 0;
    for panel in dashboard_panels(&dashboard()) {
        let unit = panel["fieldConfig"]["defaults"]["unit"]
            .as_str()
            .unwrap_or("none");
        let kind = panel["type"].as_str().unwrap_or("");
        for t in panel["targets"].as_array().into_iter().flatten() {
            let q = t["expr"]
                .as_str()
                .unwrap()
                .replace("$instance", &instance)
                .replace("$__rate_interval", "10s");
            for sample in query(prom, &q) {
                let v = value(&sample);
                let title = panel["title"].as_str().unwrap_or("?");
                assert!(
                    unit_fits(kind, unit, v),
                    "panel {title:?} ({kind}, unit {unit}) draws {v} from {q}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked} values checked");
}

/// Every panel, rows' nested panels included.
pub(super) fn dashboard_panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Whether a value this machine serves is sensible on an axis of `unit`:
/// ratios within 0-1, durations within a minute, frequencies (the TSC) between 1 MHz and 100 GHz,
/// CPU counts within the CPUs of a large host, and unitless figures (IPC,
/// counts of machines or findings) small. Tables show labels, not values.
fn unit_fits(kind: &str, unit: &str, v: f64) -> bool {
    match (kind, unit) {
        ("table", _) | ("heatmap", _) => v.is_finite() && v >= 0.0,
        (_, "percentunit") => (0.0..=1.0 + 1e-9).contains(&v),
        (_, "hertz") => (1e6..=1e11).contains(&v),
        (_, "short") => (0.0..=4096.0).contains(&v),
        (_, "none") => (0.0..=20.0).contains(&v),
        // Durations (wait-episode quantiles): up to the longest bucket.
        (_, "s") => (0.0..=60.0).contains(&v),
        _ => false,
    }
}
