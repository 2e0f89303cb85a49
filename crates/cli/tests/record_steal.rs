//! `record`'s steal routes (issue 30) on this machine: with the guest steal
//! collector (root, BTF, a paravirt steal clock: fails under CI when one
//! is missing) the recording's exact per-CPU steal against /proc/stat and
//! every episode listed at threshold 0; unprivileged, or asked, the 100 Hz
//! /proc/stat route with its reason in one line; a recording from before
//! exact steal still reports, saying it polled. On a KVM guest the
//! recording anchors kvm-clock at its start and end (issue 30 point 4).

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use stealscope_model::exact_steal::{ExactSteal, StoredExactSteal, EXACT_STEAL_FILE};
use stealscope_readers::recording::{
    EndInfo, Header, KvmClockInfo, Record, RecordingReader, StealEpisodeRecord, StealSource,
};
use stealscope_testkit::clock::{clock_ns, has_kvm_clock};
use stealscope_testkit::proc_stat::{steal_now, steal_of, unit_ns};

/// `report FILE` in text, its wrapped lines joined (words one space apart).
fn report_text(p: &Path) -> String {
    let out = run(&["report", p.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One live recording at a time: each spins on every CPU.
static LIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A thread per CPU spinning until `until`: every CPU ticks meanwhile, so
/// /proc/stat's steal keeps up with the steal clock (an idle CPU's catches
/// up only when it ticks again).
fn spin_everywhere(cpus: usize, until: Instant) -> Vec<std::thread::JoinHandle<()>> {
    (0..cpus)
        .map(|_| {
            std::thread::spawn(move || {
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            })
        })
        .collect()
}

/// Everything a recording holds about steal: its header, the episodes
/// (absolute times), and the first and last checkpoints' /proc/stat and
/// exact steal.
struct Steal {
    header: Header,
    episodes: Vec<StealEpisodeRecord>,
    stat0: String,
    stat1: String,
    exact: Option<StoredExactSteal>,
    end: Option<EndInfo>,
}

fn read_steal(path: &Path) -> Steal {
    let mut r = RecordingReader::open(path).unwrap();
    let header = r.header().clone();
    let (mut episodes, mut sides, mut end) = (Vec::new(), Vec::new(), None);
    while let Some(rec) = r.next_record().unwrap() {
        match rec {
            Record::Steal(e) => episodes.extend(e),
            Record::End(e) => end = Some(e),
            Record::Checkpoint { files, .. } => sides.push(files),
            _ => {}
        }
    }
    let text = |f: &BTreeMap<String, Vec<u8>>| String::from_utf8_lossy(&f["/proc/stat"]).into();
    let last = sides.last().unwrap();
    Steal {
        header,
        episodes,
        stat0: text(&sides[0]),
        stat1: text(last),
        exact: last
            .get(EXACT_STEAL_FILE)
            .map(|b| serde_json::from_slice(b).unwrap()),
        end,
    }
}

/// kvm-clock anchored at the start, inside the run (CLOCK_MONOTONIC read
/// by the test around it), ahead of CLOCK_BOOTTIME (kvm-clock counts from
/// the VM's creation, before the guest booted), and again at the end at
/// the same offset within 200 ppm of the run and 100 us.
fn kvm_clock_is_anchored(s: &Steal, run: (u64, u64), boot_minus_mono: u64) {
    let start = match &s.header.kvm_clock {
        Some(KvmClockInfo::Anchored { anchor }) => *anchor,
        other => {
            assert!(
                !has_kvm_clock(),
                "kvm-clock is here, the recording says {other:?}"
            );
            return;
        }
    };
    let end = s
        .end
        .as_ref()
        .and_then(|e| e.kvm_clock)
        .expect("an end anchor");
    let offset =
        |a: &stealscope_readers::kvmclock::KvmClockAnchor| a.kvm_ns as i64 - a.mono_ns as i64;
    let drift = (offset(&end) - offset(&start)).unsigned_abs();
    eprintln!(
        "kvm-clock: {:.6} ms ahead of CLOCK_MONOTONIC at the start, {drift} ns apart at the end",
        offset(&start) as f64 / 1e6
    );
    assert!(
        start.mono_ns >= run.0 && end.mono_ns <= run.1,
        "{start:?} {end:?} {run:?}"
    );
    assert!(
        offset(&start) > boot_minus_mono as i64,
        "{start:?}: behind CLOCK_BOOTTIME"
    );
    let allow = (end.mono_ns - start.mono_ns) / 5_000 + 100_000;
    assert!(drift < allow, "{drift} ns of drift, allowed {allow}");
}

fn record(dir: &Path, args: &[&str]) -> (std::path::PathBuf, String) {
    let p = dir.join("r.ssr");
    let out = bin()
        .args(["record", "-o", p.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "record: {err}");
    (p, err)
}

/// The totals of the recording's last checkpoint, or why the collector
/// could not run here (None: skipped outside CI).
fn measured(s: &Steal) -> Option<ExactSteal> {
    match &s.exact {
        Some(StoredExactSteal::Measured(e)) => Some(e.clone()),
        other => {
            require(false, &format!("exact steal in the recording: {other:?}"));
            None
        }
    }
}

/// Per CPU, the exact steal of the whole recording equals the steal
/// column of /proc/stat in its first and last checkpoints (the kernel's
/// counter, read as text with the collector's reading right before each)
/// within one unit, plus the episodes seen within 20 ms of either reading
/// (the two counters catch up with the steal clock at different points
/// of a tick); and it never exceeds the delta this test read itself
/// around the whole run by more than a unit. At threshold 0 every
/// episode between the two readings is listed: their count and sum equal
/// the maps' per CPU.
#[test]
fn exact_totals_match_proc_stat_and_threshold_0_lists_every_episode() {
    let _l = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if !require(is_root(), "root (the guest steal collector)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cpus = steal_now().len();
    let before = steal_now();
    let spin = spin_everywhere(cpus, Instant::now() + Duration::from_secs(8));
    let (p, err) = record(dir.path(), &["--duration", "4s", "--steal-threshold", "0"]);
    let after = steal_now();
    spin.into_iter().for_each(|h| h.join().unwrap());
    let s = read_steal(&p);
    let Some(e) = measured(&s) else { return };
    assert!(err.contains("steal: exact"), "{err}");
    assert_eq!(
        s.header.steal,
        Some(StealSource::Exact {
            threshold_ns: 0,
            drain_ms: 1000
        })
    );
    assert_eq!(s.header.rate_hz, 1.0, "no 100 Hz poll on the exact route");
    let (from, to) = e.readings_ns.expect("reading times");
    let unit = unit_ns();
    let (s0, s1) = (steal_of(&s.stat0), steal_of(&s.stat1));
    for c in &e.cpus {
        let mine: Vec<&StealEpisodeRecord> = s
            .episodes
            .iter()
            .filter(|x| x.cpu == c.cpu && x.t_ns >= from && x.t_ns <= to)
            .collect();
        let total = c.busy_ns + c.idle_ns;
        let near = |at: u64| -> u64 {
            mine.iter()
                .filter(|x| x.t_ns.abs_diff(at) <= 20_000_000)
                .map(|x| x.ns)
                .sum()
        };
        let stat_ns = (s1[&c.cpu] - s0[&c.cpu]) * unit;
        let outer_ns = (after[&c.cpu] - before[&c.cpu]) * unit;
        let allow = unit + near(from) + near(to);
        eprintln!(
            "cpu{}: exact {:.3} ms (busy {:.3}, idle {:.3}) in {} episodes, max {:.3} ms; /proc/stat {} ms over the same span, {} ms around the run; allowed |diff| < {:.3} ms",
            c.cpu,
            total as f64 / 1e6,
            c.busy_ns as f64 / 1e6,
            c.idle_ns as f64 / 1e6,
            c.episodes,
            c.max_ns as f64 / 1e6,
            stat_ns / 1_000_000,
            outer_ns / 1_000_000,
            allow as f64 / 1e6
        );
        assert!(
            total.abs_diff(stat_ns) < allow,
            "cpu{}: exact {total} ns vs /proc/stat {stat_ns} ns",
            c.cpu
        );
        assert!(
            total < outer_ns + unit,
            "cpu{}: above the outer delta",
            c.cpu
        );
        assert_eq!(mine.len() as u64, c.episodes, "cpu{}: listed", c.cpu);
        assert_eq!(
            mine.iter().map(|x| x.ns).sum::<u64>(),
            total,
            "cpu{}",
            c.cpu
        );
    }
    assert_eq!(e.unlisted, 0);
}

/// The default threshold lists only episodes at or over 100 µs, and the
/// report names the route and shows the exact section.
#[test]
fn default_threshold_lists_only_long_episodes_and_report_shows_them() {
    let _l = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if !require(is_root(), "root (the guest steal collector)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Monotonic first: BOOTTIME is read later, so never behind it.
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    let boot_minus_mono = clock_ns(libc::CLOCK_BOOTTIME) - mono;
    let t0 = clock_ns(libc::CLOCK_MONOTONIC);
    let (p, _) = record(dir.path(), &["--duration", "2s"]);
    let t1 = clock_ns(libc::CLOCK_MONOTONIC);
    let s = read_steal(&p);
    kvm_clock_is_anchored(&s, (t0, t1), boot_minus_mono);
    let Some(e) = measured(&s) else { return };
    assert!(s.episodes.iter().all(|x| x.ns >= 100_000));
    let over: u64 = e.cpus.iter().map(|c| c.episodes).sum();
    assert!(s.episodes.len() as u64 <= over);
    let text = report_text(&p);
    assert!(text.contains("Steal route: exact"), "{text}");
    assert!(text.contains(">10 ms"), "{text}");
    let html = dir.path().join("r.html");
    assert!(
        run(&["report", p.to_str().unwrap(), "-o", html.to_str().unwrap()])
            .status
            .success()
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"id="exact-steal""#));
    // doctor --snapshot reads the recording's exact steal too.
    let d = json(&run(&[
        "doctor",
        "--json",
        "--snapshot",
        p.to_str().unwrap(),
    ]));
    assert_eq!(
        d["exact_steal"]["status"], "measured",
        "{}",
        d["exact_steal"]
    );
    assert_eq!(
        d["exact_steal"]["cpus"].as_array().unwrap().len(),
        e.cpus.len()
    );
}

/// Unprivileged, the collector cannot load: record polls /proc/stat at
/// 100 Hz, says why in one line, the header keeps the reason and the
/// report repeats it. Asked with --steal proc-stat, the same route.
#[test]
fn unprivileged_or_asked_record_polls_with_a_one_line_reason() {
    let _l = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if !require(is_root(), "root (to drop to uid 65534)") {
        return;
    }
    let (bdir, exe) = world_runnable_binary();
    let out_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        out_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let p = out_dir.path().join("nobody.ssr");
    let o = as_nobody(
        &exe,
        &["record", "-o", p.to_str().unwrap(), "--duration", "1s"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let line = err.lines().find(|l| l.starts_with("steal: ")).unwrap();
    assert!(
        line.starts_with("steal: /proc/stat polled at 100 Hz: no exact guest steal: "),
        "{line}"
    );
    let s = read_steal(&p);
    assert_eq!(s.header.rate_hz, 100.0);
    let Some(StealSource::ProcStat { reason }) = &s.header.steal else {
        panic!("{:?}", s.header.steal)
    };
    assert!(!reason.contains('\n') && !reason.is_empty());
    assert!(s.episodes.is_empty() && s.exact.is_none());
    let text = report_text(&p);
    assert!(
        text.contains("/proc/stat polled at 100 Hz (not exact: "),
        "{text}"
    );
    drop(bdir);

    let (q, err) = record(
        out_dir.path(),
        &["--duration", "1s", "--steal", "proc-stat"],
    );
    assert!(err.contains("asked for (--steal proc-stat)"), "{err}");
    let _ = q;
}

/// A recording from before exact steal loads and says it polled.
#[test]
fn a_recording_from_before_exact_steal_says_it_polled() {
    let old = repo().join("crates/cli/tests/data/recording-42161da.ssr");
    let text = report_text(&old);
    assert!(
        text.contains("polled at 10 Hz (not exact: recorded by a stealscope without exact steal)"),
        "{text}"
    );
}
