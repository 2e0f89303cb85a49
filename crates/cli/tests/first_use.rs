//! Findings a first user acts on, from fixture snapshots changed here.
//!
//! `steal.bursty` on snapshots sampled at 100 Hz (10 ms windows, as
//! `record` takes them by default): one counter unit of steal in one window
//! is rounding of /proc/stat's 10 ms units, not a burst, and the report's
//! histogram does not draw it as a 95-100 % span; 40 % of 200 ms is a burst.
//! The snapshots are the `6.x-bursty-steal` fixture with its series
//! replaced by one written here, tick by tick.
//!
//! `idle.haltpoll-inactive` with guest_halt_poll_ns=0 words its title from
//! the POLL-state entries of the interval, not from the totals since boot.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const WINDOWS: usize = 500;
const WINDOW_NS: u64 = 10_000_000;
const STEAL_CPU: usize = 1;

/// The fixture with a 100 Hz series: every CPU gets one tick per window,
/// idle unless `steal(i)` puts it in steal on [`STEAL_CPU`]; t1's cpu rows
/// and uptime end where the series ends.
/// The packed fixture unpacked into `dir` (a snapshot directory).
fn copy_fixture(name: &str, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let status = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(
            repo()
                .join("fixtures/snapshots")
                .join(name)
                .join("snapshot.tar.gz"),
        )
        .arg("-C")
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

fn snapshot(dir: &Path, steal: impl Fn(usize) -> bool) {
    copy_fixture("6.x-bursty-steal", dir);
    let t0 = std::fs::read_to_string(dir.join("t0/proc/stat")).unwrap();
    let mut rows: Vec<Vec<u64>> = t0
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect();
    let t0_ns = 86_417_070_000_000u64;
    let render = |rows: &Vec<Vec<u64>>| {
        let mut total = vec![0u64; rows[0].len()];
        for r in rows {
            for (t, v) in total.iter_mut().zip(r) {
                *t += v;
            }
        }
        let line = |name: String, r: &Vec<u64>| {
            let cols: Vec<String> = r.iter().map(u64::to_string).collect();
            format!("{name} {}", cols.join(" "))
        };
        let mut out = vec![line("cpu ".into(), &total)];
        out.extend(
            rows.iter()
                .enumerate()
                .map(|(i, r)| line(format!("cpu{i}"), r)),
        );
        out.join("\n")
    };
    let mut samples = String::new();
    for i in 0..=WINDOWS {
        if i > 0 {
            for (c, r) in rows.iter_mut().enumerate() {
                // Columns: user nice system idle iowait irq softirq steal.
                let col = if c == STEAL_CPU && steal(i - 1) { 7 } else { 3 };
                r[col] += 1;
            }
        }
        let line = serde_json::json!({"t_ns": t0_ns + i as u64 * WINDOW_NS, "stat": render(&rows)});
        samples.push_str(&format!("{line}\n"));
    }
    std::fs::write(dir.join("samples.jsonl"), samples).unwrap();
    let t1 = std::fs::read_to_string(dir.join("t1/proc/stat")).unwrap();
    let rest: Vec<&str> = t1.lines().filter(|l| !l.starts_with("cpu")).collect();
    std::fs::write(
        dir.join("t1/proc/stat"),
        format!("{}\n{}\n", render(&rows), rest.join("\n")),
    )
    .unwrap();
    let up0 = std::fs::read_to_string(dir.join("t0/proc/uptime")).unwrap();
    let mut up = up0.split_whitespace().map(|v| v.parse::<f64>().unwrap());
    let (a, b) = (up.next().unwrap(), up.next().unwrap());
    let wall = (WINDOWS as u64 * WINDOW_NS) as f64 / 1e9;
    std::fs::write(
        dir.join("t1/proc/uptime"),
        format!("{:.2} {:.2}\n", a + wall, b + wall),
    )
    .unwrap();
}

fn doctor(dir: &Path) -> Value {
    json(&run(&[
        "doctor",
        "--snapshot",
        dir.to_str().unwrap(),
        "--json",
    ]))
}

fn bursty(v: &Value) -> Option<&Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "steal.bursty")
}

