//! The page rendered from fixture snapshots and hand-made timelines; every
//! expected count is computed here from the input files, not taken from the
//! renderer.

use super::*;
use std::collections::BTreeMap;
use stealscope_analysis::{Finding, ReportInput, Severity};
use stealscope_model::irq_rates::{CpuIrqRates, SourceRate};
use stealscope_model::timeline::{
    CulpritWindow, IrqWindow, ProbeWindow, StealMark, StealRoute, VcpuWindow,
};
use stealscope_readers::snapshot::{self, Snapshot};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/snapshots")
        .join(name)
}

/// One file of a packed fixture (fixtures/gen/pack.py), read on its own.
fn member(name: &str, rel: &str) -> String {
    let f = std::fs::File::open(fixture(name).join("snapshot.tar.gz")).unwrap();
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some(rel) {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            return s;
        }
    }
    panic!("{name}: no {rel} in the archive");
}

struct Loaded {
    snap: Snapshot,
    model: MachineModel,
    report: DoctorReport,
}

fn load(name: &str) -> Loaded {
    let snap = snapshot::open(&fixture(name).join("snapshot.tar.gz")).unwrap();
    let model = MachineModel::build(&snap).unwrap();
    let report = stealscope_analysis::build(ReportInput {
        model: &model,
        interval_s: snap.meta.interval_s,
        hostname: snap.meta.hostname.clone(),
        kernel: snap.meta.kernel.clone(),
    });
    Loaded {
        snap,
        model,
        report,
    }
}

fn page(l: &Loaded, t: &Timeline) -> String {
    render(&HtmlInput {
        report: &l.report,
        model: &l.model,
        timeline: t,
        meta: &l.snap.meta,
        source: "fixture",
    })
}

/// The markup of the section with this id.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no section {id}"));
    let start = html[..at].rfind("<section").unwrap();
    let end = html[start..].find("</section>").unwrap() + start;
    &html[start..end]
}

/// The markup of the first `<svg>` whose class list holds `class`.
fn svg_of<'a>(html: &'a str, class: &str) -> &'a str {
    let start = html
        .find(&format!("<svg class=\"{class}\""))
        .unwrap_or_else(|| panic!("no svg {class}"));
    let end = html[start..].find("</svg>").unwrap() + start;
    &html[start..end]
}

fn cells(svg: &str) -> usize {
    svg.matches("<rect class=\"cell").count()
}

/// samples.jsonl read here on its own: per window (wall s, per-CPU steal
/// ticks), CPU count.
fn windows_by_hand(name: &str) -> (Vec<(f64, Vec<u64>)>, usize) {
    let text = member(name, "samples.jsonl");
    let rows: Vec<(u64, Vec<u64>)> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let steal = v["stat"]
                .as_str()
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
                .map(|l| l.split_whitespace().nth(8).unwrap().parse().unwrap())
                .collect();
            (v["t_ns"].as_u64().unwrap(), steal)
        })
        .collect();
    let cpus = rows[0].1.len();
    let w = rows
        .windows(2)
        .map(|p| {
            let wall = (p[1].0 - p[0].0) as f64 / 1e9;
            (
                wall,
                p[1].1.iter().zip(&p[0].1).map(|(b, a)| b - a).collect(),
            )
        })
        .collect();
    (w, cpus)
}

#[test]
fn steal_heatmap_has_a_cell_per_cpu_and_window() {
    let l = load("6.x-bursty-steal");
    let html = page(&l, &Timeline::default());
    let (windows, cpus) = windows_by_hand("6.x-bursty-steal");
    let map = svg_of(section(&html, steal::ID), "heatmap steal");
    assert_eq!(cells(map), cpus * windows.len().min(bins::MAX_BINS));
    // Every CPU is a labelled row.
    for c in 0..cpus {
        assert!(map.contains(&format!(">cpu{c}</text>")), "row cpu{c}");
    }
}

