//! `stealscope report` on a real snapshot of this machine, opened in headless
//! Chromium: the screenshot is not blank, the plots and every finding of
//! `doctor --snapshot --json` are in the DOM after load, the heat map has a
//! cell per CPU and window of the snapshot, and Chromium's net log shows no
//! request (a control page proves the log would show one). Bad input exits
//! 2 with one line.

mod common;
use common::chromium::*;
use common::*;
use serde_json::Value;
use std::path::PathBuf;

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
    // Without -o there is no text of a simulation: one line saying so.
    let text = run(&["report", sim_path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(!text.status.success() && text.stdout.is_empty(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("sim.json") && err.contains("-o"), "{err}");

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
