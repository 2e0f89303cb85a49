//! Headless Chromium for the `report` tests (report.rs, report_host.rs):
//! a run with a fresh profile, the DOM and net log of a load, the colours
//! of a screenshot, and `stealscope report` itself.

use super::run;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

pub const CHROMIUM: &str = "chromium-headless-shell";
/// Tall enough for the whole page on one screenshot.
pub const WINDOW: (u32, u32) = (1200, 10_000);
/// Columns of a time plot at most (crates/output/src/html/bins.rs).
pub const MAX_BINS: usize = 200;
pub const PLOTS: [&str; 7] = [
    "plot-steal-heatmap",
    "plot-busy-idle-steal",
    "plot-steal-bursts",
    "plot-hw-counters",
    "plot-irq-rate",
    "plot-vcpu-wait",
    "plot-probe-latency",
];

pub fn chromium_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(CHROMIUM))
            .find(|p| p.is_file())
    })
}

/// One headless Chromium run on `url` with a fresh profile, as root needs
/// it (--no-sandbox); `extra` selects what it does (--dump-dom, ...).
pub fn chromium(bin: &Path, url: &str, extra: &[String]) -> Output {
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
pub fn dom_and_net_log(bin: &Path, url: &str, net: &Path) -> (String, String) {
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

pub fn file_url(p: &Path) -> String {
    format!("file://{}", p.canonicalize().unwrap().display())
}

/// Requests in a Chromium net log: the URLs it names and the network
/// events (connects, DNS, URL request jobs) it holds.
pub fn net_activity(log: &Path) -> (Vec<String>, Vec<String>) {
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
pub fn colours(png_path: &Path) -> (usize, f64, Vec<[u8; 3]>) {
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

pub fn report(input: &Path, page: &Path) -> Output {
    run(&[
        "report",
        input.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ])
}

/// CPUs and windows of a snapshot's samples.jsonl, read here.
pub fn cpus_and_windows(snap: &Path) -> (usize, usize) {
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
