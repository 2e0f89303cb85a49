//! Cut-off recordings and snapshots (issue 28): a real host recording and
//! snapshot (a busy TCG vCPU sharing CPU 1 with a busy loop, so the vCPU
//! waits), cut at 20 seeded offsets derived from each file's size. Every
//! cut reports the cut in the verdict's place (or fails naming it), the
//! JSON of `report` and `doctor --snapshot` agree, and no report says 0 %
//! steal where the part before the cut holds steal: the expected figures
//! come from the uncut file's own series, read by the test.

mod common;
use common::who::*;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use stealscope_readers::recording::{Record, RecordingReader};

const CUTS: usize = 20;

/// Offsets in 1..len, from a seed and the file's own size (splitmix64).
fn offsets(len: u64, seed: u64) -> Vec<u64> {
    let mut x = seed ^ len.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..CUTS)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            1 + (z ^ (z >> 31)) % (len - 1)
        })
        .collect()
}

/// What one cut file gave: Ok(report JSON) after checking the three
/// commands agree, or Err(the one-line error, which must name the cut).
fn reports_of(path: &Path) -> Result<Value, String> {
    let p = path.to_str().unwrap();
    let rep = run(&["report", "--json", p]);
    let doc = run(&["doctor", "--json", "--snapshot", p]);
    let text = run(&["report", p]);
    // Exit status 3: a report of a cut file; 2: an error.
    if rep.status.code() != Some(3) {
        let err = String::from_utf8_lossy(&rep.stderr).to_string();
        for o in [&rep, &doc, &text] {
            assert_eq!(o.status.code(), Some(2), "{p}: {err}");
        }
        assert_eq!(err, String::from_utf8_lossy(&doc.stderr), "{p}");
        return Err(err);
    }
    assert_eq!(doc.status.code(), Some(3), "{p}: doctor's exit status");
    assert_eq!(text.status.code(), Some(3), "{p}: report's exit status");
    let parse = |o: &std::process::Output| -> Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{p}: bad JSON ({e})"))
    };
    let (r, d) = (parse(&rep), parse(&doc));
    assert_valid(&d);
    for k in ["verdict", "damage", "summary", "host", "findings"] {
        assert_eq!(r[k], d[k], "{p}: report and doctor differ in {k}");
    }
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(
        t.contains("CUT OFF") && t.contains("cut off at"),
        "{p}: {t}"
    );
    Ok(r)
}

/// The cut must be in the verdict's place: status, headline and damage.
fn assert_names_the_cut(r: &Value, what: &str) {
    assert_eq!(
        r["verdict"]["status"], "cut-off",
        "{what}: {}",
        r["verdict"]
    );
    let h = r["verdict"]["headline"].as_str().unwrap();
    assert!(h.contains("cut off"), "{what}: {h}");
    assert!(r["damage"]["why"].is_string(), "{what}: {}", r["damage"]);
}

/// An error for a cut file must say it is cut (or incomplete).
fn assert_error_names_the_cut(e: &str, what: &str) {
    assert!(
        e.contains("cut off") || e.contains("incomplete") || e.contains("ends before"),
        "{what}: {e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{what}: one line: {e}");
}

/// (t_ns, wait_ns) of a vCPU thread and the first checkpoint's time, from
/// the uncut recording.
fn vcpu_series(rec: &Path, tid: u64) -> (u64, Vec<(u64, u64)>) {
    let mut r = RecordingReader::open(rec).unwrap();
    let (mut t0, mut waits) = (None, Vec::new());
    while let Some(x) = r.next_record().unwrap() {
        match x {
            Record::Checkpoint { t_ns, .. } => {
                t0.get_or_insert(t_ns);
            }
            Record::Vcpu(v) => waits.extend(v.into_iter().filter_map(|s| {
                let w = s.threads.iter().find(|(e, _)| e.tid as u64 == tid)?.1;
                Some((s.t_ns, w.wait_ns))
            })),
            _ => {}
        }
    }
    (t0.unwrap(), waits)
}

