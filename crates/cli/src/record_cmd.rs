//! `stealscope record`: streams this machine's per-CPU time series to a
//! recording (docs/recording-format.md) until the duration is over or
//! Ctrl-C / SIGTERM, which finish the batch and leave a complete file.

use crate::parse::parse_duration;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use stealscope_engine::record::{record_file, RecordOptions};
use stealscope_engine::record_steal::StealWanted;

type Error = Box<dyn std::error::Error>;

/// /proc/interrupts costs ~8x a /proc/stat read (~80 µs here): once a
/// second keeps it under 0.01 % of a CPU (BENCHMARKS.md, issue 4).
pub const DEFAULT_IRQ_RATE: f64 = 1.0;
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordProbe {
    /// Timer wake-up latency (as `probe wakeup`), one window per CPU per second
    Wakeup,
}

/// Where steal comes from.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StealArg {
    /// The guest steal collector (BPF: exact, event-driven) when it loads, else /proc/stat
    Auto,
    /// /proc/stat's steal column only, polled (100 Hz unless --rate)
    ProcStat,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// The recording to write (an existing file is not overwritten)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// /proc/stat samples per second, 1-1000; default: 1 when exact steal
    /// runs (steal needs no polling then), else 100
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Where steal comes from
    #[arg(long, value_enum, default_value_t = StealArg::Auto)]
    pub steal: StealArg,
    /// Exact steal episodes at or over this are listed one by one, with
    /// their time and victim (e.g. 100us, 1ms, 0 = every one); all count
    /// in the totals
    #[arg(long, default_value = "100us", value_parser = parse_threshold)]
    pub steal_threshold: u64,
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
    if !(1.0..=1000.0).contains(&v) {
        return Err("rate must be between 1 and 1000 Hz".into());
    }
    Ok(v)
}

/// A duration in ns: `0`, or a number with ns, us (µs) or ms.
fn parse_threshold(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("{s:?} is not a threshold like 100us, 1ms or 0");
    let (num, unit) = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6)]
        .iter()
        .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n, *m)))
        .unwrap_or((t, if t == "0" { 1.0 } else { f64::NAN }));
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let ns = v * unit;
    if !(ns.is_finite() && (0.0..=1e9).contains(&ns)) {
        return Err(bad());
    }
    Ok(ns.round() as u64)
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
    if let Some(rate) = a.rate.filter(|r| a.irq_rate > *r) {
        return Err(format!(
            "--irq-rate {} is above --rate {rate}: interrupts are read at most with every sample",
            a.irq_rate
        )
        .into());
    }
    let opts = RecordOptions {
        root: a.root.clone(),
        rate_hz: a.rate,
        steal: match a.steal {
            StealArg::Auto => StealWanted::Auto,
            StealArg::ProcStat => StealWanted::ProcStat,
        },
        steal_threshold_ns: a.steal_threshold,
        irq_rate_hz: a.irq_rate,
        host_scan: Duration::from_secs(1),
        checkpoint: a.checkpoint,
        duration: a.duration,
        probes: a.probe.iter().map(|_| "wakeup".to_string()).collect(),
    };
    let sum = record_file(&opts, &a.output)?;
    eprintln!("steal: {}", sum.steal);
    eprintln!(
        "wrote {}: {} samples of {} CPUs in {:.1} s, {} steal episodes, {} checkpoints, {} bytes (ended by {})",
        a.output.display(),
        sum.stat_samples,
        sum.cpus,
        sum.seconds,
        sum.steal_episodes,
        sum.checkpoints,
        sum.bytes,
        sum.reason
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_threshold;

    #[test]
    fn thresholds_in_ns_us_ms_or_zero() {
        assert_eq!(parse_threshold("100us"), Ok(100_000));
        assert_eq!(parse_threshold("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_threshold("250ns"), Ok(250));
        assert_eq!(parse_threshold("0"), Ok(0));
        assert!(parse_threshold("100").is_err(), "a unit is needed");
        assert!(parse_threshold("-1us").is_err());
    }
}