#[test]
fn burst_histogram_counts_the_windows_a_hand_count_finds() {
    let l = load("6.x-bursty-steal");
    let (windows, _) = windows_by_hand("6.x-bursty-steal");
    let tck = l.snap.meta.clk_tck.unwrap_or(100) as f64;
    let pcts: Vec<f64> = windows
        .iter()
        .flat_map(|(wall, st)| st.iter().map(move |s| 100.0 * *s as f64 / tck / wall))
        .collect();
    let hand_bursts = pcts
        .iter()
        .filter(|p| **p >= stealscope_analysis::rules::steal::BURST_WINDOW_PCT)
        .count();
    assert!(hand_bursts > 0, "the fixture has bursts");
    let hist = bursts::histogram(&Series::of(&l.model));
    assert_eq!(hist.iter().sum::<u64>() as usize, pcts.len());
    let from = (stealscope_analysis::rules::steal::BURST_WINDOW_PCT / bursts::BUCKET_PCT) as usize;
    assert_eq!(hist[from..].iter().sum::<u64>() as usize, hand_bursts);
    let html = page(&l, &Timeline::default());
    let s = section(&html, bursts::ID);
    assert!(s.contains(&format!("{hand_bursts} at or above")));
    assert_eq!(s.matches("class=\"bar alarm\"").count(), 20 - from);
}

#[test]
fn long_series_are_binned_to_a_bounded_page() {
    let mut l = load("6.x-bursty-steal");
    let one = l.model.windows[0].1.clone();
    let cpus = one.cpus.len();
    let size = |l: &mut Loaded, n: usize| {
        // n windows of 1 ms, each a copy of a real one rescaled.
        let mut w = one.clone();
        w.wall_s = 0.001;
        for c in &mut w.cpus {
            let k = 0.001 / c.wall_s;
            c.wall_s = 0.001;
            c.secs = stealscope_model::ModeSecs {
                user: c.secs.user * k,
                system: c.secs.system * k,
                idle: c.secs.idle * k,
                steal: c.secs.steal * k,
                ..Default::default()
            };
        }
        l.model.windows = (0..n).map(|i| (i as f64 * 0.001, w.clone())).collect();
        let html = page(l, &Timeline::default());
        let map = svg_of(section(&html, steal::ID), "heatmap steal");
        assert_eq!(cells(map), cpus * n.min(bins::MAX_BINS));
        html.len()
    };
    let small = size(&mut l, 10_000);
    // An hour at 100 Hz: 36 times the windows, the same page size give or
    // take the digits of larger numbers.
    let hour = size(&mut l, 360_000);
    assert!(
        (hour as f64) < 1.1 * small as f64,
        "{small} bytes at 10 k windows, {hour} at 360 k"
    );
    assert!(hour < 2_000_000, "{hour} bytes");
}

#[test]
fn every_fixture_renders_with_every_finding() {
    let dir = fixture("");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut with_findings = 0;
    for name in names {
        let l = load(&name);
        let html = page(&l, &Timeline::default());
        let s = section(&html, "findings");
        assert_eq!(
            s.matches("<article class=\"finding").count(),
            l.report.findings.len(),
            "{name}"
        );
        // In the doctor's order.
        let mut at = 0;
        for f in &l.report.findings {
            let pos = s[at..]
                .find(&format!("data-finding-id=\"{}\"", f.id))
                .unwrap_or_else(|| panic!("{name}: {} missing or out of order", f.id));
            at += pos + 1;
        }
        for n in &l.report.notes {
            let escaped = maud::html! { (n) }.into_string();
            assert!(section(&html, "notes").contains(&escaped), "{name}: note");
        }
        for id in [
            steal::ID,
            stacked::ID,
            bursts::ID,
            hw::ID,
            irq::ID,
            vcpu::ID,
            probes::ID,
        ] {
            section(&html, id);
        }
        with_findings += usize::from(!l.report.findings.is_empty());
    }
    assert!(with_findings > 10);
}

#[test]
fn hostile_text_is_escaped() {
    let mut l = load("6.x-healthy");
    let evil = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&";
    l.report.hostname = Some(evil.to_string());
    l.report.notes.push(format!("note {evil}"));
    l.report.findings.push(
        Finding::new(&format!("x.{evil}"), Severity::Critical, evil)
            .evidence(evil, evil)
            .files(&[evil])
            .remedy(evil)
            .case(evil),
    );
    let mut t = Timeline::default();
    t.vcpu.push(VcpuWindow {
        start_s: 0.0,
        wall_s: 1.0,
        vm: evil.to_string(),
        vcpu: 0,
        run_s: 0.5,
        wait_s: 0.1,
    });
    t.probes.push(probe(evil, 0.0, &[(3.0, 1)]));
    let html = page(&l, &t);
    assert!(!html.contains("<script"), "a script element");
    assert!(!html.contains("<img"), "an img element");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("data-finding-id=\"x.&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot;'&amp;\""));
}

