//! Issue 2 benchmarks, side by side in one run:
//! 1. cost of one sample (read + parse + delta of /proc/stat and
//!    /proc/interrupts) against a raw pread of the same two files, in
//!    alternating blocks so both see the same machine state;
//! 2. `doctor` start-up to first sample: exec of the real binary to the
//!    CLOCK_MONOTONIC time stamp of the first sample it records.
//!
//! Prints a Markdown section (scripts/bench.sh puts it in BENCHMARKS.md).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;
use stealscope_engine::capture::monotonic_ns;
use stealscope_model::{delta, irq_rates};
use stealscope_readers::pread::PreadFile;
use stealscope_readers::{interrupts, stat};

const BLOCK: usize = 200;
const BLOCKS: usize = 25;

fn raw_pread(files: &[std::fs::File; 2], buf: &mut [u8]) -> usize {
    let mut total = 0;
    for f in files {
        let mut off = 0;
        loop {
            let n = f.read_at(&mut buf[off..], off as u64).expect("pread");
            if n == 0 {
                break;
            }
            off += n;
        }
        total += off;
    }
    total
}

struct Ours {
    stat: PreadFile,
    irq: PreadFile,
    prev_stat: stat::ProcStat,
    cur_stat: stat::ProcStat,
    prev_irq: interrupts::Interrupts,
    last: Instant,
}

impl Ours {
    fn sample(&mut self) -> usize {
        let now = Instant::now();
        let wall = (now - self.last).as_secs_f64().max(1e-9);
        self.last = now;
        let text = self.stat.read_text().expect("read stat");
        stat::parse_into(text, stat::PATH, false, &mut self.cur_stat).expect("parse stat");
        let d = delta(&self.prev_stat, &self.cur_stat, wall, 100.0);
        std::mem::swap(&mut self.prev_stat, &mut self.cur_stat);
        let text = self.irq.read_text().expect("read interrupts");
        let irq = interrupts::parse(text, interrupts::PATH).expect("parse interrupts");
        let r = irq_rates::rates(&self.prev_irq, &irq, wall);
        self.prev_irq = irq;
        d.cpus.len() + r.len()
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let root = Path::new("/");
    let files = [
        std::fs::File::open("/proc/stat").unwrap(),
        std::fs::File::open("/proc/interrupts").unwrap(),
    ];
    let mut buf = vec![0u8; 1 << 20];
    let mut ours = Ours {
        stat: PreadFile::open(root, stat::PATH).unwrap(),
        irq: PreadFile::open(root, interrupts::PATH).unwrap(),
        prev_stat: stat::parse(&std::fs::read_to_string("/proc/stat").unwrap(), stat::PATH)
            .unwrap(),
        cur_stat: stat::ProcStat::default(),
        prev_irq: interrupts::parse(
            &std::fs::read_to_string("/proc/interrupts").unwrap(),
            interrupts::PATH,
        )
        .unwrap(),
        last: Instant::now(),
    };
    let (mut raw_ns, mut our_ns) = (Vec::new(), Vec::new());
    let mut sink = 0usize;
    for _ in 0..BLOCKS {
        for _ in 0..BLOCK {
            let t = Instant::now();
            sink += raw_pread(&files, &mut buf);
            raw_ns.push(t.elapsed().as_nanos() as f64);
        }
        for _ in 0..BLOCK {
            let t = Instant::now();
            sink += ours.sample();
            our_ns.push(t.elapsed().as_nanos() as f64);
        }
    }
    std::hint::black_box(sink);
    let raw_med = percentile(&mut raw_ns, 0.5) / 1000.0;
    let our_med = percentile(&mut our_ns, 0.5) / 1000.0;
    let raw_p90 = percentile(&mut raw_ns, 0.9) / 1000.0;
    let our_p90 = percentile(&mut our_ns, 0.9) / 1000.0;
    let raw_mean = raw_ns.iter().sum::<f64>() / raw_ns.len() as f64 / 1000.0;
    let our_mean = our_ns.iter().sum::<f64>() / our_ns.len() as f64 / 1000.0;

    // Start-up to first sample, through the real binary.
    let exe = env!("CARGO_BIN_EXE_stealscope");
    let tmp = std::env::temp_dir().join(format!("stealscope-bench-{}", std::process::id()));
    let mut startup = Vec::new();
    for i in 0..20 {
        let snap = tmp.join(format!("s{i}"));
        let t_spawn = monotonic_ns();
        let st = std::process::Command::new(exe)
            .args(["doctor", "--json", "--interval", "200ms", "--save-snapshot"])
            .arg(&snap)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        let samples = std::fs::read_to_string(snap.join("samples.jsonl")).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(samples.lines().next().unwrap()).unwrap();
        startup.push((first["t_ns"].as_u64().unwrap() - t_spawn) as f64 / 1e6);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let st_med = percentile(&mut startup, 0.5);
    let st_max = percentile(&mut startup, 1.0);

    println!("## Issue 2: cost of one sample, and doctor start-up\n");
    println!("Command: `cargo bench --bench sample_cost` ({} samples each, alternating blocks of {BLOCK}).\n", BLOCK * BLOCKS);
    println!("One sample = read + parse + delta of `/proc/stat` and `/proc/interrupts` (files kept open, pread).");
    println!("Reference = raw `pread` of the same two files into a buffer, no parsing.\n");
    println!("| | median µs | p90 µs | mean µs |");
    println!("|---|---|---|---|");
    println!("| raw pread (reference) | {raw_med:.1} | {raw_p90:.1} | {raw_mean:.1} |");
    println!("| stealscope sample | {our_med:.1} | {our_p90:.1} | {our_mean:.1} |");
    println!(
        "| **ratio** | **{:.2}x** | {:.2}x | {:.2}x |\n",
        our_med / raw_med,
        our_p90 / raw_p90,
        our_mean / raw_mean
    );
    println!(
        "Target: at most 2x raw pread. Result: {}.\n",
        if our_med / raw_med <= 2.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    println!("`doctor` start-up to first sample (exec of the release binary to the CLOCK_MONOTONIC stamp of");
    println!("its first recorded sample, 20 runs): median **{st_med:.1} ms**, max {st_max:.1} ms. Target < 50 ms: {}.\n", if st_max < 50.0 { "met" } else { "NOT met" });
}
