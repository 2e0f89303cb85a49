//! `stealscope report` on a real snapshot of this machine, opened in headless
//! Chromium: the screenshot is not blank, the plots and every finding of
//! `doctor --snapshot --json` are in the DOM after load, the heat map has a
//! cell per CPU and window of the snapshot, and Chromium's net log shows no
//! request (a control page proves the log would show one). Bad input exits
//! 2 with one line.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

const CHROMIUM: &str = "chromium-headless-shell";
/// Tall enough for the whole page on one screenshot.
const WINDOW: (u32, u32) = (1200, 10_000);
/// Columns of a time plot at most (crates/output/src/html/bins.rs).
const MAX_BINS: usize = 200;
const PLOTS: [&str; 7] = [
    "plot-steal-heatmap",
    "plot-busy-idle-steal",
    "plot-steal-bursts",
    "plot-hw-counters",
    "plot-irq-rate",
    "plot-vcpu-wait",
    "plot-probe-latency",
];

fn chromium_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(CHROMIUM))
            .find(|p| p.is_file())
    })
}

/// One headless Chromium run on `url` with a fresh profile, as root needs
/// it (--no-sandbox); `extra` selects what it does (--dump-dom, ...).
fn chromium(bin: &Path, url: &str, extra: &[String]) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(bin)
        .args([
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.path().display()),
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The DOM after loading `url` and Chromium's console (stderr), with the
/// net log of that load in `net`.
fn dom_and_net_log(bin: &Path, url: &str, net: &Path) -> (String, String) {
    let out = chromium(
        bin,
        url,
        &[
            "--dump-dom".into(),
            format!("--log-net-log={}", net.display()),
        ],
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.canonicalize().unwrap().display())
}

/// Requests in a Chromium net log: the URLs it names and the network
/// events (connects, DNS, URL request jobs) it holds.
fn net_activity(log: &Path) -> (Vec<String>, Vec<String>) {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(log).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let names: std::collections::HashMap<u64, String> = v["constants"]["logEventTypes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (n.as_u64().unwrap(), k.clone()))
        .collect();
    let mut urls = Vec::new();
    let mut events = Vec::new();
    for e in v["events"].as_array().unwrap() {
        if let Some(u) = e["params"]["url"].as_str() {
            urls.push(u.to_string());
        }
        let name = &names[&e["type"].as_u64().unwrap()];
        let network = [
            "URL_REQUEST_START_JOB",
            "TCP_CONNECT",
            "UDP_CONNECT",
            "SOCKET_CONNECT",
        ]
        .iter()
        .any(|n| name == n)
            || name.starts_with("HOST_RESOLVER")
            || name.starts_with("HTTP_STREAM");
        if network {
            events.push(name.clone());
        }
    }
    (urls, events)
}

/// (distinct colours, share of the commonest) of a screenshot.
fn colours(png_path: &Path) -> (usize, f64, Vec<[u8; 3]>) {
    let file = std::io::BufReader::new(std::fs::File::open(png_path).unwrap());
    let mut reader = png::Decoder::new_with_limits(file, png::Limits { bytes: 512 << 20 })
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let mut counts: std::collections::HashMap<[u8; 3], usize> = Default::default();
    for px in buf[..info.buffer_size()].chunks_exact(step) {
        *counts.entry([px[0], px[1], px[2]]).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    let top = counts.values().copied().max().unwrap_or(0);
    let mut common: Vec<([u8; 3], usize)> = counts.into_iter().collect();
    common.sort_by_key(|c| std::cmp::Reverse(c.1));
    let n = common.len();
    (
        n,
        top as f64 / total as f64,
        common.iter().filter(|c| c.1 >= 500).map(|c| c.0).collect(),
    )
}

fn report(input: &Path, page: &Path) -> Output {
    run(&[
        "report",
        input.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ])
}

/// CPUs and windows of a snapshot's samples.jsonl, read here.
fn cpus_and_windows(snap: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(snap.join("samples.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cpus = lines[0]["stat"]
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    (cpus, lines.len() - 1)
}

#[test]
fn report_of_this_machine_in_chromium() {
    let Some(chromium_bin) = chromium_path() else {
        require(
            false,
            "chromium-headless-shell (scripts/test.sh installs it)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let out = run(&["snapshot", "-o", snap.to_str().unwrap(), "--interval", "2s"]);
    assert_ok(&out);
    let html = dir.path().join("report.html");
    let out = report(&snap, &html);
    assert_ok(&out);
    let doctor = json(&run(&[
        "doctor",
        "--snapshot",
        snap.to_str().unwrap(),
        "--json",
    ]));
    let ids = finding_ids(&doctor);
    let url = file_url(&html);

    // DOM after load, with the net log of that load.
    let net = dir.path().join("net.json");
    let (dom_text, console) = dom_and_net_log(&chromium_bin, &url, &net);
    for id in PLOTS {
        assert!(
            dom_text.contains(&format!("id=\"{id}\"")),
            "plot {id} not in DOM"
        );
    }
    assert_eq!(
        dom_text.matches("<article class=\"finding").count(),
        ids.len(),
        "findings in DOM vs doctor {ids:?}"
    );
    for id in &ids {
        assert!(
            dom_text.contains(&format!("data-finding-id=\"{id}\"")),
            "finding {id} not in DOM"
        );
    }
    let (cpus, windows) = cpus_and_windows(&snap);
    let heat = dom_text
        .split("<svg class=\"heatmap steal\"")
        .nth(1)
        .and_then(|s| s.split("</svg>").next())
        .expect("steal heat map svg");
    assert_eq!(
        heat.matches("<rect class=\"cell").count(),
        cpus * windows.min(MAX_BINS),
        "{cpus} CPUs x {windows} windows"
    );

    // Nothing but the file itself: no request, connection or DNS lookup,
    // and nothing the page tried that the CSP had to block.
    let (urls, events) = net_activity(&net);
    assert!(
        urls.iter().all(|u| *u == url),
        "requests besides the file: {urls:?}"
    );
    assert!(events.is_empty(), "network events: {events:?}");
    assert!(
        !console.contains("Content Security Policy"),
        "the page tried something the CSP blocked: {console}"
    );

    // The control: the same log does show a page that fetches (loopback,
    // port 9: refused at once, nothing leaves the machine).
    let control = dir.path().join("control.html");
    std::fs::write(
        &control,
        "<!doctype html><title>c</title><img src=\"http://127.0.0.1:9/probe.png\">",
    )
    .unwrap();
    let net2 = dir.path().join("net2.json");
    dom_and_net_log(&chromium_bin, &file_url(&control), &net2);
    let (urls, events) = net_activity(&net2);
    assert!(
        urls.iter().any(|u| u == "http://127.0.0.1:9/probe.png") && !events.is_empty(),
        "the net log missed the control's request: {urls:?} {events:?}"
    );

    // The screenshot is a page, not a blank: many colours, no single one
    // covering it, and the stacked plot's colours among the common ones.
    let shot = dir.path().join("shot.png");
    chromium(
        &chromium_bin,
        &url,
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
        ],
    );
    let (distinct, top_share, common) = colours(&shot);
    assert!(distinct >= 32, "{distinct} colours: blank?");
    assert!(
        top_share < 0.97,
        "one colour covers {:.1}%",
        100.0 * top_share
    );
    // busy (#4a78b0) or idle (#e6e6e6) fills most of the stacked plot.
    assert!(
        common.contains(&[0x4a, 0x78, 0xb0]) || common.contains(&[0xe6, 0xe6, 0xe6]),
        "stacked plot colours not drawn: {common:?}"
    );
}

/// `report` of `sim --json` output (issue 8's plot): in Chromium, one
/// figure per simulated case with one bar per vCPU of that case, each bar's
/// hover text carrying the JSON's mean for that vCPU, a comparison row per
/// case, and no request leaving the page.
#[test]
fn report_of_a_simulation_in_chromium() {
    let Some(chromium_bin) = chromium_path() else {
        require(
            false,
            "chromium-headless-shell (scripts/test.sh installs it)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/talk-cgroups.toml");
    let out = run(&["sim", scenario.to_str().unwrap(), "--json"]);
    assert_ok(&out);
    let sim: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sim_path = dir.path().join("sim.json");
    std::fs::write(&sim_path, &out.stdout).unwrap();
    let html = dir.path().join("sim.html");
    let out = report(&sim_path, &html);
    assert_ok(&out);

    let url = file_url(&html);
    let net = dir.path().join("net.json");
    let (dom, _) = dom_and_net_log(&chromium_bin, &url, &net);
    let cases = sim["cases"].as_array().unwrap();
    assert!(cases.len() >= 2);
    assert_eq!(dom.matches("<tr class=\"sim-case\"").count(), cases.len());
    for (i, case) in cases.iter().enumerate() {
        let section = dom
            .split(&format!("id=\"sim-case-{i}\""))
            .nth(1)
            .and_then(|s| s.split("</section>").next())
            .unwrap_or_else(|| panic!("case {i} not in DOM"));
        let vcpus: Vec<&Value> = case["vms"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|vm| vm["vcpus"].as_array().unwrap())
            .collect();
        let bars: Vec<&str> = section.split("<rect class=\"bar\"").skip(1).collect();
        assert_eq!(bars.len(), vcpus.len(), "case {i}: one bar per vCPU");
        for (bar, v) in bars.iter().zip(&vcpus) {
            let mean = v["steal_pct"]["mean"].as_f64().unwrap();
            let hover = bar.split("<title>").nth(1).unwrap();
            let shown: f64 = hover
                .split("steal ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no steal value in {hover}"));
            assert!(
                (shown - mean).abs() <= 0.05,
                "case {i}: bar says {shown}, JSON {mean}"
            );
        }
    }
    let (urls, events) = net_activity(&net);
    assert!(urls.iter().all(|u| *u == url), "requests: {urls:?}");
    assert!(events.is_empty(), "network events: {events:?}");

    // A file naming the schema but not holding a simulation: one line, exit 2.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"schema":"stealscope/sim/1","cases":7}"#).unwrap();
    let out = report(&bad, &dir.path().join("bad.html"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.json") && err.contains("not simulator JSON"),
        "{err}"
    );
    assert!(!dir.path().join("bad.html").exists());
}

/// `report` of a recording (`record --probe wakeup`): the series only a
/// recording has are drawn (interrupt windows, probe latency) and the heat
/// map has a cell per CPU and window of the recording as `doctor --snapshot
/// --json` reads it (the same model).
#[test]
fn report_of_a_recording_draws_its_series() {
    if !require(
        is_root(),
        "root (the wakeup probe's SCHED_FIFO and memory lock)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.ssr");
    let out = run(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "--rate",
        "50",
        "--duration",
        "3s",
        "--probe",
        "wakeup",
        "--irq-rate",
        "5",
    ]);
    assert_ok(&out);
    let html = dir.path().join("r.html");
    let out = report(&rec, &html);
    assert_ok(&out);
    let page = std::fs::read_to_string(&html).unwrap();
    for id in ["plot-irq-rate", "plot-probe-latency", "plot-steal-heatmap"] {
        assert!(
            page.contains(&format!("<section class=\"plot\" id=\"{id}\"")),
            "{id} has no data"
        );
    }
    let doctor = json(&run(&[
        "doctor",
        "--snapshot",
        rec.to_str().unwrap(),
        "--json",
    ]));
    let cpus = doctor["summary"]["cpus"].as_array().unwrap().len();
    let heat = page
        .split("<svg class=\"heatmap steal\"")
        .nth(1)
        .and_then(|s| s.split("</svg>").next())
        .unwrap();
    let cells = heat.matches("<rect class=\"cell").count();
    assert_eq!(cells % cpus, 0, "{cells} cells for {cpus} CPUs");
    // 3 s at 50 Hz: about 150 windows, whatever deadlines a loaded machine missed.
    assert!(
        cells / cpus >= 50 && cells / cpus <= MAX_BINS,
        "{} columns",
        cells / cpus
    );
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out_html = dir.path().join("out.html");
    let garbage = dir.path().join("garbage.tar.gz");
    std::fs::write(&garbage, b"\x1f\x8b not really gzip").unwrap();
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures/bad"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 5);
    inputs.push(garbage);
    inputs.push(dir.path().join("missing"));
    for input in &inputs {
        let out = report(input, &out_html);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", input.display());
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        let name = input.file_name().unwrap().to_string_lossy();
        assert!(err.contains(&*name), "{err} does not name {name}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out_html.exists(), "wrote a page for {}", input.display());
    }
    // An output that cannot be written names itself.
    let good = repo().join("fixtures/snapshots/6.x-healthy/snapshot.tar.gz");
    let nowhere = dir.path().join("no/such/dir/r.html");
    let out = report(&good, &nowhere);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no/such/dir/r.html"), "{err}");
}

/// The who-stole table of a host snapshot whose sides carry the collector's
/// readings: each victim's seconds equal the sum of its vCPUs' wait_by rows
/// in `host --json` of the same snapshot.
#[test]
fn report_of_a_host_snapshot_has_the_who_stole_table() {
    let snap = repo().join("fixtures/snapshots/host-noisy-neighbor/snapshot.tar.gz");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("who.html");
    assert_ok(&report(&snap, &page));
    let html = std::fs::read_to_string(&page).unwrap();
    let at = html.find("id=\"who-stole\"").expect("who-stole section");
    let section = &html[at..at + html[at..].find("</section>").unwrap()];
    let host = json(&run(&[
        "host",
        "--json",
        "--snapshot",
        snap.to_str().unwrap(),
    ]));
    let top = &host["culprits"][0];
    let label = format!("{} (pid {})", top["name"].as_str().unwrap(), top["pid"]);
    assert!(section.contains(&label), "{label} not in {section}");
    for vm in host["vms"].as_array().unwrap() {
        let s: f64 = vm["vcpus"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["wait_by"].as_array().unwrap())
            .filter(|w| w["name"] == top["name"] && w["pid"] == top["pid"])
            .map(|w| w["seconds"].as_f64().unwrap())
            .sum();
        let cell = format!("<td>{s:.2}</td>");
        assert!(
            section.contains(&cell),
            "{} {cell} not in {section}",
            vm["name"]
        );
    }
}

/// On a host the page opens with the verdict and the VMs (issue 19): in
/// Chromium's DOM, the verdict names the top finding, then a real table
/// with one row per vCPU thread whose wait and run equal the JSON's, a bar
/// per vCPU, and per-VM evidence as a table, not a JSON string. The
/// screenshot is kept for a person to look at.
#[test]
fn report_of_a_host_opens_with_the_verdict_and_a_vm_table_in_chromium() {
    let Some(chromium_bin) = chromium_path() else {
        require(
            false,
            "chromium-headless-shell (scripts/test.sh installs it)",
        );
        return;
    };
    let snap = repo().join("fixtures/snapshots/host-busy-steal/snapshot.tar.gz");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("host.html");
    assert_ok(&report(&snap, &page));
    let r = json(&run(&[
        "doctor",
        "--json",
        "--snapshot",
        snap.to_str().unwrap(),
    ]));
    let net = dir.path().join("net.json");
    let (dom, _) = dom_and_net_log(&chromium_bin, &file_url(&page), &net);
    let at = |s: &str| dom.find(s).unwrap_or_else(|| panic!("no {s} in the page"));
    // Verdict, then the VMs, then what was measured on this machine.
    assert!(at(r#"id="verdict""#) < at(r#"id="host""#));
    assert!(at(r#"id="host""#) < at(r#"id="meta""#));
    let verdict = &dom[at(r#"id="verdict""#)..at(r#"id="host""#)];
    let top = r["findings"][0]["id"].as_str().unwrap();
    assert!(
        verdict.contains(top) && verdict.contains("CRITICAL"),
        "{verdict}"
    );
    // A real table: a <tr> per vCPU with the JSON's figures.
    let table = &dom[at(r#"<table class="vms" id="vm-table">"#)..];
    let table = &table[..table.find("</table>").unwrap()];
    let mut rows = 0;
    for vm in r["host"]["vms"].as_array().unwrap() {
        for c in vm["vcpus"].as_array().unwrap() {
            let tr = format!(
                r#"data-vm="{}" data-vcpu="{}""#,
                vm["name"].as_str().unwrap(),
                c["index"]
            );
            let row = &table[table.find(&tr).unwrap_or_else(|| panic!("no row {tr}"))..];
            let row = &row[..row.find("</tr>").unwrap()];
            let wait = format!("{:.1}", c["host_steal_pct"].as_f64().unwrap());
            let run = format!("{:.1}", c["util_pct"].as_f64().unwrap());
            assert!(
                row.contains(&format!(">{wait}<")) && row.contains(&format!(">{run}<")),
                "{row}"
            );
            rows += 1;
        }
    }
    assert_eq!(rows, 12);
    assert!(dom.matches(r#"class="bar""#).count() >= rows);
    // Per-VM evidence is a nested table, never a JSON string.
    let findings = &dom[at(r#"id="findings""#)..];
    let mut nested = 0;
    for ev in findings.split(r#"<table class="evidence">"#).skip(1) {
        let ev = &ev[..ev
            .find("</table>\n")
            .or_else(|| ev.find("</tbody></table></td>"))
            .unwrap_or(ev.len())
            .min(ev.find("<details").unwrap_or(ev.len()))];
        assert!(
            !ev.contains("[{\"") && !ev.contains("[{&quot;"),
            "JSON in the evidence: {ev}"
        );
        nested += ev.matches(r#"<table class="nested">"#).count();
    }
    assert!(nested >= 1, "no per-VM evidence table");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-host.png");
    chromium(
        &chromium_bin,
        &file_url(&page),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1100,1400".to_string(),
        ],
    );
    let (distinct, _, _) = colours(&shot);
    assert!(distinct >= 32, "{distinct} colours: blank?");
    eprintln!("screenshot: {}", shot.display());
}

/// Who stole it over time: a recording on a host with a busy 1-vCPU QEMU
/// (TCG) VM pinned beside a host loop carries culprits per scan; they add
/// up to the vCPU's schedstat wait the same recording holds, and the
/// report shows a real table naming the loop, and the stacked plot.
#[test]
fn recorded_culprits_reach_the_report() {
    use common::testenv::{self, testenv};
    use stealscope_readers::recording::{Record, RecordingReader};
    let chromium_bin = chromium_path();
    if !require(
        testenv::have_qemu() && chromium_bin.is_some(),
        "root, qemu (testenv/setup.sh) and chromium-headless-shell",
    ) {
        return;
    }
    let _vms = testenv::Vms;
    let pid: u64 = testenv("start-vm.sh", &["rwV", "1", "--busy", "1"])
        .parse()
        .unwrap();
    let tid = testenv::qmp_tids("rwV")[0];
    for args in [
        vec!["-a", "-p", "-c", "0", &pid.to_string()],
        vec!["-p", "-c", "1", &tid.to_string()],
    ] {
        let st = std::process::Command::new("taskset")
            .args(&args)
            .output()
            .unwrap();
        assert!(st.status.success());
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("recburn");
    std::fs::copy("/bin/sh", &exe).unwrap();
    let mut hog = std::process::Command::new("taskset")
        .args(["-c", "1"])
        .arg(&exe)
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let hog_run = |pid: u32| -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
        s.split_whitespace().next().unwrap().parse::<f64>().unwrap() / 1e9
    };
    let rec = dir.path().join("who.ssr");
    let ran0 = hog_run(hog.id());
    let out = run(&["record", "-o", rec.to_str().unwrap(), "--duration", "8s"]);
    let ran = hog_run(hog.id()) - ran0;
    let _ = hog.kill();
    let _ = hog.wait();
    assert_ok(&out);

    // The file itself: culprits per scan against the vCPU's schedstat.
    let mut r = RecordingReader::open(&rec).unwrap();
    let (mut scans, mut waits) = (Vec::new(), Vec::new());
    while let Some(rec) = r.next_record().unwrap() {
        match rec {
            Record::Culprits(c) => scans.extend(c),
            Record::Vcpu(v) => waits.extend(v.into_iter().filter_map(|s| {
                let w = s
                    .threads
                    .iter()
                    .find(|(e, _)| e.tid as u64 == tid)?
                    .1
                    .wait_ns;
                Some((s.t_ns, w))
            })),
            _ => {}
        }
    }
    assert!(scans.len() >= 4, "{} culprit scans", scans.len());
    let first = scans[0].t_ns;
    let wait_at = |t: u64| waits.iter().find(|(x, _)| *x == t).map(|x| x.1);
    // Scan k's culprits cover the wait from scan k-1 to scan k.
    let prev = waits.iter().rev().find(|(t, _)| *t < first).unwrap().0;
    let last = scans.last().unwrap().t_ns;
    let wait = (wait_at(last).unwrap() - wait_at(prev).unwrap()) as f64 / 1e9;
    let mut by: std::collections::BTreeMap<String, f64> = Default::default();
    for s in &scans {
        for (vm, rows) in &s.vms {
            if vm == "rwV" {
                for (_, name, ns) in rows {
                    *by.entry(name.clone()).or_default() += *ns as f64 / 1e9;
                }
            }
        }
    }
    let sum: f64 = by.values().sum();
    eprintln!("recorded culprits {sum:.4} s vs schedstat {wait:.4} s: {by:?}");
    assert!(wait > 1.0, "the pinned vCPU hardly waited: {wait} s");
    assert!((sum - wait).abs() <= 0.02 * wait, "{sum} vs {wait}: {by:?}");
    // The loop is named; it cannot be charged more than it ran over the
    // whole recording (other tests' work on the same CPU can take much of
    // the wait, so no lower bound beyond being named).
    let burn = by.get("recburn").copied().unwrap_or(0.0);
    eprintln!("recburn charged {burn:.4} s, ran {ran:.4} s during the recording");
    assert!(burn > 0.05 * sum, "{by:?}");
    assert!(burn <= ran * 1.02 + 0.01, "charged {burn} s, ran {ran} s");

    // The page: a real table in the section, naming the loop.
    let html = dir.path().join("who.html");
    assert_ok(&report(&rec, &html));
    let net = dir.path().join("net.json");
    let (dom, _) = dom_and_net_log(chromium_bin.as_deref().unwrap(), &file_url(&html), &net);
    let at = dom
        .find("id=\"who-stole-over-time\"")
        .expect("the over-time section");
    let section = &dom[at..at + dom[at..].find("</section>").unwrap()];
    let table = &section[section.find("<table").expect("a table")..];
    assert!(table.contains("<td>recburn</td>"), "{section}");
    assert!(section.contains("<svg"), "the stacked plot");
    assert!(section.contains("recburn (host process)"), "in the legend");
}

/// A recording written before the culprits frame existed (by the build of
/// commit 42161da, tests/data/recording-42161da.ssr) still reports: the
/// page is written, and the over-time section says there are no culprits.
#[test]
fn a_recording_from_before_culprits_still_reports() {
    let old = repo().join("crates/cli/tests/data/recording-42161da.ssr");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("old.html");
    assert_ok(&report(&old, &html));
    let page = std::fs::read_to_string(&html).unwrap();
    let at = page.find("id=\"who-stole-over-time\"").unwrap();
    assert!(page[at..].contains("the recording carries no culprits"));
    assert!(page.contains("id=\"plot-steal-heatmap\""));
    let doctor = run(&["doctor", "--snapshot", old.to_str().unwrap(), "--json"]);
    assert_ok(&doctor);
}
