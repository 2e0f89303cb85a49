//! `serve` and `record` read through the one engine (crates/engine): run
//! side by side on a --root whose /proc/stat the test rewrites, they see
//! the same windows. Ground truth is the test's own shape: three steal
//! steps of known ticks, each far apart (many sample periods), so that
//! each is one window in any reader that samples through the engine.

use crate::common::*;
use crate::helpers::*;
use std::process::Stdio;
use std::time::Duration;
use stealscope_readers::recording::{Record, RecordingReader};

#[test]
fn serve_and_record_see_the_same_windows() {
    let (mut steal, mut idle) = (500, 1000);
    let root = RewrittenStat::new(steal, idle);
    let out = root.root().join("rec.ssr");
    let s = root.serve("20", steal);
    let rec = bin()
        .args(["record", "--rate", "20", "--duration", "6s", "--root"])
        .arg(root.root())
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let hz = clk_tck();
    // Record starts with a checkpoint: give it a second to be sampling.
    std::thread::sleep(Duration::from_secs(1));
    let steps = [(1u64, 1u64), (2, 0), (1, 3)];
    for (ds, di) in steps {
        steal += ds;
        idle += di;
        root.write(steal, idle);
        // 16 sample periods: one window of this step in each reader.
        std::thread::sleep(Duration::from_millis(800));
    }
    let m = s.metrics();
    let bucket = |le: &str| {
        m.get(&format!(
            "stealscope_steal_window_ratio_bucket{{le=\"{le}\",cpu=\"0\"}}"
        ))
        .unwrap()
    };
    let serve_windows = bucket("+Inf") - bucket("0.0");
    let serve_steal = steal_seconds(&s).unwrap() - 500.0 / hz;
    let rec_out = rec.wait_with_output().unwrap();
    assert!(
        rec_out.status.success(),
        "record: {}",
        String::from_utf8_lossy(&rec_out.stderr)
    );
    // Record's windows: consecutive samples of cpu0, as the model pairs them.
    let mut r = RecordingReader::open(&out).unwrap();
    let mut samples = Vec::new();
    while let Some(x) = r.next_record().unwrap() {
        if let Record::Stat(v) = x {
            samples.extend(v);
        }
    }
    let steal_of = |s: &stealscope_readers::recording::StatSample| {
        s.stat
            .cpus
            .iter()
            .find(|c| c.cpu == Some(0))
            .unwrap()
            .times
            .steal
            .unwrap()
    };
    let rec_steps: Vec<(u64, u64)> = samples
        .windows(2)
        .filter_map(|w| {
            let d = steal_of(&w[1]) - steal_of(&w[0]);
            let t = |s: &stealscope_readers::recording::StatSample| {
                let c = s.stat.cpus.iter().find(|c| c.cpu == Some(0)).unwrap();
                c.times.idle
            };
            (d > 0).then(|| (d, t(&w[1]) - t(&w[0])))
        })
        .collect();
    assert_eq!(rec_steps, steps, "record: one window per step");
    assert_eq!(
        serve_windows,
        steps.len() as f64,
        "serve: one window per step"
    );
    let total: u64 = steps.iter().map(|s| s.0).sum();
    assert!(
        (serve_steal - total as f64 / hz).abs() < 1e-9,
        "serve's steal {serve_steal} s, the steps' {total} ticks"
    );
}

/// A scraper that comes right after the socket is up gets the CPU counters,
/// not an empty page: serve answers only after its first sample (or after
/// a bounded wait). Bracketed by /proc/stat read before serve starts and
/// after the scrape, per CPU and mode.
#[test]
fn the_first_scrape_already_has_the_cpu_counters() {
    let root = std::path::Path::new("/");
    let before = proc_stat(root);
    let s = Serve::start(&[]);
    let m = s.metrics();
    let after = proc_stat(root);
    // One tick of slack each way: the kernel's tick accounting and our
    // own rounding to seconds.
    let tick = 1.0 / clk_tck();
    for (cpu, lo) in &before {
        for (i, mode) in MODES.iter().enumerate() {
            let key = format!("stealscope_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"{mode}\"}}");
            let v = m.get(&key).unwrap_or_else(|| {
                panic!(
                    "{key} missing from the first scrape:\n{}",
                    s.stderr.lock().unwrap()
                )
            });
            let hi = after[cpu][i];
            assert!(
                v >= lo[i] - tick && v <= hi + tick,
                "{key} = {v}, outside /proc/stat's {}..{hi}",
                lo[i]
            );
        }
    }
}

/// serve runs for weeks without transparent huge pages: with them,
/// mimalloc's huge-page arenas kept its RSS ~20 MiB higher in the
/// 10-minute soak (BENCHMARKS.md). The kernel shows the process's
/// PR_SET_THP_DISABLE as `THP_enabled: 0` in its status.
#[test]
fn serve_runs_without_transparent_huge_pages() {
    let s = Serve::start(&[]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    // The field is there since Linux 5.0; older kernels have no prctl either.
    if let Some(v) = thp {
        assert_eq!(v, "0", "serve's THP_enabled: {status}");
    }
}