/// The series' value at `t`, linear between its samples.
fn at(series: &[(u64, u64)], t: u64) -> f64 {
    let i = series.partition_point(|(x, _)| *x <= t);
    match (i.checked_sub(1).map(|j| series[j]), series.get(i)) {
        (Some((a, va)), Some(&(b, vb))) => {
            va as f64 + (vb as f64 - va as f64) * (t - a) as f64 / (b - a) as f64
        }
        (Some((_, v)), None) | (None, Some(&(_, v))) => v as f64,
        (None, None) => 0.0,
    }
}

fn vcpu_pct(r: &Value, tid: u64) -> Option<f64> {
    r["host"]["vms"]
        .as_array()?
        .iter()
        .flat_map(|v| v["vcpus"].as_array().unwrap())
        .find(|c| c["tid"].as_u64() == Some(tid))
        .and_then(|c| c["host_steal_pct"].as_f64())
}

fn cut_file(src: &Path, dst: &Path, n: u64) {
    let bytes = std::fs::read(src).unwrap();
    std::fs::write(dst, &bytes[..n as usize]).unwrap();
}

fn check_recording(rec: &Path, tid: u64, dir: &Path) {
    let len = std::fs::metadata(rec).unwrap().len();
    let (t0, waits) = vcpu_series(rec, tid);
    let (mut reported, mut errors) = (0, 0);
    for (i, off) in offsets(len, 28).into_iter().enumerate() {
        let cut = dir.join(format!("cut{i}.ssr"));
        cut_file(rec, &cut, off);
        let what = format!("recording cut at {off} of {len}");
        let r = match reports_of(&cut) {
            Ok(r) => r,
            Err(e) => {
                assert_error_names_the_cut(&e, &what);
                errors += 1;
                continue;
            }
        };
        reported += 1;
        assert_names_the_cut(&r, &what);
        let wall = r["interval_s"].as_f64().unwrap();
        let t1 = t0 + (wall * 1e9) as u64;
        // The series' rate over the part of t0..t1 its samples cover (the
        // first scan may come a moment after t0).
        let from = t0.max(waits[0].0);
        let want = 100.0 * (at(&waits, t1) - at(&waits, from)) / (t1 - from) as f64;
        let Some(got) = vcpu_pct(&r, tid) else {
            // Cut before any vCPU scan after the first checkpoint: no
            // figure, and the report must say what it could not measure.
            assert!(
                r.to_string()
                    .contains("vCPU and thread times need a vCPU scan"),
                "{what}: no vCPU {tid} and no word why: {r}"
            );
            eprintln!("{what}: +{wall:.2} s, vCPU not measured (no scan after t0)");
            continue;
        };
        eprintln!("{what}: +{wall:.2} s, vCPU steal {got:.1} % (series {want:.1} %)");
        if want >= 1.0 {
            assert!(
                got > 0.0,
                "{what}: 0 % steal where the series holds {want:.1} %"
            );
        }
        // Series samples are a second apart, the checkpoint's read is not
        // on them: a few points of slack, never a factor.
        assert!(
            (got - want).abs() <= 5.0 + 0.2 * want,
            "{what}: {got:.1} vs {want:.1}"
        );
    }
    eprintln!("recording: {reported} cuts reported, {errors} before anything to report");
    assert!(reported >= CUTS / 2, "{reported} of {CUTS} cuts reported");
}

/// Each sample's aggregate steal and total ticks.
fn sample_steal(samples: &str) -> Vec<(u64, f64, f64)> {
    samples
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|s| {
            let row = s["stat"]
                .as_str()
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .to_string();
            let v: Vec<f64> = row
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            (s["t_ns"].as_u64().unwrap(), v[7], v.iter().take(8).sum())
        })
        .collect()
}

/// A snapshot directory cut at `n` bytes of its files in the order written.
fn cut_dir(src: &Path, dst: &Path, n: u64) {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(src.join("manifest.json")).unwrap()).unwrap();
    let mut order: Vec<String> = vec!["meta.json".into(), "manifest.json".into()];
    order.extend(
        manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f[0].as_str().unwrap().to_string()),
    );
    let mut left = n;
    for rel in order {
        let data = std::fs::read(src.join(&rel)).unwrap();
        let take = (data.len() as u64).min(left) as usize;
        if take == 0 {
            break;
        }
        let p = dst.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &data[..take]).unwrap();
        left -= take as u64;
    }
}

