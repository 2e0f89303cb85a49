//! Runs the guest steal collector for a while and prints, every interval,
//! each CPU's steal in the interval beside /proc/stat's, the tasks that
//! lost the most, and the largest episodes (a manual check and the
//! benchmark's holder):
//!
//!   guest_steal [SECONDS] [INTERVAL_SECONDS] [THRESHOLD_NS]
//!
//! With `STEAL_EPISODES=FILE` every episode drained is also written to FILE
//! as one JSON object per line (scripts/bench-steal-probe.sh joins them
//! with `probe preempt`'s gaps).

use stealscope_sched::{GuestSteal, StealOptions};
use stealscope_testkit::proc_stat::{steal_now, unit_ns};
use stealscope_who::{GuestStealSample, StealVictim};

/// Each CPU's steal so far in /proc/stat, in its units (USER_HZ).
type Steal = std::collections::BTreeMap<u32, u64>;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn print_interval(d: &GuestStealSample, stat: &Steal, stat0: &Steal, unit: u64) {
    for c in &d.cpus {
        let (Some(b), Some(a)) = (stat.get(&c.cpu), stat0.get(&c.cpu)) else {
            continue;
        };
        let by_stat = (b - a) * unit;
        println!(
            "cpu{}: {:.3} ms (busy {:.3}, idle {:.3}) in {} episodes, p99 {:.3} ms, max {:.3} ms; /proc/stat {:.0} ms",
            c.cpu,
            ms(c.total_ns()),
            ms(c.busy_ns),
            ms(c.idle_ns),
            c.episodes.count,
            ms(c.episodes.quantile(0.99).unwrap_or(0)),
            ms(c.episodes.max_ns),
            ms(by_stat)
        );
    }
    for t in d.tasks.iter().take(3) {
        println!(
            "  {} (pid {}, tid {}): {:.3} ms in {} episodes",
            t.task.comm,
            t.task.tgid,
            t.task.tid,
            ms(t.busy_ns),
            t.episodes
        );
    }
    for e in d.largest_episodes(3) {
        let who = match &e.victim {
            StealVictim::Idle => "idle".to_string(),
            StealVictim::Task(t) => format!("{} ({})", t.comm, t.tid),
        };
        println!(
            "  episode {:.3} ms on cpu{} at {} ns: {who}",
            ms(e.ns),
            e.cpu,
            e.monotonic_ns
        );
    }
}

/// Every episode, once, as JSON lines (the sample's list is the recent
/// ones: each read repeats what the last one already had).
struct EpisodeFile {
    out: std::io::BufWriter<std::fs::File>,
    next_seq: u64,
}

impl EpisodeFile {
    fn from_env() -> Option<EpisodeFile> {
        let path = std::env::var_os("STEAL_EPISODES")?;
        let file = std::fs::File::create(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", std::path::Path::new(&path).display()));
        Some(EpisodeFile {
            out: std::io::BufWriter::new(file),
            next_seq: 0,
        })
    }

    fn write(&mut self, s: &GuestStealSample) {
        use std::io::Write;
        let from = self.next_seq;
        for e in s.episodes.iter().filter(|e| e.seq >= from) {
            let line = serde_json::to_string(e).expect("an episode serializes");
            writeln!(self.out, "{line}").expect("writing the episode file");
            self.next_seq = e.seq + 1;
        }
        self.out.flush().expect("writing the episode file");
    }
}

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let secs = args.first().copied().unwrap_or(10.0);
    let every = args.get(1).copied().unwrap_or(1.0).max(0.1);
    let opts = StealOptions {
        threshold_ns: args
            .get(2)
            .map_or(StealOptions::default().threshold_ns, |&t| t as u64),
    };
    let mut g = match GuestSteal::start(opts) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    // SAFETY: sysconf has no preconditions.
    let unit = unit_ns();
    println!(
        "started ({}, tick: {}{})",
        g.rq_path(),
        g.tick_hook().as_str(),
        g.fentry_refused()
            .map(|w| format!("; fentry: {w}"))
            .unwrap_or_default()
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    let (mut prev, mut stat0) = (g.read(), steal_now());
    let mut log = EpisodeFile::from_env();
    while std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
        let (now, stat) = (g.read(), steal_now());
        if let (Some(log), Ok(s)) = (log.as_mut(), &now) {
            log.write(s);
        }
        match (&prev, &now) {
            (Ok(a), Ok(b)) => print_interval(&b.since(a), &stat, &stat0, unit),
            (_, Err(e)) | (Err(e), _) => eprintln!("{e}"),
        }
        (prev, stat0) = (now, stat);
    }
}