#[test]
fn no_fetch_is_possible() {
    let l = load("6.x-ipc-collapse");
    let html = page(&l, &Timeline::default());
    assert!(html.contains(&format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
    )));
    assert!(CSP.starts_with("default-src 'none'"));
    for attr in [" src=", "url(", "@import", "<script", "<iframe", "<object"] {
        assert!(!html.contains(attr), "{attr}");
    }
    // Every href is a fragment or the empty data: icon.
    for part in html.split(" href=\"").skip(1) {
        assert!(
            part.starts_with('#') || part.starts_with("data:,"),
            "{}",
            &part[..40.min(part.len())]
        );
    }
}

#[test]
fn empty_series_say_no_data() {
    // No samples.jsonl, no counters, an empty timeline.
    let l = load("6.x-healthy");
    let html = page(&l, &Timeline::default());
    for id in [bursts::ID, hw::ID, irq::ID, vcpu::ID, probes::ID] {
        let s = section(&html, id);
        assert!(s.contains("class=\"plot no-data\""), "{id}");
        assert!(s.contains("no data: "), "{id}");
    }
    // The interval is still drawn: one column per CPU.
    let cpus = l.model.interval.cpus.len();
    let map = svg_of(section(&html, steal::ID), "heatmap steal");
    assert_eq!(cells(map), cpus);
    assert!(section(&html, steal::ID).contains("one column for the whole interval"));
}

