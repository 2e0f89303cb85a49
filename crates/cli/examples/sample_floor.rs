//! The least any 100 Hz /proc/stat sampler can cost on this machine: a
//! loop of absolute-deadline sleeps and one pread of a kept-open /proc/stat,
//! nothing else. scripts/bench-record.sh runs it beside `record` as the
//! floor its overhead is judged against.
//!
//!   cargo run --release --example sample_floor -- SECONDS [HZ]
//!
//! Prints the CPU it used (utime+stime, schedstat) as a share of one CPU.

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60.0);
    let hz: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100.0);
    let f = std::fs::File::open("/proc/stat").expect("/proc/stat");
    let mut buf = vec![0u8; 64 * 1024];
    let period = Duration::from_secs_f64(1.0 / hz);
    let start = Instant::now();
    let mut next = start;
    let mut n = 0u64;
    while next < start + Duration::from_secs_f64(secs) {
        let _ = f.read_at(&mut buf, 0);
        n += 1;
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
    }
    let cpu_ns: f64 = std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{n} reads in {wall:.1} s: {:.4} CPU s, {:.3} % of one CPU",
        cpu_ns / 1e9,
        100.0 * cpu_ns / 1e9 / wall
    );
}
