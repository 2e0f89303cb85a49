//! `stealscope record`: streams this machine's per-CPU time series to a
//! recording (docs/recording-format.md) until the duration is over or
//! Ctrl-C / SIGTERM, which finish the batch and leave a complete file.

use crate::parse::parse_duration;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use stealscope_engine::record::{record_file, RecordOptions};

type Error = Box<dyn std::error::Error>;

/// /proc/interrupts costs ~8x a /proc/stat read (~80 µs here): once a
/// second keeps it under 0.01 % of a CPU (BENCHMARKS.md, issue 4).
pub const DEFAULT_IRQ_RATE: f64 = 1.0;
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordProbe {
    /// Timer wake-up latency (as `probe wakeup`), one window per CPU per second
    Wakeup,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// The recording to write (an existing file is not overwritten)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// /proc/stat samples per second, 10-1000
    #[arg(long, default_value_t = 100.0, value_parser = parse_rate)]
    pub rate: f64,
    /// How long to record (e.g. 10m, 2h); default: until Ctrl-C or SIGTERM
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// /proc/interrupts samples per second (0 = none), at most --rate
    #[arg(long, default_value_t = DEFAULT_IRQ_RATE, value_parser = parse_irq_rate)]
    pub irq_rate: f64,
    /// Also run a probe, one latency window per CPU per second
    #[arg(long, value_enum)]
    pub probe: Option<RecordProbe>,
    /// Time between checkpoints (every file doctor reads; a cut-off file
    /// reads up to its last one)
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub checkpoint: Duration,
    /// Read /proc and /sys under this directory instead of /
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(10.0..=1000.0).contains(&v) {
        return Err("rate must be between 10 and 1000 Hz".into());
    }
    Ok(v)
}

fn parse_irq_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(0.0..=1000.0).contains(&v) {
        return Err("irq rate must be between 0 and 1000 Hz".into());
    }
    Ok(v)
}

pub fn run(a: &RecordArgs) -> Result<(), Error> {
    if !a.root.join("proc").is_dir() {
        return Err(format!("{}: no proc/ under this root", a.root.display()).into());
    }
    if a.irq_rate > a.rate {
        return Err(format!(
            "--irq-rate {} is above --rate {}: interrupts are read at most with every sample",
            a.irq_rate, a.rate
        )
        .into());
    }
    let opts = RecordOptions {
        root: a.root.clone(),
        rate_hz: a.rate,
        irq_rate_hz: a.irq_rate,
        host_scan: Duration::from_secs(1),
        checkpoint: a.checkpoint,
        duration: a.duration,
        probes: a.probe.iter().map(|_| "wakeup".to_string()).collect(),
    };
    let sum = record_file(&opts, &a.output)?;
    eprintln!(
        "wrote {}: {} samples of {} CPUs in {:.1} s, {} checkpoints, {} bytes (ended by {})",
        a.output.display(),
        sum.stat_samples,
        sum.cpus,
        sum.seconds,
        sum.checkpoints,
        sum.bytes,
        sum.reason
    );
    Ok(())
}