#[test]
fn counters_are_drawn_next_to_steal() {
    let l = load("6.x-ipc-collapse");
    let html = page(&l, &Timeline::default());
    let s = section(&html, hw::ID);
    let (windows, cpus) = windows_by_hand("6.x-ipc-collapse");
    let counters: serde_json::Value =
        serde_json::from_str(&member("6.x-ipc-collapse", "counters.json")).unwrap();
    let counted_cpus = counters["samples"][0]["cpus"].as_array().unwrap().len();
    let bins = windows.len().min(bins::MAX_BINS);
    assert_eq!(cells(svg_of(s, "heatmap steal")), cpus * bins);
    assert_eq!(cells(svg_of(s, "heatmap ipc")), counted_cpus * bins);
    assert_eq!(cells(svg_of(s, "heatmap miss")), counted_cpus * bins);
    // The IPC of one cell equals instructions / cycles of that window.
    let d = |k: &str, i: usize| {
        let read = |j: usize| {
            counters["samples"][j]["cpus"][0]["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|g| g["counts"][k].as_u64())
                .unwrap()
        };
        (read(i + 1) - read(i)) as f64
    };
    let ipc = d("instructions", 3) / d("cycles", 3);
    let cpu0 = counters["samples"][0]["cpus"][0]["cpu"].as_u64().unwrap();
    let want = format!("cpu{cpu0} +");
    let cell = svg_of(s, "heatmap ipc")
        .split("<rect class=\"cell\"")
        .filter(|c| c.contains(&want))
        .nth(3)
        .unwrap();
    assert!(
        cell.contains(&format!("IPC {}", svg::fmt_num(ipc, 2))),
        "window 3 IPC {ipc}: {cell}"
    );
}

fn probe(name: &str, start: f64, buckets: &[(f64, u64)]) -> ProbeWindow {
    ProbeWindow {
        start_s: start,
        wall_s: 1.0,
        probe: name.to_string(),
        cpu: Some(0),
        samples: buckets.iter().map(|b| b.1).sum(),
        p50_us: 10.0,
        p99_us: 50.0 + start,
        max_us: 100.0 + start,
        buckets: buckets.to_vec(),
    }
}

#[test]
fn timeline_series_are_drawn() {
    let l = load("6.x-healthy");
    let mut t = Timeline::default();
    let n_irq = 300; // more than MAX_BINS: binned
    for i in 0..n_irq {
        t.irq.push(IrqWindow {
            start_s: i as f64,
            wall_s: 1.0,
            cpus: (0..3)
                .map(|cpu| CpuIrqRates {
                    cpu,
                    total_per_s: 100.0 * (cpu + 1) as f64,
                    sources: vec![SourceRate {
                        name: "LOC".into(),
                        label: "Local timer interrupts".into(),
                        per_s: 100.0 * (cpu + 1) as f64,
                    }],
                })
                .collect(),
        });
    }
    for (vm, vcpus) in [("web", 2u32), ("db", 4)] {
        for v in 0..vcpus {
            for i in 0..10 {
                t.vcpu.push(VcpuWindow {
                    start_s: i as f64,
                    wall_s: 1.0,
                    vm: vm.into(),
                    vcpu: v,
                    run_s: 0.5,
                    wait_s: 0.25,
                });
            }
        }
    }
    t.probes
        .push(probe("wakeup", 0.0, &[(3.0, 5), (4.0, 7), (100.0, 2)]));
    t.probes.push(probe("wakeup", 1.0, &[(5.0, 1)]));
    t.probes.push(probe("preempt", 0.0, &[(1000.0, 9)]));
    let html = page(&l, &t);
    let irq = svg_of(section(&html, irq::ID), "heatmap irq");
    assert_eq!(cells(irq), 3 * bins::MAX_BINS);
    assert!(irq.contains("cpu2 +") && irq.contains("interrupts 300/s"));
    let vcpu = svg_of(section(&html, vcpu::ID), "heatmap vcpu");
    assert_eq!(cells(vcpu), (2 + 4) * 10);
    assert!(vcpu.contains(">db/3</text>") && vcpu.contains("wait 25 %"));
    // Probes: buckets merged by powers of two, every sample kept.
    let m = probes::merge(&t.probes);
    let w = &m["wakeup"];
    assert_eq!(w.buckets.values().sum::<u64>(), 5 + 7 + 2 + 1);
    assert_eq!(w.buckets[&2], 12, "3 and 4 µs are in (2, 4]");
    assert_eq!(w.buckets[&3], 1, "5 µs is in (4, 8]");
    assert_eq!(w.buckets[&7], 2, "100 µs is in (64, 128]");
    assert_eq!(w.max_us, 101.0);
    let s = section(&html, probes::ID);
    assert_eq!(s.matches("class=\"probe\"").count(), 2);
    let wakeup = &s[s.find("data-probe=\"wakeup\"").unwrap()..];
    assert_eq!(
        svg_of(wakeup, "bars probe-hist")
            .matches("<rect class=\"bar\"")
            .count(),
        7 - 2 + 1,
        "wakeup from 2^2 to 2^7 µs, empty buckets included"
    );
}

#[test]
fn a_single_interrupt_window_is_bars_per_cpu() {
    let l = load("6.x-irq-storm-cal");
    let t = Timeline {
        irq: vec![IrqWindow {
            start_s: 0.0,
            wall_s: l.model.wall_s,
            cpus: l.model.irq.clone(),
        }],
        ..Timeline::default()
    };
    assert!(!l.model.irq.is_empty());
    let html = page(&l, &t);
    let s = section(&html, irq::ID);
    assert_eq!(s.matches("<rect class=\"bar\"").count(), l.model.irq.len());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Whatever a recording holds (NaN, infinities, negative lengths, one
    /// row repeated), the page renders with every plot.
    #[test]
    fn any_timeline_renders(
        irq in proptest::collection::vec((proptest::num::f64::ANY, proptest::num::f64::ANY, 0u32..4, proptest::num::f64::ANY), 0..20),
        vcpu in proptest::collection::vec((proptest::num::f64::ANY, proptest::num::f64::ANY, 0u32..3, proptest::num::f64::ANY), 0..20),
        probes in proptest::collection::vec((proptest::num::f64::ANY, proptest::num::f64::ANY, 0u64..1000), 0..20),
        culprits in proptest::collection::vec((proptest::num::f64::ANY, 0usize..3, 0usize..9, proptest::num::f64::ANY), 0..30),
        steal in proptest::collection::vec((proptest::num::f64::ANY, 0u32..4, proptest::num::u64::ANY), 0..30),
    ) {
        let l = load("6.x-healthy");
        let t = Timeline {
            irq: irq.into_iter().map(|(start_s, wall_s, cpu, rate)| IrqWindow {
                start_s,
                wall_s,
                cpus: vec![CpuIrqRates { cpu, total_per_s: rate, sources: vec![] }],
            }).collect(),
            vcpu: vcpu.into_iter().map(|(start_s, wall_s, vcpu, wait_s)| VcpuWindow {
                start_s, wall_s, vm: "vm".into(), vcpu, run_s: 0.0, wait_s,
            }).collect(),
            probes: probes.into_iter().map(|(upper, max, n)| ProbeWindow {
                start_s: 0.0, wall_s: 1.0, probe: "wakeup".into(), cpu: None, samples: n,
                p50_us: upper, p99_us: upper, max_us: max, buckets: vec![(upper, n)],
            }).collect(),
            culprits: culprits.into_iter().map(|(t_s, vm, who, secs)| CulpritWindow {
                t_s,
                vm: format!("vm{vm}"),
                culprits: vec![stealscope_who::Charge {
                    culprit: stealscope_who::Culprit::new(stealscope_who::Kind::HostProcess, format!("p{who}")),
                    seconds: secs,
                    share: 1.0,
                }],
            }).collect(),
            steal: Some(StealRoute::Exact { threshold_ns: 0, stat_hz: 1.0 }),
            steal_episodes: steal.into_iter().map(|(t_s, cpu, ns)| StealMark { t_s, kvmclock_ns: None, cpu, ns, victim: None }).collect(),
            notes: vec![],
        };
        let html = page(&l, &t);
        for id in [steal::ID, stacked::ID, bursts::ID, hw::ID, irq::ID, vcpu::ID, who_time::ID, probes::ID] {
            proptest::prop_assert!(html.contains(&format!("id=\"{id}\"")), "{}", id);
        }
    }
}

/// An attribute's number in one tag.
fn attr(tag: &str, name: &str) -> f64 {
    let at = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
    tag[at..].split('"').next().unwrap().parse().unwrap()
}

#[test]
fn stacked_columns_fill_the_plot_without_notches() {
    // 100 ms windows whose tick counts miss their length by a tick or so.
    let l = load("6.x-bursty-steal");
    let html = page(&l, &Timeline::default());
    let svg = svg_of(section(&html, stacked::ID), "stacked");
    let mut columns: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for tag in svg.split("<rect class=\"seg ").skip(1) {
        let tag = tag.split('>').next().unwrap();
        let x = tag[tag.find(" x=\"").unwrap() + 4..]
            .split('"')
            .next()
            .unwrap();
        columns
            .entry(x.to_string())
            .or_default()
            .push((attr(tag, "y"), attr(tag, "height")));
    }
    assert!(columns.len() > 10, "{} columns", columns.len());
    for (x, mut segs) in columns {
        segs.sort_by(|a, b| a.0.total_cmp(&b.0));
        // From the top of the plot down to the axis, each segment starting
        // where the one above ends.
        assert!((segs[0].0 - svg::TOP).abs() < 1e-6, "column {x}: {segs:?}");
        for w in segs.windows(2) {
            assert!(
                (w[0].0 + w[0].1 - w[1].0).abs() < 0.051,
                "column {x}: {segs:?}"
            );
        }
        let (y, h) = segs[segs.len() - 1];
        assert!(
            (y + h - (svg::TOP + 200.0)).abs() < 0.051,
            "column {x}: {segs:?}"
        );
    }
}

#[test]
fn a_series_read_later_still_has_a_zero_tick() {
    // Interrupts read from +0.5 s on, as a recording's 1 Hz reader does.
    let l = load("6.x-healthy");
    let t = Timeline {
        irq: (0..5)
            .map(|i| IrqWindow {
                start_s: 0.5 + i as f64,
                wall_s: 1.0,
                cpus: vec![CpuIrqRates {
                    cpu: 0,
                    total_per_s: 100.0,
                    sources: vec![],
                }],
            })
            .collect(),
        ..Timeline::default()
    };
    let html = page(&l, &t);
    let axis = section(&html, irq::ID).split("x-axis").nth(1).unwrap();
    assert!(axis.contains(">+0 s<"), "{axis}");
}

/// On a host, "who stole it" comes before the guest-steal plots (it was
/// ~4,800 px down after them); on a guest the steal plots lead.
#[test]
fn who_stole_it_comes_first_on_a_host() {
    let at = |html: &str, id: &str| html.find(&format!("id=\"{id}\"")).unwrap();
    let host = page(&load("host-noisy-neighbor"), &Timeline::default());
    assert!(
        at(&host, who::ID) < at(&host, steal::ID),
        "who-stole after the steal heatmap on a host"
    );
    assert!(at(&host, who::ID) < at(&host, "findings"));
    let guest = page(&load("6.x-bursty-steal"), &Timeline::default());
    assert!(at(&guest, steal::ID) < at(&guest, who::ID));
}

/// A figure that rounds to zero prints as zero: no "-0", "-0.0", "-0.00"
/// on any fixture's page or in its text report.
#[test]
fn no_fixture_prints_a_negative_zero() {
    fn negative_zero(s: &str) -> Option<&str> {
        let word = |i: usize| {
            s[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        s.match_indices("-0")
            .filter(|(i, _)| !word(*i))
            .map(|(i, _)| &s[i..])
            .find(|rest| {
                let tail: String = rest[1..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                !tail.is_empty()
                    && tail.chars().all(|c| c == '0' || c == '.')
                    && !rest[1 + tail.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
            })
    }
    assert!(negative_zero("x -0.00 y").is_some());
    assert!(negative_zero("x -0.05 y").is_none());
    let mut names: Vec<String> = std::fs::read_dir(fixture(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let l = load(&name);
        let html = page(&l, &Timeline::default());
        let text = crate::text::doctor(&l.report, &crate::text::TextOpts::plain());
        for (what, s) in [("page", &html), ("text", &text)] {
            if let Some(at) = negative_zero(s) {
                panic!("{name}: {what} prints {:?}", &at[..at.len().min(40)]);
            }
        }
    }
}

/// A recording's exact steal: a row per CPU with the counts the stored
/// reading holds, a mark per listed episode on its CPU's lane, the largest
/// ten with their victims (escaped), and the route said.
#[test]
fn exact_steal_episodes_are_drawn_with_their_victims() {
    use stealscope_model::exact_steal::{CpuExact, ExactSteal, StoredExactSteal, TaskExact};
    let mut l = load("6.x-healthy");
    let cpu = |cpu, over_1ms| CpuExact {
        cpu,
        busy_ns: 30_000_000,
        idle_ns: 1_000_000,
        episodes: 12,
        over_1ms,
        max_ns: 18_200_000,
        ..Default::default()
    };
    let stored = StoredExactSteal::Measured(ExactSteal {
        span_s: 10.0,
        cpus: vec![cpu(0, 3), cpu(1, 0)],
        ..Default::default()
    });
    l.report.exact_steal = stealscope_analysis::exact_steal::section(Some(&stored));
    let victim = TaskExact {
        pid: 812,
        tid: 812,
        comm: "<pg>".into(),
        thread: None,
        busy_ns: 1,
        episodes: 1,
    };
    let marks: Vec<StealMark> = (0..12u64)
        .map(|i| StealMark {
            t_s: i as f64 * 0.5,
            kvmclock_ns: None,
            cpu: (i % 2) as u32,
            ns: 100_000 * (i + 1),
            victim: (i == 11).then(|| victim.clone()),
        })
        .collect();
    let t = Timeline {
        steal: Some(StealRoute::Exact {
            threshold_ns: 100_000,
            stat_hz: 1.0,
        }),
        steal_episodes: marks,
        ..Default::default()
    };
    let html = page(&l, &t);
    let sec = &html[html.find(r#"id="exact-steal""#).unwrap()..];
    let sec = &sec[..sec.find("</section>").unwrap()];
    assert!(sec.contains("those from 100 µs listed"), "{sec}");
    assert_eq!(sec.matches("<td>3</td>").count(), 1, "cpu0's > 1 ms");
    let svg = &sec[sec.find("exact-steal-timeline").unwrap()..];
    let svg = &svg[..svg.find("</svg>").unwrap()];
    assert_eq!(svg.matches("<title>+").count(), 12, "a mark per episode");
    assert_eq!(svg.matches("#c0392b").count(), 1, "one busy episode");
    let table = &sec[sec.find("exact-largest").unwrap()..];
    assert_eq!(
        table.matches("<tr>").count(),
        11,
        "a header and the largest ten"
    );
    assert!(table.contains("+5.500 s") && table.contains("&lt;pg&gt; (pid 812)"));
    assert!(!html.contains("<pg>"));
}