fn check_snapshot(snap: &Path, whole_dir: &Path, dir: &Path) {
    let samples = sample_steal(&std::fs::read_to_string(whole_dir.join("samples.jsonl")).unwrap());
    let dir_len: u64 = walk(whole_dir)
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum();
    let tgz_len = std::fs::metadata(snap).unwrap().len();
    let mut reported = 0;
    for (kind, len) in [("tar.gz", tgz_len), ("dir", dir_len)] {
        for (i, off) in offsets(len, 2028).into_iter().enumerate() {
            let cut = dir.join(format!("cut{i}.{kind}"));
            if kind == "dir" {
                cut_dir(whole_dir, &cut, off);
            } else {
                cut_file(snap, &cut, off);
            }
            let what = format!("snapshot {kind} cut at {off} of {len}");
            let r = match reports_of(&cut) {
                Ok(r) => r,
                Err(e) => {
                    assert_error_names_the_cut(&e, &what);
                    continue;
                }
            };
            reported += 1;
            assert_names_the_cut(&r, &what);
            // Expected: the steal of the uncut series from its first sample
            // to the cut the report names.
            let cut_s = r["damage"]["cut_at_s"].as_f64().unwrap();
            let first = samples[0];
            let last = samples
                .iter()
                .rev()
                .find(|s| (s.0 - first.0) as f64 / 1e9 <= cut_s + 1e-3)
                .unwrap();
            let want = 100.0 * (last.1 - first.1) / (last.2 - first.2).max(1.0);
            let got = r["summary"]["steal_pct"].as_f64().unwrap_or(0.0);
            eprintln!("{what}: +{cut_s:.2} s, steal {got:.2} % (series {want:.2} %)");
            if want >= 0.5 {
                assert!(
                    got > 0.0,
                    "{what}: 0 % steal where the series holds {want:.2} %"
                );
            }
            assert!(
                (got - want).abs() <= 0.5 + 0.1 * want,
                "{what}: {got} vs {want}"
            );
            // Never a VM at 0 % from a side that was lost.
            if r["damage"]["consequences"].to_string().contains("left out") {
                assert!(
                    r["host"]["vms"].as_array().is_none_or(|v| v.is_empty()),
                    "{what}"
                );
            }
        }
    }
    assert!(
        reported >= CUTS,
        "{reported} of {} snapshot cuts reported",
        2 * CUTS
    );
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn cut_recordings_and_snapshots_report_the_cut_and_the_steal_they_hold() {
    let Some(_turn) = qemu_turn() else {
        return;
    };
    let (_, tid) = pinned_busy_vm("cutV");
    // A loop beside the vCPU on CPU 1: the vCPU waits about half the time.
    let hog = Hog::start("cuthog", 0, Some("1"));
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("whole.ssr");
    let out = run(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "--duration",
        "10s",
        "--checkpoint",
        "4s",
    ]);
    assert_ok(&out);
    let snap = dir.path().join("whole.tar.gz");
    assert_ok(&run(&[
        "snapshot",
        "-o",
        snap.to_str().unwrap(),
        "--interval",
        "3s",
    ]));
    drop(hog);
    // The same snapshot as a directory (written by the same code).
    let whole_dir = dir.path().join("whole-dir");
    let s = stealscope_readers::snapshot::open(&snap).unwrap();
    stealscope_readers::snapshot::write(&s, &whole_dir).unwrap();
    // Uncut, both say nothing of a cut.
    for p in [&rec, &snap] {
        let r = json(&run(&["report", "--json", p.to_str().unwrap()]));
        assert!(
            r["damage"].is_null() && r["verdict"]["status"] != "cut-off",
            "{r}"
        );
    }
    let cuts = tempfile::tempdir().unwrap();
    check_recording(&rec, tid, cuts.path());
    check_snapshot(&snap, &whole_dir, cuts.path());
}
