//! Runs the tracefs route for a while, as the overhead benchmark needs it
//! (scripts/bench-sched-tracefs.sh): every second it watches the threads
//! whose comm starts with the given prefix and reads the collector.
//!
//!   tracefs_hold SECONDS COMM_PREFIX [STOP_FILE]
//!
//! Stops early (removing its tracefs instance) once STOP_FILE exists.
//! Prints a line after each read: events, lost events, watched threads,
//! wait charged (ns).

use stealscope_sched::{Collector, Preference};

fn tids_with_comm(prefix: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.starts_with(prefix) {
                out.extend(t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()));
            }
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(secs), Some(prefix)) = (args.get(1).and_then(|s| s.parse::<u64>().ok()), args.get(2))
    else {
        eprintln!("usage: tracefs_hold SECONDS COMM_PREFIX");
        std::process::exit(2);
    };
    let mut col = match Collector::start(Preference::Tracefs) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tracefs_hold: {e}");
            std::process::exit(1);
        }
    };
    let stop = args.get(3).map(std::path::PathBuf::from);
    for _ in 0..secs {
        for _ in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if stop.as_ref().is_some_and(|p| p.exists()) {
                return;
            }
        }
        let tids = tids_with_comm(prefix);
        if let Err(e) = col.watch(&tids) {
            eprintln!("tracefs_hold: {e}");
        }
        match col.read() {
            Ok(s) => {
                let wait: u64 = s.threads.values().map(|w| w.wait_ns()).sum();
                println!(
                    "{} {} {} {}",
                    s.stats.events,
                    s.stats.lost_events,
                    s.threads.len(),
                    wait
                );
            }
            Err(e) => eprintln!("tracefs_hold: {e}"),
        }
    }
}
