//! Issue 4 benchmark: size and render time of the `report` page for long,
//! high-rate series (synthetic windows in a real fixture's model), next to
//! a real 5 s snapshot. The page must stay bounded however long the series
//! (bins.rs: at most 200 columns), and rendering must be linear in it.
//!
//! Prints a Markdown section (scripts/bench.sh puts it in BENCHMARKS.md).

use std::time::Instant;
use stealscope_analysis::{build, ReportInput};
use stealscope_model::hardware::CounterModel;
use stealscope_model::hw::{CpuHwWindow, HwWindow};
use stealscope_model::timeline::{IrqWindow, ProbeWindow, Timeline};
use stealscope_model::{CpuInterval, IntervalDelta, MachineModel, ModeSecs};
use stealscope_output::html::{render, HtmlInput};
use stealscope_readers::perf::Counter;
use stealscope_readers::snapshot;

struct Case {
    name: &'static str,
    hz: f64,
    secs: f64,
    cpus: u32,
    counters: bool,
}

/// CPU time of this thread, seconds (wall time on a shared machine says
/// more about the other load than about the renderer).
fn cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// A deterministic pseudo-random stream (xorshift), so runs compare.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Busy 20-95 %, steal mostly under 2 % with a burst of 60 % one window in
/// 500.
fn windows(c: &Case, rng: &mut Rng) -> Vec<(f64, IntervalDelta)> {
    let wall = 1.0 / c.hz;
    let n = (c.secs * c.hz) as usize;
    (0..n)
        .map(|i| {
            let cpus = (0..c.cpus)
                .map(|cpu| {
                    let util = 0.2 + 0.75 * rng.next();
                    let burst = rng.next() < 0.002;
                    let steal = if burst { 0.6 } else { 0.02 * rng.next() }.min(1.0 - util);
                    CpuInterval {
                        cpu,
                        secs: ModeSecs {
                            user: util * wall,
                            steal: steal * wall,
                            idle: (1.0 - util - steal) * wall,
                            ..Default::default()
                        },
                        wall_s: wall,
                        has_steal: true,
                    }
                })
                .collect();
            (
                i as f64 * wall,
                IntervalDelta {
                    wall_s: wall,
                    cpus,
                    anomalies: vec![],
                },
            )
        })
        .collect()
}

fn counters(w: &[(f64, IntervalDelta)], rng: &mut Rng) -> Vec<HwWindow> {
    w.iter()
        .map(|(start, d)| HwWindow {
            start_s: *start,
            wall_s: d.wall_s,
            cpus: d
                .cpus
                .iter()
                .map(|c| {
                    let cycles = 2e9 * c.wall_s;
                    CpuHwWindow {
                        cpu: c.cpu,
                        cycles: Some(cycles),
                        instructions: Some(cycles * (0.5 + rng.next())),
                        cache_references: Some(1e6 * c.wall_s),
                        cache_misses: Some(1e5 * c.wall_s * rng.next()),
                        hw_running_share: Some(1.0),
                        tsc_mhz: None,
                        avg_mhz: None,
                        busy_mhz: None,
                        busy_pct: None,
                        smi: None,
                    }
                })
                .collect(),
        })
        .collect()
}

/// Interrupts and the wakeup probe once a second, as a recording has them.
fn timeline(c: &Case, base: &MachineModel) -> Timeline {
    let mut t = Timeline::default();
    for s in 0..c.secs as u32 {
        t.irq.push(IrqWindow {
            start_s: s as f64,
            wall_s: 1.0,
            cpus: base.irq.clone(),
        });
        t.probes.push(ProbeWindow {
            start_s: s as f64,
            wall_s: 1.0,
            probe: "wakeup".into(),
            cpu: None,
            samples: 1000,
            p50_us: 40.0,
            p99_us: 120.0,
            max_us: 900.0,
            buckets: vec![(32.0, 300), (64.0, 690), (128.0, 9), (1024.0, 1)],
        });
    }
    t
}

fn main() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/snapshots/6.x-bursty-steal/snapshot.tar.gz");
    let snap = snapshot::open(&fixture).unwrap();
    let base = MachineModel::build(&snap).unwrap();
    let cases = [
        Case {
            name: "1 h at 1000 Hz, 2 CPUs, counters every window",
            hz: 1000.0,
            secs: 3600.0,
            cpus: 2,
            counters: true,
        },
        Case {
            name: "1 h at 100 Hz, 8 CPUs",
            hz: 100.0,
            secs: 3600.0,
            cpus: 8,
            counters: false,
        },
        Case {
            name: "1 h at 10 Hz, 64 CPUs",
            hz: 10.0,
            secs: 3600.0,
            cpus: 64,
            counters: false,
        },
    ];
    println!("## Issue 4: report page size and render time\n");
    println!(
        "Command: `cargo bench -p stealscope-output --bench html_report`. Synthetic /proc/stat windows (busy 20-95 %, \
         steal under 2 % with a 60 % burst in one window of 500) in the model of the `6.x-bursty-steal` fixture, \
         plus one interrupt and one wakeup-probe window a second; render = `html::render` (every plot, the findings, \
         the notes) after the model is built. A reference tool drawing sub-second series is not at hand: \
         `sadf -g` draws sar files, whose interval is at least 1 s.\n"
    );
    println!("| series | windows x CPUs | page | render CPU | render wall |");
    println!("|---|---|---|---|---|");
    let row = |name: &str, cells: usize, model: &MachineModel, t: &Timeline| {
        let report = build(ReportInput {
            model,
            interval_s: snap.meta.interval_s,
            hostname: snap.meta.hostname.clone(),
            kernel: snap.meta.kernel.clone(),
        });
        let (start, cpu0) = (Instant::now(), cpu_s());
        let page = render(&HtmlInput {
            report: &report,
            model,
            timeline: t,
            meta: &snap.meta,
            source: "bench",
        });
        let (wall, cpu) = (start.elapsed().as_secs_f64(), cpu_s() - cpu0);
        println!(
            "| {name} | {cells} | {:.0} KiB | {:.0} ms | {:.0} ms |",
            page.len() as f64 / 1024.0,
            cpu * 1e3,
            wall * 1e3
        );
    };
    row(
        "the fixture: 5 s at 10 Hz, 4 CPUs",
        base.windows.len() * base.interval.cpus.len(),
        &base,
        &Timeline::default(),
    );
    let mut rng = Rng(0x5eed);
    for c in &cases {
        let mut m = base.clone();
        m.windows = windows(c, &mut rng);
        m.hardware.counters = c.counters.then(|| CounterModel {
            opened: vec![
                Counter::Cycles,
                Counter::Instructions,
                Counter::CacheReferences,
                Counter::CacheMisses,
            ],
            missing: vec![],
            windows: counters(&m.windows, &mut rng),
        });
        let t = timeline(c, &base);
        row(c.name, m.windows.len() * c.cpus as usize, &m, &t);
    }
    println!(
        "\nThe page stays the same size however long the series: time plots have at most 200 columns \
         (a 1 h series is binned to 18 s columns, each cell the time-weighted mean of its windows); \
         the burst histogram counts every window, so bursts survive the binning."
    );
}
