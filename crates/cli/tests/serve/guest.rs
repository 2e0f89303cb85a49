//! Guest side: the metrics against this machine's /proc/stat and promtool,
//! hostile counters through a rewritten --root, bad flags, the node_exporter
//! textfile, an unprivileged run.

use super::helpers::*;
use crate::common::*;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn metrics_follow_this_machine_and_pass_promtool() {
    if !require(have("promtool"), "promtool (apt install prometheus)") {
        return;
    }
    let s = Serve::start(&["--rate", "10", "--findings-interval", "2s"]);
    std::thread::sleep(Duration::from_millis(1500));
    // The exported values come from a sample at most 100 ms old: between a
    // reading taken well before the scrape and one taken after it.
    let before = proc_stat(Path::new("/"));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let resp = get(s.addr, "/metrics", None);
    let after = proc_stat(Path::new("/"));
    assert_eq!(resp.status, 200);
    assert!(resp
        .head
        .contains("content-type: text/plain; version=0.0.4; charset=utf-8"));
    let m = Exposition::parse(&resp.body);

    let cpus: BTreeSet<u32> = m
        .starting("stealscope_cpu_seconds_total{")
        .iter()
        .map(|(k, _)| {
            let c = k.split("cpu=\"").nth(1).unwrap();
            c[..c.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    assert_eq!(cpus, after.keys().copied().collect(), "one series per CPU");
    for (cpu, b) in &before {
        let anomalies = m
            .get(&format!("stealscope_stat_anomalies_total{{cpu=\"{cpu}\"}}"))
            .unwrap();
        for (i, mode) in MODES.iter().enumerate() {
            let v = m
                .get(&format!(
                    "stealscope_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"{mode}\"}}"
                ))
                .unwrap_or_else(|| panic!("cpu {cpu} mode {mode} missing"));
            // Clamping (a counted anomaly) may only lower a total.
            let lo = if anomalies == 0.0 { b[i] - 1e-6 } else { 0.0 };
            let hi = after[cpu][i] + 1e-6;
            assert!(
                v >= lo && v <= hi,
                "cpu {cpu} {mode}: exported {v}, /proc/stat {} .. {}",
                b[i],
                after[cpu][i]
            );
        }
        // The histogram: cumulative buckets ending in +Inf = count, about
        // one window per 100 ms since start.
        let count = m
            .get(&format!(
                "stealscope_steal_window_ratio_count{{cpu=\"{cpu}\"}}"
            ))
            .unwrap();
        let elapsed = 2.0 + t0.elapsed().as_secs_f64();
        assert!(
            count >= 5.0 * elapsed * 0.5 && count <= 10.0 * elapsed * 1.2,
            "{count} windows in ~{elapsed:.1} s"
        );
        let buckets: Vec<f64> = m
            .starting("stealscope_steal_window_ratio_bucket{")
            .iter()
            .filter(|(k, _)| k.ends_with(&format!("cpu=\"{cpu}\"}}")))
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(buckets.len(), 9);
        let inf = m
            .get(&format!(
                "stealscope_steal_window_ratio_bucket{{le=\"+Inf\",cpu=\"{cpu}\"}}"
            ))
            .unwrap();
        assert_eq!(inf, count);
        assert!(buckets.iter().all(|b| *b <= inf));
    }
    assert_eq!(
        m.get(&format!(
            "stealscope_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        Some(1.0)
    );
    promtool_check_metrics(&resp.body);

    // Prometheus gets OpenMetrics with the same series.
    let om = get(
        s.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert!(om
        .head
        .contains("content-type: application/openmetrics-text"));
    assert!(om.body.ends_with("# EOF\n"));
    assert!(om.body.contains("# TYPE stealscope_cpu_seconds counter\n"));

    // Read-only: nothing but GET/HEAD of / and /metrics, no request bodies.
    let head = request(
        s.addr,
        "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let r = request(
            s.addr,
            &format!("{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(r.status, 405, "{method}");
        assert!(r.head.contains("allow: get, head"));
    }
    assert_eq!(get(s.addr, "/debug", None).status, 404);
    let with_body = request(
        s.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert_eq!(with_body.status, 413);
    assert_eq!(get(s.addr, "/", None).status, 200);
}

/// The kernel's counters may go backwards (migration, hotplug, bugs): the
/// exported ones do not. /proc/stat here is a file the test rewrites in
/// place (same length, so a concurrent read never sees half a number).
#[test]
fn counters_stay_monotonic_when_the_kernel_goes_backwards() {
    let root = RewrittenStat::new(500, 1000);
    let hz = clk_tck();
    let steal_of = |s: &Serve| steal_seconds(s).unwrap();
    let anomalies = |s: &Serve| {
        s.metrics()
            .get("stealscope_stat_anomalies_total{cpu=\"0\"}")
            .unwrap()
    };
    // 10 Hz: each 100 ms window is a histogram span of its own (shorter
    // windows are merged into ~100 ms spans, as steal.bursty judges them).
    let s = root.serve("10", 500);
    // Backwards by 400 ticks: the total holds, the anomaly is counted.
    root.write(100, 1000);
    wait_for("the anomaly", Duration::from_secs(5), || {
        (anomalies(&s) >= 1.0).then_some(())
    });
    assert_eq!(steal_of(&s), 500.0 / hz);
    // From the new base the counter advances again: one tick.
    root.write(101, 1000);
    wait_for("the advance", Duration::from_secs(5), || {
        (steal_of(&s) > 500.0 / hz).then_some(())
    });
    assert!((steal_of(&s) - 501.0 / hz).abs() < 1e-6);
    let m = s.metrics();
    let windows = |m: &Exposition, le: &str| {
        m.get(&format!(
            "stealscope_steal_window_ratio_bucket{{le=\"{le}\",cpu=\"0\"}}"
        ))
        .unwrap()
    };
    assert_eq!(
        windows(&m, "+Inf") - windows(&m, "0.0"),
        1.0,
        "one window with steal"
    );
    let n = anomalies(&s);
    // 50 ticks (0.5 s) of steal within one 100 ms window is more than wall
    // time: clamped to that window's length, counted, a window of all steal.
    root.write(151, 1000);
    wait_for("the clamp", Duration::from_secs(5), || {
        (anomalies(&s) > n).then_some(())
    });
    let m = s.metrics();
    let added = steal_of(&s) - 501.0 / hz;
    assert!(
        added > 0.0 && added < 0.3,
        "clamped to the window: {added} s"
    );
    assert_eq!(windows(&m, "+Inf") - windows(&m, "0.95"), 1.0);
    let sum = m
        .get("stealscope_steal_window_ratio_sum{cpu=\"0\"}")
        .unwrap();
    assert!(sum > 1.0 && sum < 1.5, "a share of 1 plus one tick: {sum}");
}

#[test]
fn bad_flags_are_one_line_errors() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["--listen", &addr], "--listen"),
        (&["--rate", "0"], "--rate"),
        (&["--textfile", "/tmp/x.txt"], "/tmp/x.txt"),
        (&["--root", "/nonexistent"], "/nonexistent"),
    ];
    for (args, needle) in cases {
        let out = bin().arg("serve").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn textfile_is_read_by_node_exporter() {
    if !require(
        have("prometheus-node-exporter"),
        "node_exporter (apt install prometheus-node-exporter)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stealscope.prom");
    let file_arg = file.to_str().unwrap().to_string();
    let _s = Serve::start(&["--textfile", &file_arg, "--textfile-interval", "500ms"]);
    wait_for("the textfile", Duration::from_secs(10), || {
        let t = std::fs::read_to_string(&file).ok()?;
        (t.contains("stealscope_cpu_seconds_total{")
            && t.contains("stealscope_steal_window_ratio_bucket{"))
        .then_some(())
    });
    // Only ever the complete file: no temporary left with the .prom suffix.
    let proms: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "prom"))
        .collect();
    assert_eq!(proms.len(), 1);

    let port = free_port();
    let _ne = Reaped(
        Command::new("prometheus-node-exporter")
            .args([
                "--collector.disable-defaults",
                "--collector.textfile",
                &format!("--collector.textfile.directory={}", dir.path().display()),
                &format!("--web.listen-address=127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node_exporter"),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let m = wait_for("node_exporter", Duration::from_secs(15), || {
        let s = try_get(addr, "/metrics")?;
        (s.status == 200).then(|| Exposition::parse(&s.body))
    });
    assert_eq!(m.get("node_textfile_scrape_error"), Some(0.0));
    let ours = proc_stat(Path::new("/"));
    assert_eq!(
        m.starting("stealscope_cpu_seconds_total{").len(),
        ours.len() * 8
    );
    assert!(m.names().contains("stealscope_steal_window_ratio_bucket"));
}

#[test]
fn runs_without_root_for_the_guest_side() {
    if !require(is_root(), "root (to drop to uid 65534)") {
        return;
    }
    let (_dir, binary) = world_runnable_binary();
    let s = Serve::spawn(
        nobody_command(&binary, &[]),
        &["--findings-interval", "1s", "--rate", "20"],
    );
    // setpriv execs: the serving process itself runs as nobody.
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid.split_whitespace().skip(1).all(|u| u == "65534"),
        "{uid}"
    );
    let m = wait_for("findings as nobody", Duration::from_secs(10), || {
        let m = s.metrics();
        m.names().contains("stealscope_finding").then_some(m)
    });
    let ours = proc_stat(Path::new("/"));
    assert_eq!(
        m.starting("stealscope_cpu_seconds_total{").len(),
        ours.len() * 8
    );
    assert!(
        m.get("stealscope_steal_window_ratio_count{cpu=\"0\"}")
            .unwrap()
            > 0.0
    );
    assert!(!s.stderr.lock().unwrap().contains("/proc/stat"));
}

/// Metric label of a counter as `doctor --json` names it (perf's name).
fn hw_event(perf_name: &str) -> String {
    perf_name
        .trim_start_matches("msr/")
        .trim_end_matches('/')
        .replace('-', "_")
}

/// The hardware counters `doctor` finds on this machine are exported, the
/// ones it finds missing are exported as missing, and the TSC (when the msr
/// PMU has it) ticks at this machine's TSC rate.
#[test]
fn hardware_counters_follow_what_doctor_finds() {
    if !require(is_root(), "root (perf_event_open of the msr PMU)") {
        return;
    }
    let out = bin()
        .args(["doctor", "--interval", "1s", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let counters = &doc["hardware"]["counters"];
    let names = |key: &str, field: Option<&str>| -> BTreeSet<String> {
        counters[key]
            .as_array()
            .unwrap_or_else(|| panic!("doctor has no hardware.counters.{key}"))
            .iter()
            .map(|v| hw_event(field.map_or(v, |f| &v[f]).as_str().unwrap()))
            .collect()
    };
    let opened = names("opened", None);
    let missing = names("missing", Some("counter"));

    let s = Serve::start(&["--rate", "10"]);
    std::thread::sleep(Duration::from_millis(1500));
    let first = (Instant::now(), s.metrics());
    std::thread::sleep(Duration::from_secs(2));
    let second = (Instant::now(), s.metrics());
    let cpus: BTreeSet<u32> = proc_stat(Path::new("/")).keys().copied().collect();

    let exported_missing: BTreeSet<String> = second
        .1
        .starting("stealscope_hw_event_unavailable{")
        .iter()
        .map(|(k, _)| {
            let e = k.split("event=\"").nth(1).unwrap();
            e[..e.find('"').unwrap()].to_string()
        })
        .collect();
    assert_eq!(exported_missing, missing, "missing counters as doctor says");
    for event in &opened {
        for cpu in &cpus {
            let key = format!("stealscope_cpu_hw_events_total{{cpu=\"{cpu}\",event=\"{event}\"}}");
            let a = first.1.get(&key).unwrap_or_else(|| panic!("{key} missing"));
            let b = second.1.get(&key).unwrap();
            assert!(b >= a, "{key} went from {a} to {b}");
            if event == "tsc" {
                // The TSC ticks at a constant rate on every CPU, idle or not.
                let hz = (b - a) / (second.0 - first.0).as_secs_f64();
                let mhz = cpuinfo_mhz().expect("cpu MHz in /proc/cpuinfo");
                assert!(
                    hz / 1e6 > 0.5 * mhz && hz / 1e6 < 2.0 * mhz,
                    "cpu {cpu}: TSC at {:.0} MHz, cpuinfo says {mhz} MHz",
                    hz / 1e6
                );
            }
        }
    }
    for event in &missing {
        assert!(
            second
                .1
                .starting("stealscope_cpu_hw_events_total{")
                .iter()
                .all(|(k, _)| !k.contains(&format!("event=\"{event}\""))),
            "{event} is missing yet exported"
        );
    }
}

fn cpuinfo_mhz() -> Option<f64> {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()?
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}
