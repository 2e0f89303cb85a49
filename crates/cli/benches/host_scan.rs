//! Issue 5 benchmark: cost of one host scan (find every VM, read every
//! thread's name, run/wait time and affinity) with a fake VMM process of
//! 1,000 real threads named like QEMU vCPUs, against a plain loop that
//! reads the same threads' schedstat files (the least any tool must do).
//! Prints a Markdown section (scripts/bench.sh puts it in BENCHMARKS.md).

use std::time::Instant;
use stealscope_engine::host::HostScanner;
use stealscope_model::host::collect_host;
use stealscope_readers::RootFs;

const THREADS: usize = 1000;
const RUNS: usize = 30;

/// Child mode: become "qemu-system-x86" with 1,000 sleeping vCPU-named threads.
fn child() {
    nix::sys::prctl::set_name(c"qemu-system-x86").unwrap();
    let mut handles = Vec::new();
    for i in 0..THREADS {
        let name = format!("CPU {i}/KVM");
        handles.push(
            std::thread::Builder::new()
                .name(name)
                .spawn(std::thread::park)
                .unwrap(),
        );
    }
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line); // exit when the parent closes stdin
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    if std::env::var_os("STEALSCOPE_BENCH_CHILD").is_some() {
        return child();
    }
    use std::io::BufRead;
    let mut c = std::process::Command::new(std::env::current_exe().unwrap())
        .env("STEALSCOPE_BENCH_CHILD", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let pid = c.id();
    let src = RootFs::live();
    let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let (mut ours, mut raw, mut periodic) = (Vec::new(), Vec::new(), Vec::new());
    let mut scanner = HostScanner::discover(std::path::Path::new("/")).unwrap();
    let mut samples = Vec::new();
    let mut found = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let h = collect_host(&src, stealscope_model::observation::Side::End).unwrap();
        ours.push(t.elapsed().as_secs_f64() * 1000.0);
        found = h
            .vms
            .iter()
            .find(|v| v.pid == pid)
            .map(|v| v.vcpus.len())
            .unwrap_or(0);
        let t = Instant::now();
        let mut sum = 0u64;
        for tid in &tids {
            let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
                .unwrap_or_default();
            sum += s.len() as u64;
        }
        std::hint::black_box(sum);
        raw.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        scanner.scan(&mut samples);
        periodic.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let scanned = samples.iter().filter(|s| s.pid == pid).count();
    drop(c.stdin.take());
    let _ = c.wait();
    assert_eq!(found, THREADS, "all vCPU threads found");
    let (om, op) = (percentile(&mut ours, 0.5), percentile(&mut ours, 0.9));
    let (rm, rp) = (percentile(&mut raw, 0.5), percentile(&mut raw, 0.9));
    let (pm, pp) = (
        percentile(&mut periodic, 0.5),
        percentile(&mut periodic, 0.9),
    );
    println!("## Issue 5: host scan of 1,000 threads\n");
    println!("Command: `cargo bench --bench host_scan` ({RUNS} runs each, alternating). A child process named");
    println!("`qemu-system-x86` with {THREADS} real threads named `CPU n/KVM`; the scan finds every VM on the machine");
    println!(
        "and reads each thread's comm, schedstat and status (name, run/wait time, affinity).\n"
    );
    println!("| | median ms | p90 ms |");
    println!("|---|---|---|");
    println!("| stealscope periodic scan (`HostScanner::scan`: pread of kept-open schedstat, {scanned} threads) | {pm:.2} | {pp:.2} |");
    println!("| stealscope discovery (`collect_host`: whole machine, names, affinity, {found} vCPUs found) | {om:.2} | {op:.2} |");
    println!(
        "| reference: open+read+close the {} schedstat files | {rm:.2} | {rp:.2} |\n",
        tids.len()
    );
    println!(
        "Target: a scan of 1,000 threads under 10 ms. Periodic scan: {}. Discovery runs once per",
        if pm < 10.0 { "met" } else { "NOT met" }
    );
    println!("VM (and when its thread list changes), not per scan; one-shot `doctor`/`host` runs it at both ends.\n");
}