/// The hover text of the report histogram's last bucket.
fn top_bucket(dir: &Path) -> String {
    let page = dir.join("r.html");
    let out = run(&[
        "report",
        dir.join("s").to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let html = std::fs::read_to_string(page).unwrap();
    let at = html.find("95–100 % steal: ").expect("top bucket");
    html[at..].split('<').next().unwrap().to_string()
}

#[test]
fn one_steal_tick_at_100hz_is_no_burst() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    snapshot(&dir, |i| i == WINDOWS / 2);
    let v = doctor(&dir);
    // The series is what the test wrote: one 10 ms unit of steal.
    let cpu = &v["summary"]["cpus"][STEAL_CPU];
    assert!(cpu["steal_pct"].as_f64().unwrap() > 0.0, "{cpu}");
    assert_eq!(bursty(&v), None, "{:#}", v["findings"]);
    assert_eq!(top_bucket(tmp.path()), "95–100 % steal: 0 spans");
}

#[test]
fn forty_percent_for_200ms_at_100hz_is_a_burst() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    // 8 units in 20 windows from 2.5 s: 80 ms of 200 ms.
    let from = WINDOWS / 2;
    snapshot(&dir, |i| (from..from + 20).contains(&i) && i % 5 < 2);
    let v = doctor(&dir);
    let f = bursty(&v).unwrap_or_else(|| panic!("no burst: {:#}", v["findings"]));
    let e = &f["evidence"];
    assert_eq!(e["peak_cpu"], STEAL_CPU);
    assert_eq!(e["bursts"], 1);
    // Any ~100 ms span of the 200 ms holds 3 or 4 of the 8 units.
    let pct = e["peak_steal_pct"].as_f64().unwrap();
    assert!((30.0..=45.0).contains(&pct), "{e}");
    let start = e["peak_start_s"].as_f64().unwrap();
    assert!((2.4..=2.7).contains(&start), "{e}");
}

/// The haltpoll fixture with each CPU's POLL-state usage set to `before`
/// at t0 and `before + added` at t1; the finding about it.
fn haltpoll(before: u64, added: u64) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    copy_fixture("6.18-haltpoll-poll-ns-zero", &dir);
    let cpus = std::fs::read_dir(dir.join("t1/sys/devices/system/cpu"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_prefix("cpu")?.parse::<u32>().ok()
        })
        .collect::<Vec<_>>();
    assert!(!cpus.is_empty());
    for cpu in &cpus {
        for (side, v) in [("t0", before), ("t1", before + added)] {
            let p = dir.join(format!(
                "{side}/sys/devices/system/cpu/cpu{cpu}/cpuidle/state0"
            ));
            assert_eq!(
                std::fs::read_to_string(p.join("name")).unwrap().trim(),
                "POLL"
            );
            std::fs::write(p.join("usage"), format!("{v}\n")).unwrap();
        }
    }
    let v = doctor(&dir);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "idle.haltpoll-inactive")
        .unwrap_or_else(|| panic!("no haltpoll finding: {:#}", v["findings"]))
        .clone();
    let e = &f["evidence"];
    assert_eq!(e["poll_state_entries"], added * cpus.len() as u64, "{e}");
    assert_eq!(
        e["poll_state_entries_since_boot"],
        (before + added) * cpus.len() as u64,
        "{e}"
    );
    f
}

#[test]
fn haltpoll_title_counts_the_interval_not_the_boot() {
    // Polled a million times before the interval (another setting, earlier),
    // not at all during it.
    let f = haltpoll(1_059_209, 0);
    let title = f["title"].as_str().unwrap();
    assert!(title.contains("none of "), "{title}");
    assert!(title.contains(" idle entries in 5 s polled"), "{title}");
    // 500 POLL entries per CPU in 5 s: polling happens, the title says how
    // often.
    let f = haltpoll(1_059_209, 500);
    let title = f["title"].as_str().unwrap();
    let cpus = f["evidence"]["poll_state_entries"].as_u64().unwrap() / 500;
    let rate = format!("({}/s)", 100 * cpus);
    assert!(
        title.contains(&format!("only {} of ", 500 * cpus)),
        "{title}"
    );
    assert!(title.contains(&rate), "{title}");
    assert!(!title.contains("never"), "{title}");
}
