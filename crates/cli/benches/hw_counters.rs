//! Issue 9 benchmark, side by side in one run: the cost of the per-CPU
//! hardware counter groups per window (`HwSampler::sample`: one group read
//! per opened group per CPU) and of opening them (including every failed
//! perf_event_open where the machine has no PMU), against raw syscalls:
//! read(2) of a group opened by hand, and a bare perf_event_open of cycles.
//!
//! Prints a Markdown section (scripts/bench.sh puts it in BENCHMARKS.md).

#[path = "../tests/common/perf_raw.rs"]
mod perf_raw;

use perf_raw::{attr, open as perf_open};
use std::time::Instant;
use stealscope_engine::hw_sampler::HwSampler;
use stealscope_readers::{cpu_topology, RootFs};

const BLOCK: usize = 200;
const BLOCKS: usize = 25;
const OPENS: usize = 40;

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn msr_type() -> Option<u32> {
    std::fs::read_to_string("/sys/bus/event_source/devices/msr/type")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn main() {
    let cpus = cpu_topology::read(&RootFs::live())
        .ok()
        .and_then(|c| c.online)
        .unwrap_or_else(|| vec![0]);
    let n = cpus.len() as f64;

    // Open (and close) the groups: here this includes the failed opens.
    let mut open_us = Vec::new();
    let mut raw_open_us = Vec::new();
    let mut opened = Vec::new();
    let mut missing = 0;
    for _ in 0..OPENS {
        let t = Instant::now();
        let s = HwSampler::open(&RootFs::live(), &cpus);
        open_us.push(t.elapsed().as_nanos() as f64 / 1e3);
        opened = s
            .counters()
            .opened()
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>();
        missing = s.counters().missing().len();
        drop(s);
        let cycles = attr(0, 0);
        let t = Instant::now();
        for &c in &cpus {
            let fd = perf_open(&cycles, c as i32);
            if fd >= 0 {
                unsafe { libc::close(fd as i32) };
            }
        }
        raw_open_us.push(t.elapsed().as_nanos() as f64 / 1e3);
    }

    // Per-window reads, alternating with raw read(2) of a hand-opened group
    // (the msr tsc event, or cycles where there is a PMU) on every CPU.
    let mut sampler = HwSampler::open(&RootFs::live(), &cpus);
    let reference = match msr_type() {
        Some(t) => attr(t, 0),
        None => attr(0, 0),
    };
    let raw_fds: Vec<i32> = cpus
        .iter()
        .map(|&c| perf_open(&reference, c as i32) as i32)
        .filter(|fd| *fd >= 0)
        .collect();
    let mut buf = [0u8; 256];
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    let mut sink = 0usize;
    for _ in 0..BLOCKS {
        for _ in 0..BLOCK {
            let t = Instant::now();
            sink += sampler.sample().cpus.len();
            ours.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
        for _ in 0..BLOCK {
            let t = Instant::now();
            for fd in &raw_fds {
                sink += unsafe { libc::read(*fd, buf.as_mut_ptr().cast(), buf.len()) } as usize;
            }
            raw.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
    }
    std::hint::black_box(sink);
    for fd in raw_fds {
        unsafe { libc::close(fd) };
    }
    let groups_per_cpu = sampler.sample().cpus.first().map_or(0, |c| c.groups.len());

    let (om, op) = (percentile(&mut ours, 0.5), percentile(&mut ours, 0.9));
    let (rm, rp) = (percentile(&mut raw, 0.5), percentile(&mut raw, 0.9));
    let (oo, ro) = (
        percentile(&mut open_us, 0.5),
        percentile(&mut raw_open_us, 0.5),
    );
    println!("## Issue 9: hardware counters per CPU per window\n");
    println!(
        "Command: `cargo bench --bench hw_counters` ({} CPUs; {} reads each, alternating blocks of {BLOCK}; {OPENS} opens).\n",
        cpus.len(),
        BLOCK * BLOCKS
    );
    println!(
        "Counters opened here: {} ({} missing with a reason; {} group(s) per CPU).",
        if opened.is_empty() {
            "none".to_string()
        } else {
            opened.join(", ")
        },
        missing,
        groups_per_cpu
    );
    println!("One window = `HwSampler::sample()`: one read(2) of each CPU's group(s) with time_enabled/running, parsed into");
    println!(
        "counts. Reference = raw read(2) of a hand-opened `{}` group fd per CPU.\n",
        if msr_type().is_some() {
            "msr/tsc/"
        } else {
            "cycles"
        }
    );
    println!("| | median µs | p90 µs | per CPU (median) µs | share of a 100 ms window per CPU |");
    println!("|---|---|---|---|---|");
    println!(
        "| raw read(2) (reference) | {rm:.1} | {rp:.1} | {:.1} | {:.4}% |",
        rm / n,
        rm / n / 1e3
    );
    println!(
        "| stealscope sample | {om:.1} | {op:.1} | {:.1} | {:.4}% |",
        om / n,
        om / n / 1e3
    );
    println!(
        "| **ratio** | **{:.2}x** | {:.2}x | | |\n",
        om / rm,
        op / rp
    );
    println!(
        "Opening the groups once per run (all CPUs{}): median **{oo:.0} µs** ({:.0} µs per CPU); a bare",
        if missing > 0 {
            ", including the failed opens of the missing counters"
        } else {
            ""
        },
        oo / n
    );
    println!("perf_event_open(cycles)+close per CPU (reference): median {ro:.0} µs for all CPUs.");
    println!("Reading a per-CPU event from another CPU costs an IPI to that CPU, which dominates both rows;");
    println!("a counter that failed to open is tried once per run (inside the open figure) and costs nothing per window.\n");
}
